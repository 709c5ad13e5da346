// Shared layer builders of the architectures (llama.cpp's per-architecture files over common graph
// builders): weight loading onto a backend, the attention block, the SwiGLU MLP, the MTP module's
// input, the LM head. Each builder issues Backend ops only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/backend/backend.hpp"
#include "engine/backend/collective.hpp"
#include "engine/memory/kv_cache.hpp"
#include "engine/models/config.hpp"
#include "engine/models/model.hpp"
#include "engine/models/parallel.hpp"
#include "engine/models/safetensors.hpp"

namespace quarry::engine::layers {

/// Loads a checkpoint's tensors onto a backend, checking names and shapes (TensorStore::get).
class WeightLoader {
 public:
  /// `quant`: the checkpoint's quantization_config (null or empty: none); must outlive the loader.
  WeightLoader(const TensorStore& store, Backend& backend, Compute compute, const QuantizationConfig* quant = nullptr)
      : store_(store), backend_(backend), compute_(compute), quant_(quant) {}
  /// A loader of rank `shard`'s slices (tensor parallel): load_attention, load_swiglu, load_moe and
  /// vocab_rows take the slices parallel.hpp describes. Column slices are copied into `keep` (host
  /// memory the model keeps as long as its weights: backends may read weights in place).
  WeightLoader(const TensorStore& store, Backend& backend, Compute compute, const QuantizationConfig* quant,
               const ShardDims* shard, std::vector<std::vector<unsigned char>>* keep)
      : store_(store), backend_(backend), compute_(compute), quant_(quant), shard_(shard), keep_(keep) {}
  /// The slices this loader takes (null: whole matrices).
  const ShardDims* shard() const { return shard_; }
  /// Rows [row0, row0 + n) of the matrix `name` [rows, cols] (a column-parallel slice: contiguous, read
  /// in place; a quantized module's slice is copied into `keep`). Throws as matrix(); std::runtime_error
  /// where the slice cuts through a quantized module's scale block or group.
  std::unique_ptr<Weight> row_slice(const std::string& name, std::size_t rows, std::size_t cols, std::size_t row0,
                                    std::size_t n, WeightUse use = WeightUse::matmul) const;
  /// Columns [col0, col0 + n) of the matrix `name` [rows, cols] (a row-parallel slice), copied into
  /// `keep`. Throws as row_slice().
  std::unique_ptr<Weight> col_slice(const std::string& name, std::size_t rows, std::size_t cols, std::size_t col0,
                                    std::size_t n) const;
  /// The matrix `name` of shape [rows, cols], in its stored dtype, or packed as the quantization config
  /// says where the checkpoint stores the module quantized (quant_loader.hpp). Throws std::runtime_error
  /// naming the checkpoint and the tensor when it is missing or mis-shaped.
  std::unique_ptr<Weight> matrix(const std::string& name, std::size_t rows, std::size_t cols,
                                 WeightUse use = WeightUse::matmul) const;
  /// Rows [row0, row0 + rows) of slice `index` of the 3-D tensor `name` of shape [count, slice_rows, cols]
  /// (fused expert tensors: gate_up_proj [E, 2 I, H]), as a [rows, cols] matrix in its stored dtype. The
  /// slice is read where it lies in the mapped file. Throws as matrix().
  std::unique_ptr<Weight> slice(const std::string& name, std::size_t count, std::size_t slice_rows, std::size_t cols,
                                std::size_t index, std::size_t row0, std::size_t rows) const;
  /// Slice `index` of the 3-D tensor `name` [count, slice_rows, cols], its columns [col0, col0 + n)
  /// (a row-parallel slice of a fused expert tensor), copied into `keep`.
  std::unique_ptr<Weight> slice_cols(const std::string& name, std::size_t count, std::size_t slice_rows,
                                     std::size_t cols, std::size_t index, std::size_t col0, std::size_t n) const;
  /// The vector `name` of n elements, widened to f32 (norm weights: tiny).
  DeviceBuffer vector(const std::string& name, std::size_t n) const;
  bool has(const std::string& name) const { return store_.has(name); }
  const TensorStore& store() const { return store_; }
  Backend& backend() const { return backend_; }
  Compute compute() const { return compute_; }

