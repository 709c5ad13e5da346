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

template <bool Four>
void gptq_row(const QuantView& q, std::size_t n, float* o) {
  const std::size_t K = q.k, N = q.n;
  const auto* w = static_cast<const std::uint32_t*>(q.data);
  constexpr std::size_t per = Four ? 8 : 4;
  const __m256i shifts = Four ? _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)
                              : _mm256_setr_epi32(0, 8, 16, 24, 0, 8, 16, 24);
  const __m256i mask = _mm256_set1_epi32(Four ? 15 : 255);
  const auto values = [&](std::size_t k0) {
    const std::uint32_t* col = w + (k0 / per) * N + n;
    __m256i v;
    if (Four) {
      v = _mm256_set1_epi32(static_cast<int>(col[0]));
    } else {
      const int a = static_cast<int>(col[0]), b = static_cast<int>(col[N]);
      v = _mm256_setr_epi32(a, a, a, a, b, b, b, b);
    }
    return _mm256_and_si256(_mm256_srlv_epi32(v, shifts), mask);
  };
  const std::size_t K8 = K / 8 * 8;
  if (!q.g_idx && q.group_size % 8 == 0) {
    for (std::size_t g0 = 0, g = 0; g0 < K8; g0 += q.group_size, ++g) {
      const __m256 s = _mm256_set1_ps(q.scales[g * N + n]);
      const __m256i z = _mm256_set1_epi32(q.zeros[g * N + n]);
      const std::size_t g1 = g0 + q.group_size < K8 ? g0 + q.group_size : K8;
      for (std::size_t k0 = g0; k0 < g1; k0 += 8)
        _mm256_storeu_ps(o + k0, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(values(k0), z)), s));
    }
  } else if (q.g_idx) {
    const __m256i vN = _mm256_set1_epi32(static_cast<int>(N)), vn = _mm256_set1_epi32(static_cast<int>(n));
    for (std::size_t k0 = 0; k0 < K8; k0 += 8) {
      const __m256i off = _mm256_add_epi32(
          _mm256_mullo_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q.g_idx + k0)), vN), vn);
      const __m256 s = _mm256_i32gather_ps(q.scales, off, 4);
      const __m256i z = _mm256_and_si256(_mm256_i32gather_epi32(reinterpret_cast<const int*>(q.zeros), off, 2),
                                         _mm256_set1_epi32(0xffff));
      _mm256_storeu_ps(o + k0, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(values(k0), z)), s));
    }
  } else {
    dequant_range(q, n, 0, K8, o);
  }
  if (K8 < K) dequant_range(q, n, K8, K, o);
}

template <int Element>
void rows_row(const QuantView& q, std::size_t n, float* o) {
  const std::size_t K = q.k, bc = q.block_cols;
  if (bc % 8 != 0) {
    dequant_range(q, n, 0, K, o);
    return;
  }
  const float* srow = q.scales + (n / q.block_rows) * q.scale_cols;
  const std::size_t K8 = K / 8 * 8;
  const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
  const auto* b8 = static_cast<const std::uint8_t*>(q.data) + n * K;
  const auto* w4 = static_cast<const std::uint32_t*>(q.data) + n * (K / 8);
  for (std::size_t b0 = 0, b = 0; b0 < K8; b0 += bc, ++b) {
    const __m256 s = _mm256_set1_ps(srow[b]);
    const std::size_t b1 = b0 + bc < K8 ? b0 + bc : K8;
    for (std::size_t k0 = b0; k0 < b1; k0 += 8) {
      __m256 f;
      if constexpr (Element == QuantView::int8) {
        f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b8 + k0))));
      } else if constexpr (Element == QuantView::fp8_e4m3) {
        f = fp8_to_f32(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b8 + k0))));
      } else {
        const __m256i v = _mm256_set1_epi32(static_cast<int>(w4[k0 / 8]));
        f = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(_mm256_srlv_epi32(v, shifts), _mm256_set1_epi32(15)),
                                                _mm256_set1_epi32(8)));
      }
      _mm256_storeu_ps(o + k0, _mm256_mul_ps(f, s));
    }
  }
  if (K8 < K) dequant_range(q, n, K8, K, o);
}

}  // namespace

void dequant_rows_avx2(const QuantView& q, std::size_t j0, std::size_t j1, float* out) {
  using Row = void (*)(const QuantView&, std::size_t, float*);
  Row row = q.layout == QuantView::gptq ? (q.element == QuantView::int4 ? &gptq_row<true> : &gptq_row<false>)
            : q.element == QuantView::int8 ? &rows_row<QuantView::int8>
            : q.element == QuantView::fp8_e4m3 ? &rows_row<QuantView::fp8_e4m3>
                                               : &rows_row<QuantView::int4>;
  for (std::size_t n = j0; n < j1; ++n) row(q, n, out + (n - j0) * q.k);
}

}  // namespace quarry::engine::cpu::detail
