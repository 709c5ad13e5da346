// Launchers of the CUDA backend's kernels (internal to engine/backend/cuda). Every pointer is device
// memory; every launcher is asynchronous on `stream` and throws std::runtime_error on a launch error.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "engine/backend/backend.hpp"
#include "engine/backend/cuda/common.cuh"

namespace quarry::engine::cuda {

/// out[t, :cols] = widen(table[tokens[t], :cols]) for t < n (table: [*, cols] of weight type `type`).
void launch_embedding(const std::int32_t* tokens, std::size_t n, const void* table, int type, std::size_t cols,
                      float* out, std::size_t ldo, cudaStream_t s);
/// RMSNorm of `rows` rows of `dim` at stride ld (sum of squares in double, as the CPU reference).
void launch_rms_norm(const float* x, float* y, std::size_t rows, std::size_t dim, std::size_t ld, const float* w,
                     float eps, cudaStream_t s);
/// The same RMSNorm written as bf16 rows [rows, dim] (contiguous): the bits launch_to_bf16 gives
/// launch_rms_norm's output, in one launch (the operand of the bf16 GEMMs).
void launch_rms_norm_bf16(const float* x, std::size_t rows, std::size_t dim, std::size_t ld, const float* w, float eps,
                          __nv_bfloat16* out, cudaStream_t s);
/// cos/sin [n, half] of (float)positions[t] * inv_freq[i], cos and sin in double rounded to f32.
void launch_rope_angles(const std::int32_t* positions, std::size_t n, const float* inv_freq, std::size_t half,
                        float* cos, float* sin, cudaStream_t s);
/// RoPE in place, rotate_half pairing over the first 2 * half dims of each head.
void launch_rope(float* x, std::size_t n_tokens, std::size_t n_heads, std::size_t head_dim, std::size_t ld,
                 std::size_t half, const float* cos, const float* sin, cudaStream_t s);
void launch_silu_mul(const float* gate, std::size_t ldg, const float* up, std::size_t ldu, float* out, std::size_t ldo,
                     std::size_t rows, std::size_t n, cudaStream_t s);
void launch_add(float* x, const float* y, std::size_t n, cudaStream_t s);
void launch_fill(float* x, std::size_t n, float value, cudaStream_t s);
void launch_gather_rows(float* dst, std::size_t ldd, const float* src, std::size_t lds, const std::int32_t* rows,
                        std::size_t n, std::size_t cols, cudaStream_t s);
/// x[t, :] += sum_j weights[t * k + j] * y[slots[t * k + j], :] (Backend::moe_combine).
void launch_moe_combine(float* x, std::size_t ldx, const float* y, std::size_t ldy, const std::int32_t* slots,
                        const float* weights, std::size_t n_tokens, std::size_t k, std::size_t cols, cudaStream_t s);
/// The most experts a token may be routed to on the device (moe_route_kernel keeps them in registers).
constexpr std::size_t kMaxMoeTopK = 32;
/// The most tokens the gather-GEMV path of moe_experts takes (decode and small batches; more: grouped).
constexpr std::size_t kMoeGemvMaxTokens = 16;
/// The most experts moe_route_kernel takes (their probabilities in 48 KB of shared memory).
constexpr std::size_t kMaxMoeExperts = 12288;
/// Backend::moe_route on the device (one warp per token): ids / weights [n_tokens, k], ascending id (with
/// shared_expert: [n_tokens, k + 1], the shared expert's pair last).
void launch_moe_route(const float* logits, std::size_t n_tokens, std::size_t n_experts, std::size_t k, bool renormalize,
                      bool shared_expert, std::int32_t* ids, float* weights, cudaStream_t s);
/// Backend::moe_experts for a few tokens: gather-GEMVs over each (token, expert) pair, gate and up with
/// the SwiGLU into act [n_tokens k, inter], then down over each token's pairs in order, their weighted sum
/// added to x. Expert weights through device tables of pointers (gate, up, down [n_experts] each) or, for
/// quantized experts (`type` a QType), of their QuantArgs. hidden and inter multiples of 8, ldh a multiple
/// of 4, h and act 16-byte aligned.
struct QuantArgs;
struct MoeGemvArgs {
  const float* h = nullptr;
  std::size_t ldh = 0, n_tokens = 0, k = 0, hidden = 0, inter = 0;
  const std::int32_t* ids = nullptr;
  const float* weights = nullptr;
  const void* const* gate = nullptr;
  const void* const* up = nullptr;
  const void* const* down = nullptr;
  /// Quantized experts (a QType launch): each expert's QuantArgs [n_experts] (the pointer tables unused).
  const QuantArgs* qgate = nullptr;
  const QuantArgs* qup = nullptr;
  const QuantArgs* qdown = nullptr;
  bool round_x = false;
  float* act = nullptr;
  float* x = nullptr;
  std::size_t ldx = 0;
};
void launch_moe_experts(const MoeGemvArgs& a, int type, cudaStream_t s);
/// Int32 of launch_moe_grouped's metadata for `pairs` (token, expert) pairs over n_experts experts.
std::size_t moe_grouped_meta_ints(std::size_t pairs, std::size_t n_experts);
/// Whether launch_moe_grouped takes these experts (bf16 or packed weights, computed in bf16) and this many
/// pairs (the tiles of one launch fit a grid).
bool moe_grouped_supported(int type, std::size_t pairs, std::size_t n_experts);
/// Backend::moe_experts for many tokens under bf16 compute, with no copy to the host: the pairs are grouped
/// by expert on the device (counts, offsets, each pair's slot: vLLM's moe_align_block_size), their inputs
/// gathered by slot and rounded to bf16, then two grouped tensor-core products run over tiles of one
/// expert's slots (bf16 operands, f32 accumulation; bf16 experts through a cp.async pipeline, packed
/// ones dequantized to bf16 as each tile loads): gate and up with the SwiGLU into act [pairs, inter]
/// (bf16, by slot), down into ys [pairs, hidden] (f32, by slot); then moe_combine adds each token's
/// weighted pairs to x in pair order. `work`: moe_grouped_work_floats floats (16-byte aligned) for xa, act
/// and ys; `meta`: moe_grouped_meta_ints(pairs, n_experts) int32. After vLLM's fused_moe (tiles of one
/// expert over sorted pairs) and llama.cpp's mul_mat_id. hidden and inter multiples of 8.
void launch_moe_grouped(const MoeGemvArgs& a, std::size_t n_experts, void* work, std::int32_t* meta, int type,
                        cudaStream_t s);
std::size_t moe_grouped_work_floats(std::size_t pairs, std::size_t hidden, std::size_t inter);
/// Logits a block of the argmax's first pass scans (16 loads in flight per thread).
constexpr std::size_t kArgmaxChunk = 4096;
/// Keys of launch_argmax_rows's workspace for `rows` rows of n ids.
std::size_t argmax_workspace(std::size_t rows, std::size_t n);
/// Backend::argmax_rows on the device: out[r] = the first id of the largest value of row r (rows of n at
/// stride ld, n < 2^32) among those masks[r * mask_words ..] allows (device; null: all), -1 where none is
/// (an unmasked row of NaN only: 0). Two passes: blocks of kArgmaxChunk ids write their best (value, id)
/// key to `workspace` (argmax_workspace(rows, n) keys, device), a warp a row reduces them.
void launch_argmax_rows(const float* logits, std::size_t rows, std::size_t n, std::size_t ld,
                        const std::uint32_t* masks, std::size_t mask_words, unsigned long long* workspace,
                        std::int32_t* out, cudaStream_t s);
/// Backend::sample_rows on the device (sampling.cu): out[r] (device) = the id drawn from row r under
/// params[r] (device, one RowSampling a row), masks as launch_argmax_rows. One block of 1,024 threads a row:
/// a pass for the max, radix passes of 8 bits for the top-k / top-p thresholds (4 to 8 each; none for
/// a filter that is off), one pass for the draw.
///
/// With `shortlist` (every row greedy or of top-k 1..kShortlist, and sample_rows_workspace(rows, n) > 0)
/// the rows take two launches of many blocks instead: blocks of 4,096 ids keep their chunk's k first
/// candidates in `workspace` (sample_rows_workspace(rows, n) keys, device), then a block a row cuts and
/// draws over those.
void launch_sample_rows(const float* logits, std::size_t rows, std::size_t n, std::size_t ld,
                        const std::uint32_t* masks, std::size_t mask_words, const RowSampling* params,
                        bool shortlist, unsigned long long* workspace, std::int32_t* out, cudaStream_t s);
/// The largest top-k of launch_sample_rows's shortlist path.
constexpr unsigned kShortlist = 64;
/// Keys of the shortlist path's workspace for `rows` rows of n ids; 0 where rows of n ids do not fit it
/// (more than 262,144 ids).
std::size_t sample_rows_workspace(std::size_t rows, std::size_t n);
/// out[m, k] (contiguous) = bf16(x[m, k] at stride ldx), round to nearest even.
void launch_to_bf16(const float* x, std::size_t m, std::size_t k, std::size_t ldx, __nv_bfloat16* out, cudaStream_t s);
/// out[i] = bf16(in[i]) for weights of type `type` (f32 or f16) being stored as bf16.
void launch_weights_to_bf16(const void* in, int type, std::size_t count, __nv_bfloat16* out, cudaStream_t s);

/// Whether launch_gemv can run this shape (k a multiple of 8, ldx a multiple of 4, 16-byte aligned x and w).
bool gemv_supported(const float* x, std::size_t ldx, const void* w, std::size_t k);
/// A quantized weight as the kernels read it (Backend::load_quantized; device memory), repacked at load so
/// that each output row's values are contiguous:
///   kQ8 / kFP8 (rows layout): bytes [rows, cols]; kQ4: int32 [rows, cols / 8], nibble i of a word is
///   column 8w + i, stored value + 8; value = float(v) * scales[(n / block_rows) * sc_cols + k / block_cols];
///   kG4 / kG8 (GPTQ): int32 [rows, words_per_row] (qweight transposed), scales and zeros [rows, n_groups],
///   value = float(q - zeros[n, g]) * scales[n, g] with g = g_idx[k] (or k / group_size without g_idx).
/// Each value equals the CPU's dequantized value (the f32 product rounded once).
struct QuantArgs {
  const void* data = nullptr;
  const float* scales = nullptr;
  const std::int16_t* zeros = nullptr;
  const std::int32_t* g_idx = nullptr;
  int group_size = 0, n_groups = 0, block_rows = 1, block_cols = 0, sc_cols = 0;
  std::size_t words_per_row = 0;
};
/// Weight types of the kernels beyond the float ones (WType).
enum QType : int { kQ8 = 10, kFP8 = 11, kQ4 = 12, kG8 = 13, kG4 = 14 };
inline bool quantized_type(int t) { return t >= kQ8; }
#ifdef __CUDACC__
/// Values k0 .. k0 + 7 of row n of a quantized weight (QuantArgs), dequantized as the CPU does. k0 is a
/// multiple of 8; cols the row width.
template <int TYPE>
__device__ __forceinline__ void load8q(const QuantArgs& q, std::size_t n, std::size_t k0, std::size_t cols,
                                       float (&f)[8]) {
  if constexpr (TYPE == kQ8 || TYPE == kFP8 || TYPE == kQ4) {
    std::uint32_t w[2];
    if constexpr (TYPE == kQ4) {
      w[0] = __ldg(static_cast<const std::uint32_t*>(q.data) + (n * cols + k0) / 8);
    } else {
      const uint2 u = __ldg(reinterpret_cast<const uint2*>(static_cast<const std::uint8_t*>(q.data) + n * cols + k0));
      w[0] = u.x;
      w[1] = u.y;
    }
    const float* srow = q.scales + (n / q.block_rows) * q.sc_cols;
    const bool one = q.block_cols % 8 == 0;
    const float s0 = __ldg(srow + k0 / q.block_cols);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      float v;
      if constexpr (TYPE == kQ4) v = static_cast<float>(static_cast<int>((w[0] >> (4 * i)) & 15u) - 8);
      else if constexpr (TYPE == kQ8) v = static_cast<float>(static_cast<std::int8_t>((w[i / 4] >> (8 * (i % 4))) & 255u));
      else v = fp8_e4m3_to_float((w[i / 4] >> (8 * (i % 4))) & 255u);
      f[i] = v * (one ? s0 : __ldg(srow + (k0 + i) / q.block_cols));
    }
  } else {  // GPTQ, repacked per output row
    std::uint32_t w[2];
    if constexpr (TYPE == kG4) {
      w[0] = __ldg(static_cast<const std::uint32_t*>(q.data) + n * q.words_per_row + k0 / 8);
    } else {
      const uint2 u = __ldg(reinterpret_cast<const uint2*>(static_cast<const std::uint32_t*>(q.data) + n * q.words_per_row + k0 / 4));
      w[0] = u.x;
      w[1] = u.y;
    }
    const float* srow = q.scales + n * q.n_groups;
    const std::int16_t* zrow = q.zeros + n * q.n_groups;
    const bool one = !q.g_idx && q.group_size % 8 == 0;
    const int g0 = q.g_idx ? 0 : static_cast<int>(k0 / q.group_size);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int g = one ? g0 : q.g_idx ? __ldg(q.g_idx + k0 + i) : static_cast<int>((k0 + i) / q.group_size);
      const int v = TYPE == kG4 ? static_cast<int>((w[0] >> (4 * i)) & 15u) : static_cast<int>((w[i / 4] >> (8 * (i % 4))) & 255u);
      f[i] = static_cast<float>(v - __ldg(zrow + g)) * __ldg(srow + g);
    }
  }
}
#endif
/// f(std::integral_constant<int, QT>{}) for a QType; std::invalid_argument naming `what` for any other.
template <class F>
void with_quant_type(int type, const char* what, F&& f) {
  switch (type) {
    case kQ8: return f(std::integral_constant<int, kQ8>{});
    case kFP8: return f(std::integral_constant<int, kFP8>{});
    case kQ4: return f(std::integral_constant<int, kQ4>{});
    case kG8: return f(std::integral_constant<int, kG8>{});
    case kG4: return f(std::integral_constant<int, kG4>{});
    default: throw std::invalid_argument(std::string(what) + ": not a quantized type");
  }
}

