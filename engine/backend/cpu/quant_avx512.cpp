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

#include "engine/backend/cpu/transpose16_avx512.inc"

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

template <bool Four>
void gptq_row(const QuantView& q, std::size_t n, float* o) {
  const std::size_t K = q.k, N = q.n;
  const auto* w = static_cast<const std::uint32_t*>(q.data);
  constexpr std::size_t per = Four ? 8 : 4;
  // Lane l holds value l of 16 consecutive k: word l / per, bits (l % per) * (32 / per).
  const __m512i sel = Four ? _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1)
                           : _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  const __m512i shifts = Four ? _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28)
                              : _mm512_setr_epi32(0, 8, 16, 24, 0, 8, 16, 24, 0, 8, 16, 24, 0, 8, 16, 24);
  const __m512i mask = _mm512_set1_epi32(Four ? 15 : 255);
  const auto values = [&](std::size_t k0) {
    const std::uint32_t* col = w + (k0 / per) * N + n;
    __m128i words;
    if (Four) words = _mm_setr_epi32(static_cast<int>(col[0]), static_cast<int>(col[N]), 0, 0);
    else
      words = _mm_setr_epi32(static_cast<int>(col[0]), static_cast<int>(col[N]), static_cast<int>(col[2 * N]),
                             static_cast<int>(col[3 * N]));
    return _mm512_and_si512(_mm512_srlv_epi32(_mm512_permutexvar_epi32(sel, _mm512_zextsi128_si512(words)), shifts),
                            mask);
  };
  const std::size_t K16 = K / 16 * 16;
  if (!q.g_idx && q.group_size % 16 == 0) {
    // Contiguous groups: one scale and zero point per group, hoisted out of the loop.
    for (std::size_t g0 = 0, g = 0; g0 < K16; g0 += q.group_size, ++g) {
      const __m512 s = _mm512_set1_ps(q.scales[g * N + n]);
      const __m512i z = _mm512_set1_epi32(q.zeros[g * N + n]);
      const std::size_t g1 = g0 + q.group_size < K16 ? g0 + q.group_size : K16;
      for (std::size_t k0 = g0; k0 < g1; k0 += 16)
        _mm512_storeu_ps(o + k0, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(values(k0), z)), s));
    }
  } else if (q.g_idx) {
    // desc_act: each column's own group, gathered per lane.
    const __m512i vN = _mm512_set1_epi32(static_cast<int>(N)), vn = _mm512_set1_epi32(static_cast<int>(n));
    for (std::size_t k0 = 0; k0 < K16; k0 += 16) {
      const __m512i off = _mm512_add_epi32(_mm512_mullo_epi32(_mm512_loadu_si512(q.g_idx + k0), vN), vn);
      const __m512 s = _mm512_i32gather_ps(off, q.scales, 4);
      const __m512i z = _mm512_and_si512(_mm512_i32gather_epi32(off, q.zeros, 2), _mm512_set1_epi32(0xffff));
      _mm512_storeu_ps(o + k0, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(values(k0), z)), s));
    }
  } else {
    dequant_range(q, n, 0, K16, o);  // groups that split a vector
  }
  if (K16 < K) dequant_range(q, n, K16, K, o);
}

/// GPTQ int4 rows n0..n0+15 (contiguous groups in multiples of 16 columns): two vector loads per 16
/// columns serve all 16 rows (one cache line of qweight each), VPERMT2D gives each row its 16 values, as
/// in gptq4_gemv16. out: row r at out + r * ldo.
void gptq4_rows16(const QuantView& q, std::size_t n0, float* out, std::size_t ldo) {
  const std::size_t K = q.k, N = q.n, K16 = K / 16 * 16;
  const auto* w = static_cast<const std::uint32_t*>(q.data);
  const __m512i shifts = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
  const __m512i mask = _mm512_set1_epi32(15);
  const __m512i base = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 16, 16, 16, 16, 16, 16, 16, 16);
  __m512 sv[16];
  __m512i zv[16];
  for (std::size_t g0 = 0, g = 0; g0 < K16; g0 += q.group_size, ++g) {
    const __m512 s = _mm512_loadu_ps(q.scales + g * N + n0);
    const __m512i z = _mm512_cvtepi16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q.zeros + g * N + n0)));
