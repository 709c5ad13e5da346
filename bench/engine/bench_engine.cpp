// bench_engine: decode tok/s and achieved GB/s at batch 1, prefill tok/s, for a random-weight checkpoint
// of a published Qwen3 shape (written at bench time into --work, not committed), next to what this
// machine can do, measured in the same run:
//   * memory bandwidth: Backend::probe_bandwidth_gb_s over 1 GiB (CPU: multi-threaded streaming read;
//     GPU: device copy), 5 runs before and 5 after the engine runs, best run (STREAM convention) used for
//     the roofline, median reported;
//   * GEMM FLOP/s: Backend::probe_matmul_gflops on a square problem (stored-dtype weights, the model's
//     compute mode), median of 3.
// Decode is reported as a fraction of the bandwidth roofline (bytes of weights + KV read per token /
// measured bandwidth), prefill as a fraction of the measured GEMM FLOP/s (2 x linear-layer parameters
// per token + attention). 1 warm-up + --runs measured runs; medians.
//
// Usage: bench_engine [--preset qwen3-0.6b] [--dtype bf16] [--device cpu|cuda] [--threads 2] [--prefill-tokens 32]
//                     [--decode-tokens 16] [--runs 3] [--work DIR] [--out DIR]
// Writes OUT/bench_engine.json and OUT/bench_engine.md (OUT defaults to the current folder).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "pipeline/bench/harness.hpp"
#include "engine/backend/backend.hpp"
#include "engine/models/random_checkpoint.hpp"
#include "engine/runtime/engine.hpp"
#include "bench/common/machine_info.hpp"

namespace fs = std::filesystem;
using namespace quarry::engine;
using quarry::bench::median;
using quarry::bench::cpu_model;
using quarry::bench::git_commit;

namespace {

}  // namespace

