// Hybrid Qwen models: Qwen3NextForCausalLM (Qwen3-Next-80B-A3B) and the text models of Qwen3.5
// (Qwen3_5ForCausalLM, dense; Qwen3_5MoeForCausalLM, sparse), after HF transformers
// models/qwen3_next/modeling_qwen3_next.py and models/qwen3_5{,_moe}/modeling_qwen3_5{,_moe}.py.
//   x = embed(tokens)
//   per layer (config.layer_types): h = RMSNorm1p(x) with RMSNorm1p(v) = RMSNorm(v) * (1 + w) (zero-centred)
//     linear_attention: qkv, z, b, a = h W^T;  core = GatedDeltaNet(qkv, a, b) (Backend::gated_delta_net:
//       causal conv1d + SiLU, l2-normalised q/k, gated delta rule with per-sequence recurrent state);
//       x += (RMSNorm(core per value head) * w * silu(z)) W_out^T
//     full_attention: q|gate = h Wq^T (per head: head_dim query values, then head_dim gate values);
//       q, k = RMSNorm1p per head, partial RoPE (partial_rotary_factor); o = attention (GQA, paged KV);
//       x += (o * sigmoid(gate)) Wo^T
//     h = RMSNorm1p(x); x += dense SwiGLU, or the sparse MoE block plus, when shared_expert_intermediate_size
//       is set, sigmoid(h g^T) * SharedSwiGLU(h)
//   logits = RMSNorm1p(x) W_lm^T
// Qwen3-Next stores the linear-attention input projections grouped per key head (in_proj_qkvz: per key
// head [q, k, v, z]; in_proj_ba: per key head [b, a]); they are regrouped at load into the Qwen3.5 layout
// (in_proj_qkv = all q, all k, all v; in_proj_z; in_proj_b; in_proj_a), so one forward serves both.
// The recurrent state lives in the KV storage per sequence (KvStorage::recurrent_state, slots handed out
// by KvCache); a cached prefix resumes from a snapshot of it (KvCache::save_state_snapshot). Under tensor
// parallelism (parallel.hpp) each rank holds its linear-attention key heads with their value heads (and
// their recurrent state), its attention heads, its slices of the FFN and the shared expert, and its slice
// of the vocabulary. MTP drafting works as for Qwen3 (the `mtp.*` module, recursive); a verify step
// that rejects drafts restores the state saved before it and feeds the accepted tokens again (engine.cpp).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/core/dtype.hpp"
#include "engine/models/layers.hpp"
#include "engine/models/model.hpp"
#include "engine/models/quant_loader.hpp"
#include "engine/models/registry.hpp"
#include "engine/models/safetensors.hpp"
#include "engine/models/tensor_parallel.hpp"

