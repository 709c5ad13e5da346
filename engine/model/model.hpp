// The model interface the runtime drives: one implementation per architecture (qwen3.cpp, ...).
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>

#include "engine/model/config.hpp"
#include "engine/runtime/batch.hpp"
#include "engine/runtime/kv_cache.hpp"

namespace quarry::engine {

class ThreadPool;

class Model {
 public:
  virtual ~Model() = default;

  virtual const ModelConfig& config() const = 0;

  /// What one token stores in the KV cache (layers, kv heads, head_dim).
  virtual KvCacheShape kv_shape() const = 0;

  /// One forward pass over a flat batch (see Batch). Writes each token's K/V into `kv` at its position,
  /// attends causally over its sequence, and writes the logits of the tokens with batch.logits[t] = 1
  /// to `logits`, row by row in batch order: [batch.n_logits(), vocab_size] f32.
  /// Throws std::invalid_argument on a token id >= vocab_size or a position outside the block table.
  virtual void forward(const Batch& batch, KvCache& kv, float* logits, ThreadPool* pool) = 0;

  /// Bytes of weights one decode step reads (all matrices incl. the LM head, norms, one embedding row).
  virtual std::size_t weight_bytes_per_step() const = 0;
};

/// Loads the model in `dir` (config.json + safetensors, memory-mapped) for its architecture.
/// Throws std::runtime_error naming the file on an unsupported architecture, a missing or
/// mis-shaped tensor, an unsupported dtype, or a truncated or malformed file.
std::unique_ptr<Model> load_model(const std::filesystem::path& dir);

}  // namespace quarry::engine
