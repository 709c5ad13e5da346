// The ledger's commit protocol and its repair on open (pipeline/run/ledger.hpp).
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <fstream>

#include "pipeline/run/ledger.hpp"
#include "tests/run/run_support.hpp"

namespace {

using quarry::run::Ledger;
using quarry::run::PendingRecord;
using quarry::test_run::read_file;
using quarry::test_run::Scratch;

PendingRecord rec(const std::string& source, const std::string& sha, const std::string& status = "ok") {
  nlohmann::json j = {{"source", source}, {"sha256", sha}, {"status", status}, {"method", "model"},
                      {"data", {{"x", 1}}}, {"errors", nlohmann::json::array()}, {"stats", {{"attempts", 1}}}};
  return {source, sha, status, "model", 1, false, j.dump()};
}

std::size_t sqlite_rows(const std::filesystem::path& db_path) {
  sqlite3* db = nullptr;
  sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(db, "SELECT COUNT(*) FROM documents", -1, &st, nullptr);
  sqlite3_step(st);
  const auto n = static_cast<std::size_t>(sqlite3_column_int64(st, 0));
  sqlite3_finalize(st);
  sqlite3_close(db);
  return n;
}

TEST(Ledger, CommitThenReopenKnowsEveryRecord) {
  Scratch s("commit");
  {
    Ledger l(s.dir);
    l.commit({rec("a.pdf", "11"), rec("b.pdf", "22")});
    l.commit({rec("c.pdf", "33", "invalid")});
    EXPECT_TRUE(l.is_done("a.pdf", "11"));
    EXPECT_FALSE(l.is_done("a.pdf", "99"));  // same path, other content: another document
  }
  Ledger l(s.dir);
  EXPECT_EQ(l.recovery().ledger_rows, 3u);
  EXPECT_EQ(l.recovery().recovered_lines, 0u);
  EXPECT_EQ(l.recovery().truncated_bytes, 0u);
  quarry::run::LedgerReader r(s.dir);
  EXPECT_TRUE(r.is_done("c.pdf", "33"));
  EXPECT_FALSE(r.is_done("d.pdf", "44"));
  EXPECT_EQ(quarry::test_run::count_lines(s.dir / Ledger::results_name), 3u);
}

TEST(Ledger, TornLastLineIsCutAndItsDocumentRedone) {
  Scratch s("torn");
  { Ledger l(s.dir); l.commit({rec("a.pdf", "11")}); }
  const auto good = read_file(s.dir / Ledger::results_name);
  {
    std::ofstream out(s.dir / Ledger::results_name, std::ios::app | std::ios::binary);
    out << R"({"source":"b.pdf","sha256":"22","status":"o)";  // killed mid-write
  }
  Ledger l(s.dir);
  EXPECT_GT(l.recovery().truncated_bytes, 0u);
  EXPECT_EQ(read_file(s.dir / Ledger::results_name), good);
  EXPECT_FALSE(l.is_done("b.pdf", "22"));
  l.commit({rec("b.pdf", "22")});
  EXPECT_EQ(quarry::test_run::count_lines(s.dir / Ledger::results_name), 2u);
  EXPECT_TRUE(l.is_done("b.pdf", "22"));
}

TEST(Ledger, CompleteLinesTheLedgerMissedAreRecoveredNotRedone) {
  // A kill between "results.jsonl fsynced" and "ledger committed": the line is there, the row is not.
  Scratch s("missed");
  { Ledger l(s.dir); l.commit({rec("a.pdf", "11")}); }
  {
    std::ofstream out(s.dir / Ledger::results_name, std::ios::app | std::ios::binary);
    out << rec("b.pdf", "22").line << "\n" << rec("c.pdf", "33").line << "\n";
  }
  EXPECT_EQ(sqlite_rows(s.dir / Ledger::ledger_name), 1u);
  Ledger l(s.dir);
  EXPECT_EQ(l.recovery().recovered_lines, 2u);
  EXPECT_EQ(l.recovery().ledger_rows, 3u);
  EXPECT_TRUE(l.is_done("b.pdf", "22"));
  EXPECT_TRUE(l.is_done("c.pdf", "33"));
  // The next commit goes after them (offsets stay right: reopen finds nothing to repair).
  l.commit({rec("d.pdf", "44")});
  Ledger l2(s.dir);
  EXPECT_EQ(l2.recovery().recovered_lines, 0u);
  EXPECT_EQ(l2.recovery().truncated_bytes, 0u);
  EXPECT_EQ(l2.recovery().ledger_rows, 4u);
}

