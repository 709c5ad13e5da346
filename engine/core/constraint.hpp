// Per-sequence constrained decoding as the runtime sees it: a token bitmask before each sample, the
// accepted tokens after it, rollback for speculative decoding, jump-forward. Implemented by the grammar
// room (engine/grammar/constraint.hpp: GrammarConstraint over a compiled JSON Schema); sees tokens,
// never the model (ARCHITECTURE.md, engine commitment 5).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "engine/core/types.hpp"

namespace quarry::engine {

/// Per-sequence constrained decoding (a grammar matcher): fills the token bitmask before each sample
/// and sees each accepted token. Sees tokens, never the model.
class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  /// Writes the allowed set: ceil(vocab_size / 32) words, bit i of word w allows token 32 w + i.
  virtual void fill_bitmask(std::span<std::uint32_t> bitmask) = 0;
  /// The sampled token (always one the last bitmask allowed).
  virtual void accept(TokenId token) = 0;
  /// True when the constraint is complete (generation stops with FinishReason::constraint).
  virtual bool is_terminated() const { return false; }
  /// Jump-forward: tokens the constraint forces next (the only continuation it allows), already
  /// accepted by it. The engine appends them to the output without sampling and feeds them to the
  /// model like prompt tokens in the next forward call. Default: none.
  virtual std::vector<TokenId> take_forced_tokens() { return {}; }
  /// Speculative drafts: the tokenizer's encoding of the text the constraint forces next (every
  /// token, the last included), without accepting any. The drafter proposes them without running the
  /// MTP module; verification decides, so a tokenization the model would not choose costs only
  /// acceptance. Default: none.
  virtual std::vector<TokenId> forced_text_tokens() const { return {}; }
  /// Undoes the last `n` accepted tokens (speculative decoding drops rejected drafts; XGrammar's
  /// rollback). Tokens taken through take_forced_tokens() count one each. Only called when
  /// supports_rollback() is true; the default throws std::logic_error.
  virtual void rollback(std::size_t n);
  /// True if rollback() works (the engine drafts only for sequences whose constraint can roll back).
  virtual bool supports_rollback() const { return false; }
};

/// True if `bitmask` (see TokenConstraint::fill_bitmask) allows `token`; an empty mask allows everything.
inline bool bitmask_allows(std::span<const std::uint32_t> bitmask, TokenId token) {
  if (bitmask.empty()) return true;
  const auto t = static_cast<std::size_t>(token);
  return t / 32 < bitmask.size() && ((bitmask[t / 32] >> (t % 32)) & 1u);
}

}  // namespace quarry::engine
