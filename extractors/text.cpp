// Plain text and Markdown: decode to UTF-8, split into lines; blank lines separate blocks.
//
// Encodings: UTF-8 (optional BOM), UTF-16 LE/BE with a BOM, and, for bytes that are not UTF-8, the
// legacy 8-bit code pages met in Hungarian and Western European files: windows-1250, ISO-8859-2 and
// windows-1252. All conversions go through glibc's iconv(3).
#include <iconv.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include "extractors/formats.hpp"

namespace quarry::detail {

bool valid_utf8(std::string_view s, std::size_t* bad_offset) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  std::size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len;
    std::uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2, cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3, cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4, cp = c & 0x07;
    } else {
      if (bad_offset) *bad_offset = i;
      return false;
    }
    if (i + len > n) {
      if (bad_offset) *bad_offset = i;
      return false;
    }
    for (std::size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) {
        if (bad_offset) *bad_offset = i;
        return false;
      }
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    const bool overlong = (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000);
    if (overlong || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) {
      if (bad_offset) *bad_offset = i;
      return false;
    }
    i += len;
  }
  return true;
}

Expected<std::string> iconv_to_utf8(std::string_view bytes, const char* from, const std::string& source) {
  iconv_t cd = iconv_open("UTF-8", from);
  if (cd == reinterpret_cast<iconv_t>(-1))
    return tl::unexpected(ExtractError{source, std::string("encoding ") + from + " is not available"});
  std::string out;
  out.resize(bytes.size() * 2 + 16);
  char* in = const_cast<char*>(bytes.data());
  std::size_t in_left = bytes.size();
  std::size_t done = 0;
  std::string error;
  while (in_left > 0) {
    char* o = out.data() + done;
    std::size_t o_left = out.size() - done;
    const std::size_t r = iconv(cd, &in, &in_left, &o, &o_left);
    done = out.size() - o_left;
    if (r != static_cast<std::size_t>(-1)) break;
    if (errno == E2BIG) {
      out.resize(out.size() * 2);
      continue;
    }
    const std::size_t at = bytes.size() - in_left;
    error = std::string(errno == EINVAL ? "incomplete " : "invalid ") + from + " sequence at byte " +
            std::to_string(at);
    break;
  }
  iconv_close(cd);
  if (!error.empty()) return tl::unexpected(ExtractError{source, error});
  out.resize(done);
  return out;
}

namespace {

constexpr std::string_view kUtf8Bom = "\xEF\xBB\xBF";

// UTF-8 of bytes 0x80-0xFF in an 8-bit code page; "" where the code page leaves a byte undefined.
std::array<std::string, 128> high_half(const char* enc) {
  std::array<std::string, 128> t;
  iconv_t cd = iconv_open("UTF-8", enc);
  if (cd == reinterpret_cast<iconv_t>(-1)) return t;
  for (int c = 0x80; c < 0x100; ++c) {
    char in = static_cast<char>(c);
    char out[8];
    char* ip = &in;
    char* op = out;
    std::size_t il = 1, ol = sizeof out;
    if (iconv(cd, &ip, &il, &op, &ol) != static_cast<std::size_t>(-1))
      t[c - 0x80].assign(out, static_cast<std::size_t>(op - out));
    iconv(cd, nullptr, nullptr, nullptr, nullptr);
  }
  iconv_close(cd);
  return t;
}

// Which of the three legacy code pages is meant.
//  1. A byte one code page leaves undefined rules it out (windows-1252: 81 8D 8F 90 9D;
//     windows-1250: 81 83 88 90 98).
//  2. windows-1250 (Central European) against windows-1252 (Western): every byte on which they
//     disagree votes for the code page in which it decodes to a letter of that region, weighted 2 for
//     letters frequent in its languages (Hungarian ő ű, Czech/Polish č ř š ž ł ą ę ...; French/
//     Italian/Spanish/Nordic è à ò ù ñ ø å ã) and 1 for rarer ones. Ties go to windows-1252.
//  3. ISO-8859-2 leaves 0x80-0x9F to C1 control codes, which text never uses; with none of those,
//     bytes 0xA1-0xBF that are letters in ISO-8859-2 but not in windows-1250 (ą ś ź ...) choose it.
}  // namespace