TEST(Ledger, RowsPastATruncatedFileAreDropped) {
  Scratch s("dropped");
  { Ledger l(s.dir); l.commit({rec("a.pdf", "11"), rec("b.pdf", "22")}); }
  const auto text = read_file(s.dir / Ledger::results_name);
  std::filesystem::resize_file(s.dir / Ledger::results_name, text.find('\n') + 1);  // keep line 1
  Ledger l(s.dir);
  EXPECT_EQ(l.recovery().dropped_rows, 1u);
  EXPECT_TRUE(l.is_done("a.pdf", "11"));
  EXPECT_FALSE(l.is_done("b.pdf", "22"));
}

TEST(Ledger, GarbageAfterTheLedgerEndIsCut) {
  Scratch s("garbage");
  { Ledger l(s.dir); l.commit({rec("a.pdf", "11")}); }
  {
    std::ofstream out(s.dir / Ledger::results_name, std::ios::app | std::ios::binary);
    out << "not json\n" << rec("b.pdf", "22").line << "\n";
  }
  Ledger l(s.dir);
  EXPECT_EQ(l.recovery().recovered_lines, 0u);
  EXPECT_GT(l.recovery().truncated_bytes, 0u);
  EXPECT_EQ(quarry::test_run::count_lines(s.dir / Ledger::results_name), 1u);
}

TEST(Ledger, UnwritableFolderIsAClearError) {
  try {
    Ledger l("/proc/quarry-no-such-folder/out");
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("quarry-no-such-folder"), std::string::npos) << e.what();
  }
}

}  // namespace

namespace {

TEST(Ledger, ARetryableErrorIsNotDoneAndItsRedoSupersedesIt) {
  Scratch s("retryable");
  nlohmann::json err = {{"source", "a.pdf"}, {"sha256", "11"}, {"status", "error"}, {"method", "model"},
                        {"data", nullptr},
                        {"errors", {{{"pointer", ""}, {"rule", "engine"}, {"message", "KV cache"}, {"retryable", true}}}},
                        {"stats", {{"attempts", 1}}}};
  PendingRecord e{"a.pdf", "11", "error", "model", 1, true, err.dump()};
  {
    Ledger l(s.dir);
    l.commit({e, rec("b.pdf", "22", "error")});
    EXPECT_FALSE(l.is_done("a.pdf", "11"));      // retryable: redone
    EXPECT_TRUE(l.is_done("b.pdf", "22"));       // an ordinary error is done...
    EXPECT_FALSE(l.is_done("b.pdf", "22", true));  // ...unless errors are retried
    l.commit({rec("a.pdf", "11")});              // the redo
    EXPECT_TRUE(l.is_done("a.pdf", "11"));
  }
  std::vector<std::string> current;
  const auto lines = quarry::run::for_each_current_record(s.dir, [&](const std::string& l) { current.push_back(l); });
  EXPECT_EQ(lines, 3u);
  ASSERT_EQ(current.size(), 2u);  // b's error, then a's redo
  EXPECT_EQ(nlohmann::json::parse(current[1])["status"], "ok");
  // A crash before the redo's row: recovery supersedes the error row with the later line.
  {
    std::ofstream out(s.dir / Ledger::results_name, std::ios::app | std::ios::binary);
    out << e.line << "\n" << rec("a.pdf", "11").line << "\n";
  }
  Ledger l(s.dir);
  EXPECT_EQ(l.recovery().recovered_lines, 2u);
  EXPECT_TRUE(l.is_done("a.pdf", "11"));
  EXPECT_EQ(l.rows(), 2u);
}

}  // namespace
