#include "engine/models/registry.hpp"

#include <array>

namespace quarry::engine {

namespace {
const std::array<Architecture, 5> kArchitectures = {{
    {"Qwen3ForCausalLM", "qwen3", &make_qwen3, &make_qwen3_rank},
    {"Qwen3MoeForCausalLM", "qwen3_moe", &make_qwen3_moe, &make_qwen3_rank},
    {"Qwen3NextForCausalLM", "qwen3_next", &make_hybrid_qwen, &make_hybrid_qwen_rank},
    {"Qwen3_5ForCausalLM", "qwen3_5_text", &make_hybrid_qwen, &make_hybrid_qwen_rank},
    {"Qwen3_5MoeForCausalLM", "qwen3_5_moe_text", &make_hybrid_qwen, &make_hybrid_qwen_rank},
}};
}  // namespace

std::span<const Architecture> architectures() { return kArchitectures; }

const Architecture* find_architecture(const ModelConfig& config) {
  for (const auto& a : kArchitectures)
    if (config.architecture == a.name || (config.architecture.empty() && config.model_type == a.model_type)) return &a;
  return nullptr;
}

std::string supported_architectures() {
  std::string s;
  for (const auto& a : kArchitectures) s += (s.empty() ? "" : ", ") + std::string(a.name);
  return s;
}

}  // namespace quarry::engine
