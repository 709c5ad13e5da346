// The harness behind `quarry bench`: the seed workloads (qa, code, json-kie, hungarian, long-rag-8k,
// long-rag-32k), a concurrency sweep, llama-bench style pp/tg at a context depth, and the roofline of
// the machine they ran on, written as report.json, report.md and SVG plots (docs/benchmarks.md).
//
//   BenchOptions o;
//   o.models = {"models/quarry-extract-11m"};
//   o.samples_dir = "samples";  o.invoice_schema = "schemas/invoice.schema.json";
//   nlohmann::ordered_json report = run_bench(o, [](std::string_view m) { std::cerr << m << "\n"; });
//   write_report(report, "bench-out");   // report.json, report.md, *.svg
//
// Method (the seed's, BENCH.md): greedy decoding, thinking off; per workload 1 warm-up run + `runs`
// measured runs of the same prompt, medians reported. TTFT cold is the warm-up run's (the first time
// the engine sees the prompt), TTFT warm the median of the measured runs (the same prompt again: a
// prefix-cache hit where the engine has one). Decode tok/s = (output tokens - 1) / (time of the last
// token - time of the first), as llama-benchy and vLLM's benchmark count it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace quarry::bench {

/// A random-weight checkpoint to write and benchmark next to the given models: the widths of a
/// preset of engine/models/random_checkpoint.hpp ("qwen3-0.6b", "qwen3-4b", "tiny") with
/// `layers` decoder layers (0: the preset's own count).
struct RandomModelSpec {
  std::string preset = "qwen3-0.6b";
  std::size_t layers = 0;
  std::string dtype = "bf16";  ///< bf16, f16 or f32
  std::uint64_t seed = 1;
};

/// Parses "PRESET[:LAYERS]" (e.g. "qwen3-0.6b:1"). Throws std::invalid_argument on a bad spec.
RandomModelSpec parse_random_model_spec(std::string_view spec);

struct BenchOptions {
  /// Model folders (config.json, safetensors, tokenizer.json), benchmarked one after the other.
  std::vector<std::filesystem::path> models;
  /// Random-weight checkpoints to write under `work_dir` and benchmark after `models`. They get the
  /// tokenizer files of models[0] (its ids are valid in a larger vocabulary), so they need models[0].
  std::vector<RandomModelSpec> random_models;
  /// Workloads the random checkpoints run (they exist for contexts the models cannot hold).
  std::vector<std::string> random_model_workloads = {"long-rag-8k", "long-rag-32k"};
  /// Where random checkpoints are written (reused when present with the same config).
  std::filesystem::path work_dir = "bench-work";

  /// Workloads (names of workload_names()); empty: none. A workload whose prompt + output does not
  /// fit a model's max_position_embeddings is recorded as skipped for that model, with the reason.
  std::vector<std::string> workloads;
  /// Multiplies the context of long-rag-* (7,500 and 30,000 tokens in the seed); 1 = seed sizes.
  double context_scale = 1.0;
  /// Multiplies every workload's output length (256 / 300 tokens in the seed); 1 = seed sizes.
  double output_scale = 1.0;
  std::size_t runs = 3;  ///< measured runs per workload (after 1 warm-up)
  std::uint64_t seed = 1;  ///< picks the questions (qa, long-rag) and the invoice (json-kie)

  /// Concurrency sweep: levels (e.g. 1, 2, 4) of requests submitted together, each request one of the
  /// short workloads (qa, code, json-kie, hungarian) in turn; empty: no sweep. Runs on models[0].
  std::vector<std::size_t> concurrency;

  /// llama-bench style sweep (all combinations); empty pp or tg: no sweep. Runs on every model
  /// (random checkpoints included), skipping combinations longer than the model's positions.
  std::vector<std::size_t> pp, tg, depth = {0};

  /// MTP draft depth to request (0: none). Recorded; drafting figures appear only when the engine
  /// reports them.
  std::size_t mtp = 0;

  /// Engine prefix caching (EngineOptions::enable_prefix_caching): on, warm runs reuse the prompt's
  /// cached blocks (TTFT warm); off, every run recomputes the whole prompt.
  bool prefix_caching = true;

  std::size_t threads = 0;  ///< engine and probe threads (CPU); 0: all hardware threads
  std::string device = "cpu";    ///< EngineOptions::device: cpu | cuda | cuda:N (the probes run there too)
  std::string compute = "auto";  ///< EngineOptions::compute: auto | exact | bf16 (recorded per model)
  /// EngineOptions::grammar_lm_head: the LM head computed only where the grammar allows ids (on) or
  /// in full (off, the baseline of a comparison).
  bool grammar_lm_head = true;
  std::size_t max_batch_tokens = 0;  ///< engine tokens per forward call; 0: the engine's default
  std::size_t bandwidth_mib = 512;  ///< buffer of the memory-bandwidth probe

  std::filesystem::path samples_dir;     ///< the project's samples/ (questions, invoices, long/)
  std::filesystem::path invoice_schema;  ///< schemas/invoice.schema.json (json-kie is constrained by it)
  std::string commit;  ///< source revision recorded in the report ("" = unknown)
  std::string preset_name;  ///< how the options were chosen (e.g. "quick"), recorded in the report
  std::string scaling_note;  ///< why they were scaled, recorded in the report
};

/// The workloads run_bench knows, in report order.
const std::vector<std::string>& workload_names();

/// Runs the benchmark; `log` gets one-line progress messages. Returns the report (schema in
/// docs/benchmarks.md): machine, commit, options, roofline, per model its workloads, concurrency and
/// pp/tg results. Throws std::runtime_error naming the file when a model, the samples or the schema
/// cannot be read, std::invalid_argument on an unknown workload.
nlohmann::ordered_json run_bench(const BenchOptions& options, const std::function<void(std::string_view)>& log);

/// Writes `out_dir`/report.json, report.md and the SVG plots of `report` (decode tok/s by workload,
/// tok/s by concurrency, acceptance by draft position when there are drafting figures). Returns the
/// paths written. Throws std::runtime_error naming the file on a write error.
std::vector<std::filesystem::path> write_report(const nlohmann::ordered_json& report,
                                                const std::filesystem::path& out_dir);

/// The Markdown tables of a report (what report.md holds).
std::string report_markdown(const nlohmann::ordered_json& report);

/// Statistics used by the report: median; percentile with linear interpolation between closest ranks
/// (numpy's default, q in [0, 100]); mean and sample standard deviation. Empty input gives 0.
double median(std::vector<double> v);
double percentile(std::vector<double> v, double q);
double mean(const std::vector<double>& v);
double stddev(const std::vector<double>& v);

}  // namespace quarry::bench