const char* guess_8bit_encoding(std::string_view bytes) {
  static constexpr std::string_view kCentralStrong = "őűŐŰčřšžěůłąęśćńźżČŘŠŽĚŮŁĄĘŚĆŃŹŻ";
  static constexpr std::string_view kCentralWeak = "ŕĺľťďňăşţŔĹĽŤĎŇĂŞŢ";
  static constexpr std::string_view kWesternStrong = "èàòùìñøåæãÈÀÒÙÌÑØÅÆÃ";
  static constexpr std::string_view kWesternWeak = "õûêâîôëïÿœÕÛÊÂÎÔËÏŸŒ";
  std::array<std::size_t, 256> count{};
  for (unsigned char c : bytes) ++count[c];
  const auto t1250 = high_half("WINDOWS-1250");
  const auto t1252 = high_half("WINDOWS-1252");
  auto in = [](std::string_view set, const std::string& ch) {
    return !ch.empty() && set.find(ch) != std::string_view::npos;
  };
  bool can_1250 = true, can_1252 = true, has_c1 = false;
  long central = 0, western = 0;
  for (int c = 0x80; c < 0x100; ++c) {
    if (count[c] == 0) continue;
    const std::string& a = t1250[c - 0x80];
    const std::string& w = t1252[c - 0x80];
    can_1250 = can_1250 && !a.empty();
    can_1252 = can_1252 && !w.empty();
    has_c1 = has_c1 || c <= 0x9F;
    if (a == w) continue;
    const long n = static_cast<long>(count[c]);
    central += n * (in(kCentralStrong, a) ? 2 : in(kCentralWeak, a) ? 1 : 0);
    western += n * (in(kWesternStrong, w) ? 2 : in(kWesternWeak, w) ? 1 : 0);
  }
  const bool western_wins = can_1252 && (!can_1250 || western >= central);
  if (western_wins) return "WINDOWS-1252";
  if (has_c1) return "WINDOWS-1250";
  const auto t8859 = high_half("ISO-8859-2");
  long iso_only = 0;
  for (int c = 0xA1; c <= 0xBF; ++c) {
    if (count[c] == 0) continue;
    const std::string& i = t8859[c - 0x80];
    const std::string& a = t1250[c - 0x80];
    const bool letter_i = in(kCentralStrong, i) || in(kCentralWeak, i);
    const bool letter_a = in(kCentralStrong, a) || in(kCentralWeak, a);
    if (i != a && letter_i && !letter_a) iso_only += static_cast<long>(count[c]);
  }
  return iso_only > 0 ? "ISO-8859-2" : "WINDOWS-1250";
}

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; }

}  // namespace

Expected<Decoded> decode_text(std::string_view bytes, const std::string& source) {
  if (bytes.size() >= 2 && (bytes.substr(0, 2) == "\xFF\xFE" || bytes.substr(0, 2) == "\xFE\xFF")) {
    const bool le = bytes[0] == '\xFF';
    const char* enc = le ? "UTF-16LE" : "UTF-16BE";
    auto r = iconv_to_utf8(bytes.substr(2), enc, source);
    if (!r) return tl::unexpected(ExtractError{source, "text declares UTF-16 by its BOM but is not: " + r.error().reason});
    return Decoded{std::move(*r), enc};
  }
  if (bytes.substr(0, 3) == kUtf8Bom) bytes.remove_prefix(3);
  std::size_t bad = 0;
  if (valid_utf8(bytes, &bad)) return Decoded{std::string(bytes), "UTF-8"};
  // Not UTF-8. Bytes that are control characters in every 8-bit code page mean binary data.
  for (unsigned char c : bytes)
    if (c == 0)
      return tl::unexpected(ExtractError{source, "text contains NUL bytes and has no UTF-16 byte order mark (binary data?)"});
  const char* enc = guess_8bit_encoding(bytes);
  auto r = iconv_to_utf8(bytes, enc, source);
  if (!r)
    return tl::unexpected(ExtractError{
        source, "text is not valid UTF-8 (first bad byte at offset " + std::to_string(bad) +
                    ") and not " + enc + " either: " + r.error().reason});
  return Decoded{std::move(*r), enc};
}

std::size_t append_lines(Page& page, std::string_view text, int* block) {
  std::size_t added = 0;
  bool blank_run = false;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    while (!line.empty() && is_space(line.back())) line.remove_suffix(1);
    // A form feed at the start of a line (page break in text files) is not text.
    while (!line.empty() && line.front() == '\f') line.remove_prefix(1);
    if (line.empty()) {
      if (!blank_run && !page.lines.empty()) ++*block;
      blank_run = true;
    } else {
      blank_run = false;
      page.lines.push_back(Line{std::string(line), std::nullopt, *block});
      added += line.size() + 1;
    }
    if (end == text.size()) break;
    start = end + 1;
  }
  return added;
}

Expected<Document> extract_text(std::string_view bytes, Document doc, const ExtractOptions& opts) {
  if (bytes.size() > opts.max_text_bytes)
    return tl::unexpected(ExtractError{doc.source, "text larger than the limit of " +
                                                       std::to_string(opts.max_text_bytes) + " bytes"});
  auto decoded = decode_text(bytes, doc.source);
  if (!decoded) return tl::unexpected(decoded.error());
  std::string& text = decoded->utf8;
  // Normalise line ends: CRLF and lone CR become LF.
  std::string norm;
  norm.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\r') {
      norm += '\n';
      if (i + 1 < text.size() && text[i + 1] == '\n') ++i;
    } else {
      norm += text[i];
    }
  }
  if (norm.size() > opts.max_text_bytes)
    return tl::unexpected(ExtractError{doc.source, "decoded text larger than the limit of " +
                                                       std::to_string(opts.max_text_bytes) + " bytes"});
  doc.metadata["encoding"] = decoded->encoding;
  if (decoded->encoding != "UTF-8" && decoded->encoding.rfind("UTF-16", 0) != 0)
    doc.warnings.push_back("text is not UTF-8; decoded as " + decoded->encoding + " (guessed)");
  Page page;
  int block = 0;
  append_lines(page, norm, &block);
  if (page.lines.empty()) return tl::unexpected(ExtractError{doc.source, "text file has only whitespace"});
  doc.pages.push_back(std::move(page));
  return doc;
}

}  // namespace quarry::detail
