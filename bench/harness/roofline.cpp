#include "bench/harness/roofline.hpp"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <stdexcept>

#include "bench/common/stream_read.hpp"
#include "bench/harness/harness.hpp"
#include "engine/backend/cpu/cpu_features.hpp"
#include "engine/backend/cpu/thread_pool.hpp"
#include "engine/runtime/stats.hpp"

namespace quarry::bench {

std::vector<double> measure_bandwidth(engine::ThreadPool& pool, std::size_t bytes, int runs) {
  bytes = std::max<std::size_t>(bytes / 4096 * 4096, 4096);
  std::unique_ptr<std::uint8_t, decltype(&std::free)> buf(static_cast<std::uint8_t*>(std::aligned_alloc(64, bytes)),
                                                           &std::free);
  if (!buf) throw std::runtime_error("bench: cannot allocate the bandwidth probe buffer");
  const auto feat = engine::cpu::detect_cpu_features();
  const std::size_t blocks = bytes / 256;
  pool.parallel_for(blocks, [&](std::size_t a, std::size_t b) {  // first touch by the reading thread
    std::memset(buf.get() + a * 256, static_cast<int>(a & 0xff), (b - a) * 256);
  });
  std::vector<double> out;
  std::vector<std::uint64_t> sums(pool.size());
  for (int r = 0; r < runs; ++r) {
    const engine::Stopwatch sw;
    pool.run([&](std::size_t t, std::size_t nt) {
      const std::size_t a = blocks * t / nt, b = blocks * (t + 1) / nt;
      sums[t] = stream_read(feat, buf.get() + a * 256, (b - a) * 256);
    });
    out.push_back(static_cast<double>(bytes) / sw.seconds() / 1e9);
  }
  // The XOR of the reads must be used, or the loads could be dropped.
  volatile std::uint64_t sink = std::accumulate(sums.begin(), sums.end(), std::uint64_t{0});
  (void)sink;
  return out;
}

double measure_gemm_flops(engine::ThreadPool& pool, std::size_t m, std::size_t k, std::size_t n,
                          engine::cpu::WeightType wt) {
  std::vector<float> x(m * k), y(m * n);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 2654435761u) % 1000) * 1e-3f;
  const std::size_t esize = wt == engine::cpu::WeightType::f32 ? 4 : 2;
  std::vector<std::uint8_t> w(n * k * esize);
  for (std::size_t i = 0; i + 1 < w.size(); i += 2) {
    w[i] = static_cast<std::uint8_t>(i * 7);
    w[i + 1] = 0x3c;  // small finite values in bf16, f16 and (pairs of) f32 alike
  }
  engine::cpu::gemm(x.data(), m, k, k, w.data(), wt, n, y.data(), n, &pool);  // warm-up
  std::vector<double> runs;
  for (int r = 0; r < 3; ++r) {
    const engine::Stopwatch sw;
    engine::cpu::gemm(x.data(), m, k, k, w.data(), wt, n, y.data(), n, &pool);
    runs.push_back(2.0 * static_cast<double>(m) * static_cast<double>(k) * static_cast<double>(n) / sw.seconds());
  }
  return median(runs);
}

}  // namespace quarry::bench
