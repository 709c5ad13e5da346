// Matrix multiplication of f32 activations by weights in their stored dtype, the hot op of the CPU
// backend (prefill is GEMM-bound, decode at small batch is bound by reading the weights once).
#pragma once

#include <cstddef>
#include <cstdint>

namespace quarry::engine {
class ThreadPool;
}

namespace quarry::engine::cpu {

enum class WeightType : std::uint8_t { f32, f16, bf16 };

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
enum class GemmKernel : std::uint8_t { scalar, avx2, avx512, amx };

/// Name of a kernel set ("scalar", "avx2", "avx512", "amx").
const char* gemm_kernel_name(GemmKernel kernel);

/// Whether this build has the kernel set and this CPU (and OS) can run it. scalar is always available.
bool gemm_kernel_available(GemmKernel kernel);

/// The kernel set gemm() uses: the widest available one, or the one named by the environment
/// variable QUARRY_CPU_KERNELS (scalar, avx2, avx512, amx) when this CPU can run it. Decided once.
GemmKernel gemm_default_kernel();

/// gemm() with an explicit kernel set. Throws std::invalid_argument if it is not available here.
void gemm(GemmKernel kernel, const float* x, std::size_t m, std::size_t k, std::size_t ldx, const void* w,
          WeightType wtype, std::size_t n, float* y, std::size_t ldy, ThreadPool* pool,
          bool accumulate = false);

}  // namespace quarry::engine::cpu