namespace quarry::engine {

namespace {

using layers::WeightLoader;

/// A weight made from selected rows of a checkpoint tensor (regrouped projections). Rows that are not one
/// contiguous range are copied into `host` (for a quantized module, its packed values), which the weight
/// may read in place and which therefore lives as long as it; empty when the weight reads the file.
struct RowsWeight {
  std::vector<unsigned char> host;
  std::unique_ptr<Weight> w;
};

/// Rows `rows` of the linear `name` ([total, cols]), in that order: one contiguous range through
/// WeightLoader::row_slice (read in place, or the packed slice), others gathered: packed, in the
/// checkpoint's layout, where `quant` says the module is quantized (quant_loader.hpp gather_rows_quantized:
/// whole scale blocks, every GPTQ column), else copied in their float dtype.
RowsWeight rows_of(const WeightLoader& w, const QuantizationConfig& quant, const std::string& name,
                   std::size_t total, std::size_t cols, const std::vector<std::size_t>& rows) {
  std::vector<std::pair<std::size_t, std::size_t>> runs;  // [first row, count), contiguous
  for (const std::size_t row : rows) {
    if (!runs.empty() && runs.back().first + runs.back().second == row) ++runs.back().second;
    else runs.emplace_back(row, 1);
  }
  RowsWeight r;
  if (runs.size() == 1) {
    r.w = w.row_slice(name, total, cols, runs[0].first, runs[0].second);
    return r;
  }
  if (quant.present())
    if (auto full = read_quantized(w.store(), quant, name, total, cols)) {
      LoadedQuantized g = gather_rows_quantized(*full, runs, w.store().origin().string() + ": " + name);
      r.w = w.backend().load_quantized(g.m, WeightUse::matmul, w.compute());
      r.host = std::move(g.data);  // the same buffer: moving a vector keeps its storage
      return r;
    }
  const TensorView& t = w.store().get(name, {total, cols});
  const std::size_t row_bytes = cols * dtype_size(t.dtype);
  r.host.resize(rows.size() * row_bytes);
  const auto* src = static_cast<const unsigned char*>(t.data);
  for (std::size_t i = 0; i < rows.size(); ++i) std::memcpy(r.host.data() + i * row_bytes, src + rows[i] * row_bytes, row_bytes);
  r.w = w.backend().load_matrix(r.host.data(), t.dtype, rows.size(), cols, WeightUse::matmul, w.compute());
  return r;
}

/// A vector widened to f32, plus `offset` (1 for the zero-centred RMSNorm weights: (1 + w)); with
/// `count`, only elements [first, first + count) (a rank's heads).
DeviceBuffer vector_plus(const WeightLoader& w, const std::string& name, const std::vector<std::size_t>& shape,
                         float offset, std::size_t first = 0, std::size_t count = SIZE_MAX) {
  const TensorView& t = w.store().get(name, shape);
  const std::size_t n = std::min(count, t.numel() - std::min(first, t.numel()));
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = element_as_f32(t.data, t.dtype, first + i) + offset;
  return w.backend().load_vector(v);
}

/// Rows `rows` of the [n, k] tensor `name` (stored with `shape`), widened to f32: the conv1d weights of a
/// rank's channels.
DeviceBuffer rows_f32(const WeightLoader& w, const std::string& name, const std::vector<std::size_t>& shape,
                      std::size_t k, const std::vector<std::size_t>& rows) {
  const TensorView& t = w.store().get(name, shape);
  std::vector<float> v(rows.size() * k);
  for (std::size_t i = 0; i < rows.size(); ++i)
    for (std::size_t j = 0; j < k; ++j) v[i * k + j] = element_as_f32(t.data, t.dtype, rows[i] * k + j);
  return w.backend().load_vector(v);
}

struct LinearAttention {
  DeviceBuffer input_norm;           ///< f32 [hidden], 1 + w
  RowsWeight qkv, z, b, a;           ///< [conv_dim, H], [nv dv, H], [nv, H], [nv, H]
  std::unique_ptr<Weight> w_out;     ///< [H, nv dv]
  DeviceBuffer conv_weight;          ///< f32 [conv_dim, K]
  DeviceBuffer A_log, dt_bias, norm; ///< f32 [nv], [nv], [dv] (the gated norm's plain weight)
  std::size_t state_offset = 0;      ///< floats into the sequence's recurrent state
  std::size_t bytes() const {
    return qkv.w->bytes() + z.w->bytes() + b.w->bytes() + a.w->bytes() + w_out->bytes() + input_norm.bytes() +
           conv_weight.bytes() + A_log.bytes() + dt_bias.bytes() + norm.bytes();
  }
};

struct GatedAttention {
  DeviceBuffer input_norm, q_norm, k_norm;  ///< f32, 1 + w
  RowsWeight wq, wgate;                     ///< [NH D, H] each
  std::unique_ptr<Weight> wk, wv, wo;
  std::size_t kv_layer = 0;
  std::size_t bytes() const {
    return wq.w->bytes() + wgate.w->bytes() + wk->bytes() + wv->bytes() + wo->bytes() + input_norm.bytes() +
           q_norm.bytes() + k_norm.bytes();
  }
};

struct Layer {
  bool linear = false;
  LinearAttention lin;
  GatedAttention attn;
  layers::MlpWeights mlp;     ///< dense layers
  layers::MoeWeights moe;     ///< sparse layers (router non-null)
  layers::MlpWeights shared;  ///< the shared expert of a sparse layer (w_gate null: none)
  std::unique_ptr<Weight> shared_gate;  ///< [1, H]
  bool sparse() const { return moe.router != nullptr; }
  std::size_t active_bytes() const {
    std::size_t n = linear ? lin.bytes() : attn.bytes();
    if (!sparse()) return n + mlp.bytes();
    n += moe.active_bytes();
    // (A shared expert run in the set has its gate in the router: no shared_gate.)
    if (shared.w_gate) n += shared.w_gate->bytes() + shared.w_up->bytes() + shared.w_down->bytes();
    if (shared_gate) n += shared_gate->bytes();
    return n;
  }
};

enum : std::size_t {
  kX = layers::kFirstFreeSlot, kZ, kB, kA, kCore, kGateQ, kShared, kSharedGate, kScratch, kCat
};

/// The one MTP module is applied recursively; this caps the KV layers reserved for its depths.
constexpr std::size_t kMaxRecursiveMtpDepth = 8;

struct Mtp {
  DeviceBuffer norm_e, norm_h, norm;  ///< f32 [hidden], 1 + w
  std::unique_ptr<Weight> fc;         ///< [H, 2H]
  Layer layer;                        ///< gated attention + FFN
};

class HybridQwen final : public RankModel {
 public:
  HybridQwen(const ModelConfig& c, std::unique_ptr<TensorStore> store, std::shared_ptr<Backend> backend, Compute requested,
             const TensorParallel& tp = {})
      : cfg_(c), local_(c), tp_(tp), store_(std::move(store)), backend_(std::move(backend)), ws_(*backend_) {
    const std::size_t H = c.hidden_size;
    const std::string origin = store_->origin().string();
    if (c.attention_bias) throw std::runtime_error(origin + ": attention_bias=true is not supported for " + c.architecture);
    if (c.attention_layers() == 0)
      throw std::runtime_error(origin + ": no full_attention layer (at least one is needed)");
    try {  // this rank's heads and widths (all of them at tensor parallel 1)
      dims_ = shard_dims(c, tp_.rank, tp_.size);
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error(origin + ": " + e.what());
    }
    local_ = local_config(c, dims_);
    const DType ckpt = store_->get(c.weight_prefix + "embed_tokens.weight", {c.vocab_size, H}).dtype;
    compute_ = backend_->resolve_compute(requested, ckpt);
    const WeightLoader w(*store_, *backend_, compute_, &cfg_.quantization, tp_.active() ? &dims_ : nullptr, &keep_);
    const bool tied_head = c.tie_word_embeddings && !store_->has("lm_head.weight");
    const std::string head_name = tied_head ? c.weight_prefix + "embed_tokens.weight" : "lm_head.weight";
    // Under tensor parallelism the embedding table is whole on every rank and the head is the rank's slice.
    embed_ = w.matrix(c.weight_prefix + "embed_tokens.weight", c.vocab_size, H,
                      tied_head && !tp_.active() ? WeightUse::both : WeightUse::embedding);
    shape_.n_k_heads = local_.linear_num_key_heads;
    shape_.n_v_heads = local_.linear_num_value_heads;
    shape_.k_head_dim = c.linear_key_head_dim;
    shape_.v_head_dim = c.linear_value_head_dim;
    shape_.conv_kernel = c.linear_conv_kernel_dim;
    std::size_t kv_layer = 0;
    for (std::size_t l = 0; l < c.num_hidden_layers; ++l) {
      const std::string p = c.weight_prefix + "layers." + std::to_string(l) + ".";
      Layer L;
      L.linear = c.is_linear_attention_layer(l);
      if (L.linear) {
        L.lin = load_linear(w, p);
        L.lin.state_offset = state_floats_;
        state_floats_ += Backend::gated_delta_net_state_floats(shape_);
      } else {
        L.attn = load_attention(w, p);
        L.attn.kv_layer = kv_layer++;
      }
      load_ffn(w, p, c.is_sparse_layer(l), L);
      layers_.push_back(std::move(L));
    }
    // The MTP module (Qwen3-Next / Qwen3.5 `mtp.*`: one gated-attention decoder layer, applied recursively;
    // vLLM qwen3_next_mtp.py): x = fc([RMSNorm1p(embed(t)), RMSNorm1p(h)]) -> layer -> RMSNorm1p -> LM head.
    if (c.mtp_num_hidden_layers > 0) {
      Mtp m;
      m.fc = w.matrix("mtp.fc.weight", H, 2 * H);
      m.norm_e = vector_plus(w, "mtp.pre_fc_norm_embedding.weight", {H}, 1.0f);
      m.norm_h = vector_plus(w, "mtp.pre_fc_norm_hidden.weight", {H}, 1.0f);
      m.layer.attn = load_attention(w, "mtp.layers.0.");
      load_ffn(w, "mtp.layers.0.", c.num_experts > 0 && store_->has("mtp.layers.0.mlp.gate.weight"), m.layer);
      m.norm = vector_plus(w, "mtp.norm.weight", {H}, 1.0f);
      mtp_ = std::make_unique<Mtp>(std::move(m));
    }
    final_norm_ = vector_plus(w, c.weight_prefix + "norm.weight", {H}, 1.0f);
    if (tp_.active()) own_lm_head_ = w.row_slice(head_name, c.vocab_size, H, dims_.vocab0, dims_.vocab);
    else if (!tied_head) own_lm_head_ = w.matrix("lm_head.weight", c.vocab_size, H);
    inv_freq_ = layers::rope_inv_freq(*backend_, c);
  }

