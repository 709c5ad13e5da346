// bench_engine: the engine alone on one device (CPU or CUDA) with a random-weight checkpoint of a published
// Qwen3 shape (written at bench time into --work, not committed), next to what the device can do,
// measured in the same run (llama-bench's pp / tg, plus what the seeds ask for):
//   * roofline: Backend::probe_bandwidth_gb_s (CPU: multi-threaded streaming read; GPU: device copy,
//     bytes read + written) before and after the runs, best used; Backend::probe_matmul_gflops of a
//     prefill-sized product in the model's dtype and compute mode;
//   * tg: batch-1 decode of --tg tokens after a --depth-token prompt: tok/s and achieved GB/s (weights +
//     KV bytes read per step / time) as a fraction of the bandwidth;
//   * pp: prefill of --pp prompt lengths (one forward call each when --batch-tokens allows): tok/s and
//     GFLOP/s (2 x linear parameters + causal attention per token) against the measured matmul rate;
//   * concurrency: --concurrency levels of requests decoding together (continuous batching): aggregate
//     decode tok/s and its ratio to batch 1;
//   * ttft: a --ttft-token prompt cold, then the same document with another question (prefix cache).
// Every figure: median of --runs runs after one warm-up.
// With --kie MODEL_DIR instead: json-kie (the sample text invoices -> JSON by schemas/invoice.schema.json,
// constrained, greedy, one request at a time) with the model's MTP drafting at --mtp depth against none:
// decode tok/s of each, acceptance, and whether the outputs are identical (lossless); and the grammar's
// cost: the same prompts unconstrained, each decoding as many tokens as its constrained output.
//
// Usage: bench_engine [--device cpu|cuda] [--preset qwen3-0.6b|...|qwen3.5-122b-a10b] [--layers N] [--dtype bf16]
//                     [--compute auto|exact|bf16] [--threads N] [--tg 128] [--depth 16] [--pp 512,2048]
//                     [--concurrency 1,4,16,64] [--ttft 32768] [--batch-tokens 2048] [--runs 3]
//                     [--greedy-on-backend auto|on|off] [--eager on|off] [--work DIR] [--out DIR]
//                     [--sampling T[,top_k[,top_p[,min_p]]]] [--sample-on-backend auto|on|off]
//                     (--sampling: the decode requests sample, seeded, instead of greedy; with
//                     --sample-on-backend off their rows are sampled on the host from downloaded logits)
//                     (--eager on: no decode step recorded and replayed, EngineOptions::enforce_eager)
//        bench_engine --kie models/quarry-extract-11m [--device cuda] [--mtp 4] [--runs 3] [--out DIR]
//        bench_engine --quant int8,int4,fp8 [--preset qwen3-8b --layers 2] [--tg 32] [--pp 128] [--runs 3]
//                     [--concurrency 4]
//                     (quantized copies of the checkpoint against it in the same run: decode tok/s, GB/s,
//                     speed-up against the ratio of weight bytes read per step, prefill, and the aggregate
//                     decode of the largest --concurrency level above 1: steps of several rows, as MTP
//                     verification has; bench_quant.{json,md})
//        bench_engine --tp 1,2 [--device cuda] [--preset qwen3-8b] [--tg 128] [--pp 512] [--runs 3]
//                     (the checkpoint split over 1, 2, ... devices, all open at once, runs alternating: batch-1
//                     decode tok/s and prefill tok/s with their ratio to TP 1, and the all-reduce of one
//                     decode row timed alone, times two per layer; bench_tp.{json,md})
//        bench_engine --perplexity MODEL_DIR --texts DIR [--ctx 512] [--quant int8,int4,fp8] [--device cpu]
//                     (the model and its quantized copies over DIR's examples, *.jsonl {"prompt", "target"}
//                     with the targets scored, or *.txt scored whole: perplexity, its ratio to the float
//                     model's, and how often their most likely tokens agree; bench_perplexity.{json,md})
// Writes OUT/bench_engine.json and OUT/bench_engine.md.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/common/machine_info.hpp"
#include "bench/common/options.hpp"
#include "engine/backend/backend.hpp"
#include "engine/backend/collective.hpp"
#include "engine/models/model.hpp"
#include "engine/models/quantize.hpp"
#include "engine/models/random_checkpoint.hpp"
#include "engine/runtime/engine.hpp"
#include "engine/tokenizer/tokenizer.hpp"

namespace fs = std::filesystem;
using namespace quarry::engine;
using json = nlohmann::ordered_json;

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// The comma-separated items of s (empty items skipped).
std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

std::vector<std::size_t> parse_list(const std::string& s) {
  std::vector<std::size_t> out;
  for (const auto& item : split_commas(s)) out.push_back(std::stoul(item));
  return out;
}

