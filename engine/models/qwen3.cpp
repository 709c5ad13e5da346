// The Qwen3 decoder: Qwen3ForCausalLM (dense; HF transformers models/qwen3/modeling_qwen3.py), and the
// body of Qwen3MoeForCausalLM (qwen3_moe.cpp), whose FFN is the sparse MoE block in the layers the config
// makes sparse (ModelConfig::is_sparse_layer).
//   x = embed(tokens)
//   per layer: h = RMSNorm(x); q,k,v = h Wq^T, h Wk^T, h Wv^T; q,k = RMSNorm over head_dim (q_norm, k_norm);
//              RoPE(q, k); o = attention (GQA, causal, paged KV) Wo^T; x += o;
//              h = RMSNorm(x); x += (silu(h Wg^T) * (h Wu^T)) Wd^T   (dense)
//                              x += sum over the top-k experts e of w_e SwiGLU_e(h)   (sparse: layers::moe_block)
//   logits = RMSNorm(x) W_lm^T  (W_lm = embed when tie_word_embeddings)
// With MTP modules (ARCHITECTURE.md "MTP"): the Qwen3-Next / Qwen3.5 `mtp.*` layout (one module, applied
// recursively) or the DeepSeek-V3 layout (`num_nextn_predict_layers` modules model.layers.{L + k}: enorm,
// hnorm, eh_proj, shared_head); one KV layer per draft depth after the main layers. A module's layer is
// sparse when the checkpoint has its router.
#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/models/layers.hpp"
#include "engine/models/model.hpp"
#include "engine/models/qwen3.hpp"
#include "engine/models/registry.hpp"
#include "engine/models/safetensors.hpp"
#include "engine/models/tensor_parallel.hpp"

namespace quarry::engine {

namespace {

using layers::DecoderLayerWeights;

/// One MTP module: x = fc([norm_e(embed(t)), norm_h(h)]) -> decoder layer -> norm -> lm_head.
struct MtpModule {
  DeviceBuffer norm_e, norm_h, norm;
  std::unique_ptr<Weight> fc;        // [H, 2H]
  std::unique_ptr<Weight> own_head;  // DeepSeek shared_head.head, when the module carries its own
  DecoderLayerWeights layer;
};

/// Recursive use of the one Qwen3-Next module is unbounded; this caps the KV layers reserved for it.
constexpr std::size_t kMaxRecursiveMtpDepth = 8;

/// Workspace slots of this model beyond the shared builders'.
enum : std::size_t { kX = layers::kFirstFreeSlot, kCat };

class Qwen3 final : public RankModel {
 public:
  Qwen3(const ModelConfig& c, std::unique_ptr<TensorStore> store, std::shared_ptr<Backend> backend, Compute requested,
        const TensorParallel& tp = {})
      : cfg_(c), local_(c), tp_(tp), store_(std::move(store)), backend_(std::move(backend)), ws_(*backend_) {
    const std::size_t H = c.hidden_size;
    if (c.attention_bias)
      throw std::runtime_error(store_->origin().string() + ": attention_bias=true is not supported for Qwen3");
    if (tp_.active()) {
      try {
        dims_ = shard_dims(c, tp_.rank, tp_.size);
      } catch (const std::invalid_argument& e) {
        throw std::runtime_error(store_->origin().string() + ": " + e.what());
      }
      local_ = local_config(c, dims_);
    }
    // The checkpoint's dtype, as its embedding table is stored.
    const DType ckpt = store_->get("model.embed_tokens.weight", {c.vocab_size, H}).dtype;
    compute_ = backend_->resolve_compute(requested, ckpt);
    const layers::WeightLoader w(*store_, *backend_, compute_, &cfg_.quantization, tp_.active() ? &dims_ : nullptr,
                                 &keep_);
    const auto sparse_module = [&](const std::string& p) { return c.num_experts > 0 && store_->has(p + "mlp.gate.weight"); };
    // Tied checkpoints usually omit lm_head.weight (save_pretrained drops it); some keep a copy.
    const bool tied_head = c.tie_word_embeddings && !store_->has("lm_head.weight");
    const std::string head_name = tied_head ? "model.embed_tokens.weight" : "lm_head.weight";
    // Under tensor parallelism the embedding table is whole on every rank and the head is the rank's slice.
    embed_ = w.matrix("model.embed_tokens.weight", c.vocab_size, H,
                      tied_head && !tp_.active() ? WeightUse::both : WeightUse::embedding);
    for (std::size_t l = 0; l < c.num_hidden_layers; ++l)
      layers_.push_back(
          layers::load_decoder_layer(w, "model.layers." + std::to_string(l) + ".", c, c.is_sparse_layer(l)));
    final_norm_ = w.vector("model.norm.weight", H);
    if (tp_.active()) own_lm_head_ = w.row_slice(head_name, c.vocab_size, H, dims_.vocab0, dims_.vocab);
    else if (!tied_head) own_lm_head_ = w.matrix("lm_head.weight", c.vocab_size, H);
    inv_freq_ = layers::rope_inv_freq(*backend_, c);

    if (c.mtp_num_hidden_layers > 0) {  // Qwen3-Next / Qwen3.5: mtp.*
      MtpModule m;
      m.fc = w.matrix("mtp.fc.weight", H, 2 * H);
      m.norm_e = w.vector("mtp.pre_fc_norm_embedding.weight", H);
      m.norm_h = w.vector("mtp.pre_fc_norm_hidden.weight", H);
      m.layer = layers::load_decoder_layer(w, "mtp.layers.0.", c, sparse_module("mtp.layers.0."));
      m.norm = w.vector("mtp.norm.weight", H);
      mtp_.push_back(std::move(m));
      mtp_depths_ = kMaxRecursiveMtpDepth;
    } else if (c.num_nextn_predict_layers > 0) {  // DeepSeek-V3: model.layers.{L + k}.*
      for (std::size_t k = 0; k < c.num_nextn_predict_layers; ++k) {
        const std::string p = "model.layers." + std::to_string(c.num_hidden_layers + k) + ".";
        MtpModule m;
        m.fc = w.matrix(p + "eh_proj.weight", H, 2 * H);
        m.norm_e = w.vector(p + "enorm.weight", H);
        m.norm_h = w.vector(p + "hnorm.weight", H);
        m.layer = layers::load_decoder_layer(w, p, c, sparse_module(p));
        m.norm = w.vector(p + "shared_head.norm.weight", H);
        if (store_->has(p + "shared_head.head.weight"))
          m.own_head = tp_.active() ? w.row_slice(p + "shared_head.head.weight", c.vocab_size, H, dims_.vocab0, dims_.vocab)
                                    : w.matrix(p + "shared_head.head.weight", c.vocab_size, H);
        mtp_.push_back(std::move(m));
      }
      mtp_depths_ = std::max(kMaxRecursiveMtpDepth, c.num_nextn_predict_layers);
    }
  }

