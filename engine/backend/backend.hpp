// The op-level backend interface: device memory, weights in their stored dtype, the paged KV storage,
// and the ops a transformer forward pass is made of. Models (engine/models/) are written against this
// interface only; the CPU backend (cpu/) is the reference every other backend is checked against
// (tests/backend/test_backend_ops.cpp, after llama.cpp's test-backend-ops), the CUDA backend (cuda/) runs
// the same ops on an NVIDIA GPU.
//
// Conventions for every op:
//  * Activations are f32, row-major, in the backend's memory ("device memory": host memory for the CPU
//    backend), given as a pointer plus a row stride (`ld*`, in elements). Row counts and sizes are in
//    elements; nothing is in bytes unless the name says so.
//  * Ops are ordered: each sees the results of the ops issued before it on the same backend. They may
//    run asynchronously (CUDA: one stream); download() and synchronize() wait for everything issued.
//  * Ops check their arguments' shapes where it is cheap and throw std::invalid_argument; device
//    errors (out of memory, a failed launch) throw std::runtime_error naming the op and the device.
//  * A backend is driven by one thread at a time (the engine's scheduler thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/types.hpp"

namespace quarry::engine {

class Collective;

class Backend;

/// One logit row's sampling for Backend::sample_rows: the filters of the host sampler
/// (engine/runtime/sampler.hpp, SamplingParams), same meaning and order, and the draw's random key.
struct RowSampling {
  float temperature = 0.f;  ///< 0: the row's argmax
  std::uint32_t top_k = 0;  ///< 0: off
  float top_p = 1.f;        ///< 1: off
  float min_p = 0.f;        ///< 0: off
  std::uint64_t key = 0;    ///< the draw's key: the same row, parameters and key give the same id
};

/// Where a backend runs: the CPU, or CUDA device `index`.
struct DeviceSpec {
  enum class Kind : std::uint8_t { cpu, cuda };
  Kind kind = Kind::cpu;
  int index = 0;
  bool operator==(const DeviceSpec&) const = default;
};

/// "cpu", "cuda", "cuda:N", or "auto" (cuda:0 when this build has CUDA and a GPU is present, else cpu).
/// Throws std::invalid_argument on anything else.
DeviceSpec parse_device(std::string_view text);
/// "cpu" or "cuda:N".
std::string device_name(const DeviceSpec& d);

struct BackendOptions {
  DeviceSpec device;
  /// CPU: worker threads including the caller (0: all hardware threads). Other backends ignore it.
  std::size_t n_threads = 0;
};

/// Creates the backend for `options.device`. Throws std::runtime_error with a clear message when the
/// device cannot be used: a CUDA device in a build without CUDA, no GPU or driver, an index out of range.
std::shared_ptr<Backend> make_backend(const BackendOptions& options = {});

/// Whether this build includes the CUDA backend, and how many CUDA devices the driver reports (0 when
/// none, or no driver; never throws).
bool cuda_backend_built();
int cuda_device_count();

/// Memory owned on a backend (RAII): `bytes` bytes at `data` in the backend's memory, 256-byte aligned.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(std::shared_ptr<Backend> owner, void* data, std::size_t bytes)
      : owner_(std::move(owner)), data_(data), bytes_(bytes) {}
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* data() const { return data_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  std::size_t bytes() const { return bytes_; }
  explicit operator bool() const { return data_ != nullptr; }

 private:
  std::shared_ptr<Backend> owner_;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

/// A weight matrix W [rows, cols] (Hugging Face Linear layout: [out_features, in_features]) resident on
/// a backend in its stored dtype, plus whatever copy in a kernel's layout the backend keeps (the CPU
/// backend's AMX tiles under bf16 compute). Created by Backend::load_matrix; the host data it was made
/// from must outlive it on backends that read weights in place (the CPU backend reads the mmap'd file).
class Weight {
 public:
  virtual ~Weight() = default;
  std::size_t rows = 0, cols = 0;
  /// The stored dtype; a quantized weight (load_quantized) says f32, the type its values are computed in.
  DType dtype = DType::f32;
  /// Bytes a quantized weight reads per product (packed values, scales, zero points); 0: not quantized.
  std::size_t quant_bytes = 0;
  bool quantized() const { return quant_bytes != 0; }
  /// Bytes of the stored matrix (what a decode step reads).
  std::size_t bytes() const { return quantized() ? quant_bytes : rows * cols * dtype_size(dtype); }
};

/// The experts of one mixture-of-experts layer as a backend addresses them: E SwiGLU experts of equal
/// shape (gate and up [I, H], down [H, I], one dtype), not owned (the model keeps the weights). A backend
/// may keep more (CUDA: device tables of the experts' weights for its gather kernels).
class ExpertSet {
 public:
  virtual ~ExpertSet() = default;
  std::vector<const Weight*> gate, up, down;
  std::size_t n_experts() const { return gate.size(); }
  std::size_t hidden() const { return gate.empty() ? 0 : gate[0]->cols; }
  std::size_t intermediate() const { return gate.empty() ? 0 : gate[0]->rows; }
};

/// What a weight matrix serves, so that a backend prepares what its kernels need and nothing more.
enum class WeightUse : std::uint8_t {
  matmul,     ///< the right operand of matmul (a projection, an LM head)
  embedding,  ///< rows looked up by token id only
  both,       ///< a tied embedding table that is also the LM head
};

/// The element type of a quantized weight matrix.
enum class QuantElement : std::uint8_t {
  int4,      ///< 4-bit integers, eight to a little-endian int32, the lowest nibble first
  int8,      ///< 8-bit integers: GPTQ packs four to an int32 (unsigned, with zero points); rows: int8
  fp8_e4m3,  ///< OCP FP8 E4M3 (bias 7, no infinities, S.1111.111 is NaN; max 448), one byte each
};

/// How a quantized weight matrix W [rows, cols] (HF Linear [out_features, in_features]) is laid out.
enum class QuantLayout : std::uint8_t {
  /// GPTQ (Frantar et al. 2022; AutoGPTQ / GPTQModel packing, AutoRound's GPTQ export): `data` is qweight,
  /// int32 [cols * bits / 32, rows], packed along the input dimension; value q of W[n, k] sits in word
  /// (k / per_word, n) at bit (k % per_word) * bits. W[n, k] = (q - zeros[g, n]) * scales[g, n] with
  /// g = g_idx[k] (or k / group_size when g_idx is empty): int4 or int8 only.
  gptq,
  /// Row-major quantized values (compressed-tensors int-quantized / pack-quantized / float-quantized,
  /// fine-grained FP8): `data` [rows, cols] (int4: int32 [rows, cols / 8]); W[n, k] = v * scales[n / block_rows,
  /// k / block_cols] with v the int8 value, the int4 value minus 8 (unsigned storage), or the FP8 value.
  rows,
};

/// A quantized weight matrix in host memory, as a checkpoint stores it, for Backend::load_quantized. The
/// packed values stay where they are (the mmap'd file): backends read them in place and must not
/// outlive them; the small per-group tables (scales, zero points, g_idx) are copied. The dequantized value
/// of every element is the f32 product float(q - z) * scale (gptq) or float(v) * scale (rows), rounded
/// once: the value a checkpoint dequantized to f32 holds, which the CPU kernels reproduce exactly.
struct QuantizedMatrix {
  std::size_t rows = 0, cols = 0;
  QuantLayout layout = QuantLayout::gptq;
  QuantElement element = QuantElement::int4;
  const void* data = nullptr;
  /// gptq: [n_groups, rows]; rows: [ceil(rows / block_rows), ceil(cols / block_cols)].
  std::span<const float> scales;
  /// gptq: [n_groups, rows] zero points with any format offset applied (GPTQ v1 stores z - 1); rows: unused.
  std::span<const std::int16_t> zeros;
  /// gptq: [cols] the group of each input column (desc_act checkpoints), or empty: k / group_size.
  std::span<const std::int32_t> g_idx;
  std::size_t group_size = 0;    ///< gptq: input columns per group (cols for one group per row)
  std::size_t n_groups = 0;      ///< gptq: rows of scales and zeros
  std::size_t block_rows = 1, block_cols = 0;  ///< rows: the scale block (block_cols 0: cols)
  /// Bits per value: 4 or 8.
  std::size_t bits() const { return element == QuantElement::int4 ? 4 : 8; }
  /// Bytes one product reads: packed values, scales (f32), zero points (int16), g_idx.
  std::size_t bytes() const;
  /// Checks the shapes and sizes above; throws std::invalid_argument saying what is wrong.
  void validate() const;
};

/// Shape and dtype of a paged KV cache (vLLM PagedAttention): n_layers layers of n_kv_heads heads of
/// head_dim values per token for K and V, in blocks of block_size tokens.
struct KvSpec {
  std::size_t n_layers = 0, n_kv_heads = 0, head_dim = 0;
  std::size_t block_size = 16;  ///< tokens per block
  DType dtype = DType::f32;     ///< f32 or bf16
  /// Hybrid models: f32 values of recurrent state each sequence keeps beside its pages (the conv windows
  /// and delta-rule states of every linear-attention layer); 0 for pure attention models.
  std::size_t state_floats = 0;
  /// Bytes one token occupies over all layers (K and V).
  std::size_t bytes_per_token() const { return 2 * n_layers * n_kv_heads * head_dim * dtype_size(dtype); }
  bool operator==(const KvSpec&) const = default;
};

/// The block storage of a paged KV cache, owned by the backend that computes on it (its layout is the
/// backend's: the CPU keeps K transposed per block for its kernels, see cpu/ops.hpp KvLayerView).
/// The bookkeeping (block tables, reference counts, prefix hashes) lives in engine/memory/.
/// Hybrid models' recurrent state lives here too, in numbered slots (one per sequence and one per saved
/// copy; engine/memory/kv_cache.hpp hands the numbers out), so that it sits in the memory of the device
/// that computes on it (each rank's under tensor parallelism).
class KvStorage {
 public:
  virtual ~KvStorage() = default;
  const KvSpec& spec() const { return spec_; }
  /// Makes blocks 0..n_blocks-1 usable (allocating on use, up to the capacity given at creation).
  /// Throws std::runtime_error when the device is out of memory.
  virtual void ensure_blocks(std::size_t n_blocks) = 0;

  // ---- recurrent state (spec().state_floats > 0; no-ops and nulls otherwise) ----
  /// Makes state slots 0..n_slots-1 usable: spec().state_floats f32 values each, in the backend's memory,
  /// allocated in chunks of a few slots. Throws std::runtime_error when the device is out of memory.
  virtual void ensure_state_slots(std::size_t n_slots);
  /// The state of slot `slot` (device pointer), null without state. Throws std::out_of_range for a slot
  /// not made usable.
  virtual float* recurrent_state(std::size_t slot) const;
  /// Copies slot `from`'s state over slot `to`'s (save, restore, fork).
  virtual void copy_recurrent_state(std::size_t to, std::size_t from);
  /// The state of every usable slot: [n_slots] pointers in the backend's memory (slot -> recurrent_state),
  /// null without state. Device kernels find a staged sequence's state through it (StagedBatch::state_slots),
  /// so that a recorded step reads the slots of the batch it replays. The table is reallocated (a new
  /// address) when ensure_state_slots adds slots.
  virtual float* const* state_table() const;

 protected:
  /// `backend`: allocates and copies the recurrent state (null: a storage without state).
  explicit KvStorage(const KvSpec& spec, Backend* backend = nullptr) : spec_(spec), state_backend_(backend) {}
  KvSpec spec_;

 private:
  Backend* state_backend_ = nullptr;
  std::vector<DeviceBuffer> state_chunks_;
  DeviceBuffer state_table_;  ///< float* [slots of state_chunks_]
};

/// The token batch of one forward call, as the host describes it (the flat batch of engine/core/batch.hpp
/// with each token's block table).
struct BatchInputs {
  std::span<const TokenId> tokens;            ///< [n_tokens]
  std::span<const std::int32_t> positions;    ///< [n_tokens]
  std::span<const std::int32_t> seq_index;    ///< [n_tokens]: the token's row of block_tables
  std::span<const std::int32_t> block_tables; ///< [n_seqs, max_blocks], unused entries -1
  std::size_t max_blocks = 0;
  std::span<const std::int32_t> logit_rows;   ///< batch rows whose logits are wanted, increasing
  /// Hybrid models: [n_seqs] each row's recurrent-state slot (KvStorage::state_table), or empty.
  std::span<const std::int32_t> state_slots;
};

/// A batch staged in device memory by Backend::stage(); valid until the next stage() on that backend.
struct StagedBatch {
  std::size_t n_tokens = 0, n_seqs = 0, max_blocks = 0, n_logits = 0;
  std::int32_t max_position = 0;              ///< largest position of the batch
  const TokenId* tokens = nullptr;            ///< device [n_tokens]
  const std::int32_t* positions = nullptr;    ///< device [n_tokens]
  const std::int32_t* seq_index = nullptr;    ///< device [n_tokens]
  const std::int32_t* block_tables = nullptr; ///< device [n_seqs, max_blocks]
  const std::int32_t* logit_rows = nullptr;   ///< device [n_logits]
  const std::int32_t* state_slots = nullptr;  ///< device [n_seqs] (hybrid models), else null
  /// Host copies (every backend keeps them, for ops whose launch depends on them).
  const std::int32_t* host_positions = nullptr;
  const std::int32_t* host_seq_index = nullptr;
  const std::int32_t* host_state_slots = nullptr;  ///< [n_seqs] or null
  /// Backend-private data of the staged batch (the CPU keeps each token's block-table row pointer).
  const void* backend_data = nullptr;
};

/// A recorded sequence of ops (a CUDA graph) that the backend that recorded it can replay.
class CapturedOps {
 public:
  virtual ~CapturedOps() = default;
};

/// The interface. Everything is in the backend's memory unless its name says host.
class Backend : public std::enable_shared_from_this<Backend> {
 public:
  virtual ~Backend() = default;

  // ---- device ----
  virtual DeviceSpec device() const = 0;
  /// A one-line description: "cpu (avx512, 2 threads)", "cuda:0 NVIDIA H200 (132 SMs, 141 GB)".
  virtual std::string description() const = 0;
  /// Whether device memory is host memory (pointers may be read on the host directly).
  virtual bool host_memory() const = 0;
  /// The Compute mode a model stored in `checkpoint` dtype runs in here when `requested` (resolves
  /// Compute::automatic; falls back to exact where bf16 compute is not available).
  virtual Compute resolve_compute(Compute requested, DType checkpoint) const = 0;
  /// The KV-cache dtype for a model with this attention shape computed in `compute` (exact or bf16).
  virtual DType kv_dtype(Compute compute, std::size_t n_heads, std::size_t n_kv_heads, std::size_t head_dim,
                         std::size_t block_size) const = 0;

  // ---- memory ----
  /// `bytes` of device memory (uninitialised). Throws std::runtime_error when out of memory.
  virtual DeviceBuffer alloc(std::size_t bytes) = 0;
  virtual void upload(void* device_dst, const void* host_src, std::size_t bytes) = 0;
  /// Waits for every op issued before, then copies.
  virtual void download(void* host_dst, const void* device_src, std::size_t bytes) = 0;
  /// Device-to-device copy of rows: dst[r, 0:cols] = src[r, 0:cols] for r < rows (f32, strides in elements).
  virtual void copy_rows(float* dst, std::size_t ldd, const float* src, std::size_t lds, std::size_t rows,
                         std::size_t cols) = 0;
  /// dst[i, 0:cols] = src[rows[i], 0:cols] for i < n; rows in device memory.
  virtual void gather_rows(float* dst, std::size_t ldd, const float* src, std::size_t lds, const std::int32_t* rows,
                           std::size_t n, std::size_t cols) = 0;
  /// The combine step of a mixture of experts: for each token t < n_tokens,
  ///   x[t, 0:cols] += sum over j < k, in j order, of weights[t * k + j] * y[slots[t * k + j], 0:cols]
  /// (the weighted expert outputs summed first, then added to x: HF Qwen3MoeSparseMoeBlock's index_add
  /// into zeros, then the residual add). slots (int32) and weights (f32) in device memory, [n_tokens, k];
  /// x, y f32 at strides ldx, ldy.
  virtual void moe_combine(float* x, std::size_t ldx, const float* y, std::size_t ldy, const std::int32_t* slots,
                           const float* weights, std::size_t n_tokens, std::size_t k, std::size_t cols) = 0;
  // Mixture of experts (HF Qwen3MoeSparseMoeBlock; vLLM fused_moe). The defaults route and group on the
  // host (the ids are downloaded, tokens grouped by expert, one product per expert hit); a backend
  // overrides them with device kernels.
  /// The routing of n_tokens tokens from router logits [n_tokens, n_experts] (f32, contiguous): softmax
  /// over the experts in f32, the k largest probabilities (the lower id first on a tie), divided by their
  /// sum when `renormalize` (norm_topk_prob). Writes ids (int32) and weights (f32), [n_tokens, k] each,
  /// each token's k in ascending expert id. All pointers in device memory.
  /// With `shared_expert` (a shared expert run as expert n_experts of the ExpertSet, HF Qwen3NextSparseMoeBlock's
  /// shared_expert with its shared_expert_gate): each logits row holds n_experts + 1 values, the last the
  /// shared expert's gate logit g, and each token gets k + 1 pairs, the k routed ones then (n_experts,
  /// sigmoid(g)); ids and weights are [n_tokens, k + 1]. moe_experts over them adds the shared expert's
  /// output after the routed ones, as HF adds it to theirs.
  virtual void moe_route(const float* logits, std::size_t n_tokens, std::size_t n_experts, std::size_t k,
                         bool renormalize, bool shared_expert, std::int32_t* ids, float* weights);
  /// Floats of scratch moe_experts needs for n_tokens tokens routed to k experts each.
  static std::size_t moe_scratch_floats(std::size_t n_tokens, std::size_t k, std::size_t hidden,
                                        std::size_t intermediate);
  /// x[t, :] += sum over j < k, in j order, of weights[t, j] * expert_{ids[t, j]}(h[t, :]) with
  /// expert_e(v) = down_e(silu(gate_e v) * (up_e v)), for t < n_tokens (ids and weights from moe_route).
  /// h, x: [n_tokens, hidden] f32 at strides ldh, ldx. `scratch`: moe_scratch_floats() floats.
  virtual void moe_experts(const ExpertSet& experts, const float* h, std::size_t ldh, std::size_t n_tokens,
                           const std::int32_t* ids, const float* weights, std::size_t k, float* x, std::size_t ldx,
                           float* scratch);
  /// The experts of one layer, as this backend addresses them. Throws std::invalid_argument unless
  /// every expert has the shape and dtype of the first.
  virtual std::unique_ptr<ExpertSet> make_expert_set(std::vector<const Weight*> gate, std::vector<const Weight*> up,
                                                     std::vector<const Weight*> down);
  /// Whether moe_route and moe_experts over n_tokens tokens run without copies to the host (so that a
  /// forward with them can be recorded, begin_capture).
  virtual bool moe_on_device(const ExpertSet& experts, std::size_t n_tokens) const {
    (void)experts;
    (void)n_tokens;
    return false;
  }
  // Hybrid models' token mixing (Qwen3-Next, Qwen3.5). The defaults compute on the host (downloading and
  // uploading where device memory is not host memory); a backend overrides them with device kernels.
  /// x[r, i] *= sigmoid(gate[r, gate_cols == 1 ? 0 : i]) for r < rows, i < n (the output gate of gated
  /// attention, gate_cols = n; the shared expert's scalar gate, gate_cols = 1). Strides in elements.
  virtual void sigmoid_mul(const float* gate, std::size_t ldg, std::size_t gate_cols, float* x, std::size_t ldx,
                           std::size_t rows, std::size_t n);
  /// Gated DeltaNet token mixing (Yang, Kautz & Hatamizadeh 2024, "Gated Delta Networks"; HF
  /// Qwen3NextGatedDeltaNet with its recurrent rule torch_recurrent_gated_delta_rule) over the staged
  /// batch, token by token in batch order, each token reading and updating its sequence's state:
  ///   conv:  y = silu(sum_{j<K} w[c, j] * window[j, c]), window = the sequence's last K-1 inputs then
  ///          qkv[t] (a depthwise causal conv1d over the conv_dim = 2 nk dk + nv dv channels, no bias);
  ///   split: q, k [nk, dk] (l2-normalised per head, eps 1e-6; q scaled by 1/sqrt(dk)), v [nv, dv];
  ///   per value head h (key head h / (nv / nk)): beta = sigmoid(b[t, h]),
  ///          g = -exp(A_log[h]) * softplus(a[t, h] + dt_bias[h]);  S_h [dk, dv]:
  ///          S = exp(g) S;  S += k (beta (v - S^T k))^T;  out[t, h] = S^T q.
  /// qkv [n_tokens, conv_dim] (stride ldqkv), a and b [n_tokens, nv] (strides ldab), conv_weight
  /// [conv_dim, K], A_log and dt_bias [nv] (f32, device); out [n_tokens, nv * dv] (stride ldo).
  /// The state of the sequence in row s of the batch's block tables (staged seq_index) is
  /// kv.state_table()[batch.state_slots[s]] + state_offset: this layer's gated_delta_net_state_floats()
  /// floats, laid out as conv window [K - 1, conv_dim] then S [nv, dk, dv]; a token at position 0 zeroes
  /// its state first. Throws std::invalid_argument for a bad shape or a batch staged without state slots.
  struct GatedDeltaNetShape {
    std::size_t n_k_heads = 0, n_v_heads = 0, k_head_dim = 0, v_head_dim = 0, conv_kernel = 0;
    std::size_t conv_dim() const { return 2 * n_k_heads * k_head_dim + n_v_heads * v_head_dim; }
  };
  static std::size_t gated_delta_net_state_floats(const GatedDeltaNetShape& s) {
    return (s.conv_kernel - 1) * s.conv_dim() + s.n_v_heads * s.k_head_dim * s.v_head_dim;
  }
  virtual void gated_delta_net(const GatedDeltaNetShape& shape, const float* qkv, std::size_t ldqkv, const float* a,
                               const float* b, std::size_t ldab, const float* conv_weight, const float* A_log,
                               const float* dt_bias, const StagedBatch& batch, const KvStorage& kv,
                               std::size_t state_offset, float* out, std::size_t ldo);
  /// Whether gated_delta_net of this shape runs on the device without the host (so that a forward with
  /// it can be recorded, begin_capture).
  virtual bool gated_delta_net_on_device(const GatedDeltaNetShape& shape) const {
    (void)shape;
    return false;
  }
  /// x[i] = value for i < n.
  virtual void fill(float* x, std::size_t n, float value) = 0;
  /// Waits for every op issued before.
  virtual void synchronize() = 0;
  /// Makes the calling thread able to drive this backend (CUDA: makes its device the thread's current
  /// one). A thread that drives backends of several devices in turn (the ranks of a tensor-parallel
  /// group) calls it before it uses one. The CPU needs nothing.
  virtual void bind_thread() {}

  // ---- weights and KV storage ----
  /// Makes `host` ([rows, cols] row-major in `dtype`) a weight of this backend, prepared for `use` under
  /// `compute`. Throws std::runtime_error when out of memory.
  virtual std::unique_ptr<Weight> load_matrix(const void* host, DType dtype, std::size_t rows, std::size_t cols,
                                              WeightUse use, Compute compute) = 0;
  /// Makes a quantized matrix a weight of this backend (matmul, matmul_ids and embedding read it in its
  /// packed form; matmul_groups is not supported for it). The default refuses: std::runtime_error naming
  /// the device and the format (a backend without kernels for packed weights).
  virtual std::unique_ptr<Weight> load_quantized(const QuantizedMatrix& q, WeightUse use, Compute compute);
  /// A vector of f32 values in device memory (norm weights, RoPE frequencies).
  DeviceBuffer load_vector(std::span<const float> host);
  /// Storage for up to `max_blocks` blocks of `spec` (allocated as ensure_blocks asks, or at once).
  virtual std::unique_ptr<KvStorage> make_kv_storage(const KvSpec& spec, std::size_t max_blocks) = 0;

  // ---- the forward pass's inputs ----
  /// Copies the batch's token ids, positions and block tables to the device.
  virtual const StagedBatch& stage(const BatchInputs& inputs) = 0;

  // ---- ops ----
  /// out[t, :] = table[tokens[t], :] for t < n (tokens in device memory, each < table.rows).
  virtual void embedding(const TokenId* tokens, std::size_t n, const Weight& table, float* out, std::size_t ldo) = 0;
  /// y[m, n] = x[m, w.cols] . W[0:n, :]^T (torch.nn.Linear without bias), n <= w.rows (a leading slice of
  /// the rows: a draft sub-vocabulary of an LM head). Computed as `compute` asked when the weight was loaded.
  virtual void matmul(const float* x, std::size_t m, std::size_t ldx, const Weight& w, std::size_t n, float* y,
                      std::size_t ldy) = 0;
  // Fused forms of common sequences. The defaults issue the plain ops (the CPU keeps them, so its
  // results stay the same bit for bit); a backend overrides them with fewer launches.
  /// One product of x [m, *] by several weights of the same width, each into its own output (q, k, v).
  struct MatmulOut {
    const Weight* w;
    float* y;
    std::size_t ldy;
  };
  virtual void matmul_many(const float* x, std::size_t m, std::size_t ldx, std::span<const MatmulOut> outs);
  /// y[m, w.rows] += x . W^T (a projection added to the residual). `scratch` holds [m, w.rows] f32.
  virtual void matmul_add(const float* x, std::size_t m, std::size_t ldx, const Weight& w, float* y, std::size_t ldy,
                          float* scratch);
  /// y[m, w.rows] (contiguous) += the sum over the ranks of `tp` of each rank's x . W^T (a row-parallel
  /// projection's partial sums added to the residual stream; Collective::all_reduce_add). `scratch` holds
  /// [m, w.rows] f32. Every rank of `tp` makes the same call. The default is matmul into scratch, then
  /// tp.all_reduce_add; the CUDA backend sends each column to the peers as its GEMV finishes it.
  virtual void matmul_all_reduce_add(const float* x, std::size_t m, std::size_t ldx, const Weight& w, float* y,
                                     float* scratch, Collective& tp);
  /// out[m, gate.rows] = silu(x . Wg^T) * (x . Wu^T) (SwiGLU's first half). `scratch` holds [m, up.rows] f32;
  /// `out` may serve as the gate's scratch.
  virtual void matmul_swiglu(const float* x, std::size_t m, std::size_t ldx, const Weight& gate, const Weight& up,
                             float* out, std::size_t ldo, float* scratch);
  /// Per-head RMSNorm (weight [head_dim]) then RoPE, in place: rms_norm over each head of x [n_tokens,
  /// n_heads * head_dim] at stride ld, then rope() (Qwen3's q_norm / k_norm before the rotation).
  virtual void head_norm_rope(float* x, std::size_t n_tokens, std::size_t n_heads, std::size_t head_dim,
                              std::size_t ld, const float* norm_weight, float eps, std::size_t rotary_dim,
                              const float* cos, const float* sin);

  /// matmul_many() of h = rms_norm(x) (weight norm_weight [ldx-wide rows of `hidden`], eps): a block's
  /// input norm and its first products. The default writes h ([m, hidden] at stride hidden) then runs
  /// matmul_many(h); a backend may fold the norm into the products and leave h unwritten, with the same
  /// values: the callers use h as scratch only.
  virtual void norm_matmul_many(const float* x, std::size_t m, std::size_t hidden, std::size_t ldx,
                                const float* norm_weight, float eps, float* h, std::span<const MatmulOut> outs);
  /// matmul_swiglu() of h = rms_norm(x), as norm_matmul_many().
  virtual void norm_matmul_swiglu(const float* x, std::size_t m, std::size_t hidden, std::size_t ldx,
                                  const float* norm_weight, float eps, float* h, const Weight& gate, const Weight& up,
                                  float* out, std::size_t ldo, float* scratch);
  /// A Qwen3 attention block's step between the q/k/v products and attention: head_norm_rope() of q
  /// (n_heads heads, stride ldq) with q_norm and of k (n_kv_heads, stride ldkv) with k_norm, then
  /// kv_store() of k and v into layer `layer` of `kv`. The default issues those ops; a backend may fuse
  /// them (CUDA: one launch).
  virtual void qk_norm_rope_store(float* q, std::size_t ldq, float* k, const float* v, std::size_t ldkv,
                                  std::size_t n_heads, std::size_t n_kv_heads, std::size_t head_dim,
                                  const float* q_norm, const float* k_norm, float eps, std::size_t rotary_dim,
                                  const float* cos, const float* sin, const StagedBatch& batch, KvStorage& kv,
                                  std::size_t layer);

  /// Whether matmul_groups() can compute a subset of `w`'s rows bit-identically to matmul().
  virtual bool supports_matmul_groups(const Weight& w) const = 0;
  /// matmul() for the output columns of some groups of 16 only: y[:, 16 g .. 16 g + 15] for each g in
  /// `groups` (host, strictly increasing, g < ceil(w.rows / 16)); other columns untouched; values
  /// bit-identical to matmul()'s (an LM head computed only where a grammar allows tokens).
  /// Throws std::logic_error where !supports_matmul_groups(w).
  virtual void matmul_groups(const float* x, std::size_t m, std::size_t ldx, const Weight& w,
                             std::span<const std::uint32_t> groups, float* y, std::size_t ldy) = 0;
  /// For each row r < m: y[r, :] = -infinity except y[r, ids[r][i]] = x[r, :] . W[ids[r][i], :] (host id
  /// lists, each id < w.rows; f32 accumulation of the weights widened exactly): the logits of a few
  /// allowed tokens of a draft position.
  virtual void matmul_ids(const float* x, std::size_t m, std::size_t ldx, const Weight& w,
                          std::span<const std::vector<std::int32_t>> ids, float* y, std::size_t ldy) = 0;
  /// RMSNorm (Zhang & Sennrich 2019; HF Qwen3RMSNorm): y = x / sqrt(mean(x^2) + eps) * weight, per row of
  /// `dim` elements, `rows` rows at stride ld (in place allowed). weight: device f32 [dim].
  virtual void rms_norm(const float* x, float* y, std::size_t rows, std::size_t dim, std::size_t ld,
                        const float* weight, float eps) = 0;
  /// cos/sin [n, rotary_dim / 2] of position * inv_freq[i] (f32 angle as HF computes it; cos and sin in
  /// double, rounded) for the staged batch's n_tokens positions. inv_freq: device f32 [rotary_dim / 2].
  virtual void rope_angles(const StagedBatch& batch, const float* inv_freq, std::size_t rotary_dim, float* cos,
                           float* sin) = 0;
  /// RoPE in place (RoFormer, Su et al. 2021) with HF's rotate_half pairing: for i < rotary_dim / 2,
  /// (x[i], x[i + rotary_dim/2]) of each head rotated by the token's angle i; dims >= rotary_dim pass
  /// (partial rotary). x: [n_tokens, n_heads * head_dim] at stride ld; cos/sin from rope_angles.
  virtual void rope(float* x, std::size_t n_tokens, std::size_t n_heads, std::size_t head_dim, std::size_t ld,
                    std::size_t rotary_dim, const float* cos, const float* sin) = 0;
  /// Writes k, v ([n_tokens, n_kv_heads * head_dim], stride ld) of the batch's tokens into layer `layer`
  /// of `kv` at each token's position through its block table.
  virtual void kv_store(const float* k, const float* v, std::size_t ld, const StagedBatch& batch, KvStorage& kv,
                        std::size_t layer) = 0;
  /// Causal scaled-dot-product attention over the paged cache (vLLM PagedAttention), GQA: query head h
  /// reads kv head h / (n_heads / n_kv_heads); token t attends to positions 0..positions[t] of its own
  /// sequence, whose K/V must be stored (kv_store first). q, out: [n_tokens, n_heads * head_dim] at
  /// strides ldq, ldo. Softmax in f32. A token's output does not depend on the other tokens of the call.
  virtual void attention(const float* q, std::size_t ldq, float* out, std::size_t ldo, std::size_t n_heads,
                         const StagedBatch& batch, const KvStorage& kv, std::size_t layer, float scale) = 0;
  /// SwiGLU (Shazeer 2020): out = silu(gate) * up over rows of n (strides ldg, ldu, ldo).
  virtual void silu_mul(const float* gate, std::size_t ldg, const float* up, std::size_t ldu, float* out,
                        std::size_t ldo, std::size_t rows, std::size_t n) = 0;
  /// x[i] += y[i] for i < n.
  virtual void add(float* x, const float* y, std::size_t n) = 0;
  /// Greedy sampling where the logits are: out_host[r] = the first id of the largest logit of row r of
  /// logits [rows, n] at stride ld (torch.argmax's order; NaN logits are never picked). `masks` (host;
  /// empty: every id allowed) holds rows x mask_words uint32 token bitmasks, mask_words >= ceil(n / 32),
  /// bit i of word w of row r allowing id 32 w + i (the sampler's layout): only allowed ids count, and a
  /// row that allows none gets -1. Without masks a row of -inf / NaN gets 0. Only the ids leave the
  /// device. Throws std::invalid_argument when masks are given but too short.
  virtual void argmax_rows(const float* logits, std::size_t rows, std::size_t n, std::size_t ld,
                           std::span<const std::uint32_t> masks, std::size_t mask_words, std::int32_t* out_host) = 0;
  /// Sampling where the logits are: out_host[r] = an id drawn from row r of logits [rows, n] at stride ld
  /// under params[r] (RowSampling), among the ids its mask allows (masks as argmax_rows; NaN logits never
  /// drawn); -1 where none is. A row of temperature 0 gets argmax_rows's id. Otherwise the kept set is the
  /// host sampler's (engine/runtime/sampler.hpp: v = logit * (1 / temperature), candidates in descending v,
  /// ties by the smaller id; the top_k first; of those the shortest prefix whose mass reaches top_p, the
  /// masses exp(v - max) summed in fixed point (sampling.hpp); those with exp(v - max) >= min_p), and the
  /// draw is argmax over the kept ids of v + Gumbel noise keyed by params[r].key (the Gumbel-max trick,
  /// sampling.hpp): the same logits, parameters and key give the same id on every backend, up to the
  /// last bit of exp / log at a tie. Only the ids leave the device. Throws std::invalid_argument on
  /// params.size() != rows, masks as argmax_rows, or parameters the sampler refuses (temperature < 0,
  /// top_p outside (0, 1], min_p outside [0, 1]).
  virtual void sample_rows(const float* logits, std::size_t rows, std::size_t n, std::size_t ld,
                           std::span<const std::uint32_t> masks, std::size_t mask_words,
                           std::span<const RowSampling> params, std::int32_t* out_host) = 0;

  // ---- recording (CUDA graphs; Nguyen et al., "Getting Started with CUDA Graphs") ----
  /// Whether begin_capture / end_capture / replay work here.
  virtual bool supports_capture() const { return false; }
  /// Starts recording: the ops issued until end_capture() are recorded, not run, with their arguments
  /// (device pointers and sizes) fixed. Meanwhile no op may allocate, free or copy to the host.
  /// Throws std::logic_error where unsupported.
  virtual void begin_capture();
  /// Ends the recording begun by begin_capture().
  virtual std::unique_ptr<CapturedOps> end_capture();
  /// Runs a recording again. Returns false, running nothing, when device memory was allocated or freed
  /// since it was recorded (it may point to freed buffers): record anew.
  virtual bool replay(const CapturedOps& ops);
  /// Whether replay(ops) would run it now (false: memory was allocated or freed since it was recorded).
  /// The ranks of a tensor-parallel group ask before any of them replays, since a rank that replays
  /// its step alone would wait in its collectives for the others.
  virtual bool replayable(const CapturedOps& ops) const {
    (void)ops;
    return supports_capture();
  }

  // ---- probes (for benchmarks' rooflines) ----
  /// Memory bandwidth in GB/s (1e9 B/s) of `runs` passes over `bytes` bytes, as decode meets it: on the
  /// CPU, streaming reads by every thread of its slice; on a GPU, a device-to-device copy counting the
  /// bytes read and written. One figure per run.
  virtual std::vector<double> probe_bandwidth_gb_s(std::size_t bytes, int runs) = 0;
  /// GFLOP/s (2 m n k per product) of matmul() of x [m, k] by a W [n, k] stored in `dtype`, computed as
  /// `compute` resolves here, after one warm-up. One figure per run.
  virtual std::vector<double> probe_matmul_gflops(std::size_t m, std::size_t k, std::size_t n, DType dtype,
                                                  Compute compute, int runs) = 0;

 protected:
  /// Frees memory handed out by alloc() (called by DeviceBuffer).
  virtual void free(void* data) noexcept = 0;
  /// Runs fn(begin, end) over ranges covering [0, n) and waits: the host loops of the default ops
  /// (gated_delta_net's heads) spread over a backend's threads. The default runs fn(0, n) here.
  virtual void run_parallel(std::size_t n, const std::function<void(std::size_t, std::size_t)>& fn);
  friend class DeviceBuffer;
  /// argmax_rows()'s check of its masks: std::invalid_argument unless they are empty or rows x
  /// mask_words words with mask_words >= ceil(n / 32).
  static void check_argmax_masks(std::size_t rows, std::size_t n, std::span<const std::uint32_t> masks,
                                 std::size_t mask_words);
  /// sample_rows()'s check of its arguments (the masks as check_argmax_masks, one RowSampling a row,
  /// each valid): std::invalid_argument naming what is wrong.
  static void check_sample_args(std::size_t rows, std::size_t n, std::span<const std::uint32_t> masks,
                                std::size_t mask_words, std::span<const RowSampling> params);
};

}  // namespace quarry::engine
