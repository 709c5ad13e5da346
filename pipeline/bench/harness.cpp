#include "pipeline/bench/harness.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "pipeline/bench/workloads.hpp"
#include "engine/backend/backend.hpp"
#include "engine/models/config.hpp"
#include "engine/models/random_checkpoint.hpp"
#include "engine/runtime/engine.hpp"
#include "quarry/version.hpp"

namespace quarry::bench {

namespace fs = std::filesystem;
namespace eng = quarry::engine;
using json = nlohmann::ordered_json;

// ---------------------------------------------------------------------------------------------------
// Statistics

double median(std::vector<double> v) { return percentile(std::move(v), 50.0); }

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const double r = std::clamp(q, 0.0, 100.0) / 100.0 * static_cast<double>(v.size() - 1);
  const std::size_t lo = static_cast<std::size_t>(std::floor(r));
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (r - static_cast<double>(lo));
}

double mean(const std::vector<double>& v) {
  if (v.empty()) return 0.0;
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

double stddev(const std::vector<double>& v) {
  if (v.size() < 2) return 0.0;
  const double m = mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size() - 1));
}

const std::vector<std::string>& workload_names() {
  static const std::vector<std::string> names = {"qa", "code", "json-kie", "hungarian", "long-rag-8k", "long-rag-32k"};
  return names;
}

RandomModelSpec parse_random_model_spec(std::string_view spec) {
  RandomModelSpec s;
  const std::size_t colon = spec.find(':');
  s.preset = std::string(spec.substr(0, colon));
  if (s.preset.empty()) throw std::invalid_argument("bench: empty random-model preset in \"" + std::string(spec) + "\"");
  (void)eng::preset_config_json(s.preset);  // throws std::invalid_argument on an unknown preset
  if (colon != std::string_view::npos) {
    const std::string n(spec.substr(colon + 1));
    std::size_t used = 0;
    unsigned long v = 0;
    try {
      v = std::stoul(n, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != n.size() || n.empty() || v == 0 || v > 1000)
      throw std::invalid_argument("bench: random-model layers must be a number in 1..1000, got \"" + n + "\"");
    s.layers = v;
  }
  return s;
}

namespace {

// ---------------------------------------------------------------------------------------------------
// Machine and time

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string proc_field(const char* file, const char* key) {
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key, 0) == 0) {
      std::size_t c = line.find(':');
      if (c == std::string::npos) continue;
      std::string v = line.substr(c + 1);
      v.erase(0, v.find_first_not_of(" \t"));
      return v;
    }
  return "";
}

/// CPU seconds this process has used (all threads), for the share of the machine a run got.
double process_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

std::vector<double> load_average() {
  std::ifstream in("/proc/loadavg");
  double a = 0, b = 0, c = 0;
  if (!(in >> a >> b >> c)) return {};
  return {a, b, c};
}

/// Size of the largest CPU cache (sysfs), 0 if unknown.
std::size_t last_level_cache_bytes() {
  std::size_t best = 0;
  for (int i = 0; i < 8; ++i) {
    std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/size");
    std::string v;
    if (!(in >> v) || v.empty()) continue;
    std::size_t mult = 1;
    if (v.back() == 'K') mult = 1024;
    if (v.back() == 'M') mult = 1024 * 1024;
    if (mult != 1) v.pop_back();
    try {
      best = std::max<std::size_t>(best, std::stoull(v) * mult);
    } catch (const std::exception&) {
    }
  }
  return best;
}

json machine_info(std::size_t threads, const eng::Backend& backend) {
  json m;
  m["cpu"] = proc_field("/proc/cpuinfo", "model name");
  m["hardware_threads"] = std::thread::hardware_concurrency();
  m["threads_used"] = threads;
  const std::string mem = proc_field("/proc/meminfo", "MemTotal");
  m["memory_gib"] = mem.empty() ? 0.0 : std::stod(mem) / (1024.0 * 1024.0);
  m["device"] = backend.description();
  m["last_level_cache_bytes"] = last_level_cache_bytes();
  m["load_average_at_start"] = load_average();
  return m;
}

eng::DType weight_type(const std::string& dtype) {
  if (dtype == "float32" || dtype == "f32") return eng::DType::f32;
  if (dtype == "float16" || dtype == "f16") return eng::DType::f16;
  return eng::DType::bf16;
}

// ---------------------------------------------------------------------------------------------------
// Model figures

/// FLOPs of computing `n` prompt tokens after `past` cached ones: linear layers, causal attention
/// (QK^T and PV: 4 x heads x head_dim per attended position), and one LM-head row.
double prefill_flops(const eng::ModelConfig& c, std::size_t past, std::size_t n) {
  const double pn = static_cast<double>(past), nn = static_cast<double>(n);
  const double attended = nn * pn + nn * (nn + 1) / 2;
  return 2.0 * c.active_linear_parameters() * nn +
         4.0 * static_cast<double>(c.num_hidden_layers * c.num_attention_heads * c.head_dim) * attended +
         2.0 * static_cast<double>(c.hidden_size) * static_cast<double>(c.vocab_size);
}

