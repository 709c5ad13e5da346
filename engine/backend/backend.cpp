#include "engine/backend/backend.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <vector>
#include <stdexcept>
#include <string>

#include "engine/backend/collective.hpp"
#include "engine/backend/cpu/cpu_backend.hpp"
#ifdef QUARRY_HAVE_CUDA
#include "engine/backend/cuda/cuda_backend.hpp"
#endif

namespace quarry::engine {

DeviceSpec parse_device(std::string_view text) {
  DeviceSpec d;
  if (text == "cpu") return d;
  if (text == "auto") {
    if (cuda_device_count() > 0) d.kind = DeviceSpec::Kind::cuda;
    return d;
  }
  if (text == "cuda") {
    d.kind = DeviceSpec::Kind::cuda;
    return d;
  }
  if (text.starts_with("cuda:")) {
    const std::string_view n = text.substr(5);
    int index = -1;
    const auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), index);
    if (ec == std::errc() && end == n.data() + n.size() && index >= 0) {
      d.kind = DeviceSpec::Kind::cuda;
      d.index = index;
      return d;
    }
  }
  throw std::invalid_argument("unknown device \"" + std::string(text) + "\" (cpu, cuda, cuda:N, auto)");
}

std::string device_name(const DeviceSpec& d) {
  return d.kind == DeviceSpec::Kind::cpu ? std::string("cpu") : "cuda:" + std::to_string(d.index);
}

