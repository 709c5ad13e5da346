// Media type detection from content; the file extension only breaks ties.
//
// Order of checks: PDF header (within the first 1024 bytes, as PDF readers accept), known binary
// signatures, text encoding (UTF-32 or UTF-16 BOM, NUL bytes), then the structure of the text:
// markup whose first element is <html> (or an HTML doctype, or a well-known HTML element) is HTML,
// other markup is XML, and plain text is Markdown when it shows Markdown syntax.
#include <algorithm>
#include <array>
#include <cctype>

#include "extractors/extract.hpp"
#include "extractors/formats.hpp"

namespace quarry {
namespace {

constexpr const char* kPdf = "application/pdf";
constexpr const char* kHtml = "text/html";
constexpr const char* kXml = "application/xml";
constexpr const char* kMarkdown = "text/markdown";
constexpr const char* kText = "text/plain";
constexpr const char* kBinary = "application/octet-stream";

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

bool starts_with_ci(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && lower(s.substr(0, prefix.size())) == prefix;
}

bool is_binary_signature(std::string_view b) {
  static constexpr std::array<std::string_view, 9> kMagic = {
      "\x89PNG", "\xFF\xD8\xFF", "GIF87a", "GIF89a", "PK\x03\x04", "\x1F\x8B", "%!PS", "\x7F" "ELF",
      "II*\0"};
  for (auto m : kMagic)
    if (b.substr(0, m.size()) == m) return true;
  return false;
}

// Local name of the first element after the prolog (XML declaration, processing instructions,
// comments, DOCTYPE), lower-cased; "" when there is none in `s`.
std::string first_element(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    i = s.find('<', i);
    if (i == std::string_view::npos || i + 1 >= s.size()) return {};
    const char c = s[i + 1];
    if (c == '?') {
      i = s.find("?>", i);
    } else if (s.substr(i, 4) == "<!--") {
      i = s.find("-->", i);
    } else if (c == '!') {
      i = s.find('>', i);
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::size_t e = i + 1;
      while (e < s.size() && !std::isspace(static_cast<unsigned char>(s[e])) && s[e] != '>' && s[e] != '/')
        ++e;
      std::string name = lower(s.substr(i + 1, e - i - 1));
      if (auto colon = name.find(':'); colon != std::string::npos) name = name.substr(colon + 1);
      return name;
    } else {
      return {};
    }
    if (i == std::string_view::npos) return {};
    ++i;
  }
  return {};
}

bool is_html_element(const std::string& name) {
  static constexpr std::array<std::string_view, 32> kHtml = {
      "html", "head", "body", "title", "meta", "link", "div", "p", "table", "span", "a", "h1",
      "h2", "h3", "h4", "h5", "h6", "ul", "ol", "br", "script", "style", "form", "section",
      "article", "header", "nav", "main", "footer", "b", "font", "center"};
  return std::find(kHtml.begin(), kHtml.end(), name) != kHtml.end();
}

// Number of distinct kinds of Markdown syntax in the first 64 KiB: ATX headings, fenced code,
// bullet or numbered lists, block quotes, pipe-table separators, inline links, emphasis, code spans.
int markdown_signals(std::string_view s) {
  s = s.substr(0, 64 * 1024);
  bool heading = false, fence = false, list = false, quote = false, table = false;
  std::size_t start = 0;
  while (start < s.size()) {
    std::size_t end = s.find('\n', start);
    if (end == std::string_view::npos) end = s.size();
    std::string_view line = s.substr(start, end - start);
    std::size_t h = 0;
    while (h < line.size() && line[h] == '#') ++h;
    if (h >= 1 && h <= 6 && h < line.size() && line[h] == ' ') heading = true;
    if (line.substr(0, 3) == "```" || line.substr(0, 3) == "~~~") fence = true;
    std::string_view t = line;
    while (!t.empty() && t.front() == ' ') t.remove_prefix(1);
    if (t.size() > 2 && (t[0] == '-' || t[0] == '*' || t[0] == '+') && t[1] == ' ') list = true;
    if (t.size() > 2 && t[0] == '>' && t[1] == ' ') quote = true;
    if (t.find("|---") != std::string_view::npos || t.find("| ---") != std::string_view::npos ||
        t.find("|:--") != std::string_view::npos)
      table = true;
    start = end + 1;
  }
  const bool link = s.find("](") != std::string_view::npos;
  const bool strong = s.find("**") != std::string_view::npos;
  return heading + fence + list + quote + table + link + strong;
}

// UTF-16 without a byte order mark: in the first bytes, NULs sit on one parity only.
bool looks_utf16_without_bom(std::string_view head) {
  std::size_t even = 0, odd = 0;
  for (std::size_t i = 0; i < head.size(); ++i)
    if (head[i] == '\0') (i % 2 ? odd : even)++;
  const std::size_t half = head.size() / 2;
  return half >= 8 && ((odd > half * 3 / 4 && even == 0) || (even > half * 3 / 4 && odd == 0));
}

}  // namespace

