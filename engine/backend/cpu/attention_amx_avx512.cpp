// Paged attention on the AMX tiles, for a bf16 KV cache (the bf16 kernel set; see ops.hpp KvLayerView).
//
// Work item = (run of tokens of one sequence, kv head), as in attention_range.inc: the nq <= 16 query
// vectors that read the kv head are the rows of the A tiles. Per item:
//  1. S = Q K^T: Q rounded to bf16 once; for each block of 16 positions one C tile (nq x 16 scores)
//     from head_dim / 32 TDPBF16PS with K in the block's VNNI layout [head_dim / 2, 16, 2] (a B tile is
//     16 pairs of head dims by 16 positions; Intel SDM vol. 1 ch. 3 "Intel AMX", TDPBF16PS).
//  2. softmax in f32 per query over its own positions 0..p (scaled, max-subtracted, e^x by a degree-6
//     polynomial after Cody-Waite range reduction), rounded to bf16 into P, zero past p.
//  3. O = P V: P [nq, 16] per block against V in the VNNI layout [8, head_dim, 2] (pairs of positions),
//     4 C tiles of 16 head dims accumulated over all blocks.
// A query's arithmetic depends only on its own row (positions past its own are multiplied by zero),
// so a token's output is the same alone or among draft rows (lossless speculative decoding).
// Only this file's own code runs here (no C++ standard library templates: see gemm_kernels.hpp).
#include "engine/backend/cpu/intrinsics.hpp"

#include <cstdint>

#include "engine/backend/cpu/attention_kernels.hpp"

namespace quarry::engine::cpu::detail {
namespace {

using std::size_t;

#include "engine/backend/cpu/amx_tiles.inc"

inline __mmask16 mask16(size_t count) {
  return count >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << count) - 1u);
}

inline __m512 exp16(__m512 x) {  // x <= 0
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.f / 720.f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 120.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 24.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 6.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
  return _mm512_scalef_ps(p, n);
}

// s[0..n) * scale -> softmax, rounded to bf16 into p[0..padded) (zero past n).
void softmax_to_bf16(float* s, size_t n, size_t padded, float scale, std::uint16_t* p) {
  const __m512 sc = _mm512_set1_ps(scale);
  __m512 mv = _mm512_set1_ps(-3.0e38f);
  for (size_t j = 0; j < n; j += 16) {
    const __mmask16 m = mask16(n - j);
    const __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, s + j), sc);
    _mm512_mask_storeu_ps(s + j, m, x);
    mv = _mm512_mask_max_ps(mv, m, mv, x);
  }
  const __m512 mx = _mm512_set1_ps(_mm512_reduce_max_ps(mv));
  __m512 sv = _mm512_setzero_ps();
  for (size_t j = 0; j < n; j += 16) {
    const __mmask16 m = mask16(n - j);
    const __m512 e = _mm512_maskz_mov_ps(m, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + j), mx)));
    _mm512_mask_storeu_ps(s + j, m, e);
    sv = _mm512_add_ps(sv, e);
  }
  const __m512 inv = _mm512_set1_ps(1.f / _mm512_reduce_add_ps(sv));
  for (size_t j = 0; j < padded; j += 32) {
    const __m512 lo = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask16(j < n ? n - j : 0), s + j), inv);
    const __m512 hi = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask16(j + 16 < n ? n - j - 16 : 0), s + j + 16), inv);
    const __m512i v = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
    if (j + 32 <= padded) _mm512_storeu_si512(p + j, v);
    else _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + j), _mm512_castsi512_si256(v));
  }
}

inline void round_row(const float* x, size_t n, std::uint16_t* out) {  // n multiple of 32
  for (size_t i = 0; i < n; i += 32)
    _mm512_storeu_si512(out + i, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16),
                                                                              _mm512_loadu_ps(x + i))));
}

inline void prefetch(const void* p, size_t bytes) {
  for (size_t o = 0; o < bytes; o += 64) _mm_prefetch(static_cast<const char*>(p) + o, _MM_HINT_T1);
}
constexpr size_t kAhead = 4;  // blocks

// Scores of the run against blocks [0, nb): S rows at stride `padded` floats. CH = head_dim / 32.
template <int CH>
__attribute__((target("amx-tile,amx-bf16"))) void scores(const std::uint16_t* qb, size_t hd, const std::uint16_t* const* kblk,
                                                          size_t nb, float* S, size_t padded) {
  const long qs = static_cast<long>(hd * 2);
  _tile_loadd(2, qb, qs);
  if constexpr (CH > 1) _tile_loadd(3, qb + 32, qs);
  if constexpr (CH > 2) _tile_loadd(4, qb + 64, qs);
  if constexpr (CH > 3) _tile_loadd(5, qb + 96, qs);
  for (size_t b = 0; b < nb; ++b) {
    if (b + kAhead < nb) prefetch(kblk[b + kAhead], hd * 16 * 2);
    const std::uint16_t* k = kblk[b];
    _tile_zero(0);
    _tile_loadd(6, k, 64);
    _tile_dpbf16ps(0, 2, 6);
    if constexpr (CH > 1) {
      _tile_loadd(7, k + 512, 64);
      _tile_dpbf16ps(0, 3, 7);
    }
    if constexpr (CH > 2) {
      _tile_loadd(6, k + 1024, 64);
      _tile_dpbf16ps(0, 4, 6);
    }
    if constexpr (CH > 3) {
      _tile_loadd(7, k + 1536, 64);
      _tile_dpbf16ps(0, 5, 7);
    }
    _tile_stored(0, S + b * 16, static_cast<long>(padded * 4));
  }
}

