// Code-point automata for string constraints: ECMAScript regular expressions (JSON Schema `pattern`,
// `format`), string length bounds and key sets, combined by product / complement, then lowered to the
// byte-level grammar (grammar.hpp) with JSON string escaping.
//
// Algorithm sources: Thompson construction and subset construction (Aho, Lam, Sethi, Ullman,
// "Compilers", 3.7); interval alphabets for Unicode as in RE2 / Rust regex-syntax (utf8 sequences);
// Outlines (Willard & Louf 2023, "Efficient Guided Generation for LLMs"): regex -> FSM, then FSM over
// tokens. ECMAScript regex syntax: ECMA-262, 22.2 (RegExp pattern grammar).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace quarry::engine::grammar {

/// A set of Unicode code points: sorted, disjoint, non-adjacent closed intervals [lo, hi].
/// Surrogates (U+D800..U+DFFF) never occur in sets built here (they cannot appear in UTF-8).
using CpSet = std::vector<std::pair<std::uint32_t, std::uint32_t>>;

inline constexpr std::uint32_t kMaxCodePoint = 0x10FFFF;

CpSet cp_normalize(CpSet s);             ///< sort, merge, remove surrogates
CpSet cp_any();                          ///< every scalar value
CpSet cp_complement(const CpSet& s);     ///< cp_any() minus s
CpSet cp_intersect(const CpSet& a, const CpSet& b);
bool cp_contains(const CpSet& s, std::uint32_t c);

/// Error in a regular expression: `what()` names the reason and the character offset.
struct RegexError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Nondeterministic automaton over code points, epsilon moves allowed; one start, one accept state.
struct Nfa {
  struct Edge {
    CpSet set;
    int to;
  };
  std::vector<std::vector<Edge>> out;
  std::vector<std::vector<int>> eps;
  int start = 0;
  int accept = 0;
  int add_state();
};

/// Deterministic automaton over code points; edges of a state have disjoint intervals. Missing
/// transitions go to an implicit dead state.
struct Dfa {
  struct Edge {
    std::uint32_t lo, hi;
    int to;
  };
  std::vector<std::vector<Edge>> out;
  std::vector<char> accepting;
  int start = 0;
  std::size_t size() const { return out.size(); }
};

/// Parses an ECMAScript regular expression (ECMA-262 22.2 syntax, Unicode code points) and returns
/// the NFA of the strings in which it *finds a match* (JSON Schema `pattern` semantics: unanchored
/// unless the alternative begins with `^` / ends with `$`). With `full_match`, the whole string must
/// match (used for `format` definitions). Throws RegexError for lookaround, backreferences, word
/// boundaries, Unicode property escapes, anchors not at the start/end of an alternative, or patterns
/// larger than the limits (100k NFA states).
Nfa parse_regex(std::string_view pattern, bool full_match = false);

/// Subset construction; throws RegexError if the DFA would exceed `max_states`.
Dfa determinize(const Nfa& nfa, std::size_t max_states = 20000);
/// Removes states that cannot reach an accepting state (and unreachable ones); minimises by
/// partition refinement in O(m log n) over the elementary code point intervals of the edges
/// (A. Valmari, "Fast brief practical DFA minimization", IPL 112(6), 2012; partial transition
/// functions). Throws RegexError past 50M interval transitions.
Dfa minimize(const Dfa& dfa);
Dfa dfa_intersect(const Dfa& a, const Dfa& b, std::size_t max_states = 50000);
Dfa dfa_complement(const Dfa& a);
/// Strings of code-point length in [min_len, max_len] (max_len < 0: unbounded).
Dfa dfa_length(std::int64_t min_len, std::int64_t max_len);
/// Every string (`.*` over all scalar values).
Dfa dfa_any_string();
/// Exactly the given strings (UTF-8 input; invalid words match nothing): their trie, minimised.
/// Time and size linear in the total length.
Dfa dfa_literals(const std::vector<std::string>& words);
bool dfa_is_empty(const Dfa& a);
/// Whether the DFA accepts the UTF-8 string (invalid UTF-8 -> false).
bool dfa_matches(const Dfa& a, std::string_view utf8);

/// Decodes one UTF-8 scalar value at s[i]; advances i. Returns -1 on invalid input.
std::int64_t utf8_decode(std::string_view s, std::size_t& i);
void utf8_append(std::string& out, std::uint32_t cp);

/// UTF-8 byte-range sequences covering the code points [lo, hi] (RE2 / regex-syntax utf8 ranges):
/// each sequence is a list of per-byte ranges; their concatenations are exactly the encodings.
std::vector<std::vector<std::pair<std::uint8_t, std::uint8_t>>> utf8_sequences(std::uint32_t lo,
                                                                               std::uint32_t hi);

}  // namespace quarry::engine::grammar