bool cuda_backend_built() {
#ifdef QUARRY_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
#ifdef QUARRY_HAVE_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

std::shared_ptr<Backend> make_backend(const BackendOptions& options) {
  if (options.device.kind == DeviceSpec::Kind::cpu) return cpu::make_cpu_backend(options.n_threads);
#ifdef QUARRY_HAVE_CUDA
  return cuda::make_cuda_backend(options.device.index);
#else
  throw std::runtime_error("device " + device_name(options.device) +
                           ": this build of quarry has no CUDA backend (configure with -DQUARRY_CUDA=ON where the "
                           "CUDA toolkit is installed)");
#endif
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ && owner_) owner_->free(data_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (data_ && owner_) owner_->free(data_);
    owner_ = std::move(o.owner_);
    data_ = o.data_;
    bytes_ = o.bytes_;
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

std::size_t QuantizedMatrix::bytes() const {
  std::size_t packed = 0;
  if (layout == QuantLayout::gptq) packed = cols * bits() / 8 * rows;
  else packed = element == QuantElement::int4 ? rows * cols / 2 : rows * cols;
  return packed + scales.size() * sizeof(float) + zeros.size() * sizeof(std::int16_t) +
         g_idx.size() * sizeof(std::int32_t);
}

void QuantizedMatrix::validate() const {
  const auto bad = [](const std::string& why) { throw std::invalid_argument("quantized matrix: " + why); };
  if (rows == 0 || cols == 0 || !data) bad("empty shape or no data");
  if (layout == QuantLayout::gptq) {
    if (element == QuantElement::fp8_e4m3) bad("GPTQ packing holds int4 or int8 values only");
    const std::size_t per = 32 / bits();
    if (cols % per != 0) bad("input columns " + std::to_string(cols) + " not a multiple of " + std::to_string(per));
    if (n_groups == 0 || scales.size() != n_groups * rows || zeros.size() != n_groups * rows)
      bad("scales / zeros must hold n_groups x rows values");
    if (g_idx.empty()) {
      if (group_size == 0 || (cols + group_size - 1) / group_size != n_groups)
        bad("group_size " + std::to_string(group_size) + " does not give " + std::to_string(n_groups) + " groups");
    } else {
      if (g_idx.size() != cols) bad("g_idx must hold one group per input column");
      for (const auto g : g_idx)
        if (g < 0 || static_cast<std::size_t>(g) >= n_groups)
          bad("g_idx value " + std::to_string(g) + " outside 0.." + std::to_string(n_groups - 1));
    }
    const std::int32_t zmax = 1 << bits();
    for (const auto z : zeros)
      if (z < 0 || z > zmax) bad("zero point " + std::to_string(z) + " outside 0.." + std::to_string(zmax));
  } else {
    if (element == QuantElement::int4 && cols % 8 != 0) bad("int4 rows need input columns in multiples of 8");
    const std::size_t bc = block_cols ? block_cols : cols;
    if (block_rows == 0) bad("block_rows is 0");
    if (scales.size() != ((rows + block_rows - 1) / block_rows) * ((cols + bc - 1) / bc))
      bad("scales must hold one value per block of " + std::to_string(block_rows) + " x " + std::to_string(bc));
  }
}

std::unique_ptr<Weight> Backend::load_quantized(const QuantizedMatrix& q, WeightUse, Compute) {
  throw std::runtime_error(description() + ": quantized weights (" +
                           std::string(q.layout == QuantLayout::gptq ? "GPTQ" : "row-quantized") +
                           (q.element == QuantElement::fp8_e4m3 ? " fp8" : q.element == QuantElement::int8 ? " int8" : " int4") +
                           ") are not supported on this backend yet; use --device cpu or a bf16 checkpoint");
}

void Backend::check_argmax_masks(std::size_t rows, std::size_t n, std::span<const std::uint32_t> masks,
                                 std::size_t mask_words) {
  if (masks.empty()) return;
  if (mask_words < (n + 31) / 32 || masks.size() < rows * mask_words)
    throw std::invalid_argument("argmax_rows: " + std::to_string(masks.size()) + " mask words for " +
                                std::to_string(rows) + " rows of " + std::to_string(n) + " ids at " +
                                std::to_string(mask_words) + " words a row");
}

void Backend::check_sample_args(std::size_t rows, std::size_t n, std::span<const std::uint32_t> masks,
                                std::size_t mask_words, std::span<const RowSampling> params) {
  check_argmax_masks(rows, n, masks, mask_words);
  if (params.size() != rows)
    throw std::invalid_argument("sample_rows: " + std::to_string(params.size()) + " sampling parameters for " +
                                std::to_string(rows) + " rows");
  if (n > 0x7fffffffu) throw std::invalid_argument("sample_rows: more than 2^31 - 1 ids a row");
  for (const RowSampling& p : params) check_sampling(p.temperature, p.top_p, p.min_p, "sample_rows");
}

void Backend::matmul_many(const float* x, std::size_t m, std::size_t ldx, std::span<const MatmulOut> outs) {
  for (const auto& o : outs) matmul(x, m, ldx, *o.w, o.w->rows, o.y, o.ldy);
}

void Backend::matmul_add(const float* x, std::size_t m, std::size_t ldx, const Weight& w, float* y, std::size_t ldy,
                         float* scratch) {
  matmul(x, m, ldx, w, w.rows, scratch, w.rows);
  if (ldy == w.rows) {
    add(y, scratch, m * w.rows);
  } else {
    for (std::size_t r = 0; r < m; ++r) add(y + r * ldy, scratch + r * w.rows, w.rows);
  }
}

void Backend::matmul_all_reduce_add(const float* x, std::size_t m, std::size_t ldx, const Weight& w, float* y,
                                    float* scratch, Collective& tp) {
  matmul(x, m, ldx, w, w.rows, scratch, w.rows);
  tp.all_reduce_add(y, scratch, m * w.rows);
}

void Backend::matmul_swiglu(const float* x, std::size_t m, std::size_t ldx, const Weight& gate, const Weight& up,
                            float* out, std::size_t ldo, float* scratch) {
  matmul(x, m, ldx, gate, gate.rows, out, ldo);
  matmul(x, m, ldx, up, up.rows, scratch, up.rows);
  silu_mul(out, ldo, scratch, up.rows, out, ldo, m, gate.rows);
}

void Backend::norm_matmul_many(const float* x, std::size_t m, std::size_t hidden, std::size_t ldx,
                               const float* norm_weight, float eps, float* h, std::span<const MatmulOut> outs) {
  if (ldx != hidden) throw std::invalid_argument("norm_matmul_many: x must be contiguous rows");
  rms_norm(x, h, m, hidden, ldx, norm_weight, eps);
  matmul_many(h, m, hidden, outs);
}

void Backend::norm_matmul_swiglu(const float* x, std::size_t m, std::size_t hidden, std::size_t ldx,
                                 const float* norm_weight, float eps, float* h, const Weight& gate, const Weight& up,
                                 float* out, std::size_t ldo, float* scratch) {
  if (ldx != hidden) throw std::invalid_argument("norm_matmul_swiglu: x must be contiguous rows");
  rms_norm(x, h, m, hidden, ldx, norm_weight, eps);
  matmul_swiglu(h, m, hidden, gate, up, out, ldo, scratch);
}

void Backend::qk_norm_rope_store(float* q, std::size_t ldq, float* k, const float* v, std::size_t ldkv,
                                 std::size_t n_heads, std::size_t n_kv_heads, std::size_t head_dim,
                                 const float* q_norm, const float* k_norm, float eps, std::size_t rotary_dim,
                                 const float* cos, const float* sin, const StagedBatch& batch, KvStorage& kv,
                                 std::size_t layer) {
  head_norm_rope(q, batch.n_tokens, n_heads, head_dim, ldq, q_norm, eps, rotary_dim, cos, sin);
  head_norm_rope(k, batch.n_tokens, n_kv_heads, head_dim, ldkv, k_norm, eps, rotary_dim, cos, sin);
  kv_store(k, v, ldkv, batch, kv, layer);
}

void Backend::head_norm_rope(float* x, std::size_t n_tokens, std::size_t n_heads, std::size_t head_dim, std::size_t ld,
                             const float* norm_weight, float eps, std::size_t rotary_dim, const float* cos,
                             const float* sin) {
  if (ld == n_heads * head_dim) {
    rms_norm(x, x, n_tokens * n_heads, head_dim, head_dim, norm_weight, eps);
  } else {
    for (std::size_t t = 0; t < n_tokens; ++t) rms_norm(x + t * ld, x + t * ld, n_heads, head_dim, head_dim, norm_weight, eps);
  }
  rope(x, n_tokens, n_heads, head_dim, ld, rotary_dim, cos, sin);
}

namespace {
constexpr std::size_t kStateSlotsPerChunk = 8;
}

void KvStorage::ensure_state_slots(std::size_t n_slots) {
  if (spec_.state_floats == 0 || !state_backend_) return;
  const std::size_t had = state_chunks_.size();
  while (state_chunks_.size() * kStateSlotsPerChunk < n_slots)
    state_chunks_.push_back(state_backend_->alloc(kStateSlotsPerChunk * spec_.state_floats * sizeof(float)));
  if (state_chunks_.size() == had) return;
  std::vector<float*> table(state_chunks_.size() * kStateSlotsPerChunk);
  for (std::size_t slot = 0; slot < table.size(); ++slot) table[slot] = recurrent_state(slot);
  state_table_ = DeviceBuffer();
  state_table_ = state_backend_->alloc(table.size() * sizeof(float*));
  state_backend_->upload(state_table_.data(), table.data(), table.size() * sizeof(float*));
}

float* const* KvStorage::state_table() const {
  return state_table_.bytes() ? static_cast<float* const*>(state_table_.data()) : nullptr;
}

float* KvStorage::recurrent_state(std::size_t slot) const {
  if (spec_.state_floats == 0 || !state_backend_) return nullptr;
  if (slot / kStateSlotsPerChunk >= state_chunks_.size())
    throw std::out_of_range("KvStorage: recurrent-state slot " + std::to_string(slot) + " not allocated");
  return state_chunks_[slot / kStateSlotsPerChunk].as<float>() + (slot % kStateSlotsPerChunk) * spec_.state_floats;
}

void KvStorage::copy_recurrent_state(std::size_t to, std::size_t from) {
  if (spec_.state_floats == 0 || !state_backend_ || to == from) return;
  const std::size_t n = spec_.state_floats;
  state_backend_->copy_rows(recurrent_state(to), n, recurrent_state(from), n, 1, n);
}

namespace {
/// Device data as host memory: the pointer itself on a host-memory backend, else a downloaded copy that
/// upload_back() writes back.
struct HostView {
  Backend& b;
  float* device;
  std::size_t n;
  std::vector<float> copy;
  float* p = nullptr;
  HostView(Backend& be, const float* d, std::size_t count) : b(be), device(const_cast<float*>(d)), n(count) {
    if (b.host_memory()) p = device;
    else {
      copy.resize(n);
      if (n) b.download(copy.data(), device, n * sizeof(float));
      p = copy.data();
    }
  }
  void upload_back() {
    if (!b.host_memory() && n) b.upload(device, copy.data(), n * sizeof(float));
  }
};

float sigmoidf(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float softplusf(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }  // torch's threshold 20
}  // namespace

void Backend::sigmoid_mul(const float* gate, std::size_t ldg, std::size_t gate_cols, float* x, std::size_t ldx,
                          std::size_t rows, std::size_t n) {
  if (rows == 0 || n == 0) return;
  if (gate_cols != 1 && gate_cols != n) throw std::invalid_argument("sigmoid_mul: gate_cols must be 1 or n");
  HostView g(*this, gate, (rows - 1) * ldg + gate_cols);
  HostView v(*this, x, (rows - 1) * ldx + n);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t i = 0; i < n; ++i) v.p[r * ldx + i] *= sigmoidf(g.p[r * ldg + (gate_cols == 1 ? 0 : i)]);
  v.upload_back();
}

namespace {

/// One recurrent step of a value head (HF torch_recurrent_gated_delta_rule): S = exp(g) S;
/// S += k (beta (v - S^T k))^T; out = S^T q.
void delta_step(std::size_t dk, std::size_t dv, const float* q, const float* k, const float* v, float beta, float g,
                float* S, float* out, std::vector<float>& kv_mem) {
  const float decay = std::exp(g);
  kv_mem.assign(dv, 0.0f);
  for (std::size_t i = 0; i < dk; ++i) {
    float* row = S + i * dv;
    for (std::size_t j = 0; j < dv; ++j) {
      row[j] *= decay;
      kv_mem[j] += row[j] * k[i];
    }
  }
  for (std::size_t j = 0; j < dv; ++j) kv_mem[j] = (v[j] - kv_mem[j]) * beta;  // delta
  std::fill(out, out + dv, 0.0f);
  for (std::size_t i = 0; i < dk; ++i) {
    float* row = S + i * dv;
    for (std::size_t j = 0; j < dv; ++j) {
      row[j] += k[i] * kv_mem[j];
      out[j] += row[j] * q[i];
    }
  }
}

}  // namespace

void Backend::run_parallel(std::size_t n, const std::function<void(std::size_t, std::size_t)>& fn) { fn(0, n); }

void Backend::gated_delta_net(const GatedDeltaNetShape& s, const float* qkv, std::size_t ldqkv, const float* a,
                              const float* b, std::size_t ldab, const float* conv_weight, const float* A_log,
                              const float* dt_bias, const StagedBatch& batch, const KvStorage& kv,
                              std::size_t state_offset, float* out, std::size_t ldo) {
  const std::size_t T = batch.n_tokens;
  if (T == 0) return;
  const std::size_t nk = s.n_k_heads, nv = s.n_v_heads, dk = s.k_head_dim, dv = s.v_head_dim, K = s.conv_kernel;
  if (nk == 0 || nv == 0 || dk == 0 || dv == 0 || K < 1 || nv % nk != 0)
    throw std::invalid_argument("gated_delta_net: bad shape (heads, head dims, conv kernel; nv a multiple of nk)");
  if (batch.n_seqs > 0 && !batch.host_state_slots)
    throw std::invalid_argument("gated_delta_net: the batch was staged without recurrent-state slots");
  const std::size_t C = s.conv_dim(), conv_floats = (K - 1) * C, S_floats = nv * dk * dv;
  HostView x(*this, qkv, (T - 1) * ldqkv + C);
  HostView av(*this, a, (T - 1) * ldab + nv), bv(*this, b, (T - 1) * ldab + nv);
  HostView w(*this, conv_weight, C * K), al(*this, A_log, nv), dt(*this, dt_bias, nv);
  HostView o(*this, out, (T - 1) * ldo + nv * dv);
  std::vector<HostView> st;
  st.reserve(batch.n_seqs);
  for (std::size_t i = 0; i < batch.n_seqs; ++i) {
    const float* state = kv.recurrent_state(static_cast<std::size_t>(batch.host_state_slots[i]));
    if (!state) throw std::invalid_argument("gated_delta_net: the KV storage keeps no recurrent state");
    st.emplace_back(*this, state + state_offset, conv_floats + S_floats);
  }
  // 1. Token by token in batch order: the conv (its window is the sequence's state), SiLU, q / k l2
  //    normalised per key head (FLA's l2norm: x * rsqrt(sum x^2 + 1e-6)), q scaled; beta and g.
  std::vector<float> y(T * C), beta(T * nv), g(T * nv);
  std::vector<std::vector<std::size_t>> tokens_of(batch.n_seqs);
  const float qscale = 1.0f / std::sqrt(static_cast<float>(dk));
  for (std::size_t t = 0; t < T; ++t) {
    const std::size_t seq = static_cast<std::size_t>(batch.host_seq_index[t]);
    tokens_of[seq].push_back(t);
    float* conv = st[seq].p;
    if (batch.host_positions[t] == 0) std::fill(conv, conv + conv_floats, 0.0f);
    const float* xt = x.p + t * ldqkv;
    float* yt = y.data() + t * C;
    for (std::size_t c = 0; c < C; ++c) {
      float acc = 0.0f;
      for (std::size_t j = 0; j + 1 < K; ++j) acc += w.p[c * K + j] * conv[j * C + c];
      acc += w.p[c * K + K - 1] * xt[c];
      yt[c] = acc * sigmoidf(acc);
    }
    if (K > 1) {
      std::copy(conv + C, conv + conv_floats, conv);
      std::copy(xt, xt + C, conv + (K - 2) * C);
    }
    for (std::size_t h = 0; h < 2 * nk; ++h) {
      float* v = yt + h * dk;
      float ss = 0.0f;
      for (std::size_t i = 0; i < dk; ++i) ss += v[i] * v[i];
      const float inv = 1.0f / std::sqrt(ss + 1e-6f) * (h < nk ? qscale : 1.0f);
      for (std::size_t i = 0; i < dk; ++i) v[i] *= inv;
    }
    for (std::size_t h = 0; h < nv; ++h) {
      beta[t * nv + h] = sigmoidf(bv.p[t * ldab + h]);
      g[t * nv + h] = -std::exp(al.p[h]) * softplusf(av.p[t * ldab + h] + dt.p[h]);
    }
  }
  // 2. Each (sequence, value head) apart (run_parallel: the CPU's threads): its tokens in order, the
  //    state zeroed at a token at position 0. (The chunked WY form of the FLA kernels, written out in f32
  //    loops here, measured 1.8x slower than these steps on the CPU: it does as many multiply-adds at
  //    chunks of 64 and head size 128, in shapes only matrix units would take faster.)
  const std::size_t ratio = nv / nk;
  run_parallel(batch.n_seqs * nv, [&](std::size_t begin, std::size_t end) {
    std::vector<float> kv_mem;
    for (std::size_t item = begin; item < end; ++item) {
      const std::size_t seq = item / nv, h = item % nv, kh = h / ratio;
      float* S = st[seq].p + conv_floats + h * dk * dv;
      for (const std::size_t t : tokens_of[seq]) {
        if (batch.host_positions[t] == 0) std::fill(S, S + dk * dv, 0.0f);
        const float* yt = y.data() + t * C;
        delta_step(dk, dv, yt + kh * dk, yt + nk * dk + kh * dk, yt + 2 * nk * dk + h * dv, beta[t * nv + h],
                   g[t * nv + h], S, o.p + t * ldo + h * dv, kv_mem);
      }
    }
  });
  o.upload_back();
  for (auto& h : st) h.upload_back();
}

void Backend::moe_route(const float* logits, std::size_t n_tokens, std::size_t n_experts, std::size_t k,
                        bool renormalize, bool shared_expert, std::int32_t* ids, float* weights) {
  if (n_tokens == 0) return;
  if (k == 0 || k > n_experts) throw std::invalid_argument("moe_route: k must be in 1..n_experts");
  const std::size_t ld = n_experts + (shared_expert ? 1 : 0), kout = k + (shared_expert ? 1 : 0);
  std::vector<float> p(n_tokens * ld);
  download(p.data(), logits, p.size() * sizeof(float));
  std::vector<std::int32_t> out_ids(n_tokens * kout);
  std::vector<float> out_w(n_tokens * kout);
  std::vector<std::uint32_t> order(n_experts);
  for (std::size_t t = 0; t < n_tokens; ++t) {
    float* row = p.data() + t * ld;
    if (shared_expert) {
      out_ids[t * kout + k] = static_cast<std::int32_t>(n_experts);
      out_w[t * kout + k] = 1.0f / (1.0f + std::exp(-row[n_experts]));
    }
    const float mx = *std::max_element(row, row + n_experts);
    float sum = 0.f;
    for (std::size_t e = 0; e < n_experts; ++e) sum += (row[e] = std::exp(row[e] - mx));
    for (std::size_t e = 0; e < n_experts; ++e) row[e] /= sum;
    for (std::size_t e = 0; e < n_experts; ++e) order[e] = static_cast<std::uint32_t>(e);
    const auto larger = [&](std::uint32_t a, std::uint32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); };
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(), larger);
    float top = 0.f;
    for (std::size_t j = 0; j < k; ++j) top += row[order[j]];
    std::sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k));  // ascending expert id
    for (std::size_t j = 0; j < k; ++j) {
      out_ids[t * kout + j] = static_cast<std::int32_t>(order[j]);
      out_w[t * kout + j] = renormalize ? row[order[j]] / top : row[order[j]];
    }
  }
  upload(ids, out_ids.data(), out_ids.size() * sizeof(std::int32_t));
  upload(weights, out_w.data(), out_w.size() * sizeof(float));
}