/// out[i, 0:cols] = the dequantized row rows[i] (rows null: row i) of a quantized weight, i < n, f32 at
/// stride ldo, or rounded to bf16 (out_bf16, stride ldo) when out is null. cols a multiple of 8.
void launch_dequantize_rows(const QuantArgs& q, int type, const std::int32_t* rows, std::size_t n, std::size_t cols,
                            float* out, __nv_bfloat16* out_bf16, std::size_t ldo, cudaStream_t s);
/// y[row_of[i], ids[i]] = src[row_of[i], ids[i]] for i < n_pairs (src at stride lds, y at ldy).
void launch_copy_pairs(const float* src, std::size_t lds, const std::int32_t* row_of, const std::int32_t* ids,
                       std::size_t n_pairs, float* y, std::size_t ldy, cudaStream_t s);

/// One output of a GEMV: W [n, k] (weight type of the launch) into y at stride ldy; q: W's tables when
/// the launch's type is a QType (w == q.data).
struct GemvSeg {
  const void* w = nullptr;
  float* y = nullptr;
  std::size_t n = 0, ldy = 0;
  QuantArgs q;
};
/// A GEMV launch over m <= 8 rows of x [m, k] at stride ldx; with round_x the activations are rounded
/// to bf16 first (bf16 compute, as the tensor-core path rounds them).
/// Weights of the same width one GEMV launch takes (q, k, v; a linear-attention layer's qkv, z, b, a).
constexpr int kGemvMaxSegments = 4;
struct LLTarget;
struct GemvArgs {
  const float* x = nullptr;
  std::size_t ldx = 0, k = 0;
  bool round_x = false;
  GemvSeg seg[kGemvMaxSegments];
  int n_seg = 1;
  /// Mode 3: the one-shot all-reduce the partial sums go into (one_shot.cuh; device memory).
  const LLTarget* all_reduce = nullptr;
};
#ifdef __CUDACC__
/// x[i, at .. at + N - 1] as the GEMVs read it (N a multiple of 4, as is at; x 16-byte aligned), rounded
/// to bf16 under bf16 compute (round_x).
template <int N>
__device__ __forceinline__ void load_x(const GemvArgs& a, int i, std::size_t at, float (&xv)[N]) {
  const float4* xp = reinterpret_cast<const float4*>(a.x + i * a.ldx + at);
#pragma unroll
  for (int c = 0; c < N / 4; ++c) {
    const float4 p = __ldg(xp + c);
    xv[4 * c] = p.x;
    xv[4 * c + 1] = p.y;
    xv[4 * c + 2] = p.z;
    xv[4 * c + 3] = p.w;
  }
  if (a.round_x)
#pragma unroll
    for (int c = 0; c < N; ++c) xv[c] = round_bf16(xv[c]);
}
#endif