  const ModelConfig& config() const override { return cfg_; }
  Backend& backend() const override { return *backend_; }
  Compute compute() const override { return compute_; }

  KvSpec kv_spec() const override {
    KvSpec s;  // this rank's KV heads
    s.n_layers = cfg_.num_hidden_layers + mtp_depths_;
    s.n_kv_heads = local_.num_key_value_heads;
    s.head_dim = cfg_.head_dim;
    s.dtype = backend_->kv_dtype(compute_, local_.num_attention_heads, s.n_kv_heads, s.head_dim, s.block_size);
    return s;
  }

  std::size_t weight_bytes_per_step() const override {
    std::size_t n = lm_head().bytes() + embed_->cols * dtype_size(embed_->dtype);
    for (const auto& L : layers_) n += L.active_bytes();
    return n + final_norm_.bytes();
  }

  std::size_t mtp_weight_bytes_per_step() const override {
    if (mtp_.empty()) return 0;
    const MtpModule& m = mtp_[0];
    return m.fc->bytes() + m.layer.active_bytes() + m.norm_e.bytes() + m.norm_h.bytes() + m.norm.bytes() +
           embed_->cols * dtype_size(embed_->dtype);
  }

  std::size_t mtp_depths() const override { return mtp_depths_; }

  // Sparse layers are recordable where the backend routes and runs the experts on the device.
  bool supports_capture(std::size_t n_tokens) const override {
    for (const auto& L : layers_)
      if (L.sparse() && !backend_->moe_on_device(*L.moe.experts, n_tokens)) return false;
    for (const auto& m : mtp_)
      if (m.layer.sparse() && !backend_->moe_on_device(*m.layer.moe.experts, n_tokens)) return false;
    return true;
  }

  bool supports_lm_head_groups() const override {
    return !tp_.active() && backend_->supports_matmul_groups(lm_head());
  }

  using Model::forward;
  using Model::mtp_forward;

  bool forward(const ForwardBatch& b, KvCache& kv, const ForwardOutputs& out,
               std::span<const std::uint32_t> lm_head_groups) override {
    return forward_rank(b, kv.storage(), out, out.logits != nullptr, lm_head_groups);
  }

  void mtp_forward(std::size_t depth, const ForwardBatch& b, const float* hidden_in, KvCache& kv,
                   const ForwardOutputs& out, std::size_t draft_vocab,
                   std::span<const std::vector<std::int32_t>> candidates) override {
    mtp_forward_rank(depth, b, hidden_in, kv.storage(), out, out.logits != nullptr, draft_vocab, candidates);
  }

