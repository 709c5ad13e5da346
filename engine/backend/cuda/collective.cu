// Tensor-parallel collectives on CUDA devices: NCCL, loaded at run time (dlopen) so that a build with
// CUDA runs where NCCL is absent (one GPU needs none), and for the short sums of decode steps a one-shot
// all-reduce of our own over peer memory. The NCCL entry points used are declared here with NCCL's
// stable C ABI (nccl.h: ncclComm_t an opaque pointer, ncclFloat32 = 7, ncclSum = 0, ncclSuccess = 0), so
// building needs no NCCL headers.
//
// The one-shot all-reduce ("LL", after NCCL's low-latency protocol, NCCL's src/device/prims_ll.h): each
// rank stores its values straight into every peer's receive buffer over NVLink, each 8 bytes one float
// and a 32-bit flag (the call's epoch) written by one 16-byte store, so a reader that sees the flag sees
// the value (8-byte stores are single-copy atomic) and no fence or separate ready flag is needed. Each
// rank then sums the ranks' values in rank order (the same bits on every rank) and adds them to x in
// the same kernel. Receive buffers alternate by the epoch's parity: a rank can be at most one call ahead
// of a peer that has not finished reading (its next call needs the peer's values of the call between),
// so a store never overwrites a value still unread. Epochs are counted on the device (one counter per
// block), so a recorded step (CUDA graph) replays correctly. (An earlier one-shot kernel that read the
// peers' buffers after a flag barrier measured slower than NCCL: 171 against 177 tok/s at TP 2 on two
// H100s.)
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

// ------------------------------------------------------------------ one-shot LL all-reduce

constexpr unsigned kMaxLLRanks = 8;
/// Blocks and threads of every LL call: a fixed grid, since each block counts its own epochs.
constexpr unsigned kLLBlocks = 16, kLLThreads = 128;
/// The most floats one LL call sums (8 rows of an 8,192-wide hidden state); longer sums go through NCCL.
constexpr std::size_t kLLMaxFloats = 64 * 1024;
constexpr std::size_t kLLMaxPairs = kLLMaxFloats / 2;

/// Each rank's receive buffer: [2 parities][ranks senders][kLLMaxPairs] of {value, epoch, value, epoch}.
struct LLPeers {
  uint4* recv[kMaxLLRanks];
};

__device__ __forceinline__ void st_volatile_v4(uint4* p, uint4 v) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}
__device__ __forceinline__ uint4 ld_volatile_v4(const uint4* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}

/// x[i] (+)= sum over ranks q = 0..ranks-1 of rank q's y[i], i < n, summed in rank order; x may be y.
/// `abort_flag` (host memory mapped into the device) ends the waits once set, leaving x undefined.
__global__ void __launch_bounds__(kLLThreads)
    ll_all_reduce_kernel(float* x, const float* y, std::size_t n, int add, LLPeers peers, unsigned rank,
                         unsigned ranks, std::uint32_t* epochs, const volatile int* abort_flag) {
  pdl_enter();
  const std::uint32_t epoch = epochs[blockIdx.x] + 1;
  const std::size_t base = (epoch & 1u) * ranks;
  const std::size_t pairs = (n + 1) / 2, stride = std::size_t(gridDim.x) * blockDim.x;
  const std::size_t first = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (std::size_t i = first; i < pairs; i += stride) {
    const float a = y[2 * i], b = 2 * i + 1 < n ? y[2 * i + 1] : 0.0f;
    const uint4 v = make_uint4(__float_as_uint(a), epoch, __float_as_uint(b), epoch);
    for (unsigned q = 0; q < ranks; ++q)
      if (q != rank) st_volatile_v4(peers.recv[q] + (base + rank) * kLLMaxPairs + i, v);
  }
  bool stopped = false;
  for (std::size_t i = first; i < pairs; i += stride) {
    float s0 = 0.0f, s1 = 0.0f;
    for (unsigned q = 0; q < ranks; ++q) {
      float a, b;
      if (q == rank) {
        a = y[2 * i];
        b = 2 * i + 1 < n ? y[2 * i + 1] : 0.0f;
      } else {
        const uint4* p = peers.recv[rank] + (base + q) * kLLMaxPairs + i;
        uint4 v = ld_volatile_v4(p);
        for (unsigned spins = 0; (v.y != epoch || v.w != epoch) && !stopped; v = ld_volatile_v4(p))
          if (++spins == 4096) {
            spins = 0;
            stopped = *abort_flag != 0;
          }
        a = __uint_as_float(v.x);
        b = __uint_as_float(v.z);
      }
      s0 = q == 0 ? a : s0 + a;
      s1 = q == 0 ? b : s1 + b;
    }
    x[2 * i] = add ? x[2 * i] + s0 : s0;
    if (2 * i + 1 < n) x[2 * i + 1] = add ? x[2 * i + 1] + s1 : s1;
  }
  __syncthreads();  // every thread has read this block's epoch
  if (threadIdx.x == 0) epochs[blockIdx.x] = epoch;
}

