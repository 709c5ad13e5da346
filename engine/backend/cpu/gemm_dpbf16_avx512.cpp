// Products with weights packed once for bf16 (gemm_packed) on CPUs with AVX512_BF16 but no AMX (AMD Zen 4
// and 5; Intel Cooper Lake): VDPBF16PS (Intel SDM: "Dot Product of BF16 Pairs Accumulated into Packed
// Single Precision") multiplies the 32 bf16 of two registers pairwise and adds each pair's two products
// to one f32 lane. The packed layout is the AMX B-tile layout (gemm_kernels.hpp amx_pack_b): row kk of a
// tile holds, for each of its 16 output columns, the 32-bit pair (W[n, 2kk], W[n, 2kk + 1]), which is
// exactly the second operand VDPBF16PS wants when the first is the pair (x[2kk], x[2kk + 1]) broadcast to
// every lane. So one tile row and one broadcast give 16 columns x 2 products of one row of x.
//
// Each row of x accumulates every group of 16 columns in two registers (even and odd tile rows), added at
// the end, whatever the number of rows or groups computed together: a row's result depends only on its
// own row of x (what speculative verification needs: verifying a draft row gives the logits decoding it
// would). Rows and groups are blocked so that 8 to 16 independent accumulations hide the instruction's
// latency and each tile row, once loaded, serves every row of the block.
#include "engine/backend/cpu/intrinsics.hpp"

#include <cstdint>

#include "engine/backend/cpu/gemm_kernels.hpp"

namespace quarry::engine::cpu::detail {
namespace {

using std::size_t;

inline size_t k_padded(size_t k) { return (k + 31) / 32 * 32; }
inline __mmask16 tail_mask(size_t count) {
  return count >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << count) - 1u);
}

/// R rows of x (bf16, row stride k2) by G consecutive column groups of packed W (group stride
/// chunks * 512 bf16): out[r][g] = the 16 sums of row r, group g.
template <int R, int G>
void block(const std::uint16_t* a, size_t k2, const std::uint16_t* b, size_t chunks, __m512 (&out)[R][G]) {
  __m512 even[R][G], odd[R][G];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) even[r][g] = odd[r][g] = _mm512_setzero_ps();
  const size_t group_stride = chunks * 512;
  for (size_t c = 0; c < chunks; ++c) {
    const std::uint16_t* tile = b + c * 512;
#pragma GCC unroll 2
    for (size_t kk = 0; kk < 16; kk += 2) {
      __m512bh w0[G], w1[G];
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) {
        w0[g] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(tile + g * group_stride + kk * 32));
        w1[g] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(tile + g * group_stride + (kk + 1) * 32));
      }
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const auto* xr = reinterpret_cast<const std::int32_t*>(a + r * k2 + c * 32);
        const __m512bh x0 = reinterpret_cast<__m512bh>(_mm512_set1_epi32(xr[kk]));
        const __m512bh x1 = reinterpret_cast<__m512bh>(_mm512_set1_epi32(xr[kk + 1]));
#pragma GCC unroll 4
        for (int g = 0; g < G; ++g) {
          even[r][g] = _mm512_dpbf16_ps(even[r][g], x0, w0[g]);
          odd[r][g] = _mm512_dpbf16_ps(odd[r][g], x1, w1[g]);
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) out[r][g] = _mm512_add_ps(even[r][g], odd[r][g]);
}

/// Rows [i0, i0 + R) by groups [g, g + G): computed, then stored into y (columns below n).
template <int R, int G>
void run_block(const std::uint16_t* xb, size_t i0, size_t k2, const std::uint16_t* wp, size_t chunks, size_t g,
               size_t n, float* y, size_t ldy, bool accumulate) {
  __m512 out[R][G];
  block<R, G>(xb + i0 * k2, k2, wp + g * chunks * 512, chunks, out);
  for (int r = 0; r < R; ++r)
    for (int q = 0; q < G; ++q) {
      const size_t j0 = (g + q) * 16;
      if (j0 >= n) break;
      const __mmask16 mk = tail_mask(n - j0);
      float* yi = y + (i0 + r) * ldy + j0;
      __m512 v = out[r][q];
      if (accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mk, yi));
      _mm512_mask_storeu_ps(yi, mk, v);
    }
}

/// Groups [g0, g1) for rows [i0, i0 + R), G groups at a time (fewer for the last).
template <int R, int G>
void run_rows(const std::uint16_t* xb, size_t i0, size_t k2, const std::uint16_t* wp, size_t chunks, size_t g0,
              size_t g1, size_t n, float* y, size_t ldy, bool accumulate) {
  size_t g = g0;
  for (; g + G <= g1; g += G) run_block<R, G>(xb, i0, k2, wp, chunks, g, n, y, ldy, accumulate);
  for (; g < g1; ++g) run_block<R, 1>(xb, i0, k2, wp, chunks, g, n, y, ldy, accumulate);
}

}  // namespace

void dpbf16_packed_gemm(const std::uint16_t* xb, size_t m, size_t k, const std::uint16_t* wp, size_t n, size_t g0,
                        size_t g1, float* y, size_t ldy, bool accumulate) {
  const size_t k2 = k_padded(k), chunks = k2 / 32;
  // Blocks of 8 rows by 1 group, then the rest in one block (one pass over the weights for the few rows
  // of a decode or verify step): 5-7 rows by 1 group, 3-4 by 2, 1-2 by 4 (at most 16 accumulators).
  size_t i = 0;
  for (; i + 8 <= m; i += 8) run_rows<8, 1>(xb, i, k2, wp, chunks, g0, g1, n, y, ldy, accumulate);
  switch (m - i) {
    case 7: run_rows<7, 1>(xb, i, k2, wp, chunks, g0, g1, n, y, ldy, accumulate); break;
    case 6: run_rows<6, 1>(xb, i, k2, wp, chunks, g0, g1, n, y, ldy, accumulate); break;
    case 5: run_rows<5, 1>(xb, i, k2, wp, chunks, g0, g1, n, y, ldy, accumulate); break;
    case 4: run_rows<4, 2>(xb, i, k2, wp, chunks, g0, g1, n, y, ldy, accumulate); break;
    case 3: run_rows<3, 2>(xb, i, k2, wp, chunks, g0, g1, n, y, ldy, accumulate); break;
    case 2: run_rows<2, 4>(xb, i, k2, wp, chunks, g0, g1, n, y, ldy, accumulate); break;
    case 1: run_rows<1, 4>(xb, i, k2, wp, chunks, g0, g1, n, y, ldy, accumulate); break;
    default: break;
  }
  // No VZEROUPPER from GCC on the way out (see gemm_amx_avx512.cpp): the next SSE code would pay for it.
  _mm256_zeroupper();
}

}  // namespace quarry::engine::cpu::detail
