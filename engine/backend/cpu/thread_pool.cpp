// Spin-then-block fork-join pool with index claiming (see thread_pool.hpp). Memory ordering: run()
// writes job_, error_ and done_, then publishes claim_ (release) and generation_ (release). A thread
// runs job_ only after a successful acquire CAS on claim_ for the current generation, so it sees
// them; each finished index increments done_ (acq_rel), and the caller's acquire load of n-1 makes
// all their writes visible. The CAS on the combined (generation, index) word cannot succeed for a
// stale generation, so a worker that wakes late never touches a later region's job.
#include "engine/backend/cpu/thread_pool.hpp"

#include <algorithm>
#include <chrono>

namespace quarry::engine {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Waits until a.load() != old: spins with pause for about kSpinMicros / 8 (the common case: the next
// region starts within microseconds), then spins with sched_yield until kSpinMicros so that an
// oversubscribed machine still runs the thread we are waiting for, then blocks in std::atomic::wait.
// Returns the new value.
std::uint32_t wait_change(const std::atomic<std::uint32_t>& a, std::uint32_t old) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  const auto pause_until = start + std::chrono::microseconds(ThreadPool::kSpinMicros / 8);
  const auto yield_until = start + std::chrono::microseconds(ThreadPool::kSpinMicros);
  bool yielding = false;
  for (unsigned spins = 1;; ++spins) {
    const std::uint32_t v = a.load(std::memory_order_acquire);
    if (v != old) return v;
    if (yielding) {
      std::this_thread::yield();
      if (clock::now() > yield_until) break;
    } else {
      cpu_relax();
      if ((spins & 31) == 0 && clock::now() > pause_until) yielding = true;
    }
  }
  for (;;) {
    a.wait(old, std::memory_order_acquire);
    const std::uint32_t v = a.load(std::memory_order_acquire);
    if (v != old) return v;
  }
}

}  // namespace

ThreadPool::ThreadPool(std::size_t n_threads) {
  if (n_threads == 0) n_threads = std::max<std::size_t>(1, std::thread::hardware_concurrency());
  n_threads_ = n_threads;
  threads_.reserve(n_threads_ - 1);
  for (std::size_t i = 1; i < n_threads_; ++i) threads_.emplace_back([this] { worker(); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::record_error() {
  std::lock_guard<std::mutex> lock(error_mu_);
  if (!error_) error_ = std::current_exception();
}

void ThreadPool::claim_and_run(std::uint32_t generation) {
  std::uint64_t s = claim_.load(std::memory_order_acquire);
  for (;;) {
    if (static_cast<std::uint32_t>(s >> 32) != generation) return;
    const std::uint32_t index = static_cast<std::uint32_t>(s);
    if (index >= n_threads_) return;
    if (!claim_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
    try {
      (*job_)(index, n_threads_);
    } catch (...) {
      record_error();
    }
    if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_threads_ - 1) done_.notify_one();
    s = claim_.load(std::memory_order_acquire);
  }
}

void ThreadPool::worker() {
  std::uint32_t seen = 0;
  for (;;) {
    seen = wait_change(generation_, seen);
    if (stop_.load(std::memory_order_relaxed)) return;
    claim_and_run(seen);
  }
}

void ThreadPool::run(const std::function<void(std::size_t, std::size_t)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  job_ = &fn;
  error_ = nullptr;
  done_.store(0, std::memory_order_relaxed);
  const std::uint32_t generation = generation_.load(std::memory_order_relaxed) + 1;
  claim_.store((static_cast<std::uint64_t>(generation) << 32) | 1u, std::memory_order_release);
  generation_.store(generation, std::memory_order_release);
  generation_.notify_all();
  try {
    fn(0, n_threads_);
  } catch (...) {
    record_error();
  }
  claim_and_run(generation);  // indices no worker has started yet
  const auto target = static_cast<std::uint32_t>(n_threads_ - 1);
  for (std::uint32_t d = done_.load(std::memory_order_acquire); d != target;) d = wait_change(done_, d);
  job_ = nullptr;
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

void ThreadPool::parallel_for(std::size_t n, const std::function<void(std::size_t, std::size_t)>& fn) {
  run([&](std::size_t t, std::size_t nt) {
    const std::size_t begin = n * t / nt, end = n * (t + 1) / nt;
    if (begin < end) fn(begin, end);
  });
}

}  // namespace quarry::engine
