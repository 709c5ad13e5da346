// AVX-512 (F/BW/VL/DQ) dequantization of quantized weight rows, 16 values per vector, bit-identical to
// quant_scalar.cpp. GPTQ words are broadcast per output row and their nibbles (bytes) shifted into lanes;
// desc_act groups gather their scales and zero points per lane.
// GCC 12's unmasked AVX-512 intrinsics pass _mm512_undefined_*() (a self-initialised variable) as the
// merge source, which -Wmaybe-uninitialized reports once inlined: a false positive of the headers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "engine/backend/cpu/quant_kernels.hpp"

namespace quarry::engine::cpu::detail {

#include "engine/backend/cpu/quant_tail.inc"

namespace {

inline __m512 fp8_to_f32(__m512i b) {
  const __m512i mag = _mm512_and_si512(b, _mm512_set1_epi32(0x7f));
  const __m512i normal = _mm512_add_epi32(_mm512_slli_epi32(mag, 20), _mm512_set1_epi32(120 << 23));
  const __m512 sub = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(mag, _mm512_set1_epi32(7))),
                                   _mm512_set1_ps(1.0f / 512.0f));
  __m512 f = _mm512_mask_mov_ps(_mm512_castsi512_ps(normal), _mm512_cmplt_epi32_mask(mag, _mm512_set1_epi32(8)), sub);
  f = _mm512_mask_mov_ps(f, _mm512_cmpeq_epi32_mask(mag, _mm512_set1_epi32(0x7f)),
                         _mm512_castsi512_ps(_mm512_set1_epi32(0x7fc00000)));
  const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(b, _mm512_set1_epi32(0x80)), 24);
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(f), sign));
}

void gptq_row(const QuantView& q, std::size_t n, float* o) {
  const std::size_t K = q.k, N = q.n;
  const auto* w = static_cast<const std::uint32_t*>(q.data);
  const bool four = q.element == QuantView::int4;
  const std::size_t per = four ? 8 : 4;
  // Lane l holds value l of 16 consecutive k: word l / per, bits (l % per) * (32 / per).
  const __m512i sel = four ? _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1)
                           : _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  const __m512i shifts = four ? _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28)
                              : _mm512_setr_epi32(0, 8, 16, 24, 0, 8, 16, 24, 0, 8, 16, 24, 0, 8, 16, 24);
  const __m512i mask = _mm512_set1_epi32(four ? 15 : 255);
  const bool uniform = !q.g_idx && q.group_size % 16 == 0;
  const std::size_t K16 = K / 16 * 16;
  const __m512i vN = _mm512_set1_epi32(static_cast<int>(N)), vn = _mm512_set1_epi32(static_cast<int>(n));
  for (std::size_t k0 = 0; k0 < K16; k0 += 16) {
    const std::size_t p = k0 / per;
    __m128i words;
    if (four) words = _mm_setr_epi32(static_cast<int>(w[p * N + n]), static_cast<int>(w[(p + 1) * N + n]), 0, 0);
    else
      words = _mm_setr_epi32(static_cast<int>(w[p * N + n]), static_cast<int>(w[(p + 1) * N + n]),
                             static_cast<int>(w[(p + 2) * N + n]), static_cast<int>(w[(p + 3) * N + n]));
    const __m512i v = _mm512_and_si512(_mm512_srlv_epi32(_mm512_permutexvar_epi32(sel, _mm512_zextsi128_si512(words)),
                                                         shifts), mask);
    __m512 s;
    __m512i z;
    if (uniform) {
      const std::size_t g = k0 / q.group_size;
      s = _mm512_set1_ps(q.scales[g * N + n]);
      z = _mm512_set1_epi32(q.zeros[g * N + n]);
    } else if (q.g_idx) {
      const __m512i off = _mm512_add_epi32(_mm512_mullo_epi32(_mm512_loadu_si512(q.g_idx + k0), vN), vn);
      s = _mm512_i32gather_ps(off, q.scales, 4);
      z = _mm512_and_si512(_mm512_i32gather_epi32(off, q.zeros, 2), _mm512_set1_epi32(0xffff));
    } else {
      dequant_range(q, n, k0, k0 + 16, o);
      continue;
    }
    _mm512_storeu_ps(o + k0, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(v, z)), s));
  }
  if (K16 < K) dequant_range(q, n, K16, K, o);
}

void rows_row(const QuantView& q, std::size_t n, float* o) {
  const std::size_t K = q.k, bc = q.block_cols;
  if (bc % 16 != 0) {
    dequant_range(q, n, 0, K, o);
    return;
  }
  const float* srow = q.scales + (n / q.block_rows) * q.scale_cols;
  const std::size_t K16 = K / 16 * 16;
  const __m512i shifts = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
  for (std::size_t k0 = 0; k0 < K16; k0 += 16) {
    const __m512 s = _mm512_set1_ps(srow[k0 / bc]);
    __m512 f;
    if (q.element == QuantView::int8) {
      const auto* b = static_cast<const std::int8_t*>(q.data) + n * K + k0;
      f = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b))));
    } else if (q.element == QuantView::fp8_e4m3) {
      const auto* b = static_cast<const std::uint8_t*>(q.data) + n * K + k0;
      f = fp8_to_f32(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b))));
    } else {
      const auto* w = static_cast<const std::uint32_t*>(q.data) + n * (K / 8) + k0 / 8;
      const __m512i v = _mm512_inserti32x8(_mm512_set1_epi32(static_cast<int>(w[0])),
                                           _mm256_set1_epi32(static_cast<int>(w[1])), 1);
      f = _mm512_cvtepi32_ps(
          _mm512_sub_epi32(_mm512_and_si512(_mm512_srlv_epi32(v, shifts), _mm512_set1_epi32(15)), _mm512_set1_epi32(8)));
    }
    _mm512_storeu_ps(o + k0, _mm512_mul_ps(f, s));
  }
  if (K16 < K) dequant_range(q, n, K16, K, o);
}

}  // namespace

void dequant_rows_avx512(const QuantView& q, std::size_t j0, std::size_t j1, float* out) {
  for (std::size_t n = j0; n < j1; ++n) {
    float* o = out + (n - j0) * q.k;
    if (q.layout == QuantView::gptq) gptq_row(q, n, o);
    else rows_row(q, n, o);
  }
}

}  // namespace quarry::engine::cpu::detail
