// The batch task of `quarry run`: OpenAI Batch files (pipeline/openai/batch_format.hpp) in, one record
// per request line in results.jsonl (ledger key: the custom_id), and OUTDIR/output.jsonl in the OpenAI
// Batch output format, rebuilt from results.jsonl at the end of every run.
//
// A batch record is an ordinary record (records.hpp) with these members added:
//   "line" (1-based line number), "custom_id" (null for a line without one), "ledger_key" (the key the
//   ledger and its repair use), "output" (the record's output.jsonl line: {"id", "custom_id",
//   "response", "error"}).
// `source` is the batch file, `sha256` the hash of the line's bytes: a line edited since it was done is
// a new request and is done again (its new record supersedes the old one in output.jsonl).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "pipeline/openai/batch_format.hpp"
#include "pipeline/run/job.hpp"
#include "pipeline/run/messages.hpp"

namespace quarry::run {

/// Longest request line read (bytes); a longer line becomes an error record.
inline constexpr std::size_t k_max_batch_line_bytes = std::size_t{64} << 20;

/// SHA-256 of `bytes`, lowercase hex.
std::string sha256_hex(std::string_view bytes);

/// One request line of a batch file, checked, with its ledger key.
struct BatchItem {
  std::string source;           ///< the batch file's display name (source_name.hpp)
  std::string key;              ///< the custom_id, or (line problem without a usable custom_id) a key of the line
  std::string sha256;           ///< of the line's bytes
  openai::BatchLine line;       ///< line.problem non-empty: an error record ("line N: ...")
};

/// Reads the request lines of batch files in order (blank lines skipped), checks each envelope
/// (parse_batch_line) and rejects a custom_id seen before (in any file of the scan) as a duplicate.
/// Reads with O_NONBLOCK and never opens anything but a regular file. Throws std::runtime_error naming
/// the file when it cannot be opened or read.
class BatchScanner {
 public:
  /// `max_line_bytes`: a longer line is not kept in memory and becomes an error item.
  explicit BatchScanner(std::size_t max_line_bytes = k_max_batch_line_bytes) : max_line_(max_line_bytes) {}
  BatchScanner(const BatchScanner&) = delete;
  BatchScanner& operator=(const BatchScanner&) = delete;
  /// Starts on `path` (the next file of the scan; duplicates are checked across files).
  void open(const std::filesystem::path& path);
  /// The next non-blank line of the current file; nullopt at its end.
  std::optional<BatchItem> next();
  ~BatchScanner();

 private:
  std::size_t max_line_;
  int fd_ = -1;
  std::string source_;
  std::string buf_;
  std::size_t pos_ = 0;
  bool eof_ = false;
  std::size_t number_ = 0;
  std::set<std::string> seen_;
  bool read_more();
};

/// A finished batch record: `rec` (from make_record) with "line", "custom_id", "ledger_key" and
/// "output" added.
RecordMsg batch_record(RecordMsg rec, std::size_t line, const std::optional<std::string>& custom_id,
                       const nlohmann::ordered_json& output);

/// An `error` record for a request line: the error entry {"", rule, message} and the output line
/// `output` (a 4xx response or an error object).
RecordMsg batch_error_record(const Subject& s, std::size_t line, const std::optional<std::string>& custom_id,
                             const std::string& rule, const std::string& message, const nlohmann::ordered_json& output);

/// Writes OUTDIR/output.jsonl (a fresh temporary file renamed over it): for every request line of the
/// job's batch files, in their order, the output line of its latest record with the same line hash;
/// lines not done yet are left out. Returns the lines written. Throws std::runtime_error naming the
/// file on I/O errors.
std::size_t rebuild_batch_output(const JobSpec& job);

inline constexpr const char* k_batch_output_name = "output.jsonl";

}  // namespace quarry::run
