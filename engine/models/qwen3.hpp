// The Qwen3 decoder shared by the Qwen3 family's architecture files (qwen3.cpp, qwen3_moe.cpp).
#pragma once

#include <memory>

#include "engine/backend/backend.hpp"
#include "engine/models/config.hpp"
#include "engine/models/model.hpp"
#include "engine/models/safetensors.hpp"

namespace quarry::engine {

/// The Qwen3 decoder over an open checkpoint (HF names model.layers.N.*, model.norm, lm_head, mtp.*): each
/// layer's FFN is the dense SwiGLU MLP, or the sparse MoE block where config.is_sparse_layer(layer).
/// Throws std::runtime_error naming the checkpoint on a missing or mis-shaped tensor.
std::unique_ptr<Model> make_qwen3_decoder(const ModelConfig& config, std::unique_ptr<TensorStore> store,
                                          std::shared_ptr<Backend> backend, Compute compute);

}  // namespace quarry::engine
