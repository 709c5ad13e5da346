// OUTDIR is the run's alone: a second run on the same folder is refused at once (never a garbled
// line), and symbolic links planted in the folder are never followed.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "tests/run/run_support.hpp"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace quarry::test_run;

const fs::path k_samples = fs::path(QUARRY_SOURCE_DIR) / "samples" / "invoices";

std::vector<std::string> run_args(const fs::path& in, const fs::path& out, std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {"run", in.string(), "-o", out.string(), "--progress", "none", "--threads", "2",
                                "--retries", "0"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

/// Every line of results.jsonl parses; returns the number of records per source.
std::map<std::string, int> records_per_source(const fs::path& results) {
  std::map<std::string, int> n;
  std::ifstream in(results, std::ios::binary);
  std::string line;
  while (std::getline(in, line)) {
    const auto j = json::parse(line, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << "garbled line: " << line.substr(0, 200);
    if (!j.is_discarded()) ++n[j["source"].get<std::string>()];
  }
  return n;
}

TEST(Outdir, SecondRunOnTheSameOutdirIsRefusedAtOnceAndTheRerunGivesOneRecordPerInput) {
  Scratch s("lock");
  auto inputs = make_copies(s.dir / "in", 100);
  for (int i = 0; i < 6; ++i) {  // model documents, one at a time: the first run lasts seconds
    const auto p = s.dir / "in" / ("text-" + std::to_string(i) + ".txt");
    fs::copy_file(k_samples / "en-txt-1.txt", p);
    inputs.push_back(p);
  }
  const auto out = s.dir / "out";
  const pid_t first = spawn_quarry(run_args(s.dir / "in", out, {"--max-inflight", "1"}), s.dir / "log1");
  ASSERT_GT(first, 0);
  // Once the first run writes, it holds the lock.
  ASSERT_TRUE(wait_for_lines(first, out / "results.jsonl", 1, std::chrono::seconds(120))) << read_file(s.dir / "log1");
  const auto t0 = std::chrono::steady_clock::now();
  const int rc2 = run_quarry_args(run_args(s.dir / "in", out), s.dir / "log2");
  const double second_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto log2 = read_file(s.dir / "log2");
  ASSERT_FALSE(exited(first)) << "the first run ended before the second one was tried: the test proves nothing";
  EXPECT_EQ(rc2, 2) << log2;
  EXPECT_NE(log2.find("OUTDIR is in use by pid " + std::to_string(first)), std::string::npos) << log2;
  EXPECT_LT(second_s, 10.0) << "the refusal must come before the model is loaded";
  const int rc1 = wait_child(first);
  EXPECT_TRUE(rc1 == 0 || rc1 == 2) << read_file(s.dir / "log1");
  const int rc3 = run_quarry_args(run_args(s.dir / "in", out), s.dir / "log3");
  EXPECT_TRUE(rc3 == 0 || rc3 == 2) << read_file(s.dir / "log3");
  const auto n = records_per_source(out / "results.jsonl");
  EXPECT_EQ(n.size(), inputs.size());
  for (const auto& p : inputs) EXPECT_EQ(n.count(p.string()) ? n.at(p.string()) : 0, 1) << p;
}

TEST(Outdir, PlantedSymlinksAreNeverFollowed) {
  Scratch s("symlinks");
  fs::create_directories(s.dir / "in");
  fs::copy_file(k_samples / "en-xml-1.xml", s.dir / "in" / "a.xml");
  const auto victims = s.dir / "victims";
  fs::create_directories(victims);
  const std::string original = "precious data, not to be touched\n";
  for (const char* n : {"results.jsonl", "report.md", "report.json", "report.md.tmp", "report.json.tmp", "ledger.sqlite-wal"})
    std::ofstream(victims / n) << original;

  // results.jsonl planted as a link: the run refuses the folder (setup error) and writes nothing there.
  {
    const auto out = s.dir / "out1";
    fs::create_directories(out);
    fs::create_symlink(victims / "results.jsonl", out / "results.jsonl");
    const int rc = run_quarry_args(run_args(s.dir / "in", out), s.dir / "log1");
    const auto log = read_file(s.dir / "log1");
    EXPECT_EQ(rc, 1) << log;
    EXPECT_NE(log.find("symbolic link"), std::string::npos) << log;
    EXPECT_TRUE(fs::is_symlink(out / "results.jsonl"));
  }
  // The ledger's journal planted as a link: refused too.
  {
    const auto out = s.dir / "out2";
    fs::create_directories(out);
    fs::create_symlink(victims / "ledger.sqlite-wal", out / "ledger.sqlite-wal");
    const int rc = run_quarry_args(run_args(s.dir / "in", out), s.dir / "log2");
    EXPECT_EQ(rc, 1) << read_file(s.dir / "log2");
  }
  // The reports and their temporary names planted as links: the run goes through, the links are
  // replaced by the reports, and the files they pointed to are unchanged.
  {
    const auto out = s.dir / "out3";
    fs::create_directories(out);
    for (const char* n : {"report.md", "report.json", "report.md.tmp", "report.json.tmp"})
      fs::create_symlink(victims / n, out / n);
    const int rc = run_quarry_args(run_args(s.dir / "in", out), s.dir / "log3");
    EXPECT_EQ(rc, 0) << read_file(s.dir / "log3");
    EXPECT_FALSE(fs::is_symlink(out / "report.md"));
    EXPECT_FALSE(fs::is_symlink(out / "report.json"));
    EXPECT_TRUE(json::accept(read_file(out / "report.json")));
    EXPECT_EQ(count_lines(out / "results.jsonl"), 1u);
  }
  for (const auto& e : fs::directory_iterator(victims)) EXPECT_EQ(read_file(e.path()), original) << e.path();
}

}  // namespace
