#include "engine/models/layers.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "engine/core/dtype.hpp"
#include "engine/models/quant_loader.hpp"

namespace quarry::engine::layers {

std::unique_ptr<Weight> WeightLoader::matrix(const std::string& name, std::size_t rows, std::size_t cols,
                                             WeightUse use) const {
  if (quant_ && quant_->present()) return load_linear(store_, backend_, compute_, *quant_, name, rows, cols, use);
  const TensorView& t = store_.get(name, {rows, cols});
  return backend_.load_matrix(t.data, t.dtype, rows, cols, use, compute_);
}

std::unique_ptr<Weight> WeightLoader::slice(const std::string& name, std::size_t count, std::size_t slice_rows,
                                            std::size_t cols, std::size_t index, std::size_t row0,
                                            std::size_t rows) const {
  const TensorView& t = store_.get(name, {count, slice_rows, cols});
  if (index >= count || row0 + rows > slice_rows)
    throw std::logic_error(name + ": slice outside the tensor");
  const auto* base = static_cast<const unsigned char*>(t.data);
  const std::size_t offset = ((index * slice_rows) + row0) * cols * dtype_size(t.dtype);
  return backend_.load_matrix(base + offset, t.dtype, rows, cols, WeightUse::matmul, compute_);
}

std::unique_ptr<Weight> WeightLoader::quantized_slice(const std::string& name, std::size_t rows, std::size_t cols,
                                                      std::size_t row0, std::size_t n_rows, std::size_t col0,
                                                      std::size_t n_cols, WeightUse use) const {
  if (!quant_ || !quant_->present()) return nullptr;
  auto full = read_quantized(store_, *quant_, name, rows, cols);
  if (!full) return nullptr;
  auto part = slice_quantized(*full, row0, n_rows, col0, n_cols, store_.origin().string() + ": " + name);
  auto w = backend_.load_quantized(part.m, use, compute_);
  if (!keep_) throw std::logic_error(name + ": a quantized slice needs host memory to keep it in");
  keep_->push_back(std::move(part.data));  // backends may read the packed values in place
  return w;
}

std::unique_ptr<Weight> WeightLoader::row_slice(const std::string& name, std::size_t rows, std::size_t cols,
                                                std::size_t row0, std::size_t n, WeightUse use) const {
  if (row0 == 0 && n == rows) return matrix(name, rows, cols, use);
  if (auto q = quantized_slice(name, rows, cols, row0, n, 0, cols, use)) return q;
  const TensorView& t = store_.get(name, {rows, cols});
  if (row0 + n > rows) throw std::logic_error(name + ": row slice outside the tensor");
  const auto* base = static_cast<const unsigned char*>(t.data) + row0 * cols * dtype_size(t.dtype);
  return backend_.load_matrix(base, t.dtype, n, cols, use, compute_);
}

std::unique_ptr<Weight> WeightLoader::copy_cols(const std::string& name, const void* base, DType dtype,
                                                std::size_t rows, std::size_t cols, std::size_t col0,
                                                std::size_t n) const {
  if (col0 + n > cols) throw std::logic_error(name + ": column slice outside the tensor");
  if (!keep_) throw std::logic_error(name + ": a column slice needs host memory to keep it in");
  const std::size_t es = dtype_size(dtype);
  std::vector<unsigned char> copy(rows * n * es);
  const auto* src = static_cast<const unsigned char*>(base);
  for (std::size_t r = 0; r < rows; ++r) std::memcpy(copy.data() + r * n * es, src + (r * cols + col0) * es, n * es);
  keep_->push_back(std::move(copy));
  return backend_.load_matrix(keep_->back().data(), dtype, rows, n, WeightUse::matmul, compute_);
}

std::unique_ptr<Weight> WeightLoader::col_slice(const std::string& name, std::size_t rows, std::size_t cols,
                                                std::size_t col0, std::size_t n) const {
  if (col0 == 0 && n == cols) return matrix(name, rows, cols);
  if (auto q = quantized_slice(name, rows, cols, 0, rows, col0, n, WeightUse::matmul)) return q;
  const TensorView& t = store_.get(name, {rows, cols});
  return copy_cols(name, t.data, t.dtype, rows, cols, col0, n);
}

std::unique_ptr<Weight> WeightLoader::slice_cols(const std::string& name, std::size_t count, std::size_t slice_rows,
                                                 std::size_t cols, std::size_t index, std::size_t col0,
                                                 std::size_t n) const {
  if (col0 == 0 && n == cols) return slice(name, count, slice_rows, cols, index, 0, slice_rows);
  const TensorView& t = store_.get(name, {count, slice_rows, cols});
  if (index >= count) throw std::logic_error(name + ": slice outside the tensor");
  const auto* base = static_cast<const unsigned char*>(t.data) + index * slice_rows * cols * dtype_size(t.dtype);
  return copy_cols(name, base, t.dtype, slice_rows, cols, col0, n);
}

DeviceBuffer WeightLoader::vector(const std::string& name, std::size_t n) const {
  const TensorView& t = store_.get(name, {n});
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = element_as_f32(t.data, t.dtype, i);
  return backend_.load_vector(v);
}

std::size_t AttentionWeights::bytes() const {
  return wq->bytes() + wk->bytes() + wv->bytes() + wo->bytes() +
         input_norm.bytes() + q_norm.bytes() + k_norm.bytes();
}

std::size_t MlpWeights::bytes() const { return w_gate->bytes() + w_up->bytes() + w_down->bytes() + post_norm.bytes(); }

AttentionWeights load_attention(const WeightLoader& w, const std::string& p, const ModelConfig& c) {
  const std::size_t H = c.hidden_size, D = c.head_dim;
  const std::size_t QD = c.num_attention_heads * D, KD = c.num_key_value_heads * D;
  AttentionWeights a;
  a.input_norm = w.vector(p + "input_layernorm.weight", H);
  a.q_norm = w.vector(p + "self_attn.q_norm.weight", D);
  a.k_norm = w.vector(p + "self_attn.k_norm.weight", D);
  if (const ShardDims* s = w.shard()) {  // this rank's heads
    a.wq = w.row_slice(p + "self_attn.q_proj.weight", QD, H, s->q_head0 * D, s->q_heads * D);
    a.wk = w.row_slice(p + "self_attn.k_proj.weight", KD, H, s->kv_head0 * D, s->kv_heads * D);
    a.wv = w.row_slice(p + "self_attn.v_proj.weight", KD, H, s->kv_head0 * D, s->kv_heads * D);
    a.wo = w.col_slice(p + "self_attn.o_proj.weight", H, QD, s->q_head0 * D, s->q_heads * D);
    return a;
  }
  a.wq = w.matrix(p + "self_attn.q_proj.weight", QD, H);
  a.wk = w.matrix(p + "self_attn.k_proj.weight", KD, H);
  a.wv = w.matrix(p + "self_attn.v_proj.weight", KD, H);
  a.wo = w.matrix(p + "self_attn.o_proj.weight", H, QD);
  return a;
}

MlpWeights load_swiglu(const WeightLoader& w, const std::string& p, const ModelConfig& c) {
  const std::size_t H = c.hidden_size, I = c.intermediate_size;
  MlpWeights m;
  m.post_norm = w.vector(p + "post_attention_layernorm.weight", H);
  if (const ShardDims* s = w.shard()) {  // this rank's intermediate columns
    m.w_gate = w.row_slice(p + "mlp.gate_proj.weight", I, H, s->inter0, s->inter);
    m.w_up = w.row_slice(p + "mlp.up_proj.weight", I, H, s->inter0, s->inter);
    m.w_down = w.col_slice(p + "mlp.down_proj.weight", H, I, s->inter0, s->inter);
    return m;
  }
  m.w_gate = w.matrix(p + "mlp.gate_proj.weight", I, H);
  m.w_up = w.matrix(p + "mlp.up_proj.weight", I, H);
  m.w_down = w.matrix(p + "mlp.down_proj.weight", H, I);
  return m;
}

std::size_t MoeWeights::bytes() const {
  std::size_t n = router->bytes() + post_norm.bytes();
  for (std::size_t e = 0; e < gate.size(); ++e) n += gate[e]->bytes() + up[e]->bytes() + down[e]->bytes();
  return n;
}

std::size_t MoeWeights::active_bytes() const {
  if (gate.empty()) return router->bytes() + post_norm.bytes();
  return router->bytes() + post_norm.bytes() + top_k * (gate[0]->bytes() + up[0]->bytes() + down[0]->bytes());
}

MoeWeights load_moe(const WeightLoader& w, const std::string& p, const ModelConfig& c) {
  const std::size_t H = c.hidden_size, I = c.moe_intermediate_size, E = c.num_experts;
  MoeWeights m;
  m.top_k = c.num_experts_per_tok;
  m.norm_topk_prob = c.norm_topk_prob;
  m.post_norm = w.vector(p + "post_attention_layernorm.weight", H);
  m.router = w.matrix(p + "mlp.gate.weight", E, H);
  const std::string fused_gate_up = p + "mlp.experts.gate_up_proj", fused_down = p + "mlp.experts.down_proj";
  const bool fused = w.has(fused_gate_up);
  const ShardDims* s = w.shard();
  for (std::size_t e = 0; e < E && s; ++e) {  // every expert sharded: this rank's intermediate columns
    const std::size_t i0 = s->moe_inter0, n = s->moe_inter;
    if (fused) {
      m.gate.push_back(w.slice(fused_gate_up, E, 2 * I, H, e, i0, n));
      m.up.push_back(w.slice(fused_gate_up, E, 2 * I, H, e, I + i0, n));
      m.down.push_back(w.slice_cols(fused_down, E, H, I, e, i0, n));
    } else {
      const std::string q = p + "mlp.experts." + std::to_string(e) + ".";
      m.gate.push_back(w.row_slice(q + "gate_proj.weight", I, H, i0, n));
      m.up.push_back(w.row_slice(q + "up_proj.weight", I, H, i0, n));
      m.down.push_back(w.col_slice(q + "down_proj.weight", H, I, i0, n));
    }
  }
  for (std::size_t e = 0; e < E && !s; ++e) {
    if (fused) {
      m.gate.push_back(w.slice(fused_gate_up, E, 2 * I, H, e, 0, I));
      m.up.push_back(w.slice(fused_gate_up, E, 2 * I, H, e, I, I));
      m.down.push_back(w.slice(fused_down, E, H, I, e, 0, H));
    } else {
      const std::string q = p + "mlp.experts." + std::to_string(e) + ".";
      m.gate.push_back(w.matrix(q + "gate_proj.weight", I, H));
      m.up.push_back(w.matrix(q + "up_proj.weight", I, H));
      m.down.push_back(w.matrix(q + "down_proj.weight", H, I));
    }
  }
  const auto raw = [](const std::vector<std::unique_ptr<Weight>>& v) {
    std::vector<const Weight*> r;
    for (const auto& p2 : v) r.push_back(p2.get());
    return r;
  };
  m.experts = w.backend().make_expert_set(raw(m.gate), raw(m.up), raw(m.down));
  return m;
}

DecoderLayerWeights load_decoder_layer(const WeightLoader& w, const std::string& prefix, const ModelConfig& c,
                                       bool sparse) {
  DecoderLayerWeights d;
  d.attn = load_attention(w, prefix, c);
  if (sparse) d.moe = load_moe(w, prefix, c);
  else d.mlp = load_swiglu(w, prefix, c);
  return d;
}

float* Workspace::get(std::size_t slot, std::size_t floats) {
  if (slots_.size() <= slot) slots_.resize(slot + 1);
  DeviceBuffer& b = slots_[slot];
  const std::size_t bytes = std::max<std::size_t>(floats, 1) * sizeof(float);
  if (b.bytes() < bytes) {
    b = DeviceBuffer();  // free first: the peak is the new size, not both
    b = backend_.alloc(bytes + bytes / 4);
  }
  return b.as<float>();
}

DeviceBuffer rope_inv_freq(Backend& b, const ModelConfig& c) {
  const std::size_t rdim = c.rotary_dim();
  std::vector<float> inv_freq(rdim / 2);
  for (std::size_t i = 0; i < rdim / 2; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(rdim);
    inv_freq[i] = static_cast<float>(1.0 / std::pow(c.rope_theta, static_cast<double>(e)));
  }
  return b.load_vector(inv_freq);
}

void mtp_input(Backend& b, const Weight& embed, const Weight& fc, const float* norm_e, const float* norm_h, float eps,
               const ForwardBatch& batch, const float* hidden_in, std::size_t hidden, float* cat, float* x) {
  const std::size_t T = batch.size(), H = hidden;
  b.embedding(batch.staged().tokens, T, embed, cat, 2 * H);
  b.copy_rows(cat + H, 2 * H, hidden_in, H, T, H);
  b.rms_norm(cat, cat, T, H, 2 * H, norm_e, eps);
  b.rms_norm(cat + H, cat + H, T, H, 2 * H, norm_h, eps);
  b.matmul(cat, T, 2 * H, fc, H, x, H);
}

RopeTables rope_tables(Backend& b, Workspace& ws, const ForwardBatch& batch, const float* inv_freq,
                       std::size_t rotary_dim) {
  const std::size_t n = batch.size() * (rotary_dim / 2);
  RopeTables r;
  r.rotary_dim = rotary_dim;
  float* cos = ws.get(kCos, n);
  float* sin = ws.get(kSin, n);
  b.rope_angles(batch.staged(), inv_freq, rotary_dim, cos, sin);
  r.cos = cos;
  r.sin = sin;
  return r;
}

void add_projection(Backend& b, Collective* tp, const float* in, std::size_t T, std::size_t ldin, const Weight& w,
                    float* x, std::size_t H, float* scratch) {
  if (!tp) {
    b.matmul_add(in, T, ldin, w, x, H, scratch);
    return;
  }
  b.matmul_all_reduce_add(in, T, ldin, w, x, scratch, *tp);
}

void attention_block(Backend& b, Workspace& ws, const AttentionWeights& w, const ModelConfig& c, std::size_t kv_layer,
                     float* x, const ForwardBatch& batch, KvStorage& kv, const RopeTables& rope, Collective* tp) {
  const std::size_t T = batch.size(), H = c.hidden_size, D = c.head_dim;
  const std::size_t NH = c.num_attention_heads, NKV = c.num_key_value_heads;
  const std::size_t QD = NH * D, KD = NKV * D;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  float* h = ws.get(kH, T * H);
  float* q = ws.get(kQ, T * QD);
  float* k = ws.get(kK, T * KD);
  float* v = ws.get(kV, T * KD);
  float* attn = ws.get(kAttn, T * QD);
  const Backend::MatmulOut qkv[] = {{w.wq.get(), q, QD}, {w.wk.get(), k, KD}, {w.wv.get(), v, KD}};
  b.norm_matmul_many(x, T, H, H, w.input_norm.as<float>(), eps, h, qkv);
  b.qk_norm_rope_store(q, QD, k, v, KD, NH, NKV, D, w.q_norm.as<float>(), w.k_norm.as<float>(), eps, rope.rotary_dim,
                       rope.cos, rope.sin, batch.staged(), kv, kv_layer);
  b.attention(q, QD, attn, QD, NH, batch.staged(), kv, kv_layer, scale);
  add_projection(b, tp, attn, T, QD, *w.wo, x, H, h);
}

void swiglu_block(Backend& b, Workspace& ws, const MlpWeights& w, const ModelConfig& c, float* x, std::size_t T,
                  Collective* tp) {
  const std::size_t H = c.hidden_size, I = c.intermediate_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  float* h = ws.get(kH, T * H);
  float* gate = ws.get(kGate, T * I);
  float* up = ws.get(kUp, T * std::max(I, H));  // also down_proj's scratch [T, H]
  b.norm_matmul_swiglu(x, T, H, H, w.post_norm.as<float>(), eps, h, *w.w_gate, *w.w_up, gate, I, up);
  // down_proj's scratch: `up` (free again), [T, H] fits in [T, I].
  add_projection(b, tp, gate, T, I, *w.w_down, x, H, up);
}

void moe_block(Backend& b, Workspace& ws, const MoeWeights& w, const ModelConfig& c, float* x, std::size_t T,
               Collective* tp, const float* extra) {
  // With the shared expert in the set (w.shared_expert), its gate is the router's last row and its pair
  // the last of each token's K + 1.
  const std::size_t H = c.hidden_size, E = w.gate.size(), R = w.router->rows;
  const std::size_t K = w.top_k + (w.shared_expert ? 1 : 0);
  const float eps = static_cast<float>(c.rms_norm_eps);
  float* h = ws.get(kH, T * H);
  float* logits = ws.get(kRouter, T * R);
  float* routing = ws.get(kRouting, 2 * T * K);  // ids (int32) [T, K], then weights [T, K]
  auto* ids = reinterpret_cast<std::int32_t*>(routing);
  float* scratch = ws.get(kMoeScratch, Backend::moe_scratch_floats(T, K, H, w.experts->intermediate()));
  b.rms_norm(x, h, T, H, H, w.post_norm.as<float>(), eps);
  b.matmul(h, T, H, *w.router, R, logits, R);
  b.moe_route(logits, T, E, w.top_k, w.norm_topk_prob, w.shared_expert, ids, routing + T * K);
  if (!tp) {
    b.moe_experts(*w.experts, h, H, T, ids, routing + T * K, K, x, H, scratch);
    if (extra) b.add(x, extra, T * H);
    return;
  }
  // Each rank's experts give partial sums (their intermediate slices): summed over the ranks, then added.
  float* y = ws.get(kMoeOut, T * H);
  if (extra) b.copy_rows(y, H, extra, H, T, H);
  else b.fill(y, T * H, 0.0f);
  b.moe_experts(*w.experts, h, H, T, ids, routing + T * K, K, y, H, scratch);
  tp->all_reduce_add(x, y, T * H);
}

void decoder_layer(Backend& b, Workspace& ws, const DecoderLayerWeights& w, const ModelConfig& c, std::size_t kv_layer,
                   float* x, const ForwardBatch& batch, KvStorage& kv, const RopeTables& rope, Collective* tp) {
  attention_block(b, ws, w.attn, c, kv_layer, x, batch, kv, rope, tp);
  if (w.sparse()) moe_block(b, ws, w.moe, c, x, batch.size(), tp);
  else swiglu_block(b, ws, w.mlp, c, x, batch.size(), tp);
}

bool lm_head(Backend& b, const Weight& head, std::size_t n_rows, const float* norm, float eps, const float* states,
             std::size_t hidden, const ForwardBatch& batch, float* sel, float* logits,
             std::span<const std::uint32_t> lm_head_groups, std::span<const std::vector<std::int32_t>> candidates) {
  const std::size_t n_out = batch.n_logits();
  if (n_out == 0 || logits == nullptr) return false;
  b.gather_rows(sel, hidden, states, hidden, batch.staged().logit_rows, n_out, hidden);
  if (norm) b.rms_norm(sel, sel, n_out, hidden, hidden, norm, eps);
  if (!lm_head_groups.empty() && n_rows == head.rows && b.supports_matmul_groups(head)) {
    // Only the groups of 16 LM-head rows that hold an allowed id (the same tiles as the full product).
    b.fill(logits, n_out * n_rows, -std::numeric_limits<float>::infinity());
    b.matmul_groups(sel, n_out, hidden, head, lm_head_groups, logits, n_rows);
    return true;
  }
  const bool few = candidates.size() == n_out &&
                   std::all_of(candidates.begin(), candidates.end(), [](const auto& ids) { return !ids.empty(); });
  if (few) {
    for (const auto& ids : candidates)
      for (const auto id : ids)
        if (id < 0 || static_cast<std::size_t>(id) >= n_rows)
          throw std::invalid_argument("lm_head: candidate token id " + std::to_string(id) +
                                      " outside the draft vocabulary");
    b.matmul_ids(sel, n_out, hidden, head, candidates, logits, n_rows);
    return false;
  }
  b.matmul(sel, n_out, hidden, head, n_rows, logits, n_rows);
  return false;
}

void lm_head_parallel(Backend& b, Collective& tp, const Weight& head, std::size_t vocab_size, std::size_t chunk,
                      std::size_t n_rows, const float* norm, float eps, const float* states, std::size_t hidden,
                      const ForwardBatch& batch, float* sel, float* local, float* gathered, float* logits,
                      std::span<const std::vector<std::int32_t>> candidates) {
  const std::size_t n_out = batch.n_logits();
  if (n_out == 0) return;
  // Rank q holds ids [q * chunk, q * chunk + count(q)) of the first n_rows.
  const auto count = [&](std::size_t q) {
    const std::size_t v0 = std::min(n_rows, q * chunk), v1 = std::min({n_rows, vocab_size, (q + 1) * chunk});
    return v1 > v0 ? v1 - v0 : std::size_t{0};
  };
  const std::size_t v0 = tp.rank() * chunk, mine = count(tp.rank());
  b.gather_rows(sel, hidden, states, hidden, batch.staged().logit_rows, n_out, hidden);
  if (norm) b.rms_norm(sel, sel, n_out, hidden, hidden, norm, eps);
  const bool few = candidates.size() == n_out &&
                   std::all_of(candidates.begin(), candidates.end(), [](const auto& ids) { return !ids.empty(); });
  if (few) {  // the candidates this rank holds, as its own row indices
    std::vector<std::vector<std::int32_t>> own(n_out);
    for (std::size_t r = 0; r < n_out; ++r)
      for (const auto id : candidates[r]) {
        if (id < 0 || static_cast<std::size_t>(id) >= n_rows)
          throw std::invalid_argument("lm_head: candidate token id " + std::to_string(id) +
                                      " outside the draft vocabulary");
        if (static_cast<std::size_t>(id) >= v0 && static_cast<std::size_t>(id) < v0 + mine)
          own[r].push_back(static_cast<std::int32_t>(id - v0));
      }
    b.matmul_ids(sel, n_out, hidden, head, own, local, chunk);
  } else if (mine > 0) {
    b.matmul(sel, n_out, hidden, head, mine, local, chunk);
  }
  tp.all_gather(local, n_out * chunk, gathered);
  if (!logits) return;
  for (std::size_t q = 0; q < tp.size(); ++q)
    if (const std::size_t n = count(q))
      b.copy_rows(logits + q * chunk, n_rows, gathered + q * n_out * chunk, chunk, n_out, n);
}

bool head_logits(Backend& b, Workspace& ws, const TensorParallel& tp, const ShardDims& dims, const ModelConfig& c,
                 const Weight& head, std::size_t n_rows, const float* norm, bool want_logits, const float* states,
                 const ForwardBatch& batch, float* logits, std::span<const std::uint32_t> lm_head_groups,
                 std::span<const std::vector<std::int32_t>> candidates) {
  const std::size_t n = std::max<std::size_t>(batch.n_logits(), 1), H = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  float* sel = ws.get(kHeadRows, n * H);
  if (!tp.active()) return lm_head(b, head, n_rows, norm, eps, states, H, batch, sel, logits, lm_head_groups, candidates);
  if (want_logits) {
    const std::size_t chunk = dims.vocab_chunk;
    float* local = ws.get(kVocabLocal, n * chunk);
    float* gathered = ws.get(kVocabGathered, tp.size * n * chunk);
    lm_head_parallel(b, *tp.comm, head, c.vocab_size, chunk, n_rows, norm, eps, states, H, batch, sel, local, gathered,
                     logits, candidates);
  }
  return false;
}

void draft_head(Backend& b, Workspace& ws, const TensorParallel& tp, const ShardDims& dims, const ModelConfig& c,
                const Weight& head, std::size_t draft_vocab, bool want_logits, const float* hidden,
                const ForwardBatch& batch, float* logits, std::span<const std::vector<std::int32_t>> candidates) {
  const std::size_t V = c.vocab_size;
  head_logits(b, ws, tp, dims, c, head, draft_vocab > 0 && draft_vocab < V ? draft_vocab : V, nullptr, want_logits,
              hidden, batch, logits, {}, candidates);
}

}  // namespace quarry::engine::layers
