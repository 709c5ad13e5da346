// Products with quantized weights read in their packed form (GPTQ / AutoRound int4 and int8,
// compressed-tensors int8 / int4, fine-grained and per-channel FP8): engine/backend/backend.hpp,
// QuantizedMatrix, says how each layout stores W.
//
// The product y = x W^T is computed by dequantizing a block of W's rows at a time into a per-thread f32
// buffer that stays in the L2 cache (never the whole matrix), then running the exact f32 kernels of
// gemm.hpp on that block: the GEMV kernel for decode-sized m, the blocked GEMM for prefill. Every
// dequantized value is the one-rounding f32 product float(q - z) * s (float(v) * s), the same in every
// instruction set, so a quantized model computes what the same model with its weights dequantized to f32
// computes (greedy tokens and logits alike; see tests/backend/test_quant_kernels.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/backend/backend.hpp"
#include "engine/backend/cpu/gemm.hpp"
#include "engine/backend/cpu/quant_kernels.hpp"

namespace quarry::engine {
class ThreadPool;
}

namespace quarry::engine::cpu {

/// A quantized matrix owned by the CPU backend: the packed values in place (the mmap'd checkpoint), the
/// small tables copied (zero points padded by one element for the gathers).
struct QuantWeight {
  detail::QuantView view;
  std::vector<float> scales;
  std::vector<std::int16_t> zeros;
  std::vector<std::int32_t> g_idx;
  std::size_t bytes = 0;  ///< QuantizedMatrix::bytes()
  /// Loaded under bf16 compute: decode products may use reduced-precision activations: int8 (absmax / 127
  /// per row and block) on AVX512-VNNI for GPTQ int4 and int8 rows (quant_vnni_avx512.cpp), bf16 on
  /// AVX512_BF16 for FP8 rows (quant_bf16_avx512.cpp). Exact compute never does.
  bool bf16_compute = false;
};

/// Whether quant_gemm(kernel, ...) of m rows by `w` runs on the bf16-activation FP8 kernel: w.bf16_compute,
/// m <= 4, the avx512 set (or a wider one) and AVX512_BF16 here, FP8 rows with k and the scale blocks in
/// multiples of 32 columns.
bool quant_uses_bf16(GemmKernel kernel, const QuantWeight& w, std::size_t m);
/// Whether quant_gemm(kernel, ...) of m rows by `w` runs on an int8-activation VNNI kernel: w allows it,
/// m <= 8, the avx512 set (or a wider one) and AVX512-VNNI here, and w is GPTQ int4 with contiguous groups
/// (a multiple of 8 columns; activations per weight group) or int8 rows with scale blocks of whole
/// multiples of 128 columns (activations per 128 columns).
bool quant_uses_vnni(GemmKernel kernel, const QuantWeight& w, std::size_t m);

/// Copies the tables of `q` (validated first: std::invalid_argument) and points at its packed values.
QuantWeight make_quant_weight(const QuantizedMatrix& q);

/// Per-thread dequantization buffers, grown on use and kept (owned by the backend: one caller at a time).
struct QuantScratch {
  std::vector<std::vector<float>> per_thread;
  std::vector<std::int32_t> x4, xsum;          ///< VNNI kernels: the quantized activations
  std::vector<std::int8_t> xq;
  std::vector<std::uint16_t> xb;               ///< FP8 kernel: the activations rounded to bf16
  std::vector<PackedBf16> packed;              ///< bf16 prefill: a block of rows packed, per thread
  std::vector<std::uint16_t> xpacked;          ///< bf16 prefill: the activations rounded once (round_x_packed)
  std::vector<float> xs;
};

/// The dequantization kernel set a GEMM kernel set implies: scalar -> scalar, avx2 -> avx2, avx512 / amx /
/// bf16 -> avx512; and the exact f32 GEMM set used on the dequantized blocks (amx and bf16 round x to
/// bf16, so they map to avx512).
GemmKernel quant_kernel_for(GemmKernel kernel);

/// out[(j - j0) * k + p] = W[j, p] (f32) for j in [j0, j1) with the dequantization set of `kernel`.
/// Throws std::invalid_argument when that set is not available here or the range is outside W.
void quant_dequant_rows(GemmKernel kernel, const QuantWeight& w, std::size_t j0, std::size_t j1, float* out);

/// y[m, 0:n] = x[m, w.k] . W[0:n, :]^T (n <= w.n: a leading slice of the rows), f32 accumulation, columns
/// split over `pool` in blocks of rows (16 rows for m <= 16, 128 otherwise). x at stride ldx, y at ldy.
/// Exact (the dequantized f32 product) unless w.bf16_compute: then quant_uses_vnni() / quant_uses_bf16()
/// decode products use reduced-precision activations, and products of m > 16 rows (prefill) run on
/// gemm_packed (x and the dequantized weights rounded to bf16) where packed_bf16_available().
/// Throws std::invalid_argument on n > w.n, ldx < k, ldy < n, or an unavailable kernel set.
void quant_gemm(GemmKernel kernel, const float* x, std::size_t m, std::size_t ldx, const QuantWeight& w, std::size_t n,
                float* y, std::size_t ldy, ThreadPool* pool, QuantScratch& scratch);
/// The same with the dequantization set gemm_default_kernel() implies (QUARRY_CPU_KERNELS forces it).
void quant_gemm(const float* x, std::size_t m, std::size_t ldx, const QuantWeight& w, std::size_t n, float* y,
                std::size_t ldy, ThreadPool* pool, QuantScratch& scratch);

}  // namespace quarry::engine::cpu
