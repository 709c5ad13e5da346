// A portable seeded random stream (sampling, random checkpoints).
#pragma once

#include <cstdint>

namespace quarry::engine {

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

}  // namespace quarry::engine