  const ModelConfig& config() const override { return cfg_; }
  Backend& backend() const override { return *backend_; }
  Compute compute() const override { return compute_; }

  KvSpec kv_spec() const override {
    KvSpec s;  // this rank's KV heads and recurrent state
    s.n_layers = cfg_.attention_layers() + mtp_depths();
    s.n_kv_heads = local_.num_key_value_heads;
    s.head_dim = cfg_.head_dim;
    s.dtype = backend_->kv_dtype(compute_, local_.num_attention_heads, s.n_kv_heads, s.head_dim, s.block_size);
    s.state_floats = state_floats_;
    return s;
  }

  std::size_t weight_bytes_per_step() const override {
    std::size_t n = lm_head().bytes() + embed_->cols * dtype_size(embed_->dtype) + final_norm_.bytes();
    for (const auto& L : layers_) n += L.active_bytes();
    return n;
  }

  std::size_t mtp_depths() const override { return mtp_ ? kMaxRecursiveMtpDepth : 0; }

  std::size_t mtp_weight_bytes_per_step() const override {
    if (!mtp_) return 0;
    return mtp_->fc->bytes() + mtp_->layer.active_bytes() + mtp_->norm_e.bytes() + mtp_->norm_h.bytes() +
           mtp_->norm.bytes() + embed_->cols * dtype_size(embed_->dtype);
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

  void mtp_forward_rank(std::size_t depth, const ForwardBatch& b, const float* hidden_in, KvStorage& kv,
                        const ForwardOutputs& out, bool want_logits, std::size_t draft_vocab,
                        std::span<const std::vector<std::int32_t>> candidates) override {
    if (!mtp_) throw std::invalid_argument("mtp_forward: the model has no MTP module");
    if (depth == 0 || depth > mtp_depths())
      throw std::invalid_argument("mtp_forward: depth " + std::to_string(depth) + " outside 1.." +
                                  std::to_string(mtp_depths()));
    const std::size_t kv_layer = cfg_.attention_layers() + depth - 1;
    if (kv_layer >= kv.spec().n_layers)
      throw std::invalid_argument("mtp_forward: the KV cache has no layer for draft depth " + std::to_string(depth));
    const std::size_t T = b.size();
    if (T == 0) return;
    if (!out.hidden) throw std::invalid_argument("mtp_forward: the hidden output is required");
    const std::size_t H = cfg_.hidden_size;
    const float eps = static_cast<float>(cfg_.rms_norm_eps);
    Backend& be = *backend_;
    float* x = ws_.get(kX, T * H);
    layers::mtp_input(be, *embed_, *mtp_->fc, mtp_->norm_e.as<float>(), mtp_->norm_h.as<float>(), eps, b, hidden_in,
                      H, ws_.get(kCat, T * 2 * H), x);
    const auto rope = layers::rope_tables(be, ws_, b, inv_freq_.as<float>(), cfg_.rotary_dim());
    gated_attention(mtp_->layer.attn, x, b, kv, rope, kv_layer);
    ffn(mtp_->layer, x, T);
    be.rms_norm(x, out.hidden, T, H, H, mtp_->norm.as<float>(), eps);
    layers::draft_head(be, ws_, tp_, dims_, cfg_, lm_head(), draft_vocab, want_logits, out.hidden, b, out.logits,
                       candidates);
  }

  // Recordable where the backend runs the token mixing and the experts on the device (the recurrent
  // states are found through the staged slots, KvStorage::state_table).
  bool supports_capture(std::size_t n_tokens) const override {
    if (!backend_->gated_delta_net_on_device(shape_)) return false;
    for (const auto& L : layers_)
      if (L.sparse() && !backend_->moe_on_device(*L.moe.experts, n_tokens)) return false;
    if (mtp_ && mtp_->layer.sparse() && !backend_->moe_on_device(*mtp_->layer.moe.experts, n_tokens)) return false;
    return true;
  }
  bool supports_lm_head_groups() const override {
    return !tp_.active() && backend_->supports_matmul_groups(lm_head());
  }

  bool forward_rank(const ForwardBatch& b, KvStorage& kv, const ForwardOutputs& out, bool want_logits,
                    std::span<const std::uint32_t> lm_head_groups) override {
    const std::size_t T = b.size();
    if (T == 0) return false;
    if (b.state_slots().size() != b.n_seqs() || kv.spec().state_floats != state_floats_)
      throw std::invalid_argument("forward: the KV cache keeps no recurrent state for " + cfg_.architecture +
                                  " (a cache made for another model?)");
    const std::size_t H = cfg_.hidden_size;
    const float eps = static_cast<float>(cfg_.rms_norm_eps);
    Backend& be = *backend_;
    float* x = ws_.get(kX, T * H);
    const auto rope = layers::rope_tables(be, ws_, b, inv_freq_.as<float>(), cfg_.rotary_dim());
    be.embedding(b.staged().tokens, T, *embed_, x, H);
    for (const auto& L : layers_) {
      if (L.linear) linear_attention(L.lin, x, b, kv);
      else gated_attention(L.attn, x, b, kv, rope, L.attn.kv_layer);
      ffn(L, x, T);
    }
    if (out.hidden) be.rms_norm(x, out.hidden, T, H, H, final_norm_.as<float>(), eps);
    return layers::head_logits(be, ws_, tp_, dims_, cfg_, lm_head(), cfg_.vocab_size, final_norm_.as<float>(),
                               want_logits, x, b, out.logits, lm_head_groups, {});
  }

 private:
  /// The FFN of a layer (prefix `p`): the MoE block (with the shared expert where the config has one) or
  /// the dense SwiGLU, and its zero-centred post-attention norm. The loader takes this rank's slices.
  void load_ffn(const WeightLoader& w, const std::string& p, bool sparse, Layer& L) {
    const std::size_t H = cfg_.hidden_size;
    if (sparse) {
      L.moe = layers::load_moe(w, p, cfg_);
      if (cfg_.shared_expert_intermediate_size > 0) {
        const std::size_t S = cfg_.shared_expert_intermediate_size, s0 = dims_.shared_inter0, n = dims_.shared_inter;
        L.shared.w_gate = w.row_slice(p + "mlp.shared_expert.gate_proj.weight", S, H, s0, n);
        L.shared.w_up = w.row_slice(p + "mlp.shared_expert.up_proj.weight", S, H, s0, n);
        L.shared.w_down = w.col_slice(p + "mlp.shared_expert.down_proj.weight", H, S, s0, n);
        L.shared_gate = w.matrix(p + "mlp.shared_expert_gate.weight", 1, H);
        share_expert_set(p, L);
      }
    } else {
      L.mlp = layers::load_swiglu(w, p, cfg_);
    }
    (L.sparse() ? L.moe.post_norm : L.mlp.post_norm) = vector_plus(w, p + "post_attention_layernorm.weight", {H}, 1.0f);
  }

  /// Runs the shared expert as the last expert of the layer's set, its gate as the router's last row
  /// (layers::MoeWeights::shared_expert; one routing, one pass of the gather-GEMVs and one weighted sum
  /// for both, instead of four more products and two adds a step), where it can: one rank, router and
  /// gate stored in the same float dtype, the shared expert of the routed experts' shape and type.
  void share_expert_set(const std::string& p, Layer& L) {
    auto& m = L.moe;
    const std::size_t H = cfg_.hidden_size, E = m.gate.size();
    const std::string router = p + "mlp.gate.weight", gate = p + "mlp.shared_expert_gate.weight";
    if (tp_.active() || E == 0 || !store_->has(router) || !store_->has(gate)) return;
    const TensorView& r = store_->get(router, {E, H});
    const TensorView& g = store_->get(gate, {1, H});
    if (r.dtype != g.dtype || !(r.dtype == DType::f32 || r.dtype == DType::f16 || r.dtype == DType::bf16)) return;
    const auto same = [](const Weight& a, const Weight& b) { return a.rows == b.rows && a.cols == b.cols; };
    if (!same(*L.shared.w_gate, *m.gate[0]) || !same(*L.shared.w_up, *m.up[0]) || !same(*L.shared.w_down, *m.down[0]))
      return;
    std::vector<const Weight*> gs, us, ds;
    for (std::size_t e = 0; e < E; ++e) {
      gs.push_back(m.gate[e].get());
      us.push_back(m.up[e].get());
      ds.push_back(m.down[e].get());
    }
    gs.push_back(L.shared.w_gate.get());
    us.push_back(L.shared.w_up.get());
    ds.push_back(L.shared.w_down.get());
    std::unique_ptr<ExpertSet> set;
    try {
      set = backend_->make_expert_set(gs, us, ds);
    } catch (const std::invalid_argument&) {
      return;  // another dtype or packing than the routed experts': computed apart
    }
    const std::size_t row = H * dtype_size(r.dtype);
    std::vector<unsigned char>& host = keep_.emplace_back((E + 1) * row);
    std::memcpy(host.data(), r.data, E * row);
    std::memcpy(host.data() + E * row, g.data, row);
    m.router = backend_->load_matrix(host.data(), r.dtype, E + 1, H, WeightUse::matmul, compute_);
    m.experts = std::move(set);
    m.shared_expert = true;
    L.shared_gate.reset();  // its row is the router's last
  }

  /// This rank's linear-attention heads: key heads [k0, k0 + nk) of NK and their value heads [v0, v0 + nv)
  /// (v0 = k0 * r), as rows of the projections, channels of the conv and elements of A_log / dt_bias.
  LinearAttention load_linear(const WeightLoader& w, const std::string& p) {
    const std::size_t H = cfg_.hidden_size, NK = cfg_.linear_num_key_heads, NV = cfg_.linear_num_value_heads;
    const std::size_t nk = shape_.n_k_heads, nv = shape_.n_v_heads, k0 = dims_.lin_k_head0, v0 = dims_.lin_v_head0;
    const std::size_t dk = shape_.k_head_dim, dv = shape_.v_head_dim, K = shape_.conv_kernel;
    const std::size_t C = 2 * NK * dk + NV * dv, r = NV / NK;  // the checkpoint's conv channels
    const std::string q = p + "linear_attn.";
    LinearAttention a;
    a.input_norm = vector_plus(w, p + "input_layernorm.weight", {H}, 1.0f);
    const auto iota = [](std::size_t from, std::size_t n, std::vector<std::size_t>& v) {
      for (std::size_t i = 0; i < n; ++i) v.push_back(from + i);
    };
    // This rank's conv channels in the checkpoint's q | k | v order (also the rows of in_proj_qkv).
    std::vector<std::size_t> channels;
    iota(k0 * dk, nk * dk, channels);
    iota(NK * dk + k0 * dk, nk * dk, channels);
    iota(2 * NK * dk + v0 * dv, nv * dv, channels);
    if (store_->has(q + "in_proj_qkvz.weight")) {  // Qwen3-Next: grouped per key head
      const std::size_t G = 2 * dk + 2 * r * dv;
      const std::string qkvz = q + "in_proj_qkvz.weight";
      std::vector<std::size_t> qkv_rows, z_rows;
      for (std::size_t g = k0; g < k0 + nk; ++g) iota(g * G, dk, qkv_rows);
      for (std::size_t g = k0; g < k0 + nk; ++g) iota(g * G + dk, dk, qkv_rows);
      for (std::size_t g = k0; g < k0 + nk; ++g) iota(g * G + 2 * dk, r * dv, qkv_rows);
      for (std::size_t g = k0; g < k0 + nk; ++g) iota(g * G + 2 * dk + r * dv, r * dv, z_rows);
      a.qkv = rows_of(w, cfg_.quantization, qkvz, NK * G, H, qkv_rows);
      a.z = rows_of(w, cfg_.quantization, qkvz, NK * G, H, z_rows);
      const std::string ba = q + "in_proj_ba.weight";
      std::vector<std::size_t> b_rows, a_rows;
      for (std::size_t g = k0; g < k0 + nk; ++g) {
        iota(g * 2 * r, r, b_rows);
        iota(g * 2 * r + r, r, a_rows);
      }
      a.b = rows_of(w, cfg_.quantization, ba, 2 * NV, H, b_rows);
      a.a = rows_of(w, cfg_.quantization, ba, 2 * NV, H, a_rows);
    } else {  // Qwen3.5: separate projections, already in order (this rank's: contiguous, but the channels)
      const auto range = [&](const std::string& name, std::size_t rows, std::size_t from, std::size_t n) {
        return RowsWeight{{}, w.row_slice(name, rows, H, from, n)};
      };
      a.qkv = rows_of(w, cfg_.quantization, q + "in_proj_qkv.weight", C, H, channels);
      a.z = range(q + "in_proj_z.weight", NV * dv, v0 * dv, nv * dv);
      a.b = range(q + "in_proj_b.weight", NV, v0, nv);
      a.a = range(q + "in_proj_a.weight", NV, v0, nv);
    }
    a.w_out = w.col_slice(q + "out_proj.weight", H, NV * dv, v0 * dv, nv * dv);
    a.conv_weight = rows_f32(w, q + "conv1d.weight", {C, 1, K}, K, channels);
    a.A_log = vector_plus(w, q + "A_log", {NV}, 0.0f, v0, nv);
    a.dt_bias = vector_plus(w, q + "dt_bias", {NV}, 0.0f, v0, nv);
    a.norm = vector_plus(w, q + "norm.weight", {dv}, 0.0f);
    return a;
  }

  /// This rank's query heads (their q and gate rows), KV heads and o_proj columns.
  GatedAttention load_attention(const WeightLoader& w, const std::string& p) {
    const std::size_t H = cfg_.hidden_size, D = cfg_.head_dim, NH = cfg_.num_attention_heads;
    const std::size_t KD = cfg_.num_key_value_heads * D;
    GatedAttention a;
    a.input_norm = vector_plus(w, p + "input_layernorm.weight", {H}, 1.0f);
    a.q_norm = vector_plus(w, p + "self_attn.q_norm.weight", {D}, 1.0f);
    a.k_norm = vector_plus(w, p + "self_attn.k_norm.weight", {D}, 1.0f);
    const std::string qp = p + "self_attn.q_proj.weight";
    std::vector<std::size_t> q_rows, g_rows;
    for (std::size_t h = dims_.q_head0; h < dims_.q_head0 + dims_.q_heads; ++h)
      for (std::size_t i = 0; i < D; ++i) {
        q_rows.push_back(h * 2 * D + i);
        g_rows.push_back(h * 2 * D + D + i);
      }
    a.wq = rows_of(w, cfg_.quantization, qp, 2 * NH * D, H, q_rows);
    a.wgate = rows_of(w, cfg_.quantization, qp, 2 * NH * D, H, g_rows);
    a.wk = w.row_slice(p + "self_attn.k_proj.weight", KD, H, dims_.kv_head0 * D, dims_.kv_heads * D);
    a.wv = w.row_slice(p + "self_attn.v_proj.weight", KD, H, dims_.kv_head0 * D, dims_.kv_heads * D);
    a.wo = w.col_slice(p + "self_attn.o_proj.weight", H, NH * D, dims_.q_head0 * D, dims_.q_heads * D);
    return a;
  }

  void linear_attention(const LinearAttention& L, float* x, const ForwardBatch& batch, KvStorage& kv) {
    Backend& be = *backend_;
    const std::size_t T = batch.size(), H = cfg_.hidden_size, nv = shape_.n_v_heads, dv = shape_.v_head_dim;
    const std::size_t C = shape_.conv_dim(), VD = nv * dv;
    const float eps = static_cast<float>(cfg_.rms_norm_eps);
    float* h = ws_.get(layers::kH, T * H);
    float* qkv = ws_.get(layers::kQ, T * C);
    float* z = ws_.get(kZ, T * VD);
    float* bb = ws_.get(kB, T * nv);
    float* aa = ws_.get(kA, T * nv);
    float* core = ws_.get(kCore, T * VD);
    be.rms_norm(x, h, T, H, H, L.input_norm.as<float>(), eps);
    const Backend::MatmulOut outs[] = {{L.qkv.w.get(), qkv, C}, {L.z.w.get(), z, VD}, {L.b.w.get(), bb, nv}, {L.a.w.get(), aa, nv}};
    be.matmul_many(h, T, H, outs);
    be.gated_delta_net(shape_, qkv, C, aa, bb, nv, L.conv_weight.as<float>(), L.A_log.as<float>(), L.dt_bias.as<float>(),
                       batch.staged(), kv, L.state_offset, core, VD);
    // Gated RMSNorm per value head: RMSNorm(core) * w * silu(z).
    be.rms_norm(core, core, T * nv, dv, dv, L.norm.as<float>(), eps);
    be.silu_mul(z, VD, core, VD, core, VD, T, VD);
    layers::add_projection(be, tp_.comm, core, T, VD, *L.w_out, x, H, h);
  }

  void gated_attention(const GatedAttention& A, float* x, const ForwardBatch& batch, KvStorage& kv,
                       const layers::RopeTables& rope, std::size_t kv_layer) {
    Backend& be = *backend_;
    const std::size_t T = batch.size(), H = cfg_.hidden_size, D = cfg_.head_dim;
    const std::size_t NH = local_.num_attention_heads, NKV = local_.num_key_value_heads;
    const std::size_t QD = NH * D, KD = NKV * D;
    const float eps = static_cast<float>(cfg_.rms_norm_eps);
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    float* h = ws_.get(layers::kH, T * H);
    float* q = ws_.get(layers::kQ, T * QD);
    float* gate = ws_.get(kGateQ, T * QD);
    float* k = ws_.get(layers::kK, T * KD);
    float* v = ws_.get(layers::kV, T * KD);
    float* attn = ws_.get(layers::kAttn, T * QD);
    be.rms_norm(x, h, T, H, H, A.input_norm.as<float>(), eps);
    const Backend::MatmulOut outs[] = {{A.wq.w.get(), q, QD}, {A.wgate.w.get(), gate, QD}, {A.wk.get(), k, KD}, {A.wv.get(), v, KD}};
    be.matmul_many(h, T, H, outs);
    be.head_norm_rope(q, T, NH, D, QD, A.q_norm.as<float>(), eps, rope.rotary_dim, rope.cos, rope.sin);
    be.head_norm_rope(k, T, NKV, D, KD, A.k_norm.as<float>(), eps, rope.rotary_dim, rope.cos, rope.sin);
    be.kv_store(k, v, KD, batch.staged(), kv, kv_layer);
    be.attention(q, QD, attn, QD, NH, batch.staged(), kv, kv_layer, scale);
    be.sigmoid_mul(gate, QD, QD, attn, QD, T, QD);
    layers::add_projection(be, tp_.comm, attn, T, QD, *A.wo, x, H, h);
  }

  void ffn(const Layer& L, float* x, std::size_t T) {
    Backend& be = *backend_;
    if (!L.sparse()) {
      layers::swiglu_block(be, ws_, L.mlp, local_, x, T, tp_.comm);
      return;
    }
    const std::size_t H = cfg_.hidden_size;
    float* shared = nullptr;
    // A shared expert not in the set: sigmoid(h g^T) * SwiGLU_shared(h), from the same h as the routed experts.
    if (L.shared.w_gate && !L.moe.shared_expert) {
      const std::size_t S = L.shared.w_gate->rows;
      const float eps = static_cast<float>(cfg_.rms_norm_eps);
      float* h = ws_.get(layers::kH, T * H);
      float* g = ws_.get(kScratch, T * std::max(S, H));
      float* scratch = ws_.get(layers::kUp, T * std::max(S, H));
      float* sg = ws_.get(kSharedGate, T);
      shared = ws_.get(kShared, T * H);
      be.rms_norm(x, h, T, H, H, L.moe.post_norm.as<float>(), eps);
      be.matmul_swiglu(h, T, H, *L.shared.w_gate, *L.shared.w_up, g, S, scratch);
      be.matmul(g, T, S, *L.shared.w_down, H, shared, H);
      be.matmul(h, T, H, *L.shared_gate, 1, sg, 1);
      be.sigmoid_mul(sg, 1, 1, shared, H, T, H);
    }
    // Under tensor parallelism the shared expert's partial sum joins the experts' in one all-reduce.
    layers::moe_block(be, ws_, L.moe, local_, x, T, tp_.comm, shared);
  }

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
  Backend::GatedDeltaNetShape shape_;  ///< this rank's linear-attention heads
  std::size_t state_floats_ = 0;
  std::unique_ptr<Weight> embed_, own_lm_head_;
  std::vector<Layer> layers_;
  DeviceBuffer final_norm_, inv_freq_;
  std::unique_ptr<Mtp> mtp_;
};

/// Checks what the hybrid architectures need in config.json; throws std::runtime_error naming the file.
void check_hybrid_config(const ModelConfig& config, const TensorStore& store) {
  const bool moe_arch = config.architecture.find("Moe") != std::string::npos || config.architecture == "Qwen3NextForCausalLM";
  if (moe_arch && config.num_experts == 0)
    throw std::runtime_error(store.origin().string() + ": " + config.architecture +
                             " without num_experts (or num_local_experts) in config.json");
  if (config.layer_types.empty())
    throw std::runtime_error(store.origin().string() + ": " + config.architecture +
                             " without layer_types (linear_attention / full_attention) in config.json");
}

}  // namespace

std::unique_ptr<RankModel> make_hybrid_qwen_rank(const ModelConfig& config, std::unique_ptr<TensorStore> store,
                                                 std::shared_ptr<Backend> backend, Compute compute,
                                                 const TensorParallel& tp) {
  check_hybrid_config(config, *store);
  return std::make_unique<HybridQwen>(config, std::move(store), std::move(backend), compute, tp);
}

std::unique_ptr<Model> make_hybrid_qwen(const ModelConfig& config, std::unique_ptr<TensorStore> store,
                                        std::shared_ptr<Backend> backend, Compute compute) {
  return make_hybrid_qwen_rank(config, std::move(store), std::move(backend), compute, {});
}

}  // namespace quarry::engine
