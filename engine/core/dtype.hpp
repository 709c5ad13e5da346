// Element conversions between the stored dtypes and f32 (exact widening; round-to-nearest-even
// narrowing), shared by every room that reads weights on the host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cmath>
#include <cstring>

#include "engine/core/types.hpp"

namespace quarry::engine {

/// bf16 -> f32 (exact).
inline float bf16_to_f32(std::uint16_t v) {
  const std::uint32_t u = static_cast<std::uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// IEEE f16 -> f32 (exact, subnormals, infinities and NaN included).
inline float f16_to_f32(std::uint16_t h) {
  std::uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      u = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
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

/// f32 -> bf16, round to nearest even (finite values), as VCVTNEPS2BF16.
inline std::uint16_t f32_to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/// OCP FP8 E4M3 ("e4m3fn": bias 7, no infinities, S.1111.111 is NaN, largest finite 448) -> f32 (exact).
/// Source: OCP 8-bit Floating Point Specification (OFP8) rev. 1.0, table 1.
inline float fp8_e4m3_to_f32(std::uint8_t v) {
  const std::uint32_t sign = static_cast<std::uint32_t>(v & 0x80u) << 24, mag = v & 0x7fu;
  std::uint32_t u;
  if (mag == 0x7f) {
    u = sign | 0x7fc00000u;
  } else if ((mag >> 3) == 0) {  // subnormal: m * 2^-9
    float f = static_cast<float>(mag & 7u) * (1.0f / 512.0f);
    std::memcpy(&u, &f, 4);
    u |= sign;
  } else {
    u = sign | ((mag << 20) + (120u << 23));
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// f32 -> FP8 E4M3, round to nearest even, saturating to +-448 (NaN stays NaN).
inline std::uint8_t f32_to_fp8_e4m3(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  const std::uint8_t sign = static_cast<std::uint8_t>((u >> 24) & 0x80u);
  if (f != f) return static_cast<std::uint8_t>(sign | 0x7f);
  float a = f < 0 ? -f : f;
  if (a >= 448.f) return static_cast<std::uint8_t>(sign | 0x7e);
  // The candidates are spaced 2^(e-3) apart in binade e (2^-9 in the subnormal range): round there.
  int e = 0;
  std::memcpy(&u, &a, 4);
  e = static_cast<int>(u >> 23) - 127;
  if (e < -6) e = -6;
  const float step = std::ldexp(1.0f, e - 3);
  const float q = std::nearbyint(a / step);  // round half to even (default rounding mode), exact division
  const float r = q * step;
  // Encode r (exact in E4M3).
  if (r == 0.f) return sign;
  std::memcpy(&u, &r, 4);
  const int re = static_cast<int>(u >> 23) - 127;
  if (re < -6) return static_cast<std::uint8_t>(sign | static_cast<std::uint8_t>(r * 512.f));
  const std::uint32_t mant = (u >> 20) & 7u;
  return static_cast<std::uint8_t>(sign | (static_cast<std::uint32_t>(re + 7) << 3) | mant);
}

/// Element i of a tensor stored in `type`, as f32 (widened exactly).
inline float element_as_f32(const void* data, DType type, std::size_t i) {
  switch (type) {
    case DType::f32: return static_cast<const float*>(data)[i];
    case DType::bf16: return bf16_to_f32(static_cast<const std::uint16_t*>(data)[i]);
    case DType::f16: return f16_to_f32(static_cast<const std::uint16_t*>(data)[i]);
  }
  return 0.f;
}

}  // namespace quarry::engine
