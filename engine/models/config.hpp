// Model hyper-parameters read from a Hugging Face config.json (transformers 4.x and 5.x layouts).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/core/types.hpp"

namespace quarry::engine {


/// config.json's `quantization_config`, as the quantized checkpoints on the Hugging Face hub publish it.
/// Supported (engine/models/quant_loader.hpp says how each is read):
///  - "gptq" (AutoGPTQ / GPTQModel: bits 4 or 8, group_size, sym, desc_act, checkpoint_format "gptq" with
///    the v1 zero-point offset or "gptq_v2" without it),
///  - "auto-round" (Intel AutoRound's GPTQ packing; packing_format "auto_round:auto_gptq" / "auto_round:gptq"
///    keeps the v1 offset, the native "auto_round" does not),
///  - "fp8" (fine-grained FP8 of the official Qwen3 / DeepSeek-V3 checkpoints: fmt e4m3, weight_block_size,
///    weight_scale_inv per block),
///  - "compressed-tensors" (llm-compressor) with one config group: format "pack-quantized" (int4, symmetric),
///    "int-quantized" / "naive-quantized" (int8, symmetric) or "float-quantized" (fp8 e4m3), strategy
///    channel, group, block or tensor; activations are computed unquantized (weight-only).
/// Anything else is refused by parse_model_config with the method named.
struct QuantizationConfig {
  std::string quant_method;              ///< "" when the checkpoint is not quantized
  std::size_t bits = 0;                  ///< integer methods: 4 or 8 (compressed-tensors: num_bits)
  std::size_t group_size = 0;            ///< 0: one group over the whole input dimension (GPTQ -1, channel)
  bool sym = true;
  bool desc_act = false;
  bool zero_point_offset = false;        ///< GPTQ v1: stored zero points are z - 1
  std::string element = "int";           ///< "int" or "float" (fp8)
  std::size_t block_rows = 0, block_cols = 0;  ///< fp8 / compressed-tensors block strategy
  std::string strategy;                  ///< compressed-tensors: channel, group, block, tensor
  std::string format;                    ///< compressed-tensors format
  std::vector<std::string> not_converted;  ///< modules_to_not_convert / ignore (names or "re:" patterns)
  bool present() const { return !quant_method.empty(); }
  /// Whether module `name` (e.g. "model.layers.0.self_attn.q_proj") is listed as not converted.
  bool is_not_converted(const std::string& module) const;
};

/// Decoder-only transformer hyper-parameters. Field names follow Hugging Face config keys.
struct ModelConfig {
  std::string architecture;      ///< architectures[0], e.g. "Qwen3ForCausalLM"
  std::string model_type;        ///< e.g. "qwen3"
  /// Where the decoder's tensors are named: "model." (…CausalLM), "model.language_model." (the text model
  /// of a …ForConditionalGeneration checkpoint, whose architecture is then reported as …ForCausalLM).
  std::string weight_prefix = "model.";
  /// Parts of the checkpoint quarry does not run, for the load message ("vision tower (vision_config)"
  /// of a multimodal checkpoint: text only); empty when everything is used.
  std::string not_loaded;
  std::size_t vocab_size = 0;
  std::size_t hidden_size = 0;
  std::size_t intermediate_size = 0;
  std::size_t num_hidden_layers = 0;
  std::size_t num_attention_heads = 0;
  std::size_t num_key_value_heads = 0;  ///< defaults to num_attention_heads (MHA)
  std::size_t head_dim = 0;             ///< defaults to hidden_size / num_attention_heads
  std::size_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;          ///< top-level (4.x) or rope_parameters.rope_theta (5.x)
  std::string rope_type = "default";    ///< only "default" is supported so far
  double partial_rotary_factor = 1.0;   ///< fraction of head_dim that RoPE rotates
  bool tie_word_embeddings = false;
  bool attention_bias = false;
  std::string hidden_act = "silu";
  std::string torch_dtype;              ///< "dtype" (5.x) or "torch_dtype" (4.x); informational
  std::vector<std::int64_t> eos_token_ids;  ///< eos_token_id as int or list (may be empty)
  std::int64_t bos_token_id = -1;

