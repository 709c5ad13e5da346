// The architectures quarry can load, by config.json's architectures[0] (llama.cpp's arch table; vLLM's
// model registry): one file per architecture under engine/models/, each a factory here.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "engine/backend/backend.hpp"
#include "engine/models/config.hpp"
#include "engine/models/model.hpp"
#include "engine/models/safetensors.hpp"

namespace quarry::engine {

/// Builds a model over an open checkpoint (the store stays mapped for the model's life) on `backend`.
/// Throws std::runtime_error naming the file on a missing or mis-shaped tensor.
using ModelFactory = std::unique_ptr<Model> (*)(const ModelConfig& config, std::unique_ptr<TensorStore> store,
                                                std::shared_ptr<Backend> backend, Compute compute);

class RankModel;
struct TensorParallel;
/// Builds rank tp.rank of a tensor-parallel group over an open checkpoint (its slices only).
using RankFactory = std::unique_ptr<RankModel> (*)(const ModelConfig& config, std::unique_ptr<TensorStore> store,
                                                   std::shared_ptr<Backend> backend, Compute compute,
                                                   const TensorParallel& tp);

struct Architecture {
  const char* name;        ///< architectures[0] in config.json, e.g. "Qwen3ForCausalLM"
  const char* model_type;  ///< model_type, used when architectures is missing, e.g. "qwen3"
  ModelFactory make;
  RankFactory make_rank = nullptr;  ///< null: no tensor-parallel form
};

/// Every registered architecture.
std::span<const Architecture> architectures();
/// The architecture of a config (by architectures[0], else model_type), or null when unsupported.
const Architecture* find_architecture(const ModelConfig& config);
/// "Qwen3ForCausalLM, ..." for messages.
std::string supported_architectures();

// The factories (one per architecture file).
std::unique_ptr<Model> make_qwen3(const ModelConfig& config, std::unique_ptr<TensorStore> store,
                                  std::shared_ptr<Backend> backend, Compute compute);
std::unique_ptr<Model> make_qwen3_moe(const ModelConfig& config, std::unique_ptr<TensorStore> store,
                                      std::shared_ptr<Backend> backend, Compute compute);
/// A rank of the Qwen3 decoder (dense or MoE) under tensor parallelism.
std::unique_ptr<RankModel> make_qwen3_rank(const ModelConfig& config, std::unique_ptr<TensorStore> store,
                                           std::shared_ptr<Backend> backend, Compute compute,
                                           const TensorParallel& tp);
/// Hybrid Gated DeltaNet + gated attention models (qwen3_next.cpp): Qwen3NextForCausalLM,
/// Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM.
std::unique_ptr<Model> make_hybrid_qwen(const ModelConfig& config, std::unique_ptr<TensorStore> store,
                                        std::shared_ptr<Backend> backend, Compute compute);
/// A rank of a hybrid model under tensor parallelism.
std::unique_ptr<RankModel> make_hybrid_qwen_rank(const ModelConfig& config, std::unique_ptr<TensorStore> store,
                                                 std::shared_ptr<Backend> backend, Compute compute,
                                                 const TensorParallel& tp);

}  // namespace quarry::engine
