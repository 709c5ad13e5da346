#include "engine/runtime/model_runner.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace quarry::engine {

ModelRunner::ModelRunner(std::unique_ptr<Model> model, const ModelRunnerOptions& options)
    : model_(std::move(model)), eager_(options.enforce_eager) {
  const KvSpec spec = model_->cache_spec(options.mtp_layers);
  std::size_t kv_tokens = options.max_kv_tokens;
  if (options.kv_cache_mb > 0) {
    std::size_t budget = options.kv_cache_mb * (std::size_t{1} << 20);
    // Hybrid models: the recurrent states come out of the same budget first.
    const std::size_t state_bytes = options.state_slots * spec.state_floats * sizeof(float);
    if (state_bytes > 0 && state_bytes >= budget)
      throw std::invalid_argument("KV cache of " + std::to_string(options.kv_cache_mb) +
                                  " MiB holds no K/V after the recurrent state of " +
                                  std::to_string(options.state_slots) + " slots (" + std::to_string(state_bytes >> 20) +
                                  " MiB: the running sequences, their saved copies and the prefix snapshots): raise "
                                  "kv_cache_mb, or lower max_num_seqs / max_state_snapshots");
    budget -= state_bytes;
    const std::size_t block_bytes = spec.bytes_per_token() * spec.block_size;
    const std::size_t blocks = budget / std::max<std::size_t>(block_bytes, 1);
    kv_tokens = std::min(kv_tokens, blocks * spec.block_size);
  }
  kv_ = model_->make_kv_cache(kv_tokens, options.mtp_layers, options.prefix);
}

ModelOutput ModelRunner::execute(const Batch& batch, bool want_hidden, std::span<const std::uint32_t> lm_head_groups,
                                 BackendSampling* sampling) {
  const std::size_t V = model_->config().vocab_size, H = model_->config().hidden_size, nl = batch.n_logits();
  Backend& be = model_->backend();
  const bool host = be.host_memory();
  logits_.resize(sampling && !host ? 0 : nl * V);
  hidden_.resize(want_hidden ? batch.size() * H : 0);
  ids_.resize(sampling ? nl : 0);
  ModelOutput out;
  if (host) {  // the outputs are written straight into the host vectors
    out.lm_head_restricted =
        model_->forward(batch, *kv_, logits_.data(), want_hidden ? hidden_.data() : nullptr, lm_head_groups);
    if (sampling) {
      pick_ids(logits_.data(), nl, *sampling);
      logits_.clear();
    }
  } else {
    out.lm_head_restricted = execute_device(batch, want_hidden, lm_head_groups, sampling);
  }
  out.logits = logits_;
  out.hidden = hidden_;
  out.ids = ids_;
  return out;
}

void ModelRunner::pick_ids(const float* logits, std::size_t nl, BackendSampling& sampling) {
  if (sampling.build_masks) sampling.build_masks(sampling);  // on a device: while it runs the step
  if (nl == 0) return;
  const std::size_t V = model_->config().vocab_size;
  Backend& be = model_->backend();
  if (sampling.rows.empty())
    be.argmax_rows(logits, nl, V, V, sampling.masks, sampling.mask_words, ids_.data());
  else
    be.sample_rows(logits, nl, V, V, sampling.masks, sampling.mask_words, sampling.rows, ids_.data());
}

bool ModelRunner::execute_device(const Batch& batch, bool want_hidden, std::span<const std::uint32_t> lm_head_groups,
                                 BackendSampling* sampling) {
  Backend& be = model_->backend();
  const std::size_t V = model_->config().vocab_size, H = model_->config().hidden_size;
  const std::size_t nl = batch.n_logits(), T = batch.size();
  auto ensure = [&](DeviceBuffer& b, std::size_t floats) {
    if (b.bytes() < floats * sizeof(float)) {
      b = DeviceBuffer();
      b = be.alloc(std::max<std::size_t>(floats, 1) * sizeof(float) * 2);  // headroom: fewer reallocations
    }
  };
  ensure(dev_logits_, std::max(nl, kMaxRecordedRows) * V);
  if (want_hidden) ensure(dev_hidden_, std::max(T, kMaxRecordedRows) * H);
  const ForwardBatch fb(be, batch, *kv_, V, !model_->stages_batches());
  const ForwardOutputs outs{nl ? dev_logits_.as<float>() : nullptr, want_hidden ? dev_hidden_.as<float>() : nullptr};
  bool restricted = false;
  const bool recordable = !eager_ && model_->can_record() && T <= kMaxRecordedRows && model_->supports_capture(T) && lm_head_groups.empty();
  if (!recordable) {
    restricted = model_->forward(fb, *kv_, outs, lm_head_groups);
  } else {
    std::int32_t max_pos = 0;
    for (auto p : batch.positions) max_pos = std::max(max_pos, p);
    const ShapeKey key{T, nl, want_hidden, fb.n_seqs(), fb.table_stride(), max_pos / 512};
    auto it = recorded_.find(key);
    const bool replayed = it != recorded_.end() && model_->replay(*it->second, fb);
    replays_ += replayed ? 1 : 0;
    if (!replayed) {
      if (seen_[key]++ == 0) {
        model_->forward(fb, *kv_, outs);  // the first run of a shape allocates what it needs
      } else {
        if (recorded_.size() >= 256) recorded_.clear();
        model_->begin_capture();
        try {
          model_->forward(fb, *kv_, outs);
        } catch (...) {
          model_->end_capture();
          throw;
        }
        auto rec = model_->end_capture();
        if (!model_->replay(*rec, fb)) model_->forward(fb, *kv_, outs);  // memory moved while recording: run plainly
        recorded_[key] = std::move(rec);
      }
    }
  }
  if (sampling) pick_ids(dev_logits_.as<float>(), nl, *sampling);
  else if (nl) be.download(logits_.data(), dev_logits_.data(), nl * V * sizeof(float));
  if (want_hidden) be.download(hidden_.data(), dev_hidden_.data(), T * H * sizeof(float));
  return restricted;
}

}  // namespace quarry::engine
