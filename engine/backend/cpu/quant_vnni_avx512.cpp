// GPTQ int4 products with int8 activations on AVX512-VNNI (VPDPBUSD), for the bf16 compute mode: the
// CPU's counterpart of the W4A8 decode kernels (llama.cpp's Q4 x Q8 dot products). Vectorised over output
// rows, as GPTQ packs them: an int32 row of qweight holds 8 input columns of every output row, so 16
// output rows are one 64-byte vector; its low nibbles are the even columns of the 8 and the high nibbles
// the odd ones, each lane's 4 bytes against the same 4 activation bytes broadcast. Per group, 64 output
// rows (32 for 3 or 4 activation rows, 16 for 5 to 8) keep their int32 sums in registers, one set per row,
// while the group's packed rows are read side by side (sequential streams along the output rows, each read
// once for all the activation rows: a verify step of m rows reads the weights once), then
// y += scale * x_scale * (sum - zero * sum(x_q)) in f32. A group of 8 or more packed rows is read in two
// halves over the block (8 streams at a time; the first half's sums kept in memory), which the memory
// system follows better than 16.
// Activations are quantized per row and per weight group by absmax / 127 (quant.cpp).
// GCC 12's unmasked AVX-512 intrinsics trip -Wmaybe-uninitialized and -Wuninitialized (see quant_avx512.cpp).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <stdexcept>
#include <type_traits>
#include <vector>

#include "engine/backend/cpu/quant_kernels.hpp"

namespace quarry::engine::cpu::detail {

namespace {

/// Prefetch distance along a packed row, in int32 words (4 steps of 64 output rows). Near the end of a
/// block of rows a stream's prefetches go to the start of the stream that takes its place in the next
/// pass (the next half group's packed row): before, they fetched the next block's rows of the same packed
/// row, read only much later, and every pass began with its streams' first lines missing. On a 16-core
/// Xeon (4 layers of the Qwen3-8B shape) int4 decode went from 0.50-0.62 to 0.77-0.78 of the bytes ratio
/// on 16 threads and from 0.74-0.80 to 0.89-0.93 on 4; on a 2-core VM no change (bench/engine/README.md).
constexpr std::size_t kAhead = 256;

/// The 16 * V rows from r of group g (packed rows p0..p1) for M activation rows at once (each row's int32
/// sums in its own registers, so that a row's result is the bits it gets alone): the sums over the
/// group's packed rows (one stream per packed row, walking along the output rows; each packed row read
/// once for the M rows), then y_i += s * xs_i * (sum_i - z * xsum_i). PHASE 0: p0..p1 is the whole group;
/// 1: its first half, the int32 sums stored to part [M, ldp] at column r, whole vectors (y untouched);
/// 2: its second half, the sums starting from part's.
template <int V, int M, int PHASE = 0>
inline void group_rows(const std::uint32_t* w, std::size_t N, std::size_t j0, std::size_t rows, std::size_t r,
                       std::size_t p0, std::size_t p1, const std::int32_t* x4, std::size_t ld4, const float* sg,
                       const std::int16_t* zg, const float* xs, const std::int32_t* xsum, std::size_t G,
                       float* y, std::size_t ldy, __mmask16 tail = 0xffff, std::int32_t* part = nullptr,
                       std::size_t ldp = 0) {
  // Prefetches that would pass the block's last row go to the same stream of the next pass instead
  // (packed row p + (p1 - p0), from the block's first row): its start, not the next block's rows.
  const std::ptrdiff_t wrap = static_cast<std::ptrdiff_t>((p1 - p0) * N) - static_cast<std::ptrdiff_t>(rows);
  const __m512i low = _mm512_set1_epi32(0x0f0f0f0f);
  __m512i a[M][V];
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v)
      a[i][v] = PHASE == 2 ? _mm512_loadu_si512(part + i * ldp + r + 16 * v) : _mm512_setzero_si512();
  for (std::size_t p = p0; p < p1; ++p) {
    __m512i even[M], odd[M];
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) {
      even[i] = _mm512_set1_epi32(x4[i * ld4 + 2 * p]);
      odd[i] = _mm512_set1_epi32(x4[i * ld4 + 2 * p + 1]);
    }
    const std::uint32_t* line = w + p * N + j0 + r;
    // The pass's streams (one per packed row) step 64 V bytes at a time: fetch each a few steps ahead,
    // and near the block's last row the next pass's stream from its first row.
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) {
      const std::size_t ahead = r + kAhead + 16 * v;
      _mm_prefetch(reinterpret_cast<const char*>(line + kAhead + 16 * v + (ahead < rows ? 0 : wrap)), _MM_HINT_T0);
    }
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) {
      const __m512i q = _mm512_maskz_loadu_epi32(v + 1 == V ? tail : 0xffff, line + 16 * v);
      const __m512i qe = _mm512_and_si512(q, low), qo = _mm512_and_si512(_mm512_srli_epi32(q, 4), low);
#pragma GCC unroll 8
      for (int i = 0; i < M; ++i) {
        a[i][v] = _mm512_dpbusd_epi32(a[i][v], qe, even[i]);
        a[i][v] = _mm512_dpbusd_epi32(a[i][v], qo, odd[i]);
      }
    }
  }
  if constexpr (PHASE == 1) {  // the first half of the group's packed rows: its exact int32 sums kept
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i)
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) _mm512_storeu_si512(part + i * ldp + r + 16 * v, a[i][v]);
    return;
  }
