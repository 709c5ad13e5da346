// `quarry ingest` end to end: a folder of good and bad files gives one JSON line per file, in
// sorted order, hidden files skipped, exit code 2; --chunks gives chunk records.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/common/run_command.hpp"
#include "tests/extractors/corpus.hpp"

namespace {

namespace fs = std::filesystem;

using Run = quarry::test_support::CommandResult;

Run run(const std::string& args) { return quarry::test_support::run_quarry(args, false); }

std::vector<nlohmann::json> lines(const std::string& out) {
  std::vector<nlohmann::json> v;
  std::istringstream in(out);
  for (std::string l; std::getline(in, l);) v.push_back(nlohmann::json::parse(l));
  return v;
}

class IngestCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("quarry-ingest-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "sub");
    const auto c = quarry::test::corpora();
    fs::copy_file(c / "nav" / "pdf" / "en" / "Belfoldi elolegszamla.pdf", dir_ / "a.pdf");
    fs::copy_file(c / "nav" / "html" / "hu" / "Belfoldi elolegszamla.html", dir_ / "sub" / "b.html");
    fs::copy_file(c / "malformed" / "corrupt-factur-x-waytoosmall.pdf", dir_ / "c-broken.pdf");
    fs::copy_file(c / "zugferd" / "EN16931_Einfach.pdf", dir_ / "d.pdf");
    std::ofstream(dir_ / "e.txt") << "hello\n";
    std::ofstream(dir_ / "f-empty.xml");
    std::ofstream(dir_ / ".hidden.txt") << "skip me\n";
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(IngestCli, FolderOfGoodAndBadFiles) {
  auto r = run("ingest '" + dir_.string() + "'");
  EXPECT_EQ(r.code, 2);
  auto recs = lines(r.out);
  ASSERT_EQ(recs.size(), 6u) << r.out;
  const std::vector<std::string> names = {"a.pdf", "c-broken.pdf", "d.pdf", "e.txt", "f-empty.xml", "sub/b.html"};
  for (std::size_t i = 0; i < recs.size(); ++i) {
    EXPECT_EQ(recs[i]["source"], (dir_ / names[i]).string());
    const bool bad = names[i] == "c-broken.pdf" || names[i] == "f-empty.xml";
    EXPECT_EQ(recs[i]["status"], bad ? "error" : "ok") << recs[i].dump();
    if (bad) {
      EXPECT_FALSE(recs[i]["error"].get<std::string>().empty());
    } else {
      EXPECT_EQ(recs[i]["sha256"].get<std::string>().size(), 64u);
      EXPECT_GE(recs[i]["pages"].get<int>(), 1);
      EXPECT_TRUE(recs[i]["warnings"].is_array());
    }
  }
  EXPECT_EQ(recs[0]["media_type"], "application/pdf");
  EXPECT_NE(recs[0]["text"].get<std::string>().find("AAA000567"), std::string::npos);
  ASSERT_EQ(recs[2]["attachments"].size(), 1u);
  EXPECT_EQ(recs[2]["attachments"][0]["name"], "factur-x.xml");
  EXPECT_GT(recs[2]["attachments"][0]["size"].get<int>(), 1000);
  EXPECT_EQ(recs[3]["text"], "hello");
  EXPECT_EQ(recs[5]["media_type"], "text/html");
}

TEST_F(IngestCli, AllGoodExitsZeroAndWritesFile) {
  const auto out = dir_ / "out.jsonl";
  auto r = run("ingest '" + (dir_ / "a.pdf").string() + "' '" + (dir_ / "e.txt").string() + "' -o '" + out.string() + "'");
  EXPECT_EQ(r.code, 0);
  EXPECT_TRUE(r.out.empty());
  std::ifstream in(out);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(lines(ss.str()).size(), 2u);
}

TEST_F(IngestCli, ChunksCoverTheDocument) {
  auto r = run("ingest --chunks --chunk-tokens 64 --chunk-overlap 0 '" + (dir_ / "a.pdf").string() + "'");
  EXPECT_EQ(r.code, 0);
  auto recs = lines(r.out);
  ASSERT_GT(recs.size(), 2u);
  std::string all;
  for (std::size_t i = 0; i < recs.size(); ++i) {
    EXPECT_EQ(recs[i]["chunk"], i);
    EXPECT_EQ(recs[i]["first_page"], 1);
    EXPECT_EQ(recs[i]["sha256"], recs[0]["sha256"]);
    all += recs[i]["text"].get<std::string>() + "\n";
  }
  EXPECT_NE(all.find("AAA000567"), std::string::npos);
}

TEST_F(IngestCli, UsageErrors) {
  EXPECT_EQ(run("ingest").code, 1);
  EXPECT_EQ(run("ingest --chunk-tokens 10 x").code, 1);
  auto missing = run("ingest '" + (dir_ / "nope.pdf").string() + "'");
  EXPECT_EQ(missing.code, 2);
  EXPECT_EQ(lines(missing.out).at(0)["error"], "no such file");
}

}  // namespace

namespace {

TEST(IngestCliJobs, OutputDoesNotDependOnJobs) {
  const std::string dir = "'" + (quarry::test::corpora() / "nav").string() + "'";
  auto one = run("ingest -j 1 " + dir);
  auto four = run("ingest -j 4 " + dir);
  EXPECT_EQ(one.code, 0);
  EXPECT_EQ(four.code, 0);
  EXPECT_EQ(lines(one.out).size(), 70u);
  EXPECT_EQ(one.out, four.out);
}

}  // namespace
