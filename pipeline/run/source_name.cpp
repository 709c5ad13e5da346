#include "pipeline/run/source_name.hpp"

#include <openssl/evp.h>

#include <cstdint>
#include <vector>

namespace quarry::run {

namespace {

/// Length of the well-formed UTF-8 sequence at s[i] (RFC 3629, table 3-7 of the Unicode standard),
/// or 0 if the bytes there are not one.
std::size_t utf8_sequence(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<std::uint8_t>(s[k]); };
  const std::uint8_t c = b(i);
  const std::size_t left = s.size() - i;
  const auto cont = [&](std::size_t k, std::uint8_t lo = 0x80, std::uint8_t hi = 0xBF) {
    return k < left && b(i + k) >= lo && b(i + k) <= hi;
  };
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c == 0xE0) return cont(1, 0xA0) && cont(2) ? 3 : 0;
  if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) return cont(1) && cont(2) ? 3 : 0;
  if (c == 0xED) return cont(1, 0x80, 0x9F) && cont(2) ? 3 : 0;
  if (c == 0xF0) return cont(1, 0x90) && cont(2) && cont(3) ? 4 : 0;
  if (c >= 0xF1 && c <= 0xF3) return cont(1) && cont(2) && cont(3) ? 4 : 0;
  if (c == 0xF4) return cont(1, 0x80, 0x8F) && cont(2) && cont(3) ? 4 : 0;
  return 0;
}

}  // namespace

bool is_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = utf8_sequence(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string base64(std::string_view bytes) {
  std::vector<unsigned char> out(4 * ((bytes.size() + 2) / 3) + 1);
  const int n = EVP_EncodeBlock(out.data(), reinterpret_cast<const unsigned char*>(bytes.data()),
                                static_cast<int>(bytes.size()));
  return std::string(reinterpret_cast<const char*>(out.data()), static_cast<std::size_t>(n));
}

SourceName source_name(std::string_view path) {
  if (is_utf8(path)) return {std::string(path), {}};
  static constexpr char hex[] = "0123456789abcdef";
  SourceName out;
  for (std::size_t i = 0; i < path.size();) {
    const std::size_t n = utf8_sequence(path, i);
    if (n == 0) {
      const auto c = static_cast<std::uint8_t>(path[i]);
      out.display += "\\x";
      out.display += hex[c >> 4];
      out.display += hex[c & 15];
      ++i;
    } else if (path[i] == '\\') {
      out.display += "\\\\";
      ++i;
    } else {
      out.display.append(path.substr(i, n));
      i += n;
    }
  }
  out.base64 = base64(path);
  return out;
}

}  // namespace quarry::run
