// Structured output (vLLM v1's StructuredOutputManager): owns the grammar vocabulary and compiler of an
// engine, makes each request's constraint from its JSON Schema (compiled once per schema text and
// options), and gives each step's token bitmasks -- to the sampler after the forward call, and before
// it to the LM head, which then computes only the groups of ids the grammar allows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/constraint.hpp"
#include "engine/runtime/sequence.hpp"
#include "engine/tokenizer/tokenizer.hpp"

namespace quarry::engine {

namespace grammar {
class GrammarCompiler;
class GroundingVocab;
class TokenizerInfo;
}  // namespace grammar

class StructuredOutput {
 public:
  /// `tokenizer` may be null (then no schema can be compiled); `eos_ids` are the ids the grammar allows
  /// where the value may end; `model_vocab` is the model's vocabulary size (masks cover it).
  StructuredOutput(std::shared_ptr<const Tokenizer> tokenizer, std::vector<TokenId> eos_ids, std::size_t model_vocab);
  ~StructuredOutput();

  /// The grammar vocabulary (the tokenizer's byte strings), built on first use. Throws
  /// std::invalid_argument without a tokenizer.
  std::shared_ptr<const grammar::TokenizerInfo> vocabulary();
  /// A fresh constraint for `schema_text`. Throws std::invalid_argument with the compiler's message if
  /// the schema cannot be compiled, or the tokenizer's vocabulary is larger than the model's.
  std::shared_ptr<TokenConstraint> json_schema_constraint(std::string_view schema_text, bool lenient = false);
  /// The same, grounded in `document_pages` (engine/grammar/grounding.hpp) when they are not empty and
  /// the grammar has grounded locations.
  std::shared_ptr<TokenConstraint> json_schema_constraint(std::string_view schema_text, bool lenient,
                                                          const std::vector<std::string>& document_pages);
  /// What the grammar of `schema_text` leaves to a validator (Engine::json_schema_notes).
  JsonSchemaNotes json_schema_notes(std::string_view schema_text, bool lenient);

  /// Words of one bitmask (ceil(model_vocab / 32)).
  std::size_t mask_words() const { return mask_words_; }
  /// The bitmasks of this step's logit rows of a constrained sequence: the drafter's k + 1 masks of
  /// the verify rows, else the constraint's current mask (computed once per step).
  std::span<const std::vector<std::uint32_t>> step_masks(Sequence& s);
  /// The LM head's groups of 16 ids for this step (see EngineOptions::grammar_lm_head): the union over
  /// every logit row of the groups holding an allowed id, sorted; empty (compute every logit) when a
  /// row is unconstrained, or any row or the union allows ids in more than half of the groups.
  std::vector<std::uint32_t> lm_head_groups(std::span<Sequence* const> logit_owners, std::size_t n_logits);

 private:
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::vector<TokenId> eos_ids_;
  std::size_t model_vocab_, mask_words_;
  std::shared_ptr<const grammar::TokenizerInfo> vocab_;
  std::unique_ptr<grammar::GrammarCompiler> compiler_;
  std::shared_ptr<const grammar::GroundingVocab> ground_vocab_;  // built on the first grounded request
};

}  // namespace quarry::engine
