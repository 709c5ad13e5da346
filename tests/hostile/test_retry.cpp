// Errors caused by a run's settings are not done: `--kv-cache-mb 1` gives error records (retryable),
// the rerun without it redoes them and no input's latest record is an error; `--retry-errors` redoes
// every error record; the report counts the latest record of each input, retryable errors apart.
#include <gtest/gtest.h>

#include "tests/hostile/hostile_support.hpp"

namespace {

namespace fs = std::filesystem;
using namespace quarry::test_run;
using namespace quarry::test_hostile;

/// The latest record of each source (later lines supersede earlier ones).
std::map<std::string, json> latest(const fs::path& results) {
  std::map<std::string, json> m;
  for (const auto& r : read_records(results)) m[r["source"].get<std::string>()] = r;
  return m;
}

TEST(RetryableErrors, KvCacheTooSmallThenARerunWithoutItLeavesNoErrorRecord) {
  Scratch s("kvcache");
  const auto in = s.dir / "in";
  fs::create_directories(in);
  for (const char* n : {"en-txt-1.txt", "de-txt-1.txt", "en-xml-1.xml"}) fs::copy_file(k_samples / n, in / n);
  const auto out = s.dir / "out";

  EXPECT_EQ(run_quarry_args(run_args({in}, out, {"--kv-cache-mb", "1"}), s.dir / "log1"), 2) << read_file(s.dir / "log1");
  auto recs = latest(out / "results.jsonl");
  ASSERT_EQ(recs.size(), 3u);
  for (const char* n : {"en-txt-1.txt", "de-txt-1.txt"}) {
    const auto& r = recs.at((in / n).string());
    EXPECT_EQ(r["status"], "error") << r.dump();
    EXPECT_EQ(r["errors"][0]["retryable"], true) << r.dump();
    const std::string message = r["errors"][0]["message"];
    EXPECT_NE(message.find("KV cache"), std::string::npos) << message;
    EXPECT_NE(message.find("--kv-cache-mb"), std::string::npos) << message;  // an option quarry run has
  }
  EXPECT_EQ(recs.at((in / "en-xml-1.xml").string())["status"], "ok");
  auto report = json::parse(read_file(out / "report.json"));
  EXPECT_EQ(report["errors_retryable"], 2);
  EXPECT_EQ(report["this_run"]["error_retryable"], 2);

  // The corrected rerun redoes the two (they are not done), and only them.
  const int rc = run_quarry_args(run_args({in}, out), s.dir / "log2");
  EXPECT_TRUE(rc == 0 || rc == 2) << read_file(s.dir / "log2");
  recs = latest(out / "results.jsonl");
  for (const auto& [src, r] : recs) EXPECT_NE(r["status"], "error") << src << ": " << r.dump();
  EXPECT_EQ(count_lines(out / "results.jsonl"), 5u);
  report = json::parse(read_file(out / "report.json"));
  EXPECT_EQ(report["records"], 3);
  EXPECT_EQ(report["superseded_lines"], 2);
  EXPECT_EQ(report["errors_retryable"], 0);
  EXPECT_EQ(report["by_status"].value("error", 0), 0);
  EXPECT_EQ(report["this_run"]["written"], 2);
  EXPECT_EQ(report["this_run"]["skipped_already_done"], 1);

  // Nothing is left to do; and a ledger rebuilt from results.jsonl keeps the latest records.
  EXPECT_EQ(run_quarry_args(run_args({in}, out), s.dir / "log3"), rc);
  EXPECT_EQ(count_lines(out / "results.jsonl"), 5u);
  for (const char* f : {"ledger.sqlite", "ledger.sqlite-wal", "ledger.sqlite-shm"}) fs::remove(out / f);
  EXPECT_EQ(run_quarry_args(run_args({in}, out), s.dir / "log4"), rc) << read_file(s.dir / "log4");
  EXPECT_EQ(count_lines(out / "results.jsonl"), 5u);
  report = json::parse(read_file(out / "report.json"));
  EXPECT_EQ(report["records"], 3);
  EXPECT_EQ(report["by_status"].value("error", 0), 0);
}

TEST(RetryableErrors, RetryErrorsRedoesEveryErrorRecordAndOnlyThose) {
  Scratch s("retryerrors");
  const auto in = s.dir / "in";
  fs::create_directories(in);
  fs::copy_file(k_samples / "en-xml-1.xml", in / "a.xml");
  std::ofstream(in / "broken.xml") << "<Invoice><unclosed>";
  const auto out = s.dir / "out";
  EXPECT_EQ(run_quarry_args(run_args({in}, out), s.dir / "log1"), 2);
  EXPECT_EQ(count_lines(out / "results.jsonl"), 2u);
  // A plain rerun: the malformed file's error is not caused by settings: done.
  EXPECT_EQ(run_quarry_args(run_args({in}, out), s.dir / "log2"), 2);
  EXPECT_EQ(count_lines(out / "results.jsonl"), 2u);
  // --retry-errors redoes it (still an error), not the ok one.
  EXPECT_EQ(run_quarry_args(run_args({in}, out, {"--retry-errors"}), s.dir / "log3"), 2);
  EXPECT_EQ(count_lines(out / "results.jsonl"), 3u);
  const auto report = json::parse(read_file(out / "report.json"));
  EXPECT_EQ(report["records"], 2);
  EXPECT_EQ(report["by_status"]["error"], 1);
  EXPECT_EQ(report["this_run"]["written"], 1);
  EXPECT_EQ(report["this_run"]["skipped_already_done"], 1);
}

}  // namespace
