// Tensor-parallel collectives on CUDA devices: NCCL, loaded at run time (dlopen) so that a build with
// CUDA runs where NCCL is absent (one GPU needs none), and for the short sums of decode steps a one-shot
// all-reduce of our own over peer memory. The NCCL entry points used are declared here with NCCL's
// stable C ABI (nccl.h: ncclComm_t an opaque pointer, ncclFloat32 = 7, ncclSum = 0, ncclSuccess = 0), so
// building needs no NCCL headers.
//
// The one-shot all-reduce (one_shot.cuh says how it works) runs the all-reduces of up to
// kLLMaxReduceFloats where every pair of devices has peer access: a kernel of its own here (all_reduce_sum
// / _add), or the end of the row-parallel GEMV that makes the partial sums (Backend::matmul_all_reduce_add,
// kernels.cu); the all-gathers of up to kLLMaxFloats a rank (the LM head's logits) go the same way.
// (An earlier one-shot kernel that read the peers' buffers after a flag barrier measured slower than
// NCCL: 171 against 177 tok/s at TP 2 on two H100s.)
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/cuda_backend.hpp"
#include "engine/backend/cuda/kernels.cuh"
#include "engine/backend/cuda/one_shot.cuh"

namespace quarry::engine::cuda {

namespace {

using NcclComm = void*;
using NcclResult = int;
constexpr int kNcclFloat32 = 7;
constexpr int kNcclSum = 0;

struct Nccl {
  void* lib = nullptr;
  std::string error;
  NcclResult (*comm_init_all)(NcclComm*, int, const int*) = nullptr;
  NcclResult (*comm_destroy)(NcclComm) = nullptr;
  NcclResult (*comm_abort)(NcclComm) = nullptr;
  NcclResult (*all_reduce)(const void*, void*, std::size_t, int, int, NcclComm, cudaStream_t) = nullptr;
  NcclResult (*all_gather)(const void*, void*, std::size_t, int, NcclComm, cudaStream_t) = nullptr;
  const char* (*error_string)(NcclResult) = nullptr;
  NcclResult (*get_version)(int*) = nullptr;

