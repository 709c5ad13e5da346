// Helpers shared by the CUDA backend's kernels (internal).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

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

/// The two 16-bit floats (bf16 or f16) of a 32-bit word as f32, the low half first: exact.
template <int TYPE>
__device__ __forceinline__ void widen_pair(std::uint32_t word, float& lo, float& hi) {
  if constexpr (TYPE == kBF16) {
    lo = __uint_as_float(word << 16);
    hi = __uint_as_float(word & 0xffff0000u);
  } else {
    const float2 v = __half22float2(*reinterpret_cast<const __half2*>(&word));
    lo = v.x;
    hi = v.y;
  }
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
    for (int i = 0; i < 4; ++i) widen_pair<TYPE>(words[i], f[2 * i], f[2 * i + 1]);
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

inline unsigned ceil_div(std::size_t a, std::size_t b) { return static_cast<unsigned>((a + b - 1) / b); }

/// An attribute of the current device, or `fallback` where it cannot be read.
inline int device_attribute(cudaDeviceAttr attr, int fallback) {
  int dev = 0, v = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&v, attr, dev) != cudaSuccess) return fallback;
  return v;
}

/// Streaming multiprocessors of the current device (read once).
inline int sm_count() {
  static const int n = device_attribute(cudaDevAttrMultiProcessorCount, 132);
  return n;
}

// ------------------------------------------------------------------ programmatic dependent launch (PDL)
//
// On compute capability 9.0 and later a kernel may be launched before the kernel ahead of it in the
// stream has finished (CUDA programming guide, "Programmatic Dependent Launch and Synchronization"): the
// next grid starts once every block of this one has called pdl_launch_dependents() (or exited), runs
// what does not depend on this one's results (its prologue: loading weights), and waits in pdl_wait()
// until this grid has completed and its writes are visible. Decode is a chain of ~220 short kernels, so
// this hides the launch latency and each kernel's ramp-up behind the kernel before it.
//
// The rule every kernel launched by launch_kernel() keeps: nothing it reads or writes that another
// kernel writes or reads is touched before pdl_wait() (weights and other read-only tables may be).
// Kernels launched with <<<>>> take no part and wait for the kernel before them as usual.

/// Waits until the grid this one depends on has completed and flushed its memory (a no-op when the
/// kernel was not launched programmatically, and before sm_90).
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
/// Lets the next kernel in the stream start launching (its blocks run their prologue, then wait).
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}
/// The start of a kernel after its prologue: waits for the kernel ahead, then lets the next one launch (so
/// that at most two kernels overlap; letting it launch before the wait measured 1% slower on decode).
__device__ __forceinline__ void pdl_enter() {
  pdl_wait();
  pdl_launch_dependents();
}

/// Whether launch_kernel() launches programmatically: set once per process by the backend (on for devices
/// of compute capability 9.0 and later unless QUARRY_CUDA_PDL=0).
bool programmatic_launch();
void set_programmatic_launch(bool on);

/// kernel<<<grid, block, smem, s>>>(args...), with the programmatic-stream-serialization attribute when
/// programmatic_launch(); the kernel must keep the rule above. Throws std::runtime_error naming `what`
/// on a launch error.
template <class... Params, class... Args>
void launch_kernel(const char* what, void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t smem,
                   cudaStream_t s, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  if (programmatic_launch()) {
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  check(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...), what);
}

}  // namespace quarry::engine::cuda
