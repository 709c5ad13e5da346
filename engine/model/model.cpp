#include "engine/model/model.hpp"

#include <stdexcept>
#include <string>

#include "engine/model/qwen3.hpp"
#include "engine/model/safetensors.hpp"

namespace quarry::engine {

void Model::mtp_forward(std::size_t, const Batch&, const float*, KvCache&, float*, float*, ThreadPool*, std::size_t,
                        std::span<const std::vector<std::int32_t>>) {
  throw std::invalid_argument("mtp_forward: the model has no MTP module");
}

const char* compute_name(Compute c) {
  switch (c) {
    case Compute::automatic: return "auto";
    case Compute::exact: return "exact";
    case Compute::bf16: return "bf16";
  }
  return "auto";
}

Compute parse_compute(std::string_view name) {
  if (name == "auto") return Compute::automatic;
  if (name == "exact") return Compute::exact;
  if (name == "bf16") return Compute::bf16;
  throw std::invalid_argument("unknown compute mode \"" + std::string(name) + "\" (auto, exact, bf16)");
}

std::unique_ptr<Model> load_model(const std::filesystem::path& dir, Compute compute) {
  const auto config_path = dir / "config.json";
  ModelConfig config = load_model_config(config_path);
  const bool qwen3 = config.architecture == "Qwen3ForCausalLM" ||
                     (config.architecture.empty() && config.model_type == "qwen3");
  if (!qwen3)
    throw std::runtime_error(config_path.string() + ": unsupported architecture \"" +
                             (config.architecture.empty() ? config.model_type : config.architecture) +
                             "\" (supported: Qwen3ForCausalLM)");
  return make_qwen3(config, TensorStore::open(dir), compute);
}

}  // namespace quarry::engine
