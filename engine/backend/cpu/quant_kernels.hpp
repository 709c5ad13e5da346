// Internal interface between the quantized-weight dispatcher (quant.cpp, baseline ISA) and the
// dequantization kernels compiled for one instruction set each (quant_scalar.cpp, quant_avx2.cpp,
// quant_avx512.cpp). As with gemm_kernels.hpp, kernel files include only this header, <immintrin.h> and
// C headers, so that no inline function of the C++ library compiled for a wider set reaches baseline code.
#pragma once

#include <cstddef>
#include <cstdint>

namespace quarry::engine::cpu::detail {

/// A quantized matrix W [n, k] as the kernels read it (engine/backend/backend.hpp, QuantizedMatrix).
struct QuantView {
  enum Layout : int { gptq = 0, rows = 1 };
  enum Element : int { int4 = 0, int8 = 1, fp8_e4m3 = 2 };
  int layout = gptq;
  int element = int4;
  const void* data = nullptr;  ///< gptq: int32 [k * bits / 32, n]; rows: int8 / fp8 [n, k], int4: int32 [n, k / 8]
  std::size_t n = 0, k = 0;
  const float* scales = nullptr;         ///< gptq [n_groups, n]; rows [ceil(n / block_rows), scale_cols]
  const std::int16_t* zeros = nullptr;   ///< gptq [n_groups, n] plus one element of padding (gathers read 4 bytes)
  const std::int32_t* g_idx = nullptr;   ///< gptq [k] or null (group k / group_size)
  std::size_t group_size = 0, n_groups = 0;
  std::size_t block_rows = 1, block_cols = 0, scale_cols = 0;  ///< rows: scale blocks
};

/// out[(j - j0) * k + p] = W[j, p] as f32 for j in [j0, j1), p < k: float(q - z) * s (gptq) or
/// float(v) * s (rows), one rounding, identical in every set.
void dequant_rows_scalar(const QuantView& q, std::size_t j0, std::size_t j1, float* out);
#if defined(__x86_64__)
void dequant_rows_avx2(const QuantView& q, std::size_t j0, std::size_t j1, float* out);
void dequant_rows_avx512(const QuantView& q, std::size_t j0, std::size_t j1, float* out);
/// Rows [j0, j1) of W dequantized as dequant_rows_avx512 does, rounded to bf16 (nearest even) and written
/// as the packed bf16 GEMM's B tiles (gemm_kernels.hpp, amx_pack_b: 16-row group g, 32-column chunk c at
/// out + (g * k / 32 + c) * 512, the pairs of columns 2 r, 2 r + 1 of the chunk in tile row r), the bits
/// amx_pack_b gives the dequantized f32 rows, without the f32 rows. Applies to GPTQ int4 with contiguous
/// groups of multiples of 32 columns and to int8 / FP8 / int4 rows with scale blocks of multiples of 32 columns,
/// for k % 32 == 0 and whole groups of 16 rows; returns false, writing nothing, otherwise. Needs
/// AVX512_BF16.
bool dequant_pack_bf16_avx512(const QuantView& q, std::size_t j0, std::size_t j1, std::uint16_t* out);
/// Decode-sized products without the buffer: y[i, j] = x[i, :] . W[j, :] for i < m, j in [j0, j1), each
/// weight vector dequantized in registers and summed in the order of the avx512 GEMV kernel on the
/// dequantized f32 matrix (bit-identical results). Returns false, computing nothing, where it does not
/// apply (m > 4, desc_act groups, groups or scale blocks not multiples of 16).
bool gemv_avx512(const QuantView& q, const float* x, std::size_t m, std::size_t ldx, std::size_t j0, std::size_t j1,
                 float* y, std::size_t ldy);
/// The same on AVX2 (in the order of the avx2 GEMV kernel, gemm_avx2.cpp) for GPTQ int4 with contiguous
/// groups and row-quantized weights, groups and scale blocks of multiples of 8 columns; false for the rest
/// (GPTQ int8, desc_act) and for m > 4.
bool gemv_avx2(const QuantView& q, const float* x, std::size_t m, std::size_t ldx, std::size_t j0, std::size_t j1,
               float* y, std::size_t ldy);
/// GPTQ int4 (contiguous groups, group_size a multiple of 8) against one row of activations quantized per
/// group (quant.cpp, quantize_activations): y[j - j0] = sum over groups g of scales[g, j] * xs[g] *
/// (sum_k q[k, j] x_q[k] - zeros[g, j] * xsum[g]) for j in [j0, j1). x4: for every 8 input columns, the
/// int8 activations of the even columns as one int32 (bytes in order), then of the odd ones. acc: int32
/// scratch [j1 - j0] (unused by the current kernel, which keeps the sums in registers). Needs AVX512-VNNI
/// (quant_vnni_avx512.cpp).
/// Row-quantized int8 weights (scale blocks of whole multiples of 128 columns, k % 128 == 0) against m <= 8
/// rows of activations quantized per 128 columns: xq int8 [m, k], xs / xsum [m, k / 128] (scale, sum of
/// x_q). y[i, j] = sum over blocks b of scale(j, b) * xs[i, b] * sum_k w x_q, for j in [j0, j1); the
/// weights enter VPDPBUSD as unsigned bytes w + 128 and 128 * xsum is taken off. Needs AVX512-VNNI.
void rows8_vnni_avx512(const QuantView& q, const std::int8_t* xq, const float* xs, const std::int32_t* xsum,
                       std::size_t m, std::size_t j0, std::size_t j1, float* y, std::size_t ldy);
/// FP8 rows (k and the scale blocks multiples of 32 columns) against m <= 4 rows of activations rounded to
/// bf16 (xb [m, k], round to nearest even): the FP8 values widened to bf16 exactly (a 128-entry table,
/// VPERMT2W), VDPBF16PS per scale block, then y += block sum * scale. Needs AVX512_BF16.
void fp8_bf16_avx512(const QuantView& q, const std::uint16_t* xb, std::size_t m, std::size_t j0, std::size_t j1,
                     float* y, std::size_t ldy);
/// bf16 bits of the FP8 E4M3 magnitude i (0..127), the tables of both FP8 kernels: subnormals m * 2^-9,
/// normals 2^(e-7) * (1 + m/8), 127 NaN (OCP OFP8 rev. 1.0, table 1). Static: evaluated at compile time in
/// each kernel file, never one definition shared between instruction sets.
static constexpr std::uint16_t fp8_mag_bf16(unsigned i) {
  if (i == 127) return 0x7fc0;
  if ((i >> 3) == 0) {
    const unsigned m = i & 7;
    if (m == 0) return 0;
    const unsigned lg = m >= 4 ? 2 : m >= 2 ? 1 : 0;
    return static_cast<std::uint16_t>(((118 + lg) << 7) | ((m << (7 - lg)) & 0x7f));
  }
  return static_cast<std::uint16_t>((i << 4) + (120u << 7));
}
/// The same 64 FP8 values at a time on AVX512_BF16 + AVX512_VBMI (k and the scale blocks multiples of 64
/// columns; quant_fp8_vbmi_avx512.cpp), with the activations xb [m, k] in its interleaved order: within
/// each 64 columns c0 + r (r = 16 L + w, lane L < 4), column r sits at c0 + 8 L + w for w < 8 and at
/// c0 + 32 + 8 L + (w - 8) otherwise. Products and rounding as fp8_bf16_avx512, summed in another order.
void fp8_bf16_vbmi_avx512(const QuantView& q, const std::uint16_t* xb, std::size_t m, std::size_t j0, std::size_t j1,
                          float* y, std::size_t ldy);
/// GPTQ int4 (contiguous groups) by m <= 8 rows of int8 activations on AVX512-VNNI: y[i * ldy + (j - j0)]
/// for output rows j in [j0, j1). x4 [m, ld4]: each row's activations packed as quantize_activations packs
/// them; xs, xsum [m, n_groups]: their scales and sums per group. Each row's result has the bits it gets
/// alone (m = 1). Throws std::invalid_argument for m outside 1..8.
void gptq4_vnni_avx512(const QuantView& q, const std::int32_t* x4, std::size_t ld4, const float* xs,
                       const std::int32_t* xsum, std::size_t m, std::size_t j0, std::size_t j1, float* y,
                       std::size_t ldy);
#endif

}  // namespace quarry::engine::cpu::detail
