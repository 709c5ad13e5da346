// AVX2 + FMA3 + F16C kernels for gemm(): the same two algorithms as gemm_avx512.cpp (see there for
// the sources) with 8-lane vectors: GEMV tiles of 4 weight rows (from 4 regions) by up to 2 rows of x, and a
// GotoBLAS/BLIS blocked GEMM with a 6 x 16 micro-kernel (12 of the 16 ymm registers hold the tile).
// Instructions: Intel Intrinsics Guide (vfmadd231ps, vbroadcastss, vpmovzxwd, vpslld, vcvtph2ps).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "engine/backend/cpu/gemm_kernels.hpp"

namespace quarry::engine::cpu::detail {
namespace {

using std::size_t;

constexpr size_t kMR = 6, kNR = 16, kKC = 256, kNC = 512;

inline size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

struct LoadF32 {
  using T = float;
  static __m256 load(const T* p) { return _mm256_loadu_ps(p); }
  static float one(const T* p) { return *p; }
};
struct LoadBF16 {
  using T = std::uint16_t;
  static __m256 load(const T* p) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
  }
  static float one(const T* p) {
    const std::uint32_t u = static_cast<std::uint32_t>(*p) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};
struct LoadF16 {
  using T = std::uint16_t;
  static __m256 load(const T* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static float one(const T* p) { return _cvtsh_ss(*p); }
};

// ---- small m -------------------------------------------------------------------------------------

// Columns [k0, k1) of y[i, col[r]] (=|+=) x[i, :] . W[col[r], :] for i < M, r < R (row[r] points at
// W[col[r], 0]); partial sums kept in `part` between k blocks, prefetch of the row `ahead` rows
// further on (see gemm_avx512.cpp, gemv_tile and gemv_rows). k1 - k0 is a multiple of 8 unless k1 == k.
template <class L, int R, int M>
inline void gemv_tile(const float* x, size_t ldx, const typename L::T* const* row, size_t k0, size_t k1, size_t k,
                      size_t ahead, __m256* part, bool first, bool last, const size_t* col, float* y, size_t ldy,
                      bool accumulate) {
  using T = typename L::T;
  __m256 c[M][R];
#pragma GCC unroll 4
  for (int i = 0; i < M; ++i)
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) c[i][r] = first ? _mm256_setzero_ps() : part[i * R + r];
  constexpr size_t kLine = 64 / sizeof(T);
  size_t p = k0;
  for (; p + 8 <= k1; p += 8) {
    if (ahead && p % kLine == 0) {
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) _mm_prefetch(reinterpret_cast<const char*>(row[r] + ahead * k + p), _MM_HINT_T0);
    }
    __m256 wv[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) wv[r] = L::load(row[r] + p);
#pragma GCC unroll 4
    for (int i = 0; i < M; ++i) {
      const __m256 xv = _mm256_loadu_ps(x + i * ldx + p);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) c[i][r] = _mm256_fmadd_ps(xv, wv[r], c[i][r]);
    }
  }
  if (!last) {
#pragma GCC unroll 4
    for (int i = 0; i < M; ++i)
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) part[i * R + r] = c[i][r];
    return;
  }
#pragma GCC unroll 4
  for (int i = 0; i < M; ++i)
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      float sum = hsum(c[i][r]);
      for (size_t q = p; q < k; ++q) sum += x[i * ldx + q] * L::one(row[r] + q);
      float& out = y[i * ldy + col[r]];
      out = accumulate ? out + sum : sum;
    }
}

constexpr size_t kKB = 256, kMaxSmallM = 12, kXInL1Bytes = 12 * 1024;

template <class L, int R>
inline void gemv_rows(const float* x, size_t m, size_t ldx, const typename L::T* w, size_t k, const size_t* col,
                      float* y, size_t ldy, bool accumulate, size_t ahead) {
  using T = typename L::T;
  const T* row[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) row[r] = w + col[r] * k;
  __m256 part[kMaxSmallM * R];
  const size_t kb = m * k * sizeof(float) <= kXInL1Bytes ? k : kKB;
  for (size_t k0 = 0; k0 < k; k0 += kb) {
    const size_t k1 = min_sz(k, k0 + kb);
    const bool first = k0 == 0, last = k1 == k;
    size_t i = 0;
    for (; i + 2 <= m; i += 2)
      gemv_tile<L, R, 2>(x + i * ldx, ldx, row, k0, k1, k, i == 0 ? ahead : 0, part + i * R, first, last, col,
                         y + i * ldy, ldy, accumulate);
    if (i < m)
      gemv_tile<L, R, 1>(x + i * ldx, ldx, row, k0, k1, k, i == 0 ? ahead : 0, part + i * R, first, last, col,
                         y + i * ldy, ldy, accumulate);
  }
}

// 4 regions of the columns walked side by side, one row of each per tile (see gemm_avx512.cpp).
template <class L>
void gemv_t(const float* x, size_t m, size_t k, size_t ldx, const void* wv, size_t j0, size_t j1, float* y,
            size_t ldy, bool accumulate) {
  constexpr size_t R = 4;
  const auto* w = static_cast<const typename L::T*>(wv);
  const size_t region = (j1 - j0) / R;
  size_t col[R];
  for (size_t t = 0; t < region; ++t) {
    for (size_t s = 0; s < R; ++s) col[s] = j0 + s * region + t;
    gemv_rows<L, R>(x, m, ldx, w, k, col, y, ldy, accumulate, t + 1 < region ? 1 : 0);
  }
  for (size_t j = j0 + R * region; j < j1; ++j) {
    col[0] = j;
    gemv_rows<L, 1>(x, m, ldx, w, k, col, y, ldy, accumulate, 0);
  }
}

