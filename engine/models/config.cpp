#include "engine/models/config.hpp"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

namespace quarry::engine {

std::size_t ModelConfig::rotary_dim() const {
  auto d = static_cast<std::size_t>(static_cast<double>(head_dim) * partial_rotary_factor);
  return d & ~std::size_t{1};
}

namespace {

[[noreturn]] void fail(const std::string& origin, const std::string& why) {
  throw std::runtime_error(origin + ": " + why);
}

std::size_t get_size(const nlohmann::json& j, const char* key, const std::string& origin) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) fail(origin, std::string("missing required key \"") + key + "\"");
  if (!it->is_number_integer() || it->get<std::int64_t>() <= 0)
    fail(origin, std::string("key \"") + key + "\" must be a positive integer");
  return it->get<std::size_t>();
}

template <typename T>
T get_or(const nlohmann::json& j, const char* key, T fallback, const std::string& origin) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    fail(origin, std::string("key \"") + key + "\" has the wrong type");
  }
}

QuantizationConfig parse_quantization(const nlohmann::json& q, const std::string& origin) {
  QuantizationConfig c;
  if (!q.is_object()) fail(origin, "\"quantization_config\" is not an object");
  c.quant_method = get_or<std::string>(q, "quant_method", "", origin);
  const std::string& m = c.quant_method;
  const std::string what = "quantization_config (quant_method \"" + m + "\"): ";
  const auto names = [&](const char* key) {
    if (auto it = q.find(key); it != q.end() && it->is_array())
      for (const auto& e : *it)
        if (e.is_string()) c.not_converted.push_back(e.get<std::string>());
  };
  names("modules_to_not_convert");
  names("ignore");
  names("extra_config_ignore");
  if (m == "gptq" || m == "auto-round" || m == "autoround") {
    c.bits = get_or<std::size_t>(q, "bits", 4, origin);
    if (c.bits != 4 && c.bits != 8) fail(origin, what + "bits " + std::to_string(c.bits) + " is not supported (4 or 8)");
    const auto gs = get_or<std::int64_t>(q, "group_size", 128, origin);
    if (gs != -1 && gs <= 0) fail(origin, what + "group_size must be positive or -1");
    c.group_size = gs == -1 ? 0 : static_cast<std::size_t>(gs);
    c.sym = get_or<bool>(q, "sym", true, origin);
    c.desc_act = get_or<bool>(q, "desc_act", false, origin);
    if (m == "gptq") {
      const std::string fmt = get_or<std::string>(q, "checkpoint_format", "gptq", origin);
      if (fmt != "gptq" && fmt != "gptq_v2")
        fail(origin, what + "checkpoint_format \"" + fmt + "\" is not supported (gptq, gptq_v2)");
      c.zero_point_offset = fmt == "gptq";
    } else {
      c.quant_method = "auto-round";
      const std::string pf = get_or<std::string>(q, "packing_format", "auto_round:auto_gptq", origin);
      if (pf.find("awq") != std::string::npos || pf.find("marlin") != std::string::npos)
        fail(origin, what + "packing_format \"" + pf + "\" is not supported (GPTQ packings only)");
      c.zero_point_offset = pf.find("gptq") != std::string::npos;
      const std::string dt = get_or<std::string>(q, "data_type", "int", origin);
      if (dt != "int") fail(origin, what + "data_type \"" + dt + "\" is not supported (int)");
    }
  } else if (m == "fp8") {
    c.element = "float";
    c.bits = 8;
    const std::string fmt = get_or<std::string>(q, "fmt", "e4m3", origin);
    if (fmt != "e4m3") fail(origin, what + "fmt \"" + fmt + "\" is not supported (e4m3)");
    const auto block = get_or<std::vector<std::size_t>>(q, "weight_block_size", {}, origin);
    if (block.size() != 2 || block[0] == 0 || block[1] == 0)
      fail(origin, what + "weight_block_size must be two positive sizes (per-tensor FP8 is not supported)");
    c.block_rows = block[0];
    c.block_cols = block[1];
    c.strategy = "block";
  } else if (m == "compressed-tensors") {
    c.format = get_or<std::string>(q, "format", "", origin);
    auto groups = q.find("config_groups");
    if (groups == q.end() || !groups->is_object() || groups->size() != 1)
      fail(origin, what + "exactly one entry of config_groups is supported");
    const auto& g = groups->begin().value();
    auto wit = g.find("weights");
    if (wit == g.end() || !wit->is_object()) fail(origin, what + "config group without \"weights\"");
    const auto& w = *wit;
    c.bits = get_or<std::size_t>(w, "num_bits", 0, origin);
    c.element = get_or<std::string>(w, "type", "int", origin);
    c.sym = get_or<bool>(w, "symmetric", true, origin);
    c.strategy = get_or<std::string>(w, "strategy", "channel", origin);
    if (c.strategy == "group") {
      c.group_size = get_or<std::size_t>(w, "group_size", 0, origin);
      if (c.group_size == 0) fail(origin, what + "strategy group without a group_size");
    } else if (c.strategy == "block") {
      const auto block = get_or<std::vector<std::size_t>>(w, "block_structure", {}, origin);
      if (block.size() != 2 || block[0] == 0 || block[1] == 0)
        fail(origin, what + "block_structure must be two positive sizes");
      c.block_rows = block[0];
      c.block_cols = block[1];
    } else if (c.strategy != "channel" && c.strategy != "tensor") {
      fail(origin, what + "strategy \"" + c.strategy + "\" is not supported (channel, group, block, tensor)");
    }
    if (!c.sym) fail(origin, what + "asymmetric weights are not supported (symmetric only)");
    const bool int4 = c.format == "pack-quantized" && c.element == "int" && c.bits == 4;
    const bool int8 = (c.format == "int-quantized" || c.format == "naive-quantized") && c.element == "int" && c.bits == 8;
    const bool fp8 = (c.format == "float-quantized" || c.format == "naive-quantized") && c.element == "float" && c.bits == 8;
    if (!int4 && !int8 && !fp8)
      fail(origin, what + "format \"" + c.format + "\" with " + std::to_string(c.bits) + "-bit " + c.element +
                       " weights is not supported (pack-quantized int4, int-quantized int8, float-quantized fp8)");
  } else {
    fail(origin, "quantization_config: quant_method \"" + m +
                     "\" is not supported (supported: gptq, auto-round, fp8, compressed-tensors)");
  }
  return c;
}

}  // namespace