std::string detect_media_type(std::string_view bytes, const std::filesystem::path& name_hint) {
  const std::string ext = lower(name_hint.extension().string());
  const bool ext_html = ext == ".html" || ext == ".htm" || ext == ".xhtml";
  const bool ext_md = ext == ".md" || ext == ".markdown" || ext == ".mdown";
  if (bytes.empty()) {
    if (ext == ".pdf") return kPdf;
    if (ext_html) return kHtml;
    if (ext == ".xml") return kXml;
    if (ext_md) return kMarkdown;
    return ext == ".txt" ? kText : kBinary;
  }
  const std::string_view head = bytes.substr(0, 1024);
  if (head.find("%PDF-") != std::string_view::npos) return kPdf;
  if (is_binary_signature(bytes)) return kBinary;

  // Text to sniff, in UTF-8: a UTF-16 head is converted (a truncated last unit is dropped).
  std::string sniff;
  const std::string_view probe = bytes.substr(0, 64 * 1024);
  if (probe.starts_with(std::string_view("\xFF\xFE\0\0", 4)) || probe.starts_with(std::string_view("\0\0\xFE\xFF", 4))) {
    const char* enc = probe[0] == '\xFF' ? "UTF-32LE" : "UTF-32BE";
    auto r = detail::iconv_to_utf8(probe.substr(4, (probe.size() - 4) & ~std::size_t{3}), enc, "");
    if (!r) return kBinary;
    sniff = std::move(*r);
  } else if (probe.substr(0, 2) == "\xFF\xFE" || probe.substr(0, 2) == "\xFE\xFF") {
    const char* enc = probe[0] == '\xFF' ? "UTF-16LE" : "UTF-16BE";
    auto r = detail::iconv_to_utf8(probe.substr(2, (probe.size() - 2) & ~std::size_t{1}), enc, "");
    if (!r) return kBinary;
    sniff = std::move(*r);
  } else if (head.find('\0') != std::string_view::npos) {
    if (!looks_utf16_without_bom(head)) return kBinary;
    const bool le = head.size() > 1 && head[1] == '\0';
    auto r = detail::iconv_to_utf8(probe.substr(0, probe.size() & ~std::size_t{1}),
                                   le ? "UTF-16LE" : "UTF-16BE", "");
    if (!r) return kBinary;
    sniff = std::move(*r);
  } else {
    sniff.assign(probe);
    if (sniff.compare(0, 3, "\xEF\xBB\xBF") == 0) sniff.erase(0, 3);
  }

  // Control characters other than tab, line ends and form feed mean binary data.
  std::size_t controls = 0;
  for (unsigned char c : sniff)
    if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r' && c != '\f') || c == 0x7F) ++controls;
  if (controls * 100 > sniff.size() + 100) return kBinary;

  std::string_view s = sniff;
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  if (starts_with_ci(s, "<!doctype html")) return kHtml;
  if (!s.empty() && s.front() == '<') {
    const std::string root = first_element(s);
    if (root == "html") return kHtml;
    if (s.substr(0, 5) == "<?xml") return kXml;
    if (ext_html || is_html_element(root)) return kHtml;
    if (!root.empty()) return kXml;
  }
  const int md = markdown_signals(s);
  // Three kinds of syntax decide alone; two decide unless the name says .txt; a .md name decides
  // for text that shows none (prose is valid Markdown).
  if (md >= 3 || ext_md || (md >= 2 && ext != ".txt")) return kMarkdown;
  return kText;
}

}  // namespace quarry
