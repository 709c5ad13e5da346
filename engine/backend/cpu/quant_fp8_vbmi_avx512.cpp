// FP8 E4M3 rows against bf16 activations on AVX512_BF16 + AVX512_VBMI, 64 FP8 values per step: the bf16
// pattern of each value's magnitude is looked up a byte at a time (its high and its low byte, two
// 128-entry byte tables, VPERMI2B over the raw FP8 bytes: index bit 6 picks the table half, bit 7, the
// sign, is ignored by the lookup and OR-ed into the high byte), and the two byte vectors interleave into
// bf16 words in each 128-bit lane (VPUNPCKLBW / VPUNPCKHBW). That gives the weights of columns
// 16L + 0..7 and 16L + 8..15 of every lane L, so the activations come in that order (quant_kernels.hpp).
// Four accumulators per activation row and scale block (two 64-column steps, one per interleave half)
// keep the VDPBF16PS latency chains from bounding the loop; up to 4 rows per pass, each summing as it does
// alone. Against the 32-value kernel of
// quant_bf16_avx512.cpp (a widening, two word lookups, a blend, the sign and one VDPBF16PS per 32
// values): 6 integer ops and 2 VDPBF16PS per 64 values.
// GCC 12's unmasked AVX-512 intrinsics trip -Wmaybe-uninitialized (see quant_avx512.cpp).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "engine/backend/cpu/quant_kernels.hpp"

namespace quarry::engine::cpu::detail {

namespace {

struct ByteTables {
  alignas(64) unsigned char hi[128];
  alignas(64) unsigned char lo[128];
};

constexpr ByteTables make_tables() {
  ByteTables t{};
  for (unsigned i = 0; i < 128; ++i) {
    t.hi[i] = static_cast<unsigned char>(fp8_mag_bf16(i) >> 8);
    t.lo[i] = static_cast<unsigned char>(fp8_mag_bf16(i) & 0xff);
  }
  return t;
}

constexpr ByteTables kTables = make_tables();

/// Software prefetch distance in bytes along the row stream (bench: 640 -> 2048 took one thread's
/// FP8 LM-head product from 24 to 30 GB/s, two threads' from 32 to 40 on a 2-core AMD EPYC).
constexpr std::size_t kAhead = 2048;

/// Rows [j0, j1) against M activation rows (M known at compile time: the accumulators stay in registers).
template <int M>
void fp8_rows(const QuantView& q, const std::uint16_t* xb, std::size_t j0, std::size_t j1, float* y, std::size_t ldy) {
  const std::size_t K = q.k, bc = q.block_cols;
  const __m512i h0 = _mm512_load_si512(kTables.hi), h1 = _mm512_load_si512(kTables.hi + 64);
  const __m512i l0 = _mm512_load_si512(kTables.lo), l1 = _mm512_load_si512(kTables.lo + 64);
  const __m512i sign = _mm512_set1_epi8(static_cast<char>(0x80));
  for (std::size_t n = j0; n < j1; ++n) {
    const auto* b8 = static_cast<const std::uint8_t*>(q.data) + n * K;
    const float* srow = q.scales + (n / q.block_rows) * q.scale_cols;
    __m512 acc[M];
#pragma GCC unroll 4
    for (int i = 0; i < M; ++i) acc[i] = _mm512_setzero_ps();
    for (std::size_t b0 = 0, b = 0; b0 < K; b0 += bc, ++b) {
      const std::size_t b1 = b0 + bc < K ? b0 + bc : K;
      // Four independent VDPBF16PS chains per activation row (two halves of two 64-column steps), whatever
      // the number of rows, so that each row sums as it does alone.
      __m512 p0[M], p1[M], p2[M], p3[M];
#pragma GCC unroll 4
      for (int i = 0; i < M; ++i) p0[i] = p1[i] = p2[i] = p3[i] = _mm512_setzero_ps();
      for (std::size_t k0 = b0; k0 < b1; k0 += 128) {
        // 2 KB ahead: one sequential stream needs more lines in flight than the L2 streamer keeps.
        _mm_prefetch(reinterpret_cast<const char*>(b8 + k0 + kAhead), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(b8 + k0 + kAhead + 64), _MM_HINT_T0);
        const bool two = k0 + 128 <= b1;
        const __m512i u = _mm512_loadu_si512(b8 + k0);
        const __m512i v = two ? _mm512_loadu_si512(b8 + k0 + 64) : _mm512_setzero_si512();
        // high byte | (u & 0x80): ternary logic A | (B & C) = 0xF8
        const __m512i uh = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(h0, u, h1), u, sign, 0xF8);
        const __m512i ul = _mm512_permutex2var_epi8(l0, u, l1);
        const __m512i vh = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(h0, v, h1), v, sign, 0xF8);
        const __m512i vl = _mm512_permutex2var_epi8(l0, v, l1);
        const __m512bh ua = (__m512bh)_mm512_unpacklo_epi8(ul, uh), ub = (__m512bh)_mm512_unpackhi_epi8(ul, uh);
        const __m512bh va = (__m512bh)_mm512_unpacklo_epi8(vl, vh), vb = (__m512bh)_mm512_unpackhi_epi8(vl, vh);
#pragma GCC unroll 4
        for (int i = 0; i < M; ++i) {
          const std::uint16_t* xi = xb + static_cast<std::size_t>(i) * K + k0;
          p0[i] = _mm512_dpbf16_ps(p0[i], (__m512bh)_mm512_loadu_si512(xi), ua);
          p1[i] = _mm512_dpbf16_ps(p1[i], (__m512bh)_mm512_loadu_si512(xi + 32), ub);
          if (two) {
            p2[i] = _mm512_dpbf16_ps(p2[i], (__m512bh)_mm512_loadu_si512(xi + 64), va);
            p3[i] = _mm512_dpbf16_ps(p3[i], (__m512bh)_mm512_loadu_si512(xi + 96), vb);
          }
        }
      }
      const __m512 s = _mm512_set1_ps(srow[b]);
#pragma GCC unroll 4
      for (int i = 0; i < M; ++i)
        acc[i] = _mm512_fmadd_ps(_mm512_add_ps(_mm512_add_ps(p0[i], p1[i]), _mm512_add_ps(p2[i], p3[i])), s, acc[i]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < M; ++i) y[static_cast<std::size_t>(i) * ldy + n] = _mm512_reduce_add_ps(acc[i]);
  }
}

}  // namespace

void fp8_bf16_vbmi_avx512(const QuantView& q, const std::uint16_t* xb, std::size_t m, std::size_t j0, std::size_t j1,
                          float* y, std::size_t ldy) {
  switch (m) {
    case 1: return fp8_rows<1>(q, xb, j0, j1, y, ldy);
    case 2: return fp8_rows<2>(q, xb, j0, j1, y, ldy);
    case 3: return fp8_rows<3>(q, xb, j0, j1, y, ldy);
    default: return fp8_rows<4>(q, xb, j0, j1, y, ldy);
  }
}

}  // namespace quarry::engine::cpu::detail
