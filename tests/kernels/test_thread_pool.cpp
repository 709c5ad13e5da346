// ThreadPool: every index covered exactly once, all thread indexes used, errors propagated, and the
// pool stays correct across many short regions and after its workers went to sleep.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "engine/backend/cpu/thread_pool.hpp"

namespace {

using quarry::engine::ThreadPool;

TEST(ThreadPool, ParallelForCoversEachIndexOnce) {
  for (std::size_t threads : {1u, 2u, 3u, 8u}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (std::size_t n : {0u, 1u, 2u, 3u, 7u, 1000u}) {
      std::vector<std::atomic<int>> hits(n);
      std::atomic<std::size_t> calls{0};
      pool.parallel_for(n, [&](std::size_t b, std::size_t e) {
        EXPECT_LT(b, e);
        EXPECT_LE(e, n);
        ++calls;
        for (std::size_t i = b; i < e; ++i) hits[i].fetch_add(1);
      });
      for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
      EXPECT_LE(calls.load(), threads);
    }
  }
}

TEST(ThreadPool, ManyShortRegions) {
  for (std::size_t threads : {2u, 3u}) {  // 3 may exceed the cores: waiting must not starve workers
    ThreadPool pool(threads);
    std::vector<long> sums(threads, 0);
    constexpr int kRuns = 5000;
    for (int r = 0; r < kRuns; ++r)
      pool.run([&](std::size_t t, std::size_t nt) {
        EXPECT_EQ(nt, threads);
        // ~1 us of work so that spinning workers race the caller for the indices.
        const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(1);
        while (std::chrono::steady_clock::now() < until) {
        }
        sums[t] += 1;  // each index writes only its own slot; run() must publish it to the caller
      });
    for (long s : sums) EXPECT_EQ(s, kRuns);
  }
}

TEST(ThreadPool, EveryIndexRunsOnceAndZeroOnCaller) {
  ThreadPool pool(4);
  for (int r = 0; r < 200; ++r) {
    std::vector<std::atomic<int>> seen(4);
    std::thread::id id0;
    pool.run([&](std::size_t t, std::size_t nt) {
      EXPECT_EQ(nt, 4u);
      seen[t].fetch_add(1);
      if (t == 0) id0 = std::this_thread::get_id();
    });
    for (auto& s : seen) EXPECT_EQ(s.load(), 1);
    EXPECT_EQ(id0, std::this_thread::get_id());  // index 0 runs on the caller
  }
}

TEST(ThreadPool, WorkersTakePartWhenIdle) {
  // Index 0 waits (up to 50 ms) for index 1 to start; on a busy machine a worker may need a few
  // tries to be scheduled in time, after which index 1 must have run on another thread.
  ThreadPool pool(2);
  bool other_thread = false;
  for (int r = 0; r < 20 && !other_thread; ++r) {
    std::thread::id ids[2];
    std::atomic<bool> started{false};
    pool.run([&](std::size_t t, std::size_t) {
      ids[t] = std::this_thread::get_id();
      if (t == 1) {
        started = true;
        return;
      }
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
      while (!started && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    });
    other_thread = ids[1] != ids[0];
  }
  EXPECT_TRUE(other_thread);
}

TEST(ThreadPool, PoolOfOneRunsOnCaller) {
  ThreadPool pool(1);
  std::thread::id id;
  pool.run([&](std::size_t t, std::size_t nt) {
    EXPECT_EQ(t, 0u);
    EXPECT_EQ(nt, 1u);
    id = std::this_thread::get_id();
  });
  EXPECT_EQ(id, std::this_thread::get_id());
}

TEST(ThreadPool, WorksAfterWorkersSleep) {
  ThreadPool pool(2);
  for (int r = 0; r < 3; ++r) {
    std::this_thread::sleep_for(std::chrono::microseconds(ThreadPool::kSpinMicros * 5));
    std::atomic<int> count{0};
    pool.run([&](std::size_t, std::size_t) { ++count; });
    EXPECT_EQ(count.load(), 2);
  }
}

TEST(ThreadPool, ExceptionsPropagateAndPoolSurvives) {
  ThreadPool pool(3);
  EXPECT_THROW(pool.run([](std::size_t t, std::size_t) {
                 if (t == 2) throw std::runtime_error("worker failed");
               }),
               std::runtime_error);
  EXPECT_THROW(pool.run([](std::size_t t, std::size_t) {
                 if (t == 0) throw std::logic_error("caller failed");
               }),
               std::logic_error);
  std::atomic<int> count{0};
  pool.run([&](std::size_t, std::size_t) { ++count; });
  EXPECT_EQ(count.load(), 3);
}

TEST(ThreadPool, DefaultSizeIsHardwareConcurrency) {
  ThreadPool pool;
  EXPECT_GE(pool.size(), 1u);
  if (std::thread::hardware_concurrency() > 0) {
    EXPECT_EQ(pool.size(), std::thread::hardware_concurrency());
  }
}

}  // namespace