  static const Nccl& get() {
    static const Nccl api = [] {
      Nccl a;
      std::vector<std::string> names;
      if (const char* p = std::getenv("QUARRY_NCCL")) names.push_back(p);
      names.push_back("libnccl.so.2");
      names.push_back("libnccl.so");
      for (const auto& n : names) {
        a.lib = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (a.lib) break;
        a.error = dlerror();
      }
      if (!a.lib) return a;
      const auto sym = [&](auto& fn, const char* name) {
        fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(a.lib, name));
        if (!fn) a.error = std::string("no symbol ") + name;
      };
      sym(a.comm_init_all, "ncclCommInitAll");
      sym(a.comm_destroy, "ncclCommDestroy");
      sym(a.comm_abort, "ncclCommAbort");
      sym(a.all_reduce, "ncclAllReduce");
      sym(a.all_gather, "ncclAllGather");
      sym(a.error_string, "ncclGetErrorString");
      sym(a.get_version, "ncclGetVersion");
      if (!a.comm_init_all || !a.comm_destroy || !a.comm_abort || !a.all_reduce || !a.all_gather || !a.error_string || !a.get_version)
        a.lib = nullptr;
      return a;
    }();
    return api;
  }
};

void check_nccl(NcclResult r, const char* what) {
  if (r != 0)
    throw std::runtime_error(std::string("nccl: ") + what + ": " + Nccl::get().error_string(r) + " (" +
                             std::to_string(r) + ")");
}

// ------------------------------------------------------------------ one-shot all-reduce

/// Blocks and threads of the one-shot all-reduce kernel.
constexpr unsigned kLLBlocks = 16, kLLThreads = 128;

/// A one-shot call's epoch and this thread's pairs of values: first, first + stride, ... < pairs.
struct LLCall {
  std::uint32_t epoch;
  std::size_t pairs, first, stride;
};
__device__ __forceinline__ LLCall ll_begin(const LLTarget& t, std::size_t n) {
  return {ll_epoch(t), (n + 1) / 2, std::size_t(blockIdx.x) * blockDim.x + threadIdx.x,
          std::size_t(gridDim.x) * blockDim.x};
}
/// The sending half of a call: this rank's src[0, n) stored into every peer's receive buffer, two units
/// at a time (an odd n's last pair carries a unit nobody reads); also copied to `copy` where given.
__device__ __forceinline__ void ll_send(const LLTarget& t, const LLCall& c, const float* src, std::size_t n,
                                        float* copy) {
  for (std::size_t i = c.first; i < c.pairs; i += c.stride) {
    const float a = src[2 * i], b = 2 * i + 1 < n ? src[2 * i + 1] : 0.0f;
    for (unsigned q = 0; q < t.ranks; ++q)
      if (q != t.rank) ll_store2(ll_slot(t, q, t.rank, c.epoch) + 2 * i, a, b, c.epoch);
    if (copy) {
      copy[2 * i] = a;
      if (2 * i + 1 < n) copy[2 * i + 1] = b;
    }
  }
}

/// x[i] (+)= the sum over ranks q = 0..ranks-1 of rank q's y[i], i < n, in rank order; x may be y. Units
/// go two at a time (16-byte stores and loads).
__global__ void __launch_bounds__(kLLThreads)
    one_shot_all_reduce_kernel(float* x, const float* y, std::size_t n, int add, const LLTarget* target) {
  pdl_enter();
  const LLTarget& t = *target;
  const LLCall c = ll_begin(t, n);
  const std::uint32_t epoch = c.epoch;
  ll_send(t, c, y, n, nullptr);
  for (std::size_t i = c.first; i < c.pairs; i += c.stride) {
    float2 s = make_float2(0.0f, 0.0f);
    for (unsigned q = 0; q < t.ranks; ++q) {
      const float2 v = q == t.rank ? make_float2(y[2 * i], 2 * i + 1 < n ? y[2 * i + 1] : 0.0f)
                                   : ll_load2(ll_slot(t, t.rank, q, epoch) + 2 * i, epoch, t.abort_flag);
      s = q == 0 ? v : make_float2(s.x + v.x, s.y + v.y);
    }
    x[2 * i] = add ? x[2 * i] + s.x : s.x;
    if (2 * i + 1 < n) x[2 * i + 1] = add ? x[2 * i + 1] + s.y : s.y;
  }
  __syncthreads();  // every thread of the block is through
  if (threadIdx.x == 0) ll_finish(t, epoch, gridDim.x);
}

/// out[q * n + i] = rank q's x[i], i < n, for every rank q (x may be out + rank * n): each rank's values
/// stored into every peer's receive buffer, then the peers' read from its own.
__global__ void __launch_bounds__(kLLThreads)
    one_shot_all_gather_kernel(const float* x, std::size_t n, float* out, const LLTarget* target) {
  pdl_enter();
  const LLTarget& t = *target;
  const LLCall c = ll_begin(t, n);
  const std::uint32_t epoch = c.epoch;
  ll_send(t, c, x, n, out + t.rank * n);
  for (std::size_t i = c.first; i < c.pairs; i += c.stride)
    for (unsigned q = 0; q < t.ranks; ++q) {
      if (q == t.rank) continue;
      const float2 v = ll_load2(ll_slot(t, t.rank, q, epoch) + 2 * i, epoch, t.abort_flag);
      float* theirs = out + q * n;
      theirs[2 * i] = v.x;
      if (2 * i + 1 < n) theirs[2 * i + 1] = v.y;
    }
  __syncthreads();  // every thread of the block is through
  if (threadIdx.x == 0) ll_finish(t, epoch, gridDim.x);
}

/// The one-shot all-reduce's memory: on each rank's device its receive buffer, its LLState and its
/// LLTarget; one abort word in host memory mapped into every device.
struct OneShotBuffers {
  std::vector<int> devices;
  std::vector<void*> recv, state, target;
  int* abort_flag = nullptr;

