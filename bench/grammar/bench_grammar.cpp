// Constrained-decoding bench: schema compile time and per-token bitmask time over random legal walks
// with a real vocabulary, single-threaded. Writes JSON (machine-readable) and a Markdown table.
//
// usage: bench_grammar [--tokenizer TOKENIZER_JSON] [--walks N] [--max-tokens N] [--out PREFIX]
//                      [--precompute-full-walk] [--cpu-time] [--trie-only] [--repeats N] [SCHEMA...]
//        (default: the invoice schema and tests/grammar/schemas/*.json)
//
// Every schema is measured twice in the same run, with the two node-table builders
// (NodeTableMode): "before" = the full walk over the sorted vocabulary per grammar position,
// "after" = the trie walk that settles whole subtrees (--trie-only: "after" alone). Reported per schema and builder (medians of
// several runs where it says so):
//   compile_ms        schema -> grammar (median of 21 compiles)
//   precompute_ms     building every per-node adaptive mask table eagerly (CompiledGrammar::warm_up);
//                     not needed (tables fill lazily), reported like XGrammar's compile-with-cache;
//                     for the full walk only with --precompute-full-walk (up to a minute per schema)
//   cold p50/p99/max  bitmask µs per token over the walks, caches filled lazily along the way;
//                     with --repeats N the walks run N times, each on a fresh compiled grammar, and
//                     the medians of the N p50 / p99 / max are reported (the JSON has each run's)
//                     (wall clock; with --cpu-time the thread's CPU time, which leaves out waits for
//                     a core on a shared machine and adds about 0.1-0.5 µs of clock overhead; compile,
//                     precompute and vocabulary preprocessing are then CPU time too)
//   warm p50/p99/max  the same walks again with the caches filled (the steady state of a server)
//   baseline_us       the uncached reference mask (a full vocabulary walk per token), median over
//                     sampled states, and the ratio baseline / warm p50
// Vocabulary preprocessing (tokenizer.json -> sorted token table) is per tokenizer and reported once.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "quarry/version.hpp"

#include "engine/grammar/matcher.hpp"
#include "engine/grammar/random_walk.hpp"
#include "engine/tokenizer/tokenizer.hpp"

namespace eg = quarry::engine::grammar;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// Thread CPU time in µs: excludes the time the thread waits for a core on a loaded machine.
double cpu_us() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_nsec) / 1e3;
}

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  std::size_t k = static_cast<std::size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(k, v.size() - 1)];
}

std::string read(const fs::path& p) {
  std::ifstream in(p);
  if (!in) throw std::runtime_error("cannot read " + p.string());
  return {std::istreambuf_iterator<char>(in), {}};
}

}  // namespace

