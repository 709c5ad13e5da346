// JSON Schema regular expressions (`pattern`, `patternProperties`) run on RE2, in time linear in
// the length of the string matched and memory bounded per expression, never on std::regex (whose
// backtracking executor recurses once per character and can take exponential time).
//
// JSON Schema writes patterns in ECMA-262 syntax (RegExp pattern grammar, ECMA-262 22.2, with the
// `u` flag's code point semantics); RE2's syntax (github.com/google/re2/wiki/Syntax) differs in a
// few places, so a pattern is translated before RE2 compiles it:
//
// | ECMA-262                      | RE2 after translation                                         |
// |-------------------------------|---------------------------------------------------------------|
// | `.`                           | `[^\n\r\x{2028}\x{2029}]` (ECMA excludes all line terminators) |
// | `\s` / `\S`                   | the ECMA WhiteSpace + LineTerminator set (\t \n \v \f \r, space, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000, U+FEFF) / its complement (RE2's `\s` is ASCII only) |
// | `\d \D \w \W \b \B`           | unchanged (ASCII in both)                                      |
// | `\uHHHH`, `\u{H..}`, surrogate pairs `\uD83D\uDE00` | `\x{...}` (a lone surrogate matches nothing)  |
// | `\cX`, `\0`, `\xHH`           | `\x{...}`                                                      |
// | `[\b]`                        | U+0008                                                         |
// | `[]` / `[^]`                  | a class of nothing / of every code point (RE2 reads `[]` as the start of a class holding `]`) |
// | `(?<name>...)`                | `(?:...)`                                                      |
// | a `{` that is not a quantifier, `}` , `]` | literals (Annex B)                                 |
// | other identity escapes (`\/`, `\-`, `\a`, `\z`, ...) | the character itself (Annex B)          |
// | `\p{..}` / `\P{..}`           | passed to RE2 (general categories and scripts; `Script=`, `sc=`, `General_Category=`, `gc=` prefixes dropped) |
//
// Refused (an error at schema load, naming the reason and the offset): backreferences (`\1`,
// `\k<name>`), lookahead and lookbehind (`(?=`, `(?!`, `(?<=`, `(?<!`), other `(?` groups (inline
// flags are not ECMA-262), quantifier counts over 1000 (RE2's limit), nesting deeper than 250 groups,
// patterns longer than kMaxPatternBytes, and whatever RE2 itself rejects (its message is kept).
#pragma once

#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

namespace re2 {
class RE2;
}

namespace quarry::schemas {

/// A pattern that cannot be run in linear time or is not valid ECMA-262: `what()` gives the reason
/// and the byte offset in the pattern.
struct PatternError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Longest pattern accepted (bytes of UTF-8).
inline constexpr std::size_t kMaxPatternBytes = 16 * 1024;
/// Memory budget of one compiled pattern (RE2::Options::max_mem, bytes): programs and the lazily
/// built DFA cache stay within it; a larger program is refused at load.
inline constexpr std::int64_t kPatternMaxMem = 8 << 20;

/// Translates an ECMA-262 pattern to RE2 syntax (table above). Throws PatternError.
std::string ecma_to_re2(std::string_view pattern);

/// A compiled pattern with JSON Schema semantics: `search` is true when the pattern matches
/// somewhere in the string (unanchored unless the pattern anchors itself). Immutable and
/// thread-safe (RE2's matching is); time O(pattern size x string length), no recursion.
class Pattern {
 public:
  /// Translates and compiles; throws PatternError naming the reason.
  explicit Pattern(std::string_view ecma);
  ~Pattern();
  Pattern(const Pattern&) = delete;
  Pattern& operator=(const Pattern&) = delete;

  /// Whether the pattern matches a substring of `text` (UTF-8; invalid sequences match nothing
  /// multibyte, as in RE2).
  bool search(std::string_view text) const;
  /// Whether the whole of `text` matches.
  bool full_match(std::string_view text) const;

  const std::string& source() const { return source_; }      ///< the pattern as written
  const std::string& translated() const { return re2_src_; }  ///< what RE2 compiled

 private:
  std::string source_, re2_src_;
  std::unique_ptr<re2::RE2> re_;
};

}  // namespace quarry::schemas