/// The LL all-reduce's memory: each rank's receive buffer and epoch counters on its device, and one
/// abort word in host memory mapped into every device.
struct LLBuffers {
  std::vector<int> devices;
  LLPeers peers{};
  std::vector<std::uint32_t*> epochs;
  int* abort_flag = nullptr;

  ~LLBuffers() {
    int prev = 0;
    cudaGetDevice(&prev);
    for (std::size_t r = 0; r < devices.size(); ++r) {
      cudaSetDevice(devices[r]);
      if (peers.recv[r]) cudaFree(peers.recv[r]);
      if (r < epochs.size() && epochs[r]) cudaFree(epochs[r]);
    }
    if (abort_flag) cudaFreeHost(abort_flag);
    cudaSetDevice(prev);
  }
};

/// The LL buffers of a group on `devices`, or null where the one-shot all-reduce cannot run (a pair of
/// devices without peer access, more than kMaxLLRanks ranks) or is turned off (QUARRY_TP_ALLREDUCE=nccl).
std::unique_ptr<LLBuffers> make_ll_buffers(const std::vector<int>& devices) {
  if (const char* e = std::getenv("QUARRY_TP_ALLREDUCE"); e && std::string(e) == "nccl") return nullptr;
  if (devices.size() < 2 || devices.size() > kMaxLLRanks) return nullptr;
  for (int a : devices)
    for (int b : devices) {
      int ok = 0;
      if (a != b && (cudaDeviceCanAccessPeer(&ok, a, b) != cudaSuccess || !ok)) return nullptr;
    }
  int prev = 0;
  check(cudaGetDevice(&prev), "cudaGetDevice");
  auto ll = std::make_unique<LLBuffers>();
  ll->devices = devices;
  const std::size_t bytes = 2 * devices.size() * kLLMaxPairs * sizeof(uint4);
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
    void* p = nullptr;
    check(cudaMalloc(&p, bytes), "cudaMalloc (all-reduce buffers)");
    ll->peers.recv[r] = static_cast<uint4*>(p);
    check(cudaMemset(p, 0, bytes), "cudaMemset");
    check(cudaMalloc(&p, kLLBlocks * sizeof(std::uint32_t)), "cudaMalloc (all-reduce epochs)");
    ll->epochs.push_back(static_cast<std::uint32_t*>(p));
    check(cudaMemset(p, 0, kLLBlocks * sizeof(std::uint32_t)), "cudaMemset");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  void* h = nullptr;
  check(cudaHostAlloc(&h, sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable), "cudaHostAlloc");
  ll->abort_flag = static_cast<int*>(h);
  *ll->abort_flag = 0;
  check(cudaSetDevice(prev), "cudaSetDevice");
  return ll;
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
  std::unique_ptr<LLBuffers> ll;  ///< null: every all-reduce goes through NCCL

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
      if (ll) *static_cast<volatile int*>(ll->abort_flag) = 1;
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
    if (group_->ll) d += "; one-shot all-reduce over peer memory up to " + std::to_string(kLLMaxFloats) + " floats";
    return d;
  }

 private:
  /// The LL all-reduce when the group has its buffers and n fits; false otherwise.
  bool one_shot(float* x, const float* y, std::size_t n, bool add) {
    const LLBuffers* ll = group_->ll.get();
    if (!ll || n > kLLMaxFloats) return false;
    if (n == 0) return true;
    group_->barrier();
    launch_kernel("ll_all_reduce", ll_all_reduce_kernel, dim3(kLLBlocks), dim3(kLLThreads), 0, stream_, x, y, n,
                  add ? 1 : 0, ll->peers, static_cast<unsigned>(rank()), static_cast<unsigned>(size()),
                  ll->epochs[rank()], static_cast<const volatile int*>(ll->abort_flag));
    return true;
  }

  std::shared_ptr<NcclGroup> group_;
  cudaStream_t stream_;
};

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
  group->ll = make_ll_buffers(devices);
  std::vector<std::unique_ptr<Collective>> out;
  for (std::size_t r = 0; r < backends.size(); ++r)
    out.push_back(std::make_unique<NcclCollective>(r, backends.size(), group,
                                                   static_cast<cudaStream_t>(stream_of(*backends[r]))));
  return out;
}

}  // namespace quarry::engine::cuda
