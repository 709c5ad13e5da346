#include "engine/grammar/constraint.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "engine/tokenizer/tokenizer.hpp"

namespace quarry::engine::grammar {

GrammarConstraint::GrammarConstraint(std::shared_ptr<const CompiledGrammar> g,
                                     std::shared_ptr<const Tokenizer> tokenizer)
    : tokenizer_(std::move(tokenizer)), matcher_(std::move(g)) {
  cache_.resize(mask_words());
}

void GrammarConstraint::set_grounding(std::shared_ptr<const GroundingIndex> index) {
  matcher_.set_grounding(std::move(index));
  cache_valid_ = false;
}

void GrammarConstraint::ensure_mask() const {
  if (cache_valid_) return;
  matcher_.fill_bitmask(cache_);
  cache_valid_ = true;
}

void GrammarConstraint::fill_bitmask(std::span<std::uint32_t> bitmask) {
  if (bitmask.size() < cache_.size())
    throw std::invalid_argument("GrammarConstraint: bitmask of " + std::to_string(bitmask.size()) +
                                " words, the grammar's vocabulary needs " + std::to_string(cache_.size()));
  ensure_mask();
  std::copy(cache_.begin(), cache_.end(), bitmask.begin());
  std::fill(bitmask.begin() + static_cast<std::ptrdiff_t>(cache_.size()), bitmask.end(), 0u);
}

void GrammarConstraint::accept(TokenId token) {
  cache_valid_ = false;
  if (!matcher_.accept(token))
    throw std::logic_error("GrammarConstraint: token " + std::to_string(token) + " rejected by the grammar");
}

void GrammarConstraint::rollback(std::size_t n) {
  if (n == 0) return;
  matcher_.rollback(n);
  cache_valid_ = false;
}

bool GrammarConstraint::is_terminated() const {
  if (matcher_.is_terminated()) return true;
  if (!matcher_.can_terminate()) return false;
  // Complete value: terminated if nothing but EOS may follow.
  ensure_mask();
  const auto& info = matcher_.compiled().tokenizer();
  for (std::size_t w = 0; w < cache_.size(); ++w) {
    std::uint32_t bits = cache_[w];
    while (bits) {
      const int b = __builtin_ctz(bits);
      bits &= bits - 1;
      if (!info.is_eos(static_cast<TokenId>(w * 32 + static_cast<std::size_t>(b)))) return false;
    }
  }
  return true;
}

}  // namespace quarry::engine::grammar

namespace quarry::engine::grammar {

std::vector<TokenId> GrammarConstraint::forced_text_tokens() const {
  if (!tokenizer_ || matcher_.is_terminated()) return {};
  const std::string forced = matcher_.jump_forward();
  if (forced.empty()) return {};
  return tokenizer_->encode(forced);
}

std::vector<TokenId> GrammarConstraint::take_forced_tokens() {
  std::vector<TokenId> out;
  if (!tokenizer_ || matcher_.is_terminated()) return out;
  const std::string forced = matcher_.jump_forward();
  if (forced.empty()) return out;
  // The last token of the forced text stays with the model: the bytes after the forced text may merge
  // with it into a longer token (`":` + `"` -> `":"`), which forcing it would rule out.
  auto ids = tokenizer_->encode(forced);
  if (!ids.empty()) ids.pop_back();
  for (TokenId id : ids) {
    if (!matcher_.accept(id)) break;
    cache_valid_ = false;
    out.push_back(id);
  }
  return out;
}

}  // namespace quarry::engine::grammar