int main(int argc, char** argv) {
  std::string tokenizer = std::string(QUARRY_SHARED_DIR) + "/tokenizers/qwen3/tokenizer.json";
  int walks = 20;
  std::size_t max_tokens = 400;
  std::string out_prefix = "bench_grammar";
  std::vector<fs::path> schemas;
  bool compile_only = false;
  bool precompute_full = false;
  bool cpu_time = false;
  bool trie_only = false;
  int repeats = 1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--tokenizer") tokenizer = next();
    else if (a == "--walks") walks = std::stoi(next());
    else if (a == "--max-tokens") max_tokens = std::stoul(next());
    else if (a == "--out") out_prefix = next();
    else if (a == "--compile-only") compile_only = true;
    else if (a == "--precompute-full-walk") precompute_full = true;
    else if (a == "--cpu-time") cpu_time = true;
    else if (a == "--trie-only") trie_only = true;
    else if (a == "--repeats") repeats = std::max(1, std::stoi(next()));
    else if (a == "--help" || a == "-h") {
      std::cout << "usage: bench_grammar [--tokenizer TOKENIZER_JSON] [--walks N] [--max-tokens N] [--out PREFIX]\n"
                   "                     [--compile-only] [--precompute-full-walk] [--cpu-time] [--trie-only]\n"
                   "                     [--repeats N] [SCHEMA...]\n";
      return 0;
    } else schemas.push_back(a);
  }
  if (schemas.empty()) {
    fs::path shipped = fs::path(QUARRY_SOURCE_DIR) / "schemas/invoice.schema.json";
    fs::path dir = fs::path(QUARRY_SOURCE_DIR) / "tests/grammar/schemas";
    schemas.push_back(fs::exists(shipped) ? shipped : dir / "invoice.schema.json");
    std::vector<fs::path> rest;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().extension() == ".json" && e.path().filename() != "invoice.schema.json") rest.push_back(e.path());
    std::sort(rest.begin(), rest.end());
    schemas.insert(schemas.end(), rest.begin(), rest.end());
  }

  if (compile_only) {
    for (const fs::path& sp : schemas) {
      std::string text = read(sp);
      std::vector<double> compile;
      for (int k = 0; k < 51; ++k) {
        auto t = Clock::now();
        auto res = eg::compile_json_schema(text);
        compile.push_back(ms_since(t));
      }
      std::printf("%s: compile p50 %.3f ms, min %.3f ms\n", sp.filename().string().c_str(), pct(compile, 50), pct(compile, 0));
    }
    return 0;
  }
  auto t0 = Clock::now();
  auto tok = quarry::engine::Tokenizer::from_file(tokenizer);
  double load_ms = ms_since(t0);
  t0 = Clock::now();
  double c0 = cpu_us();
  auto info = eg::TokenizerInfo::from_tokenizer(*tok);
  double vocab_ms = cpu_time ? (cpu_us() - c0) / 1000.0 : ms_since(t0);

  nlohmann::json report;
  report["tokenizer"] = fs::path(tokenizer).parent_path().filename().string();
  report["quarry_version"] = QUARRY_VERSION;
  report["compiler"] = __VERSION__;
  report["hardware_threads"] = std::thread::hardware_concurrency();
  report["vocab_size"] = info->vocab_size();
  report["tokenizer_load_ms"] = load_ms;
  report["vocab_preprocess_ms"] = vocab_ms;
  report["threads"] = 1;
  report["clock"] = cpu_time ? "thread_cpu_time" : "wall";
  report["walks_per_schema"] = walks;
  report["schemas"] = nlohmann::json::array();
  std::cout << "vocabulary: " << info->vocab_size() << " ids, tokenizer load " << load_ms << " ms, preprocessing "
            << vocab_ms << " ms (once per tokenizer)\n\n";
  std::cout << "| schema | node tables | compile ms | precompute ms | tokens | cold p50 µs | cold p99 µs | cold max µs | warm p50 µs | warm p99 µs | warm max µs | uncached µs |\n";
  std::cout << "|---|---|---|---|---|---|---|---|---|---|---|---|\n";

  for (const fs::path& sp : schemas) {
    std::string text = read(sp);
    std::vector<double> compile;
    eg::SchemaCompileResult res;
    for (int k = 0; k < 21; ++k) {
      t0 = Clock::now();
      double c0 = cpu_us();
      res = eg::compile_json_schema(text);
      compile.push_back(cpu_time ? (cpu_us() - c0) / 1000.0 : ms_since(t0));
    }
    double compile_ms = pct(compile, 50);
    // Two node-table builders in the same run: the earlier full-vocabulary walk ("before") and the
    // trie walk with subtree decisions ("after").
    for (eg::NodeTableMode mode : {eg::NodeTableMode::kFullWalk, eg::NodeTableMode::kTrie}) {
      const bool full = mode == eg::NodeTableMode::kFullWalk;
      if (full && trie_only) continue;
      std::shared_ptr<eg::CompiledGrammar> cg;
      std::vector<double> cold, warm;
      std::vector<double> cold_p50s, cold_p99s, cold_maxs;
      std::size_t tokens = 0;
      auto timed = [&](std::vector<double>& out) {
        return [&out, cpu_time](eg::GrammarMatcher& m) {
          std::vector<std::uint32_t> mask(m.compiled().tokenizer().mask_words());
          if (cpu_time) {
            double c = cpu_us();
            m.fill_bitmask(mask);
            out.push_back(cpu_us() - c);
            return;
          }
          auto s = Clock::now();
          m.fill_bitmask(mask);
          out.push_back(std::chrono::duration<double, std::micro>(Clock::now() - s).count());
        };
      };
      // Cold: lazily filled caches, a fresh compiled grammar per repeat.
      for (int rep = 0; rep < repeats; ++rep) {
        cg = std::make_shared<eg::CompiledGrammar>(res.grammar, info, res, mode);
        cold.clear();
        tokens = 0;
        for (int w = 0; w < walks; ++w) {
          std::mt19937_64 rng(1000 + w);
          auto r = eg::random_walk(cg, rng, max_tokens, {}, timed(cold));
          tokens += r.tokens;
        }
        cold_p50s.push_back(pct(cold, 50));
        cold_p99s.push_back(pct(cold, 99));
        cold_maxs.push_back(pct(cold, 100));
      }
      // Warm: the same walks, caches filled.
      for (int w = 0; w < walks; ++w) {
        std::mt19937_64 rng(1000 + w);
        eg::random_walk(cg, rng, max_tokens, {}, timed(warm));
      }
      // Eager precompute on a fresh compiled grammar (skipped for the full walk unless asked: up to
      // a minute per schema).
      double precompute_ms = -1;
      if (!full || precompute_full) {
        auto cg2 = std::make_shared<eg::CompiledGrammar>(res.grammar, info, res, mode);
        t0 = Clock::now();
        double p0 = cpu_us();
        cg2->warm_up();
        precompute_ms = cpu_time ? (cpu_us() - p0) / 1000.0 : ms_since(t0);
      }
      // Baseline: uncached full-vocabulary walk on sampled states.
      std::vector<double> base;
      {
        std::mt19937_64 rng(77);
        std::vector<std::uint32_t> mask(info->mask_words());
        int k = 0;
        eg::random_walk(cg, rng, max_tokens, {}, [&](eg::GrammarMatcher& m) {
          if (k++ % 7 || base.size() >= 30) return;
          auto s = Clock::now();
          m.fill_bitmask_uncached(mask);
          base.push_back(std::chrono::duration<double, std::micro>(Clock::now() - s).count());
        });
      }
      double base_med = pct(base, 50);
      const char* label = full ? "before (full walk)" : "after (trie)";
      nlohmann::json row = {{"schema", sp.filename().string()},
                            {"node_tables", full ? "full_walk" : "trie"},
                            {"compile_ms", compile_ms},
                            {"precompute_ms", precompute_ms},
                            {"grammar_nodes", res.grammar->nodes.size()},
                            {"tokens", tokens},
                            {"cold_p50_us", pct(cold_p50s, 50)},
                            {"cold_p99_us", pct(cold_p99s, 50)},
                            {"cold_max_us", pct(cold_maxs, 50)},
                            {"cold_repeats", repeats},
                            {"cold_p99_us_per_repeat", cold_p99s},
                            {"warm_p50_us", pct(warm, 50)},
                            {"warm_p99_us", pct(warm, 99)},
                            {"warm_max_us", pct(warm, 100)},
                            {"baseline_uncached_p50_us", base_med},
                            {"baseline_over_warm_p50", base_med / std::max(1e-9, pct(warm, 50))},
                            {"cache", {{"hits", cg->stats().hits}, {"misses", cg->stats().misses}, {"node_tables", cg->stats().node_tables}}}};
      report["schemas"].push_back(row);
      std::printf("| %s | %s | %.3f | %s | %zu | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.0f |\n", sp.filename().string().c_str(),
                  label, compile_ms, precompute_ms < 0 ? "-" : std::to_string(static_cast<long>(precompute_ms + 0.5)).c_str(),
                  tokens, pct(cold_p50s, 50), pct(cold_p99s, 50), pct(cold_maxs, 50), pct(warm, 50), pct(warm, 99), pct(warm, 100), base_med);
      std::fflush(stdout);
    }
  }
  std::ofstream(out_prefix + ".json") << report.dump(2) << "\n";
  std::cout << "\nwrote " << out_prefix << ".json\n";
  return 0;
}