/// The output rows of a GEMV launch: every segment's in modes 0 and 1, the gate's (= the up's) in mode 2.
inline std::size_t gemv_output_rows(const GemvArgs& a, int mode) {
  if (mode == 2) return a.seg[0].n;
  std::size_t rows = 0;
  for (int i = 0; i < a.n_seg; ++i) rows += a.seg[i].n;
  return rows;
}
/// mode 0: seg[i].y = x . W_i^T for each segment (one launch for q, k and v); mode 1: seg[0].y += x . W^T;
/// mode 2: seg[0].y = silu(x . Wg^T) * (x . Wu^T) with seg[0].w = gate, seg[1].w = up; mode 3 (m = 1, float
/// weights, one segment; see gemv_all_reduce_fits): seg[0].y += the sum over the ranks of all_reduce of
/// their x . W^T, each warp's column sent to the peers and summed in rank order as it is done. One warp per output
/// column, the weights streamed once with 16-byte loads, several in flight per lane (decode is bound by
/// reading the weights). Quantized types: see gemv_quant_supported; the others take any segment count
/// with modes 0 and 1 only.
void launch_gemv(const GemvArgs& a, std::size_t m, int type, int mode, cudaStream_t s);
/// Whether mode 3 may run a GEMV of n output columns on weights of `type` (float types): its blocks all
/// fit on the device at once, as they must, since each waits for the same block on the other ranks.
bool gemv_all_reduce_fits(std::size_t n, int type);
/// Whether the quantized GEMV (quantized.cu) takes a weight of QType `type` and width k: a whole 16-byte
/// load of each row's values lies inside one scale block / group (no g_idx), rows 16-byte aligned. It
/// takes every mode and up to kGemvMaxSegments segments; other quantized weights take the general GEMV (one segment,
/// modes 0 and 1).
bool gemv_quant_supported(const QuantArgs& q, int type, std::size_t k);
/// launch_gemv for a quantized type that gemv_quant_supported accepts (every segment).
void launch_gemv_quant(const GemvArgs& a, std::size_t m, int type, int mode, cudaStream_t s);
/// launch_dequantize_rows for the weights gemv_quant_supported accepts (and 16-byte aligned output rows:
/// out and ldo, or out_bf16 and ldo, multiples of 16 bytes): 16-byte loads and stores. False (nothing
/// launched) for the others.
bool launch_dequantize_quant(const QuantArgs& q, int type, const std::int32_t* rows, std::size_t n, std::size_t cols,
                             float* out, __nv_bfloat16* out_bf16, std::size_t ldo, cudaStream_t s);
