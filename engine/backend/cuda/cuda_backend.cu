#include "engine/backend/cuda/cuda_backend.hpp"

#include <cublas_v2.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/kernels.cuh"
#include "engine/backend/cuda/one_shot.cuh"
#include "engine/core/stopwatch.hpp"

namespace quarry::engine::cuda {

namespace {

/// cuBLAS, loaded at run time (dlopen) so that binaries built with CUDA run where the library is absent:
/// products that would use it then run on the f32 tiled kernel.
struct Cublas {
  void* lib = nullptr;
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                    const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                                    cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  GemmEx gemm_ex = nullptr;
  bool ok() const { return gemm_ex != nullptr; }
  static const Cublas& get() {
    static const Cublas api = [] {
      Cublas a;
      // QUARRY_CUBLAS (a path) first, then the loader's search path, then the toolkit's usual folders.
      std::vector<std::string> names;
      if (const char* p = std::getenv("QUARRY_CUBLAS")) names.push_back(p);
      for (const char* n : {"libcublas.so.13", "libcublas.so.12", "libcublas.so"}) names.push_back(n);
      for (const char* env : {"CUDA_HOME", "CUDA_PATH"})
        if (const char* root = std::getenv(env)) names.push_back(std::string(root) + "/lib64/libcublas.so");
      names.push_back("/usr/local/cuda/lib64/libcublas.so");
      for (const auto& name : names) {
        a.lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (a.lib) break;
      }
      if (!a.lib) return a;
      a.create = reinterpret_cast<decltype(a.create)>(dlsym(a.lib, "cublasCreate_v2"));
      a.destroy = reinterpret_cast<decltype(a.destroy)>(dlsym(a.lib, "cublasDestroy_v2"));
      a.set_stream = reinterpret_cast<decltype(a.set_stream)>(dlsym(a.lib, "cublasSetStream_v2"));
      a.gemm_ex = reinterpret_cast<decltype(a.gemm_ex)>(dlsym(a.lib, "cublasGemmEx"));
      if (!a.create || !a.destroy || !a.set_stream || !a.gemm_ex) a.gemm_ex = nullptr;
      return a;
    }();
    return api;
  }
};

void check_cublas(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cuda: ") + what + ": cuBLAS status " + std::to_string(static_cast<int>(st)));
}

int wtype(DType t) { return t == DType::f32 ? kF32 : t == DType::f16 ? kF16 : kBF16; }

/// A weight in device memory: the stored matrix (bf16 under bf16 compute).
class CudaWeight final : public engine::Weight {
 public:
  void* data = nullptr;
  DType device_dtype = DType::f32;
  bool bf16_compute = false;  ///< loaded under Compute::bf16: products round x to bf16 (tensor cores)
  /// A quantized weight (load_quantized): its kernel type (QType) and tables; qtype 0: not quantized.
  int qtype = 0;
  QuantArgs q;
  void* tables = nullptr;  ///< scales, zeros, g_idx in one allocation
  ~CudaWeight() override {
    if (data) cudaFree(data);
    if (tables) cudaFree(tables);
  }
};

const CudaWeight& cuda_weight(const engine::Weight& w) { return static_cast<const CudaWeight&>(w); }

/// An MoE layer's experts with device tables of their weights' addresses (the gather kernels' input).
class CudaExpertSet final : public ExpertSet {
 public:
  DeviceBuffer tables;   ///< const void* [3][n_experts]: gate, up, down
  DeviceBuffer qtables;  ///< quantized experts: QuantArgs [3][n_experts], gate, up, down
  int type = kBF16;      ///< WType, or the experts' QType
  bool round_x = false;
  bool gemv_ok = false;  ///< the shapes the gather-GEMV kernels take
  const void* const* gate_table() const { return tables.as<const void* const>(); }
  const void* const* up_table() const { return gate_table() + n_experts(); }
  const void* const* down_table() const { return gate_table() + 2 * n_experts(); }
  const QuantArgs* qgate_table() const { return qtables.bytes() ? qtables.as<const QuantArgs>() : nullptr; }
  const QuantArgs* qup_table() const { return qtables.bytes() ? qgate_table() + n_experts() : nullptr; }
  const QuantArgs* qdown_table() const { return qtables.bytes() ? qgate_table() + 2 * n_experts() : nullptr; }
};

/// K and V of every layer, allocated at once for the capacity: per layer K then V, each
/// [max_blocks, n_kv_heads, block_size, head_dim].
class CudaKvStorage final : public KvStorage {
 public:
  CudaKvStorage(const KvSpec& spec, std::size_t max_blocks, Backend* backend)
      : KvStorage(spec, backend), max_blocks_(max_blocks) {
    per_ = max_blocks * spec.n_kv_heads * spec.block_size * spec.head_dim * dtype_size(spec.dtype);
    const std::size_t bytes = std::max<std::size_t>(2 * spec.n_layers * per_, 256);
    const cudaError_t e = cudaMalloc(&base_, bytes);
    if (e != cudaSuccess)
      throw std::runtime_error("cuda: KV cache of " + std::to_string(bytes >> 20) + " MiB (" +
                               std::to_string(max_blocks * spec.block_size) +
                               " tokens) does not fit the device: " + cudaGetErrorString(e) +
                               "; lower max_kv_tokens / kv_cache_mb");
  }
  ~CudaKvStorage() override {
    if (base_) cudaFree(base_);
  }
  void ensure_blocks(std::size_t n) override {
    if (n > max_blocks_)
      throw std::invalid_argument("KV storage: " + std::to_string(n) + " blocks asked, capacity " +
                                  std::to_string(max_blocks_));
  }
  KvLayer layer(std::size_t l) const {
    KvLayer k;
    k.k = static_cast<char*>(base_) + 2 * l * per_;
    k.v = static_cast<char*>(base_) + (2 * l + 1) * per_;
    k.bf16 = spec_.dtype == DType::bf16;
    k.n_kv_heads = static_cast<int>(spec_.n_kv_heads);
    k.head_dim = static_cast<int>(spec_.head_dim);
    k.block_size = static_cast<int>(spec_.block_size);
    return k;
  }

 private:
  std::size_t max_blocks_, per_ = 0;
  void* base_ = nullptr;
};

const CudaKvStorage& cuda_kv(const KvStorage& kv) { return static_cast<const CudaKvStorage&>(kv); }

/// Device scratch that grows (freed and reallocated, with 25% headroom) and is never shrunk; a growth
/// bumps `generation` (recordings that point to the old buffer are stale).
class Scratch {
 public:
  explicit Scratch(std::uint64_t* generation) : generation_(generation) {}
  ~Scratch() {
    if (p_) cudaFree(p_);
  }
  void* get(std::size_t bytes) {
    if (bytes > bytes_) {
      if (p_) cudaFree(p_);
      p_ = nullptr;
      const std::size_t want = bytes + bytes / 4;
      check(cudaMalloc(&p_, want), "scratch allocation");
      bytes_ = want;
      ++*generation_;
    }
    return p_;
  }

 private:
  std::uint64_t* generation_;
  void* p_ = nullptr;
  std::size_t bytes_ = 0;
};

/// A CUDA graph and the memory generation it was recorded at.
class CudaGraph final : public CapturedOps {
 public:
  cudaGraphExec_t exec = nullptr;
  std::uint64_t generation = 0;
  ~CudaGraph() override {
    if (exec) cudaGraphExecDestroy(exec);
  }
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int index) : index_(index) {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess)
      throw std::runtime_error("device cuda:" + std::to_string(index) + ": no usable CUDA driver or GPU (" +
                               cudaGetErrorString(e) + ")");
    if (index < 0 || index >= n)
      throw std::runtime_error("device cuda:" + std::to_string(index) + ": only " + std::to_string(n) +
                               " CUDA device(s) present");
    check(cudaSetDevice(index), "cudaSetDevice");
    check(cudaGetDeviceProperties(&prop_, index), "cudaGetDeviceProperties");
    // Programmatic dependent launch (sm_90+) for the kernels that keep its rule (QUARRY_CUDA_PDL=0 turns
    // it off, a diagnostic).
    const char* pdl = std::getenv("QUARRY_CUDA_PDL");
    set_programmatic_launch(prop_.major >= 9 && !(pdl && std::string(pdl) == "0"));
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check(cudaEventCreateWithFlags(&staged_event_, cudaEventDisableTiming), "cudaEventCreate");
    if (Cublas::get().ok()) {
      check_cublas(Cublas::get().create(&cublas_), "cublasCreate");
      check_cublas(Cublas::get().set_stream(cublas_, stream_), "cublasSetStream");
      warm_up_cublas();
    }
  }

