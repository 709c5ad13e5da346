#include "engine/backend/collective.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>

#ifdef QUARRY_HAVE_CUDA
#include "engine/backend/cuda/cuda_backend.hpp"
#endif

namespace quarry::engine {

namespace {

/// What the ranks of an in-process group share: the buffers each rank posts and a reusable barrier.
struct HostGroup {
  explicit HostGroup(std::size_t n) : size(n), in(n), out(n) {}
  /// Waits until every rank has arrived (a generation counter makes it reusable); throws once aborted.
  void barrier() {
    std::unique_lock lock(mutex);
    if (aborted) throw std::runtime_error("tensor parallel: another rank failed");
    const std::size_t gen = generation;
    if (++arrived == size) {
      arrived = 0;
      ++generation;
      cv.notify_all();
      return;
    }
    cv.wait(lock, [&] { return generation != gen || aborted; });
    if (aborted) throw std::runtime_error("tensor parallel: another rank failed");
  }
  void abort() {
    std::lock_guard lock(mutex);
    aborted = true;
    cv.notify_all();
  }
  const std::size_t size;
  std::vector<const float*> in;
  std::vector<float*> out;
  std::mutex mutex;
  std::condition_variable cv;
  std::size_t arrived = 0, generation = 0;
  bool aborted = false;
};

/// Ranks in one process on host-memory backends. all_reduce_sum: each rank sums one slice of the
/// elements over the ranks in rank order and writes it into every rank's buffer, so every rank ends
/// with the same bits, whatever the number of threads.
class HostCollective final : public Collective {
 public:
  HostCollective(std::size_t rank, std::shared_ptr<HostGroup> group)
      : Collective(rank, group->size), group_(std::move(group)) {}

  void all_reduce_sum(float* x, std::size_t n) override {
    HostGroup& g = *group_;
    const std::size_t N = size(), r = rank();
    g.out[r] = x;
    g.barrier();  // every rank's x is final and posted
    const std::size_t i0 = n * r / N, i1 = n * (r + 1) / N;
    slice_.assign(i1 - i0, 0.0f);
    for (std::size_t q = 0; q < N; ++q)
      for (std::size_t i = i0; i < i1; ++i) slice_[i - i0] += g.out[q][i];
    g.barrier();  // every rank has read what it sums
    for (std::size_t q = 0; q < N; ++q) std::copy(slice_.begin(), slice_.end(), g.out[q] + i0);
    g.barrier();  // every slice is written everywhere
  }

  void all_reduce_add(float* x, float* y, std::size_t n) override {
    all_reduce_sum(y, n);
    for (std::size_t i = 0; i < n; ++i) x[i] += y[i];
  }

  void all_gather(const float* x, std::size_t n, float* out) override {
    HostGroup& g = *group_;
    const std::size_t N = size(), r = rank();
    g.out[r] = out;
    g.barrier();
    for (std::size_t q = 0; q < N; ++q) std::memcpy(g.out[q] + r * n, x, n * sizeof(float));
    g.barrier();
  }

  void abort() override { group_->abort(); }
  std::string description() const override { return "in-process (rank-order sums)"; }

 private:
  std::shared_ptr<HostGroup> group_;
  std::vector<float> slice_;
};

}  // namespace

std::vector<std::unique_ptr<Collective>> make_collectives(std::span<const std::shared_ptr<Backend>> backends) {
  if (backends.empty()) throw std::invalid_argument("make_collectives: no backends");
  const bool host = std::all_of(backends.begin(), backends.end(), [](const auto& b) { return b->host_memory(); });
  std::vector<std::unique_ptr<Collective>> out;
  if (host) {
    auto group = std::make_shared<HostGroup>(backends.size());
    for (std::size_t r = 0; r < backends.size(); ++r) out.push_back(std::make_unique<HostCollective>(r, group));
    return out;
  }
  const bool cuda = std::all_of(backends.begin(), backends.end(),
                                [](const auto& b) { return b->device().kind == DeviceSpec::Kind::cuda; });
  if (!cuda) throw std::runtime_error("tensor parallel: the ranks' devices must all be CPUs or all CUDA GPUs");
#ifdef QUARRY_HAVE_CUDA
  return cuda::make_nccl_collectives(backends);
#else
  throw std::runtime_error("tensor parallel: this build of quarry has no CUDA backend");
#endif
}

}  // namespace quarry::engine
