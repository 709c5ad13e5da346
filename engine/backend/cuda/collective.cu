// Tensor-parallel collectives on CUDA devices: NCCL, loaded at run time (dlopen) so that a build with
// CUDA runs where NCCL is absent (one GPU needs none; the entry points used are declared here with NCCL's
// stable C ABI: ncclComm_t an opaque pointer, ncclFloat32 = 7, ncclSum = 0, ncclSuccess = 0, so building
// needs no NCCL headers), and for the small all-reduces of decode steps a one-shot kernel over peer
// memory (the "one-shot" all-reduce of vLLM's custom all-reduce and TensorRT-LLM: each rank publishes
// its partial sums, flags every peer, waits for theirs and reads all of them over NVLink), fused with
// the residual add. It sums in rank order, so every rank gets the same bits.
#include <cuda_runtime.h>
#include <dlfcn.h>

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

namespace quarry::engine::cuda {

namespace {

constexpr int kMaxRanks = 8;
/// Floats of one rank's exchange buffer (each of two): up to 8 decode rows of a 8192-wide hidden state.
constexpr std::size_t kOneShotFloats = 8 * 8192;

/// Every rank's exchange buffers ([2][kOneShotFloats] f32) and flags ([2][kMaxRanks] u32), as device
/// pointers valid on every rank (peer access enabled).
struct PeerBuffers {
  float* data[kMaxRanks];
  unsigned* flags[kMaxRanks];
};

__device__ __forceinline__ void store_release(unsigned* p, unsigned v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

/// x[i] += sum over ranks q (in order) of y_q[i], i < n, on rank `rank`: one block. The call's epoch e
/// (a counter in this rank's memory, the same on every rank since each runs the same collectives)
/// picks buffer e & 1: a rank writes buffer p again two calls later, after every peer has signalled the
/// call between, so after it read this one.
__global__ void one_shot_all_reduce_add_kernel(float* __restrict__ x, const float* __restrict__ y, int n, int rank,
                                               int nranks, PeerBuffers peers, unsigned* epoch) {
  __shared__ unsigned e;
  if (threadIdx.x == 0) e = *epoch + 1;
  __syncthreads();
  const unsigned p = e & 1u;
  float* mine = peers.data[rank] + p * kOneShotFloats;
  for (int i = threadIdx.x; i < n; i += blockDim.x) mine[i] = y[i];
  __syncthreads();
  if (threadIdx.x < nranks) {
    store_release(peers.flags[threadIdx.x] + p * kMaxRanks + rank, e);  // "my part of call e is there"
    const unsigned* f = peers.flags[rank] + p * kMaxRanks + threadIdx.x;
    while (load_acquire(f) != e) {
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    float s = 0.0f;
    for (int q = 0; q < nranks; ++q) s += peers.data[q][p * kOneShotFloats + i];
    x[i] += s;
  }
  if (threadIdx.x == 0) *epoch = e;
}

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
  /// The one-shot kernel's memory on each rank (null when the devices cannot reach each other's memory).
  bool peer_ok = false;
  PeerBuffers peers{};
  std::vector<unsigned*> epochs;
  std::vector<int> devices;
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
      for (NcclComm c : comms)
        if (c) Nccl::get().comm_abort(c);
    });
  }
  ~NcclGroup() {
    for (std::size_t r = 0; r < epochs.size(); ++r) {
      cudaSetDevice(devices[r]);
      cudaFree(peers.data[r]);
      cudaFree(peers.flags[r]);
      cudaFree(epochs[r]);
    }
    if (was_aborted) return;
    for (NcclComm c : comms)
      if (c) Nccl::get().comm_destroy(c);
  }
};

