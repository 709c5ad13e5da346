// The model runner (vLLM v1's GPUModelRunner): owns the model, its backend and the KV cache, runs a
// scheduled batch through the model and hands the host the outputs it needs (logit rows for sampling,
// hidden states for the MTP drafter). The scheduler decides what runs; the runner owns the tensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/core/batch.hpp"
#include "engine/memory/kv_cache.hpp"
#include "engine/models/model.hpp"

namespace quarry::engine {

struct ModelRunnerOptions {
  std::size_t max_kv_tokens = 65536;  ///< KV-cache capacity in tokens over all sequences
  std::size_t kv_cache_mb = 0;        ///< KV-cache budget in MiB (0: max_kv_tokens alone decides)
  std::size_t mtp_layers = 0;         ///< MTP draft depths with a KV layer
  PrefixCacheOptions prefix;
};

/// What one forward call gives the host.
struct ModelOutput {
  std::span<const float> logits;  ///< [n_logits, vocab_size]
  std::span<const float> hidden;  ///< [n_tokens, hidden_size] when asked for
  bool lm_head_restricted = false;
};

class ModelRunner {
 public:
  /// Throws std::runtime_error when the device cannot hold the KV cache.
  ModelRunner(std::unique_ptr<Model> model, const ModelRunnerOptions& options);

  Model& model() { return *model_; }
  const Model& model() const { return *model_; }
  Backend& backend() const { return model_->backend(); }
  KvCache& kv() { return *kv_; }
  const KvCache& kv() const { return *kv_; }

  /// Runs the batch; the spans stay valid until the next execute().
  ModelOutput execute(const Batch& batch, bool want_hidden, std::span<const std::uint32_t> lm_head_groups);

 private:
  std::unique_ptr<Model> model_;
  std::unique_ptr<KvCache> kv_;
  std::vector<float> logits_, hidden_;
};

}  // namespace quarry::engine