 private:
  const TensorStore& store_;
  Backend& backend_;
  Compute compute_;
  const QuantizationConfig* quant_ = nullptr;
  const ShardDims* shard_ = nullptr;
  std::vector<std::vector<unsigned char>>* keep_ = nullptr;
  /// Columns [col0, col0 + n) of the [rows, cols] matrix at `base` (stored dtype), into keep_.
  std::unique_ptr<Weight> copy_cols(const std::string& name, const void* base, DType dtype, std::size_t rows,
                                    std::size_t cols, std::size_t col0, std::size_t n) const;
  /// The slice of `name` where the checkpoint stores it quantized (quant_loader.hpp slice_quantized), its
  /// packed values kept in keep_; null for a float matrix.
  std::unique_ptr<Weight> quantized_slice(const std::string& name, std::size_t rows, std::size_t cols, std::size_t row0,
                                          std::size_t n_rows, std::size_t col0, std::size_t n_cols, WeightUse use) const;
};

/// The attention part of a decoder layer (Qwen3: q/k RMSNorm over head_dim, no bias).
struct AttentionWeights {
  DeviceBuffer input_norm, q_norm, k_norm;  ///< f32 [hidden], [head_dim], [head_dim]
  std::unique_ptr<Weight> wq, wk, wv, wo;
  std::size_t bytes() const;
};

/// The SwiGLU MLP of a decoder layer.
struct MlpWeights {
  DeviceBuffer post_norm;  ///< f32 [hidden]
  std::unique_ptr<Weight> w_gate, w_up, w_down;
  std::size_t bytes() const;
};

/// The sparse mixture-of-experts FFN of a decoder layer (HF Qwen3MoeSparseMoeBlock): a linear router
/// over the experts, softmax, top-k, and SwiGLU experts.
struct MoeWeights {
  DeviceBuffer post_norm;          ///< f32 [hidden]
  std::unique_ptr<Weight> router;  ///< [num_experts, hidden]
  std::vector<std::unique_ptr<Weight>> gate, up, down;  ///< per expert [I, hidden], [I, hidden], [hidden, I]
  std::unique_ptr<ExpertSet> experts;                   ///< the same, as the backend addresses them
  std::size_t top_k = 0;
  bool norm_topk_prob = false;
  /// A shared expert runs as the last expert of `experts` (which then holds gate.size() + 1), its gate as
  /// the last row of `router` ([num_experts + 1, hidden]): Backend::moe_route's shared_expert. Its weights
  /// are the model's; bytes() and active_bytes() count the routed experts only.
  bool shared_expert = false;
  /// Every expert's bytes (what the model holds).
  std::size_t bytes() const;
  /// What one token reads: the router, the norm and top_k experts (experts are equal in size).
  std::size_t active_bytes() const;
};

struct DecoderLayerWeights {
  AttentionWeights attn;
  MlpWeights mlp;  ///< dense layers (w_gate null in a sparse layer)
  MoeWeights moe;  ///< sparse layers (router null in a dense layer)
  bool sparse() const { return moe.router != nullptr; }
  std::size_t bytes() const { return attn.bytes() + (sparse() ? moe.bytes() : mlp.bytes()); }
  /// Bytes one decode token reads (active experts only in a sparse layer).
  std::size_t active_bytes() const { return attn.bytes() + (sparse() ? moe.active_bytes() : mlp.bytes()); }
};

/// `prefix` + self_attn.{q,k,v,o}_proj, q_norm, k_norm, input_layernorm (HF Qwen3 names).
AttentionWeights load_attention(const WeightLoader& w, const std::string& prefix, const ModelConfig& c);
/// `prefix` + mlp.{gate,up,down}_proj, post_attention_layernorm.
MlpWeights load_swiglu(const WeightLoader& w, const std::string& prefix, const ModelConfig& c);
/// `prefix` + mlp.gate (the router), the experts in either layout, post_attention_layernorm: per-expert
/// tensors mlp.experts.N.{gate,up,down}_proj.weight (hub checkpoints, save_pretrained), or fused 3-D
/// mlp.experts.gate_up_proj [E, 2 I, H] (gate rows first) and mlp.experts.down_proj [E, H, I].
MoeWeights load_moe(const WeightLoader& w, const std::string& prefix, const ModelConfig& c);
/// The attention and the FFN: the MoE block where `sparse`, else the dense SwiGLU MLP.
DecoderLayerWeights load_decoder_layer(const WeightLoader& w, const std::string& prefix, const ModelConfig& c,
                                       bool sparse = false);

/// Activation buffers of forward calls in the backend's memory, grown to the largest batch seen.
class Workspace {
 public:
  explicit Workspace(Backend& backend) : backend_(backend) {}
  /// A buffer of at least `floats` f32 values for slot `slot` (contents kept only while it does not grow).
  float* get(std::size_t slot, std::size_t floats);

