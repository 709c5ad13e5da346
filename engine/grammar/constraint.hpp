// Grammar-constrained decoding for one request: a GrammarMatcher seen by the engine as a
// TokenConstraint (engine/runtime/engine.hpp).
//
//   auto info = grammar::TokenizerInfo::from_tokenizer(*tok);          // once per vocabulary
//   grammar::GrammarCompiler compiler(info);                            // caches by schema hash
//   req.constraint = std::make_shared<grammar::GrammarConstraint>(compiler.compile_json_schema(text));
//
// Termination: the constraint reports is_terminated() as soon as the text is a complete value and
// the grammar allows nothing but EOS next (e.g. after the closing brace of the root object with
// compact whitespace) -- the engine then stops without spending a forward step on the EOS token. If
// EOS is sampled where the grammar may end, the matcher terminates too.
//
// Jump-forward (GenerationRequest::jump_forward): take_forced_tokens() encodes the bytes the grammar
// forces next (GrammarMatcher::jump_forward, cut at a complete UTF-8 character) with the tokenizer --
// only the forced text, never re-tokenizing what came before -- and accepts all its tokens but the last
// (which could merge with the bytes after the forced text into a longer token); the engine
// feeds them to the model like prompt tokens (the policy of engine/grammar/README.md, as SGLang).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/grammar/matcher.hpp"
#include "engine/core/constraint.hpp"
#include "engine/tokenizer/tokenizer.hpp"

namespace quarry::engine::grammar {

/// TokenConstraint over a compiled grammar. One per sequence (not thread-safe).
class GrammarConstraint final : public TokenConstraint {
 public:
  /// `tokenizer` (optional) is needed for take_forced_tokens(); its ids must be the grammar's.
  explicit GrammarConstraint(std::shared_ptr<const CompiledGrammar> g,
                             std::shared_ptr<const Tokenizer> tokenizer = nullptr);

  /// Writes the allowed tokens (GrammarMatcher::fill_bitmask). `bitmask` must hold at least
  /// mask_words() words (throws std::invalid_argument otherwise); extra words are zeroed.
  void fill_bitmask(std::span<std::uint32_t> bitmask) override;
  /// Advances the matcher; throws std::logic_error for a token the last bitmask did not allow.
  void accept(TokenId token) override;
  /// True after EOS was accepted, or when the value is complete and only EOS could follow.
  bool is_terminated() const override;
  /// The tokens of the forced text but its last one, accepted (stops at the first token the grammar rejects, e.g. a
  /// special token the tokenizer matched in the text). Empty without a tokenizer or a forced text.
  std::vector<TokenId> take_forced_tokens() override;
  /// The forced text (GrammarMatcher::jump_forward) encoded whole, nothing accepted (needs the tokenizer).
  std::vector<TokenId> forced_text_tokens() const override;
  /// Undoes the last n accepted tokens (GrammarMatcher::rollback); n beyond the history resets.
  void rollback(std::size_t n) override;
  bool supports_rollback() const override { return true; }

  /// Grounded decoding over one document (GrammarMatcher::set_grounding); resets the matcher, so call
  /// it before the first token. Null turns it off.
  void set_grounding(std::shared_ptr<const GroundingIndex> index);

  const GrammarMatcher& matcher() const { return matcher_; }
  std::size_t mask_words() const { return matcher_.compiled().tokenizer().mask_words(); }

 private:
  /// Computes the next bitmask into cache_ unless it is current.
  void ensure_mask() const;

  std::shared_ptr<const Tokenizer> tokenizer_;
  mutable GrammarMatcher matcher_;
  mutable std::vector<std::uint32_t> cache_;
  mutable bool cache_valid_ = false;
};

}  // namespace quarry::engine::grammar
