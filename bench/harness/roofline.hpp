// What the machine can do, measured in the same run as the workloads: the ceilings against which
// decode (memory-bandwidth bound) and prefill (GEMM bound) are reported.
#pragma once

#include <cstddef>
#include <vector>

#include "engine/backend/cpu/gemm.hpp"

namespace quarry::engine {
class ThreadPool;
}

namespace quarry::bench {

/// GB/s (1e9 bytes/s) of `runs` multi-threaded streaming reads of a `bytes` buffer: each pool thread
/// reads its slice with the probe of bench/common/stream_read.hpp (first touched by the same thread).
std::vector<double> measure_bandwidth(engine::ThreadPool& pool, std::size_t bytes, int runs);

/// FLOP/s (2 m k n / s) of cpu::gemm on x[m, k] · W[n, k]^T with weights of type `wt`: median of 3
/// runs after a warm-up.
double measure_gemm_flops(engine::ThreadPool& pool, std::size_t m, std::size_t k, std::size_t n,
                          engine::cpu::WeightType wt);

}  // namespace quarry::bench
