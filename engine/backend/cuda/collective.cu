// Tensor-parallel collectives on CUDA devices through NCCL, loaded at run time (dlopen) so that a build
// with CUDA runs where NCCL is absent (one GPU needs none). The entry points used are declared here with
// NCCL's stable C ABI (nccl.h: ncclComm_t an opaque pointer, ncclFloat32 = 7, ncclSum = 0, ncclSuccess =
// 0), so building needs no NCCL headers. (A one-shot all-reduce over peer memory fused with the residual
// add was measured slower than NCCL's on two NVLink-connected H100s, 171 against 177 tok/s at TP 2 on
// the Qwen3-8B shape, and was not kept.)
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
    group_->barrier();
    check_nccl(Nccl::get().all_reduce(x, x, n, kNcclFloat32, kNcclSum, group_->comms[rank()], stream_), "ncclAllReduce");
  }
  void all_gather(const float* x, std::size_t n, float* out) override {
    group_->barrier();
    check_nccl(Nccl::get().all_gather(x, out, n, kNcclFloat32, group_->comms[rank()], stream_), "ncclAllGather");
  }
  void all_reduce_add(float* x, float* y, std::size_t n) override {
    all_reduce_sum(y, n);
    launch_add(x, y, n, stream_);
  }
  void abort() override { group_->abort(); }

 private:
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
  std::vector<std::unique_ptr<Collective>> out;
  for (std::size_t r = 0; r < backends.size(); ++r)
    out.push_back(std::make_unique<NcclCollective>(r, backends.size(), group,
                                                   static_cast<cudaStream_t>(stream_of(*backends[r]))));
  return out;
}

}  // namespace quarry::engine::cuda
