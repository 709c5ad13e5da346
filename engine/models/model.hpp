// The model interface the runtime drives: one implementation per architecture (one file each, over the
// shared layer builders of layers.hpp), found through the registry (registry.hpp) by config.json's
// architectures[0]. Models compute through the Backend interface only: no backend code in model files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "engine/backend/backend.hpp"
#include "engine/core/batch.hpp"
#include "engine/memory/kv_cache.hpp"
#include "engine/models/config.hpp"

namespace quarry::engine {

/// Where a forward call writes its outputs, in the backend's memory (null: not wanted).
struct ForwardOutputs {
  /// [n_logits, ld_logits] f32: the logits of the batch rows with batch.logits[t] = 1, in batch order
  /// (ld_logits: vocab_size, or draft_vocab for an MTP step restricted to a draft vocabulary).
  float* logits = nullptr;
  /// [n_tokens, hidden_size] f32: each token's final hidden state (what the MTP module reads).
  float* hidden = nullptr;
};

/// A flat batch checked against a KV cache and staged on a backend: what Model::forward takes.
class ForwardBatch {
 public:
  /// Checks the batch (token ids < vocab_size, each position inside its sequence's block table) and
  /// stages it on `backend`, unless `stage` is false (a model that stages batches itself, Model::
  /// stages_batches; staged() then throws std::logic_error). Throws std::invalid_argument naming the
  /// token or position.
  ForwardBatch(Backend& backend, const Batch& batch, const KvCache& kv, std::size_t vocab_size, bool stage = true);
  /// The same batch staged on another backend (another rank of a tensor-parallel group).
  ForwardBatch(const ForwardBatch& other, Backend& backend);
  ForwardBatch(const ForwardBatch&) = delete;
  ForwardBatch& operator=(const ForwardBatch&) = delete;
  const StagedBatch& staged() const;
  /// Sequences in the batch and the stride of its block tables (a power of two, at least 16).
  std::size_t n_seqs() const { return max_blocks_ ? tables_.size() / max_blocks_ : 0; }
  std::size_t table_stride() const { return max_blocks_; }
  std::size_t size() const { return n_tokens_; }
  std::size_t n_logits() const { return n_logits_; }
  /// Hybrid models: each sequence's recurrent-state slot (KvCache::state_slot), one per row of the staged
  /// block tables (staged().seq_index); empty when the cache keeps no state. The model reads the states
  /// from the KV storage it computes on (KvStorage::recurrent_state).
  std::span<const std::int32_t> state_slots() const { return state_slots_; }

 private:
  std::vector<std::int32_t> state_slots_;  ///< as BatchInputs::state_slots takes them
  // The host inputs (kept for staging on other backends).
  std::vector<TokenId> tokens_;
  std::vector<std::int32_t> positions_, seq_index_, tables_, logit_rows_;
  std::size_t max_blocks_ = 0;
  void stage(Backend& backend);
  const StagedBatch* staged_ = nullptr;
  std::size_t n_tokens_ = 0, n_logits_ = 0;
};

class Model {
 public:
  virtual ~Model() = default;

  virtual const ModelConfig& config() const = 0;
  /// The backend holding the weights; every buffer passed to forward() is in its memory.
  virtual Backend& backend() const = 0;
  /// How the model computes here (exact or bf16; Compute::automatic resolved at load).
  virtual Compute compute() const = 0;

  /// What one token stores in the KV cache: n_layers counts the main model's layers plus one per MTP
  /// draft depth (mtp_depths()), after them: draft depth d uses KV layer num_hidden_layers + d - 1. A
  /// cache built with fewer MTP layers (n_layers - num_hidden_layers < d) cannot run depth d.
  virtual KvSpec kv_spec() const = 0;

  /// One forward pass over a staged flat batch (see Batch): writes each token's K/V into `kv` at its
  /// position, attends causally over its sequence, writes the outputs asked for.
  /// `lm_head_groups` (optional, host, strictly increasing): compute the LM head only for these groups
  /// of 16 token ids (the ids a grammar allows), when the backend can do so bit-identically
  /// (Backend::supports_matmul_groups); every other logit is -infinity. Returns true if it did.
  virtual bool forward(const ForwardBatch& batch, KvCache& kv, const ForwardOutputs& out,
                       std::span<const std::uint32_t> lm_head_groups = {}) = 0;
  /// Whether forward()'s backend ops over a batch of n_tokens depend only on its shape (no copy to the
  /// host in between), so that a backend may record and replay them (Backend::begin_capture).
  virtual bool supports_capture(std::size_t n_tokens) const {
    (void)n_tokens;
    return true;
  }
  /// Records and replays of forward calls for the runner (Backend::begin_capture, end_capture, replay);
  /// the defaults record on backend(). A model over several backends (tensor parallel) records each.
  virtual bool can_record() const { return backend().supports_capture(); }
  virtual void begin_capture() { backend().begin_capture(); }
  virtual std::unique_ptr<CapturedOps> end_capture() { return backend().end_capture(); }
  /// Whether forward() and replay() stage the batch on their backends themselves (a tensor-parallel model:
  /// on every rank at once, in the ranks' threads), so that the caller may pass it unstaged.
  virtual bool stages_batches() const { return false; }
  /// Replays a recording of forward() over `batch` (staged on backend() already unless stages_batches();
  /// the recording reads the staged inputs). Returns false, running nothing, when the recording went
  /// stale (Backend::replay).
  virtual bool replay(const CapturedOps& ops, const ForwardBatch& batch) {
    (void)batch;
    return backend().replay(ops);
  }

