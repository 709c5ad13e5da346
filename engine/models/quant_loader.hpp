// Quantized linear layers of a checkpoint, read as published (config.json quantization_config,
// engine/models/config.hpp QuantizationConfig), handed to the backend packed (Backend::load_quantized).
//
// Tensors of module M (e.g. "model.layers.0.mlp.down_proj") of a Linear [rows = out, cols = in]:
//  - gptq / auto-round: M.qweight int32 [cols * bits / 32, rows], M.qzeros int32 [G, rows * bits / 32]
//    (zero points packed along the output dimension, the lowest bits first), M.scales f16/bf16/f32 [G, rows],
//    M.g_idx int32 [cols] (optional; a non-trivial one is desc_act's order). GPTQ v1 stores z - 1.
//    Source: AutoGPTQ / GPTQModel pack() and the Hugging Face transformers GPTQ integration.
//  - fp8: M.weight F8_E4M3 [rows, cols], M.weight_scale_inv f32 [ceil(rows / br), ceil(cols / bc)]
//    (multiplied in, despite the name; DeepSeek-V3 inference/kernel.py weight_dequant).
//  - compressed-tensors: M.weight_packed int32 [rows, cols / 8] (int4 stored as value + 8) or M.weight
//    int8 / F8_E4M3 [rows, cols], with M.weight_scale [rows, G] (group), [rows, 1] (channel),
//    [ceil(rows / br), ceil(cols / bc)] (block) or [1] (tensor). Source: neuralmagic compressed-tensors,
//    compressors/quantized_compressors (pack_to_int32).
// A module without these tensors (listed in modules_to_not_convert / ignore, or simply kept in its float
// dtype: the embedding, the LM head, the MoE router) loads as a float matrix.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/backend/backend.hpp"
#include "engine/models/config.hpp"
#include "engine/models/safetensors.hpp"

namespace quarry::engine {

/// A quantized matrix read from a checkpoint, with the tables it points to (and, for a slice, the
/// packed values copied out of the file).
struct LoadedQuantized {
  QuantizedMatrix m;
  std::vector<float> scales;
  std::vector<std::int16_t> zeros;
  std::vector<std::int32_t> g_idx;
  std::vector<unsigned char> data;  ///< a slice's packed values (empty: m.data points into the file)
};

/// The quantized form of weight `name` ("M.weight", shape [rows, cols]) when the checkpoint stores module
/// M quantized as `q` says; nullopt when it is a float matrix (not converted, or no quantized tensors).
/// Throws std::runtime_error naming the checkpoint, the method and the tensor on a malformed one.
std::optional<LoadedQuantized> read_quantized(const TensorStore& store, const QuantizationConfig& q,
                                              const std::string& name, std::size_t rows, std::size_t cols);

/// Rows [row0, row0 + n_rows) and columns [col0, col0 + n_cols) of a quantized matrix (a tensor-parallel
/// rank's slice), in the same layout: the packed values copied, the scale blocks / groups the slice
/// covers. Throws std::runtime_error (naming `what`) where the slice cuts through a scale block, a
/// group (without desc_act's g_idx) or a packed int32 word.
LoadedQuantized slice_quantized(const LoadedQuantized& full, std::size_t row0, std::size_t n_rows, std::size_t col0,
                                std::size_t n_cols, const std::string& what);

/// The rows of `full` named by `runs` ([first row, count) each, in order), concatenated into one matrix
/// of the same layout and columns (regrouped projections: the query / gate rows of gated attention,
/// Qwen3-Next's per-key-head in_proj_qkvz). Each run is a slice_quantized() of whole scale blocks; throws
/// std::runtime_error (naming `what`) as it does, or where a run that is not the last ends inside a block.
LoadedQuantized gather_rows_quantized(const LoadedQuantized& full,
                                      const std::vector<std::pair<std::size_t, std::size_t>>& runs,
                                      const std::string& what);

/// Loads weight `name` ("M.weight") of shape [rows, cols]: quantized when the checkpoint stores module M
/// quantized as `q` says, else as a float matrix (Backend::load_matrix). Throws std::runtime_error naming
/// the checkpoint, the tensor and the method on a missing or mis-shaped tensor, a quantized tensor the
/// method does not describe, or an unsupported layout.
std::unique_ptr<Weight> load_linear(const TensorStore& store, Backend& backend, Compute compute,
                                    const QuantizationConfig& q, const std::string& name, std::size_t rows,
                                    std::size_t cols, WeightUse use);

}  // namespace quarry::engine
