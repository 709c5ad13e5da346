#include "engine/model/qwen3.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "engine/backend/cpu/ops.hpp"
#include "engine/backend/cpu/thread_pool.hpp"
#include "engine/model/safetensors.hpp"

namespace quarry::engine {

namespace {

cpu::WeightType weight_type(DType t) {
  switch (t) {
    case DType::f32: return cpu::WeightType::f32;
    case DType::f16: return cpu::WeightType::f16;
    case DType::bf16: return cpu::WeightType::bf16;
  }
  return cpu::WeightType::f32;
}

struct Layer {
  std::vector<float> input_norm, post_norm, q_norm, k_norm;  // tiny: widened to f32 once
  cpu::Weight wq, wk, wv, wo, w_gate, w_up, w_down;
  std::size_t bytes() const {
    return wq.bytes() + wk.bytes() + wv.bytes() + wo.bytes() + w_gate.bytes() + w_up.bytes() + w_down.bytes() +
           4 * (input_norm.size() + post_norm.size() + q_norm.size() + k_norm.size());
  }
};

/// One MTP module: x = fc([norm_e(embed(t)), norm_h(h)]) -> decoder layer -> norm -> lm_head.
struct MtpModule {
  std::vector<float> norm_e, norm_h, norm;
  cpu::Weight fc;       // [H, 2H]
  cpu::Weight lm_head;  // the main model's unless the module carries its own (DeepSeek shared_head.head)
  Layer layer;
};

/// Recursive use of the one Qwen3-Next module is unbounded; this caps the KV layers reserved for it.
constexpr std::size_t kMaxRecursiveMtpDepth = 8;

/// Scratch buffers of one forward call.
struct Scratch {
  std::vector<float> h, q, k, v, attn, gate, up;
  cpu::RopeAngles angles;  // of the batch's positions, shared by every layer
  void resize(std::size_t T, std::size_t H, std::size_t QD, std::size_t KD, std::size_t I) {
    h.resize(T * H);
    q.resize(T * QD);
    k.resize(T * KD);
    v.resize(T * KD);
    attn.resize(T * QD);
    gate.resize(T * I);
    up.resize(T * I);
  }
};

class Qwen3 final : public Model {
 public:
  Qwen3(const ModelConfig& c, std::unique_ptr<TensorStore> store, Compute compute)
      : cfg_(c), store_(std::move(store)), rope_(c.rope_theta, c.rotary_dim()) {
    pack_ = use_bf16(compute);
    const std::size_t H = c.hidden_size, D = c.head_dim, I = c.intermediate_size;
    const std::size_t QD = c.num_attention_heads * D, KD = c.num_key_value_heads * D;
    // Looked up by row only: packed for the tiles only where it also serves as the LM head.
    embed_ = matrix("model.embed_tokens.weight", c.vocab_size, H, /*pack=*/false);
    if (c.attention_bias)
      throw std::runtime_error(store_->origin().string() + ": attention_bias=true is not supported for Qwen3");
    for (std::size_t l = 0; l < c.num_hidden_layers; ++l)
      layers_.push_back(layer("model.layers." + std::to_string(l) + "."));
    final_norm_ = vec("model.norm.weight", H);
    // Tied checkpoints usually omit lm_head.weight (save_pretrained drops it); some keep a copy.
    if (c.tie_word_embeddings && !store_->has("lm_head.weight")) lm_head_ = packed(embed_);
    else lm_head_ = matrix("lm_head.weight", c.vocab_size, H);
    (void)QD;
    (void)KD;
    (void)I;
    (void)D;

    // MTP modules (ARCHITECTURE.md "MTP").
    if (c.mtp_num_hidden_layers > 0) {  // Qwen3-Next / Qwen3.5: mtp.*
      MtpModule m;
      m.fc = matrix("mtp.fc.weight", H, 2 * H);
      m.norm_e = vec("mtp.pre_fc_norm_embedding.weight", H);
      m.norm_h = vec("mtp.pre_fc_norm_hidden.weight", H);
      m.layer = layer("mtp.layers.0.");
      m.norm = vec("mtp.norm.weight", H);
      m.lm_head = lm_head_;
      mtp_.push_back(std::move(m));
      mtp_depths_ = kMaxRecursiveMtpDepth;
    } else if (c.num_nextn_predict_layers > 0) {  // DeepSeek-V3: model.layers.{L + k}.*
      for (std::size_t k = 0; k < c.num_nextn_predict_layers; ++k) {
        const std::string p = "model.layers." + std::to_string(c.num_hidden_layers + k) + ".";
        MtpModule m;
        m.fc = matrix(p + "eh_proj.weight", H, 2 * H);
        m.norm_e = vec(p + "enorm.weight", H);
        m.norm_h = vec(p + "hnorm.weight", H);
        m.layer = layer(p);
        m.norm = vec(p + "shared_head.norm.weight", H);
        m.lm_head = store_->has(p + "shared_head.head.weight") ? matrix(p + "shared_head.head.weight", c.vocab_size, H)
                                                              : lm_head_;
        mtp_.push_back(std::move(m));
      }
      mtp_depths_ = std::max(kMaxRecursiveMtpDepth, c.num_nextn_predict_layers);
    }
  }