EngineOptions::OnBackend parse_on_backend(const std::string& v) {
  if (v == "auto") return EngineOptions::OnBackend::automatic;
  if (v == "on") return EngineOptions::OnBackend::on;
  if (v == "off") return EngineOptions::OnBackend::off;
  throw std::invalid_argument("takes auto, on or off");
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// A prompt of n token ids from a deterministic stream (ids below the vocabulary, avoiding the top of it
/// where the special tokens live).
std::vector<TokenId> prompt(std::size_t n, std::uint64_t salt, std::size_t vocab) {
  std::vector<TokenId> p(n);
  std::uint64_t x = 0x9e3779b97f4a7c15ULL * (salt + 1);
  for (auto& t : p) {
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    t = static_cast<TokenId>((x * 2685821657736338717ULL >> 33) % (vocab - 512));
  }
  return p;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error(p.string() + ": cannot read");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct Options {
  std::string device = "cpu", preset = "qwen3-0.6b", dtype = "bf16", compute = "auto";
  fs::path kie;
  std::size_t mtp = 4;
  std::size_t layers = 0, threads = 0, tg = 128, depth = 16, ttft = 0, batch_tokens = 2048, runs = 3;
  std::vector<std::size_t> pp = {512}, concurrency = {1, 4};
  fs::path work = fs::path(QUARRY_BINARY_DIR) / "bench_work", out = ".";
  std::vector<std::string> quant;  ///< --quant int8,int4,fp8: quantized copies against the float model
  std::vector<std::size_t> tp;      ///< --tp 1,2,4: tensor-parallel degrees against each other
  fs::path perplexity, texts;       ///< --perplexity MODEL_DIR --texts DIR
  std::size_t ctx = 512;            ///< --ctx: tokens a perplexity window holds
  /// --greedy-on-backend auto|on|off: EngineOptions::greedy_on_backend (greedy rows' argmax where the
  /// logits are, only the ids downloaded)
  EngineOptions::OnBackend greedy = EngineOptions::OnBackend::automatic;
  /// --sample-on-backend auto|on|off: EngineOptions::sample_on_backend (rows of temperature > 0 drawn
  /// where the logits are, only the ids downloaded)
  EngineOptions::OnBackend sample = EngineOptions::OnBackend::automatic;
  /// --sampling T[,top_k[,top_p[,min_p]]]: the decode requests' sampling (default greedy), seeded
  SamplingParams sampling;
  bool eager = false;  ///< --eager on: EngineOptions::enforce_eager (no recorded decode steps)
};

/// The engine options every measurement here shares: device, threads, compute, greedy sampling.
EngineOptions engine_options(const Options& o) {
  EngineOptions eo;
  eo.device = parse_device(o.device);
  eo.n_threads = o.threads;
  eo.compute = parse_compute(o.compute);
  eo.greedy_on_backend = o.greedy;
  eo.sample_on_backend = o.sample;
  eo.enforce_eager = o.eager;
  return eo;
}

/// One batch-1 decode of o.tg tokens after an o.depth-token prompt, then one prefill of `pp` tokens.
struct TgPp {
  double tg_tok_s = 0, gb_s = 0, pp_tok_s = 0;
  std::size_t replayed = 0, steps = 0;  ///< decode steps replayed from a recording, of all
};
TgPp measure_tg_pp(Engine& e, const Options& o, std::size_t pp, std::uint64_t& salt) {
  const std::size_t V = e.model().config().vocab_size;
  GenerationRequest req;
  req.prompt = prompt(std::max<std::size_t>(o.depth, 1), salt++, V);
  req.max_tokens = o.tg + 1;
  req.ignore_eos = true;
  req.sampling = o.sampling;
  EngineStats before = e.stats();
  e.generate(req);
  EngineStats after = e.stats();
  TgPp m;
  const double s = after.decode_s - before.decode_s;
  m.tg_tok_s = static_cast<double>(after.decode_tokens - before.decode_tokens) / s;
  m.gb_s = static_cast<double>(after.decode_bytes - before.decode_bytes) / s / 1e9;
  m.replayed = after.replayed_steps - before.replayed_steps;
  m.steps = after.decode_steps - before.decode_steps;
  GenerationRequest preq;
  preq.prompt = prompt(pp, salt++, V);
  preq.max_tokens = 1;
  before = e.stats();
  e.generate(preq);
  after = e.stats();
  m.pp_tok_s = static_cast<double>(after.prefill_tokens - before.prefill_tokens) / (after.prefill_s - before.prefill_s);
  return m;
}

/// The fields every bench_engine report starts with (what ran, where, the run's sizes).
json report_header(const std::string& bench, const Engine& e, const std::string& model, const Options& o,
                   std::size_t pp) {
  json rep;
  rep["bench"] = bench;
  rep["commit"] = quarry::bench::git_commit();
  rep["device"] = e.backend().description();
  rep["cpu"] = quarry::bench::cpu_model();
  rep["model"] = model;
  rep["runs"] = o.runs;
  rep["tg"] = o.tg;
  rep["pp"] = pp;
  rep["sampling"] = {{"temperature", o.sampling.temperature}, {"top_k", o.sampling.top_k},
                     {"top_p", o.sampling.top_p}, {"min_p", o.sampling.min_p}};
  return rep;
}

/// `level` requests of a 32-token prompt decoding o.tg tokens together: aggregate tok/s (wall clock).
double aggregate_decode(Engine& e, const Options& o, std::size_t level, std::uint64_t& salt) {
  const std::size_t V = e.model().config().vocab_size;
  std::vector<GenerationRequest> reqs(level);
  for (auto& q : reqs) {
    q.prompt = prompt(32, salt++, V);
    q.max_tokens = o.tg + 1;
    q.ignore_eos = true;
    q.sampling = o.sampling;
    q.sampling.seed = salt;
  }
  const double t0 = now_s();
  e.generate(reqs);
  return static_cast<double>(level * o.tg) / (now_s() - t0);
}

/// Microseconds of one all_reduce_sum of `floats` f32 values over `n` ranks of `device` (a decode row's
/// hidden state), median of 5 batches of 200 after a warm-up, each rank on its own thread;
/// `carrier` gets the collectives' description.
double allreduce_us(const DeviceSpec& device, std::size_t n, std::size_t floats, std::string& carrier) {
  std::vector<std::shared_ptr<Backend>> backends;
  for (std::size_t r = 0; r < n; ++r) {
    DeviceSpec d = device;
    if (d.kind == DeviceSpec::Kind::cuda) d.index += static_cast<int>(r);
    backends.push_back(make_backend({d, 1}));
  }
  auto comms = make_collectives(backends);
  carrier = comms[0]->description();
  std::vector<DeviceBuffer> bufs;
  for (auto& b : backends) {
    b->bind_thread();
    bufs.push_back(b->alloc(floats * sizeof(float)));
    b->fill(bufs.back().as<float>(), floats, 1.0f);
    b->synchronize();
  }
  std::vector<double> batches;
  for (int batch = 0; batch <= 5; ++batch) {
    constexpr int kOps = 200;
    std::vector<std::thread> threads;
    const double t0 = now_s();
    for (std::size_t r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        backends[r]->bind_thread();
        for (int i = 0; i < kOps; ++i) comms[r]->all_reduce_sum(bufs[r].as<float>(), floats);
        backends[r]->synchronize();
      });
    for (auto& t : threads) t.join();
    if (batch > 0) batches.push_back((now_s() - t0) / kOps * 1e6);
  }
  backends[0]->bind_thread();
  return median(batches);
}

/// --tp: the checkpoint split over each degree of o.tp (see the usage above).
int run_tp(const Options& o, const fs::path& model_dir, const std::string& name) {
  const DeviceSpec device = parse_device(o.device);
  const std::size_t pp = o.pp.empty() ? 512 : o.pp[0];
  std::vector<std::unique_ptr<Engine>> engines;
  for (const std::size_t n : o.tp) {
    EngineOptions eo = engine_options(o);
    eo.tensor_parallel = n;
    eo.max_batch_tokens = o.batch_tokens;
    eo.max_kv_tokens = std::max(o.depth + o.tg, pp) + 256;
    const double t0 = now_s();
    engines.push_back(Engine::open(model_dir, nullptr, eo));
    std::cerr << "tp " << n << " loaded in " << now_s() - t0 << " s\n";
  }
  const auto& c = engines[0]->model().config();
  const std::size_t k = engines.size();
  std::vector<std::vector<double>> tg(k), pf(k);
  std::uint64_t salt = 1;
  for (std::size_t r = 0; r <= o.runs; ++r)
    for (std::size_t i = 0; i < k; ++i) {
      const TgPp m = measure_tg_pp(*engines[i], o, pp, salt);
      if (r == 0) continue;
      tg[i].push_back(m.tg_tok_s);
      pf[i].push_back(m.pp_tok_s);
      std::cerr << "tp " << o.tp[i] << " run " << r << ": tg " << m.tg_tok_s << " tok/s (" << m.replayed << " of "
                << m.steps << " decode steps replayed), pp" << pp << " " << m.pp_tok_s << " tok/s\n";
    }
  json rep = report_header("bench_engine --tp", *engines[0], name, o, pp);
  std::ostringstream md;
  md << "# Tensor parallel, " << name << ", " << rep["device"].get<std::string>() << " (and the next devices)\n\n"
     << "| TP | decode tok/s (tg" << o.tg << ") | x TP 1 | prefill tok/s (pp" << pp << ") | x TP 1 | all-reduce of one "
     << "row, us | all-reduce per decode step, ms |\n| --- | --- | --- | --- | --- | --- | --- |\n";
  json rows = json::array();
  std::string carrier;
  for (std::size_t i = 0; i < k; ++i) {
    const double us = o.tp[i] > 1 ? allreduce_us(device, o.tp[i], c.hidden_size, carrier) : 0.0;
    const double step_ms = us * 2.0 * static_cast<double>(c.num_hidden_layers) / 1e3;
    rows.push_back({{"tp", o.tp[i]}, {"decode_tok_s", median(tg[i])}, {"decode_tok_s_runs", tg[i]},
                    {"decode_x_tp1", median(tg[i]) / median(tg[0])}, {"prefill_tok_s", median(pf[i])},
                    {"prefill_tok_s_runs", pf[i]}, {"prefill_x_tp1", median(pf[i]) / median(pf[0])},
                    {"allreduce_row_us", us}, {"allreduce_per_step_ms", step_ms}});
    char line[512];
    std::snprintf(line, sizeof line, "| %zu | %.2f | %.2f | %.1f | %.2f | %.1f | %.3f |\n", o.tp[i], median(tg[i]),
                  median(tg[i]) / median(tg[0]), median(pf[i]), median(pf[i]) / median(pf[0]), us, step_ms);
    md << line;
  }
  rep["rows"] = rows;
  if (!carrier.empty()) {
    rep["collectives"] = carrier;
    md << "\nCollectives: " << carrier << ".\n";
  }
  fs::create_directories(o.out);
  std::ofstream(o.out / "bench_tp.json") << rep.dump(2) << "\n";
  std::ofstream(o.out / "bench_tp.md") << md.str();
  std::cout << md.str();
  return 0;
}

/// --quant: the random checkpoint and copies of it quantized by quantize_checkpoint (every linear layer
/// including the LM head; int8: per channel, int4: GPTQ sym, groups of 128, fp8: 128x128 blocks), all
/// open at once, runs alternating between them: batch-1 decode tok/s and GB/s (weights per step / time),
/// and prefill tok/s of the first --pp length; speed-up over the float model against the ratio of bytes
/// read per step.
/// (label, folder) of the float model `model_dir` (labelled `base`) and of its copies quantized by
/// quantize_checkpoint into o.work (every linear layer including the LM head; int8: per channel, int4:
/// GPTQ sym, groups of 128, fp8: 128x128 blocks), written once and reused.
std::vector<std::pair<std::string, fs::path>> with_quantized_copies(const Options& o, const fs::path& model_dir,
                                                                    const std::string& name, const std::string& base) {
  std::vector<std::pair<std::string, fs::path>> models = {{base, model_dir}};
  for (const auto& q : o.quant) {
    const fs::path dir = o.work / (name + "-" + q);
    if (!fs::exists(dir / "model.safetensors") && !fs::exists(dir / "model.safetensors.index.json")) {
      QuantizeOptions qo;
      qo.method = q == "int4" ? "int4-gptq" : q;
      qo.group_size = q == "int4" ? 128 : 0;
      qo.keep = {};
      std::cerr << "quantizing " << dir << " ...\n";
      const double t0 = now_s();
      quantize_checkpoint(model_dir, dir, qo);
      std::cerr << "  " << now_s() - t0 << " s\n";
    }
    models.emplace_back(q, dir);
  }
  return models;
}

int run_quant(const Options& o, const fs::path& model_dir, const std::string& name) {
  const auto models = with_quantized_copies(o, model_dir, name, o.dtype);
  EngineOptions eo = engine_options(o);
  eo.max_batch_tokens = o.batch_tokens;
  const std::size_t pp = o.pp.empty() ? 128 : o.pp[0];
  const std::size_t level = o.concurrency.empty() ? 1 : *std::max_element(o.concurrency.begin(), o.concurrency.end());
  eo.max_kv_tokens = std::max(o.depth + o.tg, pp) + 256 + level * (32 + o.tg + 32);
  std::vector<std::unique_ptr<Engine>> engines;
  for (const auto& [q, dir] : models) engines.push_back(Engine::open(dir, nullptr, eo));
  const std::size_t n = models.size();
  // Several sequences decoding together (the largest --concurrency level, when above 1): steps of that
  // many rows, as a verify step of speculative decoding has.
  std::vector<std::vector<double>> tg(n), gb(n), pf(n), agg(n);
  std::uint64_t salt = 1;
  for (std::size_t r = 0; r <= o.runs; ++r) {
    for (std::size_t i = 0; i < n; ++i) {
      const TgPp m = measure_tg_pp(*engines[i], o, pp, salt);
      const double a = level > 1 ? aggregate_decode(*engines[i], o, level, salt) : 0.0;
      if (r == 0) continue;
      tg[i].push_back(m.tg_tok_s);
      gb[i].push_back(m.gb_s);
      pf[i].push_back(m.pp_tok_s);
      agg[i].push_back(a);
      std::cerr << models[i].first << " run " << r << ": tg " << m.tg_tok_s << " tok/s, pp" << pp << " " << m.pp_tok_s
                << " tok/s";
      if (level > 1) std::cerr << ", " << level << " sequences " << a << " tok/s";
      std::cerr << "\n";
    }
  }
  json rep = report_header("bench_engine --quant", *engines[0], name, o, pp);
  const double base_bytes = static_cast<double>(engines[0]->model().weight_bytes_per_step());
  const double base_tg = median(tg[0]), base_pp = median(pf[0]);
  std::ostringstream md;
  md << "# Quantized decode and prefill, " << name << ", " << rep["device"].get<std::string>() << "\n\n"
     << "| weights | compute | weight bytes / step | decode tok/s | GB/s | x " << o.dtype << " | bytes ratio | "
        "x / bytes ratio | prefill tok/s (pp" << pp << ") | x " << o.dtype << " |";
  if (level > 1) md << " " << level << " sequences, aggregate tok/s | x " << o.dtype << " |";
  md << "\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |" << (level > 1 ? " --- | --- |" : "") << "\n";
  json rows = json::array();
  for (std::size_t i = 0; i < n; ++i) {
    const double bytes = static_cast<double>(engines[i]->model().weight_bytes_per_step());
    const double speed = median(tg[i]) / base_tg, ratio = base_bytes / bytes;
    rows.push_back({{"weights", models[i].first}, {"compute", compute_name(engines[i]->model().compute())},
                    {"weight_bytes_per_step", bytes}, {"decode_tok_s", median(tg[i])}, {"decode_tok_s_runs", tg[i]},
                    {"achieved_gb_s", median(gb[i])}, {"decode_x_base", speed}, {"bytes_ratio", ratio},
                    {"speedup_over_bytes_ratio", speed / ratio}, {"prefill_tok_s", median(pf[i])},
                    {"prefill_tok_s_runs", pf[i]}, {"prefill_x_base", median(pf[i]) / base_pp}});
    if (level > 1) {
      rows.back()["sequences"] = level;
      rows.back()["aggregate_tok_s"] = median(agg[i]);
      rows.back()["aggregate_tok_s_runs"] = agg[i];
      rows.back()["aggregate_x_base"] = median(agg[i]) / median(agg[0]);
    }
    char line[512];
    std::snprintf(line, sizeof line, "| %s | %s | %.0f MB | %.2f | %.1f | %.2f | %.2f | %.2f | %.1f | %.2f |",
                  models[i].first.c_str(), compute_name(engines[i]->model().compute()), bytes / 1e6, median(tg[i]),
                  median(gb[i]), speed, ratio, speed / ratio, median(pf[i]), median(pf[i]) / base_pp);
    md << line;
    if (level > 1) {
      std::snprintf(line, sizeof line, " %.2f | %.2f |", median(agg[i]), median(agg[i]) / median(agg[0]));
      md << line;
    }
    md << "\n";
  }
  rep["rows"] = rows;
  fs::create_directories(o.out);
  std::ofstream(o.out / "bench_quant.json") << rep.dump(2) << "\n";
  std::ofstream(o.out / "bench_quant.md") << md.str();
  std::cout << md.str();
  return 0;
}

/// --perplexity: the model and its quantized copies (--quant) over the texts of --texts: each line of a
/// *.jsonl file is one example {"prompt", "target"} (tokenized apart and joined, as training does) of which
/// the target's tokens are scored, each given everything before it (an example longer than --ctx
/// tokens is skipped and counted); a *.txt file is scored whole, in windows of --ctx tokens (all but a
/// window's first token). Files in name order. Perplexity = exp(mean -log p) in double from f32 logits;
/// and how often each copy's most likely token is the float model's.
int run_perplexity(const Options& o) {
  auto tok = Tokenizer::from_dir(o.perplexity);
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(o.texts))
    if (e.path().extension() == ".txt" || e.path().extension() == ".jsonl") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  if (files.empty()) throw std::runtime_error(o.texts.string() + ": no .txt or .jsonl files");
  struct Window {
    std::vector<TokenId> ids;
    std::size_t first_scored = 1;  ///< ids[first_scored ..] are scored
  };
  std::vector<Window> windows;
  std::size_t skipped = 0;
  for (const auto& f : files) {
    if (f.extension() == ".jsonl") {
      std::istringstream in(read_text(f));
      std::string line;
      while (std::getline(in, line)) {
        if (line.empty()) continue;
        const auto ex = nlohmann::json::parse(line);
        Window w;
        w.ids = tok->encode(ex.at("prompt").get<std::string>());
        w.first_scored = std::max<std::size_t>(w.ids.size(), 1);
        const auto t = tok->encode(ex.at("target").get<std::string>());
        w.ids.insert(w.ids.end(), t.begin(), t.end());
        if (w.ids.size() > o.ctx || w.first_scored >= w.ids.size()) ++skipped;
        else windows.push_back(std::move(w));
      }
      continue;
    }
    const auto ids = tok->encode(read_text(f));
    for (std::size_t at = 0; at + 1 < ids.size(); at += o.ctx)
      windows.push_back({std::vector<TokenId>(ids.begin() + at, ids.begin() + std::min(ids.size(), at + o.ctx)), 1});
  }
  if (windows.empty()) throw std::runtime_error(o.texts.string() + ": nothing to score within --ctx tokens");
  const std::string name = o.perplexity.filename().string();
  const auto models = with_quantized_copies(o, o.perplexity, name, "float");
  const DeviceSpec device = parse_device(o.device);
  std::vector<std::size_t> base_argmax;
  std::ostringstream md;
  json rows = json::array();
  double base_ppl = 0;
  std::string description;
  for (std::size_t mi = 0; mi < models.size(); ++mi) {
    auto model = load_model(models[mi].second, make_backend({device, o.threads}), parse_compute(o.compute));
    if (mi == 0) description = model->backend().description();
    const std::size_t V = model->config().vocab_size;
    auto kv = model->make_kv_cache(o.ctx, 0);
    double nll = 0;
    std::size_t n = 0, agree = 0, k = 0;
    std::vector<float> logits;
    for (const auto& win : windows) {
      const auto& w = win.ids;
      const SeqId seq = kv->create_sequence();
      if (!kv->reserve(seq, w.size())) throw std::runtime_error("perplexity: the KV cache cannot hold a window");
      Batch b;  // logits at the positions that predict a scored token
      for (std::size_t i = 0; i < w.size(); ++i)
        b.add(w[i], static_cast<std::int32_t>(i), seq, i + 1 >= win.first_scored && i + 1 < w.size());
      logits.resize((w.size() - win.first_scored) * V);
      model->forward(b, *kv, logits.data());
      for (std::size_t j = win.first_scored; j < w.size(); ++j, ++k) {
        const float* row = logits.data() + (j - win.first_scored) * V;
        const std::size_t top = static_cast<std::size_t>(std::max_element(row, row + V) - row);
        double sum = 0;
        for (std::size_t t = 0; t < V; ++t) sum += std::exp(static_cast<double>(row[t]) - row[top]);
        nll += std::log(sum) - (static_cast<double>(row[w[j]]) - row[top]);
        ++n;
        if (mi == 0) base_argmax.push_back(top);
        else agree += base_argmax[k] == top ? 1 : 0;
      }
      kv->free_sequence(seq);
    }
    const double ppl = std::exp(nll / static_cast<double>(n));
    if (mi == 0) base_ppl = ppl;
    const double agreement = mi == 0 ? 1.0 : static_cast<double>(agree) / static_cast<double>(n);
    std::cerr << models[mi].first << ": perplexity " << ppl << " over " << n << " tokens\n";
    rows.push_back({{"weights", models[mi].first}, {"compute", compute_name(model->compute())},
                    {"weight_bytes_per_step", model->weight_bytes_per_step()}, {"tokens", n}, {"perplexity", ppl},
                    {"perplexity_x_float", ppl / base_ppl}, {"top1_agreement_with_float", agreement}});
    char line[256];
    std::snprintf(line, sizeof line, "| %s | %s | %zu | %.4f | %.4f | %.4f |\n", models[mi].first.c_str(),
                  compute_name(model->compute()), n, ppl, ppl / base_ppl, agreement);
    md << line;
  }
  json rep;
  rep["bench"] = "bench_engine --perplexity";
  rep["commit"] = quarry::bench::git_commit();
  rep["device"] = description;
  rep["cpu"] = quarry::bench::cpu_model();
  rep["model"] = o.perplexity.string();
  rep["texts"] = o.texts.string();
  rep["files"] = files.size();
  rep["windows"] = windows.size();
  rep["skipped_longer_than_ctx"] = skipped;
  rep["ctx"] = o.ctx;
  rep["rows"] = rows;
  const std::string head = "# Perplexity, " + name + ", " + description + "\n\n" + std::to_string(files.size()) +
                           " files of " + o.texts.string() + ", " + std::to_string(windows.size()) +
                           " windows of at most " + std::to_string(o.ctx) + " tokens (" + std::to_string(skipped) +
                           " examples longer skipped)\n\n| weights | compute | tokens scored | perplexity | x float | top-1 agreement with "
                           "float |\n| --- | --- | --- | --- | --- | --- |\n";
  fs::create_directories(o.out);
  std::ofstream(o.out / "bench_perplexity.json") << rep.dump(2) << "\n";
  std::ofstream(o.out / "bench_perplexity.md") << head << md.str();
  std::cout << head << md.str();
  return 0;
}