int main(int argc, char** argv) {
  std::string preset = "qwen3-0.6b", dtype_s = "bf16", device = "cpu";
  std::size_t threads = 2, prefill_tokens = 32, decode_tokens = 16, runs = 3;
  fs::path work = fs::path(QUARRY_BINARY_DIR) / "bench_work", out_dir = ".";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--preset") preset = v;
    else if (a == "--dtype") dtype_s = v;
    else if (a == "--threads") threads = std::stoul(v);
    else if (a == "--device") device = v;
    else if (a == "--prefill-tokens") prefill_tokens = std::stoul(v);
    else if (a == "--decode-tokens") decode_tokens = std::stoul(v);
    else if (a == "--runs") runs = std::stoul(v);
    else if (a == "--work") work = v;
    else if (a == "--out") out_dir = v;
    else {
      std::cerr << "unknown option " << a << "\n";
      return 1;
    }
  }
  const DType dtype = dtype_s == "f32" ? DType::f32 : dtype_s == "f16" ? DType::f16 : DType::bf16;
  const fs::path model_dir = work / (preset + "-" + dtype_s + "-random");
  if (!fs::exists(model_dir / "model.safetensors")) {
    std::cerr << "writing " << model_dir << " ...\n";
    write_random_checkpoint(preset_config_json(preset), model_dir, dtype, 1);
  }

  const auto probe = make_backend({parse_device(device), threads});
  std::cerr << "measuring memory bandwidth on " << probe->description() << " ...\n";
  std::vector<double> bw_runs = probe->probe_bandwidth_gb_s(std::size_t{1} << 30, 5);
  std::cerr << "  best " << *std::max_element(bw_runs.begin(), bw_runs.end()) << " GB/s\nmeasuring gemm ...\n";
  const std::size_t gm = 256, gk = 1024, gn = 1024;
  const double gemm_flops = median(probe->probe_matmul_gflops(gm, gk, gn, dtype, Compute::automatic, 3)) * 1e9;
  std::cerr << "  " << gemm_flops / 1e9 << " GFLOP/s\n";

  EngineOptions opt;
  opt.n_threads = threads;
  opt.device = parse_device(device);
  opt.max_kv_tokens = prefill_tokens + decode_tokens + 64;
  opt.max_batch_tokens = std::max<std::size_t>(prefill_tokens, 1);
  auto engine = Engine::open(model_dir, nullptr, opt);
  const auto& cfg = engine->model().config();

  // Linear-layer parameters (FLOPs per token = 2 x this + attention) and attention FLOPs per token.
  const std::size_t H = cfg.hidden_size, D = cfg.head_dim, I = cfg.intermediate_size, L = cfg.num_hidden_layers;
  const double linear_params = static_cast<double>(L) *
      (static_cast<double>(H) * D * (2 * cfg.num_attention_heads + 2 * cfg.num_key_value_heads) + 3.0 * H * I);
  auto prefill_flops = [&](std::size_t p) {  // whole prompt: linear + causal attention + one LM-head row
    const double attn = 4.0 * L * cfg.num_attention_heads * D * (static_cast<double>(p) * (p + 1) / 2);
    return 2.0 * linear_params * p + attn + 2.0 * static_cast<double>(H) * cfg.vocab_size;
  };

  std::vector<double> prefill_tok_s, decode_tok_s, decode_gb_s, ttft;
  for (std::size_t r = 0; r <= runs; ++r) {
    GenerationRequest req;
    for (std::size_t i = 0; i < prefill_tokens; ++i) req.prompt.push_back(static_cast<TokenId>((i * 7919 + r) % 150000));
    req.max_tokens = decode_tokens + 1;  // the first token comes from prefill
    req.ignore_eos = true;
    const EngineStats before = engine->stats();
    auto res = engine->generate(req);
    const EngineStats& after = engine->stats();
    const double dec_s = after.decode_s - before.decode_s;
    const double dec_tok = static_cast<double>(after.decode_tokens - before.decode_tokens);
    const double dec_bytes = static_cast<double>(after.decode_bytes - before.decode_bytes);
    const double pre_s = after.prefill_s - before.prefill_s;
    std::cerr << (r == 0 ? "warm-up" : "run " + std::to_string(r)) << ": prefill " << prefill_tokens / pre_s
              << " tok/s, decode " << dec_tok / dec_s << " tok/s, " << dec_bytes / dec_s / 1e9 << " GB/s\n";
    if (r == 0) continue;
    prefill_tok_s.push_back(static_cast<double>(prefill_tokens) / pre_s);
    ttft.push_back(res.stats.ttft_s);
    decode_tok_s.push_back(dec_tok / dec_s);
    decode_gb_s.push_back(dec_bytes / dec_s / 1e9);
  }
  // Bandwidth again after the engine runs (shared machines drift); the roofline uses the best run of
  // all (STREAM convention: the best is what the machine can do), the median is reported beside it.
  {
    auto more = probe->probe_bandwidth_gb_s(std::size_t{1} << 30, 5);
    bw_runs.insert(bw_runs.end(), more.begin(), more.end());
  }
  const double bw_gb_s = *std::max_element(bw_runs.begin(), bw_runs.end());
  const double bw_median = median(bw_runs);
  const double weight_bytes = static_cast<double>(engine->model().weight_bytes_per_step());
  const double kv_bytes_mid = static_cast<double>(prefill_tokens + decode_tokens / 2) *
                              static_cast<double>(engine->kv_cache().bytes_per_token());
  const double bytes_per_token = weight_bytes + kv_bytes_mid;
  const double roofline_tok_s = bw_gb_s * 1e9 / bytes_per_token;
  const double dec = median(decode_tok_s), pre = median(prefill_tok_s);
  const double pre_flops = prefill_flops(prefill_tokens) * pre / static_cast<double>(prefill_tokens);

  nlohmann::ordered_json j;
  j["bench"] = "engine";
  j["machine"] = {{"cpu", cpu_model()}, {"hardware_threads", std::thread::hardware_concurrency()}};
  j["commit"] = git_commit();
  j["model"] = {{"preset", preset}, {"dtype", dtype_s}, {"weights", "random"}, {"layers", L}, {"hidden_size", H},
                {"vocab_size", cfg.vocab_size}, {"weight_bytes_per_step", weight_bytes}};
  j["threads"] = threads;
  j["device"] = engine->backend().description();
  j["runs"] = runs;
  j["memory_bandwidth_gb_s"] = {{"best", bw_gb_s}, {"median", bw_median}, {"runs", bw_runs.size()},
                                 {"method", "multi-threaded sequential read of 1 GiB, before and after the engine runs"}};
  j["gemm_gflop_s"] = {{"value", gemm_flops / 1e9}, {"m", gm}, {"k", gk}, {"n", gn}, {"weights", dtype_s}};
  j["prefill"] = {{"tokens", prefill_tokens}, {"tok_s_median", pre}, {"ttft_s_median", median(ttft)},
                  {"achieved_gflop_s", pre_flops / 1e9}, {"fraction_of_gemm_peak", pre_flops / gemm_flops}};
  j["decode"] = {{"batch", 1}, {"tokens", decode_tokens}, {"tok_s_median", dec},
                 {"achieved_gb_s_median", median(decode_gb_s)}, {"bytes_per_token", bytes_per_token},
                 {"roofline_tok_s", roofline_tok_s}, {"fraction_of_roofline", dec / roofline_tok_s}};
  fs::create_directories(out_dir);
  std::ofstream(out_dir / "bench_engine.json") << j.dump(2) << "\n";

  char md[2048];
  std::snprintf(md, sizeof md,
                "# bench_engine (%s, %s, random weights)\n\n"
                "CPU: %s; threads %zu; gemm kernel %s; commit %s; median of %zu runs after 1 warm-up.\n\n"
                "| measure | value | machine limit | fraction |\n| --- | --- | --- | --- |\n"
                "| decode, batch 1 | %.2f tok/s, %.2f GB/s | %.2f tok/s (best read bandwidth %.2f GB/s, median %.2f; %.1f MB/token) | %.1f%% |\n"
                "| prefill, %zu tokens | %.1f tok/s, %.2f GFLOP/s, TTFT %.2f s | %.2f GFLOP/s (gemm %zux%zux%zu) | %.1f%% |\n",
                preset.c_str(), dtype_s.c_str(), cpu_model().c_str(), threads, engine->backend().description().c_str(),
                git_commit().c_str(), runs, dec, median(decode_gb_s), roofline_tok_s, bw_gb_s, bw_median, bytes_per_token / 1e6,
                100.0 * dec / roofline_tok_s, prefill_tokens, pre, pre_flops / 1e9, median(ttft), gemm_flops / 1e9, gm,
                gk, gn, 100.0 * pre_flops / gemm_flops);
  std::ofstream(out_dir / "bench_engine.md") << md;
  std::cout << md;
  return 0;
}
