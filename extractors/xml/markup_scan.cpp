#include "extractors/xml/markup_scan.hpp"

#include <algorithm>
#include <cctype>

namespace quarry::xml {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'; }

bool starts_with_ci(std::string_view s, std::size_t at, std::string_view prefix) {
  if (s.size() - at < prefix.size()) return false;
  for (std::size_t k = 0; k < prefix.size(); ++k)
    if (std::tolower(static_cast<unsigned char>(s[at + k])) != prefix[k]) return false;
  return true;
}

// First position at or after `from` where `needle` (lower case) starts, ignoring case; npos if none.
std::size_t find_ci(std::string_view s, std::size_t from, std::string_view needle) {
  for (std::size_t at = s.find('<', from); at != std::string_view::npos; at = s.find('<', at + 1))
    if (starts_with_ci(s, at, needle)) return at;
  return std::string_view::npos;
}

// Position just past the end of the construct that ends with `end`, or the end of the text.
std::size_t past(std::string_view s, std::size_t from, std::string_view end) {
  const std::size_t at = s.find(end, from);
  return at == std::string_view::npos ? s.size() : at + end.size();
}

}  // namespace

std::string ScanResult::message(std::string_view format, const ScanLimits& limits) const {
  const std::string at = " (line " + std::to_string(line) + ")";
  switch (kind) {
    case ok:
      return {};
    case entity_declaration:
      return std::string(format) + " declares entities in a DTD; refused (entity expansion / external entities are not allowed)" + at;
    case too_deep:
      return std::string(format) + " nesting deeper than " + std::to_string(limits.max_depth) + " elements" + at;
    case too_many_attributes:
      return std::string(format) + " element with more than " + std::to_string(limits.max_attributes) + " attributes" + at;
    case too_many_nodes:
      return std::string(format) + " has more than " + std::to_string(limits.max_nodes) +
             " elements and attributes (the parsed tree would take too much memory)" + at;
  }
  return {};
}

ScanResult scan_markup(std::string_view s, const ScanLimits& limits) {
  const std::size_t n = s.size();
  const auto fail = [&](ScanResult::Kind kind, std::size_t at) {
    return ScanResult{kind, 1 + static_cast<std::size_t>(std::count(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(at), '\n'))};
  };
  int depth = 0;
  std::uint64_t nodes = 0;
  std::size_t i = 0;
  while (i < n) {
    i = s.find('<', i);
    if (i == std::string_view::npos || i + 1 >= n) break;
    const std::size_t start = i;
    const char c = s[i + 1];
    if (s.compare(i, 4, "<!--") == 0) {
      i = past(s, i + 4, "-->");
    } else if (!limits.html && s.compare(i, 9, "<![CDATA[") == 0) {
      i = past(s, i + 9, "]]>");
    } else if (c == '?') {
      i = past(s, i + 2, limits.html ? ">" : "?>");
    } else if (starts_with_ci(s, i, "<!doctype")) {
      // The document type declaration; its internal subset ([...]) is where entities are declared.
      std::size_t j = i + 9;
      while (j < n && s[j] != '>') {
        if (s[j] == '"' || s[j] == '\'') {
          j = past(s, j + 1, std::string_view(&s[j], 1));
        } else if (s[j] == '[') {
          ++j;
          while (j < n && s[j] != ']') {
            if (s.compare(j, 4, "<!--") == 0) {
              j = past(s, j + 4, "-->");
            } else if (s[j] == '"' || s[j] == '\'') {
              j = past(s, j + 1, std::string_view(&s[j], 1));
            } else if (s.compare(j, 8, "<!ENTITY") == 0) {
              return fail(ScanResult::entity_declaration, j);
            } else {
              ++j;
            }
          }
          if (j < n) ++j;
        } else {
          ++j;
        }
      }
      i = j + 1;
    } else if (c == '!') {
      i = past(s, i + 2, ">");  // another declaration (or, in HTML, a bogus comment)
    } else if (c == '/') {
      if (!limits.html && depth > 0) --depth;
      i = past(s, i + 2, ">");
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':' || static_cast<unsigned char>(c) >= 0x80) {
      // A start tag: its name, then attributes (name, optionally = and a value) up to > or />.
      std::size_t j = i + 1;
      while (j < n && !is_space(s[j]) && s[j] != '>' && s[j] != '/') ++j;
      const std::string_view name = s.substr(i + 1, j - i - 1);
      if (++nodes > limits.max_nodes) return fail(ScanResult::too_many_nodes, start);
      int attributes = 0;
      bool empty = false;
      while (j < n) {
        const char ch = s[j];
        if (is_space(ch)) {
          ++j;
        } else if (ch == '>') {
          ++j;
          break;
        } else if (ch == '/') {
          if (j + 1 < n && s[j + 1] == '>') {
            empty = true;
            j += 2;
            break;
          }
          ++j;
        } else {
          std::size_t k = j;
          while (k < n && !is_space(s[k]) && s[k] != '=' && s[k] != '>' && s[k] != '/') ++k;
          if (k == j) {  // a stray '='
            ++j;
            continue;
          }
          if (++attributes > limits.max_attributes) return fail(ScanResult::too_many_attributes, start);
          if (++nodes > limits.max_nodes) return fail(ScanResult::too_many_nodes, start);
          j = k;
          while (j < n && is_space(s[j])) ++j;
          if (j < n && s[j] == '=') {
            ++j;
            while (j < n && is_space(s[j])) ++j;
            if (j < n && (s[j] == '"' || s[j] == '\'')) {
              j = past(s, j + 1, std::string_view(&s[j], 1));
            } else {
              while (j < n && !is_space(s[j]) && s[j] != '>') ++j;
            }
          }
        }
      }
      if (!limits.html && !empty && ++depth > limits.max_depth) return fail(ScanResult::too_deep, start);
      if (limits.html && !empty) {
        // Raw text: what follows <script> or <style> up to its end tag is not markup.
        std::string lname(name);
        std::transform(lname.begin(), lname.end(), lname.begin(), [](unsigned char ch) { return std::tolower(ch); });
        if (lname == "script" || lname == "style") {
          const std::size_t end = find_ci(s, j, lname == "script" ? "</script" : "</style");
          j = end == std::string_view::npos ? n : end;
        }
      }
      i = j;
    } else {
      ++i;  // a '<' that starts nothing (text, in HTML)
    }
  }
  return {};
}

}  // namespace quarry::xml
