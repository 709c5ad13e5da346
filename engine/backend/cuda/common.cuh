// Helpers shared by the CUDA backend's kernels (internal).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace quarry::engine::cuda {

/// Throws std::runtime_error naming `what` and the CUDA error unless `e` is cudaSuccess.
inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("cuda: ") + what + ": " + cudaGetErrorString(e));
}
/// The launch error of the last kernel, if any.
inline void check_launch(const char* what) { check(cudaGetLastError(), what); }

/// f(std::integral_constant<int, M>{}) for the activation-row count m of a GEMV launch (1 .. 8, a template
/// parameter of the kernels); std::invalid_argument naming `what` for any other.
template <class F>
void with_gemv_rows(std::size_t m, const char* what, F&& f) {
  switch (m) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 3: return f(std::integral_constant<int, 3>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 5: return f(std::integral_constant<int, 5>{});
    case 6: return f(std::integral_constant<int, 6>{});
    case 7: return f(std::integral_constant<int, 7>{});
    case 8: return f(std::integral_constant<int, 8>{});
    default: throw std::invalid_argument(std::string(what) + ": more than 8 rows");
  }
}

/// Element type codes of weights (the engine's DType order: f32, f16, bf16).
enum WType : int { kF32 = 0, kF16 = 1, kBF16 = 2 };

__device__ __forceinline__ float load_as_float(const void* p, std::size_t i, int type) {
  switch (type) {
    case kF32: return static_cast<const float*>(p)[i];
    case kF16: return __half2float(static_cast<const __half*>(p)[i]);
    default: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
  }
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// 8 consecutive weights of row `row` at column k0 as floats (one 16-byte load for bf16 / f16, two
/// for f32).
template <int TYPE>
__device__ __forceinline__ void load8(const void* w, std::size_t off, float (&f)[8]) {
  if constexpr (TYPE == kF32) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(static_cast<const float*>(w) + off));
    const float4 b = __ldg(reinterpret_cast<const float4*>(static_cast<const float*>(w) + off) + 1);
    f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w; f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
  } else {
    const uint4 u = __ldg(reinterpret_cast<const uint4*>(static_cast<const std::uint16_t*>(w) + off));
    const std::uint32_t words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if constexpr (TYPE == kBF16) {
        f[2 * i] = __uint_as_float(words[i] << 16);
        f[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
      } else {
        const __half2 h = *reinterpret_cast<const __half2*>(&words[i]);
        const float2 v = __half22float2(h);
        f[2 * i] = v.x;
        f[2 * i + 1] = v.y;
      }
    }
  }
}

/// OCP FP8 E4M3 (bias 7, no infinities, S.1111.111 NaN) to f32, exactly.
__device__ __forceinline__ float fp8_e4m3_to_float(std::uint32_t b) {
  const std::uint32_t s = (b & 0x80u) << 24, e = (b >> 3) & 15u, m = b & 7u;
  if (e == 15u && m == 7u) return __uint_as_float(0x7fc00000u);
  if (e == 0u) return __uint_as_float(s) + (s ? -1.f : 1.f) * static_cast<float>(m) * 0x1p-9f;
  return __uint_as_float(s | ((e + 120u) << 23) | (m << 20));
}

__device__ __forceinline__ float round_bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

/// Threads of a block that computes an RMSNorm (rms_norm_kernel, and the GEMVs that fold the norm in):
/// block_inv_rms's partial sums, so that every one of them sums in the same order.
constexpr int kNormThreads = 256;

/// This thread's part of the sum of squares of x[0 .. n) in double: the values threadIdx.x + j * blockDim.x
/// in order of j, loaded 8 at a time before they are summed (a loop that waits for each load in turn took
/// about 16 us for a row of 4,096 on an H100), so the order is that of the plain loop.
__device__ __forceinline__ double thread_sum_squares(const float* x, std::size_t n) {
  double ss = 0.0;
  const std::size_t step = blockDim.x;
  std::size_t i = threadIdx.x;
  for (; i + 7 * step < n; i += 8 * step) {
    float v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = x[i + j * step];
#pragma unroll
    for (int j = 0; j < 8; ++j) ss += static_cast<double>(v[j]) * v[j];
  }
  for (; i < n; i += step) ss += static_cast<double>(x[i]) * x[i];
  return ss;
}

/// The inverse RMS of `rows` rows of x (width k) into inv[] (shared), by a block of kNormThreads threads;
/// rms_norm_kernel and the GEMVs' folded norm both take it, so the normed values are the same bits.
/// Every thread of the block must call it.
__device__ inline void block_inv_rms(const float* x, std::size_t ldx, std::size_t k, int rows, float eps, float* inv) {
  __shared__ double part[kNormThreads / 32];
  for (int r = 0; r < rows; ++r) {
    double ss = thread_sum_squares(x + r * ldx, k);
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ss;
    __syncthreads();
    if (threadIdx.x == 0) {
      double total = 0.0;
      for (int i = 0; i < static_cast<int>(blockDim.x >> 5); ++i) total += part[i];
      inv[r] = 1.0f / sqrtf(static_cast<float>(total / static_cast<double>(k)) + eps);
    }
    __syncthreads();
  }
}

inline unsigned ceil_div(std::size_t a, std::size_t b) { return static_cast<unsigned>((a + b - 1) / b); }

}  // namespace quarry::engine::cuda
