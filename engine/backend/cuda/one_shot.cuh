// The one-shot all-reduce of tensor parallelism over peer memory (internal to engine/backend/cuda):
// what collective.cu (the algorithm, its buffers, the kernel of a plain all-reduce) and kernels.cu (the
// GEMV that ends in one) share.
//
// After NCCL's low-latency protocol (NCCL's src/device/prims_ll.h): each rank stores its values straight
// into every peer's receive buffer over NVLink, each value with the call's epoch in one 8-byte unit
// {value, epoch}, so a reader that sees the epoch sees the value (an aligned 8-byte store is single-copy
// atomic) and no fence or separate ready flag is needed. Each rank then sums the ranks' values in rank
// order, so every rank gets the same bits. Receive buffers alternate by the epoch's parity: a rank is at
// most one call ahead of a peer that has not read all of a call (its next call needs the peer's values
// of the call between), so a store never overwrites a value still unread. The epoch is counted on the
// device (LLState), so a recorded step (CUDA graph) replays correctly.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace quarry::engine {
class Collective;
}

namespace quarry::engine::cuda {

constexpr unsigned kMaxLLRanks = 8;
/// The most floats a rank sends to each peer in one call: an all-gather of a rank's slice of the LM head's
/// logits (Qwen3.5's vocabulary of 248,320 at TP 2: 124,160); longer ones go through NCCL.
constexpr std::size_t kLLMaxFloats = 128 * 1024;
/// The most floats one all-reduce sums one-shot (8 rows of an 8,192-wide hidden state); longer sums
/// (prefill) go through NCCL's bandwidth-bound algorithms.
constexpr std::size_t kLLMaxReduceFloats = 64 * 1024;

/// A rank's call counter in its device memory: `epoch` the calls completed; `done` the participants
/// (blocks or warps) of the call in flight that have finished it.
struct LLState {
  std::uint32_t epoch;
  std::uint32_t done;
};

/// What a kernel needs to take part in a call, in the rank's device memory (one per rank).
struct LLTarget {
  /// Rank q's receive buffer: [2 parities][ranks senders][kLLMaxFloats] units {value bits, epoch}.
  uint2* recv[kMaxLLRanks];
  unsigned rank, ranks;
  LLState* state;
  /// Host memory mapped into the device: set when the group is aborted, ending every wait.
  const volatile int* abort_flag;
};

/// The device's LLTarget of `tp` when it is a group of CUDA devices with peer access that runs n-float
/// all-reduces one-shot (n <= kLLMaxReduceFloats, not turned off), after the group's host barrier (the caller
/// then enqueues its kernel at once; NcclCollective's comment says why); null, with nothing done,
/// otherwise. Every rank makes the same call with the same n.
const LLTarget* one_shot_target(Collective& tp, std::size_t n);

#ifdef __CUDACC__
/// This call's epoch (read after pdl_wait; the kernel of the call before has advanced it).
__device__ __forceinline__ std::uint32_t ll_epoch(const LLTarget& t) {
  return *reinterpret_cast<const volatile std::uint32_t*>(&t.state->epoch) + 1;
}
/// The units `from` sends to rank `to` in the call of `epoch`.
__device__ __forceinline__ uint2* ll_slot(const LLTarget& t, unsigned to, unsigned from, std::uint32_t epoch) {
  return t.recv[to] + ((epoch & 1u) * t.ranks + from) * kLLMaxFloats;
}
__device__ __forceinline__ void ll_store(uint2* p, float v, std::uint32_t epoch) {
  asm volatile("st.volatile.global.v2.u32 [%0], {%1, %2};" ::"l"(p), "r"(__float_as_uint(v)), "r"(epoch) : "memory");
}
/// Two units at once (p 16-byte aligned).
__device__ __forceinline__ void ll_store2(uint2* p, float a, float b, std::uint32_t epoch) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(__float_as_uint(a)), "r"(epoch),
               "r"(__float_as_uint(b)), "r"(epoch)
               : "memory");
}
/// Waits until the unit at p carries `epoch` and returns its value (garbage once the group is aborted).
__device__ __forceinline__ float ll_load(const uint2* p, std::uint32_t epoch, const volatile int* abort_flag) {
  std::uint32_t v, e;
  for (unsigned spins = 0;; ) {
    asm volatile("ld.volatile.global.v2.u32 {%0, %1}, [%2];" : "=r"(v), "=r"(e) : "l"(p) : "memory");
    if (e == epoch) break;
    if (++spins == 4096) {
      spins = 0;
      if (*abort_flag) break;
    }
  }
  return __uint_as_float(v);
}
/// Two units at once (p 16-byte aligned).
__device__ __forceinline__ float2 ll_load2(const uint2* p, std::uint32_t epoch, const volatile int* abort_flag) {
  std::uint32_t a, ea, b, eb;
  for (unsigned spins = 0;; ) {
    asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(a), "=r"(ea), "=r"(b), "=r"(eb) : "l"(p) : "memory");
    if (ea == epoch && eb == epoch) break;
    if (++spins == 4096) {
      spins = 0;
      if (*abort_flag) break;
    }
  }
  return make_float2(__uint_as_float(a), __uint_as_float(b));
}
/// One of `count` participants of the call is through; the last advances the epoch (the next call's
/// kernel reads it after this grid has completed).
__device__ __forceinline__ void ll_finish(const LLTarget& t, std::uint32_t epoch, unsigned count) {
  if (atomicAdd(&t.state->done, 1u) == count - 1) {
    t.state->done = 0;
    *reinterpret_cast<volatile std::uint32_t*>(&t.state->epoch) = epoch;
  }
}
#endif

}  // namespace quarry::engine::cuda