json model_info(const eng::Engine& engine, const fs::path& dir, const std::string& label) {
  const auto& c = engine.model().config();
  const auto kv = engine.kv_cache().spec();
  json m;
  m["label"] = label;
  m["path"] = dir.string();
  m["architecture"] = c.architecture;
  m["dtype"] = c.torch_dtype.empty() ? "unknown" : c.torch_dtype;
  m["kv_cache_dtype"] = eng::dtype_name(kv.dtype);
  m["layers"] = c.num_hidden_layers;
  m["hidden_size"] = c.hidden_size;
  m["intermediate_size"] = c.intermediate_size;
  m["attention_heads"] = c.num_attention_heads;
  m["kv_heads"] = c.num_key_value_heads;
  m["head_dim"] = c.head_dim;
  m["vocab_size"] = c.vocab_size;
  m["max_position_embeddings"] = c.max_position_embeddings;
  m["linear_parameters"] = c.active_linear_parameters();
  m["compute"] = eng::compute_name(engine.model().compute());
  m["device"] = engine.backend().description();
  m["weight_bytes_per_step"] = engine.model().weight_bytes_per_step();
  m["kv_bytes_per_token"] = kv.bytes_per_token();
  return m;
}

// ---------------------------------------------------------------------------------------------------
// One measured generation

struct RunFigures {
  json j;
  double ttft = 0, decode_tok_s = 0, prefill_tok_s = 0;
  std::size_t prompt_tokens = 0, output_tokens = 0, cached_tokens = 0;
  std::uint64_t decode_bytes = 0;
  std::size_t decode_steps = 0;
};

RunFigures figures_of(const eng::GenerationResult& r, const eng::EngineStats& before, const eng::EngineStats& after) {
  RunFigures f;
  f.ttft = r.stats.ttft_s;
  f.decode_tok_s = r.stats.decode_tok_s();
  f.prefill_tok_s = r.stats.prefill_tok_s();
  f.prompt_tokens = r.stats.prompt_tokens;
  f.output_tokens = r.stats.generated_tokens;
  f.decode_bytes = after.decode_bytes - before.decode_bytes;
  f.decode_steps = after.decode_steps - before.decode_steps;
  f.cached_tokens = r.stats.cached_tokens;
  f.j["prompt_tokens"] = f.prompt_tokens;
  f.j["cached_tokens"] = r.stats.cached_tokens;
  f.j["prefill_tokens"] = r.stats.prompt_tokens - r.stats.cached_tokens;
  f.j["queue_s"] = r.stats.queue_s;
  f.j["output_tokens"] = f.output_tokens;
  f.j["finish"] = eng::finish_reason_name(r.finish);
  f.j["ttft_s"] = f.ttft;
  f.j["decode_s"] = r.stats.decode_s;
  f.j["decode_tok_s"] = f.decode_tok_s;
  f.j["prefill_tok_s"] = f.prefill_tok_s;
  f.j["forward_decode_s"] = after.decode_s - before.decode_s;
  f.j["forward_prefill_s"] = after.prefill_s - before.prefill_s;
  f.j["decode_steps"] = f.decode_steps;
  f.j["decode_bytes"] = f.decode_bytes;
  return f;
}

// ---------------------------------------------------------------------------------------------------
// Drafting figures. Written against the contract's names (EngineOptions::mtp_depth, RequestStats::
// draft_proposed / draft_accepted / verify_steps / accepted_tokens / draft_tokens); detected at
// compile time so that the harness builds on an engine with or without MTP drafting.

template <class Options>
constexpr bool kHasMtpDepth = requires(Options e) { e.mtp_depth; };
constexpr bool kEngineHasMtp = kHasMtpDepth<eng::EngineOptions>;

template <class Options>
void set_mtp_depth(Options& eo, std::size_t depth) {
  if constexpr (requires { eo.mtp_depth; }) eo.mtp_depth = depth;
}

/// Sums of the draft counters over runs; per position j (draft position j + 1).
struct DraftTotals {
  std::vector<double> proposed, accepted;
  double drafts = 0, accepted_tokens = 0, verify_steps = 0;