  ~OneShotBuffers() {
    int prev = 0;
    cudaGetDevice(&prev);
    for (std::size_t r = 0; r < devices.size(); ++r) {
      cudaSetDevice(devices[r]);
      for (auto* v : {&recv, &state, &target})
        if (r < v->size() && (*v)[r]) cudaFree((*v)[r]);
    }
    if (abort_flag) cudaFreeHost(abort_flag);
    cudaSetDevice(prev);
  }
};

/// QUARRY_TP_ALLREDUCE: "nccl" sends every all-reduce through NCCL; "kernel" runs the one-shot all-reduce
/// in its own kernel only, never at the end of a GEMV (a diagnostic); anything else (unset): both.
const std::string& all_reduce_choice() {
  static const std::string choice = [] {
    const char* e = std::getenv("QUARRY_TP_ALLREDUCE");
    return std::string(e ? e : "");
  }();
  return choice;
}

/// The one-shot buffers of a group on `devices`, or null where it cannot run (a pair of devices without
/// peer access, more than kMaxLLRanks ranks) or is turned off (QUARRY_TP_ALLREDUCE=nccl).
std::unique_ptr<OneShotBuffers> make_one_shot_buffers(const std::vector<int>& devices) {
  if (all_reduce_choice() == "nccl") return nullptr;
  if (devices.size() < 2 || devices.size() > kMaxLLRanks) return nullptr;
  for (int a : devices)
    for (int b : devices) {
      int ok = 0;
      if (a != b && (cudaDeviceCanAccessPeer(&ok, a, b) != cudaSuccess || !ok)) return nullptr;
    }
  int prev = 0;
  check(cudaGetDevice(&prev), "cudaGetDevice");
  auto o = std::make_unique<OneShotBuffers>();
  o->devices = devices;
  void* h = nullptr;
  check(cudaHostAlloc(&h, sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable), "cudaHostAlloc");
  o->abort_flag = static_cast<int*>(h);
  *o->abort_flag = 0;
  const std::size_t bytes = 2 * devices.size() * kLLMaxFloats * sizeof(uint2);
  for (std::size_t r = 0; r < devices.size(); ++r) {
    check(cudaSetDevice(devices[r]), "cudaSetDevice");
    for (int b : devices) {
      if (b == devices[r]) continue;
      const cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled)
        cudaGetLastError();
      else
        check(e, "cudaDeviceEnablePeerAccess");
    }
    for (auto [v, size] : {std::pair{&o->recv, bytes}, {&o->state, sizeof(LLState)}, {&o->target, sizeof(LLTarget)}}) {
      void* p = nullptr;
      check(cudaMalloc(&p, size), "cudaMalloc (all-reduce buffers)");
      v->push_back(p);
      check(cudaMemset(p, 0, size), "cudaMemset");
    }
  }
  for (std::size_t r = 0; r < devices.size(); ++r) {
    LLTarget t{};
    for (std::size_t q = 0; q < devices.size(); ++q) t.recv[q] = static_cast<uint2*>(o->recv[q]);
    t.rank = static_cast<unsigned>(r);
    t.ranks = static_cast<unsigned>(devices.size());
    t.state = static_cast<LLState*>(o->state[r]);
    t.abort_flag = o->abort_flag;
    check(cudaSetDevice(devices[r]), "cudaSetDevice");
    check(cudaMemcpy(o->target[r], &t, sizeof t, cudaMemcpyHostToDevice), "cudaMemcpy");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  check(cudaSetDevice(prev), "cudaSetDevice");
  return o;
}

/// What the ranks share: the communicators (destroyed with the last rank), and a host barrier every
/// rank passes before it enqueues a collective. Without it a rank whose collective is already waiting
/// on its GPU for a peer can block the peer's host thread for good: a thread that waits for its device
/// inside a call that holds the driver's memory lock (cudaFree, a copy through pageable memory) keeps
/// the peer's cudaMalloc from returning, and so the peer from enqueueing its part (NCCL's "Using
/// multiple NCCL communicators concurrently"; the same hang XLA fixed with a barrier after
/// ncclCommInitRank). Once every rank has passed the barrier each enqueues at once, so the collective
/// completes whatever any thread does next. Spinning (about a microsecond): it runs twice per layer
/// in steps that are not replayed from a recording (a recording holds no host code).
struct NcclGroup {
  explicit NcclGroup(std::size_t n) : size(n) {}
  const std::size_t size;
  std::vector<NcclComm> comms;
  std::unique_ptr<OneShotBuffers> one_shot;  ///< null: every all-reduce goes through NCCL

