// AVX2 dequantization of quantized weight rows, 8 values per vector, bit-identical to quant_scalar.cpp
// (the same one-rounding products; see quant_avx512.cpp for the scheme).
#include <immintrin.h>

#include "engine/backend/cpu/quant_kernels.hpp"

namespace quarry::engine::cpu::detail {

#include "engine/backend/cpu/quant_tail.inc"

namespace {

inline __m256 fp8_to_f32(__m256i b) {
  const __m256i mag = _mm256_and_si256(b, _mm256_set1_epi32(0x7f));
  const __m256i normal = _mm256_add_epi32(_mm256_slli_epi32(mag, 20), _mm256_set1_epi32(120 << 23));
  const __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(mag, _mm256_set1_epi32(7))),
                                   _mm256_set1_ps(1.0f / 512.0f));
  const __m256 is_sub = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(8), mag));
  __m256 f = _mm256_blendv_ps(_mm256_castsi256_ps(normal), sub, is_sub);
  const __m256 is_nan = _mm256_castsi256_ps(_mm256_cmpeq_epi32(mag, _mm256_set1_epi32(0x7f)));
  f = _mm256_blendv_ps(f, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)), is_nan);
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x80)), 24);
  return _mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(f), sign));
}

void gptq_row(const QuantView& q, std::size_t n, float* o) {
  const std::size_t K = q.k, N = q.n;
  const auto* w = static_cast<const std::uint32_t*>(q.data);
  const bool four = q.element == QuantView::int4;
  const std::size_t per = four ? 8 : 4;
  const __m256i shifts = four ? _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)
                              : _mm256_setr_epi32(0, 8, 16, 24, 0, 8, 16, 24);
  const __m256i mask = _mm256_set1_epi32(four ? 15 : 255);
  const bool uniform = !q.g_idx && q.group_size % 8 == 0;
  const std::size_t K8 = K / 8 * 8;
  const __m256i vN = _mm256_set1_epi32(static_cast<int>(N)), vn = _mm256_set1_epi32(static_cast<int>(n));
  for (std::size_t k0 = 0; k0 < K8; k0 += 8) {
    const std::size_t p = k0 / per;
    __m256i v;
    if (four) {
      v = _mm256_set1_epi32(static_cast<int>(w[p * N + n]));
    } else {
      const int a = static_cast<int>(w[p * N + n]), b = static_cast<int>(w[(p + 1) * N + n]);
      v = _mm256_setr_epi32(a, a, a, a, b, b, b, b);
    }
    v = _mm256_and_si256(_mm256_srlv_epi32(v, shifts), mask);
    __m256 s;
    __m256i z;
    if (uniform) {
      const std::size_t g = k0 / q.group_size;
      s = _mm256_set1_ps(q.scales[g * N + n]);
      z = _mm256_set1_epi32(q.zeros[g * N + n]);
    } else if (q.g_idx) {
      const __m256i off = _mm256_add_epi32(
          _mm256_mullo_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q.g_idx + k0)), vN), vn);
      s = _mm256_i32gather_ps(q.scales, off, 4);
      z = _mm256_and_si256(_mm256_i32gather_epi32(reinterpret_cast<const int*>(q.zeros), off, 2),
                           _mm256_set1_epi32(0xffff));
    } else {
      dequant_range(q, n, k0, k0 + 8, o);
      continue;
    }
    _mm256_storeu_ps(o + k0, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(v, z)), s));
  }
  if (K8 < K) dequant_range(q, n, K8, K, o);
}

void rows_row(const QuantView& q, std::size_t n, float* o) {
  const std::size_t K = q.k, bc = q.block_cols;
  if (bc % 8 != 0) {
    dequant_range(q, n, 0, K, o);
    return;
  }
  const float* srow = q.scales + (n / q.block_rows) * q.scale_cols;
  const std::size_t K8 = K / 8 * 8;
  const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
  for (std::size_t k0 = 0; k0 < K8; k0 += 8) {
    const __m256 s = _mm256_set1_ps(srow[k0 / bc]);
    __m256 f;
    if (q.element == QuantView::int8) {
      const auto* b = static_cast<const std::int8_t*>(q.data) + n * K + k0;
      f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b))));
    } else if (q.element == QuantView::fp8_e4m3) {
      const auto* b = static_cast<const std::uint8_t*>(q.data) + n * K + k0;
      f = fp8_to_f32(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b))));
    } else {
      const auto* w = static_cast<const std::uint32_t*>(q.data) + n * (K / 8) + k0 / 8;
      const __m256i v = _mm256_set1_epi32(static_cast<int>(w[0]));
      f = _mm256_cvtepi32_ps(
          _mm256_sub_epi32(_mm256_and_si256(_mm256_srlv_epi32(v, shifts), _mm256_set1_epi32(15)), _mm256_set1_epi32(8)));
    }
    _mm256_storeu_ps(o + k0, _mm256_mul_ps(f, s));
  }
  if (K8 < K) dequant_range(q, n, K8, K, o);
}

}  // namespace

void dequant_rows_avx2(const QuantView& q, std::size_t j0, std::size_t j1, float* out) {
  for (std::size_t n = j0; n < j1; ++n) {
    float* o = out + (n - j0) * q.k;
    if (q.layout == QuantView::gptq) gptq_row(q, n, o);
    else rows_row(q, n, o);
  }
}

}  // namespace quarry::engine::cpu::detail
