// `quarry quantize`: a float checkpoint (config.json + safetensors) rewritten in a published quantized
// layout, by round-to-nearest with per-group scales (no error compensation), so that users can quantize a
// model and tests can make fixtures. Optionally also writes the same model with every quantized weight
// dequantized to f32 (the reference a quantized model must reproduce).
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

namespace quarry::engine {

struct QuantizeOptions {
  /// "int8": compressed-tensors int-quantized, symmetric int8 (-127..127), scale absmax / 127 per output
  ///   channel (group_size 0) or per group of input columns;
  /// "int4-gptq": GPTQ packing (bits 4, or 8 with bits = 8), per-group scales (f16) and zero points;
  ///   sym: scale = absmax / ((2^bits - 1) / 2), zero 2^(bits-1) (AutoGPTQ's sym rule); asym: scale =
  ///   (max(w, 0) - min(w, 0)) / (2^bits - 1), zero = round(-min / scale);
  /// "int4-ct": compressed-tensors pack-quantized, symmetric int4 (-8..7, scale absmax / 7 per group of
  ///   input columns, 0: per output channel), stored as value + 8 eight to an int32 along the input;
  /// "fp8": fine-grained FP8 e4m3, one f32 weight_scale_inv = absmax / 448 per 128 x 128 block.
  std::string method;
  std::size_t group_size = 128;  ///< int4-gptq, int4-ct and int8 (0: one group per output row; int8's default)
  std::size_t bits = 4;          ///< int4-gptq: 4 or 8
  bool sym = true;               ///< int4-gptq
  /// int4-gptq: assign the groups in activation order as desc_act checkpoints do (a g_idx that is not
  /// k / group_size): columns sorted by decreasing squared norm stand in for GPTQ's Hessian diagonal.
  bool desc_act = false;
  bool gptq_v2 = false;          ///< int4-gptq: checkpoint_format gptq_v2 (zero points without the v1 offset)
  bool auto_round = false;       ///< int4-gptq: declare quant_method auto-round (packing auto_round:auto_gptq)
  /// Modules kept in their float dtype besides those that are never quantized (embeddings, norms, the
  /// MoE router): names or suffixes such as "lm_head" (the default; pass an empty list to quantize it too:
  /// only *_proj linears and lm_head are quantized at all) or "mlp.down_proj".
  std::vector<std::string> keep = {"lm_head"};
  /// If set, the same model with its quantized weights dequantized to f32 (other tensors widened to f32)
  /// is written there too.
  std::filesystem::path dequantized_dir;
  /// Modules quantized at once on worker threads ahead of the file being written (0: the hardware's
  /// threads). Every module's values are what it gets alone; threads change only when they are computed.
  std::size_t threads = 0;
};

struct QuantizeReport {
  std::size_t quantized = 0;     ///< linear layers quantized
  std::size_t kept = 0;          ///< tensors copied unchanged
  std::size_t bytes_in = 0, bytes_out = 0;  ///< tensor data read and written (quantized checkpoint)
};

/// Reads `in_dir` (config.json + model.safetensors or a sharded index; float tensors only) and writes
/// `out_dir`/config.json (with quantization_config) and `out_dir`/model.safetensors, and copies the other
/// files of the folder (tokenizer.json, generation_config.json, ...). One module is
/// quantized at a time (memory: about one weight matrix). Fused 3-D expert tensors (mlp.experts.gate_up_proj /
/// down_proj) are written per expert (mlp.experts.N.{gate,up,down}_proj), as hub MoE checkpoints store them.
/// Throws std::runtime_error naming the file on I/O errors, an already quantized input, an unknown method,
/// or a shape the layout cannot hold (int4-gptq: in and out features multiples of 8 and of the group).
QuantizeReport quantize_checkpoint(const std::filesystem::path& in_dir, const std::filesystem::path& out_dir,
                                   const QuantizeOptions& options);

}  // namespace quarry::engine
