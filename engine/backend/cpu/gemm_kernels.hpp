// Internal interface between the gemm() dispatcher (gemm.cpp, compiled for the baseline ISA) and the
// kernel sets compiled for one instruction set each (gemm_scalar.cpp, gemm_avx2.cpp, gemm_avx512.cpp).
// Kernel files include only this header, <immintrin.h> and C headers: anything inline from the C++
// standard library instantiated there could be merged by the linker into baseline code and then run
// on a CPU without that instruction set.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/backend/cpu/gemm.hpp"

namespace quarry::engine::cpu::detail {

/// One kernel set. All pointers are non-null; the dispatcher has validated shapes and strides.
struct GemmKernels {
  const char* name;
  /// gemv() is used when m <= small_m_max (it streams W once per call, reusing each W row tile for
  /// all m rows of x from L1); otherwise x is packed and gemm_block() runs (null: never).
  std::size_t small_m_max;
  /// Micro-tile: mr rows of x (broadcast operand) by nr columns of y (vector operand).
  std::size_t mr, nr;
  /// Scratch floats gemm_block() needs per thread: scratch_floats + scratch_floats_per_k * k
  /// (the packed W block).
  std::size_t scratch_floats, scratch_floats_per_k;
  /// Column chunks handed to threads are multiples of this (a register block of W rows), except the last.
  std::size_t n_align;

  /// y[i, j] (=|+=) sum_p x[i, p] * W[j, p] for i < m, j in [j0, j1).
  void (*gemv)(const float* x, std::size_t m, std::size_t k, std::size_t ldx, const void* w, WeightType wt,
               std::size_t j0, std::size_t j1, float* y, std::size_t ldy, bool accumulate);

  /// Packs panels [q0, q1) of x as pack_x_panels() does, or in the set's own layout, within
  /// mr * (k + 32) floats per panel (null: pack_x_panels() is used).
  void (*pack_x)(const float* x, std::size_t m, std::size_t k, std::size_t ldx, std::size_t q0, std::size_t q1,
                 float* xp);

  /// Same result from x packed by pack_x_panels() (panels of mr rows, see there), for j in [j0, j1).
  /// scratch: scratch_floats floats, 64-byte aligned.
  void (*gemm_block)(const float* xp, std::size_t m, std::size_t k, const void* w, WeightType wt,
                     std::size_t j0, std::size_t j1, float* y, std::size_t ldy, bool accumulate,
                     float* scratch);
};

const GemmKernels& kernels_scalar();
#if defined(__x86_64__)
const GemmKernels& kernels_avx2();
const GemmKernels& kernels_avx512();
const GemmKernels& kernels_amx();
/// The bf16 set: the AMX tiles at every m (gemm.hpp).
const GemmKernels& kernels_bf16();

/// Kernels for weights packed once (gemm_packed; packing and AMX in gemm_amx_avx512.cpp, which needs
/// AVX512_BF16 for the packing and AMX for amx_packed_gemm). Layout of packed W
/// ([n, k] in its dtype, rounded to bf16): B tiles of 16 output columns by 32 k values, group g (columns
/// 16g..16g+15) and k chunk c at out + (g * chunks + c) * 512 bf16, chunks = ceil(k / 32); zero past n, k.
void amx_pack_b(const void* w, WeightType wt, std::size_t n, std::size_t k, std::size_t g0, std::size_t g1,
                std::uint16_t* out);
/// Rows of x rounded to bf16 (nearest even) at xb, row stride ceil(k / 32) * 32, zero past k.
void amx_round_x(const float* x, std::size_t m, std::size_t k, std::size_t ldx, std::uint16_t* xb);
/// The same product with VDPBF16PS (AVX512_BF16 without AMX; gemm_dpbf16_avx512.cpp): each row's sums
/// in a fixed order whatever m, so a row's result depends only on its own row of x.
void dpbf16_packed_gemm(const std::uint16_t* xb, std::size_t m, std::size_t k, const std::uint16_t* wp,
                        std::size_t n, std::size_t g0, std::size_t g1, float* y, std::size_t ldy, bool accumulate);
/// y[:, 16 g0 .. min(n, 16 g1)) (=|+=) xb . packed W^T, 16 rows of x per tile, 4 column groups at once.
void amx_packed_gemm(const std::uint16_t* xb, std::size_t m, std::size_t k, const std::uint16_t* wp, std::size_t n,
                     std::size_t g0, std::size_t g1, float* y, std::size_t ldy, bool accumulate);
#endif

/// Packed x layout: panel q (rows q*mr .. q*mr+mr-1) starts at xp + q*k*mr; inside it element (p, r)
/// is at p*mr + r, i.e. for each k index the mr row values are contiguous (rows past m are zero).
/// Packs panels [q0, q1).
void pack_x_panels(const float* x, std::size_t m, std::size_t k, std::size_t ldx, std::size_t mr,
                   std::size_t q0, std::size_t q1, float* xp);

}  // namespace quarry::engine::cpu::detail