class NcclCollective final : public Collective {
 public:
  NcclCollective(std::size_t rank, std::size_t size, std::shared_ptr<NcclGroup> group, cudaStream_t stream)
      : Collective(rank, size), group_(std::move(group)), stream_(stream) {
    const char* mode = std::getenv("QUARRY_TP_ALLREDUCE");  // "nccl": NCCL for every size (comparisons)
    one_shot_ = !(mode && std::string(mode) == "nccl");
  }
  void all_reduce_sum(float* x, std::size_t n) override {
    group_->barrier();
    check_nccl(Nccl::get().all_reduce(x, x, n, kNcclFloat32, kNcclSum, group_->comms[rank()], stream_), "ncclAllReduce");
  }
  void all_gather(const float* x, std::size_t n, float* out) override {
    group_->barrier();
    check_nccl(Nccl::get().all_gather(x, out, n, kNcclFloat32, group_->comms[rank()], stream_), "ncclAllGather");
  }
  void all_reduce_add(float* x, float* y, std::size_t n) override {
    if (group_->peer_ok && n <= kOneShotFloats && one_shot_) {
      group_->barrier();
      one_shot_all_reduce_add_kernel<<<1, 1024, 0, stream_>>>(x, y, static_cast<int>(n), static_cast<int>(rank()),
                                                              static_cast<int>(size()), group_->peers,
                                                              group_->epochs[rank()]);
      check_launch("one-shot all-reduce");
      return;
    }
    all_reduce_sum(y, n);
    launch_add(x, y, n, stream_);
  }
  void abort() override { group_->abort(); }

 private:
  std::shared_ptr<NcclGroup> group_;
  cudaStream_t stream_;
  bool one_shot_ = true;
};

/// Enables peer access between every pair of `devices` and allocates the one-shot kernel's buffers;
/// leaves group.peer_ok false (NCCL for everything) when some pair cannot reach each other.
void setup_peers(NcclGroup& g, const std::vector<int>& devices) {
  const int n = static_cast<int>(devices.size());
  if (n > kMaxRanks) return;
  for (int a : devices)
    for (int b : devices) {
      int ok = 0;
      if (a != b && (cudaDeviceCanAccessPeer(&ok, a, b) != cudaSuccess || !ok)) return;
    }
  for (int a : devices) {
    check(cudaSetDevice(a), "cudaSetDevice");
    for (int b : devices)
      if (a != b) {
        const cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
        if (e == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();
        else check(e, "cudaDeviceEnablePeerAccess");
      }
  }
  g.devices = devices;
  for (int r = 0; r < n; ++r) {
    check(cudaSetDevice(devices[r]), "cudaSetDevice");
    void* d = nullptr;
    void* f = nullptr;
    void* e = nullptr;
    check(cudaMalloc(&d, 2 * kOneShotFloats * sizeof(float)), "one-shot all-reduce buffers");
    check(cudaMalloc(&f, 2 * kMaxRanks * sizeof(unsigned)), "one-shot all-reduce flags");
    check(cudaMalloc(&e, sizeof(unsigned)), "one-shot all-reduce epoch");
    check(cudaMemset(f, 0, 2 * kMaxRanks * sizeof(unsigned)), "one-shot all-reduce flags");
    check(cudaMemset(e, 0, sizeof(unsigned)), "one-shot all-reduce epoch");
    g.peers.data[r] = static_cast<float*>(d);
    g.peers.flags[r] = static_cast<unsigned*>(f);
    g.epochs.push_back(static_cast<unsigned*>(e));
  }
  for (int r = 0; r < n; ++r) {
    check(cudaSetDevice(devices[r]), "cudaSetDevice");
    check(cudaDeviceSynchronize(), "one-shot all-reduce setup");
  }
  g.peer_ok = true;
}

}  // namespace

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
  setup_peers(*group, devices);
  std::vector<std::unique_ptr<Collective>> out;
  for (std::size_t r = 0; r < backends.size(); ++r)
    out.push_back(std::make_unique<NcclCollective>(r, backends.size(), group,
                                                   static_cast<cudaStream_t>(stream_of(*backends[r]))));
  return out;
}

}  // namespace quarry::engine::cuda
