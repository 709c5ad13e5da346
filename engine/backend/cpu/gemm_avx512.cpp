// AVX-512 (F, BW, VL, DQ) kernels for gemm(): f32 accumulation of f32 x by f32 / f16 / bf16 weights.
//
// Small m (decode, draft verification): GEMV-style. A tile of R weight rows (taken from 8 regions of
// the thread's columns, see gemv_streams) is streamed once from memory, converted to f32 in registers
// (bf16: zero-extend to 32 bits and shift left 16; f16: F16C vcvtph2ps) and multiplied with up to 4
// rows of x at a time, 16 partial sums per (row of x, row of W) pair, reduced horizontally at the
// end. Further chunks of x rows re-read the tile from L1.
//
// Large m (prefill): the loop structure of GotoBLAS / BLIS (K. Goto, R. van de Geijn, "Anatomy of
// high-performance matrix multiplication", ACM TOMS 34(3), 2008; F. Van Zee, R. van de Geijn, "BLIS: A
// framework for rapidly instantiating BLAS functionality", ACM TOMS 41(3), 2015), with the roles
// mapped onto y = x W^T: W is the operand packed into L2-sized blocks (kc x nc, converted to f32 and
// transposed into micro-panels of NR=32 columns), x is packed once into micro-panels of MR=12 rows
// that stay in L1, and a 12 x 32 register-blocked micro-kernel does 24 FMAs per k step from two
// vector loads and twelve broadcasts (24 of the 32 zmm registers hold the tile of y).
// Instructions: Intel Intrinsics Guide (vfmadd231ps, vbroadcastss, vpmovzxwd, vpslld, vcvtph2ps,
// vunpcklps/vunpcklpd/vshuff32x4 for the 16 x 16 transpose, masked vmovups for edges).
#include "engine/backend/cpu/intrinsics.hpp"

#include <cstdint>

#include "engine/backend/cpu/gemm_kernels.hpp"

namespace quarry::engine::cpu::detail {
namespace {

using std::size_t;

constexpr size_t kMR = 12, kNR = 32, kKC = 256, kNC = 512;

inline size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }
inline __mmask16 tail_mask(size_t count) {  // count in [0, 16]
  return count >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << count) - 1u);
}

// Loaders: 16 consecutive weights -> 16 f32 lanes.
struct LoadF32 {
  using T = float;
  static __m512 load(const T* p) { return _mm512_loadu_ps(p); }
  static __m512 load(const T* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
};
struct LoadBF16 {
  using T = std::uint16_t;
  static __m512 widen(__m256i v) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16)); }
  static __m512 load(const T* p) { return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static __m512 load(const T* p, __mmask16 m) { return widen(_mm256_maskz_loadu_epi16(m, p)); }
};
struct LoadF16 {
  using T = std::uint16_t;
  static __m512 load(const T* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static __m512 load(const T* p, __mmask16 m) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)); }
};

// ---- small m -------------------------------------------------------------------------------------

// Columns [k0, k1) of y[i, col[r]] (=|+=) x[i, :] . W[col[r], :] for i < M, r < R, where row[r] points
// at W[col[r], 0]. Partial sums live in `part` (M*R vectors) between k blocks: loaded unless `first`,
// reduced and written to y when `last`, stored back otherwise. With `ahead`, each row also prefetches
// the same columns of the row `ahead` rows further on (the row this tile's successor reads).
template <class L, int R, int M>
inline void gemv_tile(const float* x, size_t ldx, const typename L::T* const* row, size_t k0, size_t k1, size_t k,
                      size_t ahead, __m512* part, bool first, bool last, const size_t* col, float* y, size_t ldy,
                      bool accumulate) {
  using T = typename L::T;
  __m512 c[M][R];
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i)
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) c[i][r] = first ? _mm512_setzero_ps() : part[i * R + r];
  constexpr size_t kLine = 64 / sizeof(T);  // elements per cache line
  size_t p = k0;
  for (; p + 16 <= k1; p += 16) {
    if (ahead && p % kLine == 0) {
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) _mm_prefetch(reinterpret_cast<const char*>(row[r] + ahead * k + p), _MM_HINT_T0);
    }
    __m512 wv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) wv[r] = L::load(row[r] + p);
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) {
      const __m512 xv = _mm512_loadu_ps(x + i * ldx + p);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) c[i][r] = _mm512_fmadd_ps(xv, wv[r], c[i][r]);
    }
  }
  if (p < k1) {
    const __mmask16 m = tail_mask(k1 - p);
    __m512 wv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) wv[r] = L::load(row[r] + p, m);
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) {
      const __m512 xv = _mm512_maskz_loadu_ps(m, x + i * ldx + p);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) c[i][r] = _mm512_fmadd_ps(xv, wv[r], c[i][r]);
    }
  }
  if (!last) {
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i)
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) part[i * R + r] = c[i][r];
    return;
  }
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i)
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const float sum = _mm512_reduce_add_ps(c[i][r]);
      float& out = y[i * ldy + col[r]];
      out = accumulate ? out + sum : sum;
    }
}

