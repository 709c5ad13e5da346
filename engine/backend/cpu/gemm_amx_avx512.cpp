// AMX kernels for gemm() (opt-in kernel set "amx"): prefill on Intel AMX tiles with bf16 inputs.
//
// For m > kSmallM the product runs on the tile unit: x and W are rounded to bf16 (round to nearest
// even; exact for bf16 weights) and TDPBF16PS accumulates their products in f32. For m <= kSmallM
// (decode) the AVX-512 GEMV kernels run unchanged, exact in f32.
// Layouts (Intel SDM vol. 1 ch. 3 "Intel AMX", TDPBF16PS; Intel Intrinsics Guide): an A tile is
// 16 rows of x by 32 k values (64 bytes per row); a B tile holds 16 columns of y as 16 rows of k
// pairs: row kk has, for each column n, the 32-bit pair (W[n, 2kk], W[n, 2kk+1]). That pair is the
// 32-bit word at W[n] + 2kk in a bf16 row, so a B tile is the 16 x 16 transpose of 32-bit words of
// 16 weight rows (the same in-register transpose as the AVX-512 packing). A 2 x 2 block of C tiles
// (32 x 32 of y) is accumulated over all of k with two A and two B tiles per 32-wide k chunk.
// Linux needs arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) before the first tile instruction
// (cpu_features.cpp, amx_tile_permission).
#include "engine/backend/cpu/intrinsics.hpp"

#include <cstdint>

#include "engine/backend/cpu/gemm_kernels.hpp"

namespace quarry::engine::cpu::detail {
namespace {

using std::size_t;

constexpr size_t kSmallM = 16, kMR = 32, kNC = 128;

inline size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }
inline size_t k_padded(size_t k) { return (k + 31) / 32 * 32; }
inline __mmask16 tail_mask(size_t count) {
  return count >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << count) - 1u);
}

#include "engine/backend/cpu/transpose16_avx512.inc"

// 32 consecutive values (the first `count`, zeros after) -> 32 bf16 in one 512-bit register.
inline __m512 f32x32_to_bf16(const float* p, size_t count) {
  const __m512 lo = _mm512_maskz_loadu_ps(tail_mask(count), p);
  const __m512 hi = _mm512_maskz_loadu_ps(tail_mask(count > 16 ? count - 16 : 0), p + 16);
  return reinterpret_cast<__m512>(_mm512_cvtne2ps_pbh(hi, lo));  // low half from lo
}

struct LoadF32 {
  using T = float;
  static __m512 load32(const T* p, size_t count) { return f32x32_to_bf16(p, count); }
};
struct LoadBF16 {
  using T = std::uint16_t;
  static __m512 load32(const T* p, size_t count) {
    const __mmask32 m = count >= 32 ? 0xffffffffu : (1u << count) - 1u;
    return _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(m, p));
  }
};
struct LoadF16 {
  using T = std::uint16_t;
  static __m512 load32(const T* p, size_t count) {
    const __m256i lo = _mm256_maskz_loadu_epi16(tail_mask(count), p);
    const __m256i hi = _mm256_maskz_loadu_epi16(tail_mask(count > 16 ? count - 16 : 0), p + 16);
    return reinterpret_cast<__m512>(_mm512_cvtne2ps_pbh(_mm512_cvtph_ps(hi), _mm512_cvtph_ps(lo)));
  }
};

// x panel q (rows 32q .. 32q+31) as bf16 rows of k_padded(k) values (zero past m and k), at
// xp + q * 16 * k_padded(k) floats.
void pack_x(const float* x, size_t m, size_t k, size_t ldx, size_t q0, size_t q1, float* xp) {
  const size_t k2 = k_padded(k);
  for (size_t q = q0; q < q1; ++q) {
    auto* panel = reinterpret_cast<std::uint16_t*>(xp + q * 16 * k2);
    for (size_t r = 0; r < kMR; ++r) {
      const size_t i = q * kMR + r;
      for (size_t p = 0; p < k2; p += 32) {
        const __m512 v = i < m ? f32x32_to_bf16(x + i * ldx + p, p < k ? k - p : 0) : _mm512_setzero_ps();
        _mm512_storeu_ps(panel + r * k2 + p, v);
      }
    }
  }
}

