#include "engine/models/parallel.hpp"

#include <stdexcept>

namespace quarry::engine {

ShardDims shard_dims(const ModelConfig& c, std::size_t rank, std::size_t size) {
  if (size == 0 || rank >= size) throw std::invalid_argument("tensor parallel: rank outside the group");
  const auto refuse = [&](const std::string& why) {
    throw std::invalid_argument("tensor parallel " + std::to_string(size) + ": " + why);
  };
  const std::size_t NK = c.linear_num_key_heads, NV = c.linear_num_value_heads;
  if (NV > 0 && (NK == 0 || NK % size != 0 || NV % NK != 0))
    refuse("linear_num_key_heads " + std::to_string(NK) + " is not divisible by " + std::to_string(size) +
           (NK > 0 && NV % NK != 0 ? " (or linear_num_value_heads " + std::to_string(NV) + " not a multiple of it)" : ""));
  const std::size_t NH = c.num_attention_heads, NKV = c.num_key_value_heads;
  if (NH % size != 0) refuse("num_attention_heads " + std::to_string(NH) + " is not divisible by " + std::to_string(size));
  if (NKV % size != 0 && size % NKV != 0)
    refuse("num_key_value_heads " + std::to_string(NKV) + " neither divisible by nor dividing " + std::to_string(size));
  ShardDims d;
  d.q_heads = NH / size;
  d.q_head0 = rank * d.q_heads;
  if (NKV >= size) {
    d.kv_heads = NKV / size;
    d.kv_head0 = rank * d.kv_heads;
  } else {  // replicated: the KV head this rank's query heads read
    d.kv_heads = 1;
    d.kv_head0 = rank * NKV / size;
  }
  const auto split = [&](std::size_t n, std::size_t& count, std::size_t& first) {
    first = n * rank / size;
    count = n * (rank + 1) / size - first;
  };
  split(c.intermediate_size, d.inter, d.inter0);
  split(c.moe_intermediate_size, d.moe_inter, d.moe_inter0);
  split(c.shared_expert_intermediate_size, d.shared_inter, d.shared_inter0);
  if (NV > 0) {
    d.lin_k_heads = NK / size;
    d.lin_k_head0 = rank * d.lin_k_heads;
    d.lin_v_heads = NV / size;
    d.lin_v_head0 = rank * d.lin_v_heads;
  }
  d.vocab_chunk = (c.vocab_size + size - 1) / size;
  d.vocab0 = std::min(c.vocab_size, rank * d.vocab_chunk);
  d.vocab = std::min(c.vocab_size, d.vocab0 + d.vocab_chunk) - d.vocab0;
  return d;
}

ModelConfig local_config(const ModelConfig& c, const ShardDims& d) {
  ModelConfig l = c;
  l.num_attention_heads = d.q_heads;
  l.num_key_value_heads = d.kv_heads;
  l.intermediate_size = d.inter;
  l.moe_intermediate_size = d.moe_inter;
  l.shared_expert_intermediate_size = d.shared_inter;
  l.linear_num_key_heads = d.lin_k_heads;
  l.linear_num_value_heads = d.lin_v_heads;
  return l;
}

}  // namespace quarry::engine