std::size_t Backend::moe_scratch_floats(std::size_t n_tokens, std::size_t k, std::size_t hidden,
                                        std::size_t intermediate) {
  const std::size_t n = n_tokens * k;
  return n * (hidden + intermediate + std::max(hidden, intermediate)) + 2 * n;
}

void Backend::moe_experts(const ExpertSet& experts, const float* h, std::size_t ldh, std::size_t n_tokens,
                          const std::int32_t* ids, const float* weights, std::size_t k, float* x, std::size_t ldx,
                          float* scratch) {
  if (n_tokens == 0) return;
  const std::size_t E = experts.n_experts(), H = experts.hidden(), I = experts.intermediate(), n = n_tokens * k;
  std::vector<std::int32_t> id(n);
  download(id.data(), ids, n * sizeof(std::int32_t));
  // Slots: the (token, j) pairs sorted by expert (stable: token order within an expert).
  std::vector<std::size_t> first(E + 1, 0);
  for (const auto e : id) {
    if (e < 0 || static_cast<std::size_t>(e) >= E) throw std::out_of_range("moe_experts: expert id out of range");
    ++first[static_cast<std::size_t>(e) + 1];
  }
  for (std::size_t e = 0; e < E; ++e) first[e + 1] += first[e];
  std::vector<std::int32_t> index(2 * n);  // gather [n]: the token of each slot; slots [n]: the slot of each pair
  std::vector<std::size_t> next(first.begin(), first.end() - 1);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t s = next[static_cast<std::size_t>(id[i])]++;
    index[s] = static_cast<std::int32_t>(i / k);
    index[n + i] = static_cast<std::int32_t>(s);
  }
  float* xs = scratch;                         // [n, H] the tokens' inputs, by slot
  float* act = xs + n * H;                     // [n, I]
  float* ys = act + n * I;                     // [n, max(H, I)]: the SwiGLU's scratch, then the outputs
  auto* dev_index = reinterpret_cast<std::int32_t*>(ys + n * std::max(H, I));
  upload(dev_index, index.data(), index.size() * sizeof(std::int32_t));
  gather_rows(xs, H, h, ldh, dev_index, n, H);
  for (std::size_t e = 0; e < E; ++e)
    if (const std::size_t c = first[e + 1] - first[e]; c > 0)
      matmul_swiglu(xs + first[e] * H, c, H, *experts.gate[e], *experts.up[e], act + first[e] * I, I,
                    ys + first[e] * std::max(H, I));
  for (std::size_t e = 0; e < E; ++e)
    if (const std::size_t c = first[e + 1] - first[e]; c > 0)
      matmul(act + first[e] * I, c, I, *experts.down[e], H, ys + first[e] * H, H);
  moe_combine(x, ldx, ys, H, dev_index + n, weights, n_tokens, k, H);
}

