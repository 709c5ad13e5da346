// Qwen3MoeForCausalLM (Qwen3-30B-A3B, Qwen3-235B-A22B; HF transformers models/qwen3_moe/modeling_qwen3_moe.py):
// the Qwen3 decoder (qwen3.hpp) whose FFN is the sparse MoE block (layers::moe_block: router, softmax,
// top num_experts_per_tok, renormalised when norm_topk_prob, SwiGLU experts of moe_intermediate_size)
// in every layer l with (l + 1) % decoder_sparse_step == 0 that mlp_only_layers does not list; the other
// layers keep the dense MLP of intermediate_size. Experts load from either checkpoint layout (per-expert
// tensors or fused 3-D, layers::load_moe).
#include <stdexcept>
#include <string>

#include "engine/models/qwen3.hpp"
#include "engine/models/registry.hpp"

namespace quarry::engine {

std::unique_ptr<Model> make_qwen3_moe(const ModelConfig& config, std::unique_ptr<TensorStore> store,
                                      std::shared_ptr<Backend> backend, Compute compute) {
  if (config.num_experts == 0)
    throw std::runtime_error(store->origin().string() + ": " + config.architecture +
                             " without num_experts (or num_local_experts) in config.json");
  return make_qwen3_decoder(config, std::move(store), std::move(backend), compute);
}

}  // namespace quarry::engine
