#include "engine/grammar/grounding.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>

#include "engine/grammar/matcher.hpp"
#include "engine/tokenizer/unicode.hpp"

namespace quarry::engine::grammar {

namespace {

constexpr std::uint32_t kNone = 0;  // "no transition" (state 0 / node 0 is never a target)
// Bytes of the normalised text that no UTF-8 value can hold: page separator, word start, word end.
constexpr std::uint8_t kPageBreak = 0xFF, kWordStart = 0xFE, kWordEnd = 0xFD;
// Word classes (word_class): a boundary lies between characters of different classes and around
// every kWordAlone character.
constexpr std::uint8_t kNoWord = 0, kLetter = 1, kWordAlone = 3;
inline bool in_word(std::uint8_t wc) { return wc != kNoWord; }
inline bool word_boundary(std::uint8_t prev, std::uint8_t cur) { return prev != cur || cur == kWordAlone; }
// A copy value's state before its first character: the root (state 0) alone.
inline bool at_value_start(const GroundState& g) { return g.n == 1 && g.st[0] == 0; }

inline void set_bit(std::uint32_t* m, TokenId id) { m[id >> 5] |= 1u << (id & 31); }
inline void clear_bit(std::uint32_t* m, TokenId id) { m[id >> 5] &= ~(1u << (id & 31)); }

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// One UTF-8 character at s[i]: its code point and length (an invalid byte reads as U+FFFD, length 1).
char32_t decode_at(std::string_view s, std::size_t i, std::size_t& len) {
  const auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) { len = 1; return b; }
  std::size_t need = (b & 0xE0) == 0xC0 ? 1 : (b & 0xF0) == 0xE0 ? 2 : (b & 0xF8) == 0xF0 ? 3 : 0;
  if (need == 0 || b < 0xC2 || i + need >= s.size()) { len = 1; return 0xFFFD; }
  char32_t cp = b & (0x3F >> need);
  for (std::size_t k = 1; k <= need; ++k) {
    const auto c = static_cast<unsigned char>(s[i + k]);
    if ((c & 0xC0) != 0x80) { len = 1; return 0xFFFD; }
    cp = (cp << 6) | (c & 0x3F);
  }
  len = need + 1;
  return cp;
}

std::size_t encode_utf8(char32_t cp, unsigned char out[4]) {
  if (cp < 0x80) { out[0] = static_cast<unsigned char>(cp); return 1; }
  if (cp < 0x800) {
    out[0] = static_cast<unsigned char>(0xC0 | (cp >> 6));
    out[1] = static_cast<unsigned char>(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = static_cast<unsigned char>(0xE0 | (cp >> 12));
    out[1] = static_cast<unsigned char>(0x80 | ((cp >> 6) & 0x3F));
    out[2] = static_cast<unsigned char>(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = static_cast<unsigned char>(0xF0 | (cp >> 18));
  out[1] = static_cast<unsigned char>(0x80 | ((cp >> 12) & 0x3F));
  out[2] = static_cast<unsigned char>(0x80 | ((cp >> 6) & 0x3F));
  out[3] = static_cast<unsigned char>(0x80 | (cp & 0x3F));
  return 4;
}

bool is_number_byte(std::uint8_t b) {
  return (b >= '0' && b <= '9') || b == '-' || b == '+' || b == '.' || b == 'e' || b == 'E';
}

}  // namespace

std::optional<SourceKind> parse_source_kind(std::string_view s) {
  if (s == "free") return SourceKind::kFree;
  if (s == "copy") return SourceKind::kCopy;
  if (s == "number") return SourceKind::kNumber;
  if (s == "date") return SourceKind::kDate;
  return std::nullopt;
}

const char* source_kind_name(SourceKind k) {
  switch (k) {
    case SourceKind::kCopy: return "copy";
    case SourceKind::kNumber: return "number";
    case SourceKind::kDate: return "date";
    default: return "free";
  }
}

bool is_ground_space(char32_t cp) {
  return cp == ' ' || (cp >= 0x09 && cp <= 0x0D) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

std::uint8_t word_class(char32_t cp) {
  if (cp < 0x80) {
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return 1;
    return cp >= '0' && cp <= '9' ? 2 : kNoWord;
  }
  const auto pr = unicode::props(cp);
  if (pr.is_number()) return 2;
  if (!pr.is_letter() && !pr.is_mark()) return kNoWord;
  // Scripts written without spaces between words: Thai, Lao, Tibetan, Myanmar, Khmer, CJK radicals to
  // Yi (Han, kana, bopomofo), compatibility ideographs, halfwidth katakana, the supplementary ideographs.
  const bool alone = (cp >= 0x0E00 && cp <= 0x0FFF) || (cp >= 0x1000 && cp <= 0x109F) || (cp >= 0x1780 && cp <= 0x17FF) ||
                     (cp >= 0x2E80 && cp <= 0xA4CF) || (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0xFF66 && cp <= 0xFF9F) ||
                     (cp >= 0x20000 && cp <= 0x3FFFF);
  return alone ? kWordAlone : 1;
}

std::vector<std::string> split_pages(std::string_view text) {
  std::vector<std::string> pages;
  std::size_t start = 0;
  for (;;) {
    const std::size_t k = text.find('\f', start);
    if (k == std::string_view::npos) {
      pages.emplace_back(text.substr(start));
      break;
    }
    pages.emplace_back(text.substr(start, k - start));
    start = k + 1;
  }
  return pages;
}

// ---- copy spans ---------------------------------------------------------------------------------

namespace {

// A text without its whitespace: the bytes of the other characters, the offset of each byte in the
// original, and whether whitespace came before each byte (meaningful at character starts) / at the end.
struct Squeezed {
  std::string bytes;
  std::vector<std::uint32_t> pos;
  std::vector<std::uint8_t> space_before;
  bool space_at_end = false;
};

Squeezed squeeze(std::string_view s) {
  Squeezed q;
  q.bytes.reserve(s.size());
  bool sp = false;
  for (std::size_t i = 0; i < s.size();) {
    std::size_t len = 1;
    const char32_t cp = decode_at(s, i, len);
    if (is_ground_space(cp)) {
      sp = true;
    } else {
      for (std::size_t k = 0; k < len; ++k) {
        q.bytes.push_back(s[i + k]);
        q.pos.push_back(static_cast<std::uint32_t>(i + k));
        q.space_before.push_back(k == 0 && sp ? 1 : 0);
      }
      sp = false;
    }
    i += len;
  }
  q.space_at_end = sp;
  return q;
}

}  // namespace

std::optional<TextSpan> find_copy_span(const std::vector<std::string>& pages, std::string_view value) {
  const Squeezed v = squeeze(value);
  if (v.bytes.empty()) return std::nullopt;
  for (std::size_t p = 0; p < pages.size(); ++p) {
    const Squeezed d = squeeze(pages[p]);
    for (std::size_t at = d.bytes.find(v.bytes); at != std::string::npos; at = d.bytes.find(v.bytes, at + 1)) {
      bool ok = true;
      for (std::size_t j = 0; j < v.bytes.size() && ok; ++j)
        if (v.space_before[j] && !d.space_before[at + j]) ok = false;
      if (ok && v.space_at_end) {
        const std::size_t e = at + v.bytes.size();
        ok = e < d.bytes.size() ? d.space_before[e] != 0 : d.space_at_end;
      }
      if (ok) return TextSpan{p, d.pos[at], d.pos[at + v.bytes.size() - 1] + 1};
    }
  }
  return std::nullopt;
}

// ---- numbers ------------------------------------------------------------------------------------

namespace {

// Length of a digit-group separator at s[i] ('.', ',', '\'', ' ', U+00A0, U+202F, U+2009), 0 if none;
// `space` is set for the space-like ones.
std::size_t group_sep(std::string_view s, std::size_t i, char& kind) {
  const char c = s[i];
  if (c == '.' || c == ',' || c == '\'') { kind = c; return 1; }
  if (c == ' ') { kind = ' '; return 1; }
  if (i + 1 < s.size() && s.compare(i, 2, "\xC2\xA0") == 0) { kind = ' '; return 2; }
  if (i + 2 < s.size() && (s.compare(i, 3, "\xE2\x80\xAF") == 0 || s.compare(i, 3, "\xE2\x80\x89") == 0)) {
    kind = ' ';
    return 3;
  }
  return 0;
}

struct Run {
  std::vector<std::string> groups;  // digit groups
  std::vector<char> seps;           // separator kinds between them
};

std::string strip_int(const std::string& s) {
  std::size_t k = 0;
  while (k + 1 < s.size() && s[k] == '0') ++k;
  return s.empty() ? "0" : s.substr(k);
}

void add_reading(std::vector<NumberOccurrence>& out, bool neg, const std::string& int_digits, const std::string& frac,
                 TextSpan span) {
  std::string f = frac;
  while (!f.empty() && f.back() == '0') f.pop_back();
  std::string d = strip_int(int_digits);
  if (!f.empty()) d += "." + f;
  const bool zero = d == "0";
  NumberOccurrence n;
  n.decimal = (neg && !zero ? "-" : "") + d;
  n.span = span;
  n.printed_frac = static_cast<std::uint8_t>(std::min<std::size_t>(frac.size(), 32));
  out.push_back(std::move(n));
  if (neg && !zero) {  // the magnitude too: a credit note's amounts may be asked for unsigned
    NumberOccurrence m = out.back();
    m.decimal = d;
    out.push_back(std::move(m));
  }
}

bool grouping_ok(const Run& r, std::size_t ngroups) {
  if (r.groups[0].size() > 3 || r.groups[0].empty()) return false;
  for (std::size_t k = 1; k < ngroups; ++k)
    if (r.groups[k].size() != 3) return false;
  return true;
}

void read_run(const Run& r, bool neg, TextSpan span, std::vector<NumberOccurrence>& out) {
  const std::size_t g = r.groups.size();
  std::string all;
  for (const auto& x : r.groups) all += x;
  if (g == 1) {
    add_reading(out, neg, all, "", span);
    return;
  }
  // Every separator groups digits.
  bool same = std::all_of(r.seps.begin(), r.seps.end(), [&](char c) { return c == r.seps[0]; });
  if (same && grouping_ok(r, g)) add_reading(out, neg, all, "", span);
  // The last separator is the decimal mark; the others (of one other kind) group.
  const char last = r.seps.back();
  if (last == '.' || last == ',') {
    bool others_ok = true;
    for (std::size_t k = 0; k + 1 < r.seps.size(); ++k)
      if (r.seps[k] == last || r.seps[k] != r.seps[0]) others_ok = false;
    if (others_ok && (g == 2 || grouping_ok(r, g - 1))) {
      std::string ip;
      for (std::size_t k = 0; k + 1 < g; ++k) ip += r.groups[k];
      add_reading(out, neg, ip, r.groups.back(), span);
    }
  }
}

}  // namespace

std::vector<NumberOccurrence> find_numbers(const std::vector<std::string>& pages) {
  constexpr std::size_t kMax = 100000;
  std::vector<NumberOccurrence> out;
  for (std::size_t p = 0; p < pages.size() && out.size() < kMax; ++p) {
    std::string_view s = pages[p];
    std::size_t i = 0;
    while (i < s.size() && out.size() < kMax) {
      if (!is_digit(s[i])) { ++i; continue; }
      const std::size_t start = i;
      Run r;
      std::vector<std::size_t> group_start{start};
      std::size_t j = i;
      for (;;) {
        std::string grp;
        while (j < s.size() && is_digit(s[j])) grp.push_back(s[j++]);
        r.groups.push_back(std::move(grp));
        char kind = 0;
        const std::size_t len = j < s.size() ? group_sep(s, j, kind) : 0;
        if (len == 0 || j + len >= s.size() || !is_digit(s[j + len])) break;
        r.seps.push_back(kind);
        j += len;
        group_start.push_back(j);
      }
      const std::size_t end = j;
      bool neg = false;
      std::size_t sstart = start;
      if (start >= 1 && s[start - 1] == '-') { neg = true; sstart = start - 1; }
      else if (start >= 3 && s.compare(start - 3, 3, "\xE2\x88\x92") == 0) { neg = true; sstart = start - 3; }
      else if (start >= 1 && s[start - 1] == '(' && end < s.size() && s[end] == ')') neg = true;
      read_run(r, neg, TextSpan{p, sstart, end}, out);
      // Each digit group alone, and each space-separated piece alone.
      if (r.groups.size() > 1) {
        std::size_t k0 = 0;
        for (std::size_t k = 0; k <= r.seps.size(); ++k) {
          if (k == r.seps.size() || r.seps[k] == ' ') {
            if (!(k0 == 0 && k == r.seps.size())) {
              Run piece;
              for (std::size_t t = k0; t <= k; ++t) piece.groups.push_back(r.groups[t]);
              for (std::size_t t = k0; t < k; ++t) piece.seps.push_back(r.seps[t]);
              const std::size_t ps = group_start[k0];
              const std::size_t pe = group_start[k] + r.groups[k].size();
              read_run(piece, neg && k0 == 0, TextSpan{p, k0 == 0 ? sstart : ps, pe}, out);
            }
            k0 = k + 1;
          }
        }
        for (std::size_t k = 0; k < r.groups.size(); ++k)
          add_reading(out, false, r.groups[k], "", TextSpan{p, group_start[k], group_start[k] + r.groups[k].size()});
      }
      i = end;
    }
  }
  return out;
}

std::optional<std::string> canonical_decimal(std::string_view t) {
  std::size_t i = 0;
  bool neg = false;
  if (i < t.size() && t[i] == '-') { neg = true; ++i; }
  std::string ip, fp;
  while (i < t.size() && is_digit(t[i])) ip.push_back(t[i++]);
  if (ip.empty()) return std::nullopt;
  if (i < t.size() && t[i] == '.') {
    ++i;
    while (i < t.size() && is_digit(t[i])) fp.push_back(t[i++]);
    if (fp.empty()) return std::nullopt;
  }
  long long exp = 0;
  if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    ++i;
    bool eneg = false;
    if (i < t.size() && (t[i] == '+' || t[i] == '-')) eneg = t[i++] == '-';
    std::string ed;
    while (i < t.size() && is_digit(t[i])) ed.push_back(t[i++]);
    if (ed.empty() || ed.size() > 6) return std::nullopt;
    exp = std::stoll(ed) * (eneg ? -1 : 1);
  }
  if (i != t.size()) return std::nullopt;
  std::string digits = ip + fp;
  long long point = static_cast<long long>(ip.size()) + exp;  // decimal point after `point` digits
  if (point < 0) { digits.insert(0, static_cast<std::size_t>(-point), '0'); point = 0; }
  if (point > static_cast<long long>(digits.size())) digits.append(static_cast<std::size_t>(point) - digits.size(), '0');
  std::string a = strip_int(digits.substr(0, static_cast<std::size_t>(point)));
  std::string f = digits.substr(static_cast<std::size_t>(point));
  while (!f.empty() && f.back() == '0') f.pop_back();
  std::string d = a + (f.empty() ? "" : "." + f);
  if (d == "0") neg = false;
  return (neg ? "-" : "") + d;
}

std::vector<std::string> number_spellings(const NumberOccurrence& n) {
  std::vector<std::string> out{n.decimal};
  const std::size_t dot = n.decimal.find('.');
  std::size_t have = dot == std::string::npos ? 0 : n.decimal.size() - dot - 1;
  std::string s = n.decimal;
  if (dot == std::string::npos && n.printed_frac > 0) s += ".";
  for (std::size_t k = have; k < n.printed_frac; ++k) {
    s += "0";
    out.push_back(s);
  }
  return out;
}

// ---- dates --------------------------------------------------------------------------------------

namespace {

struct Tok {
  enum Kind { kNum, kWord, kPunct } kind;
  std::string text;  // words lower-cased
  std::size_t start, end;
};

std::string lower_word(std::string_view w) {
  std::string o(w);
  for (std::size_t i = 0; i < o.size(); ++i) {
    auto c = static_cast<unsigned char>(o[i]);
    if (c >= 'A' && c <= 'Z') o[i] = static_cast<char>(c + 32);
    else if (c == 0xC3 && i + 1 < o.size()) {
      auto d = static_cast<unsigned char>(o[i + 1]);
      if (d >= 0x80 && d <= 0x9E && d != 0x97) o[i + 1] = static_cast<char>(d + 0x20);
      ++i;
    } else if (c == 0xC5 && i + 1 < o.size()) {
      auto d = static_cast<unsigned char>(o[i + 1]);
      if (d == 0x90 || d == 0xB0 || d == 0x81 || d == 0x83 || d == 0x9A || d == 0xB9 || d == 0xBB) o[i + 1] = static_cast<char>(d + 1);
      ++i;
    }
  }
  return o;
}

const std::unordered_map<std::string, int>& month_names() {
  static const std::unordered_map<std::string, int> m = [] {
    std::unordered_map<std::string, int> r;
    const std::vector<std::vector<std::string>> names = {
        {"january", "jan", "januar", "jänner", "jän", "január", "janvier", "janv", "gennaio", "gen", "enero", "ene",
         "januari", "styczeń", "stycznia", "sty"},
        {"february", "feb", "februar", "február", "febr", "février", "févr", "fevrier", "febbraio", "febrero",
         "februari", "luty", "lutego", "lut"},
        {"march", "mar", "märz", "mär", "mrz", "maerz", "március", "márc", "mars", "marzo", "maart", "mrt", "marzec",
         "marca"},
        {"april", "apr", "április", "ápr", "avril", "avr", "aprile", "abril", "abr", "kwiecień", "kwietnia", "kwi"},
        {"may", "mai", "május", "máj", "maggio", "mag", "mayo", "mei", "maj", "maja"},
        {"june", "jun", "juni", "június", "jún", "juin", "giugno", "giu", "junio", "czerwiec", "czerwca", "cze"},
        {"july", "jul", "juli", "július", "júl", "juillet", "juil", "luglio", "lug", "julio", "lipiec", "lipca", "lip"},
        {"august", "aug", "augusztus", "août", "aout", "agosto", "ago", "augustus", "sierpień", "sierpnia", "sie"},
        {"september", "sep", "sept", "szeptember", "szept", "septembre", "settembre", "set", "septiembre",
         "setiembre", "wrzesień", "września", "wrz"},
        {"october", "oct", "oktober", "okt", "október", "octobre", "ottobre", "ott", "octubre", "październik",
         "października", "paź"},
        {"november", "nov", "novembre", "noviembre", "listopad", "listopada", "lis"},
        {"december", "dec", "dezember", "dez", "décembre", "déc", "decembre", "dicembre", "dic", "diciembre",
         "grudzień", "grudnia", "gru"}};
    for (std::size_t k = 0; k < names.size(); ++k)
      for (const auto& n : names[k]) r.emplace(n, static_cast<int>(k + 1));
    return r;
  }();
  return m;
}

bool valid_date(int y, int m, int d) {
  if (y < 1900 || y > 2199 || m < 1 || m > 12 || d < 1) return false;
  static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  int dm = days[m - 1];
  if (m == 2 && ((y % 4 == 0 && y % 100 != 0) || y % 400 == 0)) dm = 29;
  return d <= dm;
}

std::vector<Tok> date_tokens(std::string_view s) {
  std::vector<Tok> t;
  for (std::size_t i = 0; i < s.size();) {
    std::size_t len = 1;
    const char32_t cp = decode_at(s, i, len);
    if (is_digit(s[i])) {
      std::size_t j = i;
      while (j < s.size() && is_digit(s[j])) ++j;
      t.push_back({Tok::kNum, std::string(s.substr(i, j - i)), i, j});
      i = j;
    } else if ((cp < 0x80 && std::isalpha(static_cast<int>(cp))) || (cp >= 0xC0 && !is_ground_space(cp) && cp != 0xFFFD)) {
      std::size_t j = i;
      while (j < s.size()) {
        std::size_t l2 = 1;
        const char32_t c2 = decode_at(s, j, l2);
        if (!((c2 < 0x80 && std::isalpha(static_cast<int>(c2))) || (c2 >= 0xC0 && !is_ground_space(c2) && c2 != 0xFFFD))) break;
        j += l2;
      }
      t.push_back({Tok::kWord, lower_word(s.substr(i, j - i)), i, j});
      i = j;
    } else if (cp == '.' || cp == '/' || cp == '-' || cp == ',') {
      t.push_back({Tok::kPunct, std::string(1, static_cast<char>(cp)), i, i + 1});
      i += len;
    } else if (is_ground_space(cp)) {
      i += len;
    } else {
      t.push_back({Tok::kPunct, "?", i, i + len});
      i += len;
    }
  }
  return t;
}

void add_date(std::vector<DateOccurrence>& out, int y, int m, int d, std::size_t page, std::size_t start,
              std::size_t end) {
  if (!valid_date(y, m, d)) return;
  char buf[40];  // room for any int the format could print
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02d", y, m, d);
  out.push_back({buf, TextSpan{page, start, end}});
}

int year_of(const std::string& s) {
  if (s.size() == 4) return std::stoi(s);
  if (s.size() == 2) return 2000 + std::stoi(s);
  return -1;
}

}  // namespace

std::vector<DateOccurrence> find_dates(const std::vector<std::string>& pages) {
  std::vector<DateOccurrence> out;
  const auto& months = month_names();
  for (std::size_t p = 0; p < pages.size(); ++p) {
    const std::vector<Tok> t = date_tokens(pages[p]);
    const std::size_t n = t.size();
    auto num = [&](std::size_t k, std::size_t lo, std::size_t hi) {
      return k < n && t[k].kind == Tok::kNum && t[k].text.size() >= lo && t[k].text.size() <= hi;
    };
    auto punct = [&](std::size_t k, const char* set) {
      return k < n && t[k].kind == Tok::kPunct && std::strchr(set, t[k].text[0]) != nullptr;
    };
    auto month = [&](std::size_t k) -> int {
      if (k >= n || t[k].kind != Tok::kWord) return 0;
      auto it = months.find(t[k].text);
      return it == months.end() ? 0 : it->second;
    };
    auto skip_word = [&](std::size_t k, std::initializer_list<const char*> words) {
      if (k < n && t[k].kind == Tok::kWord)
        for (const char* w : words)
          if (t[k].text == w) return k + 1;
      return k;
    };
    for (std::size_t k = 0; k < n; ++k) {
      if (t[k].kind == Tok::kNum) {
        // Numeric: a sep b sep c
        if (num(k, 1, 4) && punct(k + 1, "./-") && num(k + 2, 1, 2) && k + 3 < n && t[k + 3].kind == Tok::kPunct &&
            t[k + 3].text == t[k + 1].text && num(k + 4, 1, 4)) {
          const int a = std::stoi(t[k].text), b = std::stoi(t[k + 2].text);
          const std::string& cs = t[k + 4].text;
          const std::size_t end = t[k + 4].end;
          if (t[k].text.size() == 4 && cs.size() <= 2) {
            add_date(out, a, b, std::stoi(cs), p, t[k].start, end);
          } else if (t[k].text.size() <= 2 && (cs.size() == 4 || cs.size() == 2)) {
            const int y = year_of(cs);
            add_date(out, y, b, a, p, t[k].start, end);
            if (t[k + 1].text != ".") add_date(out, y, a, b, p, t[k].start, end);
          }
        }
        // Y. Month D.
        if (num(k, 4, 4)) {
          std::size_t j = k + 1;
          if (punct(j, ".")) ++j;
          if (int m = month(j)) {
            ++j;
            if (punct(j, ".")) ++j;
            if (num(j, 1, 2)) add_date(out, std::stoi(t[k].text), m, std::stoi(t[j].text), p, t[k].start, t[j].end);
          }
        }
        // D[.] [of|de] Month[.] [de] Y
        if (num(k, 1, 2)) {
          std::size_t j = k + 1;
          j = skip_word(j, {"st", "nd", "rd", "th", "er"});
          if (punct(j, ".")) ++j;
          j = skip_word(j, {"de", "of"});
          if (int m = month(j)) {
            ++j;
            if (punct(j, ".,")) ++j;
            j = skip_word(j, {"de", "del"});
            if (num(j, 4, 4)) add_date(out, std::stoi(t[j].text), m, std::stoi(t[k].text), p, t[k].start, t[j].end);
          }
        }
      } else if (int m = month(k)) {
        // Month D[,] Y
        std::size_t j = k + 1;
        if (punct(j, ".")) ++j;
        if (num(j, 1, 2)) {
          const int d = std::stoi(t[j].text);
          std::size_t e = skip_word(j + 1, {"st", "nd", "rd", "th"});
          if (punct(e, ",")) ++e;
          if (num(e, 4, 4)) add_date(out, std::stoi(t[e].text), m, d, p, t[k].start, t[e].end);
        }
      }
    }
  }
  return out;
}

// ---- GroundState ---------------------------------------------------------------------------------

bool GroundState::operator==(const GroundState& o) const {
  return kind == o.kind && esc == o.esc && need == o.need && sp == o.sp && n == o.n && len == o.len && lost == o.lost &&
         json == o.json && wc == o.wc && cp == o.cp && st == o.st;
}

std::uint64_t GroundState::hash() const {
  std::uint64_t h = 0x9E3779B97F4A7C15ull;
  auto mix = [&](std::uint64_t v) { h = (h ^ v) * 0x100000001B3ull; h ^= h >> 29; };
  mix(kind | (esc << 8) | (need << 16) | (static_cast<std::uint64_t>(sp) << 24) | (static_cast<std::uint64_t>(n) << 32));
  mix(cp | (static_cast<std::uint64_t>(len) << 32) | (static_cast<std::uint64_t>(lost) << 40) |
      (static_cast<std::uint64_t>(json) << 48) | (static_cast<std::uint64_t>(wc) << 56));
  for (std::size_t k = 0; k < n; ++k) mix(st[k]);
  return h;
}

// ---- GroundingVocab ------------------------------------------------------------------------------

bool GroundingVocab::may_enter(std::string_view rest) {
  for (std::size_t i = 0; i < rest.size(); ++i) {
    const char c = rest[i];
    if (c == '"' && i + 1 < rest.size()) return true;
    if (c == '-' || is_digit(c)) return true;
  }
  return false;
}

GroundingVocab::GroundingVocab(std::shared_ptr<const TokenizerInfo> tok) : tok_(std::move(tok)) {
  for (TokenId id : tok_->sorted_ids()) {
    const std::string& s = tok_->token(id);
    bool cand = false;
    for (std::size_t i = 0; i + 1 < s.size(); ++i)
      if (s[i] == '"') {
        quote_entry_.push_back(id);
        break;
      }
    for (std::size_t i = 0; i < s.size() && !cand; ++i) {
      if (s[i] == '"' && i + 1 < s.size()) cand = true;
      // A number value begins after ':', ',', '[' or whitespace.
      if (i >= 1 && (s[i] == '-' || is_digit(s[i])) &&
          (s[i - 1] == ':' || s[i - 1] == ',' || s[i - 1] == '[' || s[i - 1] == ' ' || s[i - 1] == '\n' ||
           s[i - 1] == '\t' || s[i - 1] == '\r'))
        cand = true;
    }
    if (cand) entry_.push_back(id);
  }
  std::sort(entry_.begin(), entry_.end());
  std::sort(quote_entry_.begin(), quote_entry_.end());
  const auto& trie = tok_->trie();
  for (std::uint32_t c = 1; c < trie[0].next; c = trie[c].next) root_child_[trie[c].byte] = c;
  quote_exit_.bits.assign(tok_->mask_words(), 0u);
  number_exit_.bits.assign(tok_->mask_words(), 0u);
  for (TokenId id : tok_->sorted_ids()) {
    const std::string& s = tok_->token(id);
    const auto b0 = static_cast<std::uint8_t>(s[0]);
    const bool enter = may_enter(std::string_view(s).substr(1));
    if (b0 == '"') {
      set_bit(quote_exit_.bits.data(), id);
      if (enter) quote_exit_.exact.push_back(id);
    }
    if (!is_number_byte(b0)) {
      set_bit(number_exit_.bits.data(), id);
      if (enter) number_exit_.exact.push_back(id);
    }
  }
  std::sort(quote_exit_.exact.begin(), quote_exit_.exact.end());
  std::sort(number_exit_.exact.begin(), number_exit_.exact.end());
}

// ---- GroundingIndex: automaton --------------------------------------------------------------------

GroundingIndex::Trie GroundingIndex::Trie::from(std::vector<std::string> words) {
  std::sort(words.begin(), words.end());
  words.erase(std::unique(words.begin(), words.end()), words.end());
  // Build with maps, then flatten.
  struct N {
    std::vector<std::pair<std::uint8_t, std::uint32_t>> kids;
    bool term = false;
  };
  std::vector<N> nodes(1);
  for (const auto& w : words) {
    std::uint32_t v = 0;
    for (char ch : w) {
      const auto b = static_cast<std::uint8_t>(ch);
      std::uint32_t nx = kNone;
      for (auto& [kb, kt] : nodes[v].kids)
        if (kb == b) nx = kt;
      if (nx == kNone) {
        nx = static_cast<std::uint32_t>(nodes.size());
        nodes[v].kids.push_back({b, nx});
        nodes.emplace_back();
      }
      v = nx;
    }
    nodes[v].term = true;
  }
  Trie t;
  t.off.push_back(0);
  for (auto& nd : nodes) {
    std::sort(nd.kids.begin(), nd.kids.end());
    for (auto& [b, to] : nd.kids) {
      t.byte.push_back(b);
      t.to.push_back(to);
    }
    t.off.push_back(static_cast<std::uint32_t>(t.byte.size()));
    t.terminal.push_back(nd.term ? 1 : 0);
  }
  return t;
}

std::uint32_t GroundingIndex::Trie::next(std::uint32_t v, std::uint8_t b) const {
  for (std::uint32_t e = off[v]; e < off[v + 1]; ++e)
    if (byte[e] == b) return to[e];
  return kNone;
}

void GroundingIndex::build_automaton() {
  // Online suffix automaton construction; transitions in linked lists while building.
  struct E {
    std::uint32_t to, next;
    std::uint8_t b;
  };
  constexpr std::uint32_t kNil = UINT32_MAX;
  std::vector<std::uint32_t> len{0}, link{kNil}, head{kNil};
  std::vector<E> edges;
  edges.reserve(text_.size() * 3);
  std::array<std::uint32_t, 256> root{};
  root.fill(kNil);
  auto get = [&](std::uint32_t s, std::uint8_t b) -> std::uint32_t {
    if (s == 0) return root[b];
    for (std::uint32_t e = head[s]; e != kNil; e = edges[e].next)
      if (edges[e].b == b) return edges[e].to;
    return kNil;
  };
  auto set = [&](std::uint32_t s, std::uint8_t b, std::uint32_t t) {
    if (s == 0) { root[b] = t; return; }
    for (std::uint32_t e = head[s]; e != kNil; e = edges[e].next)
      if (edges[e].b == b) { edges[e].to = t; return; }
    edges.push_back({t, head[s], b});
    head[s] = static_cast<std::uint32_t>(edges.size() - 1);
  };
  std::uint32_t last = 0;
  for (char ch : text_) {
    const auto c = static_cast<std::uint8_t>(ch);
    const auto cur = static_cast<std::uint32_t>(len.size());
    len.push_back(len[last] + 1);
    link.push_back(0);
    head.push_back(kNil);
    std::uint32_t p = last;
    while (p != kNil && get(p, c) == kNil) {
      set(p, c, cur);
      p = link[p];
    }
    if (p != kNil) {
      const std::uint32_t q = get(p, c);
      if (len[p] + 1 == len[q]) {
        link[cur] = q;
      } else {
        const auto clone = static_cast<std::uint32_t>(len.size());
        len.push_back(len[p] + 1);
        link.push_back(link[q]);
        head.push_back(kNil);
        for (std::uint32_t e = head[q]; e != kNil; e = edges[e].next) {
          edges.push_back({edges[e].to, head[clone], edges[e].b});
          head[clone] = static_cast<std::uint32_t>(edges.size() - 1);
        }
        while (p != kNil && get(p, c) == q) {
          set(p, c, clone);
          p = link[p];
        }
        link[q] = link[cur] = clone;
      }
    }
    last = cur;
  }
  // Flatten to CSR, sorted by byte.
  const std::size_t ns = len.size();
  len_ = std::move(len);
  off_.assign(ns + 1, 0);
  byte_.clear();
  to_.clear();
  std::vector<std::pair<std::uint8_t, std::uint32_t>> tmp;
  for (std::uint32_t s = 0; s < ns; ++s) {
    tmp.clear();
    if (s == 0) {
      for (int b = 0; b < 256; ++b)
        if (root[b] != kNil) tmp.push_back({static_cast<std::uint8_t>(b), root[b]});
    } else {
      for (std::uint32_t e = head[s]; e != kNil; e = edges[e].next) tmp.push_back({edges[e].b, edges[e].to});
      std::sort(tmp.begin(), tmp.end());
    }
    off_[s] = static_cast<std::uint32_t>(byte_.size());
    for (auto& [b, t] : tmp) {
      byte_.push_back(b);
      to_.push_back(t);
    }
  }
  off_[ns] = static_cast<std::uint32_t>(byte_.size());
  for (int b = 0; b < 256; ++b) root_next_[b] = root[b] == kNil ? kNone : root[b];
}

std::uint32_t GroundingIndex::sam_next(std::uint32_t s, std::uint8_t b) const {
  if (s == 0) return root_next_[b];
  std::uint32_t lo = off_[s], hi = off_[s + 1];
  if (hi - lo <= 8) {
    for (std::uint32_t e = lo; e < hi; ++e)
      if (byte_[e] == b) return to_[e];
    return kNone;
  }
  const auto* first = byte_.data() + lo;
  const auto* last = byte_.data() + hi;
  const auto* it = std::lower_bound(first, last, b);
  if (it != last && *it == b) return to_[lo + static_cast<std::uint32_t>(it - byte_.data() - lo)];
  return kNone;
}

// ---- GroundingIndex: build ------------------------------------------------------------------------

std::shared_ptr<GroundingIndex> GroundingIndex::build(std::shared_ptr<const GroundingVocab> vocab,
                                                      const std::vector<std::string>& pages) {
  const auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<GroundingIndex> idx(new GroundingIndex(std::move(vocab)));
  // Normalised text: whitespace runs -> one space, pages separated by 0xFF, words marked (0xFE before a
  // word's first character, 0xFD after its last).
  std::vector<std::string> kept;
  std::size_t total = 0;
  for (const auto& pg : pages) {
    if (total >= kMaxText) break;
    kept.push_back(pg.size() + total > kMaxText ? pg.substr(0, kMaxText - total) : pg);
    total += kept.back().size();
  }
  std::string& t = idx->text_;
  bool full = false;  // the normalised text reached kMaxText (with its markers): the rest is not kept
  for (std::size_t p = 0; p < kept.size() && !full; ++p) {
    if (p > 0) t.push_back(static_cast<char>(kPageBreak));
    const std::string& s = kept[p];
    bool sp = false;
    std::uint8_t prev = kNoWord;
    for (std::size_t i = 0; i < s.size();) {
      if (t.size() + 8 > kMaxText) {  // a character with its markers takes at most 7 bytes
        full = true;
        break;
      }
      std::size_t len = 1;
      const char32_t cp = decode_at(s, i, len);
      if (is_ground_space(cp)) {
        if (in_word(prev)) t.push_back(static_cast<char>(kWordEnd));
        if (!sp) t.push_back(' ');
        sp = true;
        prev = kNoWord;
      } else {
        const std::uint8_t wc = word_class(cp);
        if (word_boundary(prev, wc)) {
          if (in_word(prev)) t.push_back(static_cast<char>(kWordEnd));
          if (in_word(wc)) t.push_back(static_cast<char>(kWordStart));
        }
        t.append(s, i, len);
        sp = false;
        prev = wc;
      }
      i += len;
    }
    if (in_word(prev)) t.push_back(static_cast<char>(kWordEnd));
  }
  idx->build_automaton();
  std::vector<std::string> nums, dates;
  for (const auto& n : find_numbers(kept))
    for (auto& sp : number_spellings(n)) nums.push_back(std::move(sp));
  for (auto& d : find_dates(kept)) dates.push_back(std::move(d.iso));
  idx->numbers_ = Trie::from(std::move(nums));
  idx->dates_ = Trie::from(std::move(dates));
  idx->n_numbers_ = static_cast<std::size_t>(std::count(idx->numbers_.terminal.begin(), idx->numbers_.terminal.end(), 1));
  idx->n_dates_ = static_cast<std::size_t>(std::count(idx->dates_.terminal.begin(), idx->dates_.terminal.end(), 1));
  // The masks at the start of each kind of value, built now (the most used and the most expensive).
  for (SourceKind k : {SourceKind::kCopy, SourceKind::kNumber, SourceKind::kDate}) (void)idx->inside_mask(idx->init(k));
  {
    std::array<std::uint8_t, 256> e{};
    e['"'] = static_cast<std::uint8_t>(SourceKind::kCopy);
    (void)idx->entry_mask(e);
    e['"'] = static_cast<std::uint8_t>(SourceKind::kDate);
    (void)idx->entry_mask(e);
    e['"'] = 0;
    for (std::uint8_t b : std::string_view("-0123456789")) e[b] = static_cast<std::uint8_t>(SourceKind::kNumber);
    (void)idx->entry_mask(e);
  }
  idx->build_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return idx;
}

GroundState GroundingIndex::init(SourceKind k) const {
  GroundState g;
  g.kind = static_cast<std::uint8_t>(k);
  g.json = k == SourceKind::kNumber ? 0 : 1;  // a copy or date value is inside its string
  g.n = 1;
  g.st[0] = 0;
  return g;
}

// ---- GroundingIndex: stepping ---------------------------------------------------------------------

bool GroundingIndex::copy_char(GroundState& g, char32_t cp) const {
  std::array<std::uint32_t, GroundState::kMaxStates * 4> next{};
  std::size_t m = 0;
  auto add = [&](std::uint32_t s) {
    if (s == kNone) return;
    for (std::size_t k = 0; k < m; ++k)
      if (next[k] == s) return;
    if (m < next.size()) next[m++] = s;
  };
  // The word markers the document holds before a character (word class wc) that follows one of class
  // g.wc: [0xFD] at a word end, [0xFE] at a word start. In the middle of a value any path through them
  // is a real span (the document marks the same two characters the same way); at its start a letter
  // or digit must follow a 0xFE (the value starts a word).
  auto skip_end = [&](std::uint32_t s) {
    if (!in_word(g.wc)) return s;
    const std::uint32_t e = sam_next(s, kWordEnd);
    return e != kNone ? e : s;
  };
  const bool at_start = at_value_start(g);
  if (is_ground_space(cp)) {
    // A copied value does not start with whitespace: the span is its characters, not the blank before
    // them (the root, state 0, is only ever a start). Whitespace at its end is left to the model (a ban
    // there kept values that met a space going on through the document).
    if (at_start) return false;
    // A run of value whitespace counts once, and is at most kMaxSpaceRun characters (`\r\n`): a model
    // copying a layout's wide gaps would otherwise spend its tokens on spaces (or never stop).
    if (g.sp) {
      if (g.sp >= GroundState::kMaxSpaceRun) return false;
      ++g.sp;
      return true;
    }
    for (std::size_t k = 0; k < g.n; ++k) add(sam_next(skip_end(g.st[k]), ' '));
    g.sp = 1;
    g.wc = kNoWord;
  } else {
    unsigned char u[4];
    const std::size_t len = encode_utf8(cp, u);
    const std::uint8_t wc = word_class(cp);
    auto walk = [&](std::uint32_t s) {
      for (std::size_t i = 0; i < len; ++i)  // (the root, state 0, is only ever a start)
        if ((s = sam_next(s, u[i])) == kNone) break;
      return s;
    };
    // From state s (the root at the start; never "none"): the character, after a word start marker when
    // it starts a word there.
    auto add_char = [&](std::uint32_t s, bool boundary) {
      if (in_word(wc) && boundary) {
        if (const std::uint32_t t = sam_next(s, kWordStart)) add(walk(t));
      } else {
        add(walk(s));
      }
    };
    if (at_start) {
      add_char(0, true);
    } else {
      const bool boundary = g.sp || word_boundary(g.wc, wc);
      // A document whitespace run may be skipped (`HU42 1177` written `HU421177`), but not between two
      // letters: that would make a word the document does not print (`Nettó forintban` -> `Nettóforintban`).
      const bool may_skip = !g.sp && !(g.wc == kLetter && wc == kLetter);
      for (std::size_t k = 0; k < g.n; ++k) {
        add_char(boundary ? skip_end(g.st[k]) : g.st[k], boundary);
        if (may_skip)
          if (const std::uint32_t s = sam_next(skip_end(g.st[k]), ' ')) add_char(s, true);
      }
    }
    g.sp = 0;
    g.wc = wc;
  }
  if (m == 0) return false;
  std::sort(next.begin(), next.begin() + static_cast<long>(m));
  m = std::min(m, GroundState::kMaxStates);
  g.st.fill(0);
  for (std::size_t k = 0; k < m; ++k) g.st[k] = next[k];
  g.n = static_cast<std::uint8_t>(m);
  return true;
}

bool GroundingIndex::copy_can_end(const GroundState& g) const {
  if (g.sp || !in_word(g.wc)) return true;
  for (std::size_t k = 0; k < g.n; ++k)
    if (sam_next(g.st[k], kWordEnd) != kNone) return true;
  return false;
}

bool GroundingIndex::copy_byte(GroundState& g, std::uint8_t b) const {
  if (g.esc == 1) {
    char32_t cp;
    switch (b) {
      case '"': cp = '"'; break;
      case '\\': cp = '\\'; break;
      case '/': cp = '/'; break;
      case 'b': cp = 8; break;
      case 'f': cp = 12; break;
      case 'n': cp = 10; break;
      case 'r': cp = 13; break;
      case 't': cp = 9; break;
      case 'u': g.esc = 2; g.cp = 0; return copy_partial_ok(g);
      default: return false;
    }
    g.esc = 0;
    return copy_char(g, cp);
  }
  if (g.esc >= 2) {
    int h = b >= '0' && b <= '9' ? b - '0' : b >= 'a' && b <= 'f' ? b - 'a' + 10 : b >= 'A' && b <= 'F' ? b - 'A' + 10 : -1;
    if (h < 0) return false;
    g.cp = g.cp * 16 + static_cast<std::uint32_t>(h);
    if (++g.esc < 6) return copy_partial_ok(g);
    const char32_t cp = g.cp;
    g.esc = 0;
    g.cp = 0;
    if (cp >= 0xD800 && cp <= 0xDFFF) return false;  // surrogate pairs are not matched
    return copy_char(g, cp);
  }
  if (g.need > 0) {
    if ((b & 0xC0) != 0x80) return false;
    g.cp = (g.cp << 6) | (b & 0x3F);
    if (--g.need > 0) return copy_partial_ok(g);
    const char32_t cp = g.cp;
    g.cp = 0;
    g.len = 0;
    return copy_char(g, cp);
  }
  if (b == '\\') { g.esc = 1; return copy_partial_ok(g); }
  if (b < 0x80) return copy_char(g, b);
  if (b >= 0xC2 && b < 0xE0) { g.need = 1; g.len = 2; g.cp = b & 0x1F; return copy_partial_ok(g); }
  if (b >= 0xE0 && b < 0xF0) { g.need = 2; g.len = 3; g.cp = b & 0x0F; return copy_partial_ok(g); }
  if (b >= 0xF0 && b < 0xF5) { g.need = 3; g.len = 4; g.cp = b & 0x07; return copy_partial_ok(g); }
  return false;
}

bool GroundingIndex::copy_partial_ok(const GroundState& g) const {
  auto feasible = [&](char32_t c) {
    GroundState t = g;
    t.esc = 0;
    t.need = 0;
    t.len = 0;
    t.cp = 0;
    return copy_char(t, c);
  };
  if (g.esc == 1) {
    // The escapes the JSON grammar writes ('/' it writes as itself: `\/` would be a dead end).
    for (char32_t c : {U'"', U'\\', U'\b', U'\f', U'\n', U'\r', U'\t'})
      if (feasible(c)) return true;
    return false;
  }
  if (g.esc >= 2) {
    // \uXXXX with esc - 2 digits read: some code point with those leading digits must fit (the grammar
    // writes \u00XX for control characters only, so those are checked one by one: at a value's start,
    // where whitespace may not come, none of them fits).
    const unsigned rest = 4u * (6u - g.esc);
    const std::uint32_t lo = g.cp << rest, hi = (g.cp + 1) << rest;
    if (lo >= 0x20) return true;  // (not reached: the grammar writes no other \u escape)
    for (std::uint32_t c = lo; c < std::min<std::uint32_t>(hi, 0x20); ++c)
      if (feasible(static_cast<char32_t>(c))) return true;
    return false;
  }
  if (g.need > 0) {
    // The bytes read so far of the character, rebuilt from its bits.
    const std::size_t read = static_cast<std::size_t>(g.len - g.need);
    const std::uint8_t marker = g.len == 2 ? 0xC0 : g.len == 3 ? 0xE0 : 0xF0;
    unsigned char pre[4];
    for (std::size_t k = 0; k < read; ++k) {
      const unsigned shift = static_cast<unsigned>(6 * (read - 1 - k));
      pre[k] = static_cast<unsigned char>(k == 0 ? (marker | (g.cp >> shift)) : (0x80 | ((g.cp >> shift) & 0x3F)));
    }
    // The bytes read so far from state s (the root allowed); kNone when the document has no such path.
    auto walk_pre = [&](std::uint32_t s) {
      for (std::size_t k = 0; k < read; ++k)
        if ((s = sam_next(s, pre[k])) == kNone) break;
      return s;
    };
    // The same after a word start marker at s.
    auto walk_word_pre = [&](std::uint32_t s) {
      const std::uint32_t t = sam_next(s, kWordStart);
      return t == kNone ? kNone : walk_pre(t);
    };
    // Whether the character can be completed from s (after its first `read` bytes) as one whose
    // word class `ok` takes.
    auto completes = [&](auto&& self, std::uint32_t s, std::size_t depth, char32_t cp, auto&& ok) -> bool {
      if (depth == static_cast<std::size_t>(g.len)) return ok(word_class(cp));
      for (std::uint32_t e = off_[s]; e < off_[s + 1]; ++e)
        if ((byte_[e] & 0xC0) == 0x80 && self(self, to_[e], depth + 1, (cp << 6) | (byte_[e] & 0x3F), ok)) return true;
      return false;
    };
    const auto no_word = [](std::uint8_t c) { return c == kNoWord; };
    const auto not_letter = [](std::uint8_t c) { return c != kLetter; };
    // The paths copy_char may take to the character (its class is not known yet): at the start a word
    // start, or a character that is not a letter or digit; in the middle any marker path the document
    // has (it marks the same two characters the same way).
    if (at_value_start(g)) {
      if (walk_word_pre(0) != kNone) return true;
      const std::uint32_t s = walk_pre(0);
      if (s != kNone && completes(completes, s, read, g.cp, no_word)) return true;
    } else {
      for (std::size_t k = 0; k < g.n; ++k) {
        const std::uint32_t st = g.st[k];
        const std::uint32_t end = in_word(g.wc) ? sam_next(st, kWordEnd) : kNone;
        for (std::uint32_t base : {st, end}) {
          if (base == kNone) continue;
          if (walk_pre(base) != kNone || walk_word_pre(base) != kNone) return true;
          if (!g.sp)
            if (const std::uint32_t s = sam_next(base, ' ')) {  // a skipped run: not between two letters
              if (walk_pre(s) != kNone) return true;
              const std::uint32_t w = walk_word_pre(s);
              if (w != kNone && (g.wc != kLetter || completes(completes, w, read, g.cp, not_letter))) return true;
            }
        }
      }
    }
    // A multibyte whitespace character (U+00A0, U+2000.., U+3000, ...) reads as a space.
    for (char32_t ws : {U'\u0085', U'\u00A0', U'\u1680', U'\u2000', U'\u2001', U'\u2002', U'\u2003', U'\u2004',
                        U'\u2005', U'\u2006', U'\u2007', U'\u2008', U'\u2009', U'\u200A', U'\u2028', U'\u2029',
                        U'\u202F', U'\u205F', U'\u3000'}) {
      unsigned char u[4];
      if (encode_utf8(ws, u) == g.len && std::memcmp(u, pre, read) == 0) return feasible(U' ');
    }
    return false;
  }
  return true;
}

GroundingIndex::Step GroundingIndex::step(GroundState& g, std::uint8_t b) const {
  if (g.lost) {  // ungrounded: only the end of the value is found
    if (g.kind == static_cast<std::uint8_t>(SourceKind::kNumber)) {
      if (is_number_byte(b)) return Step::kOk;
      g = GroundState{};
      return Step::kExit;
    }
    if (g.esc == 1) g.esc = b == 'u' ? 2 : 0;
    else if (g.esc >= 2) g.esc = g.esc == 5 ? 0 : static_cast<std::uint8_t>(g.esc + 1);
    else if (b == '\\') g.esc = 1;
    else if (b == '"') { g = GroundState{}; return Step::kExit; }
    return Step::kOk;
  }
  switch (static_cast<SourceKind>(g.kind)) {
    case SourceKind::kCopy:
      if (b == '"' && g.esc == 0 && g.need == 0) {
        if (!copy_can_end(g)) return Step::kDead;  // inside a word of the document
        g = GroundState{};
        return Step::kExit;
      }
      return copy_byte(g, b) ? Step::kOk : Step::kDead;
    case SourceKind::kDate: {
      if (b == '"') {
        if (!dates_.terminal[g.st[0]]) return Step::kDead;
        g = GroundState{};
        return Step::kExit;
      }
      const std::uint32_t t = dates_.next(g.st[0], b);
      if (t == kNone) return Step::kDead;
      g.st[0] = t;
      return Step::kOk;
    }
    case SourceKind::kNumber: {
      if (is_number_byte(b)) {
        const std::uint32_t t = numbers_.next(g.st[0], b);
        if (t == kNone) return Step::kDead;
        g.st[0] = t;
        return Step::kOk;
      }
      if (g.st[0] != 0 && !numbers_.terminal[g.st[0]]) return Step::kDead;
      g = GroundState{};
      return Step::kExit;
    }
    default:
      return Step::kOk;
  }
}

// ---- GroundingIndex: masks --------------------------------------------------------------------------

void GroundingIndex::allow_exit_subtree(std::uint32_t c, GroundMask& m) const {
  const TokenizerInfo& tok = vocab_->tokenizer();
  const auto& node = tok.trie()[c];
  const auto& ids = tok.sorted_ids();
  for (std::uint32_t pos = node.lo; pos < node.hi; ++pos) {
    const TokenId id = ids[pos];
    set_bit(m.bits.data(), id);
    const std::string& s = tok.token(id);
    if (s.size() > node.depth && GroundingVocab::may_enter(std::string_view(s).substr(node.depth))) m.exact.push_back(id);
  }
}

void GroundingIndex::visit(std::uint32_t c, const GroundState& g, GroundMask& m) const {
  const TokenizerInfo& tok = vocab_->tokenizer();
  const auto& trie = tok.trie();
  GroundState g2 = g;
  const Step r = step(g2, trie[c].byte);
  if (r == Step::kDead) return;
  if (r == Step::kExit) {
    allow_exit_subtree(c, m);
    return;
  }
  if (trie[c].flags & TokenizerInfo::kHasToken) {
    const auto& ids = tok.sorted_ids();
    for (std::uint32_t pos = trie[c].lo; pos < trie[c].hi && tok.sorted_token(pos).size() == trie[c].depth; ++pos)
      set_bit(m.bits.data(), ids[pos]);
  }
  if (trie[c].next > c + 1) walk(c, g2, m);
}

void GroundingIndex::walk(std::uint32_t v, const GroundState& g, GroundMask& m) const {
  const auto& trie = vocab_->tokenizer().trie();
  for (std::uint32_t c = v + 1; c < trie[v].next; c = trie[c].next) visit(c, g, m);
}

GroundMask GroundingIndex::compute_inside(const GroundState& g) const {
  const TokenizerInfo& tok = vocab_->tokenizer();
  GroundMask m;
  m.bits.assign(tok.mask_words(), 0u);
  // The first byte: the tokens ending the value at once come from the vocabulary's exit sets; the
  // other first bytes are only those the state can take (not all 256 children of the trie's root).
  const auto kind = static_cast<SourceKind>(g.kind);
  auto add_exit = [&](const GroundingVocab::ExitSet& e) {
    for (std::size_t w = 0; w < m.bits.size(); ++w) m.bits[w] |= e.bits[w];
    m.exact.insert(m.exact.end(), e.exact.begin(), e.exact.end());
  };
  auto visit_byte = [&](std::uint8_t b) {
    if (const std::uint32_t c = vocab_->root_child(b)) visit(c, g, m);
  };
  if (kind == SourceKind::kNumber) {
    if (g.st[0] == 0 || numbers_.terminal[g.st[0]]) add_exit(vocab_->number_exit());
    for (std::uint8_t b : std::string_view("0123456789-+.eE")) visit_byte(b);
  } else if (kind == SourceKind::kDate) {
    if (dates_.terminal[g.st[0]]) add_exit(vocab_->quote_exit());
    for (std::uint32_t e = dates_.off[g.st[0]]; e < dates_.off[g.st[0] + 1]; ++e) visit_byte(dates_.byte[e]);
  } else if (kind == SourceKind::kCopy && g.esc == 0 && g.need == 0) {
    if (copy_can_end(g)) add_exit(vocab_->quote_exit());
    std::array<bool, 256> first{};
    // The bytes after each state, past the word markers and a skipped whitespace run (a superset:
    // visit() steps each exactly).
    auto bytes_of = [&](std::uint32_t s) {
      for (std::uint32_t e = off_[s]; e < off_[s + 1]; ++e) first[byte_[e]] = true;
      if (const std::uint32_t t = sam_next(s, kWordStart))
        for (std::uint32_t e = off_[t]; e < off_[t + 1]; ++e) first[byte_[e]] = true;
    };
    auto from = [&](std::uint32_t base) {  // base: a state (the root at the start)
      bytes_of(base);
      if (!g.sp)
        if (const std::uint32_t s = sam_next(base, ' ')) bytes_of(s);
    };
    for (std::size_t k = 0; k < g.n; ++k) {
      from(g.st[k]);
      if (g.st[k] != 0)
        if (const std::uint32_t end = sam_next(g.st[k], kWordEnd)) from(end);
    }
    // Whitespace and escapes (written as themselves, or `\n`, ...), multibyte whitespace.
    for (std::uint8_t b : {' ', '\t', '\n', '\r', '\f', '\v', '\\'}) first[b] = true;
    for (std::uint8_t b : {0xC2, 0xE1, 0xE2, 0xE3}) first[b] = true;
    first['"'] = false;
    for (int b = 0; b < 256; ++b)
      if (first[static_cast<std::size_t>(b)]) visit_byte(static_cast<std::uint8_t>(b));
  } else {
    walk(0, g, m);
  }
  // A number that may end here may also end the whole value (a number at the root).
  if (g.kind == static_cast<std::uint8_t>(SourceKind::kNumber) && (g.st[0] == 0 || numbers_.terminal[g.st[0]]))
    for (TokenId e : tok.eos_ids()) set_bit(m.bits.data(), e);
  std::sort(m.exact.begin(), m.exact.end());
  return m;
}

GroundMask GroundingIndex::compute_entry(const std::array<std::uint8_t, 256>& entry) const {
  const TokenizerInfo& tok = vocab_->tokenizer();
  const auto& trie = tok.trie();
  const auto& ids = tok.sorted_ids();
  GroundMask m;
  m.bits.assign(tok.mask_words(), ~0u);
  for (std::uint32_t c = 1; c < trie[0].next; c = trie[c].next) {
    const std::uint8_t b = trie[c].byte;
    if (!entry[b]) continue;
    for (std::uint32_t pos = trie[c].lo; pos < trie[c].hi; ++pos) clear_bit(m.bits.data(), ids[pos]);
    const auto k = static_cast<SourceKind>(entry[b]);
    GroundState g = init(k);
    if (k == SourceKind::kNumber) {
      const Step r = step(g, b);
      if (r == Step::kDead) continue;
      if (r == Step::kExit) {
        allow_exit_subtree(c, m);
        continue;
      }
    }
    if (trie[c].flags & TokenizerInfo::kHasToken)
      for (std::uint32_t pos = trie[c].lo; pos < trie[c].hi && tok.sorted_token(pos).size() == trie[c].depth; ++pos)
        set_bit(m.bits.data(), ids[pos]);
    walk(c, g, m);
  }
  std::sort(m.exact.begin(), m.exact.end());
  return m;
}

std::shared_ptr<const GroundMask> GroundingIndex::inside_mask(const GroundState& g) const {
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = inside_cache_.find(g);
    if (it != inside_cache_.end()) return it->second;
  }
  auto m = std::make_shared<const GroundMask>(compute_inside(g));
  std::lock_guard<std::mutex> lk(mu_);
  if (inside_cache_.size() >= kMaxCached) inside_cache_.clear();
  inside_cache_.emplace(g, m);
  return m;
}

std::shared_ptr<const GroundMask> GroundingIndex::entry_mask(const std::array<std::uint8_t, 256>& entry) const {
  std::string key(reinterpret_cast<const char*>(entry.data()), entry.size());
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = entry_cache_.find(key);
    if (it != entry_cache_.end()) return it->second;
  }
  auto m = std::make_shared<const GroundMask>(compute_entry(entry));
  std::lock_guard<std::mutex> lk(mu_);
  if (entry_cache_.size() >= kMaxCached) entry_cache_.clear();
  entry_cache_.emplace(std::move(key), m);
  return m;
}

}  // namespace quarry::engine::grammar
