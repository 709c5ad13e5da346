#include "engine/backend/cpu/cpu_backend.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "engine/backend/cpu/cpu_features.hpp"
#include "engine/backend/cpu/gemm.hpp"
#include "engine/backend/cpu/ops.hpp"
#include "engine/backend/cpu/quant.hpp"
#include "engine/backend/cpu/stream_read.hpp"
#include "engine/backend/cpu/thread_pool.hpp"
#include "engine/core/stopwatch.hpp"

namespace quarry::engine::cpu {

namespace {

/// A weight read in place from the host data it was loaded from, with a copy packed for the AMX tiles
/// under bf16 compute (matrices that serve as a matmul operand only).
class CpuWeight final : public engine::Weight {
 public:
  cpu::Weight w;
  std::optional<PackedBf16> packed;
  std::optional<QuantWeight> quant;  ///< a quantized weight (w.data then unused)
};

const CpuWeight& cpu_weight(const engine::Weight& w) { return static_cast<const CpuWeight&>(w); }

/// Blocks allocated on use; each block holds, for every layer, K then V of block_size tokens in the
/// layouts of cpu::KvLayerView (f32, or bf16 in the AMX operand layouts).
class CpuKvStorage final : public KvStorage {
 public:
  CpuKvStorage(const KvSpec& spec, std::size_t max_blocks, Backend* backend)
      : KvStorage(spec, backend), max_blocks_(max_blocks),
        block_floats_(spec.bytes_per_token() * spec.block_size / sizeof(float)) {}
  void ensure_blocks(std::size_t n) override {
    if (n > max_blocks_)
      throw std::invalid_argument("KV storage: " + std::to_string(n) + " blocks asked, capacity " +
                                  std::to_string(max_blocks_));
    while (storage_.size() < n) {
      storage_.push_back(std::make_unique<float[]>(block_floats_));
      ptrs_.push_back(storage_.back().get());
    }
  }
  KvLayerView layer_view(std::size_t layer) const {
    KvLayerView v;
    v.blocks = ptrs_.data();
    // Floats of one layer's K (or V) in a block: bf16 values pack two to a float.
    const bool bf16 = spec_.dtype == DType::bf16;
    const std::size_t per = spec_.block_size * spec_.n_kv_heads * spec_.head_dim / (bf16 ? 2 : 1);
    v.bf16 = bf16;
    v.k_offset = 2 * layer * per;
    v.v_offset = v.k_offset + per;
    v.block_size = spec_.block_size;
    v.n_kv_heads = spec_.n_kv_heads;
    v.head_dim = spec_.head_dim;
    return v;
  }

