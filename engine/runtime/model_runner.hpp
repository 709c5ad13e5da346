// The model runner (vLLM v1's GPUModelRunner): owns the model, its backend and the KV cache, runs a
// scheduled batch through the model and hands the host the outputs it needs (logit rows for sampling,
// hidden states for the MTP drafter). The scheduler decides what runs; the runner owns the tensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <tuple>
#include <vector>

#include "engine/core/batch.hpp"
#include "engine/memory/kv_cache.hpp"
#include "engine/models/model.hpp"

namespace quarry::engine {

struct ModelRunnerOptions {
  std::size_t max_kv_tokens = 65536;  ///< KV-cache capacity in tokens over all sequences
  std::size_t kv_cache_mb = 0;        ///< KV-cache budget in MiB (0: max_kv_tokens alone decides)
  /// Hybrid models: recurrent-state slots the budget must also hold (running sequences, their saved
  /// copies, the prefix snapshots); kv_cache_mb covers them first and the K/V blocks get the rest.
  std::size_t state_slots = 0;
  std::size_t mtp_layers = 0;         ///< MTP draft depths with a KV layer
  bool enforce_eager = false;         ///< never record and replay (EngineOptions::enforce_eager)
  PrefixCacheOptions prefix;
};

/// Decode-shaped forward calls (at most kMaxRecordedRows rows) are recorded once per shape and replayed
/// (CUDA graphs) on backends that can record ops: one launch per step instead of one per op.
constexpr std::size_t kMaxRecordedRows = 8;

/// Sampling where the logits are (Backend::argmax_rows, Backend::sample_rows): only the ids come back to
/// the host.
struct BackendSampling {
  /// The step's token bitmasks: mask_words words for each logit row (empty: every id allowed).
  std::span<const std::uint32_t> masks;
  std::size_t mask_words = 0;
  /// Each logit row's sampling (Backend::sample_rows); empty: every row is greedy (Backend::argmax_rows).
  std::span<const RowSampling> rows;
  /// When set, called once the forward call is issued and before the ids are picked, to fill `masks`
  /// and `mask_words`: on an asynchronous backend the host builds the step's bitmasks while the device
  /// runs the step.
  std::function<void(BackendSampling&)> build_masks;
};

/// What one forward call gives the host.
struct ModelOutput {
  std::span<const float> logits;  ///< [n_logits, vocab_size]; empty when `ids` were asked for
  std::span<const float> hidden;  ///< [n_tokens, hidden_size] when asked for
  /// [n_logits] when execute() had BackendSampling: each logit row's id (its argmax, or its draw) among
  /// the ids its mask allows (-1: none).
  std::span<const TokenId> ids;
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

  /// Forward steps replayed from a recording so far.
  std::size_t replays() const { return replays_; }
  /// Runs the batch; the spans stay valid until the next execute(). With `sampling`, the logit rows are
  /// reduced to their ids where they were computed and only the ids are handed over. Throws
  /// std::invalid_argument when its masks do not cover every logit row, or its rows are not one a
  /// logit row.
  ModelOutput execute(const Batch& batch, bool want_hidden, std::span<const std::uint32_t> lm_head_groups,
                      BackendSampling* sampling = nullptr);

 private:
  /// The device path: stage, run (recorded where the shape allows), copy the outputs (or the picked ids)
  /// to the host.
  bool execute_device(const Batch& batch, bool want_hidden, std::span<const std::uint32_t> lm_head_groups,
                      BackendSampling* sampling);
  /// The ids of the nl logit rows at `logits` (backend memory) into ids_, as `sampling` asks.
  void pick_ids(const float* logits, std::size_t nl, BackendSampling& sampling);

  std::unique_ptr<Model> model_;
  bool eager_ = false;
  std::unique_ptr<KvCache> kv_;
  std::vector<float> logits_, hidden_;
  std::vector<TokenId> ids_;
  // Device outputs (non-host backends) and the recordings of decode-shaped steps, keyed by
  // (rows, logit rows, hidden wanted, sequences, table stride, largest position / 512).
  DeviceBuffer dev_logits_, dev_hidden_;
  using ShapeKey = std::tuple<std::size_t, std::size_t, bool, std::size_t, std::size_t, std::int32_t>;
  std::map<ShapeKey, std::unique_ptr<CapturedOps>> recorded_;
  std::map<ShapeKey, int> seen_;
  std::size_t replays_ = 0;  ///< runs of each shape before recording (the first allocates its buffers)
};

}  // namespace quarry::engine
