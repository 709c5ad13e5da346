#include "pipeline/run/ledger.hpp"

#include "pipeline/run/outdir.hpp"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace quarry::run {

namespace {

[[noreturn]] void sql_fail(sqlite3* db, const std::filesystem::path& file, const std::string& what) {
  throw std::runtime_error(file.string() + ": " + what + ": " + (db ? sqlite3_errmsg(db) : "out of memory"));
}

void exec(sqlite3* db, const std::filesystem::path& file, const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    throw std::runtime_error(file.string() + ": " + msg + " (in: " + sql + ")");
  }
}

/// RAII prepared statement.
class Statement {
 public:
  Statement(sqlite3* db, const std::filesystem::path& file, const char* sql) : db_(db) {
    if (sqlite3_prepare_v2(db, sql, -1, &st_, nullptr) != SQLITE_OK) sql_fail(db, file, "prepare");
  }
  ~Statement() { sqlite3_finalize(st_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  sqlite3_stmt* get() { return st_; }
  void bind(int i, const std::string& s) { sqlite3_bind_text(st_, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT); }
  void bind(int i, std::int64_t v) { sqlite3_bind_int64(st_, i, v); }
  void reset() {
    sqlite3_reset(st_);
    sqlite3_clear_bindings(st_);
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* st_ = nullptr;
};

bool query_done(sqlite3* db, const std::filesystem::path& file, sqlite3_stmt* st, const std::string& source,
                const std::string& sha, bool retry_errors) {
  sqlite3_reset(st);
  sqlite3_bind_text(st, 1, source.data(), static_cast<int>(source.size()), SQLITE_TRANSIENT);
  sqlite3_bind_text(st, 2, sha.data(), static_cast<int>(sha.size()), SQLITE_TRANSIENT);
  sqlite3_bind_int(st, 3, retry_errors ? 1 : 0);
  const int rc = sqlite3_step(st);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) sql_fail(db, file, "query");
  const bool found = rc == SQLITE_ROW;
  sqlite3_reset(st);
  return found;
}

/// Reads complete lines ('\n'-terminated) from `fd` starting at `offset`, through the descriptor
/// (never by path again: the file was opened without following links).
class FdLineReader {
 public:
  FdLineReader(int fd, std::uint64_t offset, const std::filesystem::path& file) : fd_(fd), off_(offset), file_(file) {}
  bool next(std::string& line) {
    for (;;) {
      const auto nl = buf_.find('\n', pos_);
      if (nl != std::string::npos) {
        line.assign(buf_, pos_, nl - pos_);
        pos_ = nl + 1;
        return true;
      }
      buf_.erase(0, pos_);
      pos_ = 0;
      char chunk[1 << 16];
      const ssize_t n = ::pread(fd_, chunk, sizeof chunk, static_cast<off_t>(off_));
      if (n < 0) {
        if (errno == EINTR) continue;
        throw std::runtime_error(file_.string() + ": cannot read back: " + std::strerror(errno));
      }
      if (n == 0) return false;
      buf_.append(chunk, static_cast<std::size_t>(n));
      off_ += static_cast<std::uint64_t>(n);
    }
  }

 private:
  int fd_;
  std::uint64_t off_;
  std::filesystem::path file_;
  std::string buf_;
  std::size_t pos_ = 0;
};

/// Done: a row that is not retryable, and (?3 = retry errors) not an error.
constexpr const char* k_done_sql =
    "SELECT 1 FROM documents WHERE source = ?1 AND sha256 = ?2 AND retryable = 0 AND (?3 = 0 OR status <> 'error')";

/// A record's row: a later line of the same key replaces the earlier one's row.
constexpr const char* k_upsert_sql =
    "INSERT INTO documents (source, sha256, status, method, attempts, offset, length, retryable)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"
    " ON CONFLICT (source, sha256) DO UPDATE SET status = excluded.status, method = excluded.method,"
    " attempts = excluded.attempts, offset = excluded.offset, length = excluded.length,"
    " retryable = excluded.retryable, finished_at = strftime('%Y-%m-%dT%H:%M:%fZ','now')";

}  // namespace

Ledger::Ledger(const std::filesystem::path& outdir) : dir_(outdir) {
  std::error_code ec;
  std::filesystem::create_directories(outdir, ec);
  if (ec) throw std::runtime_error(outdir.string() + ": cannot create the output folder: " + ec.message());
  const auto db_path = outdir / ledger_name;
  // No file of the folder is reached through a symbolic link (SQLITE_OPEN_NOFOLLOW covers the
  // database file; its journal files are checked here, before SQLite opens them).
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) refuse_symlink(db_path.string() + suffix);
  if (sqlite3_open_v2(db_path.c_str(), &db_,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX | SQLITE_OPEN_NOFOLLOW,
                      nullptr) != SQLITE_OK) {
    std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    throw std::runtime_error(db_path.string() + ": cannot open the ledger: " + msg);
  }
  sqlite3_busy_timeout(db_, 10000);
  try {
    exec(db_, db_path, "PRAGMA journal_mode=WAL");
    exec(db_, db_path, "PRAGMA synchronous=FULL");
    exec(db_, db_path,
         "CREATE TABLE IF NOT EXISTS documents ("
         " source TEXT NOT NULL, sha256 TEXT NOT NULL, status TEXT NOT NULL, method TEXT,"
         " attempts INTEGER NOT NULL, offset INTEGER NOT NULL, length INTEGER NOT NULL,"
         " finished_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')),"
         " retryable INTEGER NOT NULL DEFAULT 0,"
         " PRIMARY KEY (source, sha256))");
    // Ledgers written before the retryable column existed get it (their rows: not retryable).
    {
      Statement cols(db_, db_path, "SELECT 1 FROM pragma_table_info('documents') WHERE name = 'retryable'");
      if (sqlite3_step(cols.get()) != SQLITE_ROW)
        exec(db_, db_path, "ALTER TABLE documents ADD COLUMN retryable INTEGER NOT NULL DEFAULT 0");
    }
    const auto res_path = outdir / results_name;
    fd_ = open_nofollow(res_path, O_RDWR | O_CREAT);
    repair();
  } catch (...) {
    if (fd_ >= 0) ::close(fd_);
    sqlite3_close(db_);
    throw;
  }
}