/// The same product for any m in f32 (weights widened exactly): 64x64 tiles in shared memory, 4x4 per
/// thread. The exact-compute path of prefill.
void launch_gemm_f32(const float* x, std::size_t m, std::size_t ldx, const void* w, int type, std::size_t n,
                     std::size_t k, float* y, std::size_t ldy, bool accumulate, cudaStream_t s);
/// Per-head RMSNorm (double sum of squares) and RoPE in place (Backend::head_norm_rope).
void launch_head_norm_rope(float* x, std::size_t n_tokens, std::size_t n_heads, std::size_t head_dim, std::size_t ld,
                           const float* w, float eps, std::size_t half, const float* cos, const float* sin,
                           cudaStream_t s);
/// y[row_of[i], ids[i]] = x[row_of[i], :k] . W[ids[i], :k] for i < n_pairs (one warp per pair).
void launch_matmul_ids(const float* x, std::size_t ldx, const void* w, int type, std::size_t k,
                       const std::int32_t* row_of, const std::int32_t* ids, std::size_t n_pairs, float* y,
                       std::size_t ldy, cudaStream_t s);

/// The paged KV layout of one layer: K and V each [n_blocks, n_kv_heads, block_size, head_dim] in
/// f32 or bf16.
struct KvLayer {
  void* k = nullptr;
  void* v = nullptr;
  bool bf16 = false;
  int n_kv_heads = 0, head_dim = 0, block_size = 16;
};

