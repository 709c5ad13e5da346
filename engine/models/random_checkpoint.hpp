// Random-weight checkpoints in Hugging Face layout (config.json + model.safetensors) for benchmarks and
// tests: the shapes of a real model without its weights.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "engine/models/config.hpp"

namespace quarry::engine {

/// config.json text of a named preset: "tiny" (Qwen3 layout, real Qwen3 vocabulary of 151,936 ids,
/// hidden 64, 2 layers: for tests with the real tokenizer), "qwen3-0.6b", "qwen3-4b" (the published
/// Qwen3 shapes). Throws std::invalid_argument on an unknown name.
std::string preset_config_json(const std::string& name);

/// Writes `out_dir`/config.json (the given text, dtype set to `dtype`) and `out_dir`/model.safetensors
/// with every Qwen3ForCausalLM tensor, plus the MTP tensors the config declares (mtp_num_hidden_layers = 1:
/// the Qwen3-Next `mtp.*` layout; num_nextn_predict_layers = n: the DeepSeek-V3 layout under
/// model.layers.{num_hidden_layers + k}, enorm/hnorm/eh_proj/shared_head.norm + a decoder layer): matrices ~ N(0, std^2) (HF init: std = initializer_range,
/// 0.02 by default), RMSNorm weights 1. Seeded xoshiro256** + Box-Muller: the same seed gives the same
/// bytes. Streams tensor by tensor (a 4B model needs no more memory than one row block).
/// Throws std::runtime_error naming the file on I/O errors or a config that does not parse.
void write_random_checkpoint(const std::string& config_json, const std::filesystem::path& out_dir, DType dtype,
                             std::uint64_t seed);

}  // namespace quarry::engine