  template <class Stats>
  void add(const Stats& st) {
    if constexpr (requires { st.draft_proposed; st.draft_accepted; st.verify_steps; st.accepted_tokens; st.draft_tokens; }) {
      if (proposed.size() < st.draft_proposed.size()) proposed.resize(st.draft_proposed.size());
      if (accepted.size() < st.draft_accepted.size()) accepted.resize(st.draft_accepted.size());
      for (std::size_t j = 0; j < st.draft_proposed.size(); ++j) proposed[j] += static_cast<double>(st.draft_proposed[j]);
      for (std::size_t j = 0; j < st.draft_accepted.size(); ++j) accepted[j] += static_cast<double>(st.draft_accepted[j]);
      drafts += static_cast<double>(st.draft_tokens);
      accepted_tokens += static_cast<double>(st.accepted_tokens);
      verify_steps += static_cast<double>(st.verify_steps);
    } else {
      (void)st;
    }
  }
  bool any() const { return verify_steps > 0 && drafts > 0; }
  /// accepted / proposed per draft position (positions never proposed are left out).
  std::vector<double> acceptance_by_position() const {
    std::vector<double> out;
    for (std::size_t j = 0; j < proposed.size() && proposed[j] > 0; ++j)
      out.push_back((j < accepted.size() ? accepted[j] : 0.0) / proposed[j]);
    return out;
  }
  /// Tokens emitted per verify step: accepted drafts + the main model's own token.
  double mean_acceptance_length() const { return verify_steps > 0 ? (accepted_tokens + verify_steps) / verify_steps : 0.0; }
  void write(json& j) const {
    j["acceptance_by_position"] = acceptance_by_position();
    j["acceptance_rate"] = drafts > 0 ? accepted_tokens / drafts : 0.0;
    j["mean_acceptance_length"] = mean_acceptance_length();
    j["draft_tokens"] = drafts;
    j["accepted_tokens"] = accepted_tokens;
    j["verify_steps"] = verify_steps;
  }
};

eng::GenerationRequest make_request(const Workload& w, std::size_t mtp) {
  eng::GenerationRequest req;
  req.prompt = w.prompt;
  req.max_tokens = w.max_tokens;
  req.ignore_eos = w.ignore_eos;
  req.json_schema = w.json_schema;
  req.json_schema_lenient = true;  // the shipped schema's formats are checked after generation
  (void)mtp;  // the draft depth is engine-wide (EngineOptions::mtp_depth, set in open_engine)
  return req;
}

std::string fmt(const char* f, double a, double b = 0, double c = 0) {
  char buf[256];
  std::snprintf(buf, sizeof buf, f, a, b, c);
  return buf;
}

// ---------------------------------------------------------------------------------------------------

struct ModelUnderTest {
  fs::path dir;
  std::string label;
  bool random = false;
  json random_spec;
  std::vector<std::string> workloads;
  bool run_concurrency = false;
};

fs::path write_random_model(const RandomModelSpec& s, const fs::path& work_dir, const fs::path& tokenizer_dir,
                            const std::function<void(std::string_view)>& log) {
  nlohmann::json cfg = nlohmann::json::parse(eng::preset_config_json(s.preset));
  if (s.layers) {
    cfg["num_hidden_layers"] = s.layers;
    if (cfg.contains("layer_types")) cfg["layer_types"] = std::vector<std::string>(s.layers, "full_attention");
  }
  const std::string text = cfg.dump(2);
  const std::string name = s.preset + "-L" + std::to_string(cfg["num_hidden_layers"].get<std::size_t>()) + "-" + s.dtype +
                           "-seed" + std::to_string(s.seed);
  const fs::path dir = work_dir / name;
  const eng::DType dt = s.dtype == "f32" ? eng::DType::f32 : s.dtype == "f16" ? eng::DType::f16 : eng::DType::bf16;
  if (!fs::exists(dir / "model.safetensors") || !fs::exists(dir / "tokenizer.json")) {
    log("writing random-weight checkpoint " + dir.string());
    eng::write_random_checkpoint(text, dir, dt, s.seed);
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
      std::error_code ec;
      if (fs::exists(tokenizer_dir / f)) fs::copy_file(tokenizer_dir / f, dir / f, fs::copy_options::overwrite_existing, ec);
      if (ec) throw std::runtime_error((dir / f).string() + ": cannot copy the tokenizer: " + ec.message());
    }
  }
  return dir;
}

class Runner {
 public:
  Runner(const BenchOptions& o, const std::function<void(std::string_view)>& log) : o_(o), log_(log) {}

  json run();

 private:
  json run_model(const ModelUnderTest& mut);
  json run_workload(eng::Engine& engine, const Workload& w);
  json run_concurrency(eng::Engine& engine, const std::vector<Workload>& short_mix);
  json run_pp_tg(eng::Engine& engine, const eng::Tokenizer& tok);

  const BenchOptions& o_;
  const std::function<void(std::string_view)>& log_;
  WorkloadInputs inputs_;
  std::size_t threads_ = 0;
};

