// The model interface the runtime drives: one implementation per architecture (qwen3.cpp, ...).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "engine/model/config.hpp"
#include "engine/runtime/batch.hpp"
#include "engine/runtime/kv_cache.hpp"

namespace quarry::engine {

class ThreadPool;

class Model {
 public:
  virtual ~Model() = default;

  virtual const ModelConfig& config() const = 0;

  /// What one token stores in the KV cache (layers, kv heads, head_dim). n_layers counts the main
  /// model's layers plus one per MTP draft depth (mtp_depths()), after them: draft depth d uses KV layer
  /// num_hidden_layers + d - 1. A cache built with fewer MTP layers (n_layers - num_hidden_layers < d)
  /// cannot run depth d.
  virtual KvCacheShape kv_shape() const = 0;

  /// One forward pass over a flat batch (see Batch). Writes each token's K/V into `kv` at its position,
  /// attends causally over its sequence, and writes the logits of the tokens with batch.logits[t] = 1
  /// to `logits`, row by row in batch order: [batch.n_logits(), vocab_size] f32.
  /// Throws std::invalid_argument on a token id >= vocab_size or a position outside the block table.
  void forward(const Batch& batch, KvCache& kv, float* logits, ThreadPool* pool) {
    forward(batch, kv, logits, nullptr, pool);
  }

  /// Same, and when `hidden` is not null also writes the final hidden state of every token of the
  /// batch: [batch.size(), hidden_size] f32, in batch order -- the state the MTP module reads
  /// (config().mtp_hidden_state: after the final RMSNorm for "post_norm", before it for "pre_norm").
  ///
  /// `candidates` (optional): one id list per logit row, e.g. the ids a grammar allows. When given for
  /// every logit row and the LM head is packed for the AMX tiles (bf16 compute), only the LM head's
  /// groups of 16 rows that hold a candidate of some row are computed (cpu::gemm_packed_groups): their
  /// values are bit-identical to the full product, every other logit is -infinity. Otherwise (or with
  /// more than half of the groups needed) all logits are computed.
  virtual void forward(const Batch& batch, KvCache& kv, float* logits, float* hidden, ThreadPool* pool,
                       std::span<const std::vector<std::int32_t>> candidates = {}) = 0;

  /// Draft depths the MTP module can run (0: the checkpoint has none). The Qwen3-Next layout's one
  /// module is applied recursively; the DeepSeek-V3 layout's k-th module serves depth k (the last one
  /// serves deeper depths).
  virtual std::size_t mtp_depths() const { return 0; }

  /// One MTP step at draft depth `depth` (1-based) over a flat batch of rows (ARCHITECTURE.md "MTP";
  /// the recursion of tools/train/train.py forward_losses). Row t of sequence s at index i:
  ///   x = fc(concat(norm_e(embed(batch.tokens[t])), norm_h(hidden_in[t])))  -> decoder layer -> norm
  /// where hidden_in is the state of row i one depth lower (depth 1: the main model's hidden state of
  /// position i; depth d > 1: hidden_out of depth d - 1 at row i) and batch.tokens[t] is token i + depth.
  /// batch.positions[t] = i is both the RoPE position and the slot in the depth's own KV layer, so
  /// depth d attends over rows 0..i of depth d (RoPE is relative: the training's position offset of
  /// d - 1 does not change the scores). Writes hidden_out [batch.size(), hidden_size] f32 (the module
  /// output after its norm, the input of depth + 1) and the logits of rows with batch.logits[t] = 1 to
  /// `logits` [batch.n_logits(), vocab_size] (predicting token i + depth + 1).
  /// Throws std::invalid_argument on depth 0 or > mtp_depths(), a KV cache without that depth's layer,
  /// or the errors of forward().
  /// `draft_vocab` (0: all) limits the logits to token ids 0..draft_vocab-1 (rows [n_logits, draft_vocab]):
  /// byte-level BPE ids are in merge order, roughly by frequency, so the first ids cover most text at a
  /// fraction of the LM head's cost (FR-Spec, Zhao et al. 2025: drafting over a frequency-ranked sub-vocabulary).
  /// `candidates` (optional): one id list per logit row (ids < draft_vocab when it is set); when every
  /// list is non-empty, only those logits are computed (dot products, f32 accumulation) and the rest
  /// of each row is -infinity: a draft position where the grammar allows few tokens reads a few rows
  /// of the LM head instead of all of them.
  virtual void mtp_forward(std::size_t depth, const Batch& batch, const float* hidden_in, KvCache& kv,
                           float* hidden_out, float* logits, ThreadPool* pool, std::size_t draft_vocab = 0,
                           std::span<const std::vector<std::int32_t>> candidates = {});

  /// Bytes of weights one decode step reads (all matrices incl. the LM head, norms, one embedding row).
  virtual std::size_t weight_bytes_per_step() const = 0;
  /// Bytes of weights one MTP step reads without / with its LM head (0 without an MTP module).
  virtual std::size_t mtp_weight_bytes_per_step() const { return 0; }

  /// Whether this model computes in bf16 (see Compute; false: exact f32).
  virtual bool bf16_compute() const { return false; }
};

/// How the CPU backend computes a model's products and keeps its KV cache.
///  exact: f32 (weights widened exactly, f32 accumulation, f32 KV cache): follows an f32 reference.
///  bf16:  as a bf16 checkpoint runs in bf16 (Hugging Face dtype="auto", vLLM): activations rounded to
///         bf16 at every product, AMX tiles with f32 accumulation, matrices packed once at load, bf16 KV
///         cache read on the tiles (cpu::gemm_packed, cpu::attention). Needs AMX-BF16; exact elsewhere.
///  automatic: bf16 for a checkpoint stored in bf16 (its embedding table) when AMX-BF16 is usable,
///         exact otherwise (compute in the checkpoint's dtype). The environment variable
///         QUARRY_CPU_KERNELS overrides it: "bf16" picks bf16, another kernel set name picks exact.
enum class Compute : std::uint8_t { automatic, exact, bf16 };

/// "auto", "exact" or "bf16"; parse_compute() throws std::invalid_argument on anything else.
const char* compute_name(Compute c);
Compute parse_compute(std::string_view name);

/// Loads the model in `dir` (config.json + safetensors, memory-mapped) for its architecture.
/// Throws std::runtime_error naming the file on an unsupported architecture, a missing or
/// mis-shaped tensor, an unsupported dtype, or a truncated or malformed file.
std::unique_ptr<Model> load_model(const std::filesystem::path& dir, Compute compute = Compute::automatic);

}  // namespace quarry::engine