  const ModelConfig& config() const override { return cfg_; }

  KvCacheShape kv_shape() const override {
    KvCacheShape s;
    s.n_layers = cfg_.num_hidden_layers + mtp_depths_;
    s.n_kv_heads = cfg_.num_key_value_heads;
    s.head_dim = cfg_.head_dim;
    // bf16 kernel set: the KV cache in bf16 too (as a bf16 model keeps it), read on the AMX tiles.
    s.bf16 = pack_ && cpu::kv_bf16_supported(cfg_.num_attention_heads, s.n_kv_heads, s.head_dim, s.block_size);
    return s;
  }

  std::size_t weight_bytes_per_step() const override {
    std::size_t n = lm_head_.bytes() + embed_.cols * (embed_.type == cpu::WeightType::f32 ? 4 : 2);
    for (const auto& L : layers_) n += L.bytes();
    return n + 4 * final_norm_.size();
  }

  std::size_t mtp_weight_bytes_per_step() const override {
    if (mtp_.empty()) return 0;
    const MtpModule& m = mtp_[0];
    return m.fc.bytes() + m.layer.bytes() + 4 * (m.norm_e.size() + m.norm_h.size() + m.norm.size()) +
           embed_.cols * (embed_.type == cpu::WeightType::f32 ? 4 : 2);
  }

  std::size_t mtp_depths() const override { return mtp_depths_; }

  bool bf16_compute() const override { return pack_; }

  using Model::forward;
  void forward(const Batch& b, KvCache& kv, float* logits, float* hidden, ThreadPool* pool,
               std::span<const std::vector<std::int32_t>> candidates = {}) override;
  void mtp_forward(std::size_t depth, const Batch& b, const float* hidden_in, KvCache& kv, float* hidden_out,
                   float* logits, ThreadPool* pool, std::size_t draft_vocab = 0,
                   std::span<const std::vector<std::int32_t>> candidates = {}) override;

 private:
  /// The Compute policy of model.hpp.
  bool use_bf16(Compute compute) const {
    if (!cpu::packed_bf16_available()) return false;
    if (compute == Compute::automatic) {
      if (const char* want = std::getenv("QUARRY_CPU_KERNELS")) return std::string_view(want) == "bf16";
      // The checkpoint's dtype, as its embedding table is stored.
      return store_->get("model.embed_tokens.weight", {cfg_.vocab_size, cfg_.hidden_size}).dtype == DType::bf16;
    }
    return compute == Compute::bf16;
  }