 private:
  std::size_t max_blocks_, block_floats_;
  std::vector<std::unique_ptr<float[]>> storage_;
  std::vector<float*> ptrs_;
};

const CpuKvStorage& cpu_kv(const KvStorage& kv) { return static_cast<const CpuKvStorage&>(kv); }

template <typename F>
void split(ThreadPool& pool, std::size_t n, F&& fn) {
  if (pool.size() > 1 && n > 1) pool.parallel_for(n, fn);
  else if (n > 0) fn(std::size_t{0}, n);
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(std::size_t n_threads) : pool_(n_threads) {}

  DeviceSpec device() const override { return {}; }
  std::string description() const override {
    std::string bf16 = packed_bf16_available() ? std::string(", bf16 on ") + packed_bf16_kernel_name() : "";
    return std::string("cpu (") + gemm_kernel_name() + bf16 + ", " + std::to_string(pool_.size()) + " threads)";
  }
  bool host_memory() const override { return true; }

  Compute resolve_compute(Compute requested, DType checkpoint) const override {
    if (!packed_bf16_available()) return Compute::exact;
    if (requested == Compute::automatic) {
      if (const char* want = std::getenv("QUARRY_CPU_KERNELS"))
        return std::string_view(want) == "bf16" ? Compute::bf16 : Compute::exact;
      return checkpoint == DType::bf16 ? Compute::bf16 : Compute::exact;
    }
    return requested;
  }

  DType kv_dtype(Compute compute, std::size_t n_heads, std::size_t n_kv_heads, std::size_t head_dim,
                 std::size_t block_size) const override {
    // bf16 compute keeps the KV cache in bf16 too (as a bf16 model keeps it), read on the AMX tiles.
    return compute == Compute::bf16 && kv_bf16_supported(n_heads, n_kv_heads, head_dim, block_size) ? DType::bf16
                                                                                                    : DType::f32;
  }

  // ---- memory ----
  DeviceBuffer alloc(std::size_t bytes) override {
    void* p = ::operator new(std::max<std::size_t>(bytes, 1), std::align_val_t(256));
    return DeviceBuffer(shared_from_this(), p, bytes);
  }
  void upload(void* dst, const void* src, std::size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void download(void* dst, const void* src, std::size_t bytes) override {
    if (bytes && dst != src) std::memcpy(dst, src, bytes);
  }
  void copy_rows(float* dst, std::size_t ldd, const float* src, std::size_t lds, std::size_t rows,
                 std::size_t cols) override {
    for (std::size_t r = 0; r < rows; ++r) std::memcpy(dst + r * ldd, src + r * lds, cols * sizeof(float));
  }
  void gather_rows(float* dst, std::size_t ldd, const float* src, std::size_t lds, const std::int32_t* rows,
                   std::size_t n, std::size_t cols) override {
    for (std::size_t i = 0; i < n; ++i)
      std::memcpy(dst + i * ldd, src + static_cast<std::size_t>(rows[i]) * lds, cols * sizeof(float));
  }
  void moe_combine(float* x, std::size_t ldx, const float* y, std::size_t ldy, const std::int32_t* slots,
                   const float* weights, std::size_t n_tokens, std::size_t k, std::size_t cols) override {
    for (std::size_t t = 0; t < n_tokens; ++t) {
      float* xt = x + t * ldx;
      for (std::size_t c = 0; c < cols; ++c) {
        float acc = 0.f;
        for (std::size_t j = 0; j < k; ++j)
          acc += weights[t * k + j] * y[static_cast<std::size_t>(slots[t * k + j]) * ldy + c];
        xt[c] += acc;
      }
    }
  }
  void fill(float* x, std::size_t n, float value) override { std::fill(x, x + n, value); }
  void synchronize() override {}

  // ---- weights and KV storage ----
  std::unique_ptr<engine::Weight> load_matrix(const void* host, DType dtype, std::size_t rows, std::size_t cols,
                                              WeightUse use, Compute compute) override {
    auto w = std::make_unique<CpuWeight>();
    w->rows = rows;
    w->cols = cols;
    w->dtype = dtype;
    w->w = cpu::Weight{host, dtype, rows, cols};
    // Looked up by row only: packed for the tiles only where it is also a matmul operand.
    if (compute == Compute::bf16 && use != WeightUse::embedding && packed_bf16_available()) {
      w->packed = pack_bf16(host, dtype, rows, cols, nullptr);
      w->w.packed = &*w->packed;
    }
    return w;
  }

  std::unique_ptr<engine::Weight> load_quantized(const QuantizedMatrix& q, WeightUse, Compute compute) override {
    auto w = std::make_unique<CpuWeight>();
    w->quant = make_quant_weight(q);
    // bf16 compute rounds activations anyway: decode products may use int8 activations (VNNI).
    w->quant->bf16_compute = compute != Compute::exact;
    w->rows = q.rows;
    w->cols = q.cols;
    w->dtype = DType::f32;
    w->quant_bytes = w->quant->bytes;
    w->w = cpu::Weight{nullptr, DType::f32, q.rows, q.cols};
    return w;
  }

  std::unique_ptr<KvStorage> make_kv_storage(const KvSpec& spec, std::size_t max_blocks) override {
    if (spec.block_size == 0 || spec.n_layers == 0 || spec.n_kv_heads == 0 || spec.head_dim == 0)
      throw std::invalid_argument("KV storage: empty shape");
    return std::make_unique<CpuKvStorage>(spec, max_blocks, this);
  }

  const StagedBatch& stage(const BatchInputs& in) override {
    tokens_.assign(in.tokens.begin(), in.tokens.end());
    positions_.assign(in.positions.begin(), in.positions.end());
    seq_index_.assign(in.seq_index.begin(), in.seq_index.end());
    tables_.assign(in.block_tables.begin(), in.block_tables.end());
    logit_rows_.assign(in.logit_rows.begin(), in.logit_rows.end());
    state_slots_.assign(in.state_slots.begin(), in.state_slots.end());
    const std::size_t n = tokens_.size();
    // Each token's block-table row; tokens of one sequence share the pointer, which the attention
    // kernels use to find runs of one sequence's consecutive tokens.
    token_tables_.resize(n);
    for (std::size_t t = 0; t < n; ++t)
      token_tables_[t] = tables_.data() + static_cast<std::size_t>(seq_index_[t]) * in.max_blocks;
    staged_ = StagedBatch{};
    staged_.n_tokens = n;
    staged_.n_seqs = in.max_blocks ? tables_.size() / in.max_blocks : 0;
    staged_.max_blocks = in.max_blocks;
    staged_.n_logits = logit_rows_.size();
    staged_.max_position = positions_.empty() ? 0 : *std::max_element(positions_.begin(), positions_.end());
    staged_.tokens = tokens_.data();
    staged_.positions = positions_.data();
    staged_.seq_index = seq_index_.data();
    staged_.block_tables = tables_.data();
    staged_.logit_rows = logit_rows_.data();
    staged_.host_positions = positions_.data();
    staged_.host_seq_index = seq_index_.data();
    staged_.state_slots = staged_.host_state_slots = state_slots_.empty() ? nullptr : state_slots_.data();
    staged_.backend_data = token_tables_.data();
    return staged_;
  }

  // ---- ops ----
  void embedding(const TokenId* tokens, std::size_t n, const engine::Weight& table, float* out,
                 std::size_t ldo) override {
    if (const auto& q = cpu_weight(table).quant) {
      // Each looked-up row dequantized straight into its output row (the values a dequantized table holds).
      for (std::size_t t = 0; t < n; ++t)
        quant_dequant_rows(gemm_default_kernel(), *q, static_cast<std::size_t>(tokens[t]),
                           static_cast<std::size_t>(tokens[t]) + 1, out + t * (ldo ? ldo : table.cols));
      return;
    }
    cpu::embedding(tokens, n, cpu_weight(table).w, out, &pool_, ldo);
  }

  void matmul(const float* x, std::size_t m, std::size_t ldx, const engine::Weight& w, std::size_t n, float* y,
              std::size_t ldy) override {
    const CpuWeight& cw = cpu_weight(w);
    if (n > w.rows) throw std::invalid_argument("matmul: " + std::to_string(n) + " rows of a weight with " +
                                                std::to_string(w.rows));
    if (cw.quant) return quant_gemm(x, m, ldx, *cw.quant, n, y, ldy, &pool_, quant_scratch_);
    if (cw.packed) return gemm_packed(x, m, ldx, *cw.packed, n, y, ldy, &pool_);
    gemm(x, m, w.cols, ldx, cw.w.data, cw.w.type, n, y, ldy, &pool_);
  }

  bool supports_matmul_groups(const engine::Weight& w) const override { return cpu_weight(w).packed.has_value(); }

  void matmul_groups(const float* x, std::size_t m, std::size_t ldx, const engine::Weight& w,
                     std::span<const std::uint32_t> groups, float* y, std::size_t ldy) override {
    const CpuWeight& cw = cpu_weight(w);
    if (!cw.packed) throw std::logic_error("matmul_groups: the weight is not packed for the AMX tiles");
    gemm_packed_groups(x, m, ldx, *cw.packed, w.rows, groups, y, ldy, &pool_);
  }

  void matmul_ids(const float* x, std::size_t m, std::size_t ldx, const engine::Weight& w,
                  std::span<const std::vector<std::int32_t>> ids, float* y, std::size_t ldy) override {
    if (ids.size() != m) throw std::invalid_argument("matmul_ids: one id list per row needed");
    std::vector<float> vals;
    for (std::size_t r = 0; r < m; ++r) {
      float* row = y + r * ldy;
      std::fill(row, row + ldy, -std::numeric_limits<float>::infinity());
      for (const auto id : ids[r])
        if (id < 0 || static_cast<std::size_t>(id) >= w.rows)
          throw std::invalid_argument("matmul_ids: token id " + std::to_string(id) + " outside the weight's " +
                                      std::to_string(w.rows) + " rows");
      vals.resize(ids[r].size());
      if (const auto& q = cpu_weight(w).quant) {
        // The allowed rows dequantized, then the same dot products as an f32 weight gets.
        std::vector<float> row(w.cols);
        const std::int32_t zero = 0;
        for (std::size_t i = 0; i < ids[r].size(); ++i) {
          const auto id = static_cast<std::size_t>(ids[r][i]);
          quant_dequant_rows(gemm_default_kernel(), *q, id, id + 1, row.data());
          dot_rows(x + r * ldx, cpu::Weight{row.data(), DType::f32, 1, w.cols}, &zero, 1, &vals[i]);
        }
      } else {
        dot_rows(x + r * ldx, cpu_weight(w).w, ids[r].data(), ids[r].size(), vals.data());
      }
      for (std::size_t i = 0; i < vals.size(); ++i) row[ids[r][i]] = vals[i];
    }
  }

  void rms_norm(const float* x, float* y, std::size_t rows, std::size_t dim, std::size_t ld, const float* weight,
                float eps) override {
    cpu::rms_norm(x, y, rows, dim, ld, weight, eps, &pool_);
  }

  void rope_angles(const StagedBatch& b, const float* inv_freq, std::size_t rotary_dim, float* cos,
                   float* sin) override {
    cpu::rope_angles(b.host_positions, b.n_tokens, inv_freq, rotary_dim / 2, cos, sin);
  }

  void rope(float* x, std::size_t n_tokens, std::size_t n_heads, std::size_t head_dim, std::size_t ld,
            std::size_t rotary_dim, const float* cos, const float* sin) override {
    cpu::rope(x, n_tokens, n_heads, head_dim, ld, rotary_dim / 2, cos, sin, &pool_);
  }

  void kv_store(const float* k, const float* v, std::size_t ld, const StagedBatch& b, KvStorage& kv,
                std::size_t layer) override {
    cpu::kv_store(k, v, ld, b.n_tokens, b.host_positions, tables_of(b), cpu_kv(kv).layer_view(layer), &pool_);
  }

  void attention(const float* q, std::size_t ldq, float* out, std::size_t ldo, std::size_t n_heads,
                 const StagedBatch& b, const KvStorage& kv, std::size_t layer, float scale) override {
    cpu::attention(q, ldq, out, ldo, b.n_tokens, n_heads, b.host_positions, tables_of(b),
                   cpu_kv(kv).layer_view(layer), scale, &pool_);
  }

  void silu_mul(const float* gate, std::size_t ldg, const float* up, std::size_t ldu, float* out, std::size_t ldo,
                std::size_t rows, std::size_t n) override {
    cpu::silu_mul(gate, ldg, up, ldu, out, ldo, rows, n, &pool_);
  }

  void add(float* x, const float* y, std::size_t n) override { add_inplace(x, y, n, &pool_); }

  void argmax_rows(const float* logits, std::size_t rows, std::size_t n, std::size_t ld,
                   std::span<const std::uint32_t> masks, std::size_t mask_words, std::int32_t* out) override {
    check_argmax_masks(rows, n, masks, mask_words);
    for (std::size_t r = 0; r < rows; ++r)
      out[r] = argmax(logits + r * ld, n, masks.empty() ? nullptr : masks.data() + r * mask_words);
  }

  void sample_rows(const float* logits, std::size_t rows, std::size_t n, std::size_t ld,
                   std::span<const std::uint32_t> masks, std::size_t mask_words, std::span<const RowSampling> params,
                   std::int32_t* out) override {
    check_sample_args(rows, n, masks, mask_words, params);
    for (std::size_t r = 0; r < rows; ++r)
      out[r] = sample_row(logits + r * ld, n, masks.empty() ? nullptr : masks.data() + r * mask_words, params[r]);
  }

  // ---- probes ----
  std::vector<double> probe_bandwidth_gb_s(std::size_t bytes, int runs) override {
    // Streaming reads by every pool thread of its slice (stream_read.hpp), first touched by that thread.
    bytes = std::max<std::size_t>(bytes / 4096 * 4096, 4096);
    std::unique_ptr<std::uint8_t, decltype(&std::free)> buf(
        static_cast<std::uint8_t*>(std::aligned_alloc(64, bytes)), &std::free);
    if (!buf) throw std::runtime_error("cpu: cannot allocate the bandwidth probe buffer");
    const CpuFeatures feat = detect_cpu_features();
    const std::size_t blocks = bytes / 256;
    pool_.parallel_for(blocks, [&](std::size_t a, std::size_t b) {
      std::memset(buf.get() + a * 256, static_cast<int>(a & 0xff), (b - a) * 256);
    });
    std::vector<double> out;
    std::vector<std::uint64_t> sums(pool_.size());
    for (int r = 0; r < runs; ++r) {
      const Stopwatch sw;
      pool_.run([&](std::size_t t, std::size_t nt) {
        const std::size_t a = blocks * t / nt, b = blocks * (t + 1) / nt;
        sums[t] = stream_read(feat, buf.get() + a * 256, (b - a) * 256);
      });
      out.push_back(static_cast<double>(bytes) / sw.seconds() / 1e9);
    }
    // The XOR of the reads must be used, or the loads could be dropped.
    volatile std::uint64_t sink = std::accumulate(sums.begin(), sums.end(), std::uint64_t{0});
    (void)sink;
    return out;
  }

  std::vector<double> probe_matmul_gflops(std::size_t m, std::size_t k, std::size_t n, DType dtype, Compute compute,
                                          int runs) override {
    std::vector<float> x(m * k), y(m * n);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 2654435761u) % 1000) * 1e-3f;
    std::vector<std::uint8_t> w(n * k * dtype_size(dtype));
    for (std::size_t i = 0; i + 1 < w.size(); i += 2) {
      w[i] = static_cast<std::uint8_t>(i * 7);
      w[i + 1] = 0x3c;  // small finite values in bf16, f16 and (pairs of) f32 alike
    }
    const auto weight = load_matrix(w.data(), dtype, n, k, WeightUse::matmul, resolve_compute(compute, dtype));
    matmul(x.data(), m, k, *weight, n, y.data(), n);  // warm-up
    std::vector<double> out;
    for (int r = 0; r < runs; ++r) {
      const Stopwatch sw;
      matmul(x.data(), m, k, *weight, n, y.data(), n);
      out.push_back(2.0 * static_cast<double>(m) * static_cast<double>(k) * static_cast<double>(n) / sw.seconds() /
                    1e9);
    }
    return out;
  }

 protected:
  void free(void* data) noexcept override { ::operator delete(data, std::align_val_t(256)); }
  void run_parallel(std::size_t n, const std::function<void(std::size_t, std::size_t)>& fn) override {
    pool_.parallel_for(n, fn);
  }

 private:
  static const std::int32_t* const* tables_of(const StagedBatch& b) {
    return static_cast<const std::int32_t* const*>(b.backend_data);
  }

  ThreadPool pool_;
  QuantScratch quant_scratch_;
  std::vector<TokenId> tokens_;
  std::vector<std::int32_t> positions_, seq_index_, tables_, logit_rows_, state_slots_;
  std::vector<const std::int32_t*> token_tables_;
  StagedBatch staged_;
};

}  // namespace

std::shared_ptr<Backend> make_cpu_backend(std::size_t n_threads) { return std::make_shared<CpuBackend>(n_threads); }

}  // namespace quarry::engine::cpu
