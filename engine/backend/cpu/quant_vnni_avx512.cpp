// GPTQ int4 products with int8 activations on AVX512-VNNI (VPDPBUSD), for the bf16 compute mode: the
// CPU's counterpart of the W4A8 decode kernels (llama.cpp's Q4 x Q8 dot products; exllama's layout
// walk). qweight is read row by row of its packed layout (8 input columns of every output row per
// int32 row), which streams it; 16 output rows per vector: the low nibbles of a word are the even
// columns of its 8 and the high nibbles the odd ones, each lane's 4 bytes against the same 4 activation
// bytes broadcast, int32 sums per group, then y += scale * x_scale * (sum - zero * sum(x_q)) in f32.
// Activations are quantized per row and per weight group by absmax / 127 (quant.cpp).
// GCC 12's unmasked AVX-512 intrinsics trip -Wmaybe-uninitialized (see quant_avx512.cpp).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "engine/backend/cpu/quant_kernels.hpp"

namespace quarry::engine::cpu::detail {

void gptq4_vnni_avx512(const QuantView& q, const std::int32_t* x4, const float* xs, const std::int32_t* xsum,
                       std::size_t j0, std::size_t j1, float* y, std::int32_t* acc) {
  const std::size_t K = q.k, N = q.n, gs = q.group_size, G = q.n_groups, rows = j1 - j0;
  const auto* w = static_cast<const std::uint32_t*>(q.data);
  const __m512i low = _mm512_set1_epi32(0x0f0f0f0f);
  const std::size_t R16 = rows / 16 * 16;
  for (std::size_t r = 0; r < rows; ++r) y[r] = 0.f;
  for (std::size_t g = 0; g < G; ++g) {
    for (std::size_t r = 0; r < rows; ++r) acc[r] = 0;
    const std::size_t p0 = g * gs / 8, p1 = ((g + 1) * gs < K ? (g + 1) * gs : K) / 8;
    for (std::size_t p = p0; p < p1; ++p) {
      const __m512i even = _mm512_set1_epi32(x4[2 * p]), odd = _mm512_set1_epi32(x4[2 * p + 1]);
      const std::uint32_t* line = w + p * N + j0;
      std::size_t r = 0;
      for (; r < R16; r += 16) {
        const __m512i v = _mm512_loadu_si512(line + r);
        __m512i a = _mm512_loadu_si512(acc + r);
        a = _mm512_dpbusd_epi32(a, _mm512_and_si512(v, low), even);
        a = _mm512_dpbusd_epi32(a, _mm512_and_si512(_mm512_srli_epi32(v, 4), low), odd);
        _mm512_storeu_si512(acc + r, a);
      }
      for (; r < rows; ++r) {
        const std::uint32_t v = line[r];
        const auto xe = static_cast<std::uint32_t>(x4[2 * p]), xo = static_cast<std::uint32_t>(x4[2 * p + 1]);
        std::int32_t s = 0;
        for (int b = 0; b < 4; ++b) {
          s += static_cast<std::int32_t>((v >> (8 * b)) & 15u) * static_cast<std::int8_t>((xe >> (8 * b)) & 0xffu);
          s += static_cast<std::int32_t>((v >> (8 * b + 4)) & 15u) * static_cast<std::int8_t>((xo >> (8 * b)) & 0xffu);
        }
        acc[r] += s;
      }
    }
    const float* sg = q.scales + g * N + j0;
    const std::int16_t* zg = q.zeros + g * N + j0;
    const __m512 vxs = _mm512_set1_ps(xs[g]);
    const __m512i vxsum = _mm512_set1_epi32(xsum[g]);
    std::size_t r = 0;
    for (; r < R16; r += 16) {
      const __m512i z = _mm512_cvtepi16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(zg + r)));
      const __m512i d = _mm512_sub_epi32(_mm512_loadu_si512(acc + r), _mm512_mullo_epi32(z, vxsum));
      const __m512 f = _mm512_mul_ps(_mm512_loadu_ps(sg + r), vxs);
      _mm512_storeu_ps(y + r, _mm512_fmadd_ps(f, _mm512_cvtepi32_ps(d), _mm512_loadu_ps(y + r)));
    }
    for (; r < rows; ++r) y[r] += sg[r] * xs[g] * static_cast<float>(acc[r] - zg[r] * xsum[g]);
  }
}

}  // namespace quarry::engine::cpu::detail
