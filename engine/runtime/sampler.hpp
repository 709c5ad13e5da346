// Token sampling from one row of logits: token bitmask, temperature, top-k, top-p, min-p, seeded RNG.
//
// Order of the filters as Hugging Face generate's logits processors (TemperatureLogitsWarper,
// TopKLogitsWarper, TopPLogitsWarper, MinPLogitsWarper): mask -> temperature -> top-k -> top-p -> min-p,
// then a draw from the renormalised distribution. temperature == 0 is greedy (argmax, first on ties).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "engine/tokenizer/tokenizer.hpp"

namespace quarry::engine {

struct SamplingParams {
  float temperature = 0.f;  ///< 0: greedy
  std::size_t top_k = 0;    ///< 0: off
  float top_p = 1.f;        ///< 1: off; keep the smallest set with cumulative probability >= top_p
  float min_p = 0.f;        ///< 0: off; drop tokens with p < min_p * p_max
  std::optional<std::uint64_t> seed;  ///< per-request RNG seed; unset: drawn from std::random_device
};

/// xoshiro256** (Blackman & Vigna 2018) seeded through splitmix64: the same seed gives the same
/// stream on every platform (std:: distributions are implementation-defined, so none are used).
class Rng {
 public:
  explicit Rng(std::uint64_t seed);
  std::uint64_t next();
  /// Uniform in [0, 1) with 53 random bits.
  double uniform();

 private:
  std::uint64_t s_[4];
};

/// Per-request sampler. Not thread-safe; one per sequence.
class Sampler {
 public:
  /// Throws std::invalid_argument on temperature < 0, top_p outside (0, 1], min_p outside [0, 1].
  explicit Sampler(const SamplingParams& params);

  /// Picks the next token from logits [vocab] f32. `bitmask` (may be empty: everything allowed) holds
  /// ceil(vocab / 32) uint32 words, bit i of word w allows token 32 w + i; disallowed tokens get
  /// probability 0. If the mask allows nothing, returns -1.
  TokenId sample(std::span<const float> logits, std::span<const std::uint32_t> bitmask = {});

  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  Rng rng_;
  std::vector<std::pair<float, TokenId>> cand_;
};

/// True if `bitmask` (see Sampler::sample) allows `token`; an empty mask allows everything.
inline bool bitmask_allows(std::span<const std::uint32_t> bitmask, TokenId token) {
  if (bitmask.empty()) return true;
  const auto t = static_cast<std::size_t>(token);
  return t / 32 < bitmask.size() && ((bitmask[t / 32] >> (t % 32)) & 1u);
}

}  // namespace quarry::engine
