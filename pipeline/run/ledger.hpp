// The output of a run and its ledger: OUTDIR/results.jsonl (one JSON line per finished record) and
// OUTDIR/ledger.sqlite (SQLite, one row per record key: source, sha256, status, method, attempts,
// retryable, byte offset and length of its latest line). Together they make runs resumable and
// exactly-once.
//
// Commit protocol (write-ahead on the results file, which is the source of truth):
//   1. append the records' lines to results.jsonl and fdatasync it;
//   2. upsert their ledger rows in one SQLite transaction (WAL, synchronous=FULL) and commit;
//   3. only then count them as done (progress, report).
// A kill -9 between 1 and 2 leaves complete lines that the ledger does not know; a kill during 1 may
// leave a torn last line. Opening repairs both before anything else happens:
//   - lines after the end of the last ledger row are read back: every complete line that parses gets
//     its ledger row (keyed by "ledger_key" when the record has one: batch records, keyed by custom_id) (so it is not written twice); the first torn or unparseable line and everything
//     after it are cut off (those documents were never reported done, and are redone);
//   - ledger rows pointing past the end of the file (the file was truncated by hand) are dropped.
// So a document is reported done only after both its line and its row are durable, and a document is
// never written twice: a rerun skips every (source, sha256) the ledger holds as done.
//
// Not done, though recorded: an `error` record caused by the run's settings (its error entries carry
// "retryable": true: the KV cache or the context too small) is redone by the next run, and with
// retry_errors every `error` record is. The redone record's line is appended and its row replaces the
// old one, so results.jsonl may hold superseded lines: the row points at the latest, which is the
// record that counts (the report reads those).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

struct sqlite3;

namespace quarry::run {

/// One finished document ready to be committed.
struct PendingRecord {
  std::string source, sha256, status, method;
  std::size_t attempts = 0;
  bool retryable = false;  ///< an error caused by the run's settings: not done, the next run redoes it
  std::string line;  ///< the compact JSON record, without the trailing newline
};

/// Whether a record (a parsed results.jsonl line, nlohmann::json or ordered_json) is an error caused
/// by the run's settings: status "error" with an error entry carrying "retryable": true.
template <class Json>
bool is_retryable_record(const Json& j) {
  if (!j.is_object() || !j.contains("status") || j["status"] != "error") return false;
  if (!j.contains("errors") || !j["errors"].is_array()) return false;
  for (const auto& e : j["errors"])
    if (e.is_object() && e.contains("retryable") && e["retryable"] == true) return true;
  return false;
}

/// What opening had to repair.
struct Recovery {
  std::size_t ledger_rows = 0;        ///< rows in the ledger after repair
  std::size_t recovered_lines = 0;    ///< complete lines found after the ledger's end and added to it
  std::uint64_t truncated_bytes = 0;  ///< torn tail cut off results.jsonl
  std::size_t dropped_rows = 0;       ///< rows that pointed past the end of results.jsonl
};

class Ledger {
 public:
  static constexpr const char* results_name = "results.jsonl";
  static constexpr const char* ledger_name = "ledger.sqlite";

  /// Opens (creating the folder and both files if needed) and repairs as described above.
  /// Throws std::runtime_error naming the file on I/O or SQLite errors.
  explicit Ledger(const std::filesystem::path& outdir);
  ~Ledger();
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;

  const Recovery& recovery() const { return recovery_; }

  /// Steps 1 and 2 of the protocol for a group of records (one fdatasync, one transaction).
  /// Throws std::runtime_error on I/O errors (then nothing of the group is reported done).
  void commit(const std::vector<PendingRecord>& records);

  /// Whether (source, sha256) is finished: a row that is not retryable (and, with `retry_errors`, not an
  /// error). For use from the writer thread only; other threads open a LedgerReader.
  bool is_done(const std::string& source, const std::string& sha256, bool retry_errors = false);

  std::size_t rows();

 private:
  std::filesystem::path dir_;
  sqlite3* db_ = nullptr;
  int fd_ = -1;
  std::uint64_t end_ = 0;  ///< size of results.jsonl
  Recovery recovery_;
  void repair();
};

/// A read-only view of the ledger for other threads (its own SQLite connection; WAL lets it read while
/// the writer commits). Sees every commit made before the call.
class LedgerReader {
 public:
  /// `retry_errors`: every `error` row counts as not done.
  explicit LedgerReader(const std::filesystem::path& outdir, bool retry_errors = false);
  ~LedgerReader();
  LedgerReader(const LedgerReader&) = delete;
  LedgerReader& operator=(const LedgerReader&) = delete;
  bool is_done(const std::string& source, const std::string& sha256);

 private:
  sqlite3* db_ = nullptr;
  bool retry_errors_ = false;
  struct Stmt;
  std::unique_ptr<Stmt> stmt_;
};

/// Calls `fn` with the latest line of every record key of OUTDIR (the lines the ledger rows point at),
/// in file order, reading results.jsonl without following a symbolic link. Throws std::runtime_error
/// naming the file on I/O or SQLite errors. Returns the number of lines in results.jsonl (superseded
/// lines included).
std::size_t for_each_current_record(const std::filesystem::path& outdir,
                                    const std::function<void(const std::string& line)>& fn);
/// The same with each line's ledger row: its record key (`source`, `source#question_id`, or a batch
/// request's custom_id) and sha256.
std::size_t for_each_current_row(
    const std::filesystem::path& outdir,
    const std::function<void(const std::string& key, const std::string& sha256, const std::string& line)>& fn);

}  // namespace quarry::run