bool QuantizationConfig::is_not_converted(const std::string& module) const {
  for (const auto& n : not_converted) {
    if (n.rfind("re:", 0) == 0) {
      // compressed-tensors' regular expressions: matched as a suffix pattern of the kind published
      // ("re:.*lm_head", "re:.*mlp.gate$"); only ".*" and a trailing "$" are interpreted.
      std::string pat = n.substr(3);
      if (!pat.empty() && pat.back() == '$') pat.pop_back();
      if (pat.rfind(".*", 0) == 0) {
        pat = pat.substr(2);
        if (module.size() >= pat.size() && module.compare(module.size() - pat.size(), pat.size(), pat) == 0) return true;
      } else if (module == pat) {
        return true;
      }
    } else if (module == n || (module.size() > n.size() && module.compare(module.size() - n.size(), n.size(), n) == 0 &&
                               module[module.size() - n.size() - 1] == '.')) {
      return true;  // "lm_head" names model's lm_head; "mlp.gate" any layer's router
    }
  }
  return false;
}

ModelConfig parse_model_config(const std::string& text, const std::string& origin) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    fail(origin, std::string("malformed JSON: ") + e.what());
  }
  if (!j.is_object()) fail(origin, "expected a JSON object");
  ModelConfig c;
  if (auto it = j.find("architectures"); it != j.end() && it->is_array() && !it->empty() && (*it)[0].is_string())
    c.architecture = (*it)[0].get<std::string>();
  // Multimodal wrappers (Qwen3_5ForConditionalGeneration, Qwen3_5MoeForConditionalGeneration): the text
  // model's keys sit in text_config (top-level keys fill what it lacks, e.g. tie_word_embeddings) and its
  // weights under model.language_model.*; the vision tower is not loaded.
  const std::string wrapper = "ForConditionalGeneration";
  if (auto it = j.find("text_config"); it != j.end() && it->is_object() && c.architecture.size() > wrapper.size() &&
                                       c.architecture.ends_with(wrapper)) {
    nlohmann::json text = *it;
    for (const auto& [k, v] : j.items())
      if (!text.contains(k) && k != "text_config" && k != "vision_config" && k != "model_type") text[k] = v;
    c.architecture = c.architecture.substr(0, c.architecture.size() - wrapper.size()) + "ForCausalLM";
    c.weight_prefix = "model.language_model.";
    if (j.contains("vision_config")) c.not_loaded = "the vision tower (vision_config): text inputs only";
    j = std::move(text);
  }
  c.model_type = get_or<std::string>(j, "model_type", "", origin);
  if (c.architecture.empty() && c.model_type.empty()) fail(origin, "neither \"architectures\" nor \"model_type\" is set");
  c.vocab_size = get_size(j, "vocab_size", origin);
  c.hidden_size = get_size(j, "hidden_size", origin);
  // MoE-only models (Qwen3.5-MoE) have no dense width.
  c.intermediate_size = j.contains("intermediate_size") || !(j.contains("num_experts") || j.contains("num_local_experts"))
                            ? get_size(j, "intermediate_size", origin)
                            : 0;
  c.num_hidden_layers = get_size(j, "num_hidden_layers", origin);
  c.num_attention_heads = get_size(j, "num_attention_heads", origin);
  c.num_key_value_heads = j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null()
                              ? get_size(j, "num_key_value_heads", origin)
                              : c.num_attention_heads;
  c.head_dim = j.contains("head_dim") && !j["head_dim"].is_null() ? get_size(j, "head_dim", origin)
                                                                   : c.hidden_size / c.num_attention_heads;
  c.max_position_embeddings = get_or<std::size_t>(j, "max_position_embeddings", 0, origin);
  c.rms_norm_eps = get_or<double>(j, "rms_norm_eps", 1e-6, origin);
  c.tie_word_embeddings = get_or<bool>(j, "tie_word_embeddings", false, origin);
  c.attention_bias = get_or<bool>(j, "attention_bias", false, origin);
  c.hidden_act = get_or<std::string>(j, "hidden_act", "silu", origin);
  c.torch_dtype = get_or<std::string>(j, "dtype", get_or<std::string>(j, "torch_dtype", "", origin), origin);
  c.partial_rotary_factor = get_or<double>(j, "partial_rotary_factor", 1.0, origin);
  c.bos_token_id = get_or<std::int64_t>(j, "bos_token_id", -1, origin);
  if (auto it = j.find("eos_token_id"); it != j.end()) {
    if (it->is_number_integer()) c.eos_token_ids.push_back(it->get<std::int64_t>());
    else if (it->is_array())
      for (const auto& e : *it)
        if (e.is_number_integer()) c.eos_token_ids.push_back(e.get<std::int64_t>());
  }

  // RoPE: transformers 4.x keeps rope_theta at the top level and rope_scaling (or null) beside it;
  // 5.x nests {rope_theta, rope_type, partial_rotary_factor?} under rope_parameters.
  c.rope_theta = get_or<double>(j, "rope_theta", 10000.0, origin);
  const nlohmann::json* rope = nullptr;
  if (auto it = j.find("rope_parameters"); it != j.end() && it->is_object()) rope = &*it;
  else if (auto it2 = j.find("rope_scaling"); it2 != j.end() && it2->is_object()) rope = &*it2;
  if (rope) {
    c.rope_theta = get_or<double>(*rope, "rope_theta", c.rope_theta, origin);
    c.rope_type = get_or<std::string>(*rope, "rope_type", get_or<std::string>(*rope, "type", "default", origin), origin);
    c.partial_rotary_factor = get_or<double>(*rope, "partial_rotary_factor", c.partial_rotary_factor, origin);
  }

  c.num_experts = get_or<std::size_t>(j, "num_experts", get_or<std::size_t>(j, "num_local_experts", 0, origin), origin);
  if (c.num_experts > 0) {
    c.num_experts_per_tok = get_size(j, "num_experts_per_tok", origin);
    c.moe_intermediate_size = get_size(j, "moe_intermediate_size", origin);
    // Qwen3-Next defaults to renormalising; Qwen3.5-MoE always does (its router has no switch).
    const bool qwen35_moe = c.model_type.rfind("qwen3_5_moe", 0) == 0 || c.architecture.rfind("Qwen3_5Moe", 0) == 0;
    c.norm_topk_prob = qwen35_moe || get_or<bool>(j, "norm_topk_prob", c.model_type == "qwen3_next", origin);
    c.decoder_sparse_step = get_or<std::size_t>(j, "decoder_sparse_step", 1, origin);
    c.mlp_only_layers = get_or<std::vector<std::size_t>>(j, "mlp_only_layers", {}, origin);
    if (c.num_experts_per_tok == 0 || c.num_experts_per_tok > c.num_experts)
      fail(origin, "num_experts_per_tok (" + std::to_string(c.num_experts_per_tok) + ") must be in 1..num_experts (" +
                       std::to_string(c.num_experts) + ")");
    if (c.decoder_sparse_step == 0) fail(origin, "decoder_sparse_step must be at least 1");
  }

  // Hybrid layers (HF Qwen3NextConfig: layer_types, else every full_attention_interval-th layer full).
  // (Other architectures' layer_types -- Qwen3's full / sliding attention under transformers 5 -- are not
  // this: only configs with linear-attention heads are hybrid.)
  if (j.contains("linear_num_value_heads")) {
    c.layer_types = get_or<std::vector<std::string>>(j, "layer_types", {}, origin);
    if (c.layer_types.empty()) {
      const std::size_t interval = get_or<std::size_t>(j, "full_attention_interval", 4, origin);
      if (interval == 0) fail(origin, "full_attention_interval must be at least 1");
      for (std::size_t l = 0; l < c.num_hidden_layers; ++l)
        c.layer_types.push_back((l + 1) % interval ? "linear_attention" : "full_attention");
    }
    if (c.layer_types.size() != c.num_hidden_layers)
      fail(origin, "layer_types has " + std::to_string(c.layer_types.size()) + " entries for " +
                       std::to_string(c.num_hidden_layers) + " layers");
    bool linear = false;
    for (const auto& t : c.layer_types) {
      if (t != "linear_attention" && t != "full_attention")
        fail(origin, "unsupported layer type \"" + t + "\" (supported: linear_attention, full_attention)");
      linear = linear || t == "linear_attention";
    }
    if (linear) {
      c.linear_num_key_heads = get_size(j, "linear_num_key_heads", origin);
      c.linear_num_value_heads = get_size(j, "linear_num_value_heads", origin);
      c.linear_key_head_dim = get_size(j, "linear_key_head_dim", origin);
      c.linear_value_head_dim = get_size(j, "linear_value_head_dim", origin);
      c.linear_conv_kernel_dim = get_size(j, "linear_conv_kernel_dim", origin);
      if (c.linear_num_value_heads % c.linear_num_key_heads != 0)
        fail(origin, "linear_num_value_heads is not a multiple of linear_num_key_heads");
    }
  }
  c.shared_expert_intermediate_size = get_or<std::size_t>(j, "shared_expert_intermediate_size", 0, origin);

  c.mtp_num_hidden_layers = get_or<std::size_t>(j, "mtp_num_hidden_layers", 0, origin);
  c.num_nextn_predict_layers = get_or<std::size_t>(j, "num_nextn_predict_layers", 0, origin);
  c.mtp_hidden_state = get_or<std::string>(j, "mtp_hidden_state", "post_norm", origin);
  c.mtp_trained_depths = get_or<std::size_t>(j, "mtp_trained_depths", 0, origin);
  if (c.mtp_num_hidden_layers > 1)
    fail(origin, "mtp_num_hidden_layers " + std::to_string(c.mtp_num_hidden_layers) + " is not supported (0 or 1)");
  if (c.mtp_num_hidden_layers > 0 && c.num_nextn_predict_layers > 0)
    fail(origin, "both mtp_num_hidden_layers and num_nextn_predict_layers are set (one MTP layout only)");
  if (c.mtp_hidden_state != "post_norm" && c.mtp_hidden_state != "pre_norm")
    fail(origin, "mtp_hidden_state must be \"post_norm\" or \"pre_norm\", not \"" + c.mtp_hidden_state + "\"");

  if (c.num_attention_heads % c.num_key_value_heads != 0)
    fail(origin, "num_attention_heads (" + std::to_string(c.num_attention_heads) +
                     ") is not a multiple of num_key_value_heads (" + std::to_string(c.num_key_value_heads) + ")");
  if (c.rope_type != "default")
    fail(origin, "unsupported rope_type \"" + c.rope_type + "\" (supported: default)");
  if (!(c.partial_rotary_factor > 0.0 && c.partial_rotary_factor <= 1.0))
    fail(origin, "partial_rotary_factor must be in (0, 1]");
  if (c.rotary_dim() == 0) fail(origin, "rotary dimension is zero");
  if (!(c.rope_theta > 0.0)) fail(origin, "rope_theta must be positive");
  if (auto it = j.find("quantization_config"); it != j.end() && !it->is_null())
    c.quantization = parse_quantization(*it, origin);
  if (c.hidden_act != "silu") fail(origin, "unsupported hidden_act \"" + c.hidden_act + "\" (supported: silu)");
  return c;
}

