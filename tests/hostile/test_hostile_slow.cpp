// The hardening issue's own scenarios on the 28 samples (label slow: each runs the model over them):
// SIGTERM 4 s into a run, then the rerun; and two runs on one OUTDIR started 3 s apart, then a rerun.
#include <gtest/gtest.h>

#include "tests/hostile/hostile_support.hpp"

namespace {

namespace fs = std::filesystem;
using namespace quarry::test_run;
using namespace quarry::test_hostile;

std::vector<fs::path> samples() {
  std::vector<fs::path> v;
  for (const auto& e : fs::directory_iterator(k_samples)) v.push_back(e.path());
  return v;
}

TEST(HostileSlow, SigtermFourSecondsIntoTheSamplesThenTheRerunGives28Records) {
  Scratch s("sigterm28");
  const auto out = s.dir / "out";
  const std::vector<std::string> args = {"run", k_samples.string(), "-o", out.string(), "--progress", "none"};
  const pid_t pid = spawn_quarry(args, s.dir / "log");
  ASSERT_GT(pid, 0);
  std::this_thread::sleep_for(std::chrono::seconds(4));
  ::kill(pid, SIGTERM);
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = wait_child_for(pid, std::chrono::seconds(30));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0) << read_file(s.dir / "log");
  EXPECT_TRUE(rc == 130 || rc == 0 || rc == 2) << rc;
  const int rc2 = run_quarry_args(args, s.dir / "log2");
  EXPECT_TRUE(rc2 == 0 || rc2 == 2) << read_file(s.dir / "log2");
  expect_one_record_each(out / "results.jsonl", samples());
}

TEST(HostileSlow, TwoRunsOnOneOutdirThreeSecondsApartThenARerun) {
  Scratch s("twoRuns");
  const auto out = s.dir / "out";
  const std::vector<std::string> args = {"run", k_samples.string(), "-o", out.string(), "--progress", "none"};
  const pid_t first = spawn_quarry(args, s.dir / "log1");
  ASSERT_GT(first, 0);
  std::this_thread::sleep_for(std::chrono::seconds(3));
  const pid_t second = spawn_quarry(args, s.dir / "log2");
  ASSERT_GT(second, 0);
  const int rc2 = wait_child_for(second, std::chrono::seconds(600));
  const int rc1 = wait_child_for(first, std::chrono::seconds(600));
  EXPECT_EQ(rc2, 2) << read_file(s.dir / "log2");
  EXPECT_NE(read_file(s.dir / "log2").find("OUTDIR is in use by pid " + std::to_string(first)), std::string::npos);
  EXPECT_TRUE(rc1 == 0 || rc1 == 2) << read_file(s.dir / "log1");
  const int rc3 = run_quarry_args(args, s.dir / "log3");
  EXPECT_TRUE(rc3 == 0 || rc3 == 2) << read_file(s.dir / "log3");
  expect_one_record_each(out / "results.jsonl", samples());
}

}  // namespace