// All m rows of x against the R weight rows listed in col, in chunks of up to MaxM rows of x (one
// register tile each; later chunks re-read the weight rows from L1). When x is larger than about a
// third of L1 (m*k*4 bytes; 4 rows of a 3072-wide x already fill it), k is cut into blocks of kKB
// so that the x block of every chunk and the weight rows stay in L1 together; partial sums are kept
// in a small stack buffer between blocks. m <= kMaxSmallM.
constexpr size_t kKB = 256, kMaxSmallM = 16, kXInL1Bytes = 16 * 1024;

template <class L, int R, int MaxM>
inline void gemv_rows(const float* x, size_t m, size_t ldx, const typename L::T* w, size_t k, const size_t* col,
                      float* y, size_t ldy, bool accumulate, size_t ahead) {
  using T = typename L::T;
  const T* row[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) row[r] = w + col[r] * k;
  __m512 part[kMaxSmallM * R];
  const size_t kb = m * k * sizeof(float) <= kXInL1Bytes ? k : kKB;
  for (size_t k0 = 0; k0 < k; k0 += kb) {
    const size_t k1 = min_sz(k, k0 + kb);
    const bool first = k0 == 0, last = k1 == k;
    for (size_t i = 0; i < m; i += MaxM) {
      const size_t mc = min_sz(MaxM, m - i);
      const float* xi = x + i * ldx;
      float* yi = y + i * ldy;
      __m512* pi = part + i * R;
      const size_t pf = i == 0 ? ahead : 0;
      if constexpr (MaxM >= 4) {
        if (mc == 4) {
          gemv_tile<L, R, 4>(xi, ldx, row, k0, k1, k, pf, pi, first, last, col, yi, ldy, accumulate);
          continue;
        }
      }
      if constexpr (MaxM >= 3) {
        if (mc == 3) {
          gemv_tile<L, R, 3>(xi, ldx, row, k0, k1, k, pf, pi, first, last, col, yi, ldy, accumulate);
          continue;
        }
      }
      if constexpr (MaxM >= 2) {
        if (mc == 2) {
          gemv_tile<L, R, 2>(xi, ldx, row, k0, k1, k, pf, pi, first, last, col, yi, ldy, accumulate);
          continue;
        }
      }
      gemv_tile<L, R, 1>(xi, ldx, row, k0, k1, k, pf, pi, first, last, col, yi, ldy, accumulate);
    }
  }
}

// Memory-level parallelism: one sequential stream of weights does not reach the bandwidth of the
// memory system from one core (the L2 streamer follows few pages at once). The columns [j0, j1) are
// cut into S = min(kStreams, R) equal regions that are walked side by side: each register tile takes
// G = R / S consecutive rows from every region, and prefetches the next G rows of each (software
// prefetch, Intel SDM "PREFETCHh"), so S streams far apart are always in flight.
constexpr size_t kStreams = 8;  // 8 beat 2 and 4 on Sapphire Rapids (bench/kernels)

template <class L, int R, int MaxM>
void gemv_streams(const float* x, size_t m, size_t k, size_t ldx, const typename L::T* w, size_t j0, size_t j1,
                  float* y, size_t ldy, bool accumulate) {
  constexpr size_t S = kStreams < R ? kStreams : R, G = R / S;
  const size_t tiles = (j1 - j0) / R, region = tiles * G;
  size_t col[R];
  for (size_t t = 0; t < tiles; ++t) {
    for (size_t s = 0; s < S; ++s)
      for (size_t g = 0; g < G; ++g) col[s * G + g] = j0 + s * region + t * G + g;
    gemv_rows<L, R, MaxM>(x, m, ldx, w, k, col, y, ldy, accumulate, t + 1 < tiles ? G : 0);
  }
  for (size_t j = j0 + S * region; j < j1; ++j) {
    col[0] = j;
    gemv_rows<L, 1, MaxM>(x, m, ldx, w, k, col, y, ldy, accumulate, 0);
  }
}

