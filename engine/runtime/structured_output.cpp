#include "engine/runtime/structured_output.hpp"

#include <algorithm>
#include <stdexcept>

#include "engine/grammar/constraint.hpp"
#include "engine/grammar/grounding.hpp"
#include "engine/grammar/matcher.hpp"

namespace quarry::engine {

StructuredOutput::StructuredOutput(std::shared_ptr<const Tokenizer> tokenizer, std::vector<TokenId> eos_ids,
                                   std::size_t model_vocab)
    : tokenizer_(std::move(tokenizer)),
      eos_ids_(std::move(eos_ids)),
      model_vocab_(model_vocab),
      mask_words_((model_vocab + 31) / 32) {}

StructuredOutput::~StructuredOutput() = default;

std::shared_ptr<const grammar::TokenizerInfo> StructuredOutput::vocabulary() {
  if (vocab_) return vocab_;
  if (!tokenizer_) throw std::invalid_argument("generate: a JSON Schema constraint needs a tokenizer");
  const std::size_t n = tokenizer_->vocab_size();
  std::vector<std::string> bytes(n);
  std::vector<grammar::TokenId> special, eos;
  for (std::size_t i = 0; i < n; ++i) {
    const auto id = static_cast<TokenId>(i);
    bytes[i] = tokenizer_->token_bytes(id);
    if (tokenizer_->is_special(id)) special.push_back(id);
  }
  // The engine's EOS ids (config.json, generation_config.json, tokenizer): the grammar allows them
  // exactly where the value may end.
  for (TokenId id : eos_ids_)
    if (id >= 0 && static_cast<std::size_t>(id) < n) eos.push_back(id);
  vocab_ = std::make_shared<const grammar::TokenizerInfo>(std::move(bytes), std::move(eos), std::move(special));
  return vocab_;
}

std::shared_ptr<TokenConstraint> StructuredOutput::json_schema_constraint(std::string_view schema_text, bool lenient) {
  auto vocab = vocabulary();
  if (vocab->vocab_size() > model_vocab_)
    throw std::invalid_argument("generate: tokenizer vocabulary (" + std::to_string(vocab->vocab_size()) +
                                ") larger than the model's (" + std::to_string(model_vocab_) + ")");
  if (!compiler_) compiler_ = std::make_unique<grammar::GrammarCompiler>(vocab);
  grammar::SchemaOptions opt;
  opt.lenient = lenient;
  try {
    return std::make_shared<grammar::GrammarConstraint>(compiler_->compile_json_schema(schema_text, opt), tokenizer_);
  } catch (const grammar::SchemaError& e) {
    throw std::invalid_argument(std::string("generate: JSON Schema: ") + e.what());
  }
}

std::shared_ptr<TokenConstraint> StructuredOutput::json_schema_constraint(std::string_view schema_text, bool lenient,
                                                                          const std::vector<std::string>& document_pages) {
  auto c = json_schema_constraint(schema_text, lenient);
  if (document_pages.empty()) return c;
  auto* gc = dynamic_cast<grammar::GrammarConstraint*>(c.get());
  if (!gc) return c;
  const auto& nodes = gc->matcher().compiled().grammar().nodes;
  if (std::none_of(nodes.begin(), nodes.end(), [](const grammar::GNode& n) { return n.source != 0; })) return c;
  if (!ground_vocab_) ground_vocab_ = std::make_shared<const grammar::GroundingVocab>(vocabulary());
  gc->set_grounding(grammar::GroundingIndex::build(ground_vocab_, document_pages));
  return c;
}

JsonSchemaNotes StructuredOutput::json_schema_notes(std::string_view schema_text, bool lenient) {
  json_schema_constraint(schema_text, lenient);  // checks and compiles (and caches) the grammar
  grammar::SchemaOptions opt;
  opt.lenient = lenient;
  const auto& meta = compiler_->compile_json_schema(schema_text, opt)->meta();
  return {meta.warnings, meta.post_validation};
}

std::span<const std::vector<std::uint32_t>> StructuredOutput::step_masks(Sequence& s) {
  const std::size_t k = s.n_drafts();
  if (s.drafted && s.job.masks.size() == k + 1) return s.job.masks;
  if (!s.has_step_mask) {
    s.step_mask.assign(mask_words_, 0u);
    s.constraint->fill_bitmask(s.step_mask);
    s.has_step_mask = true;
  }
  return {&s.step_mask, 1};
}

std::vector<std::uint32_t> StructuredOutput::lm_head_groups(std::span<Sequence* const> logit_owners,
                                                            std::size_t n_logits) {
  // The model computes whole groups of 16 ids: the union of the groups that hold an allowed id of some
  // row. Free text (a row allowing ids in more than half of the groups) computes every logit.
  const std::size_t n_groups = (model_vocab_ + 15) / 16;
  std::vector<char> used(n_groups, 0);
  std::size_t rows = 0;
  for (Sequence* sp : logit_owners) {
    Sequence& s = *sp;
    if (!s.constraint || s.done) return {};
    for (const auto& m : step_masks(s)) {
      std::size_t n_row = 0;
      for (std::size_t g = 0; g < n_groups; ++g) {
        const std::uint32_t bits = (m[g / 2] >> (16 * (g % 2))) & 0xFFFFu;
        if (bits) {
          used[g] = 1;
          ++n_row;
        }
      }
      if (n_row == 0 || 2 * n_row > n_groups) return {};
      ++rows;
    }
  }
  if (rows != n_logits) return {};
  std::vector<std::uint32_t> groups;
  for (std::size_t g = 0; g < n_groups; ++g)
    if (used[g]) groups.push_back(static_cast<std::uint32_t>(g));
  if (2 * groups.size() > n_groups) return {};
  return groups;
}

}  // namespace quarry::engine
