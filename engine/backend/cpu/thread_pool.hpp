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
class ThreadPool {
 public:
  /// n_threads total workers including the calling thread; 0 means std::thread::hardware_concurrency().
  explicit ThreadPool(std::size_t n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  std::size_t size() const { return n_threads_; }

  /// Runs fn(thread_index, n_threads) on every thread (the caller is thread 0) and waits for all.
  /// If fn throws on any thread, the first exception is rethrown here after all threads finished.
  /// Not reentrant: fn must not call run() on the same pool; one caller thread at a time.
  void run(const std::function<void(std::size_t, std::size_t)>& fn);

  /// Splits [0, n) into contiguous ranges, one per thread, and calls fn(begin, end) for each
  /// non-empty range.
  void parallel_for(std::size_t n, const std::function<void(std::size_t, std::size_t)>& fn);

  /// How long idle workers (and the waiting caller) spin before they block, in microseconds.
  static constexpr int kSpinMicros = 200;

 private:
  void worker(std::size_t index);
  void record_error();

  std::size_t n_threads_;
  std::vector<std::thread> threads_;
  const std::function<void(std::size_t, std::size_t)>* job_ = nullptr;
  alignas(64) std::atomic<std::uint32_t> generation_{0};  // bumped to start a region (or to stop)
  alignas(64) std::atomic<std::uint32_t> pending_{0};     // workers still inside the current region
  std::atomic<bool> stop_{false};
  std::mutex error_mu_;
  std::exception_ptr error_;
};

}  // namespace quarry::engine