Ledger::~Ledger() {
  if (fd_ >= 0) ::close(fd_);
  sqlite3_close(db_);
}

void Ledger::repair() {
  const auto res_path = dir_ / results_name;
  const auto db_path = dir_ / ledger_name;
  struct stat st {};
  if (fstat(fd_, &st) != 0) throw std::runtime_error(res_path.string() + ": stat: " + std::strerror(errno));
  const auto size = static_cast<std::uint64_t>(st.st_size);

  exec(db_, db_path, "BEGIN IMMEDIATE");
  try {
    {
      Statement del(db_, db_path, "DELETE FROM documents WHERE offset + length + 1 > ?1");
      del.bind(1, static_cast<std::int64_t>(size));
      if (sqlite3_step(del.get()) != SQLITE_DONE) sql_fail(db_, db_path, "repair");
      recovery_.dropped_rows = static_cast<std::size_t>(sqlite3_changes(db_));
    }
    std::uint64_t ledger_end = 0;
    {
      Statement q(db_, db_path, "SELECT COALESCE(MAX(offset + length + 1), 0) FROM documents");
      if (sqlite3_step(q.get()) != SQLITE_ROW) sql_fail(db_, db_path, "repair");
      ledger_end = static_cast<std::uint64_t>(sqlite3_column_int64(q.get(), 0));
    }
    // Read back the lines after the ledger's end.
    std::uint64_t good_end = ledger_end;
    if (size > ledger_end) {
      FdLineReader in(fd_, ledger_end, res_path);
      Statement ins(db_, db_path, k_upsert_sql);
      std::string line;
      std::uint64_t off = ledger_end;
      while (in.next(line)) {  // false at the end, or at a last line without its newline (torn)
        const auto j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_discarded() || !j.is_object() || !j.contains("source") || !j["source"].is_string() ||
            !j.contains("status") || !j["status"].is_string())
          break;
        const auto str = [&](const char* k) {
          return j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : std::string();
        };
        std::int64_t attempts = 0;
        if (j.contains("stats") && j["stats"].is_object() && j["stats"].contains("attempts") &&
            j["stats"]["attempts"].is_number_integer())
          attempts = j["stats"]["attempts"].get<std::int64_t>();
        // The ledger key: the record's source (already the display form of a name that is not
        // UTF-8), with "#question_id" for a rag record, as the writer keys it.
        // A batch record names its key (the request's custom_id) itself.
        std::string key = str("source");
        if (j.contains("question_id") && j["question_id"].is_string()) key += "#" + j["question_id"].get<std::string>();
        if (j.contains("ledger_key") && j["ledger_key"].is_string()) key = j["ledger_key"].get<std::string>();
        ins.reset();
        ins.bind(1, key);
        ins.bind(2, str("sha256"));
        ins.bind(3, str("status"));
        ins.bind(4, str("method"));
        ins.bind(5, attempts);
        ins.bind(6, static_cast<std::int64_t>(off));
        ins.bind(7, static_cast<std::int64_t>(line.size()));
        ins.bind(8, static_cast<std::int64_t>(is_retryable_record(j) ? 1 : 0));
        if (sqlite3_step(ins.get()) != SQLITE_DONE) sql_fail(db_, db_path, "repair insert");
        ++recovery_.recovered_lines;  // a line after the ledger's end always supersedes (lines only grow)
        off += line.size() + 1;
        good_end = off;
      }
    }
    if (good_end < size) {
      if (::ftruncate(fd_, static_cast<off_t>(good_end)) != 0 || ::fdatasync(fd_) != 0)
        throw std::runtime_error(res_path.string() + ": cannot cut the torn tail: " + std::strerror(errno));
      recovery_.truncated_bytes = size - good_end;
    }
    end_ = good_end;
    exec(db_, db_path, "COMMIT");
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
  recovery_.ledger_rows = rows();
}