json Runner::run_workload(eng::Engine& engine, const Workload& w) {
  json out;
  out["workload"] = w.name;
  out["description"] = w.description;
  out["max_tokens"] = w.max_tokens;
  out["constrained"] = !w.json_schema.empty();
  if (w.target_prompt_tokens) out["target_prompt_tokens"] = w.target_prompt_tokens;
  std::vector<double> ttft, dec, pre, cpu_share;
  std::vector<RunFigures> measured;
  DraftTotals drafts;
  json runs = json::array();
  for (std::size_t r = 0; r <= o_.runs; ++r) {
    const eng::GenerationRequest req = make_request(w, o_.mtp);
    const eng::EngineStats before = engine.stats();
    const double cpu0 = process_cpu_s();
    const eng::Stopwatch wall;
    const eng::GenerationResult res = engine.generate(req);
    const double wall_s = wall.seconds(), cpu_s = process_cpu_s() - cpu0;
    RunFigures f = figures_of(res, before, engine.stats());
    if (o_.mtp) {
      DraftTotals one;
      one.add(res.stats);
      if (one.any()) one.write(f.j);
      if (r > 0) drafts.add(res.stats);
    }
    f.j["wall_s"] = wall_s;
    f.j["cpu_s"] = cpu_s;
    // Share of the threads' time the run got: below 1 the machine was shared (or threads idled).
    f.j["cpu_share"] = cpu_s / (wall_s * static_cast<double>(threads_));
    cpu_share.push_back(cpu_s / (wall_s * static_cast<double>(threads_)));
    json head{{"run", r}, {"warmup", r == 0}};
    head.update(f.j);
    runs.push_back(head);
    log_("  " + w.name + (r == 0 ? " warm-up" : " run " + std::to_string(r)) + ": " +
         fmt("TTFT %.3f s, decode %.1f tok/s, ", f.ttft, f.decode_tok_s) + std::to_string(f.output_tokens) + " tokens");
    if (r == 0) {
      out["prompt_tokens"] = f.prompt_tokens;
      out["ttft_cold_s"] = f.ttft;
      out["prefill_tok_s_cold"] = f.prefill_tok_s;
      continue;
    }
    ttft.push_back(f.ttft);
    dec.push_back(f.decode_tok_s);
    pre.push_back(f.prefill_tok_s);
    measured.push_back(std::move(f));
  }
  std::vector<double> outs, bytes_per_step, cached, tokens_per_step;
  for (const auto& f : measured) {
    outs.push_back(static_cast<double>(f.output_tokens));
    cached.push_back(static_cast<double>(f.cached_tokens));
    if (f.decode_steps) {
      bytes_per_step.push_back(static_cast<double>(f.decode_bytes) / static_cast<double>(f.decode_steps));
      // Tokens each decode step emitted (the first token comes from prefill): 1 without drafting.
      tokens_per_step.push_back(static_cast<double>(f.output_tokens - 1) / static_cast<double>(f.decode_steps));
    }
  }
  out["output_tokens"] = median(outs);
  out["ttft_warm_s"] = median(ttft);
  out["cached_tokens_warm"] = median(cached);
  out["prefill_tok_s_warm"] = median(pre);
  out["decode_tok_s"] = median(dec);
  out["decode_tok_s_runs"] = dec;
  out["cpu_share"] = median(cpu_share);
  const double bps = median(bytes_per_step);
  out["bytes_per_decode_step"] = bps;
  const double wbytes = static_cast<double>(engine.model().weight_bytes_per_step());
  out["weight_bytes_per_decode_step"] = wbytes;
  out["kv_bytes_per_decode_step"] = std::max(0.0, bps - wbytes);
  const double tps = tokens_per_step.empty() ? 1.0 : median(tokens_per_step);
  out["tokens_per_decode_step"] = tps;
  out["achieved_gb_s"] = median(dec) / tps * bps / 1e9;
  const auto& c = engine.model().config();
  const double flops = prefill_flops(c, 0, out["prompt_tokens"].get<std::size_t>());
  out["prefill_gflop"] = flops / 1e9;
  out["prefill_gflop_s_cold"] = flops / out["ttft_cold_s"].get<double>() / 1e9;
  if (drafts.any()) drafts.write(out);
  out["runs"] = runs;
  return out;
}

