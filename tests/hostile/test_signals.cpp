// Signals: SIGTERM / SIGINT stop a run within 5 s in any stage (nothing new starts, extraction
// workers are killed, the requests in flight get 2 s, then are cancelled; a stage that cannot be
// interrupted, such as an in-process extraction, meets the 4.5 s backstop), a second signal exits at
// once; either way the rerun gives exactly one record per input.
#include <gtest/gtest.h>

#include <map>

#include "tests/hostile/hostile_support.hpp"
#include "tests/hostile/pdf_bombs.hpp"

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

// The slow document is a content-stream bomb that the extractors' content caps would refuse at once:
// the runs here lift those caps (--max-content-mb, --max-page-content-mb) so that a stage is really busy.
TEST(Signals, SigtermStopsWithinFiveSecondsAndTheRerunResumes) {
  Scratch s("sigterm");
  auto inputs = mixed_inputs(s.dir / "in", 8, 20);
  content_stream_bomb(s.dir / "in" / "slow.pdf", 10, 256ull << 20);  // a worker busy with it is killed
  inputs.push_back(s.dir / "in" / "slow.pdf");
  const auto out = s.dir / "out";
  const auto args = run_args({s.dir / "in"}, out, {"--max-inflight", "2", "--max-content-mb", "1048576", "--max-page-content-mb", "1048576"});
  const pid_t pid = spawn_quarry(args, s.dir / "log");
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(wait_for_lines(pid, out / "results.jsonl", 1, std::chrono::seconds(120))) << read_file(s.dir / "log");
  ::kill(pid, SIGTERM);
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = wait_child_for(pid, std::chrono::seconds(10));
  const double stop_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto log = read_file(s.dir / "log");
  EXPECT_LT(stop_s, 6.0) << log;  // the promise is 5 s; 1 s of slack for a loaded machine
  if (count_lines(out / "results.jsonl") < inputs.size()) {
    EXPECT_EQ(rc, 130) << log;
    EXPECT_NE(log.find("Resume with:"), std::string::npos) << log;
    EXPECT_NE(log.find("SIGTERM"), std::string::npos) << log;
  }
  EXPECT_TRUE(fs::exists(out / "report.json")) << "a stopped run still writes its report";
  // The rerun, with a short timeout for the slow document.
  const int rc2 = run_quarry_args(run_args({s.dir / "in"}, out, {"--max-inflight", "2", "--extract-timeout", "1", "--max-content-mb", "1048576", "--max-page-content-mb", "1048576"}),
                                  s.dir / "log2");
  EXPECT_TRUE(rc2 == 0 || rc2 == 2) << read_file(s.dir / "log2");
  expect_one_record_each(out / "results.jsonl", inputs);
}

TEST(Signals, ASecondSigintExitsAtOnce) {
  Scratch s("sigint2");
  // An extraction in quarry's own thread (--no-isolation) that parses for a minute: the first SIGINT
  // cannot end it, the second exits at once.
  auto inputs = make_copies(s.dir / "in", 10);
  content_stream_bomb(s.dir / "in" / "slow.pdf", 10, 256ull << 20);
  inputs.push_back(s.dir / "in" / "slow.pdf");
  const auto out = s.dir / "out";
  const pid_t pid = spawn_quarry(run_args({s.dir / "in"}, out, {"--no-isolation", "--max-content-mb", "1048576", "--max-page-content-mb", "1048576"}), s.dir / "log");
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(wait_for_lines(pid, out / "results.jsonl", 10, std::chrono::seconds(120))) << read_file(s.dir / "log");
  ::kill(pid, SIGINT);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_FALSE(exited(pid)) << read_file(s.dir / "log");
  ::kill(pid, SIGINT);
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = wait_child_for(pid, std::chrono::seconds(10));
  const double exit_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto log = read_file(s.dir / "log");
  EXPECT_LT(exit_s, 1.5) << log;
  EXPECT_EQ(rc, 130) << log;
  EXPECT_NE(log.find("exiting at once (a second signal)"), std::string::npos) << log;
  EXPECT_NE(log.find("Resume with:"), std::string::npos) << log;
  // The rerun (isolated, with a short timeout for the slow document) completes the folder.
  const int rc2 = run_quarry_args(run_args({s.dir / "in"}, out, {"--extract-timeout", "1", "--max-content-mb", "1048576", "--max-page-content-mb", "1048576"}), s.dir / "log2");
  EXPECT_EQ(rc2, 2) << read_file(s.dir / "log2");
  const auto recs = expect_one_record_each(out / "results.jsonl", inputs);
  EXPECT_EQ(recs.at((s.dir / "in" / "slow.pdf").string())["errors"][0]["message"], "timeout after 1 s");
}

TEST(Signals, AStageThatCannotBeInterruptedStillStopsWithinFiveSeconds) {
  Scratch s("backstop");
  fs::create_directories(s.dir / "in");
  content_stream_bomb(s.dir / "in" / "slow.pdf", 10, 256ull << 20);
  const auto out = s.dir / "out";
  const pid_t pid = spawn_quarry(run_args({s.dir / "in"}, out, {"--no-isolation", "--max-content-mb", "1048576", "--max-page-content-mb", "1048576"}), s.dir / "log");
  ASSERT_GT(pid, 0);
  std::this_thread::sleep_for(std::chrono::seconds(2));  // extracting by now
  ASSERT_FALSE(exited(pid)) << read_file(s.dir / "log");
  ::kill(pid, SIGTERM);
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = wait_child_for(pid, std::chrono::seconds(10));
  const double stop_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto log = read_file(s.dir / "log");
  EXPECT_LT(stop_s, 6.0) << log;  // the promise is 5 s; 1 s of slack for a loaded machine
  EXPECT_EQ(rc, 130) << log;
  EXPECT_NE(log.find("still running 4.5 s after the stop"), std::string::npos) << log;
}

}  // namespace