#pragma GCC unroll 16
    for (int r = 0; r < 16; ++r) {
      sv[r] = _mm512_permutexvar_ps(_mm512_set1_epi32(r), s);
      zv[r] = _mm512_permutexvar_epi32(_mm512_set1_epi32(r), z);
    }
    const std::size_t g1 = g0 + q.group_size < K16 ? g0 + q.group_size : K16;
    for (std::size_t k0 = g0; k0 < g1; k0 += 16) {
      const std::uint32_t* line = w + (k0 / 8) * N + n0;
      const __m512i a = _mm512_loadu_si512(line), b = _mm512_loadu_si512(line + N);
#pragma GCC unroll 16
      for (int r = 0; r < 16; ++r) {
        const __m512i v = _mm512_and_si512(
            _mm512_srlv_epi32(_mm512_permutex2var_epi32(a, _mm512_add_epi32(base, _mm512_set1_epi32(r)), b), shifts),
            mask);
        _mm512_storeu_ps(out + static_cast<std::size_t>(r) * ldo + k0,
                         _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(v, zv[r])), sv[r]));
      }
    }
  }
  if (K16 < K)
    for (std::size_t r = 0; r < 16; ++r) dequant_range(q, n0 + r, K16, K, out + r * ldo);
}

/// Values k0 .. k0 + 15 of row n of a row-quantized matrix as f32 before the scale: int8, FP8 E4M3, or int4
/// stored as value + 8, 8 nibbles a word, the low nibble first.
template <int Element>
inline __m512 rows_values16(const QuantView& q, std::size_t n, std::size_t k0) {
  if constexpr (Element == QuantView::int4) {
    const auto* w = static_cast<const std::uint32_t*>(q.data) + n * (q.k / 8) + k0 / 8;
    const __m512i shifts = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
    const __m512i v = _mm512_inserti32x8(_mm512_set1_epi32(static_cast<int>(w[0])),
                                         _mm256_set1_epi32(static_cast<int>(w[1])), 1);
    return _mm512_cvtepi32_ps(
        _mm512_sub_epi32(_mm512_and_si512(_mm512_srlv_epi32(v, shifts), _mm512_set1_epi32(15)), _mm512_set1_epi32(8)));
  } else {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const std::uint8_t*>(q.data) + n * q.k + k0));
    if constexpr (Element == QuantView::int8) return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
    else return fp8_to_f32(_mm512_cvtepu8_epi32(b));
  }
}

template <int Element>
void rows_row(const QuantView& q, std::size_t n, float* o) {
  const std::size_t K = q.k, bc = q.block_cols;
  if (bc % 16 != 0) {
    dequant_range(q, n, 0, K, o);
    return;
  }
  const float* srow = q.scales + (n / q.block_rows) * q.scale_cols;
  const std::size_t K16 = K / 16 * 16;
  for (std::size_t b0 = 0, b = 0; b0 < K16; b0 += bc, ++b) {
    const __m512 s = _mm512_set1_ps(srow[b]);
    const std::size_t b1 = b0 + bc < K16 ? b0 + bc : K16;
    for (std::size_t k0 = b0; k0 < b1; k0 += 16) _mm512_storeu_ps(o + k0, _mm512_mul_ps(rows_values16<Element>(q, n, k0), s));
  }
  if (K16 < K) dequant_range(q, n, K16, K, o);
}

/// y[i, n] (i < m <= 4) for one output row n, the dequantized vector `deq(k0)` of 16 values FMA'd into one
/// 16-lane accumulator per row of x in k order, the tail masked, then _mm512_reduce_add_ps: the order of
/// the avx512 GEMV kernel (gemm_avx512.cpp gemv_tile), so the sums equal it bit for bit.
template <class Deq>
inline void dot_row(const float* x, std::size_t m, std::size_t ldx, std::size_t K, const Deq& deq, const QuantView& q,
                    std::size_t n, float* y, std::size_t ldy) {
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  const std::size_t K16 = K / 16 * 16;
  deq([&](std::size_t k0, __m512 w) {
    for (std::size_t i = 0; i < m; ++i) acc[i] = _mm512_fmadd_ps(_mm512_loadu_ps(x + i * ldx + k0), w, acc[i]);
  });
  if (K16 < K) {
    alignas(64) float tail[16] = {};
    dequant_range(q, n, K16, K, tail, K16);
    const __mmask16 mk = static_cast<__mmask16>((1u << (K - K16)) - 1);
    const __m512 w = _mm512_load_ps(tail);
    for (std::size_t i = 0; i < m; ++i) acc[i] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, x + i * ldx + K16), w, acc[i]);
  }
  for (std::size_t i = 0; i < m; ++i) y[i * ldy + n] = _mm512_reduce_add_ps(acc[i]);
}

