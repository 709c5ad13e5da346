// Matrix multiplication of f32 activations by weights in their stored dtype, the hot op of the CPU
// backend (prefill is GEMM-bound, decode at small batch is bound by reading the weights once).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "engine/core/types.hpp"

namespace quarry::engine {
class ThreadPool;
}

namespace quarry::engine::cpu {

/// A weight's stored dtype (the engine's DType).
using WeightType = DType;

/// y[m, n] = x[m, k] · W[n, k]^T (+ y if accumulate), i.e. y = x W^T as torch.nn.Linear without bias.
///  x: f32, row-major [m, k], row stride ldx elements (ldx >= k)
///  w: `wtype`, row-major [n, k] exactly as stored in safetensors (Hugging Face Linear layout)
///  y: f32, row-major [m, n], row stride ldy elements (ldy >= n); must not overlap x or w
/// Work is split over `pool` (may be nullptr: runs on the calling thread): columns of y are handed
/// out in chunks (about 4 per thread, claimed dynamically), so each weight row is read by one thread
/// only and a descheduled thread delays only its current chunk.
/// Kernels: portable scalar, AVX2+FMA+F16C, AVX-512 (F/BW/VL/DQ), picked once at run time by cpuid.
/// The default kernels convert weights to f32 exactly and accumulate in f32 (x is never rounded to
/// bf16; only the opt-in amx set below rounds).
///  - m <= a small bound (16 for AVX-512, 12 for AVX2; where the sweep in bench/kernels crosses):
///    GEMV-style, each weight row streamed once (decode is bound by memory bandwidth), several
///    regions of the rows walked side by side with software prefetch to keep the memory bus busy.
///  - larger m (prefill): GotoBLAS/BLIS blocked GEMM (Goto & van de Geijn, ACM TOMS 2008; Van Zee &
///    van de Geijn, ACM TOMS 2015): W packed to f32 in L2-sized blocks, x packed into micro-panels,
///    register-blocked FMA micro-kernel (12x32 for AVX-512, 6x16 for AVX2).
/// The blocked path allocates its packing buffers per call (about m*k + 128K floats per thread).
/// No shared state: concurrent calls with different y (and pools) are safe.
/// k == 0 gives y = 0 (or leaves y unchanged when accumulating); m == 0 or n == 0 does nothing.
/// Throws std::invalid_argument when ldx < k, ldy < n, or a pointer is null while its size is not 0.
void gemm(const float* x, std::size_t m, std::size_t k, std::size_t ldx, const void* w, WeightType wtype,
          std::size_t n, float* y, std::size_t ldy, ThreadPool* pool, bool accumulate = false);

/// Name of the kernel set gemm() dispatches to ("avx512", "avx2", "scalar"; or "amx" when chosen by
/// QUARRY_CPU_KERNELS, see gemm_default_kernel()).
const char* gemm_kernel_name();

/// The kernel sets, for tests and benchmarks that compare them on one machine.
///  amx (opt-in, never the default): for m > 16 the product runs on Intel AMX tiles (TDPBF16PS)
///  with x and W rounded to bf16 (round to nearest even; exact for bf16 weights) and f32
///  accumulation, about 5x the f32 FMA rate on Sapphire Rapids (bench/kernels); for m <= 16 it is
///  the exact avx512 kernel.
///  Needs AVX-512, AVX512_BF16, AMX-BF16 and the Linux permission for tile data.
///  bf16 (opt-in, never the default): compute as a bf16 checkpoint runs in bf16 — x and W rounded to
///  bf16 (round to nearest even) at every m, products on the AMX tiles with f32 accumulation. With
///  weights packed once (pack_bf16 / gemm_packed below) a few rows of x cost about what one costs,
///  which is what speculative verification needs on a CPU where the exact f32 kernels are bound by
///  arithmetic, not by reading the weights. Each output row depends only on its own row of x.
///  Needs what amx needs.
enum class GemmKernel : std::uint8_t { scalar, avx2, avx512, amx, bf16 };

/// Name of a kernel set ("scalar", "avx2", "avx512", "amx", "bf16").
const char* gemm_kernel_name(GemmKernel kernel);

/// Whether this build has the kernel set and this CPU (and OS) can run it. scalar is always available.
bool gemm_kernel_available(GemmKernel kernel);

/// The kernel set gemm() uses: the widest available one, or the one named by the environment
/// variable QUARRY_CPU_KERNELS (scalar, avx2, avx512, amx, bf16) when this CPU can run it. Decided once.
GemmKernel gemm_default_kernel();

/// Weights packed once for the AMX tiles (bf16): W [n, k] rounded to bf16 (exact for bf16 weights) and
/// laid out as B tiles of 16 output columns by 32 k values (Intel SDM, TDPBF16PS: pairs of k per 32-bit
/// element), zero-padded to whole tiles: (n + 15) / 16 * ((k + 31) / 32) * 512 bf16.
struct PackedBf16 {
  std::vector<std::uint16_t> data;
  std::size_t n = 0, k = 0;
};

/// Whether pack_bf16 / gemm_packed can run here: on the AMX tiles (AMX-BF16), or with VDPBF16PS on CPUs
/// that have AVX512_BF16 but no AMX (AMD Zen 4 / 5). The two differ in the order of f32 additions only.
bool packed_bf16_available();
/// "amx", "avx512_bf16" or "none": what gemm_packed runs on here.
const char* packed_bf16_kernel_name();

/// Packs W ([n, k] row-major in `wtype`, as gemm() takes it), split over `pool`. Throws
/// std::invalid_argument when packed_bf16_available() is false or w is null with n * k > 0.
PackedBf16 pack_bf16(const void* w, WeightType wtype, std::size_t n, std::size_t k, ThreadPool* pool);

/// y[m, n] (=|+=) bf16(x[m, w.k]) . W[0:n, :]^T with W packed by pack_bf16 (the first n <= w.n of its
/// rows: a leading slice, e.g. a draft sub-vocabulary of an LM head). x: f32 [m, w.k] at stride ldx,
/// y: f32 at stride ldy. 16 rows of x per AMX tile (or VDPBF16PS, gemm_dpbf16_avx512.cpp); each output row
/// depends only on its row of x. Columns
/// are split over `pool` in groups of 64. Throws std::invalid_argument on n > w.n, ldx < w.k, ldy < n, null
/// pointers with m, n > 0, or when packed_bf16_available() is false.
void gemm_packed(const float* x, std::size_t m, std::size_t ldx, const PackedBf16& w, std::size_t n, float* y,
                 std::size_t ldy, ThreadPool* pool, bool accumulate = false);

/// Elements of x rounded for the packed kernels: m rows of (k + 31) / 32 * 32 (round_x_packed).
std::size_t packed_x_elements(std::size_t m, std::size_t k);
/// x [m, k] at stride ldx rounded to bf16 (nearest even) as gemm_packed rounds it, into xb
/// (packed_x_elements(m, k) elements; zero past k): for several gemm_packed_rounded calls over the same x
/// (blocks of a weight packed one at a time). Throws std::invalid_argument when packed_bf16_available()
/// is false.
void round_x_packed(const float* x, std::size_t m, std::size_t k, std::size_t ldx, std::uint16_t* xb);
/// gemm_packed from x already rounded by round_x_packed (for k = w.k): the same bits. Same errors as
/// gemm_packed (ldx aside).
void gemm_packed_rounded(const std::uint16_t* xb, std::size_t m, const PackedBf16& w, std::size_t n, float* y,
                         std::size_t ldy, ThreadPool* pool, bool accumulate = false);

/// gemm_packed for the columns of some groups of 16 only: y[m, 16 g .. 16 g + 15] for each g in `groups`
/// (strictly increasing, g < ceil(n / 16); the last group stops at n), the other columns of y untouched.
/// The values are bit-identical to gemm_packed's (the same tiles over the same k order, and each output
/// row depends only on its row of x): an LM head computed only where a grammar allows tokens. Same
/// errors as gemm_packed, and std::invalid_argument on a group out of range or out of order.
void gemm_packed_groups(const float* x, std::size_t m, std::size_t ldx, const PackedBf16& w, std::size_t n,
                        std::span<const std::uint32_t> groups, float* y, std::size_t ldy, ThreadPool* pool);

/// gemm() with an explicit kernel set. Throws std::invalid_argument if it is not available here.
void gemm(GemmKernel kernel, const float* x, std::size_t m, std::size_t k, std::size_t ldx, const void* w,
          WeightType wtype, std::size_t n, float* y, std::size_t ldy, ThreadPool* pool,
          bool accumulate = false);

}  // namespace quarry::engine::cpu