 private:
  Backend& backend_;
  std::vector<DeviceBuffer> slots_;
};

/// Slots of Workspace used by the builders below (a model may use others from kFirstFreeSlot on).
enum Slot : std::size_t {
  kH, kQ, kK, kV, kAttn, kGate, kUp, kCos, kSin,
  kRouter, kRouting, kMoeScratch, kMoeOut,  // the MoE block's
  kHeadRows, kVocabLocal, kVocabGathered,   // head_logits' (the vocabulary-parallel head's)
  kFirstFreeSlot
};

/// RoPE inverse frequencies [rotary_dim / 2] of `c` on the backend, as HF computes them: the exponent
/// 2i / rotary_dim in f32, then rope_theta ** exponent, then the reciprocal.
DeviceBuffer rope_inv_freq(Backend& b, const ModelConfig& c);

/// The MTP module's input (Qwen3-Next / DeepSeek-V3 layout): x [T, H] = fc([norm_e(embed(tokens)),
/// norm_h(hidden_in)]) for the staged batch's tokens; `cat` is scratch of [T, 2H]. hidden_in [T, H].
void mtp_input(Backend& b, const Weight& embed, const Weight& fc, const float* norm_e, const float* norm_h, float eps,
               const ForwardBatch& batch, const float* hidden_in, std::size_t hidden, float* cat, float* x);

/// The RoPE tables of a batch: cos/sin [n_tokens, rotary_dim / 2] (computed once per forward call and
/// shared by every layer).
struct RopeTables {
  const float* cos = nullptr;
  const float* sin = nullptr;
  std::size_t rotary_dim = 0;
};
RopeTables rope_tables(Backend& b, Workspace& ws, const ForwardBatch& batch, const float* inv_freq,
                       std::size_t rotary_dim);

/// x [T, H] += in [T, w.cols] . W^T (stride ldin). With `tp` (W a row-parallel slice) the ranks' partial
/// products are summed by one all-reduce before the add. `scratch` holds [T, H].
void add_projection(Backend& b, Collective* tp, const float* in, std::size_t T, std::size_t ldin, const Weight& w,
                    float* x, std::size_t H, float* scratch);

// The blocks below take `c` as this rank's layers see it (local_config under tensor parallelism) and
// `tp`, this rank's collectives (null without tensor parallelism).

/// x [T, hidden] += o_proj(attention(RoPE(q_norm(q_proj(h))), RoPE(k_norm(k_proj(h))), v_proj(h))) with
/// h = input_norm(x), K/V stored into KV layer `kv_layer` (HF Qwen3Attention, GQA, causal, paged).
void attention_block(Backend& b, Workspace& ws, const AttentionWeights& w, const ModelConfig& c, std::size_t kv_layer,
                     float* x, const ForwardBatch& batch, KvStorage& kv, const RopeTables& rope,
                     Collective* tp = nullptr);
/// x [T, hidden] += down_proj(silu(gate_proj(h)) * up_proj(h)) with h = post_norm(x) (HF Qwen3MLP).
void swiglu_block(Backend& b, Workspace& ws, const MlpWeights& w, const ModelConfig& c, float* x, std::size_t T,
                  Collective* tp = nullptr);
/// x [T, hidden] += the MoE block of h = post_norm(x) (HF Qwen3MoeSparseMoeBlock): router logits h R^T,
/// softmax over the experts in f32, the top_k largest (renormalised to sum 1 when norm_topk_prob)
/// (Backend::moe_route), each token's experts' SwiGLU outputs weighted and summed in expert order, added
/// to x (Backend::moe_experts); a shared expert in the set (MoeWeights::shared_expert) is the last of
/// each token's pairs, weighted by sigmoid of its gate. `extra` [T, hidden] (optional: a shared expert's
/// output computed apart) is added too;
/// under tensor parallelism it is this rank's partial sum, reduced with the experts' in the one all-reduce.
void moe_block(Backend& b, Workspace& ws, const MoeWeights& w, const ModelConfig& c, float* x, std::size_t T,
               Collective* tp = nullptr, const float* extra = nullptr);
/// One decoder layer: attention_block then swiglu_block or moe_block.
void decoder_layer(Backend& b, Workspace& ws, const DecoderLayerWeights& w, const ModelConfig& c, std::size_t kv_layer,
                   float* x, const ForwardBatch& batch, KvStorage& kv, const RopeTables& rope,
                   Collective* tp = nullptr);

/// The LM head over the batch rows that want logits: rows of `states` [T, hidden] gathered, normed by
/// `norm` (null: already normed), then logits [n_logits, ld] = rows . head[0:n_rows]^T, or the ids of
/// `lm_head_groups` only (bit-identical, -infinity elsewhere) where the backend supports it, or the ids
/// of `candidates` only (dot products, -infinity elsewhere) when every row has some. `sel` is scratch of
/// [n_logits, hidden]. Returns true if the groups restriction was applied.
bool lm_head(Backend& b, const Weight& head, std::size_t n_rows, const float* norm, float eps, const float* states,
             std::size_t hidden, const ForwardBatch& batch, float* sel, float* logits,
             std::span<const std::uint32_t> lm_head_groups, std::span<const std::vector<std::int32_t>> candidates);

/// The vocabulary-parallel LM head of one rank (tensor parallel): `head` holds this rank's rows
/// [rank * chunk, rank * chunk + head.rows) of a vocab_size-row head, chunk = ceil(vocab_size / ranks).
/// Like lm_head() over the first n_rows ids (n_rows <= vocab_size: a draft vocabulary): each rank computes
/// the logits of its ids below n_rows (or of the `candidates` it holds, when every row has some) into
/// `local` [n_logits, chunk], all-gathers them into `gathered` [ranks, n_logits, chunk], and rank 0 writes
/// logits [n_logits, n_rows] (`logits` null elsewhere). `sel`: scratch [n_logits, hidden]. Every rank
/// calls it with the same shapes.
void lm_head_parallel(Backend& b, Collective& tp, const Weight& head, std::size_t vocab_size, std::size_t chunk,
                      std::size_t n_rows, const float* norm, float eps, const float* states, std::size_t hidden,
                      const ForwardBatch& batch, float* sel, float* local, float* gathered, float* logits,
                      std::span<const std::vector<std::int32_t>> candidates);

/// A model's logits over the first n_rows ids of `head` from `states` [T, hidden] (normed by `norm`
/// unless null): lm_head() (lm_head_groups and candidates as it says), or, when `tp` is active,
/// lm_head_parallel() with chunk = dims.vocab_chunk (every rank calls it; want_logits false skips the head
/// on all of them; the groups restriction is not applied). Scratch from `ws` (kHeadRows, kVocabLocal,
/// kVocabGathered); c: the whole model's config (vocab_size, hidden_size, rms_norm_eps). Returns true if
/// the groups restriction was applied.
bool head_logits(Backend& b, Workspace& ws, const TensorParallel& tp, const ShardDims& dims, const ModelConfig& c,
                 const Weight& head, std::size_t n_rows, const float* norm, bool want_logits, const float* states,
                 const ForwardBatch& batch, float* logits, std::span<const std::uint32_t> lm_head_groups,
                 std::span<const std::vector<std::int32_t>> candidates);

/// An MTP module's draft logits from its normed states `hidden` [T, hidden]: head_logits() over the first
/// draft_vocab ids of `head` (0 or >= vocab_size: all of them). Logits [n_logits, ld] with ld the rows
/// computed.
void draft_head(Backend& b, Workspace& ws, const TensorParallel& tp, const ShardDims& dims, const ModelConfig& c,
                const Weight& head, std::size_t draft_vocab, bool want_logits, const float* hidden,
                const ForwardBatch& batch, float* logits, std::span<const std::vector<std::int32_t>> candidates);

}  // namespace quarry::engine::layers
