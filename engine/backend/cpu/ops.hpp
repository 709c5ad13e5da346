// CPU backend ops: the reference every other backend is checked against (llama.cpp test-backend-ops).
// Activations are f32, row-major; weights are used in their stored dtype (f32, f16, bf16).
// Every op splits its work over `pool` (nullptr: calling thread only).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/backend/backend.hpp"
#include "engine/backend/cpu/gemm.hpp"

namespace quarry::engine {
class ThreadPool;
}

namespace quarry::engine::cpu {

/// A weight matrix as stored in the checkpoint: row-major [rows, cols] (HF Linear: [out, in]).
/// `packed`, when set (by the owner of the weights, under the bf16 kernel set), is the same matrix
/// packed for the AMX tiles with at least `rows` rows; matmul() then uses gemm_packed().
struct Weight {
  const void* data = nullptr;
  WeightType type = WeightType::f32;
  std::size_t rows = 0, cols = 0;
  const PackedBf16* packed = nullptr;
  std::size_t bytes() const { return rows * cols * (type == WeightType::f32 ? 4 : 2); }
};

/// Element i of a weight tensor as f32 (bf16/f16 widened exactly).
float weight_value(const void* data, WeightType type, std::size_t i);

/// out[t, :] = table[tokens[t], :].  table: [vocab, hidden] in its stored dtype; out: [n, hidden] f32 at
/// row stride ldo (0: hidden). Token ids must be < table.rows (checked by the caller).
void embedding(const std::int32_t* tokens, std::size_t n, const Weight& table, float* out, ThreadPool* pool,
               std::size_t ldo = 0);

/// y[m, w.rows] = x[m, w.cols] · w^T (torch.nn.Linear without bias) through cpu::gemm (cpu::gemm_packed
/// when w.packed is set).
void matmul(const float* x, std::size_t m, const Weight& w, float* y, ThreadPool* pool);

/// out[i] = x . w[ids[i], :] for i < n_ids (x: f32 [w.cols]; w in its stored dtype, widened exactly;
/// f32 accumulation over 16 interleaved partial sums): a few rows of a weight matrix, e.g. the logits
/// of the tokens a grammar allows. ids must be < w.rows (checked by the caller).
void dot_rows(const float* x, const Weight& w, const std::int32_t* ids, std::size_t n_ids, float* out);

/// RMSNorm (Zhang & Sennrich 2019; HF Qwen3RMSNorm): y = x / sqrt(mean(x^2) + eps) * weight, per row of
/// `dim` elements. Applies to `rows` rows at stride `ld` (in and out may alias). weight: [dim] f32.
void rms_norm(const float* x, float* y, std::size_t rows, std::size_t dim, std::size_t ld, const float* weight,
              float eps, ThreadPool* pool);

/// Rotary position embedding tables (RoFormer, Su et al. 2021), HF "default" rope_type:
/// inv_freq[i] = theta^(-2i / rotary_dim), i < rotary_dim / 2.
struct Rope {
  Rope(double theta, std::size_t rotary_dim);
  std::size_t rotary_dim;
  std::vector<float> inv_freq;
};

/// Applies RoPE in place with HF's rotate_half convention (the two halves of the rotary part are the
/// pair, not interleaved): for i < r/2, (x[i], x[i+r/2]) rotated by angle pos * inv_freq[i]. Only the
/// first rope.rotary_dim dims of each head rotate (partial rotary); the rest pass through.
/// x: [n_tokens, n_heads * head_dim] at row stride ld; positions: [n_tokens].
void rope(float* x, std::size_t n_tokens, std::size_t n_heads, std::size_t head_dim, std::size_t ld,
          const std::int32_t* positions, const Rope& rope, ThreadPool* pool);

/// cos and sin of pos * inv_freq[i] for n positions, [n, rotary_dim / 2] each (f32 angle, as HF; cos and
/// sin in double, rounded): computed once per forward pass and shared by the q and k of every layer.
struct RopeAngles {
  std::size_t half = 0;
  std::vector<float> cos, sin;
};
RopeAngles rope_angles(const std::int32_t* positions, std::size_t n, const Rope& rope);

/// rope() with the angles precomputed for the n_tokens positions.
void rope(float* x, std::size_t n_tokens, std::size_t n_heads, std::size_t head_dim, std::size_t ld,
          const RopeAngles& angles, ThreadPool* pool);
/// The same with the angle tables as arrays: cos, sin [n_tokens, half] (half = rotary_dim / 2).
void rope(float* x, std::size_t n_tokens, std::size_t n_heads, std::size_t head_dim, std::size_t ld,
          std::size_t half, const float* cos, const float* sin, ThreadPool* pool);
/// rope_angles() into arrays: cos, sin [n, rotary_dim / 2] for inv_freq [rotary_dim / 2].
void rope_angles(const std::int32_t* positions, std::size_t n, const float* inv_freq, std::size_t half, float* cos,
                 float* sin);

/// One layer of a paged KV cache as seen by attention: block b's keys for this layer start at
/// blocks[b] + k_offset, laid out transposed [n_kv_heads, head_dim, block_size] f32 (the 16 keys of a
/// block against one query are then one vector FMA per head dim); its values start at blocks[b] + v_offset,
/// laid out [n_kv_heads, block_size, head_dim] f32 (so each kv head's K and V are contiguous in a block).
/// With `bf16` (the bf16 kernel set, kv_bf16_supported()), K and V are bf16 in the AMX operand (VNNI)
/// layouts instead: K [n_kv_heads, head_dim / 2, block_size, 2] (pairs of head dims), V [n_kv_heads,
/// block_size / 2, head_dim, 2] (pairs of positions); offsets still count floats (two bf16 per float).
struct KvLayerView {
  float* const* blocks = nullptr;
  std::size_t k_offset = 0, v_offset = 0;
  std::size_t block_size = 16, n_kv_heads = 0, head_dim = 0;
  bool bf16 = false;
};

/// Whether a bf16 KV cache of this shape can be used here: AMX-BF16 available, head_dim 64 or 128,
/// block_size 16, at most 16 query heads per kv head.
bool kv_bf16_supported(std::size_t n_heads, std::size_t n_kv_heads, std::size_t head_dim, std::size_t block_size);

/// Writes k, v ([n_tokens, n_kv_heads * head_dim] f32, row stride ld) into the cache at each token's
/// position through its sequence's block table (block_tables[t] points to that sequence's table).
void kv_store(const float* k, const float* v, std::size_t ld, std::size_t n_tokens, const std::int32_t* positions,
              const std::int32_t* const* block_tables, const KvLayerView& kv, ThreadPool* pool);

/// Causal scaled-dot-product attention over the paged cache (vLLM PagedAttention, Kwon et al. 2023), GQA:
/// query head h reads kv head h / (n_heads / n_kv_heads). Token t attends to positions 0..positions[t] of
/// its own sequence, whose K/V must already be stored (kv_store first: a prefill chunk sees itself).
/// q: [n_tokens, n_heads * head_dim] at stride ldq; out: same shape at stride ldo. Softmax in f32.
/// Consecutive tokens of one sequence (a prefill chunk, a verify step's rows) are served together: one
/// pass over the K/V blocks per kv head for all their query heads (attention_range.inc). A token's output
/// does not depend on the other tokens of the call (bit-identical alone or among others). A bf16 cache
/// (kv.bf16) runs on the AMX tiles: Q and the softmax weights rounded to bf16, f32 accumulation.
void attention(const float* q, std::size_t ldq, float* out, std::size_t ldo, std::size_t n_tokens,
               std::size_t n_heads, const std::int32_t* positions, const std::int32_t* const* block_tables,
               const KvLayerView& kv, float scale, ThreadPool* pool);

/// SwiGLU (Shazeer 2020): out[i] = silu(gate[i]) * up[i], silu(x) = x / (1 + e^-x) (e^x by a polynomial,
/// relative error below 2e-7, vectorised per instruction set); rows of n elements,
/// gate/up/out at row strides ldg/ldu/ldo.
void silu_mul(const float* gate, std::size_t ldg, const float* up, std::size_t ldu, float* out, std::size_t ldo,
              std::size_t rows, std::size_t n, ThreadPool* pool);

/// x[i] += y[i] for i < n.
void add_inplace(float* x, const float* y, std::size_t n, ThreadPool* pool);

/// Index of the largest logit (the first one on ties, as torch.argmax) among the ids `mask` allows (null:
/// all; bit i of word w allows id 32 w + i); NaN logits are never picked. Backend::argmax_rows for one
/// row: -1 when the mask allows nothing, 0 for a row without a mask and without a number.
std::int32_t argmax(const float* logits, std::size_t n, const std::uint32_t* mask = nullptr);

/// Backend::sample_rows for one row, written plainly as the reference the other backends are checked
/// against: the candidates fully sorted in the sampler's order, the top-k / top-p / min-p prefix cut as
/// engine/runtime/sampler.cpp cuts it (top-p over sampling::mass sums), then the Gumbel-max draw over that
/// prefix (engine/backend/sampling.hpp). A row whose largest candidate is infinite gets the first id of
/// that value.
std::int32_t sample_row(const float* logits, std::size_t n, const std::uint32_t* mask, const RowSampling& params);

}  // namespace quarry::engine::cpu
