// Question files (see rag.hpp).
#include <fstream>
#include <map>
#include <sstream>
#include <system_error>

#include "pipeline/rag/rag.hpp"

namespace quarry::rag {
namespace {

constexpr std::size_t kMaxFileBytes = 64u << 20;
constexpr std::size_t kMaxLineBytes = 1u << 20;

// Length of the valid UTF-8 sequence at s[i], or 0 when it is not one (RFC 3629: no overlongs,
// no surrogates, nothing above U+10FFFF).
std::size_t utf8_sequence(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const auto cont = [&](std::size_t k) { return i + k < s.size() && (b(k) & 0xC0) == 0x80; };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (!cont(1) || !cont(2)) return 0;
    if (c == 0xE0 && b(1) < 0xA0) return 0;  // overlong
    if (c == 0xED && b(1) >= 0xA0) return 0;  // surrogate
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    if (c == 0xF0 && b(1) < 0x90) return 0;  // overlong
    if (c == 0xF4 && b(1) >= 0x90) return 0;  // above U+10FFFF
    return 4;
  }
  return 0;
}

bool valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    std::size_t n = utf8_sequence(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string_view trim(std::string_view s) {
  const char* ws = " \t\r\n\f\v";
  auto b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  auto e = s.find_last_not_of(ws);
  return s.substr(b, e - b + 1);
}

}  // namespace

std::string QuestionFileError::message() const {
  std::string out = file;
  if (line > 0) out.append(":").append(std::to_string(line));  // append: GCC 12 -Wrestrict false positive on +
  out.append(": ").append(reason);
  return out;
}

tl::expected<std::vector<Question>, QuestionFileError> parse_questions(std::string_view text, const std::string& name) {
  auto fail = [&](std::size_t line, std::string reason) {
    return tl::make_unexpected(QuestionFileError{name, line, std::move(reason)});
  };
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
  std::vector<Question> out;
  std::map<std::string, std::size_t> id_line;
  std::size_t line_no = 0;
  for (std::size_t pos = 0; pos <= text.size();) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view raw = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (raw.size() > kMaxLineBytes) return fail(line_no, "line longer than 1 MiB");
    if (!valid_utf8(raw)) return fail(line_no, "not valid UTF-8");
    std::string_view line = trim(raw);
    if (line.empty()) {
      if (end == text.size()) break;
      continue;
    }
    Question q;
    q.line = line_no;
    if (line.front() == '{') {
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const nlohmann::json::parse_error& e) {
        // nlohmann's message: "[json.exception.parse_error.101] parse error at line 1, column 12: ..."
        std::string what = e.what();
        auto colon = what.find("column ");
        return fail(line_no, "not a JSON object: " + (colon == std::string::npos ? what : what.substr(colon)));
      }
      if (!j.is_object()) return fail(line_no, "a line starting with '{' must be a JSON object");
      auto it = j.find("question");
      if (it == j.end()) return fail(line_no, "JSON line has no \"question\"");
      if (!it->is_string()) return fail(line_no, "\"question\" is not a string");
      q.text = std::string(trim(it->get_ref<const std::string&>()));
      if (q.text.empty()) return fail(line_no, "\"question\" is empty");
      if (auto id = j.find("id"); id != j.end()) {
        if (id->is_string() && !id->get_ref<const std::string&>().empty())
          q.id = id->get<std::string>();
        else if (id->is_number_integer())
          q.id = id->dump();
        else
          return fail(line_no, "\"id\" must be a non-empty string or an integer");
      }
    } else {
      q.text = std::string(line);
    }
    if (q.id.empty()) q.id = std::to_string(line_no);
    auto [it, inserted] = id_line.emplace(q.id, line_no);
    if (!inserted)
      return fail(line_no, "id \"" + q.id + "\" already used on line " + std::to_string(it->second));
    out.push_back(std::move(q));
    if (end == text.size()) break;
  }
  if (out.empty()) return fail(0, "no questions (the file is empty or blank)");
  return out;
}

tl::expected<std::vector<Question>, QuestionFileError> read_questions(const std::filesystem::path& path) {
  const std::string name = path.string();
  std::error_code ec;
  auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status))
    return tl::make_unexpected(QuestionFileError{name, 0, "no such file"});
  if (std::filesystem::is_directory(status))
    return tl::make_unexpected(QuestionFileError{name, 0, "is a directory, not a question file"});
  auto size = std::filesystem::file_size(path, ec);
  if (!ec && size > kMaxFileBytes) return tl::make_unexpected(QuestionFileError{name, 0, "larger than 64 MiB"});
  std::ifstream in(path, std::ios::binary);
  if (!in) return tl::make_unexpected(QuestionFileError{name, 0, "cannot be opened for reading"});
  std::string text;
  char buf[65536];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    text.append(buf, static_cast<std::size_t>(in.gcount()));
    if (text.size() > kMaxFileBytes) return tl::make_unexpected(QuestionFileError{name, 0, "larger than 64 MiB"});
  }
  if (in.bad()) return tl::make_unexpected(QuestionFileError{name, 0, "read error"});
  return parse_questions(text, name);
}

}  // namespace quarry::rag