template <class L>
void gemv_t(const float* x, size_t m, size_t k, size_t ldx, const void* wv, size_t j0, size_t j1, float* y,
            size_t ldy, bool accumulate) {
  const auto* w = static_cast<const typename L::T*>(wv);
  if (m <= 2)  // 8 (or 16) accumulators: enough independent FMA chains
    gemv_streams<L, 8, 2>(x, m, k, ldx, w, j0, j1, y, ldy, accumulate);
  else
    gemv_streams<L, 4, 4>(x, m, k, ldx, w, j0, j1, y, ldy, accumulate);
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

#include "engine/backend/cpu/transpose16_avx512.inc"

// Packs W[0:nb, 0:kb] (rows at stride k) into micro-panels of kNR columns of y: panel q holds
// wp[q*kb*kNR + p*kNR + c] = W[q*kNR + c, p] as f32, zero for rows past nb.
template <class L>
void pack_w(const typename L::T* w, size_t k, size_t nb, size_t kb, float* wp) {
  for (size_t q = 0; q * kNR < nb; ++q) {
    float* panel = wp + q * kb * kNR;
#pragma GCC unroll 1
    for (size_t half = 0; half < kNR; half += 16) {
      const size_t row0 = q * kNR + half;
      const size_t rows = row0 < nb ? min_sz(16, nb - row0) : 0;
      for (size_t p = 0; p < kb; p += 16) {
        const size_t cols = min_sz(16, kb - p);
        const __mmask16 cm = tail_mask(cols);
        __m512 r[16];
#pragma GCC unroll 16
        for (size_t i = 0; i < 16; ++i)
          r[i] = i < rows ? L::load(w + (row0 + i) * k + p, cm) : _mm512_setzero_ps();
        transpose16(r);
        float* out = panel + p * kNR + half;
        for (size_t c = 0; c < cols; ++c) _mm512_store_ps(out + c * kNR, r[c]);
      }
    }
  }
}

// Packs panels [q0, q1) of x (layout in gemm_kernels.hpp): 12 rows x 16 columns at a time through
// the same in-register transpose (4 zero rows), storing 12 lanes per column.
void pack_x(const float* x, size_t m, size_t k, size_t ldx, size_t q0, size_t q1, float* xp) {
  for (size_t q = q0; q < q1; ++q) {
    float* panel = xp + q * k * kMR;
    const size_t r0 = q * kMR, rows = min_sz(kMR, m - r0);
    for (size_t p = 0; p < k; p += 16) {
      const size_t cols = min_sz(16, k - p);
      const __mmask16 cm = tail_mask(cols);
      __m512 r[16];
#pragma GCC unroll 16
      for (size_t i = 0; i < 16; ++i)
        r[i] = i < rows ? _mm512_maskz_loadu_ps(cm, x + (r0 + i) * ldx + p) : _mm512_setzero_ps();
      transpose16(r);
      for (size_t c = 0; c < cols; ++c) _mm512_mask_storeu_ps(panel + (p + c) * kMR, 0x0fff, r[c]);
    }
  }
}

// y[0:rows, 0:cols] (=|+=) xp-panel (kb x 12) times wp-panel (kb x 32).
void micro_kernel(size_t kb, const float* xp, const float* wp, float* y, size_t ldy, size_t rows, size_t cols,
                  bool add) {
  __m512 c[kMR][2];
#pragma GCC unroll 12
  for (size_t i = 0; i < kMR; ++i) c[i][0] = c[i][1] = _mm512_setzero_ps();
  // The tile of y is read (when adding) and written at the end; its rows are ldy apart, often a
  // multiple of 4 KB, so they compete for a few L1 sets. Prefetch them a few dozen k steps before
  // the end, late enough not to be evicted by the streaming W panel, early enough to hide L2 latency.
  const size_t pf_at = kb > 24 ? kb - 24 : 0;
  for (size_t p = 0; p < kb; ++p) {
    if (p == pf_at) {
      for (size_t i = 0; i < rows; ++i) {
        _mm_prefetch(reinterpret_cast<const char*>(y + i * ldy), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(y + i * ldy + 16), _MM_HINT_T0);
      }
    }
    const __m512 b0 = _mm512_load_ps(wp), b1 = _mm512_load_ps(wp + 16);
#pragma GCC unroll 12
    for (size_t i = 0; i < kMR; ++i) {
      const __m512 a = _mm512_set1_ps(xp[i]);
      c[i][0] = _mm512_fmadd_ps(a, b0, c[i][0]);
      c[i][1] = _mm512_fmadd_ps(a, b1, c[i][1]);
    }
    xp += kMR;
    wp += kNR;
  }
  const __mmask16 m0 = tail_mask(cols), m1 = tail_mask(cols > 16 ? cols - 16 : 0);
#pragma GCC unroll 12
  for (size_t i = 0; i < kMR; ++i) {
    if (i < rows) {
      float* yi = y + i * ldy;
      if (add) {
        c[i][0] = _mm512_add_ps(c[i][0], _mm512_maskz_loadu_ps(m0, yi));
        c[i][1] = _mm512_add_ps(c[i][1], _mm512_maskz_loadu_ps(m1, yi + 16));
      }
      _mm512_mask_storeu_ps(yi, m0, c[i][0]);
      _mm512_mask_storeu_ps(yi + 16, m1, c[i][1]);
    }
  }
}

#include "engine/backend/cpu/gemm_blocked.inc"

constexpr GemmKernels kKernels{"avx512", kMaxSmallM, kMR, kNR, kKC * kNC, 0, 32, gemv, pack_x, gemm_block};

}  // namespace

const GemmKernels& kernels_avx512() { return kKernels; }

}  // namespace quarry::engine::cpu::detail