template <bool Four>
void gptq_gemv(const QuantView& q, const float* x, std::size_t m, std::size_t ldx, std::size_t j0, std::size_t j1,
               float* y, std::size_t ldy) {
  const std::size_t K = q.k, N = q.n, K16 = K / 16 * 16;
  const auto* w = static_cast<const std::uint32_t*>(q.data);
  constexpr std::size_t per = Four ? 8 : 4;
  const __m512i sel = Four ? _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1)
                           : _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  const __m512i shifts = Four ? _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28)
                              : _mm512_setr_epi32(0, 8, 16, 24, 0, 8, 16, 24, 0, 8, 16, 24, 0, 8, 16, 24);
  const __m512i mask = _mm512_set1_epi32(Four ? 15 : 255);
  for (std::size_t n = j0; n < j1; ++n) {
    dot_row(x, m, ldx, K, [&](auto&& fma) {
      for (std::size_t g0 = 0, g = 0; g0 < K16; g0 += q.group_size, ++g) {
        const __m512 s = _mm512_set1_ps(q.scales[g * N + n]);
        const __m512i z = _mm512_set1_epi32(q.zeros[g * N + n]);
        const std::size_t g1 = g0 + q.group_size < K16 ? g0 + q.group_size : K16;
        for (std::size_t k0 = g0; k0 < g1; k0 += 16) {
          const std::uint32_t* col = w + (k0 / per) * N + n;
          if (k0 % 64 == 0) _mm_prefetch(reinterpret_cast<const char*>(col + 8 * N * (Four ? 1 : 2)), _MM_HINT_T0);
          __m128i words;
          if (Four) words = _mm_setr_epi32(static_cast<int>(col[0]), static_cast<int>(col[N]), 0, 0);
          else
            words = _mm_setr_epi32(static_cast<int>(col[0]), static_cast<int>(col[N]), static_cast<int>(col[2 * N]),
                                   static_cast<int>(col[3 * N]));
          const __m512i v = _mm512_and_si512(
              _mm512_srlv_epi32(_mm512_permutexvar_epi32(sel, _mm512_zextsi128_si512(words)), shifts), mask);
          fma(k0, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(v, z)), s));
        }
      }
    }, q, n, y, ldy);
  }
}

/// GPTQ int4, 16 output rows at once: the words of rows n0..n0+15 for one k / 8 are one cache line, so
/// two vector loads serve 16 rows x 16 k, and each row's 16 values come out of them with one
/// VPERMT2D (lanes 0-7: word k/8 of row r, lanes 8-15: word k/8 + 1), then the shifts and the same
/// one-rounding product as everywhere. Contiguous groups only; m rows of x one after the other.
void gptq4_gemv16(const QuantView& q, const float* x, std::size_t m, std::size_t ldx, std::size_t n0, float* y,
                  std::size_t ldy) {
  const std::size_t K = q.k, N = q.n, K16 = K / 16 * 16;
  const auto* w = static_cast<const std::uint32_t*>(q.data);
  const __m512i shifts = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
  const __m512i mask = _mm512_set1_epi32(15);
  const __m512i base = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 16, 16, 16, 16, 16, 16, 16, 16);
  __m512 sv[16];
  __m512i zv[16];
  for (std::size_t i = 0; i < m; ++i) {
    const float* xi = x + i * ldx;
    __m512 acc[16];
#pragma GCC unroll 16
    for (int r = 0; r < 16; ++r) acc[r] = _mm512_setzero_ps();
    for (std::size_t g0 = 0, g = 0; g0 < K16; g0 += q.group_size, ++g) {
      const __m512 s = _mm512_loadu_ps(q.scales + g * N + n0);
      const __m512i z = _mm512_cvtepi16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q.zeros + g * N + n0)));
#pragma GCC unroll 16
      for (int r = 0; r < 16; ++r) {
        sv[r] = _mm512_permutexvar_ps(_mm512_set1_epi32(r), s);
        zv[r] = _mm512_permutexvar_epi32(_mm512_set1_epi32(r), z);
      }
      const std::size_t g1 = g0 + q.group_size < K16 ? g0 + q.group_size : K16;
      for (std::size_t k0 = g0; k0 < g1; k0 += 16) {
        const std::uint32_t* line = w + (k0 / 8) * N + n0;
        _mm_prefetch(reinterpret_cast<const char*>(line + 4 * N), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(line + 5 * N), _MM_HINT_T0);
        const __m512i a = _mm512_loadu_si512(line), b = _mm512_loadu_si512(line + N);
        const __m512 xv = _mm512_loadu_ps(xi + k0);
#pragma GCC unroll 16
        for (int r = 0; r < 16; ++r) {
          const __m512i v = _mm512_and_si512(
              _mm512_srlv_epi32(_mm512_permutex2var_epi32(a, _mm512_add_epi32(base, _mm512_set1_epi32(r)), b), shifts),
              mask);
          acc[r] = _mm512_fmadd_ps(xv, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(v, zv[r])), sv[r]), acc[r]);
        }
      }
    }
    if (K16 < K) {
      const __mmask16 mk = static_cast<__mmask16>((1u << (K - K16)) - 1);
      const __m512 xv = _mm512_maskz_loadu_ps(mk, xi + K16);
      for (int r = 0; r < 16; ++r) {
        alignas(64) float tail[16] = {};
        dequant_range(q, n0 + static_cast<std::size_t>(r), K16, K, tail, K16);
        acc[r] = _mm512_fmadd_ps(xv, _mm512_load_ps(tail), acc[r]);
      }
    }
