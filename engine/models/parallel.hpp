// Tensor parallelism (Megatron-LM, Shoeybi et al. 2019; vLLM's parallel linear layers): how a model's
// weights split over the ranks of a group and what each rank computes.
//   q/k/v, gate/up: column-parallel (each rank a slice of the output features: its attention heads, its
//     part of the intermediate width); o_proj, down_proj: row-parallel (the matching slice of the input
//     features), each followed by one all-reduce of the partial sums;
//   KV heads: split like the query heads, or replicated (each rank keeps the one its query heads read)
//     when there are fewer KV heads than ranks;
//   MoE: every expert sharded like a dense MLP (its intermediate width split), the router replicated, one
//     all-reduce of the experts' summed outputs;
//   Gated DeltaNet (linear attention, hybrid models): the key heads split, each rank with the value
//     heads that read them (value head h reads key head h / (nv / nk)): its q/k/v conv channels, z, b, a,
//     A_log, dt_bias and recurrent state; out_proj row-parallel with one all-reduce;
//   a shared expert (Qwen3-Next / Qwen3.5 MoE): split like a dense MLP, its partial sums reduced with the
//     routed experts' in the same all-reduce (its scalar gate replicated);
//   LM head: vocabulary-parallel (each rank a contiguous slice of the vocabulary, padded to one size),
//     the logits all-gathered to rank 0; the embedding table is replicated (one row read per token).
// Every rank ends each layer with the same residual stream, so the MTP module and the norms need no
// communication.
#pragma once

#include <cstddef>
#include <string>

#include "engine/backend/collective.hpp"
#include "engine/models/config.hpp"

namespace quarry::engine {

/// A model's place in a tensor-parallel group: rank `rank` of `size` (size 1: the whole model, no
/// collectives).
struct TensorParallel {
  std::size_t rank = 0, size = 1;
  Collective* comm = nullptr;  ///< this rank's collectives (null when size == 1)
  bool active() const { return size > 1; }
};

/// The slices of a model's dimensions rank `rank` of `size` holds.
struct ShardDims {
  std::size_t q_heads = 0, q_head0 = 0;    ///< query heads and the first one (global index)
  std::size_t kv_heads = 0, kv_head0 = 0;  ///< KV heads and the first one (one, replicated, when fewer than ranks)
  std::size_t inter = 0, inter0 = 0;       ///< the dense MLP's intermediate columns
  std::size_t moe_inter = 0, moe_inter0 = 0;  ///< each expert's intermediate columns
  std::size_t shared_inter = 0, shared_inter0 = 0;  ///< the shared expert's intermediate columns
  std::size_t lin_k_heads = 0, lin_k_head0 = 0;  ///< linear-attention key heads (hybrid models)
  std::size_t lin_v_heads = 0, lin_v_head0 = 0;  ///< linear-attention value heads (those of its key heads)
  std::size_t vocab_chunk = 0;             ///< ceil(vocab / size): every rank's (padded) slice
  std::size_t vocab = 0, vocab0 = 0;       ///< this rank's vocabulary ids [vocab0, vocab0 + vocab)
};

/// The slices of rank `rank` of `size` for `c`. Throws std::invalid_argument naming the config key when
/// the model cannot be split that way (attention heads or linear-attention key heads not divisible by
/// size; KV heads neither divisible by size nor dividing it).
ShardDims shard_dims(const ModelConfig& c, std::size_t rank, std::size_t size);

/// `c` as rank `d`'s layers see it: its attention heads, KV heads, linear-attention heads and
/// intermediate widths.
ModelConfig local_config(const ModelConfig& c, const ShardDims& d);

}  // namespace quarry::engine
