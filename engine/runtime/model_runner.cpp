#include "engine/runtime/model_runner.hpp"

#include <algorithm>

namespace quarry::engine {

ModelRunner::ModelRunner(std::unique_ptr<Model> model, const ModelRunnerOptions& options) : model_(std::move(model)) {
  KvSpec spec = model_->kv_spec();
  spec.n_layers = model_->config().num_hidden_layers + std::min(options.mtp_layers, model_->mtp_depths());
  std::size_t kv_tokens = options.max_kv_tokens;
  if (options.kv_cache_mb > 0) {
    const std::size_t block_bytes = spec.bytes_per_token() * spec.block_size;
    const std::size_t blocks = options.kv_cache_mb * (std::size_t{1} << 20) / std::max<std::size_t>(block_bytes, 1);
    kv_tokens = std::min(kv_tokens, blocks * spec.block_size);
  }
  kv_ = std::make_unique<KvCache>(model_->backend(), spec, kv_tokens, options.prefix);
}

ModelOutput ModelRunner::execute(const Batch& batch, bool want_hidden, std::span<const std::uint32_t> lm_head_groups) {
  const std::size_t V = model_->config().vocab_size, H = model_->config().hidden_size;
  logits_.resize(batch.n_logits() * V);
  hidden_.resize(want_hidden ? batch.size() * H : 0);
  ModelOutput out;
  out.lm_head_restricted =
      model_->forward(batch, *kv_, logits_.data(), want_hidden ? hidden_.data() : nullptr, lm_head_groups);
  out.logits = logits_;
  out.hidden = hidden_;
  return out;
}

}  // namespace quarry::engine
