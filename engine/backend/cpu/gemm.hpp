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
///  y: f32, row-major [m, n], row stride ldy elements (ldy >= n)
/// Work is split over `pool` (may be nullptr: runs on the calling thread).
/// Kernels: portable scalar, AVX2+FMA+F16C, AVX-512 (+BF16 dot products where the CPU has them),
/// picked once at run time by cpuid.
void gemm(const float* x, std::size_t m, std::size_t k, std::size_t ldx, const void* w, WeightType wtype,
          std::size_t n, float* y, std::size_t ldy, ThreadPool* pool, bool accumulate = false);

/// Name of the kernel set gemm() dispatches to on this CPU ("avx512bf16", "avx512", "avx2", "scalar").
const char* gemm_kernel_name();

}  // namespace quarry::engine::cpu