/// Runs of at least this many consecutive tokens of one sequence (prefill chunks) take the tensor-core
/// flash kernel where the cache is bf16.
constexpr int kFlashMinRun = 16;

/// The batch's attention metadata (device arrays of the staged batch).
struct AttnBatch {
  const std::int32_t* positions = nullptr;
  const std::int32_t* seq_index = nullptr;
  const std::int32_t* block_tables = nullptr;
  int max_blocks = 0;
  int n_tokens = 0;
  int max_position = 0;
  /// Flash tiles: pairs (first token, count <= 64) of runs >= kFlashMinRun; n_fa_tiles of them.
  const std::int32_t* fa_tiles = nullptr;
  int n_fa_tiles = 0;
  /// The other tokens (for the split kernel when flash tiles run), their largest position.
  const std::int32_t* simt_tokens = nullptr;
  int n_simt_tokens = 0;
  int simt_max_position = 0;
};

/// Whether the flash kernel serves this cache (bf16, head_dim 64, 128 or 256).
bool flash_attention_supported(const KvLayer& kv);

/// Backend::qk_norm_rope_store in one launch: grid (tokens, heads + kv heads); a block of a q head does its
/// norm and rotation, a block of a kv head those of k and then stores k and v of that head.
void launch_qk_norm_rope_store(float* q, std::size_t ldq, float* k, const float* v, std::size_t ldkv,
                               std::size_t n_heads, std::size_t n_kv_heads, std::size_t head_dim, const float* q_norm,
                               const float* k_norm, float eps, std::size_t half, const float* cos, const float* sin,
                               const AttnBatch& b, const KvLayer& kv, cudaStream_t s);
