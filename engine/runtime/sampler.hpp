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
#include <utility>
#include <vector>

#include "engine/core/constraint.hpp"
#include "engine/core/rng.hpp"
#include "engine/core/types.hpp"

namespace quarry::engine {

struct SamplingParams {
  float temperature = 0.f;  ///< 0: greedy
  std::size_t top_k = 0;    ///< 0: off
  float top_p = 1.f;        ///< 1: off; keep the smallest set with cumulative probability >= top_p
  float min_p = 0.f;        ///< 0: off; drop tokens with p < min_p * p_max
  std::optional<std::uint64_t> seed;  ///< per-request RNG seed; unset: drawn from std::random_device
};

/// A token distribution as the sampler draws from it: the kept token ids and their probabilities
/// (renormalised over the kept set, summing to 1), in descending probability (ties by id).
struct TokenDistribution {
  std::vector<TokenId> ids;
  std::vector<double> probs;
  /// Probability of `token` (0 when it is not kept).
  double prob(TokenId token) const {
    for (std::size_t i = 0; i < ids.size(); ++i)
      if (ids[i] == token) return probs[i];
    return 0.0;
  }
  bool empty() const { return ids.empty(); }
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

  /// The distribution sample() draws from: after the bitmask, temperature, top-k, top-p and min-p; for
  /// temperature 0 the point mass on the argmax (first on ties). Empty when the mask allows nothing.
  /// Speculative sampling (engine/runtime/speculative.hpp) needs both the draft's and the target's.
  void distribution(std::span<const float> logits, std::span<const std::uint32_t> bitmask, TokenDistribution& out);
  /// One draw from `d` (one uniform from this sampler's stream); -1 if `d` is empty.
  TokenId sample_from(const TokenDistribution& d);
  /// Uniform in [0, 1) from this sampler's stream.
  double uniform() { return rng_.uniform(); }
  /// 64 bits from this sampler's stream: the key of a draw made elsewhere (Backend::sample_rows), so
  /// that a seeded request's draws stay reproducible.
  std::uint64_t next_key() { return rng_.next(); }

  const SamplingParams& params() const { return params_; }

 private:
  /// sample() without top-k, top-p or min-p: the draw from the whole softmax by selection (expected
  /// linear time), not through a sorted distribution; the same token as sample_from(distribution()) for
  /// the same uniform, up to the rounding of the sums.
  TokenId sample_whole(std::span<const float> logits, std::span<const std::uint32_t> bitmask);

  /// Fills cand_ with (logit / temperature, id) of every id the bitmask allows whose logit is not NaN, in
  /// id order; returns the largest of those values (-infinity when there is none).
  float collect(std::span<const float> logits, std::span<const std::uint32_t> bitmask);

  struct Weighted {
    double e;                         ///< exp(logit / temperature - max)
    std::pair<float, TokenId> c;      ///< as in cand_
  };
  SamplingParams params_;
  Rng rng_;
  std::vector<std::pair<float, TokenId>> cand_;
  std::vector<Weighted> weighted_;
  TokenDistribution dist_;
};

}  // namespace quarry::engine
