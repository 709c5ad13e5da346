// `quarry bench`: the seed workloads, a concurrency sweep and llama-bench style pp/tg at a context
// depth, with the machine's roofline, written to report.json, report.md and SVG plots
// (pipeline/bench/harness.hpp; docs/benchmarks.md explains every figure).
//
//   quarry bench                                   # preset "quick": all workloads, default model +
//                                                  # a random-weight Qwen3-0.6B-shaped checkpoint
//   quarry bench --model DIR --workloads qa,json-kie --concurrency 1,2,4 -o out
//   quarry bench --pp 512,2048 --tg 32,128 --depth 0,2048,8192
//
// Exit codes: 0 report written; 1 usage error, or a model / sample / output folder that cannot be used.
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "pipeline/bench/harness.hpp"
#include "pipeline/cli/commands.hpp"
#include "pipeline/paths.hpp"

namespace quarry::cli {

namespace {

namespace fs = std::filesystem;

struct BenchArgs {
  std::vector<std::string> models, random_models;
  std::string workloads, concurrency, pp, tg, depth, out = "bench-report", preset = "quick", work, compute = "auto";
  std::string device = "auto";
  std::size_t mtp = 0, runs = 3, threads = 0, bandwidth_mib = 512, max_batch_tokens = 0;
  double context_scale = -1, output_scale = -1;
  std::uint64_t seed = 1;
  bool no_prefix_cache = false;
  bool full_lm_head = false;
};

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::vector<std::size_t> split_sizes(const std::string& s, const char* option) {
  std::vector<std::size_t> out;
  for (const auto& item : split_list(s)) {
    std::size_t used = 0;
    unsigned long long v = 0;
    try {
      v = std::stoull(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || item[0] == '-')
      throw std::runtime_error(std::string(option) + ": \"" + item + "\" is not a non-negative whole number");
    out.push_back(static_cast<std::size_t>(v));
  }
  return out;
}

std::string git_commit(const fs::path& root) {
  const std::string cmd = "git -C '" + root.string() + "' describe --always --dirty --abbrev=12 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return "";
  char buf[128] = {};
  std::string s = fgets(buf, sizeof buf, p) ? buf : "";
  pclose(p);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

fs::path default_work_dir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return fs::path(x) / "quarry" / "bench";
  if (const char* h = std::getenv("HOME"); h && *h) return fs::path(h) / ".cache" / "quarry" / "bench";
  return fs::temp_directory_path() / "quarry-bench";
}

int run_bench_command(const BenchArgs& a) {
  bench::BenchOptions o;
  const fs::path root = quarry::project_root();
  for (const auto& m : a.models) o.models.emplace_back(m);
  if (o.models.empty()) {
    const fs::path def = quarry::default_model_dir();
    if (!fs::is_directory(def))
      throw std::runtime_error(def.string() + ": default model folder not found (give --model DIR or set QUARRY_HOME)");
    o.models.push_back(def);
  }
  const bool sweep_mode = !a.pp.empty() || !a.tg.empty();
  const bool workload_mode = !a.workloads.empty() || !sweep_mode;

  // Presets: "quick" fits the whole run (default model + random Qwen3-0.6B-shaped checkpoint) in
  // 15 minutes on a 2-core machine; "seed" uses the seed's sizes unchanged (docs/benchmarks.md).
  std::vector<std::string> random_default;
  if (a.preset == "quick") {
    o.context_scale = 0.25;
    o.output_scale = 1.0;
    random_default = {"qwen3-0.6b:1"};
    o.scaling_note =
        "long-rag contexts x0.25 (~1,875 and ~7,500 prompt tokens instead of 7,500 and 30,000) and the random "
        "Qwen3-0.6B-shaped checkpoint cut to 1 of its 28 layers (widths, vocabulary and LM head kept): the CPU "
        "attention is O(n^2) per layer, so a 30,000-token prefill of one Qwen3-0.6B layer alone is ~3.7 TFLOP, "
        "far beyond a 15-minute run on 2 cores; outputs keep the seed's lengths";
  } else if (a.preset == "seed") {
    o.context_scale = 1.0;
    o.output_scale = 1.0;
    random_default = {"qwen3-0.6b"};
    o.scaling_note = "the seed's sizes: 7,500- and 30,000-token long-rag prompts, full 28-layer Qwen3-0.6B shape";
  } else {
    throw std::runtime_error("--preset: expected quick or seed, got \"" + a.preset + "\"");
  }
  o.preset_name = a.preset;
  if (a.context_scale >= 0) o.context_scale = a.context_scale;
  if (a.output_scale >= 0) o.output_scale = a.output_scale;
  if (a.context_scale >= 0 || a.output_scale >= 0) o.scaling_note += " (scales overridden on the command line)";
  if (!(o.context_scale > 0) || !(o.output_scale > 0))
    throw std::runtime_error("--context-scale and --output-scale must be positive");

  if (workload_mode) {
    o.workloads = a.workloads.empty() ? bench::workload_names() : split_list(a.workloads);
    if (a.concurrency != "none")
      o.concurrency = split_sizes(a.concurrency.empty() ? "1,2,4" : a.concurrency, "--concurrency");
  } else if (a.concurrency != "none") {
    o.concurrency = split_sizes(a.concurrency, "--concurrency");
  }
  for (std::size_t c : o.concurrency)
    if (c == 0 || c > 256) throw std::runtime_error("--concurrency: levels must be in 1..256");
  std::vector<std::string> random = a.random_models;
  if (random.empty() && workload_mode && a.models.empty()) random = random_default;
  for (const auto& r : random)
    if (r != "none") o.random_models.push_back(bench::parse_random_model_spec(r));
  if (sweep_mode) {
    o.pp = split_sizes(a.pp.empty() ? "512" : a.pp, "--pp");
    o.tg = split_sizes(a.tg.empty() ? "32" : a.tg, "--tg");
    o.depth = split_sizes(a.depth.empty() ? "0" : a.depth, "--depth");
    for (std::size_t v : o.pp)
      if (v == 0) throw std::runtime_error("--pp: prompt lengths must be at least 1");
  }
  if (a.runs == 0) throw std::runtime_error("--runs must be at least 1");
  o.runs = a.runs;
  o.mtp = a.mtp;
  o.compute = a.compute;
  o.device = a.device;
  o.prefix_caching = !a.no_prefix_cache;
  o.grammar_lm_head = !a.full_lm_head;
  o.threads = a.threads;
  o.max_batch_tokens = a.max_batch_tokens;
  o.bandwidth_mib = a.bandwidth_mib;
  o.seed = a.seed;
  o.work_dir = a.work.empty() ? default_work_dir() : fs::path(a.work);
  o.samples_dir = root / "samples";
  o.invoice_schema = root / "schemas" / "invoice.schema.json";
  o.commit = git_commit(root);

  const auto report = bench::run_bench(o, [](std::string_view m) { spdlog::info("{}", m); });
  for (const auto& p : bench::write_report(report, a.out)) spdlog::info("wrote {}", p.string());
  std::fputs(bench::report_markdown(report).c_str(), stdout);
  return 0;
}

}  // namespace

void add_bench_command(CLI::App& app, Context& ctx) {
  auto a = std::make_shared<BenchArgs>();
  auto* sub = app.add_subcommand("bench", "Measure the engine on the seed workloads (report.json, report.md, SVG plots)");
  sub->add_option("--model", a->models, "Model folder (repeatable); default: models/quarry-extract-11m")
      ->check(CLI::ExistingDirectory);
  sub->add_option("--random-model", a->random_models,
                  "Random-weight checkpoint PRESET[:LAYERS] also run (long-rag workloads and pp/tg), e.g. "
                  "qwen3-0.6b:1; 'none' for none. Default with no --model: the preset's");
  sub->add_option("--workloads", a->workloads,
                  "Comma-separated: qa,code,json-kie,hungarian,long-rag-8k,long-rag-32k (default: all, unless only "
                  "--pp/--tg are given)");
  sub->add_option("--mtp", a->mtp, "MTP draft depth (0: off)")->capture_default_str();
  sub->add_option("--compute", a->compute,
                  "auto (the checkpoint's dtype: bf16 on AMX tiles for a bf16 checkpoint where available), exact (f32) or bf16")
      ->check(CLI::IsMember({"auto", "exact", "bf16"}))
      ->capture_default_str();
  sub->add_option("--concurrency", a->concurrency, "Concurrency levels, e.g. 1,2,4, or none (default 1,2,4 with workloads)");
  sub->add_option("--pp", a->pp, "llama-bench style prompt lengths, e.g. 512,2048");
  sub->add_option("--tg", a->tg, "llama-bench style generation lengths, e.g. 32,128");
  sub->add_option("--depth", a->depth, "Context depths for --pp/--tg, e.g. 0,2048,8192 (default 0)");
  sub->add_option("-o,--out", a->out, "Output folder")->capture_default_str();
  sub->add_option("--preset", a->preset, "quick (fits 15 minutes on 2 cores) or seed (the seed's sizes)")
      ->capture_default_str();
  sub->add_option("--runs", a->runs, "Measured runs per test (after 1 warm-up)")->capture_default_str();
  sub->add_option("--context-scale", a->context_scale, "Multiplier of the long-rag prompt lengths (overrides the preset)");
  sub->add_option("--output-scale", a->output_scale, "Multiplier of the output lengths (overrides the preset)");
  sub->add_option("--threads", a->threads, "Threads (0: all hardware threads)")->capture_default_str();
  sub->add_option("--device", a->device, "cpu, cuda, cuda:N, or auto (the first GPU if any, else the CPU)")
      ->capture_default_str();
  sub->add_option("--max-batch-tokens", a->max_batch_tokens,
                  "Engine tokens per forward call (0: engine default, 256 on the CPU, 2048 on a GPU)");
  sub->add_option("--bandwidth-mib", a->bandwidth_mib, "Buffer of the memory-bandwidth probe, MiB")
      ->capture_default_str()
      ->check(CLI::Range(1, 65536));
  sub->add_flag("--no-prefix-cache", a->no_prefix_cache,
                "Turn the engine's prefix cache off (every run recomputes its whole prompt)");
  sub->add_flag("--full-lm-head", a->full_lm_head,
                "Compute every logit also where the grammar allows few tokens (the baseline of the grammar-restricted LM head)");
  sub->add_option("--seed", a->seed, "Picks the questions and the invoice")->capture_default_str();
  sub->add_option("--work", a->work, "Folder for random-weight checkpoints (default: ~/.cache/quarry/bench)");
  sub->callback([a, &ctx] { ctx.exit_code = run_bench_command(*a); });
}

}  // namespace quarry::cli