/// Writes k, v ([n_tokens, n_kv_heads * head_dim] at stride ld) into the layer at each token's slot.
void launch_kv_store(const float* k, const float* v, std::size_t ld, const AttnBatch& b, const KvLayer& kv,
                     cudaStream_t s);

/// Context positions one attention block handles (the split of the context; fixed so that a token's
/// result depends on its own context length only).
constexpr int kAttentionSplit = 512;
/// Workspace floats launch_attention needs for this batch (0 when no token's context is split).
std::size_t attention_workspace_floats(const AttnBatch& b, int n_heads, int head_dim);
/// Causal paged attention (GQA) of the batch's tokens over their sequences' K/V (attention.cu says how):
/// flash tiles on the tensor cores for prefill runs over a bf16 cache, each other (token, head, split of
/// kAttentionSplit positions) one block of 16 warps. head_dim at most 256.
void launch_attention(const float* q, std::size_t ldq, float* out, std::size_t ldo, int n_heads, const AttnBatch& b,
                      const KvLayer& kv, float scale, float* workspace, cudaStream_t s);

/// x[r, i] *= sigmoid(gate[r, gate_cols == 1 ? 0 : i]) (Backend::sigmoid_mul).
void launch_sigmoid_mul(const float* gate, std::size_t ldg, std::size_t gate_cols, float* x, std::size_t ldx,
                        std::size_t rows, std::size_t n, cudaStream_t s);

