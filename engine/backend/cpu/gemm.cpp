// Portable reference gemm (scalar). SIMD kernels with run-time dispatch replace the inner loops.
#include "engine/backend/cpu/gemm.hpp"

#include <cstring>

#include "engine/backend/cpu/thread_pool.hpp"

namespace quarry::engine::cpu {
namespace {

inline float bf16_to_f32(std::uint16_t v) {
  std::uint32_t u = static_cast<std::uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float f16_to_f32(std::uint16_t h) {
  std::uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal
      exp = 127 - 15 + 1;
      while ((mant & 0x400) == 0) { mant <<= 1; --exp; }
      mant &= 0x3ff;
      u = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float weight_at(const void* w, WeightType t, std::size_t i) {
  switch (t) {
    case WeightType::f32: return static_cast<const float*>(w)[i];
    case WeightType::bf16: return bf16_to_f32(static_cast<const std::uint16_t*>(w)[i]);
    case WeightType::f16: return f16_to_f32(static_cast<const std::uint16_t*>(w)[i]);
  }
  return 0.f;
}

}  // namespace

void gemm(const float* x, std::size_t m, std::size_t k, std::size_t ldx, const void* w, WeightType wtype,
          std::size_t n, float* y, std::size_t ldy, ThreadPool* pool, bool accumulate) {
  auto rows = [&](std::size_t j0, std::size_t j1) {
    for (std::size_t j = j0; j < j1; ++j) {
      for (std::size_t i = 0; i < m; ++i) {
        float acc = 0.f;
        for (std::size_t p = 0; p < k; ++p) acc += x[i * ldx + p] * weight_at(w, wtype, j * k + p);
        y[i * ldy + j] = accumulate ? y[i * ldy + j] + acc : acc;
      }
    }
  };
  if (pool) pool->parallel_for(n, rows);
  else rows(0, n);
}

const char* gemm_kernel_name() { return "scalar"; }

}  // namespace quarry::engine::cpu