#pragma GCC unroll 16
    for (int r = 0; r < 16; ++r) y[i * ldy + n0 + static_cast<std::size_t>(r)] = _mm512_reduce_add_ps(acc[r]);
  }
}

template <int Element>
void rows_gemv(const QuantView& q, const float* x, std::size_t m, std::size_t ldx, std::size_t j0, std::size_t j1,
               float* y, std::size_t ldy) {
  const std::size_t K = q.k, K16 = K / 16 * 16, bc = q.block_cols;
  for (std::size_t n = j0; n < j1; ++n) {
    const float* srow = q.scales + (n / q.block_rows) * q.scale_cols;
    dot_row(x, m, ldx, K, [&](auto&& fma) {
      for (std::size_t b0 = 0, b = 0; b0 < K16; b0 += bc, ++b) {
        const __m512 s = _mm512_set1_ps(srow[b]);
        const std::size_t b1 = b0 + bc < K16 ? b0 + bc : K16;
        for (std::size_t k0 = b0; k0 < b1; k0 += 16) fma(k0, _mm512_mul_ps(rows_values16<Element>(q, n, k0), s));
      }
    }, q, n, y, ldy);
  }
}

/// The 32 bf16 of two f32 vectors, lo's first (nearest even: the rounding of the float matrices' packing).
inline __m512 bf16x32(__m512 lo, __m512 hi) { return reinterpret_cast<__m512>(_mm512_cvtne2ps_pbh(hi, lo)); }

/// GPTQ int4, contiguous groups: chunk c (32 columns) of the B tiles of rows n0 .. n0 + 15. A 64-byte load
/// of qweight holds 8 columns of all 16 rows (lane = row), so each tile row (a column pair) comes out with
/// lanes in place: the pair's two nibbles dequantized, rounded, and their bf16 halves interleaved (VPERMW).
inline void gptq4_pack16_chunk(const QuantView& q, std::size_t n0, std::size_t c, std::uint16_t* tile) {
  const std::size_t N = q.n;
  const auto* w = static_cast<const std::uint32_t*>(q.data);
  const __m512i mask = _mm512_set1_epi32(15);
  // bf16 element 2 l of the result from lane l of the first vector (element l), 2 l + 1 from the second
  // (element 16 + l).
  const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7,
                                              22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const std::size_t g = c * 32 / q.group_size;
  const __m512 s = _mm512_loadu_ps(q.scales + g * N + n0);
  const __m512i z = _mm512_cvtepi16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q.zeros + g * N + n0)));
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    const __m512i word = _mm512_loadu_si512(w + (c * 4 + i) * N + n0);
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {
      const __m512i ve = _mm512_and_si512(_mm512_srli_epi32(word, 8 * p), mask);
      const __m512i vo = _mm512_and_si512(_mm512_srli_epi32(word, 8 * p + 4), mask);
      const __m512 fe = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(ve, z)), s);
      const __m512 fo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(vo, z)), s);
      const __m512i pairs = _mm512_permutexvar_epi16(interleave, _mm512_castps_si512(bf16x32(fe, fo)));
      _mm512_storeu_si512(tile + (4 * i + p) * 32, pairs);
    }
  }
}