// O[:, d0 .. d0 + 64) = P V over blocks [0, nb), into ob rows at stride hd floats.
__attribute__((target("amx-tile,amx-bf16"))) void pv(const std::uint16_t* pb, size_t padded,
                                                      const std::uint16_t* const* vblk, size_t nb, size_t hd, size_t d0,
                                                      float* ob) {
  const long vs = static_cast<long>(hd * 4), ps = static_cast<long>(padded * 2);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (size_t b = 0; b < nb; ++b) {
    if (b + kAhead < nb) prefetch(vblk[b + kAhead], hd * 16 * 2);
    const std::uint16_t* v = vblk[b] + d0 * 2;
    _tile_loadd(4, pb + b * 16, ps);
    _tile_loadd(5, v, vs);
    _tile_dpbf16ps(0, 4, 5);
    _tile_loadd(6, v + 32, vs);
    _tile_dpbf16ps(1, 4, 6);
    _tile_loadd(7, v + 64, vs);
    _tile_dpbf16ps(2, 4, 7);
    _tile_loadd(5, v + 96, vs);
    _tile_dpbf16ps(3, 4, 5);
  }
  const long os = static_cast<long>(hd * 4);
  _tile_stored(0, ob + d0, os);
  _tile_stored(1, ob + d0 + 16, os);
  _tile_stored(2, ob + d0 + 32, os);
  _tile_stored(3, ob + d0 + 48, os);
}

void item(const AttentionArgs& a, size_t t0, size_t t1, size_t kvh) {
  const KvLayerView& kv = *a.kv;
  const size_t hd = kv.head_dim, group = a.n_heads / kv.n_kv_heads, nq = (t1 - t0) * group;
  const std::int32_t* table = a.block_tables[t0];
  size_t n_max = 0;
  for (size_t t = t0; t < t1; ++t) {
    const size_t n = static_cast<size_t>(a.positions[t]) + 1;
    n_max = n > n_max ? n : n_max;
  }
  const size_t nb = (n_max + 15) / 16, padded = nb * 16;
  // Scratch: scores f32 [nq, padded], P bf16 [nq, padded + 32], Q bf16 [nq, hd], O f32 [nq, hd],
  // block pointers [2, nb].
  const size_t s_floats = nq * padded, p_u16 = nq * (padded + 32);
  float* S = new float[s_floats + p_u16 / 2 + nq * hd / 2 + nq * hd + 16];
  auto* pb = reinterpret_cast<std::uint16_t*>(S + s_floats);
  auto* qb = pb + p_u16;
  float* ob = S + s_floats + p_u16 / 2 + nq * hd / 2;
  const std::uint16_t** blk = new const std::uint16_t*[2 * nb];
  const size_t per = 16 * hd;  // elements of one kv head in one block
  for (size_t b = 0; b < nb; ++b) {
    const float* base = kv.blocks[table[b]];
    blk[b] = reinterpret_cast<const std::uint16_t*>(base + kv.k_offset) + kvh * per;
    blk[nb + b] = reinterpret_cast<const std::uint16_t*>(base + kv.v_offset) + kvh * per;
  }
  for (size_t i = 0; i < nq; ++i) {
    const size_t t = t0 + i / group, h = kvh * group + i % group;
    round_row(a.q + t * a.ldq + h * hd, hd, qb + i * hd);
  }
  const std::uint8_t r = static_cast<std::uint8_t>(nq);
  {
    const std::uint8_t rows[8] = {r, r, r, r, r, r, 16, 16};
    const std::uint16_t colsb[8] = {64, 64, 64, 64, 64, 64, 64, 64};
    tiles_configure(rows, colsb);
  }
  switch (hd / 32) {
    case 1: scores<1>(qb, hd, blk, nb, S, padded); break;
    case 2: scores<2>(qb, hd, blk, nb, S, padded); break;
    case 3: scores<3>(qb, hd, blk, nb, S, padded); break;
    default: scores<4>(qb, hd, blk, nb, S, padded); break;
  }
  for (size_t i = 0; i < nq; ++i) {
    const size_t n = static_cast<size_t>(a.positions[t0 + i / group]) + 1;
    softmax_to_bf16(S + i * padded, n, padded, a.scale, pb + i * padded);
  }
  {
    const std::uint8_t rows[8] = {r, r, r, r, r, 8, 8, 8};
    const std::uint16_t colsb[8] = {64, 64, 64, 64, 32, 64, 64, 64};
    tiles_configure(rows, colsb);
  }
  for (size_t d0 = 0; d0 < hd; d0 += 64) pv(pb, padded, blk + nb, nb, hd, d0, ob);
  tiles_release();
  for (size_t i = 0; i < nq; ++i) {
    const size_t t = t0 + i / group, h = kvh * group + i % group;
    float* o = a.out + t * a.ldo + h * hd;
    for (size_t d = 0; d < hd; d += 16) _mm512_storeu_ps(o + d, _mm512_loadu_ps(ob + i * hd + d));
  }
  delete[] blk;
  delete[] S;
  _mm256_zeroupper();  // see gemm_amx_avx512.cpp
}

}  // namespace

void attention_range_amx(const AttentionArgs& a, size_t w0, size_t w1) {
  const size_t n_kv = a.kv->n_kv_heads;
  for (size_t w = w0; w < w1; ++w) item(a, a.runs[w / n_kv], a.runs[w / n_kv + 1], w % n_kv);
}

}  // namespace quarry::engine::cpu::detail