bool ModelConfig::is_sparse_layer(std::size_t layer) const {
  if (num_experts == 0) return false;
  if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end()) return false;
  return (layer + 1) % decoder_sparse_step == 0;
}

double ModelConfig::active_linear_parameters() const {
  const double H = static_cast<double>(hidden_size), D = static_cast<double>(head_dim);
  double n = 0;
  const double key_dim = static_cast<double>(linear_num_key_heads * linear_key_head_dim);
  const double value_dim = static_cast<double>(linear_num_value_heads * linear_value_head_dim);
  const double gated_q = layer_types.empty() ? 0.0 : H * D * static_cast<double>(num_attention_heads);
  for (std::size_t l = 0; l < num_hidden_layers; ++l)
    n += (is_linear_attention_layer(l)
              // in_proj_qkv, in_proj_z, in_proj_b, in_proj_a, out_proj
              ? H * (2 * key_dim + 2 * value_dim + 2.0 * static_cast<double>(linear_num_value_heads)) + value_dim * H
              // q (twice its width with the output gate of hybrid models), k, v, o
              : H * D * static_cast<double>(2 * num_attention_heads + 2 * num_key_value_heads) + gated_q) +
         (shared_expert_intermediate_size > 0 && is_sparse_layer(l)
              ? 3.0 * H * static_cast<double>(shared_expert_intermediate_size) + H
              : 0.0) +
         (is_sparse_layer(l)
              ? H * static_cast<double>(num_experts) + 3.0 * H * static_cast<double>(num_experts_per_tok * moe_intermediate_size)
              : 3.0 * H * static_cast<double>(intermediate_size));
  return n;
}

ModelConfig load_model_config(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path.string() + ": cannot open (missing or unreadable)");
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_model_config(ss.str(), path.string());
}

}  // namespace quarry::engine