/// Row-quantized int8 / FP8 / int4 (scale blocks of multiples of 32 columns): the B tiles of rows n0 ..
/// n0 + 15, each row's 32 values of a chunk dequantized and rounded, then the 16 x 16 transpose of their
/// pairs (as the packing of a float matrix does).
template <int Element>
void rows_pack16(const QuantView& q, std::size_t n0, std::uint16_t* out) {
  const std::size_t chunks = q.k / 32;
  const float* srow[16];
  for (int r = 0; r < 16; ++r) srow[r] = q.scales + ((n0 + r) / q.block_rows) * q.scale_cols;
  for (std::size_t c = 0; c < chunks; ++c) {
    const std::size_t b = c * 32 / q.block_cols;
    __m512 t[16];
#pragma GCC unroll 16
    for (int r = 0; r < 16; ++r) {
      const __m512 sv = _mm512_set1_ps(srow[r][b]);
      t[r] = bf16x32(_mm512_mul_ps(rows_values16<Element>(q, n0 + r, c * 32), sv),
                     _mm512_mul_ps(rows_values16<Element>(q, n0 + r, c * 32 + 16), sv));
    }
    transpose16(t);
    std::uint16_t* tile = out + c * 512;
#pragma GCC unroll 16
    for (int kk = 0; kk < 16; ++kk) _mm512_storeu_ps(tile + kk * 32, t[kk]);
  }
}

}  // namespace

bool dequant_pack_bf16_avx512(const QuantView& q, std::size_t j0, std::size_t j1, std::uint16_t* out) {
  if ((j1 - j0) % 16 != 0 || j1 > q.n || q.k % 32 != 0) return false;
  const std::size_t chunks = q.k / 32, tile_group = chunks * 512;
  if (q.layout == QuantView::gptq && q.element == QuantView::int4 && !q.g_idx && q.group_size % 32 == 0) {
    // Column chunks outermost: the range's groups read neighbouring lines of the same qweight rows (one
    // page), not one line a page a group.
    for (std::size_t c = 0; c < chunks; ++c)
      for (std::size_t n = j0; n < j1; n += 16) gptq4_pack16_chunk(q, n, c, out + (n - j0) / 16 * tile_group + c * 512);
    return true;
  }
  void (*pack)(const QuantView&, std::size_t, std::uint16_t*) = nullptr;
  if (q.layout == QuantView::rows && q.block_cols % 32 == 0)
    pack = q.element == QuantView::int8       ? &rows_pack16<QuantView::int8>
           : q.element == QuantView::fp8_e4m3 ? &rows_pack16<QuantView::fp8_e4m3>
                                              : &rows_pack16<QuantView::int4>;
  if (!pack) return false;
  for (std::size_t n = j0; n < j1; n += 16) pack(q, n, out + (n - j0) / 16 * tile_group);
  return true;
}

bool gemv_avx512(const QuantView& q, const float* x, std::size_t m, std::size_t ldx, std::size_t j0, std::size_t j1,
                 float* y, std::size_t ldy) {
  if (m == 0 || m > 4) return false;
  if (q.layout == QuantView::gptq) {
    if (q.g_idx || q.group_size % 16 != 0) return false;  // desc_act and irregular groups: dequantize
    if (q.element == QuantView::int4) {
      std::size_t n = j0;
      for (; n + 16 <= j1; n += 16) gptq4_gemv16(q, x, m, ldx, n, y, ldy);
      if (n < j1) gptq_gemv<true>(q, x, m, ldx, n, j1, y, ldy);
    } else {
      gptq_gemv<false>(q, x, m, ldx, j0, j1, y, ldy);
    }
    return true;
  }
  if (q.block_cols % 16 != 0) return false;
  if (q.element == QuantView::int8) rows_gemv<QuantView::int8>(q, x, m, ldx, j0, j1, y, ldy);
  else if (q.element == QuantView::fp8_e4m3) rows_gemv<QuantView::fp8_e4m3>(q, x, m, ldx, j0, j1, y, ldy);
  else rows_gemv<QuantView::int4>(q, x, m, ldx, j0, j1, y, ldy);
  return true;
}

void dequant_rows_avx512(const QuantView& q, std::size_t j0, std::size_t j1, float* out) {
  if (q.layout == QuantView::gptq && q.element == QuantView::int4 && !q.g_idx && q.group_size % 16 == 0) {
    std::size_t n = j0;
    for (; n + 16 <= j1; n += 16) gptq4_rows16(q, n, out + (n - j0) * q.k, q.k);
    for (; n < j1; ++n) gptq_row<true>(q, n, out + (n - j0) * q.k);
    return;
  }
  using Row = void (*)(const QuantView&, std::size_t, float*);
  Row row = q.layout == QuantView::gptq ? (q.element == QuantView::int4 ? &gptq_row<true> : &gptq_row<false>)
            : q.element == QuantView::int8 ? &rows_row<QuantView::int8>
            : q.element == QuantView::fp8_e4m3 ? &rows_row<QuantView::fp8_e4m3>
                                               : &rows_row<QuantView::int4>;
  for (std::size_t n = j0; n < j1; ++n) row(q, n, out + (n - j0) * q.k);
}

}  // namespace quarry::engine::cpu::detail
