// ECMA-262 patterns -> RE2 syntax, and compiled patterns. See ecma_regex.hpp for the table of
// translations and what is refused.
#include "schemas/ecma_regex.hpp"

#include <cstdint>
#include <cstdio>
#include <utility>
#include <vector>

#include <re2/re2.h>

namespace quarry::schemas {
namespace {

constexpr std::uint32_t kMaxCp = 0x10FFFF;
constexpr int kMaxGroupDepth = 250;
constexpr long kMaxRepeat = 1000;  // RE2's kMaxRepeat

// ECMA-262 WhiteSpace and LineTerminator code points (22.2.2.9 CharacterClassEscape :: s), as
// sorted closed intervals.
constexpr std::pair<std::uint32_t, std::uint32_t> kSpace[] = {
    {0x09, 0x0D}, {0x20, 0x20}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A}, {0x2028, 0x2029},
    {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};

std::string hex(std::uint32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "\\x{%X}", cp);
  return buf;
}

std::string range(std::uint32_t lo, std::uint32_t hi) { return lo == hi ? hex(lo) : hex(lo) + "-" + hex(hi); }

// Class body (without brackets) of \s, or of its complement (surrogates left out).
std::string space_body(bool complement) {
  std::string out;
  if (!complement) {
    for (auto [lo, hi] : kSpace) out += range(lo, hi);
    return out;
  }
  std::uint32_t next = 0;
  auto add = [&](std::uint32_t lo, std::uint32_t hi) {
    // Skip the surrogate block, which UTF-8 cannot hold.
    if (lo <= 0xDFFF && hi >= 0xD800) {
      if (lo < 0xD800) out += range(lo, 0xD7FF);
      if (hi > 0xDFFF) out += range(0xE000, hi);
    } else {
      out += range(lo, hi);
    }
  };
  for (auto [lo, hi] : kSpace) {
    if (lo > next) add(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCp) add(next, kMaxCp);
  return out;
}

const char* kNothing = "[^\\x{0}-\\x{10FFFF}]";  // a class that matches no code point
const char* kAnything = "[\\x{0}-\\x{10FFFF}]";
const char* kDot = "[^\\x{A}\\x{D}\\x{2028}\\x{2029}]";

bool is_ascii_word(std::uint32_t c) {
  return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}

// Appends one code point as an RE2 literal.
void literal(std::string& out, std::uint32_t cp) {
  if (is_ascii_word(cp) || cp == ' ') out += static_cast<char>(cp);
  else out += hex(cp);
}

class Translator {
 public:
  explicit Translator(std::string_view p) : p_(p) {}

  std::string run() {
    if (p_.size() > kMaxPatternBytes)
      throw PatternError("pattern of " + std::to_string(p_.size()) + " bytes is longer than the limit of " +
                         std::to_string(kMaxPatternBytes));
    int depth = 0;
    while (!eof()) {
      const std::size_t at = i_;
      const char c = p_[i_];
      switch (c) {
        case '\\':
          ++i_;
          escape_outside();
          break;
        case '(':
          ++i_;
          if (++depth > kMaxGroupDepth) fail(at, "groups nested deeper than " + std::to_string(kMaxGroupDepth));
          group_open(at);
          break;
        case ')':
          ++i_;
          if (--depth < 0) fail(at, "unmatched ')'");
          out_ += ')';
          break;
        case '[':
          ++i_;
          char_class(at);
          break;
        case '.':
          ++i_;
          out_ += kDot;
          break;
        case '{':
          brace(at);
          break;
        case '}':
        case ']':
          ++i_;
          out_ += '\\';
          out_ += c;
          break;
        case '^':
        case '$':
        case '|':
        case '*':
        case '+':
        case '?':
          ++i_;
          out_ += c;
          break;
        default:
          literal(out_, next_cp());
      }
    }
    if (depth > 0) fail(i_, "missing ')'");
    return std::move(out_);
  }

 private:
  std::string_view p_;
  std::size_t i_ = 0;
  std::string out_;

  [[noreturn]] void fail(std::size_t at, const std::string& why) const {
    throw PatternError(why + " at offset " + std::to_string(at));
  }
  bool eof() const { return i_ >= p_.size(); }
  bool peek_is(char c) const { return !eof() && p_[i_] == c; }

  std::uint32_t next_cp() {
    const std::size_t at = i_;
    const auto b0 = static_cast<unsigned char>(p_[i_]);
    int n;
    std::uint32_t cp;
    if (b0 < 0x80) {
      ++i_;
      return b0;
    }
    if ((b0 & 0xE0) == 0xC0) { n = 2; cp = b0 & 0x1F; }
    else if ((b0 & 0xF0) == 0xE0) { n = 3; cp = b0 & 0x0F; }
    else if ((b0 & 0xF8) == 0xF0) { n = 4; cp = b0 & 0x07; }
    else fail(at, "invalid UTF-8");
    if (i_ + n > p_.size()) fail(at, "invalid UTF-8");
    for (int k = 1; k < n; ++k) {
      const auto b = static_cast<unsigned char>(p_[i_ + k]);
      if ((b & 0xC0) != 0x80) fail(at, "invalid UTF-8");
      cp = (cp << 6) | (b & 0x3F);
    }
    static constexpr std::uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > kMaxCp || (cp >= 0xD800 && cp <= 0xDFFF)) fail(at, "invalid UTF-8");
    i_ += n;
    return cp;
  }

  unsigned hex_digits(int n, std::size_t at, const char* what) {
    unsigned v = 0;
    for (int k = 0; k < n; ++k) {
      if (eof() || !std::isxdigit(static_cast<unsigned char>(p_[i_]))) fail(at, std::string("bad ") + what + " escape");
      const char h = p_[i_++];
      v = v * 16 + static_cast<unsigned>(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
    }
    return v;
  }

  // An escape that stands for one code point or for a set. `single` is set with `cp` for the former;
  // otherwise `set` holds RE2 text usable inside brackets (`in_class`) or on its own.
  struct Atom {
    bool single = false;
    std::uint32_t cp = 0;
    std::string set;  // RE2 text; for an empty set ("nothing") it is empty and `nothing` is set
    bool nothing = false;
  };

  // Parses the escape after '\' (i_ is past the backslash).
  Atom escape(bool in_class) {
    const std::size_t at = i_ - 1;
    if (eof()) fail(at, "trailing backslash");
    const char c = p_[i_];
    Atom a;
    auto one = [&](std::uint32_t cp) {
      a.single = true;
      a.cp = cp;
      return a;
    };
    auto set = [&](std::string s) {
      a.set = std::move(s);
      return a;
    };
    switch (c) {
      case 'd': case 'D': case 'w': case 'W':
        ++i_;
        return set(std::string("\\") + c);
      case 's':
        ++i_;
        return set(in_class ? space_body(false) : "[" + space_body(false) + "]");
      case 'S':
        ++i_;
        return set(in_class ? space_body(true) : "[^" + space_body(false) + "]");
      case 'b':
        ++i_;
        if (in_class) return one(0x08);
        return set("\\b");
      case 'B':
        ++i_;
        if (in_class) fail(at, "\\B inside a character class");
        return set("\\B");
      case 't': ++i_; return one('\t');
      case 'n': ++i_; return one('\n');
      case 'r': ++i_; return one('\r');
      case 'f': ++i_; return one('\f');
      case 'v': ++i_; return one('\v');
      case '0':
        ++i_;
        if (!eof() && p_[i_] >= '0' && p_[i_] <= '9') fail(at, "octal escapes are not supported");
        return one(0);
      case '1': case '2': case '3': case '4': case '5': case '6': case '7': case '8': case '9':
        fail(at, "backreferences are not supported (they cannot be matched in linear time)");
      case 'k':
        fail(at, "named backreferences are not supported (they cannot be matched in linear time)");
      case 'c': {
        ++i_;
        if (eof() || !std::isalpha(static_cast<unsigned char>(p_[i_]))) fail(at, "bad \\c escape");
        return one(static_cast<std::uint32_t>(static_cast<unsigned char>(p_[i_++])) % 32);
      }
      case 'x':
        ++i_;
        return one(hex_digits(2, at, "\\x"));
      case 'u': {
        ++i_;
        if (peek_is('{')) {
          ++i_;
          std::uint32_t v = 0;
          int n = 0;
          while (!eof() && p_[i_] != '}') {
            v = v * 16 + hex_digits(1, at, "\\u{}");
            if (++n > 6) fail(at, "bad \\u{} escape");
          }
          if (!peek_is('}') || n == 0 || v > kMaxCp) fail(at, "bad \\u{} escape");
          ++i_;
          if (v >= 0xD800 && v <= 0xDFFF) {
            a.nothing = true;
            return a;
          }
          return one(v);
        }
        std::uint32_t v = hex_digits(4, at, "\\u");
        if (v >= 0xD800 && v <= 0xDBFF && i_ + 6 <= p_.size() && p_[i_] == '\\' && p_[i_ + 1] == 'u') {
          const std::size_t save = i_;
          i_ += 2;
          bool ok = true;
          for (int k = 0; k < 4; ++k)
            if (!std::isxdigit(static_cast<unsigned char>(p_[i_ + k]))) ok = false;
          if (ok) {
            const std::uint32_t lo = hex_digits(4, at, "\\u");
            if (lo >= 0xDC00 && lo <= 0xDFFF) return one(0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00));
          }
          i_ = save;
        }
        if (v >= 0xD800 && v <= 0xDFFF) {  // a lone surrogate: no UTF-8 string holds it
          a.nothing = true;
          return a;
        }
        return one(v);
      }
      case 'p':
      case 'P': {
        ++i_;
        if (!peek_is('{')) fail(at, std::string("\\") + c + " needs a {property}");
        const std::size_t close = p_.find('}', i_);
        if (close == std::string_view::npos) fail(at, "unterminated \\p{...}");
        std::string name(p_.substr(i_ + 1, close - i_ - 1));
        i_ = close + 1;
        for (const char* prefix : {"Script=", "sc=", "General_Category=", "gc=", "Script_Extensions=", "scx="})
          if (name.rfind(prefix, 0) == 0) name = name.substr(std::string_view(prefix).size());
        if (name.empty()) fail(at, "empty \\p{} property");
        for (char ch : name)
          if (!is_ascii_word(static_cast<unsigned char>(ch))) fail(at, "unsupported Unicode property '" + name + "'");
        return set(std::string("\\") + c + "{" + name + "}");
      }
      default: {
        // Identity escape (Annex B): the character itself.
        return one(next_cp());
      }
    }
  }

  void escape_outside() {
    Atom a = escape(false);
    if (a.nothing) out_ += kNothing;
    else if (a.single) literal(out_, a.cp);
    else out_ += a.set;
  }

  void group_open(std::size_t at) {
    if (!peek_is('?')) {
      out_ += '(';
      return;
    }
    ++i_;
    if (peek_is(':')) {
      ++i_;
      out_ += "(?:";
      return;
    }
    if (peek_is('=') || peek_is('!')) fail(at, "lookahead assertions are not supported (RE2 runs in linear time without them)");
    if (peek_is('<')) {
      ++i_;
      if (peek_is('=') || peek_is('!'))
        fail(at, "lookbehind assertions are not supported (RE2 runs in linear time without them)");
      const std::size_t close = p_.find('>', i_);
      if (close == std::string_view::npos || close == i_) fail(at, "bad group name");
      i_ = close + 1;
      out_ += "(?:";  // named group: the name only matters for backreferences, which are refused
      return;
    }
    fail(at, "unsupported group syntax '(?' (inline flags are not ECMA-262)");
  }

  // `{n}`, `{n,}`, `{n,m}` is a quantifier; any other '{' is a literal (Annex B).
  void brace(std::size_t at) {
    std::size_t j = i_ + 1;
    auto number = [&](long& v) {
      const std::size_t s = j;
      v = 0;
      while (j < p_.size() && p_[j] >= '0' && p_[j] <= '9') {
        if (v <= kMaxRepeat) v = v * 10 + (p_[j] - '0');
        ++j;
      }
      return j > s;
    };
    long lo = 0, hi = 0;
    bool quant = number(lo);
    bool has_hi = false;
    if (quant && j < p_.size() && p_[j] == ',') {
      ++j;
      has_hi = number(hi);
    } else {
      hi = lo;
      has_hi = true;
    }
    quant = quant && j < p_.size() && p_[j] == '}';
    if (!quant) {
      ++i_;
      out_ += "\\{";
      return;
    }
    if (lo > kMaxRepeat || (has_hi && hi > kMaxRepeat))
      fail(at, "repetition count over " + std::to_string(kMaxRepeat) + " (RE2's limit)");
    if (has_hi && hi < lo) fail(at, "numbers out of order in {} quantifier");
    out_.append(p_.substr(i_, j + 1 - i_));
    i_ = j + 1;
  }

  void char_class(std::size_t at) {
    bool negate = false;
    if (peek_is('^')) {
      ++i_;
      negate = true;
    }
    if (peek_is(']')) {  // [] matches nothing, [^] anything
      ++i_;
      out_ += negate ? kAnything : kNothing;
      return;
    }
    std::string body;
    bool any_item = false;
    while (!eof() && p_[i_] != ']') {
      Atom a = class_atom();
      if (a.single && i_ + 1 < p_.size() && p_[i_] == '-' && p_[i_ + 1] != ']') {
        const std::size_t dash = i_;
        ++i_;
        Atom b = class_atom();
        if (!b.single) fail(dash, "bad character class range");
        if (b.cp < a.cp) fail(dash, "character class range out of order");
        body += range(a.cp, b.cp);
        any_item = true;
        continue;
      }
      if (a.nothing) continue;
      body += a.single ? hex(a.cp) : a.set;
      any_item = true;
    }
    if (eof()) fail(at, "missing ']'");
    ++i_;
    if (!any_item) {  // only lone surrogates: nothing (or anything when negated)
      out_ += negate ? kAnything : kNothing;
      return;
    }
    out_ += negate ? "[^" : "[";
    out_ += body;
    out_ += ']';
  }

  Atom class_atom() {
    if (p_[i_] == '\\') {
      ++i_;
      return escape(true);
    }
    Atom a;
    a.single = true;
    a.cp = next_cp();
    return a;
  }
};

}  // namespace

std::string ecma_to_re2(std::string_view pattern) { return Translator(pattern).run(); }

Pattern::Pattern(std::string_view ecma) : source_(ecma), re2_src_(ecma_to_re2(ecma)) {
  RE2::Options o;
  o.set_encoding(RE2::Options::EncodingUTF8);
  o.set_log_errors(false);
  o.set_never_capture(true);
  o.set_max_mem(kPatternMaxMem);
  re_ = std::make_unique<RE2>(re2_src_, o);
  if (!re_->ok()) throw PatternError("RE2 cannot compile it: " + re_->error());
}

Pattern::~Pattern() = default;

bool Pattern::search(std::string_view text) const {
  return RE2::PartialMatch(re2::StringPiece(text.data(), text.size()), *re_);
}

bool Pattern::full_match(std::string_view text) const {
  return RE2::FullMatch(re2::StringPiece(text.data(), text.size()), *re_);
}

}  // namespace quarry::schemas
