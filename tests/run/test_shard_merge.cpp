// Deterministic sharding (`quarry run --shard I/N`) and `quarry merge`: every document in exactly one
// shard, the merged folder equal to one unsharded run and resumable, and the merge's refusals.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "pipeline/run/job.hpp"
#include "pipeline/run/outdir.hpp"
#include "tests/run/run_support.hpp"

namespace {

using namespace quarry::test_run;
namespace qr = quarry::run;
using nlohmann::json;

TEST(Shard, ParsesIOverNAndRefusesTheRest) {
  EXPECT_EQ(qr::parse_shard("0/1"), std::make_pair(std::size_t{0}, std::size_t{1}));
  EXPECT_EQ(qr::parse_shard("2/3"), std::make_pair(std::size_t{2}, std::size_t{3}));
  for (const char* bad : {"3/3", "1", "/3", "1/", "a/3", "-1/3", "1/0", "1/3/4", ""})
    EXPECT_THROW(qr::parse_shard(bad), std::invalid_argument) << bad;
}

TEST(Shard, TheShardOfADocumentIsItsHashModuloN) {
  const std::string sha = "00000000000000ff" + std::string(48, '0');
  EXPECT_EQ(qr::shard_of(sha, "a", 1), 0u);
  EXPECT_EQ(qr::shard_of(sha, "a", 256), 255u);
  EXPECT_EQ(qr::shard_of(sha, "b", 7), 255u % 7);
  // Without a sha256 the name decides, the same way every time.
  EXPECT_EQ(qr::shard_of("", "some/file.pdf", 5), qr::shard_of("", "some/file.pdf", 5));
  std::set<std::size_t> seen;
  for (int i = 0; i < 64; ++i) seen.insert(qr::shard_of("", "doc-" + std::to_string(i), 3));
  EXPECT_EQ(seen.size(), 3u);
}

/// `n` distinct XML e-invoices (the samples, each with a comment naming its copy: other bytes).
std::vector<fs::path> distinct_copies(const fs::path& dir, std::size_t n) {
  auto files = make_copies(dir, n);
  for (std::size_t i = 0; i < files.size(); ++i) std::ofstream(files[i], std::ios::app) << "\n<!-- copy " << i << " -->\n";
  return files;
}

/// source -> (status, data) of every record of a folder.
std::map<std::string, std::pair<std::string, std::string>> records_of(const fs::path& out) {
  std::map<std::string, std::pair<std::string, std::string>> m;
  for (const auto& r : read_records(out / "results.jsonl"))
    m[r["source"].get<std::string>()] = {r["status"].get<std::string>(), r["data"].dump()};
  return m;
}

TEST(ShardMerge, ThreeShardsMergedEqualOneRunAndResume) {
  Scratch s("shards");
  const auto files = distinct_copies(s.dir / "in", 24);
  const auto in = (s.dir / "in").string();
  std::vector<std::string> shard_dirs;
  std::size_t total = 0;
  for (int i = 0; i < 3; ++i) {
    const auto out = s.dir / ("shard" + std::to_string(i));
    const int rc = run_quarry_args({"run", in, "-o", out.string(), "--shard", std::to_string(i) + "/3", "--progress",
                                    "none", "--threads", "2"},
                                   s.dir / "log");
    ASSERT_EQ(rc, 0) << read_file(s.dir / "log");
    const auto report = json::parse(read_file(out / "report.json"));
    const std::size_t mine = count_lines(out / "results.jsonl");
    EXPECT_EQ(report["this_run"]["other_shards"].get<std::size_t>() + mine, files.size());
    EXPECT_EQ(report["this_run"]["shard"], std::to_string(i) + "/3");
    total += mine;
    shard_dirs.push_back(out.string());
  }
  EXPECT_EQ(total, files.size());  // every document in exactly one shard

  const auto single = s.dir / "single";
  ASSERT_EQ(run_quarry_args({"run", in, "-o", single.string(), "--progress", "none", "--threads", "2"}, s.dir / "log"), 0);
  const auto merged = s.dir / "merged";
  std::vector<std::string> args = {"merge"};
  args.insert(args.end(), shard_dirs.begin(), shard_dirs.end());
  args.insert(args.end(), {"-o", merged.string()});
  ASSERT_EQ(run_quarry_args(args, s.dir / "log"), 0) << read_file(s.dir / "log");
  EXPECT_EQ(records_of(merged), records_of(single));
  EXPECT_EQ(count_lines(merged / "results.jsonl"), files.size());
  const auto report = json::parse(read_file(merged / "report.json"));
  EXPECT_EQ(report["records"].get<std::size_t>(), files.size());
  EXPECT_EQ(report["by_status"]["ok"].get<std::size_t>(), files.size());

  // A run into the merged folder finds everything done.
  ASSERT_EQ(run_quarry_args({"run", in, "-o", merged.string(), "--progress", "none"}, s.dir / "log"), 0);
  EXPECT_EQ(count_lines(merged / "results.jsonl"), files.size());
  EXPECT_EQ(json::parse(read_file(merged / "report.json"))["this_run"]["skipped_already_done"].get<std::size_t>(),
            files.size());

  // Refusals: an output that holds results, overlapping inputs, a folder in use by a run.
  EXPECT_EQ(run_quarry_args({"merge", shard_dirs[0], shard_dirs[1], "-o", merged.string()}, s.dir / "log"), 1);
  EXPECT_NE(read_file(s.dir / "log").find("already holds results"), std::string::npos) << read_file(s.dir / "log");
  EXPECT_EQ(run_quarry_args({"merge", shard_dirs[0], single.string(), "-o", (s.dir / "m2").string()}, s.dir / "log"), 1);
  EXPECT_NE(read_file(s.dir / "log").find("overlap"), std::string::npos) << read_file(s.dir / "log");
  EXPECT_FALSE(fs::exists(s.dir / "m2" / "results.jsonl") && fs::file_size(s.dir / "m2" / "results.jsonl") > 0);
  {
    const qr::OutdirLock busy(shard_dirs[2]);
    EXPECT_EQ(run_quarry_args({"merge", shard_dirs[0], shard_dirs[2], "-o", (s.dir / "m3").string()}, s.dir / "log"), 2);
    EXPECT_NE(read_file(s.dir / "log").find("in use"), std::string::npos) << read_file(s.dir / "log");
  }
  EXPECT_EQ(run_quarry_args({"run", in, "-o", (s.dir / "x").string(), "--shard", "3/3"}, s.dir / "log"), 1);
}

}  // namespace