std::size_t Ledger::rows() {
  Statement q(db_, dir_ / ledger_name, "SELECT COUNT(*) FROM documents");
  if (sqlite3_step(q.get()) != SQLITE_ROW) sql_fail(db_, dir_ / ledger_name, "count");
  return static_cast<std::size_t>(sqlite3_column_int64(q.get(), 0));
}

void Ledger::commit(const std::vector<PendingRecord>& records) {
  if (records.empty()) return;
  const auto res_path = dir_ / results_name;
  const auto db_path = dir_ / ledger_name;
  std::string buf;
  std::vector<std::uint64_t> offsets;
  offsets.reserve(records.size());
  for (const auto& r : records) {
    offsets.push_back(end_ + buf.size());
    buf += r.line;
    buf += '\n';
  }
  // 1. append + fdatasync. pwrite at our own end: a partial earlier write is overwritten, not kept.
  std::size_t done = 0;
  while (done < buf.size()) {
    const ssize_t n = ::pwrite(fd_, buf.data() + done, buf.size() - done, static_cast<off_t>(end_ + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(res_path.string() + ": write failed: " + std::strerror(errno));
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fdatasync(fd_) != 0) throw std::runtime_error(res_path.string() + ": fdatasync failed: " + std::strerror(errno));
  // 2. ledger rows, one transaction.
  exec(db_, db_path, "BEGIN IMMEDIATE");
  try {
    Statement ins(db_, db_path, k_upsert_sql);
    for (std::size_t i = 0; i < records.size(); ++i) {
      const auto& r = records[i];
      ins.reset();
      ins.bind(1, r.source);
      ins.bind(2, r.sha256);
      ins.bind(3, r.status);
      ins.bind(4, r.method);
      ins.bind(5, static_cast<std::int64_t>(r.attempts));
      ins.bind(6, static_cast<std::int64_t>(offsets[i]));
      ins.bind(7, static_cast<std::int64_t>(r.line.size()));
      ins.bind(8, static_cast<std::int64_t>(r.retryable ? 1 : 0));
      if (sqlite3_step(ins.get()) != SQLITE_DONE) sql_fail(db_, db_path, "insert of " + r.source);
    }
    exec(db_, db_path, "COMMIT");
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
  end_ += buf.size();
}

bool Ledger::is_done(const std::string& source, const std::string& sha256, bool retry_errors) {
  Statement q(db_, dir_ / ledger_name, k_done_sql);
  return query_done(db_, dir_ / ledger_name, q.get(), source, sha256, retry_errors);
}

std::size_t for_each_current_record(const std::filesystem::path& outdir,
                                    const std::function<void(const std::string& line)>& fn) {
  return for_each_current_row(outdir, [&](const std::string&, const std::string&, const std::string& line) { fn(line); });
}

std::size_t for_each_current_row(
    const std::filesystem::path& outdir,
    const std::function<void(const std::string& key, const std::string& sha256, const std::string& line)>& fn) {
  const auto db_path = outdir / Ledger::ledger_name;
  const auto res_path = outdir / Ledger::results_name;
  for (const char* suffix : {"", "-wal", "-shm"}) refuse_symlink(db_path.string() + suffix);
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOFOLLOW, nullptr) != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    throw std::runtime_error(db_path.string() + ": cannot open the ledger: " + msg);
  }
  std::unique_ptr<sqlite3, int (*)(sqlite3*)> guard(db, sqlite3_close);
  sqlite3_busy_timeout(db, 10000);
  const int fd = open_nofollow(res_path, O_RDONLY);
  std::unique_ptr<int, void (*)(int*)> fd_guard(new int(fd), [](int* p) {
    ::close(*p);
    delete p;
  });
  Statement q(db, db_path, "SELECT source, sha256, offset, length FROM documents ORDER BY offset");
  std::string line, key, sha;
  const auto text = [&](int col) {
    const auto* t = reinterpret_cast<const char*>(sqlite3_column_text(q.get(), col));
    return std::string(t ? t : "", static_cast<std::size_t>(sqlite3_column_bytes(q.get(), col)));
  };
  for (;;) {
    const int rc = sqlite3_step(q.get());
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) sql_fail(db, db_path, "read");
    key = text(0);
    sha = text(1);
    const auto off = static_cast<off_t>(sqlite3_column_int64(q.get(), 2));
    const auto len = static_cast<std::size_t>(sqlite3_column_int64(q.get(), 3));
    line.resize(len);
    std::size_t got = 0;
    while (got < len) {
      const ssize_t n = ::pread(fd, line.data() + got, len - got, off + static_cast<off_t>(got));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw std::runtime_error(res_path.string() + ": cannot read a record back");
      got += static_cast<std::size_t>(n);
    }
    fn(key, sha, line);
  }
  // All lines, superseded ones included.
  std::size_t lines = 0;
  FdLineReader all(fd, 0, res_path);
  while (all.next(line)) ++lines;
  return lines;
}