/// Backend::gated_delta_net on the device (linear_attention.cu). Pointers in device memory.
struct GatedDeltaArgs {
  const float* qkv = nullptr;   ///< [n_tokens, conv_dim] at ldqkv: the conv's input
  std::size_t ldqkv = 0;
  const float* a = nullptr;     ///< [n_tokens, nv] at ldab
  const float* b = nullptr;
  std::size_t ldab = 0;
  const float* conv_weight = nullptr, *A_log = nullptr, *dt_bias = nullptr;
  const std::int32_t* positions = nullptr;  ///< [n_tokens]
  const std::int32_t* seq_index = nullptr;  ///< [n_tokens]
  float* const* state_table = nullptr;      ///< KvStorage::state_table(): slot -> state
  const std::int32_t* state_slots = nullptr;  ///< [n_seqs] each sequence's slot (StagedBatch::state_slots)
  std::size_t state_offset = 0;             ///< floats into a slot's state: this layer's
#ifdef __CUDACC__
  /// The layer's state of the batch's sequence `seq`: conv window [K - 1, conv_dim], then S [nv, dk, dv].
  __device__ float* state(int seq) const { return state_table[state_slots[seq]] + state_offset; }
#endif
  float* conv_out = nullptr;                ///< scratch [n_tokens, conv_dim]
  float* out = nullptr;                     ///< [n_tokens, nv dv] at ldo
  std::size_t ldo = 0;
  std::size_t n_tokens = 0, conv_dim = 0, conv_floats = 0;
  std::size_t n_k_heads = 0, n_v_heads = 0, k_head_dim = 0, v_head_dim = 0;
  int conv_kernel = 0;
};
/// Whether launch_gated_delta_net takes these head and kernel sizes (dk of 16, 32, 64, 128 or 256; K <= 8).
bool gated_delta_supported(std::size_t k_head_dim, std::size_t conv_kernel);
void launch_gated_delta_net(const GatedDeltaArgs& a, std::size_t n_seqs, cudaStream_t s);

/// Tokens a chunk of the chunked delta rule takes (HF's chunk_size).
constexpr int kDeltaChunk = 64;
/// The chunked form's work list, built at stage time for a batch whose every sequence is one run of
/// consecutive positions: per sequence its run and its first chunk, per chunk its tokens.
struct DeltaChunks {
  const std::int32_t* seq_runs = nullptr;         ///< [n_seqs][2]: first token, count (0: no token)
  const std::int32_t* seq_first_chunk = nullptr;  ///< [n_seqs + 1]: chunks of sequence s are [f[s], f[s + 1])
  const std::int32_t* chunks = nullptr;           ///< [n_chunks][3]: sequence, first token, count <= kDeltaChunk
  std::size_t n_chunks = 0;
};
/// Whether launch_gated_delta_net_chunked takes these head sizes (dk, dv <= 128, multiples of 16).
bool gated_delta_chunked_supported(std::size_t k_head_dim, std::size_t v_head_dim);
/// Floats of launch_gated_delta_net_chunked's work buffer (beside a.conv_out).
std::size_t gated_delta_chunked_work_floats(const GatedDeltaArgs& a, std::size_t n_chunks);
/// launch_gated_delta_net in the chunked form of the delta rule (HF transformers'
/// torch_chunk_gated_delta_rule; fla's chunk_gated_delta_rule, Yang et al. 2024, "Gated Delta Networks"):
/// the conv a thread per (token, channel); then per (chunk of 64 tokens, value head) the WY form - the
/// chunk's decays, the strictly lower triangular system solved by forward substitution, U = T (beta v) and
/// W = T (beta exp(G) k), the causal q k^T block - all chunks at once; then per (sequence, value head, 32
/// value columns) the state carried over the sequence's chunks: v_new = U - W S, out = exp(G) q S +
/// (q k^T) v_new, S = exp(G_last) S + (exp(G_last - G) k)^T v_new. f32 throughout. `work`:
/// gated_delta_chunked_work_floats floats.
void launch_gated_delta_net_chunked(const GatedDeltaArgs& a, const DeltaChunks& c, std::size_t n_seqs, float* work,
                                    cudaStream_t s);

}  // namespace quarry::engine::cuda
