// FP8 E4M3 rows against bf16 activations on AVX512_BF16 (VDPBF16PS), for the bf16 compute mode: an FP8
// value widens to bf16 exactly (4 exponent bits, 3 mantissa bits fit bf16's 8 and 7), by a 128-entry
// table of bf16 bit patterns for the magnitude (two VPERMT2W of 64 entries, selected by bit 6) and the
// sign bit moved up; each scale block's dot products in f32, then multiplied by its scale.
// GCC 12's unmasked AVX-512 intrinsics trip -Wmaybe-uninitialized (see quant_avx512.cpp).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "engine/backend/cpu/quant_kernels.hpp"

namespace quarry::engine::cpu::detail {

namespace {

struct Table {
  alignas(64) std::uint16_t v[128];
};

constexpr Table make_table() {
  Table t{};
  for (unsigned i = 0; i < 128; ++i) t.v[i] = fp8_mag_bf16(i);
  return t;
}

constexpr Table kTable = make_table();

}  // namespace

void fp8_bf16_avx512(const QuantView& q, const std::uint16_t* xb, std::size_t m, std::size_t j0, std::size_t j1,
                     float* y, std::size_t ldy) {
  const std::size_t K = q.k, bc = q.block_cols;
  const __m512i t0 = _mm512_load_si512(kTable.v), t1 = _mm512_load_si512(kTable.v + 32),
                t2 = _mm512_load_si512(kTable.v + 64), t3 = _mm512_load_si512(kTable.v + 96);
  const __m512i low7 = _mm512_set1_epi16(0x7f), bit6 = _mm512_set1_epi16(0x40), sign = _mm512_set1_epi16(0x80);
  for (std::size_t n = j0; n < j1; ++n) {
    const auto* b8 = static_cast<const std::uint8_t*>(q.data) + n * K;
    const float* srow = q.scales + (n / q.block_rows) * q.scale_cols;
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    for (std::size_t b0 = 0, b = 0; b0 < K; b0 += bc, ++b) {
      const std::size_t b1 = b0 + bc < K ? b0 + bc : K;
      __m512 part[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
      for (std::size_t k0 = b0; k0 < b1; k0 += 32) {
        if (k0 % 64 == 0) _mm_prefetch(reinterpret_cast<const char*>(b8 + k0 + 512), _MM_HINT_T0);
        const __m512i u = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b8 + k0)));
        const __m512i idx = _mm512_and_si512(u, low7);
        const __m512i lo = _mm512_permutex2var_epi16(t0, idx, t1), hi = _mm512_permutex2var_epi16(t2, idx, t3);
        __m512i wv = _mm512_mask_mov_epi16(lo, _mm512_test_epi16_mask(idx, bit6), hi);
        wv = _mm512_or_si512(wv, _mm512_slli_epi16(_mm512_and_si512(u, sign), 8));
        for (std::size_t i = 0; i < m; ++i)
          part[i] = _mm512_dpbf16_ps(part[i], (__m512bh)_mm512_loadu_si512(xb + i * K + k0), (__m512bh)wv);
      }
      const __m512 s = _mm512_set1_ps(srow[b]);
      for (std::size_t i = 0; i < m; ++i) acc[i] = _mm512_fmadd_ps(part[i], s, acc[i]);
    }
    for (std::size_t i = 0; i < m; ++i) y[i * ldy + n] = _mm512_reduce_add_ps(acc[i]);
  }
}

}  // namespace quarry::engine::cpu::detail