  /// The KV block storage for `spec` (this model's kv_spec() with the runner's layer count) and up to
  /// `max_blocks` blocks: the backend's by default; a tensor-parallel model's holds every rank's.
  virtual std::unique_ptr<KvStorage> make_kv_storage(const KvSpec& spec, std::size_t max_blocks) const {
    return backend().make_kv_storage(spec, max_blocks);
  }

  /// Whether forward() can restrict the LM head to lm_head_groups here (so computing them pays).
  virtual bool supports_lm_head_groups() const { return false; }

  /// Draft depths the MTP module can run (0: the checkpoint has none). The Qwen3-Next layout's one
  /// module is applied recursively; the DeepSeek-V3 layout's k-th module serves depth k (the last one
  /// serves deeper depths).
  virtual std::size_t mtp_depths() const { return 0; }

  /// One MTP step at draft depth `depth` (1-based) over a staged batch of rows (ARCHITECTURE.md "MTP";
  /// the recursion of tools/train/train.py forward_losses). Row t of sequence s at index i:
  ///   x = fc(concat(norm_e(embed(batch.tokens[t])), norm_h(hidden_in[t])))  -> decoder layer -> norm
  /// where hidden_in (device [n_tokens, hidden_size]) is the state of row i one depth lower (depth 1: the
  /// main model's hidden state of position i; depth d > 1: hidden_out of depth d - 1 at row i) and
  /// batch.tokens[t] is token i + depth. batch.positions[t] = i is both the RoPE position and the slot in
  /// the depth's own KV layer. Writes out.hidden [n_tokens, hidden_size] (the module output after its
  /// norm, the input of depth + 1) and out.logits [n_logits, draft_vocab] for the rows with
  /// batch.logits[t] = 1 (predicting token i + depth + 1).
  /// `draft_vocab` (0: all) limits the logits to ids 0..draft_vocab-1 (FR-Spec, Zhao et al. 2025:
  /// byte-level BPE ids run roughly by frequency). `candidates` (optional, host): one id list per logit
  /// row (ids < draft_vocab); when every list is non-empty only those logits are computed and the rest of
  /// each row is -infinity.
  /// Throws std::invalid_argument on depth 0 or > mtp_depths(), a KV cache without that depth's layer,
  /// a candidate outside the draft vocabulary.
  virtual void mtp_forward(std::size_t depth, const ForwardBatch& batch, const float* hidden_in, KvCache& kv,
                           const ForwardOutputs& out, std::size_t draft_vocab = 0,
                           std::span<const std::vector<std::int32_t>> candidates = {});

  /// Bytes of weights one decode step reads (all matrices incl. the LM head, norms, one embedding row).
  virtual std::size_t weight_bytes_per_step() const = 0;
  /// Bytes of weights one MTP step reads without its LM head (0 without an MTP module).
  virtual std::size_t mtp_weight_bytes_per_step() const { return 0; }

  // ---- host convenience (tests, tools): host buffers in, host buffers out ----
  /// forward() of `batch` with host outputs: logits [n_logits, vocab_size], hidden [size, hidden_size]
  /// (either may be null). `lm_head_groups` as forward(). Returns what forward() returns.
  bool forward(const Batch& batch, KvCache& kv, float* logits_host, float* hidden_host = nullptr,
               std::span<const std::uint32_t> lm_head_groups = {});
  /// mtp_forward() with host buffers: hidden_in [size, hidden_size], hidden_out likewise, logits
  /// [n_logits, draft_vocab or vocab_size] (may be null when no row wants logits).
  void mtp_forward(std::size_t depth, const Batch& batch, const float* hidden_in_host, KvCache& kv,
                   float* hidden_out_host, float* logits_host, std::size_t draft_vocab = 0,
                   std::span<const std::vector<std::int32_t>> candidates = {});
  /// kv_spec() with the layers a cache with `mtp_layers` MTP draft depths holds (the main model's
  /// attention layers plus min(mtp_layers, mtp_depths())).
  KvSpec cache_spec(std::size_t mtp_layers) const;
  /// A KV cache for this model on its backend: `max_tokens` positions, `mtp_layers` MTP draft depths
  /// (default: all the model has, capped at 8).
  std::unique_ptr<KvCache> make_kv_cache(std::size_t max_tokens, std::size_t mtp_layers = SIZE_MAX,
                                         const PrefixCacheOptions& prefix = {}) const;

 private:
  DeviceBuffer host_io_;  ///< device staging of the host convenience calls (non-host backends)
  std::size_t host_io_floats_ = 0;
};

/// Loads the model in `dir` (config.json + safetensors, memory-mapped) for its architecture onto
/// `backend`, computing as `compute` resolves there (Backend::resolve_compute with the checkpoint's
/// dtype). Throws std::runtime_error naming the file on an unsupported architecture, a missing or
/// mis-shaped tensor, an unsupported dtype, a truncated or malformed file, or a device out of memory.
std::unique_ptr<Model> load_model(const std::filesystem::path& dir, std::shared_ptr<Backend> backend,
                                  Compute compute = Compute::automatic);
/// The same on a new CPU backend with all hardware threads.
std::unique_ptr<Model> load_model(const std::filesystem::path& dir, Compute compute = Compute::automatic);

}  // namespace quarry::engine