json Runner::run_concurrency(eng::Engine& engine, const std::vector<Workload>& mix) {
  json levels = json::array();
  for (std::size_t c : o_.concurrency) {
    std::vector<eng::GenerationRequest> reqs;
    json names = json::array();
    for (std::size_t i = 0; i < c; ++i) {
      reqs.push_back(make_request(mix[i % mix.size()], o_.mtp));
      names.push_back(mix[i % mix.size()].name);
    }
    std::vector<double> agg, wall, ttft, dec, outs, bps, shares, gbs;
    for (std::size_t r = 0; r <= o_.runs; ++r) {
      const eng::EngineStats before = engine.stats();
      const double cpu0 = process_cpu_s();
      const eng::Stopwatch sw;
      const auto res = engine.generate(std::span<const eng::GenerationRequest>(reqs));
      const double w = sw.seconds();
      const double share = (process_cpu_s() - cpu0) / (w * static_cast<double>(threads_));
      const eng::EngineStats after = engine.stats();
      std::size_t total = 0;
      for (const auto& x : res) total += x.stats.generated_tokens;
      log_("  concurrency " + std::to_string(c) + (r == 0 ? " warm-up" : " run " + std::to_string(r)) + ": " +
           fmt("%.1f tok/s aggregate over %.2f s", static_cast<double>(total) / w, w));
      if (r == 0) continue;
      agg.push_back(static_cast<double>(total) / w);
      wall.push_back(w);
      shares.push_back(share);
      outs.push_back(static_cast<double>(total));
      gbs.push_back(static_cast<double>(after.decode_bytes - before.decode_bytes) / w / 1e9);
      if (after.decode_steps > before.decode_steps)
        bps.push_back(static_cast<double>(after.decode_bytes - before.decode_bytes) /
                      static_cast<double>(after.decode_steps - before.decode_steps));
      for (const auto& x : res) {
        ttft.push_back(x.stats.ttft_s);
        dec.push_back(x.stats.decode_tok_s());
      }
    }
    json l;
    l["concurrency"] = c;
    l["requests"] = names;
    l["aggregate_tok_s"] = median(agg);
    l["aggregate_tok_s_runs"] = agg;
    l["wall_s"] = median(wall);
    l["output_tokens"] = median(outs);
    l["ttft_s"] = {{"p50", percentile(ttft, 50)}, {"p95", percentile(ttft, 95)}};
    l["decode_tok_s_per_request"] = {{"p50", percentile(dec, 50)}, {"p95", percentile(dec, 95)},
                                     {"p5", percentile(dec, 5)}};
    l["samples"] = ttft.size();
    l["cpu_share"] = median(shares);
    l["bytes_per_decode_step"] = median(bps);
    l["achieved_gb_s"] = median(gbs);
    levels.push_back(l);
  }
  return levels;
}

json Runner::run_pp_tg(eng::Engine& engine, const eng::Tokenizer& tok) {
  const auto& c = engine.model().config();
  // Each run of each test reads its own window of the running text (windows start 997 tokens apart;
  // the text repeats with the document's period, which 997, a prime, does not divide), so no run
  // finds another's prompt in the prefix cache (llama-benchy adds noise for the same reason).
  constexpr std::size_t kStride = 997;
  std::size_t longest = 0;
  for (std::size_t d : o_.depth)
    for (std::size_t p : o_.pp) longest = std::max(longest, d + p);
  const std::size_t n_windows = 1 + o_.depth.size() * o_.pp.size() * o_.tg.size() * o_.runs;
  const std::vector<eng::TokenId> text = filler_tokens(inputs_, tok, longest + n_windows * kStride);
  std::size_t next_window = 1;  // 0: the warm-up's
  auto window = [&](std::size_t run, std::size_t n) {
    const auto b = text.begin() + static_cast<std::ptrdiff_t>(run * kStride);
    return std::vector<eng::TokenId>(b, b + static_cast<std::ptrdiff_t>(n));
  };
  json tests = json::array();
  bool warmed = false;
  for (std::size_t d : o_.depth)
    for (std::size_t p : o_.pp)
      for (std::size_t t : o_.tg) {
        json e;
        e["test"] = "pp" + std::to_string(p) + " tg" + std::to_string(t) + (d ? " @ d" + std::to_string(d) : "");
        e["pp"] = p;
        e["tg"] = t;
        e["depth"] = d;
        if (d + p + t > c.max_position_embeddings) {
          e["skipped"] = "depth + pp + tg = " + std::to_string(d + p + t) + " exceeds the model's " +
                         std::to_string(c.max_position_embeddings) + " positions";
          tests.push_back(e);
          continue;
        }
        if (!warmed) {  // one warm-up per model, as llama-benchy
          eng::GenerationRequest warm;
          warm.prompt = window(0, d + p);
          warm.max_tokens = std::max<std::size_t>(t, 2);
          warm.ignore_eos = true;
          (void)engine.generate(warm);
          warmed = true;
        }
        // With a prefix cache and a depth, llama-benchy's two steps: load the context (d tokens,
        // reported as ctx_pp), then the prompt over the cached context (pp = tokens computed / TTFT).
        // Without one, pp = all d + p prompt tokens / TTFT.
        const bool two_step = o_.prefix_caching && d > 0;
        std::vector<double> pp_s, tg_s, ttft, gbs, ctx_pp, computed;
        for (std::size_t run = 0; run < o_.runs; ++run) {
          const std::size_t r = next_window++;
          if (two_step) {
            eng::GenerationRequest ctx;
            ctx.prompt = window(r, d);
            ctx.max_tokens = 1;
            ctx.ignore_eos = true;
            const auto cr = engine.generate(ctx);
            ctx_pp.push_back(static_cast<double>(cr.stats.prompt_tokens - cr.stats.cached_tokens) / cr.stats.ttft_s);
          }
          eng::GenerationRequest req;
          req.prompt = window(r, d + p);
          req.max_tokens = std::max<std::size_t>(t, 2);
          req.ignore_eos = true;
          const eng::EngineStats before = engine.stats();
          const auto res = engine.generate(req);
          const RunFigures f = figures_of(res, before, engine.stats());
          const double n = static_cast<double>(f.prompt_tokens - f.cached_tokens);
          computed.push_back(n);
          pp_s.push_back(n / f.ttft);
          tg_s.push_back(f.decode_tok_s);
          ttft.push_back(f.ttft);
          if (f.decode_steps)  // decode steps per second x bytes per step
            gbs.push_back(f.decode_tok_s * static_cast<double>(f.decode_bytes) /
                          static_cast<double>(f.output_tokens - 1) / 1e9);
        }
        e["pp_tok_s"] = {{"median", median(pp_s)}, {"mean", mean(pp_s)}, {"std", stddev(pp_s)}};
        e["tg_tok_s"] = {{"median", median(tg_s)}, {"mean", mean(tg_s)}, {"std", stddev(tg_s)}};
        if (two_step) e["ctx_pp_tok_s"] = {{"median", median(ctx_pp)}, {"mean", mean(ctx_pp)}, {"std", stddev(ctx_pp)}};
        e["prompt_tokens_computed"] = median(computed);
        e["ttft_s"] = median(ttft);
        e["tg_achieved_gb_s"] = median(gbs);
        const std::size_t cached = static_cast<std::size_t>(static_cast<double>(d + p) - median(computed));
        e["prefill_gflop_s"] = prefill_flops(c, cached, d + p - cached) / median(ttft) / 1e9;
        log_("  " + e["test"].get<std::string>() + ": " +
             fmt("pp %.1f tok/s, tg %.2f tok/s", median(pp_s), median(tg_s)));
        tests.push_back(e);
      }
  return tests;
}