// Groups [g0, g1) of 16 weight rows (output columns) as B tiles: group g, k chunk c at
// out + (g * chunks + c) * 512 bf16 (zero rows past n, zero k past k).
template <class L>
void pack_groups(const typename L::T* w, size_t n, size_t k, size_t g0, size_t g1, std::uint16_t* out) {
  const size_t chunks = k_padded(k) / 32;
  for (size_t g = g0; g < g1; ++g)
    for (size_t c = 0; c < chunks; ++c) {
      const size_t p = c * 32, count = min_sz(32, k - p);
      __m512 r[16];
#pragma GCC unroll 16
      for (size_t i = 0; i < 16; ++i) {
        const size_t row = g * 16 + i;
        r[i] = row < n ? L::load32(w + row * k + p, count) : _mm512_setzero_ps();
      }
      transpose16(r);
      std::uint16_t* tile = out + (g * chunks + c) * 512;
#pragma GCC unroll 16
      for (size_t kk = 0; kk < 16; ++kk) _mm512_storeu_ps(tile + kk * 32, r[kk]);
    }
}

// W rows [0, nb) (stride k) -> B tiles for gemm_block: groups padded with zero columns to an even count.
template <class L>
void pack_w(const typename L::T* w, size_t k, size_t nb, std::uint16_t* wb) {
  pack_groups<L>(w, nb, k, 0, (nb + 31) / 32 * 2, wb);
}

#include "engine/backend/cpu/amx_tiles.inc"

// C and A tiles of `rows` rows (tiles 0..4), B tiles of 16 (5..7); 64 bytes per row.
void tiles_configure_rows(size_t rows) {
  const std::uint8_t r = static_cast<std::uint8_t>(rows);
  const std::uint8_t n[8] = {r, r, r, r, r, 16, 16, 16};
  const std::uint16_t colsb[8] = {64, 64, 64, 64, 64, 64, 64, 64};
  tiles_configure(n, colsb);
}

// stage[32][32] = x panel (32 rows, k2 columns, bf16) times the two B groups at b0 and b1.
__attribute__((target("amx-tile,amx-bf16"))) void tile_block(const std::uint16_t* a, size_t k2,
                                                               const std::uint16_t* b0, const std::uint16_t* b1,
                                                               float* stage) {
  const long a_stride = static_cast<long>(k2 * 2), b_stride = 64, c_stride = 32 * 4;
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  const size_t chunks = k2 / 32;
  for (size_t c = 0; c < chunks; ++c) {
    _tile_loadd(4, a + c * 32, a_stride);
    _tile_loadd(5, a + 16 * k2 + c * 32, a_stride);
    _tile_loadd(6, b0 + c * 512, b_stride);
    _tile_loadd(7, b1 + c * 512, b_stride);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, stage, c_stride);
  _tile_stored(1, stage + 16, c_stride);
  _tile_stored(2, stage + 16 * 32, c_stride);
  _tile_stored(3, stage + 16 * 32 + 16, c_stride);
}

