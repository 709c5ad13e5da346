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

/// Values k0 .. k0 + 7 of a row-quantized row as f32 before the scale: int8 and FP8 from the row's bytes
/// b8, int4 (offset 8) from its words w4.
template <int Element>
inline __m256 row_values(const std::uint8_t* b8, const std::uint32_t* w4, std::size_t k0) {
  if constexpr (Element == QuantView::int8) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b8 + k0))));
  } else if constexpr (Element == QuantView::fp8_e4m3) {
    return fp8_to_f32(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b8 + k0))));
  } else {
    const __m256i v = _mm256_set1_epi32(static_cast<int>(w4[k0 / 8]));
    const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    return _mm256_cvtepi32_ps(
        _mm256_sub_epi32(_mm256_and_si256(_mm256_srlv_epi32(v, shifts), _mm256_set1_epi32(15)), _mm256_set1_epi32(8)));
  }
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
  const auto* b8 = static_cast<const std::uint8_t*>(q.data) + n * K;
  const auto* w4 = static_cast<const std::uint32_t*>(q.data) + n * (K / 8);
  for (std::size_t b0 = 0, b = 0; b0 < K8; b0 += bc, ++b) {
    const __m256 s = _mm256_set1_ps(srow[b]);
    const std::size_t b1 = b0 + bc < K8 ? b0 + bc : K8;
    for (std::size_t k0 = b0; k0 < b1; k0 += 8) _mm256_storeu_ps(o + k0, _mm256_mul_ps(row_values<Element>(b8, w4, k0), s));
  }
  if (K8 < K) dequant_range(q, n, K8, K, o);
}

/// gemm_avx2.cpp's horizontal sum (the same adds in the same order).
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/// GPTQ int4 rows n0 .. n0 + R - 1 (R = 8, or 1 for the rows left over; contiguous groups of a multiple of 8
/// columns) against m <= 4 rows of x. For one k / 8 the words of 8 consecutive rows are 32 contiguous bytes
/// (one load); each row's 8 values come out of them with a VPERMD broadcast, the shifts and the mask, then
/// the one-rounding product float(q - z) * s of the dequantized rows, FMA'd in k order into one 8-lane
/// accumulator per row, then hsum and the scalar tail: gemm_avx2.cpp gemv_tile's order, so the sums equal
/// the avx2 product over the dequantized rows bit for bit.
template <int R>
void gptq4_gemv(const QuantView& q, const float* x, std::size_t m, std::size_t ldx, std::size_t n0, float* y,
                std::size_t ldy) {
  const std::size_t K = q.k, N = q.n, K8 = K / 8 * 8;
  const auto* w = static_cast<const std::uint32_t*>(q.data);
  const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28), mask = _mm256_set1_epi32(15);
  for (std::size_t i = 0; i < m; ++i) {
    const float* xi = x + i * ldx;
    __m256 acc[R], sv[R];
    __m256i zv[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (std::size_t g0 = 0, g = 0; g0 < K8; g0 += q.group_size, ++g) {
      for (int r = 0; r < R; ++r) {
        sv[r] = _mm256_set1_ps(q.scales[g * N + n0 + r]);
        zv[r] = _mm256_set1_epi32(q.zeros[g * N + n0 + r]);
      }
      const std::size_t g1 = g0 + q.group_size < K8 ? g0 + q.group_size : K8;
      for (std::size_t k0 = g0; k0 < g1; k0 += 8) {
        const std::uint32_t* line = w + (k0 / 8) * N + n0;
        if (k0 % 64 == 0) _mm_prefetch(reinterpret_cast<const char*>(line + 8 * N), _MM_HINT_T0);
        const __m256 xv = _mm256_loadu_ps(xi + k0);
        if constexpr (R == 8) {
          const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(line));
#pragma GCC unroll 8
          for (int r = 0; r < R; ++r) {
            const __m256i v =
                _mm256_and_si256(_mm256_srlv_epi32(_mm256_permutevar8x32_epi32(a, _mm256_set1_epi32(r)), shifts), mask);
            acc[r] = _mm256_fmadd_ps(xv, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(v, zv[r])), sv[r]), acc[r]);
          }
        } else {
          const __m256i v = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(line[0])), shifts), mask);
          acc[0] = _mm256_fmadd_ps(xv, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(v, zv[0])), sv[0]), acc[0]);
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      float sum = hsum(acc[r]);
      if (K8 < K) {
        float tail[8] = {};
        dequant_range(q, n0 + static_cast<std::size_t>(r), K8, K, tail, K8);
        for (std::size_t p = K8; p < K; ++p) sum += xi[p] * tail[p - K8];
      }
      y[i * ldy + n0 + static_cast<std::size_t>(r)] = sum;
    }
  }
}