json Runner::run_model(const ModelUnderTest& mut) {
  log_("model " + mut.label + " (" + mut.dir.string() + ")");
  auto tok = eng::Tokenizer::from_dir(mut.dir);
  const eng::ModelConfig cfg = eng::load_model_config(mut.dir / "config.json");

  std::vector<Workload> built;
  json skipped = json::array();
  for (const auto& name : mut.workloads) {
    Workload w = build_workload(name, inputs_, *tok, o_.context_scale, o_.output_scale, mut.dir / "prompts.json");
    std::string why;
    if (w.prompt.size() + w.max_tokens > cfg.max_position_embeddings)
      why = "prompt " + std::to_string(w.prompt.size()) + " + output " + std::to_string(w.max_tokens) +
            " tokens exceed the model's " + std::to_string(cfg.max_position_embeddings) + " positions";
    else if (w.seed_positions > cfg.max_position_embeddings)
      why = "at the seed's size it needs " + std::to_string(w.seed_positions) + " positions, the model has " +
            std::to_string(cfg.max_position_embeddings) + " (a scaled-down copy is not run)";
    if (!why.empty()) {
      skipped.push_back({{"workload", name}, {"reason", why}});
      log_("  " + name + ": skipped (" + skipped.back()["reason"].get<std::string>() + ")");
      continue;
    }
    built.push_back(std::move(w));
  }
  std::vector<Workload> short_mix;
  if (mut.run_concurrency)
    for (const char* n : {"qa", "code", "json-kie", "hungarian"})
      short_mix.push_back(build_workload(n, inputs_, *tok, o_.context_scale, o_.output_scale, mut.dir / "prompts.json"));

  // One fresh engine per workload (and for the concurrency and pp/tg sweeps): its prefix cache is
  // empty, so the warm-up run's TTFT is truly cold. Weights stay in the page cache between engines.
  // KV capacity: room for the request twice over (the cached prompt blocks of the previous run stay
  // while the next run's output blocks are allocated); the cache allocates blocks on use.
  double load_s = 0;
  auto open_engine = [&](std::size_t need, std::size_t mtp_depth) {
    eng::EngineOptions eo;
    eo.n_threads = threads_;
    eo.device = eng::parse_device(o_.device);
    eo.max_kv_tokens = std::max<std::size_t>(need, 4096);
    eo.enable_prefix_caching = o_.prefix_caching;
    eo.compute = eng::parse_compute(o_.compute);
    eo.grammar_lm_head = o_.grammar_lm_head;
    set_mtp_depth(eo, mtp_depth);
    if (o_.max_batch_tokens) eo.max_batch_tokens = o_.max_batch_tokens;
    const eng::Stopwatch load;
    auto engine = eng::Engine::open(mut.dir, tok, eo);
    load_s = load.seconds();
    // Fault the weights in and warm the code paths before anything is timed.
    eng::GenerationRequest warm;
    warm.prompt = tok->encode(tok->apply_chat_template({{"user", "Hello"}}, true, false));
    warm.max_tokens = 8;
    warm.ignore_eos = true;
    (void)engine->generate(warm);
    return engine;
  };

  json m;
  std::size_t batch_tokens = 0;  // as the engine resolves it (0 asks for its backend's default)
  {
    auto probe = open_engine(4096, o_.mtp);
    m["model"] = model_info(*probe, mut.dir, mut.label);
    batch_tokens = probe->options().max_batch_tokens;
  }
  {
    // Weights that fit in the last-level cache are not read from DRAM each step: the DRAM
    // bandwidth roofline does not bound such a model (its decode can exceed it).
    const std::size_t llc = last_level_cache_bytes();
    m["model"]["weights_fit_in_last_level_cache"] =
        llc > 0 && m["model"]["weight_bytes_per_step"].get<std::size_t>() < llc;
  }
  m["model"]["random_weights"] = mut.random;
  if (mut.random) m["model"]["random_spec"] = mut.random_spec;
  m["model"]["load_s"] = load_s;
  eng::EngineOptions defaults;
  m["engine"] = {{"threads", threads_},
                 {"max_batch_tokens", batch_tokens},
                 {"max_num_seqs", defaults.max_num_seqs},
                 {"prefix_caching", o_.prefix_caching},
                 {"grammar_lm_head", o_.grammar_lm_head},
                 {"fresh_engine_per_test", true},
                 {"mtp_depth", kEngineHasMtp ? o_.mtp : 0}};

  json wl = json::array();
  for (const auto& w : built) {
    const std::size_t need = 2 * (w.prompt.size() + w.max_tokens) + 256;
    json r;
    {
      auto engine = open_engine(need, o_.mtp);
      r = run_workload(*engine, w);
    }
    if (r.contains("acceptance_by_position")) {
      // The same workload without drafting, in the same run: the baseline of the draft speedup.
      log_("  " + w.name + ": baseline without drafting");
      auto engine = open_engine(need, 0);
      const json b = run_workload(*engine, w);
      r["no_draft"] = {{"decode_tok_s", b["decode_tok_s"]},
                       {"decode_tok_s_runs", b["decode_tok_s_runs"]},
                       {"ttft_warm_s", b["ttft_warm_s"]},
                       {"cpu_share", b["cpu_share"]}};
      const double base = b["decode_tok_s"].get<double>();
      r["draft_speedup"] = base > 0 ? r["decode_tok_s"].get<double>() / base : 0.0;
    }
    wl.push_back(r);
  }
  m["workloads"] = wl;
  m["skipped_workloads"] = skipped;
  if (mut.run_concurrency && !o_.concurrency.empty()) {
    std::size_t sum = 0, cmax = *std::max_element(o_.concurrency.begin(), o_.concurrency.end());
    for (std::size_t i = 0; i < cmax; ++i)
      sum += short_mix[i % short_mix.size()].prompt.size() + short_mix[i % short_mix.size()].max_tokens + 64;
    auto engine = open_engine(2 * sum + 256, o_.mtp);
    m["concurrency"] = run_concurrency(*engine, short_mix);
  }
  if (!o_.pp.empty() && !o_.tg.empty()) {
    std::size_t need = 0;
    for (std::size_t d : o_.depth)
      for (std::size_t p : o_.pp)
        for (std::size_t t : o_.tg)
          if (d + p + t <= cfg.max_position_embeddings) need = std::max(need, 2 * (d + p + t) + 256);
    auto engine = open_engine(need, o_.mtp);
    m["pp_tg"] = run_pp_tg(*engine, *tok);
  }
  bool drafted = false;
  for (const auto& w : m["workloads"]) drafted = drafted || w.contains("acceptance_by_position");
  if (drafted)
    m["drafting"] = {{"available", true}, {"mtp_depth", o_.mtp}, {"note", "MTP drafting, greedy verification"}};
  else
    m["drafting"] = {{"available", false},
                     {"note", !o_.mtp          ? "no drafting requested (--mtp 0)"
                              : !kEngineHasMtp ? "MTP drafting requested but this engine build has no drafting"
                                               : "MTP drafting requested but the engine proposed no drafts "
                                                 "(no MTP module in this model?)"}};
  return m;
}