  // Sparse mixture of experts (Qwen3-MoE; HF Qwen3MoeSparseMoeBlock). num_experts 0: a dense model.
  std::size_t num_experts = 0;            ///< "num_experts" (hub checkpoints) or "num_local_experts" (5.x save)
  std::size_t num_experts_per_tok = 0;    ///< experts each token is routed to (top-k)
  std::size_t moe_intermediate_size = 0;  ///< each expert's SwiGLU width
  bool norm_topk_prob = false;            ///< renormalise the top-k routing weights to sum to 1
  std::size_t decoder_sparse_step = 1;    ///< layer l is sparse when (l + 1) % decoder_sparse_step == 0 ...
  std::vector<std::size_t> mlp_only_layers;  ///< ... and l is not listed here
  /// Whether decoder layer `layer` has the sparse MoE block (else the dense SwiGLU MLP).
  bool is_sparse_layer(std::size_t layer) const;
  /// Weights of the linear layers one token is multiplied by over all decoder layers: the q/k/v/o
  /// projections, and the dense MLP or, in a sparse layer, the router and num_experts_per_tok experts
  /// (a MoE's active parameters). The LM head is not counted. FLOPs per token = 2 x this + attention.
  double active_linear_parameters() const;

  // Hybrid models (Qwen3-Next, Qwen3.5): Gated DeltaNet ("linear_attention") layers beside gated
  // attention ("full_attention") layers, zero-centred RMSNorms, an optional shared expert.
  /// Per layer "linear_attention" or "full_attention" (layer_types, or every full_attention_interval-th
  /// layer full); empty for models without linear attention.
  std::vector<std::string> layer_types;
  std::size_t linear_num_key_heads = 0, linear_num_value_heads = 0;
  std::size_t linear_key_head_dim = 0, linear_value_head_dim = 0;
  std::size_t linear_conv_kernel_dim = 0;
  std::size_t shared_expert_intermediate_size = 0;  ///< 0: no shared expert
  /// Decoder layers that keep K/V (every layer but the linear-attention ones).
  std::size_t attention_layers() const {
    std::size_t n = 0;
    for (std::size_t l = 0; l < num_hidden_layers; ++l) n += is_linear_attention_layer(l) ? 0 : 1;
    return n;
  }
  /// Whether layer `layer` is a Gated DeltaNet layer.
  bool is_linear_attention_layer(std::size_t layer) const {
    return layer < layer_types.size() && layer_types[layer] == "linear_attention";
  }

  // Multi-token prediction (MTP) heads (ARCHITECTURE.md "MTP").
  /// Qwen3-Next / Qwen3.5 layout: decoder layers of the one `mtp.*` module (0: none; only 1 is supported).
  std::size_t mtp_num_hidden_layers = 0;
  /// DeepSeek-V3 layout: number of MTP modules, stored as model.layers.{num_hidden_layers + k}.*.
  std::size_t num_nextn_predict_layers = 0;
  /// Which main-model hidden state feeds the MTP module: "post_norm" (after model.norm; vLLM) or
  /// "pre_norm" (before it; llama.cpp, mlx-lm). Default post_norm.
  std::string mtp_hidden_state = "post_norm";
  /// Draft depths the module was trained for (recursive use); 0 when the config does not say.
  std::size_t mtp_trained_depths = 0;

  /// True if the config declares an MTP module of either layout.
  bool has_mtp() const { return mtp_num_hidden_layers > 0 || num_nextn_predict_layers > 0; }

  /// quantization_config (empty quant_method: none).
  QuantizationConfig quantization;

  /// Number of leading dimensions of each head that RoPE rotates (even).
  std::size_t rotary_dim() const;
};

/// Parses config.json. Throws std::runtime_error naming `path` and the key on a missing file,
/// malformed JSON, a missing required key or an inconsistent value (e.g. heads not divisible by
/// kv heads, odd rotary dim, unsupported rope_type).
ModelConfig load_model_config(const std::filesystem::path& path);

/// Same, from JSON text; `origin` names the source in error messages.
ModelConfig parse_model_config(const std::string& json_text, const std::string& origin);

}  // namespace quarry::engine
