// Collective operations among the ranks of a tensor-parallel group (Megatron-LM, Shoeybi et al. 2019:
// one all-reduce after each row-parallel product, an all-gather of the vocabulary-parallel logits).
// Each rank is one backend driven by its own thread; every rank issues the same collectives, with the
// same sizes, in the same order. A collective is ordered with the ops issued before and after it on
// its rank's backend (CUDA: enqueued on the backend's stream, so a recording of the step captures it).
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/backend/backend.hpp"

namespace quarry::engine {

class Collective {
 public:
  virtual ~Collective() = default;
  std::size_t rank() const { return rank_; }
  std::size_t size() const { return size_; }
  /// x[i] = the sum of every rank's x[i], i < n, in place (f32, this rank's backend memory). The result
  /// is the same on every rank. Host implementation: summed in rank order 0..size-1.
  virtual void all_reduce_sum(float* x, std::size_t n) = 0;
  /// x[i] += the sum of every rank's y[i], i < n (a row-parallel product's partial sums y added to the
  /// residual stream x, identical on every rank); y may be overwritten. Host implementation: the sum
  /// in rank order, then the add.
  virtual void all_reduce_add(float* x, float* y, std::size_t n) = 0;
  /// out[q * n + i] = rank q's x[i] for every rank q, i < n (f32, this rank's backend memory; out holds
  /// size() * n floats and may not overlap x).
  virtual void all_gather(const float* x, std::size_t n, float* out) = 0;
  /// Ends the group after a rank failed, so that the others do not wait for it forever: ranks waiting
  /// in a host collective get std::runtime_error; NCCL communicators are aborted (ncclCommAbort), so
  /// that collectives in flight end. The group is unusable afterwards.
  virtual void abort() {}
  /// What carries the collectives, for reports ("NCCL 2.28.9; one-shot all-reduce ...", "in-process").
  virtual std::string description() const = 0;

 protected:
  Collective(std::size_t rank, std::size_t size) : rank_(rank), size_(size) {}

 private:
  std::size_t rank_ = 0, size_ = 1;
};

/// One Collective per backend of a group, rank r for backends[r]: host memory backends (the CPU: N
/// simulated ranks in one process) share an in-process implementation; CUDA backends use NCCL, loaded
/// at run time (libnccl.so.2, or the path in QUARRY_NCCL), and for all-reduces of up to 65,536 floats
/// (decode steps) where every pair of devices has peer access a one-shot all-reduce over peer memory
/// (engine/backend/cuda/collective.cu; QUARRY_TP_ALLREDUCE=nccl sends those through NCCL too). Throws std::runtime_error naming the reason
/// when the backends are of mixed kinds or NCCL cannot be loaded or initialised.
std::vector<std::unique_ptr<Collective>> make_collectives(std::span<const std::shared_ptr<Backend>> backends);

}  // namespace quarry::engine