template <class L>
void gemm_t(const float* xp, size_t m, size_t k, const void* wv, size_t j0, size_t j1, float* y, size_t ldy,
            bool accumulate, float* scratch) {
  const auto* w = static_cast<const typename L::T*>(wv);
  const size_t k2 = k_padded(k), chunks = k2 / 32;
  float* stage = scratch;                                             // 32 x 32 f32
  auto* wb = reinterpret_cast<std::uint16_t*>(scratch + 32 * 32);      // kNC x k2 bf16
  tiles_configure_rows(16);  // tmm0..3: C, tmm4..5: A, tmm6..7: B, all 16 rows of 64 bytes
  for (size_t jc = j0; jc < j1; jc += kNC) {
    const size_t nb = min_sz(kNC, j1 - jc);
    pack_w<L>(w + jc * k, k, nb, wb);
    for (size_t i0 = 0; i0 < m; i0 += kMR) {
      const auto* a = reinterpret_cast<const std::uint16_t*>(xp + (i0 / kMR) * 16 * k2);
      const size_t rows = min_sz(kMR, m - i0);
      for (size_t g2 = 0; g2 * 32 < nb; ++g2) {
        tile_block(a, k2, wb + (2 * g2) * chunks * 512, wb + (2 * g2 + 1) * chunks * 512, stage);
        const size_t cols = min_sz(32, nb - g2 * 32);
        const __mmask16 m0 = tail_mask(cols), m1 = tail_mask(cols > 16 ? cols - 16 : 0);
        for (size_t i = 0; i < rows; ++i) {
          float* yi = y + (i0 + i) * ldy + jc + g2 * 32;
          __m512 v0 = _mm512_load_ps(stage + i * 32), v1 = _mm512_load_ps(stage + i * 32 + 16);
          if (accumulate) {
            v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, yi));
            v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, yi + 16));
          }
          _mm512_mask_storeu_ps(yi, m0, v0);
          _mm512_mask_storeu_ps(yi + 16, m1, v1);
        }
      }
    }
  }
  tiles_release();
  _mm256_zeroupper();  // as in amx_packed_gemm
}

void gemm_block(const float* xp, size_t m, size_t k, const void* w, WeightType wt, size_t j0, size_t j1,
                float* y, size_t ldy, bool accumulate, float* scratch) {
  switch (wt) {
    case WeightType::f32: return gemm_t<LoadF32>(xp, m, k, w, j0, j1, y, ldy, accumulate, scratch);
    case WeightType::bf16: return gemm_t<LoadBF16>(xp, m, k, w, j0, j1, y, ldy, accumulate, scratch);
    case WeightType::f16: return gemm_t<LoadF16>(xp, m, k, w, j0, j1, y, ldy, accumulate, scratch);
  }
}

// ---- weights packed once (gemm_packed) ---------------------------------------------------------



// stage[i][16q + j] = sum over k of a[i, :] . B(group q)[:, j], i < rows (set by the tile config),
// for GQ groups side by side (C tiles 0..3, A tile 4, B tiles 5..7 in turn).
template <int GQ>
__attribute__((target("amx-tile,amx-bf16"))) void packed_block(const std::uint16_t* a, size_t kpad,
                                                                 const std::uint16_t* b, size_t chunks, float* stage) {
  const long a_stride = static_cast<long>(kpad * 2), b_stride = 64, c_stride = 64 * 4;
  _tile_zero(0);
  if constexpr (GQ > 1) _tile_zero(1);
  if constexpr (GQ > 2) _tile_zero(2);
  if constexpr (GQ > 3) _tile_zero(3);
  for (size_t c = 0; c < chunks; ++c) {
    _tile_loadd(4, a + c * 32, a_stride);
    _tile_loadd(5, b + c * 512, b_stride);
    _tile_dpbf16ps(0, 4, 5);
    if constexpr (GQ > 1) {
      _tile_loadd(6, b + (chunks + c) * 512, b_stride);
      _tile_dpbf16ps(1, 4, 6);
    }
    if constexpr (GQ > 2) {
      _tile_loadd(7, b + (2 * chunks + c) * 512, b_stride);
      _tile_dpbf16ps(2, 4, 7);
    }
    if constexpr (GQ > 3) {
      _tile_loadd(5, b + (3 * chunks + c) * 512, b_stride);
      _tile_dpbf16ps(3, 4, 5);
    }
  }
  _tile_stored(0, stage, c_stride);
  if constexpr (GQ > 1) _tile_stored(1, stage + 16, c_stride);
  if constexpr (GQ > 2) _tile_stored(2, stage + 32, c_stride);
  if constexpr (GQ > 3) _tile_stored(3, stage + 48, c_stride);
}

}  // namespace