std::unique_ptr<ExpertSet> Backend::make_expert_set(std::vector<const Weight*> gate, std::vector<const Weight*> up,
                                                    std::vector<const Weight*> down) {
  if (gate.empty() || gate.size() != up.size() || gate.size() != down.size())
    throw std::invalid_argument("make_expert_set: one gate, up and down weight per expert needed");
  const Weight& g0 = *gate[0];
  for (std::size_t e = 0; e < gate.size(); ++e)
    if (gate[e]->rows != g0.rows || gate[e]->cols != g0.cols || up[e]->rows != g0.rows || up[e]->cols != g0.cols ||
        down[e]->rows != g0.cols || down[e]->cols != g0.rows || gate[e]->dtype != g0.dtype ||
        up[e]->dtype != g0.dtype || down[e]->dtype != g0.dtype)
      throw std::invalid_argument("make_expert_set: expert " + std::to_string(e) + " differs in shape or dtype");
  auto set = std::make_unique<ExpertSet>();
  set->gate = std::move(gate);
  set->up = std::move(up);
  set->down = std::move(down);
  return set;
}

void Backend::begin_capture() { throw std::logic_error("this backend cannot record ops"); }
std::unique_ptr<CapturedOps> Backend::end_capture() { throw std::logic_error("this backend cannot record ops"); }
bool Backend::replay(const CapturedOps&) { return false; }

DeviceBuffer Backend::load_vector(std::span<const float> host) {
  DeviceBuffer b = alloc(host.size() * sizeof(float));
  upload(b.data(), host.data(), host.size() * sizeof(float));
  return b;
}

}  // namespace quarry::engine
