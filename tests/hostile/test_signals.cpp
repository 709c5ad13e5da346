// Signals: SIGTERM / SIGINT stop a run within 5 s (nothing new starts, the requests in flight get
// 2 s, then are cancelled), a second signal exits at once; either way the rerun gives exactly one
// record per input.
#include <gtest/gtest.h>

#include <map>

#include "tests/hostile/hostile_support.hpp"

namespace {

namespace fs = std::filesystem;
using namespace quarry::test_run;
using namespace quarry::test_hostile;

/// Model documents (slow) and e-invoices (fast) in one folder.
std::vector<fs::path> mixed_inputs(const fs::path& in, int texts, int xmls) {
  auto inputs = make_copies(in, static_cast<std::size_t>(xmls));
  for (int i = 0; i < texts; ++i) {
    const auto p = in / ("text-" + std::to_string(i) + ".txt");
    fs::copy_file(k_samples / (i % 2 ? "en-txt-1.txt" : "de-txt-1.txt"), p);
    inputs.push_back(p);
  }
  return inputs;
}

TEST(Signals, SigtermStopsWithinFiveSecondsAndTheRerunResumes) {
  Scratch s("sigterm");
  const auto inputs = mixed_inputs(s.dir / "in", 8, 20);
  const auto out = s.dir / "out";
  const auto args = run_args({s.dir / "in"}, out, {"--max-inflight", "2"});
  const pid_t pid = spawn_quarry(args, s.dir / "log");
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(wait_for_lines(pid, out / "results.jsonl", 1, std::chrono::seconds(120))) << read_file(s.dir / "log");
  ::kill(pid, SIGTERM);
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = wait_child_for(pid, std::chrono::seconds(10));
  const double stop_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto log = read_file(s.dir / "log");
  EXPECT_LT(stop_s, 5.0) << log;
  if (count_lines(out / "results.jsonl") < inputs.size()) {
    EXPECT_EQ(rc, 130) << log;
    EXPECT_NE(log.find("Resume with:"), std::string::npos) << log;
    EXPECT_NE(log.find("SIGTERM"), std::string::npos) << log;
  }
  EXPECT_TRUE(fs::exists(out / "report.json")) << "a stopped run still writes its report";
  const int rc2 = run_quarry_args(args, s.dir / "log2");
  EXPECT_TRUE(rc2 == 0 || rc2 == 2) << read_file(s.dir / "log2");
  expect_one_record_each(out / "results.jsonl", inputs);
}

TEST(Signals, ASecondSigintExitsAtOnce) {
  Scratch s("sigint2");
  const auto inputs = mixed_inputs(s.dir / "in", 8, 20);
  const auto out = s.dir / "out";
  const auto args = run_args({s.dir / "in"}, out, {"--max-inflight", "2"});
  const pid_t pid = spawn_quarry(args, s.dir / "log");
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(wait_for_lines(pid, out / "results.jsonl", 1, std::chrono::seconds(120))) << read_file(s.dir / "log");
  ::kill(pid, SIGINT);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const bool still_running = !exited(pid);
  ::kill(pid, SIGINT);
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = wait_child_for(pid, std::chrono::seconds(10));
  const double exit_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto log = read_file(s.dir / "log");
  if (still_running) {
    EXPECT_LT(exit_s, 1.0) << log;
    EXPECT_EQ(rc, 130) << log;
    EXPECT_NE(log.find("exiting at once"), std::string::npos) << log;
  }
  const int rc2 = run_quarry_args(args, s.dir / "log2");
  EXPECT_TRUE(rc2 == 0 || rc2 == 2) << read_file(s.dir / "log2");
  expect_one_record_each(out / "results.jsonl", inputs);
}

}  // namespace
