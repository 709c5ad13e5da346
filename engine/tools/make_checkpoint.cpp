// quarry-make-checkpoint: writes a random-weight Qwen3 checkpoint (config.json + model.safetensors,
// and the tokenizer files if given) for benchmarks and tests.
//
// Usage: quarry-make-checkpoint (--preset NAME | --config config.json) --out DIR  (NAME: preset_names())
//                               [--dtype bf16|f16|f32] [--seed N] [--tokenizer tokenizer.json]
//                               [--mtp next | --mtp deepseek:N]
//   --mtp next: adds the Qwen3-Next MTP module (mtp.*, mtp_num_hidden_layers = 1);
//   --mtp deepseek:N: adds N DeepSeek-V3 MTP modules (num_nextn_predict_layers = N).
// Exit codes: 0 written; 1 usage or I/O error (message on stderr).
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/models/random_checkpoint.hpp"

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  std::string preset, config_file, out, dtype = "bf16", tokenizer, mtp;
  std::uint64_t seed = 0;
  auto usage = [] {
    std::cerr << "usage: quarry-make-checkpoint (--preset NAME | --config FILE) --out DIR\n"
                 "                              [--dtype bf16|f16|f32] [--seed N] [--tokenizer tokenizer.json]\n"
                 "                              [--mtp next | --mtp deepseek:N]\n"
                 "presets: "
              << quarry::engine::preset_names() << "\n";
    return 1;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      usage();
      return 0;
    }
    if (i + 1 >= argc) return usage();
    const std::string v = argv[++i];
    if (a == "--preset") preset = v;
    else if (a == "--config") config_file = v;
    else if (a == "--out") out = v;
    else if (a == "--dtype") dtype = v;
    else if (a == "--seed") seed = std::stoull(v);
    else if (a == "--tokenizer") tokenizer = v;
    else if (a == "--mtp") mtp = v;
    else return usage();
  }
  if (out.empty() || preset.empty() == config_file.empty()) return usage();
  try {
    using quarry::engine::DType;
    DType dt = dtype == "bf16" ? DType::bf16 : dtype == "f16" ? DType::f16 : dtype == "f32" ? DType::f32
                                                                                            : throw std::invalid_argument("--dtype must be bf16, f16 or f32");
    std::string cfg;
    if (!preset.empty()) {
      cfg = quarry::engine::preset_config_json(preset);
    } else {
      std::ifstream in(config_file);
      if (!in) throw std::runtime_error(config_file + ": cannot open");
      std::ostringstream ss;
      ss << in.rdbuf();
      cfg = ss.str();
    }
    if (!mtp.empty()) {
      auto j = nlohmann::json::parse(cfg);
      if (mtp == "next") {
        j["mtp_num_hidden_layers"] = 1;
        j["mtp_hidden_state"] = "post_norm";
      } else if (mtp.rfind("deepseek:", 0) == 0 && mtp.size() > 9 &&
                 mtp.find_first_not_of("0123456789", 9) == std::string::npos) {
        j["num_nextn_predict_layers"] = std::stoul(mtp.substr(9));
      } else {
        throw std::invalid_argument("--mtp must be \"next\" or \"deepseek:N\", not \"" + mtp + "\"");
      }
      cfg = j.dump(2);
    }
    quarry::engine::write_random_checkpoint(cfg, out, dt, seed);
    if (!tokenizer.empty()) {
      const fs::path tj(tokenizer);
      auto copy = [&](const fs::path& from, const fs::path& to) {
        fs::remove(to);
        fs::copy_file(from, to);
        fs::permissions(to, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::add);
      };
      copy(tj, fs::path(out) / "tokenizer.json");
      const auto tc = tj.parent_path() / "tokenizer_config.json";
      if (fs::exists(tc)) copy(tc, fs::path(out) / "tokenizer_config.json");
    }
  } catch (const std::exception& e) {
    std::cerr << "quarry-make-checkpoint: " << e.what() << "\n";
    return 1;
  }
  std::cerr << "wrote " << out << "\n";
  return 0;
}
