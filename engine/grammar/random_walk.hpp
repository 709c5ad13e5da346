// Random legal walks under the token bitmask: the generator of grammar property tests, benchmarks and
// `quarry schema bench` (a model-free stand-in for sampling).
#pragma once

#include <functional>
#include <memory>
#include <random>
#include <string>

#include "engine/grammar/matcher.hpp"

namespace quarry::engine::grammar {

struct WalkResult {
  std::string text;
  bool terminated = false;
  std::size_t tokens = 0;
};

/// One random legal walk: at each step a token drawn under the bitmask (uniformly, or with
/// probability `structural_bias` among tokens holding one of "}],\"" so that strings and arrays
/// end), until EOS. `on_mask(matcher, mask)` runs before each draw (timing / checks).
WalkResult random_walk(const std::shared_ptr<const CompiledGrammar>& cg, std::mt19937_64& rng,
                       std::size_t max_tokens,
                       const std::function<void(GrammarMatcher&, const std::vector<std::uint32_t>&)>&
                           on_mask = {},
                       const std::function<void(GrammarMatcher&)>& before_mask = {});

}  // namespace quarry::engine::grammar