json Runner::run() {
  const eng::Stopwatch total;
  threads_ = o_.threads ? o_.threads : std::max(1u, std::thread::hardware_concurrency());
  for (const auto& n : o_.workloads)
    if (std::find(workload_names().begin(), workload_names().end(), n) == workload_names().end())
      throw std::invalid_argument("bench: unknown workload \"" + n +
                                  "\" (qa, code, json-kie, hungarian, long-rag-8k, long-rag-32k)");
  if (o_.models.empty()) throw std::invalid_argument("bench: no model given");
  inputs_ = load_workload_inputs(o_.samples_dir, o_.invoice_schema, o_.seed);

  json rep;
  rep["bench"] = "quarry bench";
  rep["schema_version"] = 1;
  rep["quarry_version"] = QUARRY_VERSION;
  rep["commit"] = o_.commit.empty() ? "unknown" : o_.commit;
  rep["started_utc"] = utc_now();
  const auto probe = eng::make_backend({eng::parse_device(o_.device), threads_});
  rep["machine"] = machine_info(threads_, *probe);
  rep["options"] = {{"preset", o_.preset_name},
                    {"scaling", o_.scaling_note},
                    {"workloads", o_.workloads},
                    {"runs", o_.runs},
                    {"warmup_runs", 1},
                    {"context_scale", o_.context_scale},
                    {"output_scale", o_.output_scale},
                    {"concurrency", o_.concurrency},
                    {"pp", o_.pp},
                    {"tg", o_.tg},
                    {"depth", o_.depth},
                    {"mtp", o_.mtp},
                    {"prefix_caching", o_.prefix_caching},
                    {"seed", o_.seed},
                    {"sampling", "greedy (temperature 0), thinking off"}};

  log_("measuring memory bandwidth and GEMM FLOP/s on " + probe->description());
  std::vector<double> bw = probe->probe_bandwidth_gb_s(o_.bandwidth_mib << 20, 5);
  const std::string model_dtype = eng::load_model_config(o_.models[0] / "config.json").torch_dtype;
  const eng::DType wt = weight_type(model_dtype);
  const std::size_t gm = 256, gk = 1024, gn = 1024;
  const double gemm = median(probe->probe_matmul_gflops(gm, gk, gn, wt, eng::parse_compute(o_.compute), 3)) * 1e9;

  std::vector<ModelUnderTest> muts;
  for (std::size_t i = 0; i < o_.models.size(); ++i) {
    ModelUnderTest m;
    m.dir = o_.models[i];
    m.label = m.dir.filename().string();
    if (m.label.empty()) m.label = m.dir.parent_path().filename().string();
    m.workloads = o_.workloads;
    m.run_concurrency = i == 0;
    muts.push_back(m);
  }
  for (const auto& s : o_.random_models) {
    ModelUnderTest m;
    m.dir = write_random_model(s, o_.work_dir, o_.models[0], log_);
    m.label = m.dir.filename().string() + " (random weights)";
    m.random = true;
    m.random_spec = {{"preset", s.preset}, {"layers", s.layers}, {"dtype", s.dtype}, {"seed", s.seed},
                     {"tokenizer", "copied from " + o_.models[0].filename().string()}};
    for (const auto& n : o_.workloads)
      if (std::find(o_.random_model_workloads.begin(), o_.random_model_workloads.end(), n) !=
          o_.random_model_workloads.end())
        m.workloads.push_back(n);
    muts.push_back(m);
  }
  json models = json::array();
  for (const auto& m : muts) models.push_back(run_model(m));

  {
    auto more = probe->probe_bandwidth_gb_s(o_.bandwidth_mib << 20, 5);
    bw.insert(bw.end(), more.begin(), more.end());
  }
  const double bw_best = *std::max_element(bw.begin(), bw.end());
  rep["roofline"] = {
      {"memory_bandwidth_gb_s", bw_best},
      {"memory_bandwidth_gb_s_median", median(bw)},
      {"memory_bandwidth_runs", bw.size()},
      {"memory_bandwidth_method",
       "Backend::probe_bandwidth_gb_s over " + std::to_string(o_.bandwidth_mib) +
           " MiB (CPU: multi-threaded streaming read; GPU: device copy, bytes read + written), 5 runs before and 5 "
           "after the models; best run used"},
      {"gemm_gflop_s", gemm / 1e9},
      {"gemm_shape", {gm, gk, gn}},
      {"gemm_weights", model_dtype},
  };
  // Roofline of every decode figure: tok/s <= bandwidth / bytes read per step.
  for (auto& m : models) {
    for (auto& w : m["workloads"]) {
      const double bps = w["bytes_per_decode_step"].get<double>();
      // With drafting a step emits several tokens: the ceiling scales with tokens per step.
      const double roof = bps > 0 ? bw_best * 1e9 / bps * w["tokens_per_decode_step"].get<double>() : 0.0;
      w["roofline_tok_s"] = roof;
      w["fraction_of_roofline"] = roof > 0 ? w["decode_tok_s"].get<double>() / roof : 0.0;
      w["fraction_of_gemm_peak_cold"] = w["prefill_gflop_s_cold"].get<double>() / (gemm / 1e9);
    }
    if (m.contains("concurrency"))
      for (auto& l : m["concurrency"]) {
        (void)l;  // achieved_gb_s of a level: decode bytes / wall time of the batch (set in run_concurrency)
      }
    if (m.contains("pp_tg"))
      for (auto& t : m["pp_tg"])
        if (!t.contains("skipped")) {
          t["tg_fraction_of_roofline"] = t["tg_achieved_gb_s"].get<double>() / bw_best;
          t["pp_fraction_of_gemm_peak"] = t["prefill_gflop_s"].get<double>() / (gemm / 1e9);
        }
  }
  rep["models"] = models;
  rep["machine"]["load_average_at_end"] = load_average();
  rep["finished_utc"] = utc_now();
  rep["wall_s"] = total.seconds();
  return rep;
}

}  // namespace

json run_bench(const BenchOptions& options, const std::function<void(std::string_view)>& log) {
  Runner r(options, log);
  return r.run();
}

}  // namespace quarry::bench