  Layer layer(const std::string& p) {
    const std::size_t H = cfg_.hidden_size, D = cfg_.head_dim, I = cfg_.intermediate_size;
    const std::size_t QD = cfg_.num_attention_heads * D, KD = cfg_.num_key_value_heads * D;
    Layer L;
    L.input_norm = vec(p + "input_layernorm.weight", H);
    L.post_norm = vec(p + "post_attention_layernorm.weight", H);
    L.q_norm = vec(p + "self_attn.q_norm.weight", D);
    L.k_norm = vec(p + "self_attn.k_norm.weight", D);
    L.wq = matrix(p + "self_attn.q_proj.weight", QD, H);
    L.wk = matrix(p + "self_attn.k_proj.weight", KD, H);
    L.wv = matrix(p + "self_attn.v_proj.weight", KD, H);
    L.wo = matrix(p + "self_attn.o_proj.weight", H, QD);
    L.w_gate = matrix(p + "mlp.gate_proj.weight", I, H);
    L.w_up = matrix(p + "mlp.up_proj.weight", I, H);
    L.w_down = matrix(p + "mlp.down_proj.weight", H, I);
    return L;
  }
  /// Validates the batch; returns each token's block table.
  std::vector<const std::int32_t*> resolve(const Batch& b, const KvCache& kv) const;
  /// One decoder layer over x [T, H] in place, its K/V in KV layer `kv_layer`.
  void run_layer(const Layer& L, std::size_t kv_layer, float* x, std::size_t T, const Batch& b,
                 const std::vector<const std::int32_t*>& tables, KvCache& kv, Scratch& s, ThreadPool* pool) const;

  cpu::Weight matrix(const std::string& name, std::size_t rows, std::size_t cols, bool pack = true) {
    const TensorView& t = store_->get(name, {rows, cols});
    const cpu::Weight w{t.data, weight_type(t.dtype), rows, cols};
    return pack ? packed(w) : w;
  }
  /// w with a copy packed once for the AMX tiles under bf16 compute (unchanged otherwise).
  cpu::Weight packed(cpu::Weight w) {
    if (pack_ && !w.packed) {
      packs_.push_back(cpu::pack_bf16(w.data, w.type, w.rows, w.cols, nullptr));
      w.packed = &packs_.back();
    }
    return w;
  }
  std::vector<float> vec(const std::string& name, std::size_t n) {
    const TensorView& t = store_->get(name, {n});
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = cpu::weight_value(t.data, weight_type(t.dtype), i);
    return v;
  }

