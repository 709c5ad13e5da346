// The pieces of Backend::sample_rows that every backend computes alike, so that the same logits, parameters
// and key give the same id on the CPU and on a GPU (up to the last bit of expf / logf, which the CPU's
// libm and the GPU's may round apart): the per-id uniform of a draw, the Gumbel noise, the order key of
// a candidate and its probability mass in fixed point. Header-only, host and device.
//
// The draw is the Gumbel-max trick (Gumbel 1954; Maddison, Tarlow and Minka, "A* Sampling", 2014):
// argmax_i (l_i / T + g_i) with g_i = -log(-log(u_i)) and u_i uniform is a draw from softmax(l / T), and
// from the softmax renormalised over any kept subset when the argmax runs over that subset only. It needs
// no sorted order and no cumulative sum: one pass and a max-reduction, as vLLM's random sampler (the
// exponential race p_i / E_i, the same trick) does on the GPU.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define QUARRY_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define QUARRY_HOST_DEVICE inline
#endif

namespace quarry::engine::sampling {

/// splitmix64's output function (Steele, Lea and Flood, "Fast splittable pseudorandom number
/// generators", 2014) over key + (id + 1) * the golden gamma: a counter-based stream, one value per id.
QUARRY_HOST_DEVICE std::uint64_t mix(std::uint64_t key, std::uint32_t id) {
  std::uint64_t z = key + (static_cast<std::uint64_t>(id) + 1u) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// Gumbel(0, 1) noise of `id` in the draw keyed by `key`: -log(-log(u)) in f32 with u in (0, 1) from 23
/// bits (never 0 or 1, so the noise is finite: within about [-2.8, 16.6]). f32, as vLLM's exponential race
/// on the GPU: a double log per id and draw made one block's draw over 151,936 ids take ~0.2 ms on an H200.
QUARRY_HOST_DEVICE float gumbel(std::uint64_t key, std::uint32_t id) {
  const float u = (static_cast<float>(mix(key, id) >> 41) + 0.5f) * 0x1.0p-23f;
  return -logf(-logf(u));
}

/// A scaled logit as a 64-bit key whose unsigned order is the sampler's order: the larger value first,
/// ties by the smaller id (the float's bits made monotonic in the high word, ~id in the low word).
QUARRY_HOST_DEVICE std::uint64_t order_key(float v, std::uint32_t id) {
#if defined(__CUDA_ARCH__)
  const std::uint32_t u = __float_as_uint(v);
#else
  std::uint32_t u;
  static_assert(sizeof(u) == sizeof(v));
  std::memcpy(&u, &v, sizeof u);
#endif
  const std::uint32_t ordered = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (static_cast<std::uint64_t>(ordered) << 32) | (0xffffffffu - id);
}

/// The unnormalised probability exp(v - max) of a candidate, in f32.
QUARRY_HOST_DEVICE float weight(float v, float max) { return expf(v - max); }

/// A candidate's probability mass for the top-p cut in fixed point: weight * 2^40 truncated (exact in f32,
/// then to an integer), so that 2^18 candidates sum exactly in 64 bits in any order (a GPU's block sums
/// in no fixed order; integer sums make the cut the same on every run and every backend).
QUARRY_HOST_DEVICE std::uint64_t mass(float weight) { return static_cast<std::uint64_t>(weight * 0x1.0p40f); }

/// mass(weight(v, max)) without the exp where it is 0 for certain: exp(-28) * 2^40 < 0.77.
QUARRY_HOST_DEVICE std::uint64_t mass_at(float v, float max) {
  const float d = v - max;
  return d < -28.f ? 0 : mass(expf(d));
}

/// Candidates with v < max - kGumbelReach never win a draw: the largest (always kept) scores at least
/// max - 2.82, any other at most v + 16.64 (the noise's range above).
inline constexpr float kGumbelReach = 20.f;

/// The mass a top-p cut must reach: ceil(top_p * total), at least 1 and at most total.
QUARRY_HOST_DEVICE std::uint64_t top_p_target(float top_p, std::uint64_t total) {
  const double t = ceil(static_cast<double>(top_p) * static_cast<double>(total));
  std::uint64_t target = t >= static_cast<double>(total) ? total : static_cast<std::uint64_t>(t);
  return target == 0 ? 1 : target;
}

}  // namespace quarry::engine::sampling
