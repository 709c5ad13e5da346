// A fixed-size pool of worker threads for data-parallel loops (owned object, no global state).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace quarry::engine {

class ThreadPool {
 public:
  /// n_threads total workers including the calling thread; 0 means std::thread::hardware_concurrency().
  explicit ThreadPool(std::size_t n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  std::size_t size() const { return n_threads_; }

  /// Runs fn(thread_index, n_threads) on every thread (the caller is thread 0) and waits for all.
  /// Not reentrant: fn must not call run() on the same pool.
  void run(const std::function<void(std::size_t, std::size_t)>& fn);

  /// Splits [0, n) into contiguous ranges, one per thread, and calls fn(begin, end) for each.
  void parallel_for(std::size_t n, const std::function<void(std::size_t, std::size_t)>& fn);

 private:
  void worker(std::size_t index);

  std::size_t n_threads_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_start_, cv_done_;
  const std::function<void(std::size_t, std::size_t)>* job_ = nullptr;
  std::size_t generation_ = 0;
  std::size_t pending_ = 0;
  bool stop_ = false;
};

}  // namespace quarry::engine
