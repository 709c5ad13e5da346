// Spin-then-block fork-join pool (see thread_pool.hpp). Memory ordering: run() writes job_ and
// pending_, then increments generation_ with release; a worker that observes the new generation with
// acquire sees both. Workers finish with an acq_rel decrement of pending_; the caller's acquire load
// of 0 makes all their writes visible.
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
  for (std::size_t i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
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

void ThreadPool::worker(std::size_t index) {
  std::uint32_t seen = 0;
  for (;;) {
    seen = wait_change(generation_, seen);
    if (stop_.load(std::memory_order_relaxed)) return;
    try {
      (*job_)(index, n_threads_);
    } catch (...) {
      record_error();
    }
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

void ThreadPool::run(const std::function<void(std::size_t, std::size_t)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  job_ = &fn;
  error_ = nullptr;
  pending_.store(static_cast<std::uint32_t>(n_threads_ - 1), std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  try {
    fn(0, n_threads_);
  } catch (...) {
    record_error();
  }
  for (std::uint32_t p = pending_.load(std::memory_order_acquire); p != 0;) p = wait_change(pending_, p);
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
