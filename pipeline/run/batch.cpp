#include "pipeline/run/batch.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <unordered_map>

#include "pipeline/extract/input_file.hpp"
#include "pipeline/run/ledger.hpp"
#include "pipeline/run/outdir.hpp"
#include "pipeline/run/records.hpp"
#include "pipeline/run/source_name.hpp"

namespace quarry::run {

namespace {

using json = nlohmann::ordered_json;

bool blank(std::string_view s) { return s.find_first_not_of(" \t\r\n") == std::string_view::npos; }

/// The key of a line that has no usable custom_id (none, or a duplicate): unit separator, file, line.
/// A custom_id is a JSON string a person wrote; one starting with U+001F is not expected.
std::string line_key(const std::string& source, std::size_t number) {
  return "\x1f" + source + ":" + std::to_string(number);
}

}  // namespace

std::string sha256_hex(std::string_view bytes) { return extract::sha256_of_bytes(bytes); }

BatchScanner::~BatchScanner() {
  if (fd_ >= 0) ::close(fd_);
}

void BatchScanner::open(const std::filesystem::path& path) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) throw std::runtime_error(path.string() + ": cannot open the batch file: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    throw std::runtime_error(path.string() + ": a batch input must be a regular file");
  }
  source_ = source_name(path.native()).display;
  buf_.clear();
  pos_ = 0;
  eof_ = false;
  number_ = 0;
}

bool BatchScanner::read_more() {
  if (eof_) return false;
  if (pos_ > 0) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
  char chunk[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd_, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::runtime_error(source_ + ": read error: " + std::strerror(errno));
    if (n == 0) {
      eof_ = true;
      return false;
    }
    buf_.append(chunk, static_cast<std::size_t>(n));
    return true;
  }
}

std::optional<BatchItem> BatchScanner::next() {
  if (fd_ < 0) return std::nullopt;
  for (;;) {
    // One line: up to '\n' (or the end of the file), at most max_line_ bytes kept.
    std::size_t nl;
    bool too_long = false;
    while ((nl = buf_.find('\n', pos_)) == std::string::npos) {
      if (buf_.size() - pos_ > max_line_) {
        too_long = true;  // skip the rest of this line without keeping it
        break;
      }
      if (!read_more()) break;
    }
    const std::size_t len = (nl == std::string::npos ? buf_.size() : nl) - pos_;
    if (too_long || len > max_line_) {
      ++number_;
      const std::string head = buf_.substr(pos_, std::min<std::size_t>(max_line_, 4096));
      if (!too_long) {
        pos_ = nl == std::string::npos ? buf_.size() : nl + 1;  // the whole line is in the buffer
      } else {
        for (;;) {  // skip to the end of the line, a chunk at a time
          buf_.clear();
          pos_ = 0;
          if (!read_more()) break;
          if ((nl = buf_.find('\n')) != std::string::npos) {
            pos_ = nl + 1;
            break;
          }
        }
      }
      BatchItem item;
      item.source = source_;
      item.line.number = number_;
      item.line.problem = "line " + std::to_string(number_) + ": longer than the limit of " +
                          std::to_string(max_line_) + " bytes";
      item.key = line_key(source_, number_);
      item.sha256 = sha256_hex(head);  // stable for the same line (the head and the limit)
      return item;
    }
    if (pos_ >= buf_.size() && eof_) return std::nullopt;
    const std::size_t end = nl == std::string::npos ? buf_.size() : nl;
    const std::string_view text = std::string_view(buf_).substr(pos_, end - pos_);
    ++number_;
    const std::size_t next_pos = nl == std::string::npos ? buf_.size() : nl + 1;
    if (blank(text)) {
      pos_ = next_pos;
      continue;
    }
    BatchItem item;
    item.source = source_;
    item.sha256 = sha256_hex(text);
    item.line = openai::parse_batch_line(text, number_);
    pos_ = next_pos;
    if (item.line.custom_id && !seen_.insert(*item.line.custom_id).second) {
      item.line.problem = "line " + std::to_string(number_) + ": custom_id \"" + *item.line.custom_id +
                          "\" is a duplicate (custom_ids must be unique in a batch)";
      item.key = line_key(source_, number_);
    } else {
      item.key = item.line.custom_id ? *item.line.custom_id : line_key(source_, number_);
    }
    return item;
  }
}

RecordMsg batch_record(RecordMsg rec, std::size_t line, const std::optional<std::string>& custom_id,
                       const json& output) {
  rec.record["line"] = line;
  rec.record["custom_id"] = custom_id ? json(*custom_id) : json();
  rec.record["ledger_key"] = rec.key;
  rec.record["output"] = output;
  return rec;
}

RecordMsg batch_error_record(const Subject& s, std::size_t line, const std::optional<std::string>& custom_id,
                             const std::string& rule, const std::string& message, const json& output) {
  return batch_record(error_record(s, nullptr, rule, message), line, custom_id, output);
}

std::size_t rebuild_batch_output(const JobSpec& job) {
  // The output line of the latest record of every (key, line hash).
  std::unordered_map<std::string, std::string> latest;
  for_each_current_record(job.output, [&](const std::string& line) {
    const auto j = json::parse(line, nullptr, false);  // ordered: the output line keeps its member order
    if (j.is_discarded() || !j.is_object() || !j.contains("ledger_key") || !j["ledger_key"].is_string() ||
        !j.contains("output") || !j["output"].is_object())
      return;
    const std::string sha = j.contains("sha256") && j["sha256"].is_string() ? j["sha256"].get<std::string>() : "";
    latest[j["ledger_key"].get<std::string>() + '\n' + sha] = j["output"].dump(-1, ' ', false, json::error_handler_t::replace);
  });
  std::string text;
  std::size_t lines = 0;
  BatchScanner scan;
  for (const auto& input : job.inputs) {
    scan.open(input);
    while (auto item = scan.next()) {
      const auto it = latest.find(item->key + '\n' + item->sha256);
      if (it == latest.end()) continue;
      text += it->second;
      text += '\n';
      ++lines;
    }
  }
  write_file_atomically(job.output / k_batch_output_name, text);
  return lines;
}

}  // namespace quarry::run