struct LedgerReader::Stmt {
  sqlite3_stmt* st = nullptr;
  std::filesystem::path file;
  ~Stmt() { sqlite3_finalize(st); }
};

LedgerReader::LedgerReader(const std::filesystem::path& outdir, bool retry_errors)
    : retry_errors_(retry_errors), stmt_(std::make_unique<Stmt>()) {
  stmt_->file = outdir / Ledger::ledger_name;
  if (sqlite3_open_v2(stmt_->file.c_str(), &db_, SQLITE_OPEN_READONLY | SQLITE_OPEN_FULLMUTEX | SQLITE_OPEN_NOFOLLOW,
                      nullptr) != SQLITE_OK) {
    std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    throw std::runtime_error(stmt_->file.string() + ": cannot open the ledger: " + msg);
  }
  sqlite3_busy_timeout(db_, 10000);
  if (sqlite3_prepare_v2(db_, k_done_sql, -1, &stmt_->st, nullptr) != SQLITE_OK) {
    std::string msg = sqlite3_errmsg(db_);
    sqlite3_close(db_);
    throw std::runtime_error(stmt_->file.string() + ": " + msg);
  }
}

LedgerReader::~LedgerReader() {
  stmt_.reset();
  sqlite3_close(db_);
}

bool LedgerReader::is_done(const std::string& source, const std::string& sha256) {
  return query_done(db_, stmt_->file, stmt_->st, source, sha256, retry_errors_);
}

}  // namespace quarry::run
