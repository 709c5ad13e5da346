// Portable kernels for gemm() (any CPU, any compiler): weights are converted to f32 in L1-sized chunks
// of 4 rows x 256 columns, then each row of x is dotted with them using 8 independent partial sums
// (which compilers map onto the baseline SIMD registers). f16 -> f32 follows IEEE 754-2008 binary16.
#include <cstdint>
#include <cstring>

#include "engine/backend/cpu/gemm_kernels.hpp"

namespace quarry::engine::cpu::detail {
namespace {

using std::size_t;

constexpr size_t kRows = 4, kChunk = 256, kLanes = 8;

inline float bits_to_f32(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct LoadF32 {
  using T = float;
  static float one(const T* p) { return *p; }
};
struct LoadBF16 {
  using T = std::uint16_t;
  static float one(const T* p) { return bits_to_f32(static_cast<std::uint32_t>(*p) << 16); }
};
struct LoadF16 {
  using T = std::uint16_t;
  static float one(const T* p) {
    const std::uint32_t h = *p, sign = (h & 0x8000u) << 16;
    std::uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    if (exp == 0) {
      if (mant == 0) return bits_to_f32(sign);
      exp = 127 - 15 + 1;  // subnormal: normalise the mantissa
      while ((mant & 0x400) == 0) {
        mant <<= 1;
        --exp;
      }
      return bits_to_f32(sign | (exp << 23) | ((mant & 0x3ff) << 13));
    }
    if (exp == 31) return bits_to_f32(sign | 0x7f800000u | (mant << 13));
    return bits_to_f32(sign | ((exp + 127 - 15) << 23) | (mant << 13));
  }
};

inline float dot(const float* a, const float* b, size_t n) {
  float s[kLanes] = {};
  size_t p = 0;
  for (; p + kLanes <= n; p += kLanes)
    for (size_t l = 0; l < kLanes; ++l) s[l] += a[p + l] * b[p + l];
  float t = 0.f;
  for (; p < n; ++p) t += a[p] * b[p];
  for (size_t l = 0; l < kLanes; ++l) t += s[l];
  return t;
}

template <class L>
void gemv_t(const float* x, size_t m, size_t k, size_t ldx, const void* wv, size_t j0, size_t j1, float* y,
            size_t ldy, bool accumulate) {
  const auto* w = static_cast<const typename L::T*>(wv);
  float buf[kRows][kChunk];
  for (size_t j = j0; j < j1; j += kRows) {
    const size_t rows = j1 - j < kRows ? j1 - j : kRows;
    for (size_t pc = 0; pc < k || pc == 0; pc += kChunk) {
      const size_t kb = k - pc < kChunk ? k - pc : kChunk;
      for (size_t r = 0; r < rows; ++r)
        for (size_t p = 0; p < kb; ++p) buf[r][p] = L::one(w + (j + r) * k + pc + p);
      const bool add = accumulate || pc > 0;
      for (size_t i = 0; i < m; ++i) {
        float* yi = y + i * ldy + j;
        for (size_t r = 0; r < rows; ++r) {
          const float s = dot(x + i * ldx + pc, buf[r], kb);
          yi[r] = add ? yi[r] + s : s;
        }
      }
      if (k == 0) break;
    }
  }
}

void gemv(const float* x, size_t m, size_t k, size_t ldx, const void* w, WeightType wt, size_t j0, size_t j1,
          float* y, size_t ldy, bool accumulate) {
  switch (wt) {
    case WeightType::f32: return gemv_t<LoadF32>(x, m, k, ldx, w, j0, j1, y, ldy, accumulate);
    case WeightType::bf16: return gemv_t<LoadBF16>(x, m, k, ldx, w, j0, j1, y, ldy, accumulate);
    case WeightType::f16: return gemv_t<LoadF16>(x, m, k, ldx, w, j0, j1, y, ldy, accumulate);
  }
}

constexpr GemmKernels kKernels{"scalar", static_cast<size_t>(-1), 1, 1, 0, 0, kRows, gemv, nullptr, nullptr};

}  // namespace

const GemmKernels& kernels_scalar() { return kKernels; }

}  // namespace quarry::engine::cpu::detail