void gemv(const float* x, size_t m, size_t k, size_t ldx, const void* w, WeightType wt, size_t j0, size_t j1,
          float* y, size_t ldy, bool accumulate) {
  switch (wt) {
    case WeightType::f32: return gemv_t<LoadF32>(x, m, k, ldx, w, j0, j1, y, ldy, accumulate);
    case WeightType::bf16: return gemv_t<LoadBF16>(x, m, k, ldx, w, j0, j1, y, ldy, accumulate);
    case WeightType::f16: return gemv_t<LoadF16>(x, m, k, ldx, w, j0, j1, y, ldy, accumulate);
  }
}

// ---- large m -------------------------------------------------------------------------------------

// In-register transpose of an 8 x 8 f32 block: r[i] holds row i on entry and column i on exit
// (vunpcklps/vunpckhps, vshufps, vperm2f128).
inline void transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g) {
    t[2 * g] = _mm256_unpacklo_ps(r[2 * g], r[2 * g + 1]);
    t[2 * g + 1] = _mm256_unpackhi_ps(r[2 * g], r[2 * g + 1]);
  }
  // u[4h + c]: columns c (low 128 bits) and c + 4 (high) of rows 4h .. 4h + 3.
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    u[4 * h + 0] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0x44);
    u[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0xee);
    u[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
    u[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xee);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
    r[4 + c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
  }
}

// wp[q*kb*kNR + p*kNR + c] = W[q*kNR + c, p] as f32 (zero past nb): 8 x 8 blocks converted and
// transposed in registers; the last kb % 8 columns one by one.
template <class L>
void pack_w(const typename L::T* w, size_t k, size_t nb, size_t kb, float* wp) {
  const size_t panels = (nb + kNR - 1) / kNR, kb8 = kb / 8 * 8;
  for (size_t q = 0; q < panels; ++q) {
    float* panel = wp + q * kb * kNR;
    for (size_t half = 0; half < kNR; half += 8) {
      const size_t row0 = q * kNR + half;
      const size_t rows = row0 < nb ? min_sz(8, nb - row0) : 0;
      for (size_t p = 0; p < kb8; p += 8) {
        __m256 r[8];
#pragma GCC unroll 8
        for (size_t i = 0; i < 8; ++i) r[i] = i < rows ? L::load(w + (row0 + i) * k + p) : _mm256_setzero_ps();
        transpose8(r);
#pragma GCC unroll 8
        for (size_t c = 0; c < 8; ++c) _mm256_store_ps(panel + (p + c) * kNR + half, r[c]);
      }
      for (size_t p = kb8; p < kb; ++p)
        for (size_t i = 0; i < 8; ++i) panel[p * kNR + half + i] = i < rows ? L::one(w + (row0 + i) * k + p) : 0.f;
    }
  }
}

void micro_kernel(size_t kb, const float* xp, const float* wp, float* y, size_t ldy, size_t rows, size_t cols,
                  bool add) {
  __m256 c[kMR][2];
#pragma GCC unroll 6
  for (size_t i = 0; i < kMR; ++i) c[i][0] = c[i][1] = _mm256_setzero_ps();
  for (size_t p = 0; p < kb; ++p) {
    const __m256 b0 = _mm256_load_ps(wp), b1 = _mm256_load_ps(wp + 8);
#pragma GCC unroll 6
    for (size_t i = 0; i < kMR; ++i) {
      const __m256 a = _mm256_broadcast_ss(xp + i);
      c[i][0] = _mm256_fmadd_ps(a, b0, c[i][0]);
      c[i][1] = _mm256_fmadd_ps(a, b1, c[i][1]);
    }
    xp += kMR;
    wp += kNR;
  }
  if (cols == kNR) {
#pragma GCC unroll 6
    for (size_t i = 0; i < kMR; ++i) {
      if (i < rows) {
        float* yi = y + i * ldy;
        if (add) {
          c[i][0] = _mm256_add_ps(c[i][0], _mm256_loadu_ps(yi));
          c[i][1] = _mm256_add_ps(c[i][1], _mm256_loadu_ps(yi + 8));
        }
        _mm256_storeu_ps(yi, c[i][0]);
        _mm256_storeu_ps(yi + 8, c[i][1]);
      }
    }
    return;
  }
  alignas(32) float tile[kMR][kNR];
#pragma GCC unroll 6
  for (size_t i = 0; i < kMR; ++i) {
    _mm256_store_ps(tile[i], c[i][0]);
    _mm256_store_ps(tile[i] + 8, c[i][1]);
  }
  for (size_t i = 0; i < rows; ++i)
    for (size_t j = 0; j < cols; ++j) y[i * ldy + j] = add ? y[i * ldy + j] + tile[i][j] : tile[i][j];
}

#include "engine/backend/cpu/gemm_blocked.inc"

constexpr GemmKernels kKernels{"avx2", kMaxSmallM, kMR, kNR, kKC * kNC, 0, 16, gemv, nullptr, gemm_block};

}  // namespace

const GemmKernels& kernels_avx2() { return kKernels; }

}  // namespace quarry::engine::cpu::detail
