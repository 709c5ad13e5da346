#include "engine/tokenizer/unicode.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace quarry::engine::unicode {
namespace {
#include "engine/tokenizer/unicode_tables.inc"

constexpr char32_t kReplacement = 0xFFFD;
// Hangul syllable composition constants (Unicode §3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr unsigned kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;

template <std::size_t N>
bool contains(const std::uint32_t (&arr)[N], char32_t cp) {
  return std::find(std::begin(arr), std::end(arr), static_cast<std::uint32_t>(cp)) != std::end(arr);
}

void decompose(char32_t cp, std::vector<char32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const unsigned s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const auto* it = std::lower_bound(std::begin(kDecompIndex), std::end(kDecompIndex), cp,
                                    [](const DecompEntry& e, char32_t c) { return e.cp < c; });
  if (it != std::end(kDecompIndex) && it->cp == cp) {
    out.insert(out.end(), kDecompData + it->offset, kDecompData + it->offset + it->length);
  } else {
    out.push_back(cp);
  }
}

/// Primary composite of (a, b), or 0 if none.
char32_t compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  const ComposePair key{static_cast<std::uint32_t>(a), static_cast<std::uint32_t>(b), 0};
  const auto* it = std::lower_bound(std::begin(kComposePairs), std::end(kComposePairs), key,
                                    [](const ComposePair& x, const ComposePair& y) {
                                      return x.first != y.first ? x.first < y.first : x.second < y.second;
                                    });
  if (it != std::end(kComposePairs) && it->first == a && it->second == b) return it->composite;
  return 0;
}

}  // namespace

const char* unicode_version() { return kUnicodeVersion; }

Props props(char32_t cp) {
  if (cp >= 0x110000) return Props{0};
  const unsigned block = kPropStage1[cp >> kUnicodeBlockShift];
  return Props{kPropStage2[(block << kUnicodeBlockShift) | (cp & ((1u << kUnicodeBlockShift) - 1))]};
}

std::uint8_t combining_class(char32_t cp) {
  if (cp >= 0x110000) return 0;
  const unsigned block = kCccStage1[cp >> kUnicodeBlockShift];
  return kCccStage2[(block << kUnicodeBlockShift) | (cp & ((1u << kUnicodeBlockShift) - 1))];
}

char32_t decode_utf8(std::string_view s, std::size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  unsigned need;
  char32_t cp;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte (Unicode Table 3-7)
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    ++i;
    return kReplacement;
  }
  std::size_t j = i + 1;
  for (unsigned k = 0; k < need; ++k, ++j) {
    if (j >= s.size()) {
      i = j;
      return kReplacement;
    }
    const auto b = static_cast<unsigned char>(s[j]);
    if (b < lo || b > hi) {
      i = j;  // the maximal subpart ends before this byte
      return kReplacement;
    }
    lo = 0x80;
    hi = 0xBF;
    cp = (cp << 6) | (b & 0x3F);
  }
  i = j;
  return cp;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::size_t valid_utf8_prefix(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    std::size_t j = i;
    const char32_t cp = decode_utf8(s, j);
    if (cp == kReplacement && !(j - i == 3 && s.compare(i, 3, "\xEF\xBF\xBD") == 0)) return i;
    i = j;
  }
  return s.size();
}

std::string utf8_lossy(std::string_view s) {
  const std::size_t valid = valid_utf8_prefix(s);
  if (valid == s.size()) return std::string(s);
  std::string out(s.substr(0, valid));
  for (std::size_t i = valid; i < s.size();) append_utf8(out, decode_utf8(s, i));
  return out;
}

std::size_t incomplete_utf8_tail(std::string_view s) {
  // Look back at most 3 bytes for a lead byte whose sequence is cut off by the end of `s`.
  const std::size_t n = s.size();
  for (std::size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto b0 = static_cast<unsigned char>(s[n - back]);
    if ((b0 & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    std::size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed second byte (Unicode Table 3-7)
    if (b0 >= 0xC2 && b0 <= 0xDF) {
      len = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
      len = 3;
      if (b0 == 0xE0) lo = 0xA0;
      if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      len = 4;
      if (b0 == 0xF0) lo = 0x90;
      if (b0 == 0xF4) hi = 0x8F;
    }
    if (len <= back) return 0;  // ASCII, invalid lead, or a complete sequence
    for (std::size_t k = 1; k < back; ++k) {
      const auto b = static_cast<unsigned char>(s[n - back + k]);
      if (b < lo || b > hi) return 0;
      lo = 0x80;
      hi = 0xBF;
    }
    return back;
  }
  return 0;
}

std::string nfc(std::string_view s) {
  // Quick check (UAX #15 §9): NFC_QC=Yes everywhere and combining classes in canonical order.
  bool quick_yes = true;
  std::uint8_t last_cc = 0;
  for (std::size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      last_cc = 0;
      continue;
    }
    const char32_t cp = decode_utf8(s, i);
    const std::uint8_t cc = combining_class(cp);
    if (props(cp).nfc_qc_not_yes() || (cc != 0 && last_cc > cc)) {
      quick_yes = false;
      break;
    }
    last_cc = cc;
  }
  if (quick_yes) return std::string(s);

  std::vector<char32_t> d;
  d.reserve(s.size() + 8);
  for (std::size_t i = 0; i < s.size();) decompose(decode_utf8(s, i), d);
  // Canonical ordering: stable sort of each run of non-starters by combining class.
  for (std::size_t i = 0; i < d.size();) {
    if (combining_class(d[i]) == 0) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < d.size() && combining_class(d[j]) != 0) ++j;
    std::stable_sort(d.begin() + static_cast<std::ptrdiff_t>(i), d.begin() + static_cast<std::ptrdiff_t>(j),
                     [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
    i = j;
  }
  // Canonical composition.
  std::vector<char32_t> c;
  c.reserve(d.size());
  std::size_t starter = static_cast<std::size_t>(-1);
  std::uint8_t prev_cc = 0;
  for (const char32_t cp : d) {
    const std::uint8_t cc = combining_class(cp);
    if (starter != static_cast<std::size_t>(-1)) {
      const bool adjacent = c.size() - 1 == starter;
      const bool blocked = !adjacent && (prev_cc == 0 || prev_cc >= cc);
      if (!blocked) {
        if (const char32_t comp = compose(c[starter], cp)) {
          c[starter] = comp;
          continue;
        }
      }
    }
    if (cc == 0) starter = c.size();
    c.push_back(cp);
    prev_cc = cc;
  }
  std::string out;
  out.reserve(s.size());
  for (const char32_t cp : c) append_utf8(out, cp);
  return out;
}

bool folds_to(char32_t cp, char lower) {
  switch (lower) {
    case 's': return contains(kFoldS, cp);
    case 't': return contains(kFoldT, cp);
    case 'r': return contains(kFoldR, cp);
    case 'e': return contains(kFoldE, cp);
    case 'm': return contains(kFoldM, cp);
    case 'v': return contains(kFoldV, cp);
    case 'l': return contains(kFoldL, cp);
    case 'd': return contains(kFoldD, cp);
    default: return false;
  }
}

}  // namespace quarry::engine::unicode
