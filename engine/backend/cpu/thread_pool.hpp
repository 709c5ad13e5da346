// A fixed-size pool of worker threads for data-parallel loops (owned object, no global state).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace quarry::engine {

/// Fork-join pool tuned for many short parallel regions (one per matmul of a decode step, tens of
/// microseconds each): between regions the workers spin on an atomic generation counter for a short
/// while (kSpinMicros) so that the next region starts without a system call, then sleep on a futex
/// (C++20 std::atomic::wait) so an idle pool costs no CPU. The caller takes part as thread 0.
/// Indices are claimed, not assigned: a worker takes the next index not yet started, and when the
/// caller has finished index 0 it runs itself every index no worker has started yet. On a machine
/// with fewer free cores than pool threads (a descheduled worker) a region thus never waits for a
/// thread that has not begun, only for work already under way.
class ThreadPool {
 public:
  /// n_threads total workers including the calling thread; 0 means std::thread::hardware_concurrency().
  explicit ThreadPool(std::size_t n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  std::size_t size() const { return n_threads_; }

  /// Calls fn(index, n_threads) once for every index in [0, n_threads) and waits for all: index 0 on
  /// the calling thread, the others on whichever thread claims them first (a worker, or the caller
  /// when no worker has started that index); so fn must not rely on OS thread identity.
  /// If fn throws, the first exception is rethrown here after every index finished.
  /// Not reentrant: fn must not call run() on the same pool; one caller thread at a time.
  void run(const std::function<void(std::size_t, std::size_t)>& fn);

  /// Splits [0, n) into contiguous ranges, one per thread, and calls fn(begin, end) for each
  /// non-empty range.
  void parallel_for(std::size_t n, const std::function<void(std::size_t, std::size_t)>& fn);

  /// How long idle workers (and the waiting caller) spin before they block, in microseconds.
  static constexpr int kSpinMicros = 200;

 private:
  void worker();
  void record_error();
  void claim_and_run(std::uint32_t generation);

  std::size_t n_threads_;
  std::vector<std::thread> threads_;
  const std::function<void(std::size_t, std::size_t)>* job_ = nullptr;
  alignas(64) std::atomic<std::uint32_t> generation_{0};  // bumped to start a region (or to stop)
  alignas(64) std::atomic<std::uint64_t> claim_{0};      // (generation << 32) | next index to claim
  alignas(64) std::atomic<std::uint32_t> done_{0};        // indices >= 1 finished in this region
  std::atomic<bool> stop_{false};
  std::mutex error_mu_;
  std::exception_ptr error_;
};

}  // namespace quarry::engine