/// Row-quantized weights (int8, FP8 E4M3, int4; scale blocks of a multiple of 8 columns), rows j0 .. j1 - 1,
/// against m <= 4 rows of x: each 8 values widened as rows_row widens them, times the block's scale, FMA'd
/// into one accumulator per row of x, then hsum and the scalar tail (gemv_tile's order, as above).
template <int Element>
void rows_gemv(const QuantView& q, const float* x, std::size_t m, std::size_t ldx, std::size_t j0, std::size_t j1,
               float* y, std::size_t ldy) {
  const std::size_t K = q.k, K8 = K / 8 * 8, bc = q.block_cols;
  for (std::size_t n = j0; n < j1; ++n) {
    const float* srow = q.scales + (n / q.block_rows) * q.scale_cols;
    const auto* b8 = static_cast<const std::uint8_t*>(q.data) + n * K;
    const auto* w4 = static_cast<const std::uint32_t*>(q.data) + n * (K / 8);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (std::size_t b0 = 0, b = 0; b0 < K8; b0 += bc, ++b) {
      const __m256 s = _mm256_set1_ps(srow[b]);
      const std::size_t b1 = b0 + bc < K8 ? b0 + bc : K8;
      for (std::size_t k0 = b0; k0 < b1; k0 += 8) {
        const __m256 wv = _mm256_mul_ps(row_values<Element>(b8, w4, k0), s);
        for (std::size_t i = 0; i < m; ++i) acc[i] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i * ldx + k0), wv, acc[i]);
      }
    }
    float tail[8] = {};
    if (K8 < K) dequant_range(q, n, K8, K, tail, K8);
    for (std::size_t i = 0; i < m; ++i) {
      float sum = hsum(acc[i]);
      for (std::size_t p = K8; p < K; ++p) sum += x[i * ldx + p] * tail[p - K8];
      y[i * ldy + n] = sum;
    }
  }
}

}  // namespace

bool gemv_avx2(const QuantView& q, const float* x, std::size_t m, std::size_t ldx, std::size_t j0, std::size_t j1,
               float* y, std::size_t ldy) {
  if (m == 0 || m > 4) return false;
  if (q.layout == QuantView::gptq) {
    if (q.element != QuantView::int4 || q.g_idx || q.group_size % 8 != 0) return false;
    std::size_t n = j0;
    for (; n + 8 <= j1; n += 8) gptq4_gemv<8>(q, x, m, ldx, n, y, ldy);
    for (; n < j1; ++n) gptq4_gemv<1>(q, x, m, ldx, n, y, ldy);
    return true;
  }
  if (q.block_cols % 8 != 0) return false;
  if (q.element == QuantView::int8) rows_gemv<QuantView::int8>(q, x, m, ldx, j0, j1, y, ldy);
  else if (q.element == QuantView::fp8_e4m3) rows_gemv<QuantView::fp8_e4m3>(q, x, m, ldx, j0, j1, y, ldy);
  else rows_gemv<QuantView::int4>(q, x, m, ldx, j0, j1, y, ldy);
  return true;
}

void dequant_rows_avx2(const QuantView& q, std::size_t j0, std::size_t j1, float* out) {
  using Row = void (*)(const QuantView&, std::size_t, float*);
  Row row = q.layout == QuantView::gptq ? (q.element == QuantView::int4 ? &gptq_row<true> : &gptq_row<false>)
            : q.element == QuantView::int8 ? &rows_row<QuantView::int8>
            : q.element == QuantView::fp8_e4m3 ? &rows_row<QuantView::fp8_e4m3>
                                               : &rows_row<QuantView::int4>;
  for (std::size_t n = j0; n < j1; ++n) row(q, n, out + (n - j0) * q.k);
}

}  // namespace quarry::engine::cpu::detail
