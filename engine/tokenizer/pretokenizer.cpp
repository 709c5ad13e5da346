#include "engine/tokenizer/pretokenizer.hpp"

#include <cstdint>

#include "engine/tokenizer/unicode.hpp"

namespace quarry::engine {
namespace {

enum : std::uint8_t { kLetter = 1, kNumber = 2, kSpace = 4, kCrLf = 8 };

constexpr const char* kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::uint8_t classify(char32_t cp) {
  if (cp < 0x80) {
    if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') return kLetter;
    if (cp >= '0' && cp <= '9') return kNumber;
    if (cp == '\r' || cp == '\n') return kSpace | kCrLf;
    if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return kSpace;
    return 0;
  }
  const unicode::Props p = unicode::props(cp);
  std::uint8_t c = 0;
  if (p.is_letter()) c |= kLetter;
  if (p.is_number()) c |= kNumber;
  if (p.is_whitespace()) c |= kSpace;
  return c;
}

}  // namespace

const char* RegexSplitter::qwen2_pattern() { return kQwen2; }
const char* RegexSplitter::llama3_pattern() { return kLlama3; }

std::optional<RegexSplitter> RegexSplitter::for_pattern(std::string_view pattern) {
  if (pattern == kQwen2) return RegexSplitter(1);
  if (pattern == kLlama3) return RegexSplitter(3);
  return std::nullopt;
}

void RegexSplitter::split(std::string_view text, std::vector<std::pair<std::size_t, std::size_t>>& pieces) const {
  pieces.clear();
  // Code points, their byte offsets (plus the end) and classes.
  std::vector<char32_t> cps;
  std::vector<std::uint32_t> off;
  std::vector<std::uint8_t> cls;
  cps.reserve(text.size());
  off.reserve(text.size() + 1);
  cls.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    off.push_back(static_cast<std::uint32_t>(i));
    const char32_t cp = unicode::decode_utf8(text, i);
    cps.push_back(cp);
    cls.push_back(classify(cp));
  }
  off.push_back(static_cast<std::uint32_t>(text.size()));
  const std::size_t n = cps.size();
  auto has = [&](std::size_t i, std::uint8_t mask) { return i < n && (cls[i] & mask) != 0; };
  auto other = [&](std::size_t i) { return i < n && (cls[i] & (kLetter | kNumber | kSpace)) == 0; };
  auto letter_run = [&](std::size_t e) {
    while (e < n && (cls[e] & kLetter)) ++e;
    return e;
  };

  // Returns the end (code point index) of the match that starts at p.
  auto match_at = [&](std::size_t p) -> std::size_t {
    const char32_t c = cps[p];
    const std::uint8_t k = cls[p];
    // (?i:'s|'t|'re|'ve|'m|'ll|'d)
    if (c == '\'' && p + 1 < n) {
      const char32_t c1 = cps[p + 1];
      if (unicode::folds_to(c1, 's') || unicode::folds_to(c1, 't') || unicode::folds_to(c1, 'm') ||
          unicode::folds_to(c1, 'd')) {
        return p + 2;
      }
      if (p + 2 < n) {
        const char32_t c2 = cps[p + 2];
        if ((unicode::folds_to(c1, 'r') && unicode::folds_to(c2, 'e')) ||
            (unicode::folds_to(c1, 'v') && unicode::folds_to(c2, 'e')) ||
            (unicode::folds_to(c1, 'l') && unicode::folds_to(c2, 'l'))) {
          return p + 3;
        }
      }
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (k & kLetter) return letter_run(p + 1);
    if (!(k & (kLetter | kNumber | kCrLf)) && has(p + 1, kLetter)) return letter_run(p + 2);
    // \p{N}{1,K}
    if (k & kNumber) {
      std::size_t e = p + 1;
      while (e < n && e - p < max_digits_ && (cls[e] & kNumber)) ++e;
      return e;
    }
    //  ?[^\s\p{L}\p{N}]+[\r\n]*
    {
      std::size_t q = (c == ' ' && other(p + 1)) ? p + 1 : p;
      if (other(q)) {
        std::size_t e = q + 1;
        while (other(e)) ++e;
        while (has(e, kCrLf)) ++e;
        return e;
      }
    }
    // What is left starts with whitespace: the run [p, q).
    std::size_t q = p + 1;
    while (has(q, kSpace)) ++q;
    // \s*[\r\n]+ : \s* backtracks to the last \r or \n of the run; [\r\n]+ then takes just it.
    for (std::size_t j = q; j > p; --j) {
      if (cls[j - 1] & kCrLf) return j;
    }
    // \s+(?!\S) : the whole run at the end of the text, else the run minus its last character.
    if (q == n) return q;
    if (q - p >= 2) return q - 1;
    // \s+
    return q;
  };

  for (std::size_t p = 0; p < n;) {
    const std::size_t e = match_at(p);
    pieces.emplace_back(off[p], off[e]);
    p = e;
  }
}

}  // namespace quarry::engine