  std::atomic<std::size_t> arrived{0}, generation{0};
  std::atomic<bool> stopped{false};
  void barrier() {
    const std::size_t gen = generation.load(std::memory_order_acquire);
    if (arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == size) {
      arrived.store(0, std::memory_order_relaxed);
      generation.fetch_add(1, std::memory_order_acq_rel);
      return;
    }
    for (std::size_t spins = 0; generation.load(std::memory_order_acquire) == gen; ++spins) {
      if (stopped.load(std::memory_order_relaxed)) throw std::runtime_error("tensor parallel: another rank failed");
      if (spins > 4096) std::this_thread::yield();
    }
  }
  std::once_flag aborted;
  bool was_aborted = false;
  /// Aborts every communicator (ncclCommAbort): collectives in flight end, so that the ranks' threads
  /// waiting on their streams return. The communicators are unusable afterwards.
  void abort() {
    stopped = true;
    std::call_once(aborted, [&] {
      was_aborted = true;
      if (one_shot) *static_cast<volatile int*>(one_shot->abort_flag) = 1;
      for (NcclComm c : comms)
        if (c) Nccl::get().comm_abort(c);
    });
  }
  ~NcclGroup() {
    if (was_aborted) return;
    for (NcclComm c : comms)
      if (c) Nccl::get().comm_destroy(c);
  }
};

class NcclCollective final : public Collective {
 public:
  NcclCollective(std::size_t rank, std::size_t size, std::shared_ptr<NcclGroup> group, cudaStream_t stream)
      : Collective(rank, size), group_(std::move(group)), stream_(stream) {}
  void all_reduce_sum(float* x, std::size_t n) override {
    if (one_shot(x, x, n, false)) return;
    group_->barrier();
    check_nccl(Nccl::get().all_reduce(x, x, n, kNcclFloat32, kNcclSum, group_->comms[rank()], stream_), "ncclAllReduce");
  }
  void all_gather(const float* x, std::size_t n, float* out) override {
    if (n == 0) return;
    if (const LLTarget* t = target(n, kLLMaxFloats)) {
      // A block a 512 values (4 pairs a thread), at least kLLBlocks, at most 128.
      const std::size_t blocks = std::min<std::size_t>(std::max<std::size_t>((n + 1023) / 1024, kLLBlocks), 128);
      launch_kernel("one_shot_all_gather", one_shot_all_gather_kernel, dim3(static_cast<unsigned>(blocks)),
                    dim3(kLLThreads), 0, stream_, x, n, out, t);
      return;
    }
    group_->barrier();
    check_nccl(Nccl::get().all_gather(x, out, n, kNcclFloat32, group_->comms[rank()], stream_), "ncclAllGather");
  }
  void all_reduce_add(float* x, float* y, std::size_t n) override {
    if (one_shot(x, y, n, true)) return;
    all_reduce_sum(y, n);
    launch_add(x, y, n, stream_);
  }
  void abort() override { group_->abort(); }
  std::string description() const override {
    int v = 0;
    Nccl::get().get_version(&v);
    std::string d = "NCCL " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
    if (group_->one_shot)
      d += "; one-shot over peer memory: all-reduces up to " + std::to_string(kLLMaxReduceFloats) +
           " floats, all-gathers up to " + std::to_string(kLLMaxFloats) + " a rank";
    return d;
  }
  /// one_shot_target for this rank, for a call of n <= limit floats.
  const LLTarget* target(std::size_t n, std::size_t limit = kLLMaxReduceFloats) {
    const OneShotBuffers* o = group_->one_shot.get();
    if (!o || n > limit) return nullptr;
    group_->barrier();
    return static_cast<const LLTarget*>(o->target[rank()]);
  }

 private:
  /// The one-shot all-reduce when the group has its buffers and n fits; false otherwise.
  bool one_shot(float* x, const float* y, std::size_t n, bool add) {
    if (n == 0) return group_->one_shot != nullptr;
    const LLTarget* t = target(n);
    if (!t) return false;
    launch_kernel("one_shot_all_reduce", one_shot_all_reduce_kernel, dim3(kLLBlocks), dim3(kLLThreads), 0, stream_, x,
                  y, n, add ? 1 : 0, t);
    return true;
  }

  std::shared_ptr<NcclGroup> group_;
  cudaStream_t stream_;
};

}  // namespace

const LLTarget* one_shot_target(Collective& tp, std::size_t n) {
  auto* c = dynamic_cast<NcclCollective*>(&tp);
  return c && all_reduce_choice() != "kernel" ? c->target(n) : nullptr;
}

std::vector<std::unique_ptr<Collective>> make_nccl_collectives(std::span<const std::shared_ptr<Backend>> backends) {
  const Nccl& api = Nccl::get();
  if (!api.lib)
    throw std::runtime_error("tensor parallel: NCCL could not be loaded (" + api.error +
                             "); install NCCL (libnccl2) or set QUARRY_NCCL to libnccl.so.2");
  std::vector<int> devices;
  for (const auto& b : backends) {
    for (int d : devices)
      if (d == b->device().index)
        throw std::runtime_error("tensor parallel: device cuda:" + std::to_string(d) + " given twice");
    devices.push_back(b->device().index);
  }
  auto group = std::make_shared<NcclGroup>(backends.size());
  group->comms.assign(devices.size(), nullptr);
  check_nccl(api.comm_init_all(group->comms.data(), static_cast<int>(devices.size()), devices.data()),
             "ncclCommInitAll");
  group->one_shot = make_one_shot_buffers(devices);
  std::vector<std::unique_ptr<Collective>> out;
  for (std::size_t r = 0; r < backends.size(); ++r)
    out.push_back(std::make_unique<NcclCollective>(r, backends.size(), group,
                                                   static_cast<cudaStream_t>(stream_of(*backends[r]))));
  return out;
}

}  // namespace quarry::engine::cuda