#pragma GCC unroll 8
  for (int v = 0; v < V; ++v) {
    const __mmask16 k = v + 1 == V ? tail : 0xffff;
    const std::size_t o = r + 16 * static_cast<std::size_t>(v);
    const __m512i z = _mm512_cvtepi16_epi32(_mm256_maskz_loadu_epi16(k, zg + o));
    const __m512 s = _mm512_maskz_loadu_ps(k, sg + o);
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) {
      const __m512i d = _mm512_sub_epi32(a[i][v], _mm512_mullo_epi32(z, _mm512_set1_epi32(xsum[i * G])));
      const __m512 f = _mm512_mul_ps(s, _mm512_set1_ps(xs[i * G]));
      float* yi = y + i * ldy + o;
      _mm512_mask_storeu_ps(yi, k, _mm512_fmadd_ps(f, _mm512_cvtepi32_ps(d), _mm512_maskz_loadu_ps(k, yi)));
    }
  }
}

/// The rows [j0, j1) of M activation rows, group by group.
template <int M>
void gptq4_rows(const QuantView& q, const std::int32_t* x4, std::size_t ld4, const float* xs,
                const std::int32_t* xsum, std::size_t j0, std::size_t j1, float* y, std::size_t ldy) {
  const std::size_t K = q.k, N = q.n, gs = q.group_size, G = q.n_groups, rows = j1 - j0;
  const auto* w = static_cast<const std::uint32_t*>(q.data);
  const std::size_t R16 = rows / 16 * 16;
  constexpr int V = M <= 2 ? 4 : M <= 6 ? 2 : 1;  // 16 V output rows: M V accumulators, 2 M broadcasts, loads
  const std::size_t RV = rows / (16 * V) * (16 * V);
  for (int i = 0; i < M; ++i)
    for (std::size_t r = 0; r < rows; ++r) y[i * ldy + r] = 0.f;
  // The int32 sums of the first half of a group's packed rows, M rows of the block (reused per thread).
  thread_local std::vector<std::int32_t> part;
  const std::size_t ldp = (rows + 63) / 64 * 64;
  if (part.size() < M * ldp) part.resize(M * ldp);
  for (std::size_t g = 0; g < G; ++g) {
    const std::size_t p0 = g * gs / 8, p1 = ((g + 1) * gs < K ? (g + 1) * gs : K) / 8;
    const float* sg = q.scales + g * N + j0;
    const std::int16_t* zg = q.zeros + g * N + j0;
    // One pass over the block for packed rows a0..a1 in phase P (group_rows): 16 V rows at a time, then
    // 16, then the last rows masked.
    const auto pass = [&](auto phase, std::size_t a0, std::size_t a1) {
      constexpr int P = decltype(phase)::value;
      std::size_t r = 0;
      for (; r < RV; r += 16 * V)
        group_rows<V, M, P>(w, N, j0, rows, r, a0, a1, x4, ld4, sg, zg, xs + g, xsum + g, G, y, ldy, 0xffff,
                            part.data(), ldp);
      for (; r < R16; r += 16)
        group_rows<1, M, P>(w, N, j0, rows, r, a0, a1, x4, ld4, sg, zg, xs + g, xsum + g, G, y, ldy, 0xffff,
                            part.data(), ldp);
      if (r < rows)
        group_rows<1, M, P>(w, N, j0, rows, r, a0, a1, x4, ld4, sg, zg, xs + g, xsum + g, G, y, ldy,
                            static_cast<__mmask16>((1u << (rows - r)) - 1), part.data(), ldp);
    };
    if (p1 - p0 >= 8) {
      // Half the group's packed rows over the block, then the other half: 8 streams at a time, not 16
      // (int4 decode 54.8 -> 66.3 tok/s on a 2-core AVX-512 VM, bench/engine/README.md); the int32 sums are
      // exact, so the bits are those of one pass.
      const std::size_t ph = p0 + (p1 - p0) / 2;
      pass(std::integral_constant<int, 1>{}, p0, ph);
      pass(std::integral_constant<int, 2>{}, ph, p1);
    } else {
      pass(std::integral_constant<int, 0>{}, p0, p1);
    }
  }
}

}  // namespace