void amx_pack_b(const void* w, WeightType wt, size_t n, size_t k, size_t g0, size_t g1, std::uint16_t* out) {
  switch (wt) {
    case WeightType::f32: return pack_groups<LoadF32>(static_cast<const float*>(w), n, k, g0, g1, out);
    case WeightType::bf16: return pack_groups<LoadBF16>(static_cast<const std::uint16_t*>(w), n, k, g0, g1, out);
    case WeightType::f16: return pack_groups<LoadF16>(static_cast<const std::uint16_t*>(w), n, k, g0, g1, out);
  }
}

void amx_round_x(const float* x, size_t m, size_t k, size_t ldx, std::uint16_t* xb) {
  const size_t k2 = k_padded(k);
  for (size_t i = 0; i < m; ++i)
    for (size_t p = 0; p < k2; p += 32)
      _mm512_storeu_ps(xb + i * k2 + p, f32x32_to_bf16(x + i * ldx + p, p < k ? k - p : 0));
}

void amx_packed_gemm(const std::uint16_t* xb, size_t m, size_t k, const std::uint16_t* wp, size_t n, size_t g0,
                     size_t g1, float* y, size_t ldy, bool accumulate) {
  const size_t k2 = k_padded(k), chunks = k2 / 32;
  alignas(64) float stage[16 * 64];
  size_t configured = 0;
  // Whole 16-row chunks of x first, then the last partial one (one tile configuration each); for
  // each block of 4 column groups every chunk of x runs while the block's B tiles stay in L2.
  const size_t full = m / 16 * 16;
  for (int part = 0; part < 2; ++part) {
    const size_t r0 = part == 0 ? 0 : full, r1 = part == 0 ? full : m;
    if (r0 == r1) continue;
    const size_t rows = part == 0 ? 16 : m - full;
    if (rows != configured) {
      tiles_configure_rows(rows);
      configured = rows;
    }
    for (size_t g = g0; g < g1; g += 4) {
      const size_t gq = min_sz(4, g1 - g);
      const std::uint16_t* b = wp + g * chunks * 512;
      const size_t j0 = g * 16, cols = min_sz(gq * 16, n - j0);
      for (size_t i0 = r0; i0 < r1; i0 += 16) {
        const std::uint16_t* a = xb + i0 * k2;
        switch (gq) {
          case 4: packed_block<4>(a, k2, b, chunks, stage); break;
          case 3: packed_block<3>(a, k2, b, chunks, stage); break;
          case 2: packed_block<2>(a, k2, b, chunks, stage); break;
          default: packed_block<1>(a, k2, b, chunks, stage); break;
        }
        for (size_t i = 0; i < rows; ++i) {
          float* yi = y + (i0 + i) * ldy + j0;
          for (size_t q = 0; q * 16 < cols; ++q) {
            const __mmask16 mk = tail_mask(cols - q * 16);
            __m512 v = _mm512_load_ps(stage + i * 64 + q * 16);
            if (accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mk, yi + q * 16));
            _mm512_mask_storeu_ps(yi + q * 16, mk, v);
          }
        }
      }
    }
  }
  if (configured) tiles_release();
  // GCC emits no VZEROUPPER on the way out of these functions; without it every SSE instruction of
  // baseline code that runs next (libm's expf, the element-wise ops) pays for the dirty upper
  // register state: measured 50x slower there on Sapphire Rapids.
  _mm256_zeroupper();
}

namespace {

// Scratch: 32 x 32 staging floats, then kNC x k_padded(k) bf16 = kNC / 2 floats per k, plus the
// padding of k (up to 31 values per column) and 64 bytes of alignment slack.
constexpr size_t kScratchFloats = 32 * 32 + kNC / 2 * 32 + 16;

}  // namespace

const GemmKernels& kernels_amx() {
  static const GemmKernels kKernels{"amx", kSmallM, kMR, 32, kScratchFloats, kNC / 2, 32,
                                     kernels_avx512().gemv,
                                        pack_x, gemm_block};
  return kKernels;
}

const GemmKernels& kernels_bf16() {
  static const GemmKernels kKernels{"bf16", 0, kMR, 32, kScratchFloats, kNC / 2, 32,
                                     kernels_avx512().gemv,
                                     pack_x, gemm_block};
  return kKernels;
}

}  // namespace quarry::engine::cpu::detail
