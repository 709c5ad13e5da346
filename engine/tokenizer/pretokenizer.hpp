// Pre-tokenizer of the Qwen2/Qwen3 and Llama-3 tokenizers: a hand-written scanner with the exact
// semantics of the Split regex (behavior Isolated, invert false) of their tokenizer.json:
//
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,K}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//   \s*[\r\n]+|\s+(?!\S)|\s+
//
// with K = 1 (Qwen2/3, written `\p{N}`) or K = 3 (Llama-3). Semantics are those of a backtracking
// regex engine (Oniguruma in Hugging Face tokenizers): leftmost-first alternation, greedy quantifiers,
// and the backtracking of `\s*[\r\n]+` and `\s+(?!\S)` resolved in closed form. Every alternative is
// decided in time linear in the length of its match (plus one scan of a whitespace run), without
// recursion, so the whole split is O(n).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace quarry::engine {

class RegexSplitter {
 public:
  /// The splitter for `pattern` (the "Regex" string of a tokenizer.json Split pre-tokenizer), or
  /// nullopt if the pattern is not one this scanner implements.
  static std::optional<RegexSplitter> for_pattern(std::string_view pattern);

  /// Byte ranges [begin, end) of the pieces of well-formed UTF-8 `text`, in order, covering it.
  void split(std::string_view text, std::vector<std::pair<std::size_t, std::size_t>>& pieces) const;

  /// The Qwen2/Qwen3 pattern (digits one at a time).
  static const char* qwen2_pattern();
  /// The Llama-3 pattern (digits in groups of up to three).
  static const char* llama3_pattern();

 private:
  explicit RegexSplitter(std::size_t max_digits) : max_digits_(max_digits) {}
  std::size_t max_digits_;
};

}  // namespace quarry::engine
