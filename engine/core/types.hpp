// The engine's vocabulary types, shared by every room (engine/README.md "Rooms").
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace quarry::engine {

/// A token id of the model's vocabulary (Hugging Face tokenizers: u32 ids; every vocabulary in use fits i32).
using TokenId = std::int32_t;
/// A sequence of the KV cache (one per running request).
using SeqId = std::int64_t;
/// A block of the paged KV cache (index into the block pool).
using BlockId = std::int32_t;
/// Prefix-cache key of a full block (engine/memory/block_pool.hpp).
using BlockHash = std::uint64_t;

/// Element type of a tensor as stored (safetensors names: F32, F16, BF16) or computed.
enum class DType : std::uint8_t { f32, f16, bf16 };

/// Bytes per element of `t`.
constexpr std::size_t dtype_size(DType t) { return t == DType::f32 ? 4 : 2; }
/// "f32", "f16", "bf16".
const char* dtype_name(DType t);

/// How a model computes its products and keeps its KV cache (engine/backend/backend.hpp says how each
/// backend resolves it):
///  exact: f32 products (weights widened exactly, f32 accumulation) and an f32 KV cache: follows an f32
///         reference such as transformers in float32.
///  bf16:  as a bf16 checkpoint runs in bf16 (Hugging Face dtype="auto", vLLM): activations rounded to
///         bf16 at the products, f32 accumulation, bf16 KV cache.
///  automatic: the checkpoint's dtype where the backend can compute in it (bf16 for a bf16 checkpoint),
///         exact otherwise.
enum class Compute : std::uint8_t { automatic, exact, bf16 };

/// "auto", "exact" or "bf16".
const char* compute_name(Compute c);

/// The sampling filters' domains, for the host sampler (engine/runtime/sampler.hpp) and a backend's draws
/// (Backend::sample_rows): std::invalid_argument "`who`: ..." unless temperature >= 0, top_p is in (0, 1]
/// and min_p in [0, 1].
void check_sampling(float temperature, float top_p, float min_p, std::string_view who);
/// Inverse of compute_name(); throws std::invalid_argument on anything else.
Compute parse_compute(std::string_view name);

}  // namespace quarry::engine
