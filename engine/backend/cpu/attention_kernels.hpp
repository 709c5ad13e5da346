// Paged attention kernels per instruction set (runtime dispatch from ops.cpp attention()): the same
// code (attention_range.inc) compiled for the baseline, AVX2+FMA and AVX-512.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/backend/cpu/ops.hpp"

namespace quarry::engine::cpu::detail {

/// The arguments of cpu::attention (see ops.hpp).
struct AttentionArgs {
  const float* q;
  std::size_t ldq;
  float* out;
  std::size_t ldo;
  std::size_t n_heads;
  const std::int32_t* positions;
  const std::int32_t* const* block_tables;
  const KvLayerView* kv;
  float scale;
  /// Runs of consecutive tokens of one sequence: run r is tokens runs[r]..runs[r+1]-1.
  const std::size_t* runs;
};

/// Work items w0..w1 (w = run * n_kv_heads + kv head) of cpu::attention.
using AttentionRangeFn = void (*)(const AttentionArgs& a, std::size_t w0, std::size_t w1);
void attention_range_generic(const AttentionArgs& a, std::size_t w0, std::size_t w1);
void attention_range_avx2(const AttentionArgs& a, std::size_t w0, std::size_t w1);
void attention_range_avx512(const AttentionArgs& a, std::size_t w0, std::size_t w1);
/// bf16 KV cache on the AMX tiles (attention_amx_avx512.cpp): head_dim 64 or 128, block_size 16, runs of
/// at most 16 query vectors.
void attention_range_amx(const AttentionArgs& a, std::size_t w0, std::size_t w1);

}  // namespace quarry::engine::cpu::detail