  ~CudaBackend() override {
    if (pinned_) cudaFreeHost(pinned_);
    if (cublas_) Cublas::get().destroy(cublas_);
    if (staged_event_) cudaEventDestroy(staged_event_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  DeviceSpec device() const override { return {DeviceSpec::Kind::cuda, index_}; }
  std::string description() const override {
    return "cuda:" + std::to_string(index_) + " " + prop_.name + " (" + std::to_string(prop_.multiProcessorCount) +
           " SMs, " + std::to_string(prop_.totalGlobalMem >> 30) + " GiB, compute capability " +
           std::to_string(prop_.major) + "." + std::to_string(prop_.minor) +
           (programmatic_launch() ? "" : "; programmatic launch off") +
           (cublas_ ? "" : "; cuBLAS not found: products of more than 8 rows on the f32 kernel") + ")";
  }
  bool host_memory() const override { return false; }

  Compute resolve_compute(Compute requested, DType checkpoint) const override {
    // The checkpoint's dtype: bf16 on the tensor cores for a bf16 checkpoint; f16 and f32 checkpoints
    // compute exactly (bf16 would lose f16's precision).
    if (requested == Compute::automatic) return checkpoint == DType::bf16 ? Compute::bf16 : Compute::exact;
    return requested;
  }
  DType kv_dtype(Compute compute, std::size_t, std::size_t, std::size_t, std::size_t) const override {
    return compute == Compute::bf16 ? DType::bf16 : DType::f32;
  }

  // ---- memory ----
  DeviceBuffer alloc(std::size_t bytes) override {
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, std::max<std::size_t>(bytes, 1));
    if (e != cudaSuccess)
      throw std::runtime_error("cuda: allocation of " + std::to_string(bytes) + " bytes: " + cudaGetErrorString(e));
    ++generation_;
    return DeviceBuffer(shared_from_this(), p, bytes);
  }
  void upload(void* dst, const void* src, std::size_t bytes) override {
    if (bytes) check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "upload");
    check(cudaStreamSynchronize(stream_), "upload");
  }
  void download(void* dst, const void* src, std::size_t bytes) override {
    if (bytes) check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "download");
    check(cudaStreamSynchronize(stream_), "download");
  }
  void copy_rows(float* dst, std::size_t ldd, const float* src, std::size_t lds, std::size_t rows,
                 std::size_t cols) override {
    if (rows == 0 || cols == 0) return;
    check(cudaMemcpy2DAsync(dst, ldd * sizeof(float), src, lds * sizeof(float), cols * sizeof(float), rows,
                            cudaMemcpyDeviceToDevice, stream_),
          "copy_rows");
  }
  void gather_rows(float* dst, std::size_t ldd, const float* src, std::size_t lds, const std::int32_t* rows,
                   std::size_t n, std::size_t cols) override {
    launch_gather_rows(dst, ldd, src, lds, rows, n, cols, stream_);
  }
  void moe_combine(float* x, std::size_t ldx, const float* y, std::size_t ldy, const std::int32_t* slots,
                   const float* weights, std::size_t n_tokens, std::size_t k, std::size_t cols) override {
    launch_moe_combine(x, ldx, y, ldy, slots, weights, n_tokens, k, cols, stream_);
  }
  void fill(float* x, std::size_t n, float value) override { launch_fill(x, n, value, stream_); }

  // ---- mixture of experts ----
  std::unique_ptr<ExpertSet> make_expert_set(std::vector<const engine::Weight*> gate,
                                             std::vector<const engine::Weight*> up,
                                             std::vector<const engine::Weight*> down) override {
    Backend::make_expert_set(gate, up, down);  // checks the shapes and dtypes
    auto set = std::make_unique<CudaExpertSet>();
    set->gate = std::move(gate);
    set->up = std::move(up);
    set->down = std::move(down);
    const std::size_t E = set->n_experts();
    const CudaWeight& first = cuda_weight(*set->gate[0]);
    std::vector<const void*> table(3 * E);
    std::vector<QuantArgs> qtable(first.qtype ? 3 * E : 0);
    bool same = true;
    for (std::size_t e = 0; e < E; ++e) {
      const CudaWeight* w[3] = {&cuda_weight(*set->gate[e]), &cuda_weight(*set->up[e]), &cuda_weight(*set->down[e])};
      for (int i = 0; i < 3; ++i) {
        table[i * E + e] = w[i]->data;
        if (!qtable.empty()) qtable[i * E + e] = w[i]->q;
        same = same && w[i]->qtype == first.qtype && w[i]->device_dtype == first.device_dtype &&
               w[i]->bf16_compute == first.bf16_compute && reinterpret_cast<std::uintptr_t>(w[i]->data) % 16 == 0 &&
               (!w[i]->qtype || expert_quant_ok(*w[i]));
      }
    }
    set->tables = alloc(table.size() * sizeof(const void*));
    upload(set->tables.data(), table.data(), table.size() * sizeof(const void*));
    if (!qtable.empty()) {
      set->qtables = alloc(qtable.size() * sizeof(QuantArgs));
      upload(set->qtables.data(), qtable.data(), qtable.size() * sizeof(QuantArgs));
    }
    set->type = first.qtype ? first.qtype : wtype(first.device_dtype);
    set->round_x = first.bf16_compute;
    set->gemv_ok = same && set->hidden() % 8 == 0 && set->intermediate() % 8 == 0;
    return set;
  }

  /// Whether the gather-GEMVs read a quantized expert weight (load8q: 8 values of a row at a time, the
  /// 8-byte loads of the 8-bit layouts aligned).
  static bool expert_quant_ok(const CudaWeight& w) {
    if (w.cols % 8 != 0) return false;
    if (w.qtype == kG8 || w.qtype == kG4) return w.q.words_per_row % 2 == 0 && w.q.group_size > 0;
    return w.q.block_cols > 0 && w.q.block_rows > 0;
  }

  bool moe_on_device(const ExpertSet& experts, std::size_t n_tokens) const override {
    const auto& set = static_cast<const CudaExpertSet&>(experts);
    return moe_gemv(set, n_tokens) || moe_grouped(set, n_tokens);
  }
  /// The gather-GEMV path (a few tokens).
  static bool moe_gemv(const CudaExpertSet& set, std::size_t n_tokens) {
    return set.gemv_ok && n_tokens <= kMoeGemvMaxTokens && set.n_experts() <= kMaxMoeExperts;
  }
  /// The grouped tensor-core path (more tokens, bf16 compute), which needs the routing k only for its
  /// limits: any k up to kMaxMoeTopK + 1 (a shared expert's pair) is checked.
  static bool moe_grouped(const CudaExpertSet& set, std::size_t n_tokens) {
    return set.gemv_ok && set.round_x && n_tokens > kMoeGemvMaxTokens &&
           moe_grouped_supported(set.type, n_tokens * (kMaxMoeTopK + 1), set.n_experts()) &&
           grouped_meta_fits(set, n_tokens, 1);
  }
  /// Whether the grouped path's work (bf16 inputs and activations, f32 outputs) and metadata fit the
  /// moe_scratch_floats the model gives moe_experts.
  static bool grouped_meta_fits(const CudaExpertSet& set, std::size_t n_tokens, std::size_t k) {
    const std::size_t pairs = n_tokens * k, H = set.hidden(), I = set.intermediate();
    return moe_grouped_work_floats(pairs, H, I) + moe_grouped_meta_ints(pairs, set.n_experts()) <=
           Backend::moe_scratch_floats(n_tokens, k, H, I);
  }

  void moe_route(const float* logits, std::size_t n_tokens, std::size_t n_experts, std::size_t k, bool renormalize,
                 bool shared_expert, std::int32_t* ids, float* weights) override {
    if (k == 0 || k > n_experts) throw std::invalid_argument("moe_route: k must be in 1..n_experts");
    if (k > kMaxMoeTopK || n_experts > kMaxMoeExperts)
      return Backend::moe_route(logits, n_tokens, n_experts, k, renormalize, shared_expert, ids, weights);
    launch_moe_route(logits, n_tokens, n_experts, k, renormalize, shared_expert, ids, weights, stream_);
  }

  void moe_experts(const ExpertSet& experts, const float* h, std::size_t ldh, std::size_t n_tokens,
                   const std::int32_t* ids, const float* weights, std::size_t k, float* x, std::size_t ldx,
                   float* scratch) override {
    const auto& set = static_cast<const CudaExpertSet&>(experts);
    const bool aligned = ldh % 4 == 0 && reinterpret_cast<std::uintptr_t>(h) % 16 == 0 &&
                         reinterpret_cast<std::uintptr_t>(scratch) % 16 == 0;
    const bool gemv = aligned && moe_gemv(set, n_tokens);
    const bool grouped = aligned && !gemv && moe_grouped(set, n_tokens) &&
                         moe_grouped_supported(set.type, n_tokens * k, set.n_experts()) &&
                         grouped_meta_fits(set, n_tokens, k);
    if (!gemv && !grouped) return Backend::moe_experts(experts, h, ldh, n_tokens, ids, weights, k, x, ldx, scratch);
    MoeGemvArgs a;
    a.h = h;
    a.ldh = ldh;
    a.n_tokens = n_tokens;
    a.k = k;
    a.hidden = set.hidden();
    a.inter = set.intermediate();
    a.ids = ids;
    a.weights = weights;
    a.gate = set.gate_table();
    a.up = set.up_table();
    a.down = set.down_table();
    a.qgate = set.qgate_table();
    a.qup = set.qup_table();
    a.qdown = set.qdown_table();
    a.round_x = set.round_x;
    a.act = scratch;                                  // [n_tokens k, inter]
    a.x = x;
    a.ldx = ldx;
    if (gemv) return launch_moe_experts(a, set.type, stream_);
    // Grouped: its work, then the grouping's int32 metadata.
    const std::size_t work = moe_grouped_work_floats(n_tokens * k, set.hidden(), set.intermediate());
    launch_moe_grouped(a, set.n_experts(), scratch, reinterpret_cast<std::int32_t*>(scratch + work), set.type, stream_);
  }
  void sigmoid_mul(const float* gate, std::size_t ldg, std::size_t gate_cols, float* x, std::size_t ldx,
                   std::size_t rows, std::size_t n) override {
    if (gate_cols != 1 && gate_cols != n) throw std::invalid_argument("sigmoid_mul: gate_cols must be 1 or n");
    launch_sigmoid_mul(gate, ldg, gate_cols, x, ldx, rows, n, stream_);
  }

  bool gated_delta_net_on_device(const GatedDeltaNetShape& shape) const override {
    return gated_delta_supported(shape.k_head_dim, shape.conv_kernel) && shape.n_k_heads > 0 &&
           shape.n_v_heads % shape.n_k_heads == 0;
  }
  void gated_delta_net(const GatedDeltaNetShape& shape, const float* qkv, std::size_t ldqkv, const float* a,
                       const float* b, std::size_t ldab, const float* conv_weight, const float* A_log,
                       const float* dt_bias, const StagedBatch& batch, const KvStorage& kv, std::size_t state_offset,
                       float* out, std::size_t ldo) override {
    if (!gated_delta_net_on_device(shape) || !batch.state_slots || !kv.state_table())
      return Backend::gated_delta_net(shape, qkv, ldqkv, a, b, ldab, conv_weight, A_log, dt_bias, batch, kv,
                                      state_offset, out, ldo);
    if (batch.n_tokens == 0) return;
    const std::size_t C = shape.conv_dim();
    GatedDeltaArgs g;
    g.qkv = qkv;
    g.ldqkv = ldqkv;
    g.a = a;
    g.b = b;
    g.ldab = ldab;
    g.conv_weight = conv_weight;
    g.A_log = A_log;
    g.dt_bias = dt_bias;
    g.positions = batch.positions;
    g.seq_index = batch.seq_index;
    g.state_table = kv.state_table();
    g.state_slots = batch.state_slots;
    g.state_offset = state_offset;
    // Prefill (runs of whole sequences, enough tokens a chunk on average, not recorded): the chunked form.
    const bool chunked = &batch == &staged_ && delta_ok_ && batch.n_tokens >= kDeltaChunkedMinTokens &&
                         batch.n_tokens <= 65535 && delta_.n_chunks * 16 <= batch.n_tokens &&
                         gated_delta_chunked_supported(shape.k_head_dim, shape.v_head_dim) && !capturing();
    g.out = out;
    g.ldo = ldo;
    g.n_tokens = batch.n_tokens;
    g.conv_dim = C;
    g.conv_floats = (shape.conv_kernel - 1) * C;
    g.n_k_heads = shape.n_k_heads;
    g.n_v_heads = shape.n_v_heads;
    g.k_head_dim = shape.k_head_dim;
    g.v_head_dim = shape.v_head_dim;
    g.conv_kernel = static_cast<int>(shape.conv_kernel);
    const std::size_t conv_floats = batch.n_tokens * C;
    const std::size_t work_floats = chunked ? gated_delta_chunked_work_floats(g, delta_.n_chunks) : 0;
    g.conv_out = static_cast<float*>(delta_scratch_.get((conv_floats + work_floats) * sizeof(float)));
    if (chunked) return launch_gated_delta_net_chunked(g, delta_, batch.n_seqs, g.conv_out + conv_floats, stream_);
    launch_gated_delta_net(g, batch.n_seqs, stream_);
  }
  /// Tokens a call needs before the chunked delta rule runs (fewer: token by token, as decode).
  static constexpr std::size_t kDeltaChunkedMinTokens = 64;
  bool capturing() const {
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    return cudaStreamIsCapturing(stream_, &st) == cudaSuccess && st != cudaStreamCaptureStatusNone;
  }

  void synchronize() override { check(cudaStreamSynchronize(stream_), "synchronize"); }
  void bind_thread() override { check(cudaSetDevice(index_), "cudaSetDevice"); }
  cudaStream_t stream() const { return stream_; }

  // ---- weights and KV storage ----
  std::unique_ptr<engine::Weight> load_matrix(const void* host, DType dtype, std::size_t rows, std::size_t cols,
                                              WeightUse, Compute compute) override {
    auto w = std::make_unique<CudaWeight>();
    w->rows = rows;
    w->cols = cols;
    w->dtype = dtype;
    const std::size_t count = rows * cols, bytes = count * dtype_size(dtype);
    // Under bf16 compute every matrix is kept in bf16 (the tensor cores' operand type).
    w->bf16_compute = compute == Compute::bf16;
    w->device_dtype = w->bf16_compute ? DType::bf16 : dtype;
    const std::size_t dev_bytes = count * dtype_size(w->device_dtype);
    const cudaError_t e = cudaMalloc(&w->data, std::max<std::size_t>(dev_bytes, 16));
    if (e != cudaSuccess)
      throw std::runtime_error("cuda: weights of " + std::to_string(dev_bytes >> 20) + " MiB do not fit the device: " +
                               cudaGetErrorString(e));
    // Through the backend's stream: a plain cudaMemcpy from pageable memory may return before its DMA
    // is done and is not ordered with this (non-blocking) stream.
    if (w->device_dtype == dtype) {
      upload(w->data, host, bytes);
    } else {  // narrow on the device: upload as stored, convert
      void* tmp = scratch_.get(bytes);
      upload(tmp, host, bytes);
      launch_weights_to_bf16(tmp, wtype(dtype), count, static_cast<__nv_bfloat16*>(w->data), stream_);
      synchronize();
    }
    return w;
  }

  /// Quantized weights stay packed on the device (values read and dequantized inside the GEMV; prefill
  /// products dequantize the rows used into scratch first). GPTQ's qweight, scales and zero points are
  /// transposed at load so that each output row's values are contiguous (QuantArgs).
  std::unique_ptr<engine::Weight> load_quantized(const QuantizedMatrix& q, WeightUse, Compute compute) override {
    q.validate();
    if (q.cols % 8 != 0)
      throw std::runtime_error("cuda: quantized matrix [" + std::to_string(q.rows) + ", " + std::to_string(q.cols) +
                               "]: input columns must be a multiple of 8 here");
    auto w = std::make_unique<CudaWeight>();
    w->rows = q.rows;
    w->cols = q.cols;
    w->dtype = DType::f32;
    w->quant_bytes = q.bytes();
    w->bf16_compute = compute == Compute::bf16;
    const auto dev = [&](std::size_t bytes) {
      void* p = nullptr;
      const cudaError_t e = cudaMalloc(&p, std::max<std::size_t>(bytes, 16));
      if (e != cudaSuccess)
        throw std::runtime_error("cuda: quantized weights of " + std::to_string(bytes >> 20) +
                                 " MiB do not fit the device: " + cudaGetErrorString(e));
      ++generation_;
      return p;
    };
    const auto align = [](std::size_t b) { return (b + 255) / 256 * 256; };
    QuantArgs& a = w->q;
    if (q.layout == QuantLayout::rows) {
      w->qtype = q.element == QuantElement::int4 ? kQ4 : q.element == QuantElement::int8 ? kQ8 : kFP8;
      const std::size_t bytes = q.element == QuantElement::int4 ? q.rows * q.cols / 2 : q.rows * q.cols;
      w->data = dev(bytes);
      upload(w->data, q.data, bytes);
      w->tables = dev(q.scales.size_bytes());
      upload(w->tables, q.scales.data(), q.scales.size_bytes());
      a.block_rows = static_cast<int>(q.block_rows);
      a.block_cols = static_cast<int>(q.block_cols ? q.block_cols : q.cols);
      a.sc_cols = static_cast<int>((q.cols + a.block_cols - 1) / a.block_cols);
      a.scales = static_cast<const float*>(w->tables);
    } else {
      w->qtype = q.bits() == 4 ? kG4 : kG8;
      const std::size_t per = 32 / q.bits(), wpr = q.cols / per, ng = q.n_groups;
      const auto* src = static_cast<const std::uint32_t*>(q.data);
      std::vector<std::uint32_t> words(q.rows * wpr);  // qweight [wpr, rows] -> [rows, wpr]
      for (std::size_t kw = 0; kw < wpr; ++kw)
        for (std::size_t n = 0; n < q.rows; ++n) words[n * wpr + kw] = src[kw * q.rows + n];
      w->data = dev(words.size() * 4);
      upload(w->data, words.data(), words.size() * 4);
      std::vector<float> sc(q.rows * ng);
      std::vector<std::int16_t> zs(q.rows * ng);
      for (std::size_t g = 0; g < ng; ++g)
        for (std::size_t n = 0; n < q.rows; ++n) {
          sc[n * ng + g] = q.scales[g * q.rows + n];
          zs[n * ng + g] = q.zeros[g * q.rows + n];
        }
      const std::size_t s_bytes = align(sc.size() * 4), z_bytes = align(zs.size() * 2);
      w->tables = dev(s_bytes + z_bytes + q.g_idx.size_bytes());
      auto* base = static_cast<char*>(w->tables);
      upload(base, sc.data(), sc.size() * 4);
      upload(base + s_bytes, zs.data(), zs.size() * 2);
      if (!q.g_idx.empty()) upload(base + s_bytes + z_bytes, q.g_idx.data(), q.g_idx.size_bytes());
      a.scales = reinterpret_cast<const float*>(base);
      a.zeros = reinterpret_cast<const std::int16_t*>(base + s_bytes);
      a.g_idx = q.g_idx.empty() ? nullptr : reinterpret_cast<const std::int32_t*>(base + s_bytes + z_bytes);
      a.group_size = static_cast<int>(q.group_size ? q.group_size : q.cols);
      a.n_groups = static_cast<int>(ng);
      a.words_per_row = wpr;
    }
    a.data = w->data;
    return w;
  }

  std::unique_ptr<KvStorage> make_kv_storage(const KvSpec& spec, std::size_t max_blocks) override {
    if (spec.block_size == 0 || spec.n_layers == 0 || spec.n_kv_heads == 0 || spec.head_dim == 0)
      throw std::invalid_argument("KV storage: empty shape");
    return std::make_unique<CudaKvStorage>(spec, max_blocks, this);
  }

  const StagedBatch& stage(const BatchInputs& in) override {
    const std::size_t T = in.tokens.size(), nt = in.block_tables.size(), nl = in.logit_rows.size();
    host_positions_.assign(in.positions.begin(), in.positions.end());
    host_seq_.assign(in.seq_index.begin(), in.seq_index.end());
    host_state_slots_.assign(in.state_slots.begin(), in.state_slots.end());
    // Attention work items: runs of consecutive positions of one sequence; long runs (prefill) become
    // flash tiles of up to 64 tokens, the rest go to the split kernel.
    fa_tiles_.clear();
    simt_tokens_.clear();
    simt_max_position_ = 0;
    for (std::size_t t = 0; t < T;) {
      std::size_t e = t + 1;
      while (e < T && host_seq_[e] == host_seq_[t] && host_positions_[e] == host_positions_[e - 1] + 1) ++e;
      if (e - t >= static_cast<std::size_t>(kFlashMinRun)) {
        for (std::size_t a = t; a < e; a += 64) {
          fa_tiles_.push_back(static_cast<std::int32_t>(a));
          fa_tiles_.push_back(static_cast<std::int32_t>(std::min<std::size_t>(64, e - a)));
        }
      } else {
        for (std::size_t a = t; a < e; ++a) {
          simt_tokens_.push_back(static_cast<std::int32_t>(a));
          simt_max_position_ = std::max(simt_max_position_, host_positions_[a]);
        }
      }
      t = e;
    }
    const std::size_t nf = fa_tiles_.size(), ns = simt_tokens_.size(), nss = host_state_slots_.size();
    build_delta_chunks(T, nss);
    const std::size_t nd = delta_ints_.size();
    const std::size_t ints = 3 * T + nt + nl + nf + ns + nss + nd;
    // The previous upload from the pinned buffer must be done before it is overwritten.
    check(cudaEventSynchronize(staged_event_), "stage");
    if (pinned_ints_ < ints) {
      if (pinned_) cudaFreeHost(pinned_);
      pinned_ = nullptr;
      check(cudaMallocHost(reinterpret_cast<void**>(&pinned_), std::max<std::size_t>(ints, 1024) * sizeof(std::int32_t)),
            "pinned staging buffer");
      pinned_ints_ = std::max<std::size_t>(ints, 1024);
    }
    std::int32_t* p = pinned_;
    std::copy(in.tokens.begin(), in.tokens.end(), p);
    std::copy(in.positions.begin(), in.positions.end(), p + T);
    std::copy(in.seq_index.begin(), in.seq_index.end(), p + 2 * T);
    std::copy(in.block_tables.begin(), in.block_tables.end(), p + 3 * T);
    std::copy(in.logit_rows.begin(), in.logit_rows.end(), p + 3 * T + nt);
    std::copy(fa_tiles_.begin(), fa_tiles_.end(), p + 3 * T + nt + nl);
    std::copy(simt_tokens_.begin(), simt_tokens_.end(), p + 3 * T + nt + nl + nf);
    std::copy(host_state_slots_.begin(), host_state_slots_.end(), p + 3 * T + nt + nl + nf + ns);
    std::copy(delta_ints_.begin(), delta_ints_.end(), p + 3 * T + nt + nl + nf + ns + nss);
    auto* dev = static_cast<std::int32_t*>(stage_buf_.get(std::max<std::size_t>(ints, 1) * sizeof(std::int32_t)));
    check(cudaMemcpyAsync(dev, p, ints * sizeof(std::int32_t), cudaMemcpyHostToDevice, stream_), "stage");
    check(cudaEventRecord(staged_event_, stream_), "stage");
    staged_ = StagedBatch{};
    staged_.n_tokens = T;
    staged_.max_blocks = in.max_blocks;
    staged_.n_seqs = in.max_blocks ? nt / in.max_blocks : 0;
    staged_.n_logits = nl;
    staged_.max_position = T ? *std::max_element(in.positions.begin(), in.positions.end()) : 0;
    staged_.tokens = dev;
    staged_.positions = dev + T;
    staged_.seq_index = dev + 2 * T;
    staged_.block_tables = dev + 3 * T;
    staged_.logit_rows = dev + 3 * T + nt;
    staged_.host_positions = host_positions_.data();
    staged_.host_seq_index = host_seq_.data();
    if (nss) {
      staged_.state_slots = dev + 3 * T + nt + nl + nf + ns;
      staged_.host_state_slots = host_state_slots_.data();
    }
    attn_.fa_tiles = dev + 3 * T + nt + nl;
    attn_.n_fa_tiles = static_cast<int>(nf / 2);
    attn_.simt_tokens = dev + 3 * T + nt + nl + nf;
    attn_.n_simt_tokens = static_cast<int>(ns);
    attn_.simt_max_position = simt_max_position_;
    staged_.backend_data = &attn_;
    delta_ = DeltaChunks{};
    if (delta_ok_) {
      const std::int32_t* d = dev + 3 * T + nt + nl + nf + ns + nss;
      delta_.seq_runs = d;
      delta_.seq_first_chunk = d + 2 * nss;
      delta_.chunks = d + 3 * nss + 1;
      delta_.n_chunks = (nd - 3 * nss - 1) / 3;
    }
    return staged_;
  }

  /// The chunked delta rule's work list of a hybrid model's batch (DeltaChunks: each sequence's run, its
  /// chunks of kDeltaChunk tokens), when every sequence of the batch is one run of consecutive positions;
  /// delta_ok_ says whether it is.
  void build_delta_chunks(std::size_t T, std::size_t n_seqs) {
    delta_ints_.clear();
    delta_ok_ = false;
    if (n_seqs == 0 || T == 0) return;
    std::vector<std::int32_t> runs(2 * n_seqs, 0);
    std::vector<char> seen(n_seqs, 0);
    for (std::size_t t = 0; t < T;) {
      std::size_t e = t + 1;
      while (e < T && host_seq_[e] == host_seq_[t] && host_positions_[e] == host_positions_[e - 1] + 1) ++e;
      const auto sq = static_cast<std::size_t>(host_seq_[t]);
      if (host_seq_[t] < 0 || sq >= n_seqs || seen[sq]) return;
      seen[sq] = 1;
      runs[2 * sq] = static_cast<std::int32_t>(t);
      runs[2 * sq + 1] = static_cast<std::int32_t>(e - t);
      t = e;
    }
    delta_ints_ = runs;
    std::vector<std::int32_t> chunks;
    for (std::size_t sq = 0; sq < n_seqs; ++sq) {
      delta_ints_.push_back(static_cast<std::int32_t>(chunks.size() / 3));
      for (std::int32_t a = 0; a < runs[2 * sq + 1]; a += kDeltaChunk) {
        chunks.push_back(static_cast<std::int32_t>(sq));
        chunks.push_back(runs[2 * sq] + a);
        chunks.push_back(std::min<std::int32_t>(kDeltaChunk, runs[2 * sq + 1] - a));
      }
    }
    delta_ints_.push_back(static_cast<std::int32_t>(chunks.size() / 3));
    delta_ints_.insert(delta_ints_.end(), chunks.begin(), chunks.end());
    delta_ok_ = true;
  }

  // ---- ops ----
  void embedding(const TokenId* tokens, std::size_t n, const engine::Weight& table, float* out,
                 std::size_t ldo) override {
    const CudaWeight& w = cuda_weight(table);
    if (w.qtype) return launch_dequantize_rows(w.q, w.qtype, tokens, n, w.cols, out, nullptr, ldo ? ldo : w.cols, stream_);
    launch_embedding(tokens, n, w.data, wtype(w.device_dtype), w.cols, out, ldo ? ldo : w.cols, stream_);
  }

  void matmul(const float* x, std::size_t m, std::size_t ldx, const engine::Weight& weight, std::size_t n, float* y,
              std::size_t ldy) override {
    product(x, m, ldx, cuda_weight(weight), n, y, ldy, /*accumulate=*/false);
  }

  void matmul_add(const float* x, std::size_t m, std::size_t ldx, const engine::Weight& weight, float* y,
                  std::size_t ldy, float*) override {
    product(x, m, ldx, cuda_weight(weight), weight.rows, y, ldy, /*accumulate=*/true);
  }

  void matmul_all_reduce_add(const float* x, std::size_t m, std::size_t ldx, const engine::Weight& weight, float* y,
                             float* scratch, Collective& tp) override {
    // One row on float weights: the GEMV sends each column's partial sum to the peers as it is done
    // (mode 3), no scratch round trip and no all-reduce kernel of its own.
    const CudaWeight& w = cuda_weight(weight);
    if (m == 1 && !w.qtype && gemv_supported(x, ldx, w.data, w.cols) && gemv_all_reduce_fits(w.rows, kernel_type(w)))
      if (const LLTarget* t = one_shot_target(tp, w.rows)) {
        GemvArgs a = gemv_args(x, ldx, w, y, w.rows, w.rows);
        a.all_reduce = t;
        launch_gemv(a, 1, kernel_type(w), 3, stream_);
        return;
      }
    Backend::matmul_all_reduce_add(x, m, ldx, weight, y, scratch, tp);
  }

  void matmul_many(const float* x, std::size_t m, std::size_t ldx, std::span<const MatmulOut> outs) override {
    GemvArgs a;
    if (many_args(x, m, ldx, outs, a)) return launch_gemv(a, m, kernel_type(cuda_weight(*outs[0].w)), 0, stream_);
    if (takes_gemm_bf16(x, m, ldx, outs)) return gemms_bf16(to_bf16(x, m, outs[0].w->cols, ldx), m, outs);
    Backend::matmul_many(x, m, ldx, outs);
  }
  void matmul_swiglu(const float* x, std::size_t m, std::size_t ldx, const engine::Weight& gate,
                     const engine::Weight& up, float* out, std::size_t ldo, float* scratch) override {
    GemvArgs a;
    if (swiglu_args(x, m, ldx, gate, up, out, ldo, a)) return launch_gemv(a, m, kernel_type(cuda_weight(gate)), 2, stream_);
    const MatmulOut pair[] = {{&gate, out, ldo}, {&up, scratch, up.rows}};
    if (takes_gemm_bf16(x, m, ldx, pair)) return swiglu_bf16(to_bf16(x, m, gate.cols, ldx), m, gate, up, out, ldo, scratch);
    Backend::matmul_swiglu(x, m, ldx, gate, up, out, ldo, scratch);
  }
  // On the cuBLAS path (prefill, batches of more than 8 rows) the norm writes the GEMMs' bf16 operand
  // directly (h is not written); elsewhere rms_norm into h, then the products (the GEMV reads h).
  void norm_matmul_many(const float* x, std::size_t m, std::size_t hidden, std::size_t ldx, const float* norm_weight,
                        float eps, float* h, std::span<const MatmulOut> outs) override {
    if (ldx == hidden && takes_gemm_bf16(h, m, hidden, outs) && outs[0].w->cols == hidden)
      return gemms_bf16(norm_to_bf16(x, m, hidden, ldx, norm_weight, eps), m, outs);
    Backend::norm_matmul_many(x, m, hidden, ldx, norm_weight, eps, h, outs);
  }
  void norm_matmul_swiglu(const float* x, std::size_t m, std::size_t hidden, std::size_t ldx, const float* norm_weight,
                          float eps, float* h, const engine::Weight& gate, const engine::Weight& up, float* out,
                          std::size_t ldo, float* scratch) override {
    const MatmulOut pair[] = {{&gate, out, ldo}, {&up, scratch, up.rows}};
    if (ldx == hidden && takes_gemm_bf16(h, m, hidden, pair) && gate.cols == hidden)
      return swiglu_bf16(norm_to_bf16(x, m, hidden, ldx, norm_weight, eps), m, gate, up, out, ldo, scratch);
    Backend::norm_matmul_swiglu(x, m, hidden, ldx, norm_weight, eps, h, gate, up, out, ldo, scratch);
  }
  void qk_norm_rope_store(float* q, std::size_t ldq, float* k, const float* v, std::size_t ldkv, std::size_t n_heads,
                          std::size_t n_kv_heads, std::size_t head_dim, const float* q_norm, const float* k_norm,
                          float eps, std::size_t rotary_dim, const float* cos, const float* sin, const StagedBatch& b,
                          KvStorage& kv, std::size_t layer) override {
    if (head_dim > 256)
      return Backend::qk_norm_rope_store(q, ldq, k, v, ldkv, n_heads, n_kv_heads, head_dim, q_norm, k_norm, eps,
                                         rotary_dim, cos, sin, b, kv, layer);
    const KvLayer kl = cuda_kv(kv).layer(layer);
    if (kl.n_kv_heads != static_cast<int>(n_kv_heads) || kl.head_dim != static_cast<int>(head_dim))
      throw std::invalid_argument("qk_norm_rope_store: the KV layer has another shape");
    launch_qk_norm_rope_store(q, ldq, k, v, ldkv, n_heads, n_kv_heads, head_dim, q_norm, k_norm, eps, rotary_dim / 2,
                              cos, sin, attn_batch(b), kl, stream_);
  }

  void head_norm_rope(float* x, std::size_t n_tokens, std::size_t n_heads, std::size_t head_dim, std::size_t ld,
                      const float* norm_weight, float eps, std::size_t rotary_dim, const float* cos,
                      const float* sin) override {
    if (head_dim > 256) return Backend::head_norm_rope(x, n_tokens, n_heads, head_dim, ld, norm_weight, eps, rotary_dim, cos, sin);
    launch_head_norm_rope(x, n_tokens, n_heads, head_dim, ld, norm_weight, eps, rotary_dim / 2, cos, sin, stream_);
  }

  bool supports_matmul_groups(const engine::Weight&) const override { return false; }
  void matmul_groups(const float*, std::size_t, std::size_t, const engine::Weight&, std::span<const std::uint32_t>,
                     float*, std::size_t) override {
    throw std::logic_error("matmul_groups: not available on the CUDA backend");
  }

  void matmul_ids(const float* x, std::size_t m, std::size_t ldx, const engine::Weight& weight,
                  std::span<const std::vector<std::int32_t>> ids, float* y, std::size_t ldy) override {
    if (ids.size() != m) throw std::invalid_argument("matmul_ids: one id list per row needed");
    const CudaWeight& w = cuda_weight(weight);
    std::vector<std::int32_t> pairs;  // row_of..., then ids...
    std::size_t n_pairs = 0;
    for (const auto& l : ids) n_pairs += l.size();
    pairs.reserve(2 * n_pairs);
    for (std::size_t r = 0; r < m; ++r)
      for (const auto id : ids[r]) {
        if (id < 0 || static_cast<std::size_t>(id) >= w.rows)
          throw std::invalid_argument("matmul_ids: token id " + std::to_string(id) + " outside the weight's " +
                                      std::to_string(w.rows) + " rows");
        pairs.push_back(static_cast<std::int32_t>(r));
      }
    for (const auto& l : ids) pairs.insert(pairs.end(), l.begin(), l.end());
    if (w.qtype) {  // packed weights: the whole product into scratch first, then the listed logits
      auto* full = static_cast<float*>(qfull_scratch_.get(m * w.rows * sizeof(float)));
      product(x, m, ldx, w, w.rows, full, w.rows, false);
      launch_fill(y, m * ldy, -std::numeric_limits<float>::infinity(), stream_);
      if (n_pairs == 0) return;
      auto* dev = static_cast<std::int32_t*>(ids_buf_.get(pairs.size() * sizeof(std::int32_t)));
      upload(dev, pairs.data(), pairs.size() * sizeof(std::int32_t));
      return launch_copy_pairs(full, w.rows, dev, dev + n_pairs, n_pairs, y, ldy, stream_);
    }
    launch_fill(y, m * ldy, -std::numeric_limits<float>::infinity(), stream_);
    if (n_pairs == 0) return;  // every row empty (a tensor-parallel rank holding none of the ids)
    auto* dev = static_cast<std::int32_t*>(ids_buf_.get(std::max<std::size_t>(pairs.size(), 1) * sizeof(std::int32_t)));
    upload(dev, pairs.data(), pairs.size() * sizeof(std::int32_t));
    launch_matmul_ids(x, ldx, w.data, wtype(w.device_dtype), w.cols, dev, dev + n_pairs, n_pairs, y, ldy, stream_);
  }

  void rms_norm(const float* x, float* y, std::size_t rows, std::size_t dim, std::size_t ld, const float* weight,
                float eps) override {
    launch_rms_norm(x, y, rows, dim, ld, weight, eps, stream_);
  }
  void rope_angles(const StagedBatch& b, const float* inv_freq, std::size_t rotary_dim, float* cos,
                   float* sin) override {
    launch_rope_angles(b.positions, b.n_tokens, inv_freq, rotary_dim / 2, cos, sin, stream_);
  }
  void rope(float* x, std::size_t n_tokens, std::size_t n_heads, std::size_t head_dim, std::size_t ld,
            std::size_t rotary_dim, const float* cos, const float* sin) override {
    launch_rope(x, n_tokens, n_heads, head_dim, ld, rotary_dim / 2, cos, sin, stream_);
  }
  void kv_store(const float* k, const float* v, std::size_t ld, const StagedBatch& b, KvStorage& kv,
                std::size_t layer) override {
    launch_kv_store(k, v, ld, attn_batch(b), cuda_kv(kv).layer(layer), stream_);
  }
  void attention(const float* q, std::size_t ldq, float* out, std::size_t ldo, std::size_t n_heads,
                 const StagedBatch& b, const KvStorage& kv, std::size_t layer, float scale) override {
    const AttnBatch ab = attn_batch(b);
    const KvLayer kl = cuda_kv(kv).layer(layer);
    const std::size_t ws = attention_workspace_floats(ab, static_cast<int>(n_heads), kl.head_dim);
    float* workspace = ws ? static_cast<float*>(attn_scratch_.get(ws * sizeof(float))) : nullptr;
    launch_attention(q, ldq, out, ldo, static_cast<int>(n_heads), ab, kl, scale, workspace, stream_);
  }
  void silu_mul(const float* gate, std::size_t ldg, const float* up, std::size_t ldu, float* out, std::size_t ldo,
                std::size_t rows, std::size_t n) override {
    launch_silu_mul(gate, ldg, up, ldu, out, ldo, rows, n, stream_);
  }
  void add(float* x, const float* y, std::size_t n) override { launch_add(x, y, n, stream_); }
  void argmax_rows(const float* logits, std::size_t rows, std::size_t n, std::size_t ld,
                   std::span<const std::uint32_t> masks, std::size_t mask_words, std::int32_t* out_host) override {
    check_argmax_masks(rows, n, masks, mask_words);
    if (rows == 0) return;
    // One buffer: the first pass's keys, the ids, then the batch's masks (one upload for every row).
    const std::size_t mask_ints = masks.empty() ? 0 : rows * mask_words;
    const std::size_t keys = argmax_workspace(rows, n);
    auto* workspace = static_cast<unsigned long long*>(
        argmax_buf_.get(keys * sizeof(unsigned long long) + (rows + mask_ints) * sizeof(std::int32_t)));
    auto* dev = reinterpret_cast<std::int32_t*>(workspace + keys);
    auto* dev_masks = reinterpret_cast<std::uint32_t*>(dev + rows);
    if (mask_ints) upload(dev_masks, masks.data(), mask_ints * sizeof(std::uint32_t));
    launch_argmax_rows(logits, rows, n, ld, mask_ints ? dev_masks : nullptr, mask_words, workspace, dev, stream_);
    download(out_host, dev, rows * sizeof(std::int32_t));
  }

  void sample_rows(const float* logits, std::size_t rows, std::size_t n, std::size_t ld,
                   std::span<const std::uint32_t> masks, std::size_t mask_words, std::span<const RowSampling> params,
                   std::int32_t* out_host) override {
    check_sample_args(rows, n, masks, mask_words, params);
    if (rows == 0) return;
    // Every row greedy or of a small top-k: the shortlist path (many blocks a row).
    const std::size_t short_keys = sample_rows_workspace(rows, n);
    const bool shortlist = short_keys > 0 && std::all_of(params.begin(), params.end(), [](const RowSampling& p) {
                             return p.temperature == 0.f || (p.top_k >= 1 && p.top_k <= kShortlist);
                           });
    // One buffer, one upload: the shortlist's keys, the rows' parameters, their masks, then the ids.
    const std::size_t mask_ints = masks.empty() ? 0 : rows * mask_words;
    const std::size_t param_bytes = rows * sizeof(RowSampling), key_bytes = shortlist ? short_keys * 8 : 0;
    char* base = static_cast<char*>(argmax_buf_.get(key_bytes + param_bytes + (mask_ints + rows) * sizeof(std::int32_t)));
    auto* dev_keys = reinterpret_cast<unsigned long long*>(base);
    auto* dev_params = reinterpret_cast<RowSampling*>(base + key_bytes);
    auto* dev_masks = reinterpret_cast<std::uint32_t*>(base + key_bytes + param_bytes);
    auto* dev = reinterpret_cast<std::int32_t*>(dev_masks + mask_ints);
    staging_.resize(param_bytes + mask_ints * sizeof(std::uint32_t));
    std::memcpy(staging_.data(), params.data(), param_bytes);
    if (mask_ints) std::memcpy(staging_.data() + param_bytes, masks.data(), mask_ints * sizeof(std::uint32_t));
    upload(dev_params, staging_.data(), staging_.size());
    launch_sample_rows(logits, rows, n, ld, mask_ints ? dev_masks : nullptr, mask_words, dev_params, shortlist, dev_keys,
                       dev, stream_);
    download(out_host, dev, rows * sizeof(std::int32_t));
  }

  // ---- probes ----
  std::vector<double> probe_bandwidth_gb_s(std::size_t bytes, int runs) override {
    bytes = std::max<std::size_t>(bytes / 256 * 256, 256);
    DeviceBuffer a = alloc(bytes), b = alloc(bytes);
    check(cudaMemsetAsync(a.data(), 1, bytes, stream_), "probe");
    cudaEvent_t e0, e1;
    check(cudaEventCreate(&e0), "probe");
    check(cudaEventCreate(&e1), "probe");
    std::vector<double> out;
    for (int r = -1; r < runs; ++r) {  // one warm-up
      check(cudaEventRecord(e0, stream_), "probe");
      check(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, stream_), "probe");
      check(cudaEventRecord(e1, stream_), "probe");
      check(cudaEventSynchronize(e1), "probe");
      float ms = 0.f;
      check(cudaEventElapsedTime(&ms, e0, e1), "probe");
      if (r >= 0) out.push_back(2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return out;
  }

  std::vector<double> probe_matmul_gflops(std::size_t m, std::size_t k, std::size_t n, DType dtype, Compute compute,
                                          int runs) override {
    std::vector<std::uint16_t> w16(n * k);
    std::vector<float> w32(dtype == DType::f32 ? n * k : 0);
    for (std::size_t i = 0; i < n * k; ++i) {
      const float v = static_cast<float>(static_cast<int>((i * 2654435761u) % 2001) - 1000) * 1e-4f;
      if (dtype == DType::f32) w32[i] = v;
      else {
        std::uint32_t u;
        std::memcpy(&u, &v, 4);
        w16[i] = static_cast<std::uint16_t>(u >> 16);  // bf16 bits (used for f16 too: finite small values)
      }
    }
    const auto weight = load_matrix(dtype == DType::f32 ? static_cast<const void*>(w32.data()) : w16.data(), dtype, n,
                                    k, WeightUse::matmul, resolve_compute(compute, dtype));
    DeviceBuffer x = alloc(m * k * sizeof(float)), y = alloc(m * n * sizeof(float));
    launch_fill(x.as<float>(), m * k, 0.01f, stream_);
    cudaEvent_t e0, e1;
    check(cudaEventCreate(&e0), "probe");
    check(cudaEventCreate(&e1), "probe");
    std::vector<double> out;
    for (int r = -1; r < runs; ++r) {
      check(cudaEventRecord(e0, stream_), "probe");
      matmul(x.as<float>(), m, k, *weight, n, y.as<float>(), n);
      check(cudaEventRecord(e1, stream_), "probe");
      check(cudaEventSynchronize(e1), "probe");
      float ms = 0.f;
      check(cudaEventElapsedTime(&ms, e0, e1), "probe");
      if (r >= 0) out.push_back(2.0 * static_cast<double>(m) * k * n / (ms * 1e-3) / 1e9);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return out;
  }

  // ---- recording ----
  bool supports_capture() const override { return true; }
  void begin_capture() override {
    check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "begin_capture");
  }
  std::unique_ptr<CapturedOps> end_capture() override {
    cudaGraph_t graph = nullptr;
    check(cudaStreamEndCapture(stream_, &graph), "end_capture");
    auto g = std::make_unique<CudaGraph>();
    const cudaError_t e = cudaGraphInstantiate(&g->exec, graph, 0);
    cudaGraphDestroy(graph);
    check(e, "cudaGraphInstantiate");
    g->generation = generation_;
    return g;
  }
  bool replayable(const CapturedOps& ops) const override {
    return static_cast<const CudaGraph&>(ops).generation == generation_;
  }
  bool replay(const CapturedOps& ops) override {
    const auto& g = static_cast<const CudaGraph&>(ops);
    if (g.generation != generation_) return false;
    check(cudaGraphLaunch(g.exec, stream_), "cudaGraphLaunch");
    return true;
  }

 protected:
  void free(void* data) noexcept override {
    cudaFree(data);
    ++generation_;
  }

 private:
  /// The GEMV arguments of one product of x (stride ldx) by the first n rows of w into y (stride ldy).
  static GemvArgs gemv_args(const float* x, std::size_t ldx, const CudaWeight& w, float* y, std::size_t n,
                            std::size_t ldy) {
    GemvArgs a;
    a.x = x;
    a.ldx = ldx;
    a.k = w.cols;
    a.round_x = w.bf16_compute;
    a.seg[0] = {w.data, y, n, ldy, w.q};
    return a;
  }
  /// The GEMV arguments of one launch for up to four weights of the same width and type (q, k, v of a
  /// decode step); false where the GEMV does not apply.
  bool many_args(const float* x, std::size_t m, std::size_t ldx, std::span<const MatmulOut> outs, GemvArgs& a) const {
    bool fused = m > 0 && m <= 8 && !outs.empty() && outs.size() <= kGemvMaxSegments;
    for (const auto& o : outs) {
      const CudaWeight& w = cuda_weight(*o.w);
      const CudaWeight& w0 = cuda_weight(*outs[0].w);
      fused = fused && fused_gemv(w) && kernel_type(w) == kernel_type(w0) && w.cols == w0.cols &&
              w.bf16_compute == w0.bf16_compute && gemv_supported(x, ldx, w.data, w.cols);
    }
    if (!fused) return false;
    const CudaWeight& w0 = cuda_weight(*outs[0].w);
    a.x = x;
    a.ldx = ldx;
    a.k = w0.cols;
    a.round_x = w0.bf16_compute;
    a.n_seg = static_cast<int>(outs.size());
    for (std::size_t i = 0; i < outs.size(); ++i) {
      const CudaWeight& w = cuda_weight(*outs[i].w);
      a.seg[i] = {w.data, outs[i].y, w.rows, outs[i].ldy, w.q};
    }
    return true;
  }
  /// The GEMV kernel type of a weight (WType, or its QType when quantized).
  static int kernel_type(const CudaWeight& w) { return w.qtype ? w.qtype : wtype(w.device_dtype); }
  /// Whether a weight can share a GEMV launch with others (several segments, SwiGLU):
  /// float weights, and quantized ones the quantized GEMV takes.
  static bool fused_gemv(const CudaWeight& w) { return !w.qtype || gemv_quant_supported(w.q, w.qtype, w.cols); }
  /// The GEMV arguments of SwiGLU's first half (gate and up in one launch); false where it does not apply.
  bool swiglu_args(const float* x, std::size_t m, std::size_t ldx, const engine::Weight& gate, const engine::Weight& up,
                   float* out, std::size_t ldo, GemvArgs& a) const {
    const CudaWeight& g = cuda_weight(gate);
    const CudaWeight& u = cuda_weight(up);
    if (m == 0 || m > 8 || !fused_gemv(g) || !fused_gemv(u) || kernel_type(g) != kernel_type(u) ||
        g.rows != u.rows || g.cols != u.cols || g.bf16_compute != u.bf16_compute ||
        !gemv_supported(x, ldx, g.data, g.cols) || !gemv_supported(x, ldx, u.data, u.cols))
      return false;
    a.x = x;
    a.ldx = ldx;
    a.k = g.cols;
    a.round_x = g.bf16_compute;
    a.n_seg = 2;
    a.seg[0] = {g.data, out, g.rows, ldo, g.q};
    a.seg[1] = {u.data, out, u.rows, ldo, u.q};
    return true;
  }

  /// A float view of a quantized weight's first n rows, dequantized into scratch; owns nothing.
  struct DequantizedView {
    CudaWeight w;
    ~DequantizedView() { w.data = nullptr; }
  };
  /// Dequantizes the first n rows of w into scratch as bf16 (for cuBLAS) or f32 (for the tiled kernel: the
  /// same values and products as the f32 model's) and points v at them.
  void dequantize_view(const CudaWeight& w, std::size_t n, bool bf16, DequantizedView& v) {
    const std::size_t k = w.cols;
    v.w.rows = n;
    v.w.cols = k;
    v.w.bf16_compute = bf16;
    v.w.device_dtype = v.w.dtype = bf16 ? DType::bf16 : DType::f32;
    void* buf = dequant_scratch_.get(n * k * dtype_size(v.w.device_dtype));
    launch_dequantize_rows(w.q, w.qtype, nullptr, n, k, bf16 ? nullptr : static_cast<float*>(buf),
                           bf16 ? static_cast<__nv_bfloat16*>(buf) : nullptr, k, stream_);
    v.w.data = buf;
  }

  /// product() of a quantized weight beyond the GEMV's 8 rows: its first n rows dequantized (bf16 under
  /// bf16 compute, else f32), then the float path.
  void dequantized_product(const float* x, std::size_t m, std::size_t ldx, const CudaWeight& w, std::size_t n,
                           float* y, std::size_t ldy, bool accumulate) {
    DequantizedView v;
    dequantize_view(w, n, w.bf16_compute && cublas_, v);
    product(x, m, ldx, v.w, n, y, ldy, accumulate);
  }

  /// y (=|+=) x . W[0:n]^T: the GEMV kernel for up to 8 rows, cuBLAS (bf16 tensor cores) under bf16 compute,
  /// the f32 tiled kernel otherwise.
  void product(const float* x, std::size_t m, std::size_t ldx, const CudaWeight& w, std::size_t n, float* y,
               std::size_t ldy, bool accumulate) {
    if (n > w.rows)
      throw std::invalid_argument("matmul: " + std::to_string(n) + " rows of a weight with " + std::to_string(w.rows));
    if (m == 0 || n == 0) return;
    const std::size_t k = w.cols;
    if (m <= 8 && gemv_supported(x, ldx, w.data, k)) {  // packed weights too: dequantized in registers
      launch_gemv(gemv_args(x, ldx, w, y, n, ldy), m, kernel_type(w), accumulate ? 1 : 0, stream_);
      return;
    }
    if (w.qtype) return dequantized_product(x, m, ldx, w, n, y, ldy, accumulate);
    if (w.bf16_compute && cublas_) return gemm_bf16(to_bf16(x, m, k, ldx), m, w, n, y, ldy, accumulate);
    launch_gemm_f32(x, m, ldx, w.data, wtype(w.device_dtype), n, k, y, ldy, accumulate, stream_);
  }

  /// Whether product() of these rows takes the cuBLAS path (bf16 tensor cores): more rows than the GEMV
  /// takes (or a layout it does not) under bf16 compute; quantized weights dequantized to bf16 first.
  bool takes_gemm_bf16(const float* x, std::size_t m, std::size_t ldx, const CudaWeight& w) const {
    return !(m <= 8 && gemv_supported(x, ldx, w.data, w.cols)) && w.bf16_compute && cublas_;
  }
  bool takes_gemm_bf16(const float* x, std::size_t m, std::size_t ldx, std::span<const MatmulOut> outs) const {
    if (outs.empty()) return false;
    for (const auto& o : outs)
      if (!takes_gemm_bf16(x, m, ldx, cuda_weight(*o.w)) || o.w->cols != outs[0].w->cols) return false;
    return true;
  }
  /// x [m, k] at stride ldx rounded to bf16 into the scratch, [m, k] contiguous.
  const __nv_bfloat16* to_bf16(const float* x, std::size_t m, std::size_t k, std::size_t ldx) {
    auto* xb = static_cast<__nv_bfloat16*>(bf16_scratch_.get(m * k * sizeof(__nv_bfloat16)));
    launch_to_bf16(x, m, k, ldx, xb, stream_);
    return xb;
  }
  /// RMSNorm of x written as bf16 into the scratch: to_bf16() of rms_norm(), bit for bit, in one launch.
  const __nv_bfloat16* norm_to_bf16(const float* x, std::size_t m, std::size_t dim, std::size_t ldx,
                                    const float* norm_weight, float eps) {
    auto* xb = static_cast<__nv_bfloat16*>(bf16_scratch_.get(m * dim * sizeof(__nv_bfloat16)));
    launch_rms_norm_bf16(x, m, dim, ldx, norm_weight, eps, xb, stream_);
    return xb;
  }
  /// y (=|+=) xb . W[0:n]^T on the tensor cores: xb bf16 [m, W.cols] contiguous, f32 accumulation and
  /// output (cuBLAS, column-major: Y^T = W X^T); beta = 1 adds the product to y. A quantized W: its first n
  /// rows dequantized to bf16 into scratch first (the values dequantized_product gives cuBLAS).
  void gemm_bf16(const __nv_bfloat16* xb, std::size_t m, const CudaWeight& w, std::size_t n, float* y, std::size_t ldy,
                 bool accumulate) {
    const std::size_t k = w.cols;
    if (w.qtype) {
      DequantizedView v;
      dequantize_view(w, n, true, v);
      return gemm_bf16(xb, m, v.w, n, y, ldy, accumulate);
    }
    const float alpha = 1.f, beta = accumulate ? 1.f : 0.f;
    check_cublas(Cublas::get().gemm_ex(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                                       static_cast<int>(k), &alpha, w.data, CUDA_R_16BF, static_cast<int>(k), xb,
                                       CUDA_R_16BF, static_cast<int>(k), &beta, y, CUDA_R_32F, static_cast<int>(ldy),
                                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "matmul (cublasGemmEx)");
  }
  /// matmul_many / matmul_swiglu on the cuBLAS path from an operand already in bf16 (one conversion or
  /// one bf16-writing norm for all the products, instead of one conversion a product).
  void gemms_bf16(const __nv_bfloat16* xb, std::size_t m, std::span<const MatmulOut> outs) {
    for (const auto& o : outs) gemm_bf16(xb, m, cuda_weight(*o.w), o.w->rows, o.y, o.ldy, false);
  }
  void swiglu_bf16(const __nv_bfloat16* xb, std::size_t m, const engine::Weight& gate, const engine::Weight& up,
                   float* out, std::size_t ldo, float* scratch) {
    gemm_bf16(xb, m, cuda_weight(gate), gate.rows, out, ldo, false);
    gemm_bf16(xb, m, cuda_weight(up), up.rows, scratch, up.rows, false);
    launch_silu_mul(out, ldo, scratch, up.rows, out, ldo, m, gate.rows, stream_);
  }

  /// One small product at creation: cuBLAS's first call on a stream sets up its workspace and loads its
  /// kernels, which must not happen inside a graph capture or a timed region.
  void warm_up_cublas() {
    void* buf = nullptr;
    check(cudaMalloc(&buf, 3 * 64 * 64 * sizeof(float)), "cuBLAS warm-up");
    check(cudaMemsetAsync(buf, 0, 3 * 64 * 64 * sizeof(float), stream_), "cuBLAS warm-up");
    const float alpha = 1.f, beta = 0.f;
    auto* a = static_cast<__nv_bfloat16*>(buf);
    check_cublas(Cublas::get().gemm_ex(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, 64, 64, 64, &alpha, a, CUDA_R_16BF, 64,
                                       a + 64 * 64, CUDA_R_16BF, 64, &beta, static_cast<float*>(buf) + 64 * 64,
                                       CUDA_R_32F, 64, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cuBLAS warm-up");
    check(cudaStreamSynchronize(stream_), "cuBLAS warm-up");
    cudaFree(buf);
  }

  static AttnBatch attn_batch(const StagedBatch& b) {
    AttnBatch a = b.backend_data ? *static_cast<const AttnBatch*>(b.backend_data) : AttnBatch{};
    a.positions = b.positions;
    a.seq_index = b.seq_index;
    a.block_tables = b.block_tables;
    a.max_blocks = static_cast<int>(b.max_blocks);
    a.n_tokens = static_cast<int>(b.n_tokens);
    a.max_position = b.max_position;
    return a;
  }

  int index_;
  cudaDeviceProp prop_{};
  cudaStream_t stream_ = nullptr;
  cudaEvent_t staged_event_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  std::int32_t* pinned_ = nullptr;
  std::size_t pinned_ints_ = 0;
  std::vector<std::int32_t> host_positions_, host_seq_, host_state_slots_, fa_tiles_, simt_tokens_;
  std::vector<std::int32_t> delta_ints_;  ///< build_delta_chunks: runs, first chunks, chunks
  std::vector<char> staging_;             ///< sample_rows: the parameters and masks of one upload
  bool delta_ok_ = false;
  DeltaChunks delta_;                     ///< its device copy in the staged batch
  std::int32_t simt_max_position_ = 0;
  AttnBatch attn_;  ///< the staged batch's flash tiles and split-kernel tokens (StagedBatch::backend_data)
  std::uint64_t generation_ = 0;  ///< bumped by every device allocation and free (recordings go stale)
  Scratch stage_buf_{&generation_}, bf16_scratch_{&generation_}, ids_buf_{&generation_}, attn_scratch_{&generation_},
      argmax_buf_{&generation_}, scratch_{&generation_}, delta_scratch_{&generation_}, dequant_scratch_{&generation_},
      qfull_scratch_{&generation_};
  StagedBatch staged_;
};

}  // namespace

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

std::shared_ptr<Backend> make_cuda_backend(int index) { return std::make_shared<CudaBackend>(index); }

void* stream_of(Backend& backend) {
  auto* b = dynamic_cast<CudaBackend*>(&backend);
  if (!b) throw std::invalid_argument("stream_of: " + backend.description() + " is not a CUDA backend");
  return b->stream();
}

}  // namespace quarry::engine::cuda
