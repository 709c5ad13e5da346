#include "engine/model/qwen3.hpp"

#include <cmath>
#include <stdexcept>
#include <string>
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
};

class Qwen3 final : public Model {
 public:
  Qwen3(const ModelConfig& c, std::unique_ptr<TensorStore> store)
      : cfg_(c), store_(std::move(store)), rope_(c.rope_theta, c.rotary_dim()) {
    const std::size_t H = c.hidden_size, D = c.head_dim, I = c.intermediate_size;
    const std::size_t QD = c.num_attention_heads * D, KD = c.num_key_value_heads * D;
    embed_ = matrix("model.embed_tokens.weight", c.vocab_size, H);
    for (std::size_t l = 0; l < c.num_hidden_layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
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
      if (c.attention_bias)
        throw std::runtime_error(store_->origin().string() + ": attention_bias=true is not supported for Qwen3");
      layers_.push_back(std::move(L));
    }
    final_norm_ = vec("model.norm.weight", H);
    // Tied checkpoints usually omit lm_head.weight (save_pretrained drops it); some keep a copy.
    if (c.tie_word_embeddings && !store_->has("lm_head.weight")) lm_head_ = embed_;
    else lm_head_ = matrix("lm_head.weight", c.vocab_size, H);
  }

  const ModelConfig& config() const override { return cfg_; }

  KvCacheShape kv_shape() const override {
    KvCacheShape s;
    s.n_layers = cfg_.num_hidden_layers;
    s.n_kv_heads = cfg_.num_key_value_heads;
    s.head_dim = cfg_.head_dim;
    return s;
  }

  std::size_t weight_bytes_per_step() const override {
    std::size_t n = lm_head_.bytes() + embed_.cols * (embed_.type == cpu::WeightType::f32 ? 4 : 2);
    for (const auto& L : layers_)
      n += L.wq.bytes() + L.wk.bytes() + L.wv.bytes() + L.wo.bytes() + L.w_gate.bytes() + L.w_up.bytes() +
           L.w_down.bytes() + 4 * (L.input_norm.size() + L.post_norm.size() + L.q_norm.size() + L.k_norm.size());
    return n + 4 * final_norm_.size();
  }

  void forward(const Batch& b, KvCache& kv, float* logits, ThreadPool* pool) override;

 private:
  cpu::Weight matrix(const std::string& name, std::size_t rows, std::size_t cols) {
    const TensorView& t = store_->get(name, {rows, cols});
    return cpu::Weight{t.data, weight_type(t.dtype), rows, cols};
  }
  std::vector<float> vec(const std::string& name, std::size_t n) {
    const TensorView& t = store_->get(name, {n});
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = cpu::weight_value(t.data, weight_type(t.dtype), i);
    return v;
  }

  ModelConfig cfg_;
  std::unique_ptr<TensorStore> store_;
  cpu::Rope rope_;
  cpu::Weight embed_, lm_head_;
  std::vector<Layer> layers_;
  std::vector<float> final_norm_;
};

void Qwen3::forward(const Batch& b, KvCache& kv, float* logits, ThreadPool* pool) {
  const std::size_t T = b.size();
  if (T == 0) return;
  const std::size_t H = cfg_.hidden_size, D = cfg_.head_dim, I = cfg_.intermediate_size;
  const std::size_t NH = cfg_.num_attention_heads, NKV = cfg_.num_key_value_heads;
  const std::size_t QD = NH * D, KD = NKV * D;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);

  // Validate the batch and resolve each token's block table.
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

  std::vector<float> x(T * H), h(T * H), q(T * QD), k(T * KD), v(T * KD), attn(T * QD), gate(T * I), up(T * I);
  cpu::embedding(b.tokens.data(), T, embed_, x.data(), pool);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));

  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    cpu::rms_norm(x.data(), h.data(), T, H, H, L.input_norm.data(), eps, pool);
    cpu::matmul(h.data(), T, L.wq, q.data(), pool);
    cpu::matmul(h.data(), T, L.wk, k.data(), pool);
    cpu::matmul(h.data(), T, L.wv, v.data(), pool);
    cpu::rms_norm(q.data(), q.data(), T * NH, D, D, L.q_norm.data(), eps, pool);
    cpu::rms_norm(k.data(), k.data(), T * NKV, D, D, L.k_norm.data(), eps, pool);
    cpu::rope(q.data(), T, NH, D, QD, b.positions.data(), rope_, pool);
    cpu::rope(k.data(), T, NKV, D, KD, b.positions.data(), rope_, pool);
    const cpu::KvLayerView view = kv.layer_view(l);
    cpu::kv_store(k.data(), v.data(), KD, T, b.positions.data(), tables.data(), view, pool);
    cpu::attention(q.data(), QD, attn.data(), QD, T, NH, b.positions.data(), tables.data(), view, scale, pool);
    cpu::matmul(attn.data(), T, L.wo, h.data(), pool);
    cpu::add_inplace(x.data(), h.data(), T * H, pool);

    cpu::rms_norm(x.data(), h.data(), T, H, H, L.post_norm.data(), eps, pool);
    cpu::matmul(h.data(), T, L.w_gate, gate.data(), pool);
    cpu::matmul(h.data(), T, L.w_up, up.data(), pool);
    cpu::silu_mul(gate.data(), I, up.data(), I, gate.data(), I, T, I, pool);
    cpu::matmul(gate.data(), T, L.w_down, h.data(), pool);
    cpu::add_inplace(x.data(), h.data(), T * H, pool);
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
  cpu::matmul(sel.data(), n_out, lm_head_, logits, pool);
}

}  // namespace

std::unique_ptr<Model> make_qwen3(const ModelConfig& config, std::unique_ptr<TensorStore> store) {
  return std::make_unique<Qwen3>(config, std::move(store));
}

}  // namespace quarry::engine
