// Qwen3ForCausalLM (dense): HF transformers models/qwen3/modeling_qwen3.py.
//   x = embed(tokens)
//   per layer: h = RMSNorm(x); q,k,v = h Wq^T, h Wk^T, h Wv^T; q,k = RMSNorm over head_dim (q_norm, k_norm);
//              RoPE(q, k); o = attention (GQA, causal, paged KV) Wo^T; x += o;
//              h = RMSNorm(x); x += (silu(h Wg^T) * (h Wu^T)) Wd^T
//   logits = RMSNorm(x) W_lm^T  (W_lm = embed when tie_word_embeddings)
#pragma once

#include <filesystem>
#include <memory>

#include "engine/model/model.hpp"

namespace quarry::engine {

class TensorStore;

/// Builds a Qwen3 model over an open checkpoint (the store stays mapped for the model's life).
/// Throws std::runtime_error naming the file on a missing or mis-shaped tensor.
std::unique_ptr<Model> make_qwen3(const ModelConfig& config, std::unique_ptr<TensorStore> store,
                                  Compute compute = Compute::automatic);

}  // namespace quarry::engine