  bool forward_rank(const ForwardBatch& b, KvStorage& kv, const ForwardOutputs& out, bool want_logits,
                    std::span<const std::uint32_t> lm_head_groups) override {
    const std::size_t T = b.size();
    if (T == 0) return false;
    const std::size_t H = cfg_.hidden_size;
    const float eps = static_cast<float>(cfg_.rms_norm_eps);
    Backend& be = *backend_;
    float* x = ws_.get(kX, T * H);
    const auto rope = layers::rope_tables(be, ws_, b, inv_freq_.as<float>(), cfg_.rotary_dim());
    be.embedding(b.staged().tokens, T, *embed_, x, H);
    for (std::size_t l = 0; l < layers_.size(); ++l)
      layers::decoder_layer(be, ws_, layers_[l], local_, l, x, b, kv, rope, tp_.comm);
    if (out.hidden) {  // every row's state for the MTP module
      if (cfg_.mtp_hidden_state == "pre_norm") be.copy_rows(out.hidden, H, x, H, T, H);
      else be.rms_norm(x, out.hidden, T, H, H, final_norm_.as<float>(), eps);
    }
    // Final norm and LM head only for the rows whose logits are wanted.
    return layers::head_logits(be, ws_, tp_, dims_, cfg_, lm_head(), cfg_.vocab_size, final_norm_.as<float>(),
                               want_logits, x, b, out.logits, lm_head_groups, {});
  }

  void mtp_forward_rank(std::size_t depth, const ForwardBatch& b, const float* hidden_in, KvStorage& kv,
                        const ForwardOutputs& out, bool want_logits, std::size_t draft_vocab,
                        std::span<const std::vector<std::int32_t>> candidates) override {
    if (mtp_.empty()) throw std::invalid_argument("mtp_forward: the model has no MTP module");
    if (depth == 0 || depth > mtp_depths_)
      throw std::invalid_argument("mtp_forward: depth " + std::to_string(depth) + " outside 1.." +
                                  std::to_string(mtp_depths_));
    const std::size_t kv_layer = cfg_.num_hidden_layers + depth - 1;
    if (kv_layer >= kv.spec().n_layers)
      throw std::invalid_argument("mtp_forward: the KV cache has no layer for draft depth " + std::to_string(depth));
    const std::size_t T = b.size();
    if (T == 0) return;
    if (!out.hidden) throw std::invalid_argument("mtp_forward: the hidden output is required");
    const MtpModule& m = mtp_[std::min(depth, mtp_.size()) - 1];
    const std::size_t H = cfg_.hidden_size;
    const float eps = static_cast<float>(cfg_.rms_norm_eps);
    Backend& be = *backend_;
    float* x = ws_.get(kX, T * H);
    layers::mtp_input(be, *embed_, *m.fc, m.norm_e.as<float>(), m.norm_h.as<float>(), eps, b, hidden_in, H,
                      ws_.get(kCat, T * 2 * H), x);
    const auto rope = layers::rope_tables(be, ws_, b, inv_freq_.as<float>(), cfg_.rotary_dim());
    layers::decoder_layer(be, ws_, m.layer, local_, kv_layer, x, b, kv, rope, tp_.comm);
    be.rms_norm(x, out.hidden, T, H, H, m.norm.as<float>(), eps);
    // The draft logits: the first draft_vocab rows of the head (same storage, fewer rows).
    layers::draft_head(be, ws_, tp_, dims_, cfg_, m.own_head ? *m.own_head : lm_head(), draft_vocab, want_logits,
                       out.hidden, b, out.logits, candidates);
  }

 private:
  const Weight& lm_head() const { return own_lm_head_ ? *own_lm_head_ : *embed_; }

  ModelConfig cfg_;
  ModelConfig local_;  ///< cfg_ as this rank's layers see it (tensor parallel: its heads and widths)
  TensorParallel tp_;
  ShardDims dims_;
  std::vector<std::vector<unsigned char>> keep_;  ///< host copies of column slices (backends may read in place)
  std::unique_ptr<TensorStore> store_;
  std::shared_ptr<Backend> backend_;
  Compute compute_ = Compute::exact;
  mutable layers::Workspace ws_;
  std::unique_ptr<Weight> embed_, own_lm_head_;
  std::vector<DecoderLayerWeights> layers_;
  DeviceBuffer final_norm_, inv_freq_;
  std::vector<MtpModule> mtp_;
  std::size_t mtp_depths_ = 0;
};

}  // namespace

std::unique_ptr<Model> make_qwen3_decoder(const ModelConfig& config, std::unique_ptr<TensorStore> store,
                                          std::shared_ptr<Backend> backend, Compute compute) {
  return std::make_unique<Qwen3>(config, std::move(store), std::move(backend), compute);
}

std::unique_ptr<RankModel> make_qwen3_rank(const ModelConfig& config, std::unique_ptr<TensorStore> store,
                                           std::shared_ptr<Backend> backend, Compute compute,
                                           const TensorParallel& tp) {
  return std::make_unique<Qwen3>(config, std::move(store), std::move(backend), compute, tp);
}

std::unique_ptr<Model> make_qwen3(const ModelConfig& config, std::unique_ptr<TensorStore> store,
                                  std::shared_ptr<Backend> backend, Compute compute) {
  if (config.num_experts > 0)
    throw std::runtime_error(store->origin().string() + ": " + config.architecture + " with num_experts " +
                             std::to_string(config.num_experts) + ": a dense Qwen3 has no experts (Qwen3MoeForCausalLM?)");
  return make_qwen3_decoder(config, std::move(store), std::move(backend), compute);
}

}  // namespace quarry::engine