void gptq4_vnni_avx512(const QuantView& q, const std::int32_t* x4, std::size_t ld4, const float* xs,
                       const std::int32_t* xsum, std::size_t m, std::size_t j0, std::size_t j1, float* y,
                       std::size_t ldy) {
  switch (m) {
    case 1: return gptq4_rows<1>(q, x4, ld4, xs, xsum, j0, j1, y, ldy);
    case 2: return gptq4_rows<2>(q, x4, ld4, xs, xsum, j0, j1, y, ldy);
    case 3: return gptq4_rows<3>(q, x4, ld4, xs, xsum, j0, j1, y, ldy);
    case 4: return gptq4_rows<4>(q, x4, ld4, xs, xsum, j0, j1, y, ldy);
    case 5: return gptq4_rows<5>(q, x4, ld4, xs, xsum, j0, j1, y, ldy);
    case 6: return gptq4_rows<6>(q, x4, ld4, xs, xsum, j0, j1, y, ldy);
    case 7: return gptq4_rows<7>(q, x4, ld4, xs, xsum, j0, j1, y, ldy);
    case 8: return gptq4_rows<8>(q, x4, ld4, xs, xsum, j0, j1, y, ldy);
    default: throw std::invalid_argument("gptq4_vnni_avx512: 1 to 8 activation rows");
  }
}

void rows8_vnni_avx512(const QuantView& q, const std::int8_t* xq, const float* xs, const std::int32_t* xsum,
                       std::size_t m, std::size_t j0, std::size_t j1, float* y, std::size_t ldy) {
  const std::size_t K = q.k, B = K / 128, bc = q.block_cols;
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  for (std::size_t n = j0; n < j1; ++n) {
    const auto* w = static_cast<const std::int8_t*>(q.data) + n * K;
    const float* srow = q.scales + (n / q.block_rows) * q.scale_cols;
    __m512 acc[8];
    float corr[8];
    for (std::size_t i = 0; i < m; ++i) {
      acc[i] = _mm512_setzero_ps();
      corr[i] = 0.f;
    }
    for (std::size_t b = 0; b < B; ++b) {
      const std::size_t k0 = b * 128;
      _mm_prefetch(reinterpret_cast<const char*>(w + k0 + 512), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(w + k0 + 576), _MM_HINT_T0);
      // The weights as unsigned bytes (w + 128); the 128 * sum(x_q) this adds comes off below.
      const __m512i w0 = _mm512_xor_si512(_mm512_loadu_si512(w + k0), flip);
      const __m512i w1 = _mm512_xor_si512(_mm512_loadu_si512(w + k0 + 64), flip);
      const float ws = srow[k0 / bc];
      for (std::size_t i = 0; i < m; ++i) {
        const std::int8_t* xi = xq + i * K + k0;
        __m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w0, _mm512_loadu_si512(xi));
        d = _mm512_dpbusd_epi32(d, w1, _mm512_loadu_si512(xi + 64));
        const float f = ws * xs[i * B + b];
        acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_set1_ps(f), acc[i]);
        corr[i] += f * 128.f * static_cast<float>(xsum[i * B + b]);
      }
    }
    for (std::size_t i = 0; i < m; ++i) y[i * ldy + n] = _mm512_reduce_add_ps(acc[i]) - corr[i];
  }
}

}  // namespace quarry::engine::cpu::detail
