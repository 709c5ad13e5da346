// Element conversions between the stored dtypes and f32 (exact widening; round-to-nearest-even
// narrowing), shared by every room that reads weights on the host.
#pragma once

#include <cstddef>
#include <cstdint>
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
