#include "engine/grammar/random_walk.hpp"

#include <stdexcept>


namespace quarry::engine::grammar {

namespace eg = quarry::engine::grammar;

WalkResult random_walk(const std::shared_ptr<const eg::CompiledGrammar>& cg, std::mt19937_64& rng,
                       std::size_t max_tokens,
                       const std::function<void(eg::GrammarMatcher&, const std::vector<std::uint32_t>&)>& on_mask,
                       const std::function<void(eg::GrammarMatcher&)>& before_mask) {
  const eg::TokenizerInfo& tok = cg->tokenizer();
  eg::GrammarMatcher m(cg);
  std::vector<std::uint32_t> mask(tok.mask_words());
  std::vector<eg::TokenId> allowed, structural;
  WalkResult r;
  while (!m.is_terminated()) {
    if (before_mask) before_mask(m);
    m.fill_bitmask(mask);
    if (on_mask) on_mask(m, mask);
    allowed.clear();
    structural.clear();
    bool eos = false;
    for (std::size_t w = 0; w < mask.size(); ++w)
      for (std::uint32_t bits = mask[w]; bits; bits &= bits - 1) {
        auto id = static_cast<eg::TokenId>(w * 32 + static_cast<std::size_t>(__builtin_ctz(bits)));
        if (tok.is_eos(id)) { eos = true; continue; }
        allowed.push_back(id);
        const std::string& t = tok.token(id);
        if (t.find_first_of("}],\"") != std::string::npos) structural.push_back(id);
      }
    eg::TokenId pick;
    double bias = r.tokens > max_tokens / 2 ? 0.9 : 0.3;
    if (eos && (allowed.empty() || std::uniform_real_distribution<>(0, 1)(rng) < 0.7)) {
      pick = tok.eos_ids()[0];
    } else if (allowed.empty()) {
      throw std::runtime_error("walk stuck: no legal token and EOS not allowed after \"" + r.text + "\"");
    } else if (!structural.empty() && std::uniform_real_distribution<>(0, 1)(rng) < bias) {
      pick = structural[rng() % structural.size()];
    } else {
      pick = allowed[rng() % allowed.size()];
    }
    if (!m.accept(pick))
      throw std::runtime_error("token " + std::to_string(pick) + " allowed by the mask but rejected by accept()");
    if (!tok.is_eos(pick)) r.text += tok.token(pick);
    if (++r.tokens > max_tokens * 4) break;
  }
  r.terminated = m.is_terminated();
  return r;
}

}  // namespace quarry::engine::grammar