  ModelConfig cfg_;
  std::unique_ptr<TensorStore> store_;
  bool pack_ = false;  // bf16 compute: matrices packed for the AMX tiles, bf16 KV cache
  std::deque<cpu::PackedBf16> packs_;  // stable addresses for Weight::packed
  cpu::Rope rope_;
  cpu::Weight embed_, lm_head_;
  std::vector<Layer> layers_;
  std::vector<float> final_norm_;
  std::vector<MtpModule> mtp_;
  std::size_t mtp_depths_ = 0;
};

std::vector<const std::int32_t*> Qwen3::resolve(const Batch& b, const KvCache& kv) const {
  const std::size_t T = b.size();
  std::vector<const std::int32_t*> tables(T);
  for (std::size_t t = 0; t < T; ++t) {
    if (b.tokens[t] < 0 || static_cast<std::size_t>(b.tokens[t]) >= cfg_.vocab_size)
      throw std::invalid_argument("forward: token id " + std::to_string(b.tokens[t]) + " outside the vocabulary (" +
                                  std::to_string(cfg_.vocab_size) + ")");
    const auto& table = kv.block_table(b.seq_ids[t]);
    if (b.positions[t] < 0 || static_cast<std::size_t>(b.positions[t]) >= table.size() * kv.shape().block_size)
      throw std::invalid_argument("forward: position " + std::to_string(b.positions[t]) +
                                  " outside the block table of sequence " + std::to_string(b.seq_ids[t]));
    tables[t] = table.data();
  }
  return tables;
}

void Qwen3::run_layer(const Layer& L, std::size_t kv_layer, float* x, std::size_t T, const Batch& b,
                      const std::vector<const std::int32_t*>& tables, KvCache& kv, Scratch& s,
                      ThreadPool* pool) const {
  const std::size_t H = cfg_.hidden_size, D = cfg_.head_dim, I = cfg_.intermediate_size;
  const std::size_t NH = cfg_.num_attention_heads, NKV = cfg_.num_key_value_heads;
  const std::size_t QD = NH * D, KD = NKV * D;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  float *h = s.h.data(), *q = s.q.data(), *k = s.k.data(), *v = s.v.data();
  cpu::rms_norm(x, h, T, H, H, L.input_norm.data(), eps, pool);
  cpu::matmul(h, T, L.wq, q, pool);
  cpu::matmul(h, T, L.wk, k, pool);
  cpu::matmul(h, T, L.wv, v, pool);
  cpu::rms_norm(q, q, T * NH, D, D, L.q_norm.data(), eps, pool);
  cpu::rms_norm(k, k, T * NKV, D, D, L.k_norm.data(), eps, pool);
  cpu::rope(q, T, NH, D, QD, s.angles, pool);
  cpu::rope(k, T, NKV, D, KD, s.angles, pool);
  const cpu::KvLayerView view = kv.layer_view(kv_layer);
  cpu::kv_store(k, v, KD, T, b.positions.data(), tables.data(), view, pool);
  cpu::attention(q, QD, s.attn.data(), QD, T, NH, b.positions.data(), tables.data(), view, scale, pool);
  cpu::matmul(s.attn.data(), T, L.wo, h, pool);
  cpu::add_inplace(x, h, T * H, pool);

  cpu::rms_norm(x, h, T, H, H, L.post_norm.data(), eps, pool);
  cpu::matmul(h, T, L.w_gate, s.gate.data(), pool);
  cpu::matmul(h, T, L.w_up, s.up.data(), pool);
  cpu::silu_mul(s.gate.data(), I, s.up.data(), I, s.gate.data(), I, T, I, pool);
  cpu::matmul(s.gate.data(), T, L.w_down, h, pool);
  cpu::add_inplace(x, h, T * H, pool);
}

void Qwen3::forward(const Batch& b, KvCache& kv, float* logits, float* hidden, ThreadPool* pool,
                    std::span<const std::vector<std::int32_t>> candidates) {
  const std::size_t T = b.size();
  if (T == 0) return;
  const std::size_t H = cfg_.hidden_size, D = cfg_.head_dim, I = cfg_.intermediate_size;
  const std::size_t QD = cfg_.num_attention_heads * D, KD = cfg_.num_key_value_heads * D;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  const auto tables = resolve(b, kv);

  std::vector<float> x(T * H);
  Scratch s;
  s.resize(T, H, QD, KD, I);
  s.angles = cpu::rope_angles(b.positions.data(), T, rope_);
  cpu::embedding(b.tokens.data(), T, embed_, x.data(), pool);
  for (std::size_t l = 0; l < layers_.size(); ++l) run_layer(layers_[l], l, x.data(), T, b, tables, kv, s, pool);

  if (hidden) {  // every row's state for the MTP module
    if (cfg_.mtp_hidden_state == "pre_norm") std::copy(x.begin(), x.end(), hidden);
    else cpu::rms_norm(x.data(), hidden, T, H, H, final_norm_.data(), eps, pool);
  }
  // Final norm and LM head only for the rows whose logits are wanted.
  std::vector<float> sel;
  sel.reserve(b.n_logits() * H);
  for (std::size_t t = 0; t < T; ++t)
    if (b.logits[t]) sel.insert(sel.end(), x.begin() + static_cast<std::ptrdiff_t>(t * H),
                                x.begin() + static_cast<std::ptrdiff_t>((t + 1) * H));
  const std::size_t n_out = sel.size() / H;
  if (n_out == 0) return;
  cpu::rms_norm(sel.data(), sel.data(), n_out, H, H, final_norm_.data(), eps, pool);
  if (lm_head_.packed && candidates.size() == n_out && !candidates.empty()) {
    // Only the groups of 16 LM-head rows that hold a candidate (the same tiles as the full product).
    const std::size_t V = cfg_.vocab_size, n_groups = (V + 15) / 16;
    std::vector<std::uint32_t> groups;
    for (const auto& c : candidates)
      for (const std::int32_t id : c)
        if (id >= 0 && static_cast<std::size_t>(id) < V) groups.push_back(static_cast<std::uint32_t>(id) / 16);
    std::sort(groups.begin(), groups.end());
    groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
    if (2 * groups.size() <= n_groups) {
      std::fill(logits, logits + n_out * V, -std::numeric_limits<float>::infinity());
      cpu::gemm_packed_groups(sel.data(), n_out, H, *lm_head_.packed, V, groups, logits, V, pool);
      return;
    }
  }
  cpu::matmul(sel.data(), n_out, lm_head_, logits, pool);
}

void Qwen3::mtp_forward(std::size_t depth, const Batch& b, const float* hidden_in, KvCache& kv, float* hidden_out,
                        float* logits, ThreadPool* pool, std::size_t draft_vocab,
                        std::span<const std::vector<std::int32_t>> candidates) {
  if (mtp_.empty()) throw std::invalid_argument("mtp_forward: the model has no MTP module");
  if (depth == 0 || depth > mtp_depths_)
    throw std::invalid_argument("mtp_forward: depth " + std::to_string(depth) + " outside 1.." +
                                std::to_string(mtp_depths_));
  const std::size_t kv_layer = cfg_.num_hidden_layers + depth - 1;
  if (kv_layer >= kv.shape().n_layers)
    throw std::invalid_argument("mtp_forward: the KV cache has no layer for draft depth " + std::to_string(depth));
  const std::size_t T = b.size();
  if (T == 0) return;
  const MtpModule& m = mtp_[std::min(depth, mtp_.size()) - 1];
  const std::size_t H = cfg_.hidden_size, D = cfg_.head_dim, I = cfg_.intermediate_size;
  const std::size_t QD = cfg_.num_attention_heads * D, KD = cfg_.num_key_value_heads * D;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  const auto tables = resolve(b, kv);

  // cat = [norm_e(embed(token)), norm_h(hidden)]  [T, 2H]; x = cat fc^T  [T, H]
  std::vector<float> e(T * H), cat(T * 2 * H), x(T * H);
  cpu::embedding(b.tokens.data(), T, embed_, e.data(), pool);
  for (std::size_t t = 0; t < T; ++t) {
    std::copy(e.data() + t * H, e.data() + (t + 1) * H, cat.data() + t * 2 * H);
    std::copy(hidden_in + t * H, hidden_in + (t + 1) * H, cat.data() + t * 2 * H + H);
  }
  cpu::rms_norm(cat.data(), cat.data(), T, H, 2 * H, m.norm_e.data(), eps, pool);
  cpu::rms_norm(cat.data() + H, cat.data() + H, T, H, 2 * H, m.norm_h.data(), eps, pool);
  cpu::matmul(cat.data(), T, m.fc, x.data(), pool);
  Scratch s;
  s.resize(T, H, QD, KD, I);
  s.angles = cpu::rope_angles(b.positions.data(), T, rope_);
  run_layer(m.layer, kv_layer, x.data(), T, b, tables, kv, s, pool);
  cpu::rms_norm(x.data(), hidden_out, T, H, H, m.norm.data(), eps, pool);

  std::vector<float> sel;
  sel.reserve(b.n_logits() * H);
  for (std::size_t t = 0; t < T; ++t)
    if (b.logits[t]) sel.insert(sel.end(), hidden_out + t * H, hidden_out + (t + 1) * H);
  if (sel.empty()) return;
  cpu::Weight head = m.lm_head;  // the first draft_vocab rows: same storage, fewer rows
  if (draft_vocab > 0 && draft_vocab < head.rows) head.rows = draft_vocab;
  const std::size_t n_out = sel.size() / H;
  const bool few = candidates.size() == n_out &&
                   std::all_of(candidates.begin(), candidates.end(), [](const auto& c) { return !c.empty(); });
  if (!few) return cpu::matmul(sel.data(), n_out, head, logits, pool);
  for (std::size_t r = 0; r < n_out; ++r) {
    float* row = logits + r * head.rows;
    std::fill(row, row + head.rows, -std::numeric_limits<float>::infinity());
    std::vector<float> vals(candidates[r].size());
    for (const auto id : candidates[r])
      if (id < 0 || static_cast<std::size_t>(id) >= head.rows)
        throw std::invalid_argument("mtp_forward: candidate token id " + std::to_string(id) + " outside the draft vocabulary");
    cpu::dot_rows(sel.data() + r * H, head, candidates[r].data(), candidates[r].size(), vals.data());
    for (std::size_t i = 0; i < vals.size(); ++i) row[candidates[r][i]] = vals[i];
  }
}

}  // namespace

std::unique_ptr<Model> make_qwen3(const ModelConfig& config, std::unique_ptr<TensorStore> store, Compute compute) {
  return std::make_unique<Qwen3>(config, std::move(store), compute);
}

}  // namespace quarry::engine