/// json-kie with MTP drafting against none on the same device (see the file comment).
int run_kie(const Options& o) {
  const fs::path src(QUARRY_SOURCE_DIR);
  auto tok = Tokenizer::from_dir(o.kie);
  const auto prompts = nlohmann::json::parse(read_text(o.kie / "prompts.json"));
  const std::string schema = read_text(src / "schemas/invoice.schema.json");
  std::vector<std::string> docs;
  for (const auto& e : fs::directory_iterator(src / "samples/invoices"))
    if (e.path().extension() == ".txt") docs.push_back(read_text(e.path()));
  std::sort(docs.begin(), docs.end());
  json rep;
  rep["bench"] = "bench_engine json-kie";
  rep["commit"] = quarry::bench::git_commit();
  rep["documents"] = docs.size();
  std::vector<std::vector<TokenId>> reference;
  double base_tok_s = 0;
  json depths = json::array();
  for (const std::size_t depth : {std::size_t{0}, o.mtp}) {
    EngineOptions eo = engine_options(o);
    eo.mtp_depth = depth;
    auto engine = Engine::open(o.kie, tok, eo);
    rep["device"] = engine->backend().description();
    rep["compute"] = compute_name(engine->model().compute());
    std::vector<double> tok_s;
    std::vector<std::vector<TokenId>> outputs;
    EngineStats last;
    for (std::size_t r = 0; r <= o.runs; ++r) {
      const EngineStats before = engine->stats();
      std::vector<std::vector<TokenId>> outs;
      for (const auto& d : docs) {
        GenerationRequest req;
        req.prompt = tok->encode(tok->apply_chat_template(
            {{"system", prompts["kie"]["system"].get<std::string>()}, {"user", d}}, true, false));
        req.max_tokens = 1024;
        req.json_schema = schema;
        outs.push_back(engine->generate(req).tokens);
      }
      const EngineStats& after = engine->stats();
      if (r == 0) continue;
      tok_s.push_back(static_cast<double>(after.decode_tokens - before.decode_tokens) / (after.decode_s - before.decode_s));
      outputs = std::move(outs);
      last = after;
    }
    json unconstrained;
    if (depth == 0) {
      reference = outputs;
      base_tok_s = median(tok_s);
      // The grammar's cost: the same prompts unconstrained, each decoding as many tokens as its
      // constrained output (EOS ignored), timed the same way.
      std::vector<double> free_tok_s;
      for (std::size_t r = 0; r <= o.runs; ++r) {
        const EngineStats before = engine->stats();
        for (std::size_t i = 0; i < docs.size(); ++i) {
          GenerationRequest req;
          req.prompt = tok->encode(tok->apply_chat_template(
              {{"system", prompts["kie"]["system"].get<std::string>()}, {"user", docs[i]}}, true, false));
          req.max_tokens = std::max<std::size_t>(reference[i].size(), 1);
          req.ignore_eos = true;
          engine->generate(req);
        }
        const EngineStats& after = engine->stats();
        if (r > 0)
          free_tok_s.push_back(static_cast<double>(after.decode_tokens - before.decode_tokens) /
                               (after.decode_s - before.decode_s));
      }
      unconstrained = {{"decode_tok_s", median(free_tok_s)}, {"runs", free_tok_s},
                       {"constrained_over_unconstrained", median(tok_s) / median(free_tok_s)}};
      std::cerr << "json-kie unconstrained: " << median(free_tok_s) << " tok/s\n";
    }
    std::size_t identical = 0;
    for (std::size_t i = 0; i < outputs.size(); ++i) identical += outputs[i] == reference[i];
    json d = {{"mtp_depth", depth}, {"decode_tok_s", median(tok_s)}, {"runs", tok_s},
              {"x_no_drafting", base_tok_s > 0 ? median(tok_s) / base_tok_s : 0.0},
              {"identical_to_no_drafting", std::to_string(identical) + "/" + std::to_string(outputs.size())}};
    if (depth > 0)
      d["mean_acceptance_length"] = last.mean_acceptance_length();
    if (!unconstrained.is_null()) d["unconstrained"] = unconstrained;
    depths.push_back(d);
    std::cerr << "json-kie mtp " << depth << ": " << median(tok_s) << " tok/s\n";
  }
  rep["depths"] = depths;
  fs::create_directories(o.out);
  std::ofstream(o.out / "bench_kie.json") << rep.dump(2) << "\n";
  std::ostringstream md;
  md << "# json-kie, " << docs.size() << " text invoices, " << rep["device"].get<std::string>() << ", compute "
     << rep["compute"].get<std::string>() << "\n\n| MTP depth | decode tok/s | x none | mean acceptance length | identical |\n"
     << "| --- | --- | --- | --- | --- |\n";
  for (const auto& d : depths)
    md << "| " << d["mtp_depth"].get<std::size_t>() << " | " << d["decode_tok_s"].get<double>() << " | "
       << d["x_no_drafting"].get<double>() << " | " << d.value("mean_acceptance_length", 1.0) << " | "
       << d["identical_to_no_drafting"].get<std::string>() << " |\n";
  if (depths[0].contains("unconstrained"))
    md << "\nThe grammar's cost (MTP off): unconstrained decoding of as many tokens per document "
       << depths[0]["unconstrained"]["decode_tok_s"].get<double>() << " tok/s; constrained / unconstrained "
       << depths[0]["unconstrained"]["constrained_over_unconstrained"].get<double>() << "\n";
  std::ofstream(o.out / "bench_kie.md") << md.str();
  std::cout << md.str();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  const std::string usage =  // the usage is this file's header comment
      "usage: bench_engine [--device cpu|cuda[:N]] [--preset NAME] [--layers N] [--dtype bf16|f16|f32]\n"
      "         [--compute auto|exact|bf16] [--threads N] [--tg N] [--depth N] [--pp N,N] [--concurrency N,N]\n"
      "         [--ttft N] [--batch-tokens N] [--greedy-on-backend auto|on|off] [--eager on|off] [--runs N]\n"
      "         [--sampling T[,top_k[,top_p[,min_p]]]] [--sample-on-backend auto|on|off]\n"
      "         [--work DIR] [--out DIR]\n"
      "       bench_engine --kie MODEL_DIR [--mtp N] ...   (MTP on the sample invoices)\n"
      "       bench_engine --quant int8,int4,fp8 ...       (quantized copies against the float model)\n"
      "       bench_engine --tp 1,2,4 ...                  (tensor-parallel degrees against each other)\n"
      "       bench_engine --perplexity MODEL_DIR --texts DIR [--ctx 512] [--quant int8,int4,fp8]\n"
      "                                                    (perplexity of the model and its quantized copies)\n"
      "presets: " + preset_names() + "\n";
  const int rc = quarry::bench::parse_options(argc, argv, "bench_engine", usage, [&](const std::string& a, const std::string& v) {
    if (a == "--device") o.device = v;
    else if (a == "--preset") o.preset = v;
    else if (a == "--dtype") o.dtype = v;
    else if (a == "--compute") o.compute = v;
    else if (a == "--layers") o.layers = std::stoul(v);
    else if (a == "--threads") o.threads = std::stoul(v);
    else if (a == "--tg") o.tg = std::stoul(v);
    else if (a == "--depth") o.depth = std::stoul(v);
    else if (a == "--pp") o.pp = parse_list(v);
    else if (a == "--concurrency") o.concurrency = parse_list(v);
    else if (a == "--ttft") o.ttft = std::stoul(v);
    else if (a == "--batch-tokens") o.batch_tokens = std::stoul(v);
    else if (a == "--runs") o.runs = std::max<std::size_t>(1, std::stoul(v));
    else if (a == "--work") o.work = v;
    else if (a == "--out") o.out = v;
    else if (a == "--kie") o.kie = v;
    else if (a == "--mtp") o.mtp = std::stoul(v);
    else if (a == "--tp") o.tp = parse_list(v);
    else if (a == "--perplexity") o.perplexity = v;
    else if (a == "--texts") o.texts = v;
    else if (a == "--ctx") o.ctx = std::max<std::size_t>(2, std::stoul(v));
    else if (a == "--greedy-on-backend") o.greedy = parse_on_backend(v);
    else if (a == "--sample-on-backend") o.sample = parse_on_backend(v);
    else if (a == "--sampling") {
      const std::vector<std::string> f = split_commas(v);
      if (f.empty() || f.size() > 4) throw std::invalid_argument("takes T[,top_k[,top_p[,min_p]]]");
      o.sampling.temperature = std::stof(f[0]);
      if (f.size() > 1) o.sampling.top_k = std::stoul(f[1]);
      if (f.size() > 2) o.sampling.top_p = std::stof(f[2]);
      if (f.size() > 3) o.sampling.min_p = std::stof(f[3]);
      o.sampling.seed = 1;
      Sampler check(o.sampling);  // the sampler's own checks of the values
    } else if (a == "--eager") {
      if (v != "on" && v != "off") throw std::invalid_argument("takes on or off");
      o.eager = v == "on";
    } else if (a == "--quant") {
      for (const auto& item : split_commas(v))
        if (item == "int8" || item == "int4" || item == "fp8") o.quant.push_back(item);
        else throw std::invalid_argument("takes int8, int4, fp8 (comma-separated), not " + item);
    } else {
      return false;
    }
    return true;
  });
  if (rc >= 0) return rc;
  try {
    if (!o.kie.empty()) return run_kie(o);
    if (!o.perplexity.empty()) {
      if (o.texts.empty()) throw std::runtime_error("--perplexity needs --texts DIR");
      return run_perplexity(o);
    }
    const DType dtype = o.dtype == "f32" ? DType::f32 : o.dtype == "f16" ? DType::f16 : DType::bf16;
    nlohmann::json cfg = nlohmann::json::parse(preset_config_json(o.preset));
    if (o.layers) cfg["num_hidden_layers"] = cfg["max_window_layers"] = o.layers;
    const std::size_t max_ctx = std::max({o.depth + o.tg + 8, o.ttft + 64, o.pp.empty() ? 0 : *std::max_element(o.pp.begin(), o.pp.end()) + 8});
    cfg["max_position_embeddings"] = std::max<std::size_t>(40960, max_ctx);
    const std::string name = o.preset + (o.layers ? "-" + std::to_string(o.layers) + "l" : "") + "-" + o.dtype;
    const fs::path model_dir = o.work / (name + "-random");
    if (!fs::exists(model_dir / "model.safetensors")) {
      std::cerr << "writing " << model_dir << " ...\n";
      const double t0 = now_s();
      write_random_checkpoint(cfg.dump(), model_dir, dtype, 1);
      std::cerr << "  " << now_s() - t0 << " s\n";
    }

    if (!o.quant.empty()) return run_quant(o, model_dir, name);
    if (!o.tp.empty()) return run_tp(o, model_dir, name);
    const DeviceSpec device = parse_device(o.device);
    const auto probe = make_backend({device, o.threads});
    std::cerr << "device: " << probe->description() << "\n";
    std::vector<double> bw = probe->probe_bandwidth_gb_s(std::size_t{1} << 30, 5);
    const std::size_t gm = device.kind == DeviceSpec::Kind::cpu ? 256 : 4096;
    const std::size_t gk = device.kind == DeviceSpec::Kind::cpu ? 1024 : 4096;
    const double peak_gflops = median(probe->probe_matmul_gflops(gm, gk, gk, dtype, parse_compute(o.compute), 5));
    std::cerr << "bandwidth " << *std::max_element(bw.begin(), bw.end()) << " GB/s, matmul " << peak_gflops
              << " GFLOP/s\n";

    EngineOptions eo = engine_options(o);
    eo.max_batch_tokens = o.batch_tokens;
    const std::size_t max_conc = o.concurrency.empty() ? 1 : *std::max_element(o.concurrency.begin(), o.concurrency.end());
    eo.max_num_seqs = std::max<std::size_t>(max_conc, 1);
    // Room for the TTFT document, a cold one beside it and the largest concurrency level at once, so
    // that the warm run finds its document cached.
    eo.max_kv_tokens = std::max({max_ctx + 256, max_conc * (64 + o.tg + 16), 3 * (o.ttft + 64)});
    const double t_load = now_s();
    auto engine = Engine::open(model_dir, nullptr, eo);
    const double load_s = now_s() - t_load;
    const auto& c = engine->model().config();
    const std::size_t V = c.vocab_size;
    std::cerr << "loaded in " << load_s << " s: " << engine->backend().description() << ", compute "
              << compute_name(engine->model().compute()) << "\n";

    const double H = static_cast<double>(c.hidden_size), D = static_cast<double>(c.head_dim);
    const double linear = c.active_linear_parameters();
    auto prefill_flops = [&](double n) {
      return 2.0 * linear * n + 4.0 * static_cast<double>(c.num_hidden_layers * c.num_attention_heads) * D * n * (n + 1) / 2 +
             2.0 * H * static_cast<double>(V);
    };
    const double weight_bytes = static_cast<double>(engine->model().weight_bytes_per_step());
    const double kv_per_token = static_cast<double>(engine->kv_cache().bytes_per_token());
    std::uint64_t salt = 1;

    json rep;
    rep["bench"] = "bench_engine";
    rep["commit"] = quarry::bench::git_commit();
    rep["device"] = engine->backend().description();
    rep["cpu"] = quarry::bench::cpu_model();
    rep["model"] = {{"preset", o.preset}, {"layers", c.num_hidden_layers}, {"hidden_size", c.hidden_size},
                    {"intermediate_size", c.intermediate_size}, {"num_experts", c.num_experts},
                    {"num_experts_per_tok", c.num_experts_per_tok}, {"moe_intermediate_size", c.moe_intermediate_size},
                    {"heads", c.num_attention_heads},
                    {"kv_heads", c.num_key_value_heads}, {"vocab_size", V}, {"dtype", o.dtype},
                    {"compute", compute_name(engine->model().compute())},
                    {"kv_dtype", dtype_name(engine->kv_cache().spec().dtype)},
                    {"weight_bytes_per_step", weight_bytes}, {"load_s", load_s}};
    rep["runs"] = o.runs;

    // ---- tg: batch-1 decode after a short prompt.
    json tg;
    {
      std::vector<double> tok_s, gb_s, wall_tok_s;
      std::size_t replayed = 0, steps = 0;
      for (std::size_t r = 0; r <= o.runs; ++r) {
        GenerationRequest req;
        req.prompt = prompt(std::max<std::size_t>(o.depth, 1), salt++, V);
        req.max_tokens = o.tg + 1;  // the first token comes from the prefill
        req.ignore_eos = true;
        req.sampling = o.sampling;
        const EngineStats before = engine->stats();
        const auto res = engine->generate(req);
        const EngineStats& after = engine->stats();
        const double s = after.decode_s - before.decode_s;
        const double toks = static_cast<double>(after.decode_tokens - before.decode_tokens);
        const double bytes = static_cast<double>(after.decode_bytes - before.decode_bytes);
        if (r == 0) continue;
        tok_s.push_back(toks / s);
        gb_s.push_back(bytes / s / 1e9);
        wall_tok_s.push_back(res.stats.decode_tok_s());  // the request's own clock: first token to last
        replayed += after.replayed_steps - before.replayed_steps;
        steps += after.decode_steps - before.decode_steps;
      }
      tg = {{"tokens", o.tg}, {"depth", o.depth}, {"tok_s", median(tok_s)}, {"tok_s_runs", tok_s},
            {"achieved_gb_s", median(gb_s)}, {"request_tok_s", median(wall_tok_s)}, {"replayed_steps", replayed},
            {"decode_steps", steps}};
      std::cerr << "tg" << o.tg << " @" << o.depth << ": " << median(tok_s) << " tok/s, " << median(gb_s)
                << " GB/s (request clock " << median(wall_tok_s) << " tok/s; " << replayed << " of " << steps
                << " steps replayed)\n";
    }

    // ---- pp: prefill.
    json pp = json::array();
    for (std::size_t n : o.pp) {
      std::vector<double> tok_s;
      for (std::size_t r = 0; r <= o.runs; ++r) {
        GenerationRequest req;
        req.prompt = prompt(n, salt++, V);  // a new prompt: no prefix-cache hit
        req.max_tokens = 1;
        const auto res = engine->generate(req);
        if (r > 0) tok_s.push_back(static_cast<double>(n) / res.stats.ttft_s);
      }
      const double t = median(tok_s);
      pp.push_back({{"tokens", n}, {"tok_s", t}, {"tok_s_runs", tok_s},
                    {"gflop_s", prefill_flops(static_cast<double>(n)) / (static_cast<double>(n) / t) / 1e9}});
      std::cerr << "pp" << n << ": " << t << " tok/s\n";
    }

    // ---- concurrency: aggregate decode.
    json conc = json::array();
    double batch1 = 0;
    for (std::size_t level : o.concurrency) {
      std::vector<double> agg;
      for (std::size_t r = 0; r <= o.runs; ++r) {
        const double a = aggregate_decode(*engine, o, level, salt);
        if (r > 0) agg.push_back(a);
      }
      const double a = median(agg);
      if (level == 1) batch1 = a;
      conc.push_back({{"sequences", level}, {"aggregate_tok_s", a}, {"runs", agg},
                      {"x_batch1", batch1 > 0 ? a / batch1 : 0.0}});
      std::cerr << "concurrency " << level << ": " << a << " tok/s aggregate\n";
    }

    // ---- ttft: a long document cold, then warm (same document, another question).
    json ttft;
    if (o.ttft > 0) {
      const auto doc = prompt(o.ttft, 987654321, V);
      std::vector<double> cold, warm;
      for (std::size_t r = 0; r < o.runs; ++r) {
        GenerationRequest a;
        a.prompt = prompt(o.ttft, 1000 + r, V);  // another document each run: cold
        a.max_tokens = 1;
        cold.push_back(engine->generate(a).stats.ttft_s);
        GenerationRequest w;
        w.prompt = doc;
        const auto q = prompt(32, 5000 + r, V);
        w.prompt.insert(w.prompt.end(), q.begin(), q.end());
        w.max_tokens = 1;
        const auto res = engine->generate(w);
        if (r > 0) warm.push_back(res.stats.ttft_s);  // the first sees the document for the first time
      }
      ttft = {{"tokens", o.ttft}, {"cold_s", median(cold)}, {"warm_s", median(warm)}, {"cold_runs", cold},
              {"warm_runs", warm}, {"warm_over_cold", median(warm) / median(cold)}};
      std::cerr << "ttft " << o.ttft << ": cold " << median(cold) << " s, warm " << median(warm) << " s\n";
    }

    {
      auto more = probe->probe_bandwidth_gb_s(std::size_t{1} << 30, 5);
      bw.insert(bw.end(), more.begin(), more.end());
    }
    const double bw_best = *std::max_element(bw.begin(), bw.end());
    // Hybrid models also read and write their recurrent state (conv windows, delta-rule states) per step.
    const double state_bytes = 2.0 * sizeof(float) * static_cast<double>(engine->kv_cache().spec().state_floats);
    const double tg_bytes = weight_bytes + kv_per_token * static_cast<double>(o.depth + o.tg / 2) + state_bytes;
    tg["bytes_per_step"] = tg_bytes;
    tg["roofline_tok_s"] = bw_best * 1e9 / tg_bytes;
    tg["fraction_of_bandwidth"] = tg["tok_s"].get<double>() * tg_bytes / (bw_best * 1e9);
    for (auto& p : pp) p["fraction_of_matmul_peak"] = p["gflop_s"].get<double>() / peak_gflops;
    rep["roofline"] = {{"bandwidth_gb_s", bw_best}, {"bandwidth_gb_s_median", median(bw)}, {"bandwidth_runs", bw},
                       {"matmul_gflop_s", peak_gflops}, {"matmul_shape", {gm, gk, gk}}};
    rep["tg"] = tg;
    rep["pp"] = pp;
    rep["concurrency"] = conc;
    if (!ttft.is_null()) rep["ttft"] = ttft;

    rep["sampling"]["steps_drawn_on_backend"] = engine->stats().sampled_on_backend_steps;
    fs::create_directories(o.out);
    std::ofstream(o.out / "bench_engine.json") << rep.dump(2) << "\n";
    std::ostringstream md;
    md << "# bench_engine: " << name << " (random weights) on " << rep["device"].get<std::string>() << "\n\n"
       << "compute " << rep["model"]["compute"].get<std::string>() << ", KV " << rep["model"]["kv_dtype"].get<std::string>()
       << ", commit " << rep["commit"].get<std::string>() << "; median of " << o.runs << " runs after 1 warm-up; "
       << "bandwidth " << bw_best << " GB/s (best of " << bw.size() << "), matmul " << peak_gflops << " GFLOP/s ("
       << gm << "x" << gk << "x" << gk << ").";
    if (o.sampling.temperature > 0.f)
      md << " Sampling: temperature " << o.sampling.temperature << ", top-k " << o.sampling.top_k << ", top-p "
         << o.sampling.top_p << ", min-p " << o.sampling.min_p << "; "
         << rep["sampling"]["steps_drawn_on_backend"].get<std::size_t>() << " steps drawn on the backend.";
    md << "\n\n| measure | value | limit | fraction |\n| --- | --- | --- | --- |\n";
    char line[512];
    std::snprintf(line, sizeof line, "| tg%zu @ depth %zu, batch 1 | %.1f tok/s, %.0f GB/s | %.1f tok/s (%.2f GB/step) | %.1f%% |\n",
                  o.tg, o.depth, tg["tok_s"].get<double>(), tg["tok_s"].get<double>() * tg_bytes / 1e9,
                  tg["roofline_tok_s"].get<double>(), tg_bytes / 1e9, 100 * tg["fraction_of_bandwidth"].get<double>());
    md << line;
    for (const auto& p : pp) {
      std::snprintf(line, sizeof line, "| pp%zu | %.0f tok/s, %.0f GFLOP/s | %.0f GFLOP/s | %.1f%% |\n",
                    p["tokens"].get<std::size_t>(), p["tok_s"].get<double>(), p["gflop_s"].get<double>(), peak_gflops,
                    100 * p["fraction_of_matmul_peak"].get<double>());
      md << line;
    }
    for (const auto& l : conc) {
      std::snprintf(line, sizeof line, "| %zu sequences | %.1f tok/s aggregate | | %.2fx batch 1 |\n",
                    l["sequences"].get<std::size_t>(), l["aggregate_tok_s"].get<double>(), l["x_batch1"].get<double>());
      md << line;
    }
    if (!ttft.is_null()) {
      std::snprintf(line, sizeof line, "| TTFT %zu tokens | cold %.3f s, warm %.3f s | | warm = %.1f%% of cold |\n",
                    o.ttft, ttft["cold_s"].get<double>(), ttft["warm_s"].get<double>(),
                    100 * ttft["warm_over_cold"].get<double>());
      md << line;
    }
    std::ofstream(o.out / "bench_engine.md") << md.str();
    std::cout << md.str();
  } catch (const std::exception& e) {
    std::cerr << "bench_engine: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
