// bench_prefix: prefix caching and continuous batching on long-RAG-shaped workloads (BENCH.md:
// long-rag-8k = ~7,500-token context + question, long-rag-32k = ~30,000-token context + question,
// 256 output tokens; greedy) and the short qa shape, on a random-weight Qwen3-layout checkpoint
// small enough for a long context on a few cores (written at bench time into --work, not committed;
// the default model's context, 8,192 positions, is too short for 32k). Per workload, in one run:
//
//   1. TTFT, sequential: N questions over one document, each submitted after the previous one
//      finished, on a fresh engine. The first is cold (the whole document is prefilled); the later
//      ones find the document's blocks in the prefix cache. Reported: first TTFT, median of the later
//      TTFTs, their ratio (target <= 5%), and prompt tokens computed / served from the cache.
//   2. Prefill accounting, concurrent: N questions over one document submitted together on a fresh
//      engine. Reported: prompt tokens computed vs document + N x (question + one block).
//   3. Concurrency sweep: c = 1, 2, 4, 8 sequences at once (new questions over the document cached
//      by step 2, on its engine; for qa, independent short prompts on a fresh engine). Reported: aggregate tok/s (all generated tokens / wall time
//      from submit to the last finish), its ratio to c = 1, the same per CPU second of the process
//      (all threads; steadier than wall time on a shared machine), per-request median TTFT and decode
//      tok/s. Median over --runs runs.
//
// Token ids are drawn from a seeded generator (the weights are random too: the content does not
// change the cost). EOS is ignored so that every request generates exactly --max-tokens tokens.
//
// Usage: bench_prefix [--workloads long-rag-8k,long-rag-32k,qa] [--questions 4] [--max-tokens 256]
//                     [--question-tokens 20] [--concurrency 1,2,4,8] [--runs 3] [--threads 2]
//                     [--max-batch-tokens 256] [--hidden 64] [--intermediate 128] [--layers 1]
//                     [--heads 1] [--kv-heads 1] [--head-dim 16] [--vocab 151936] [--dtype bf16]
//                     [--work DIR] [--out DIR] [--commit HASH]
// Writes OUT/bench_prefix.json and OUT/bench_prefix.md (OUT defaults to the current folder).
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/backend/cpu/gemm.hpp"
#include "engine/models/random_checkpoint.hpp"
#include "engine/runtime/engine.hpp"
#include "bench/common/machine_info.hpp"
#include "bench/common/options.hpp"
#include "pipeline/bench/harness.hpp"

namespace fs = std::filesystem;
using namespace quarry::engine;

using quarry::bench::median;
using quarry::bench::cpu_model;
using quarry::bench::git_commit;

namespace {

std::vector<std::size_t> parse_list(const std::string& s) {
  std::vector<std::size_t> v;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) v.push_back(std::stoul(item));
  return v;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) v.push_back(item);
  return v;
}

struct Options {
  std::vector<std::string> workloads = {"long-rag-8k", "long-rag-32k", "qa"};
  std::size_t questions = 4, max_tokens = 256, question_tokens = 20, runs = 3, threads = 2, max_batch_tokens = 256;
  std::vector<std::size_t> concurrency = {1, 2, 4, 8};
  // Attention over 30,000 positions dominates a cold prefill (quadratic; the CPU attention kernel runs
  // at a few GFLOP/s): one layer of one 16-wide head keeps the 32k workload near a minute on 2 cores.
  std::size_t hidden = 64, intermediate = 128, layers = 1, heads = 1, kv_heads = 1, head_dim = 16, vocab = 151936;
  std::string dtype = "bf16";
  fs::path work = fs::path(QUARRY_BINARY_DIR) / "bench_work", out = ".";
  std::string commit;  ///< recorded commit (default: git rev-parse of the source tree)
};

class Tokens {
 public:
  Tokens(std::size_t vocab, std::uint64_t seed) : rng_(seed), dist_(0, static_cast<TokenId>(vocab - 1)) {}
  std::vector<TokenId> operator()(std::size_t n) {
    std::vector<TokenId> v(n);
    for (auto& t : v) t = dist_(rng_);
    return v;
  }

 private:
  std::mt19937_64 rng_;
  std::uniform_int_distribution<TokenId> dist_;
};

GenerationRequest request(const std::vector<TokenId>& doc, const std::vector<TokenId>& question, std::size_t max_tokens) {
  GenerationRequest r;
  r.prompt = doc;
  r.prompt.insert(r.prompt.end(), question.begin(), question.end());
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  return r;
}

/// Submits all, steps until all are done; returns (results in order, wall seconds).
std::pair<std::vector<GenerationResult>, double> run_together(Engine& e, const std::vector<GenerationRequest>& reqs) {
  const Stopwatch sw;
  std::map<RequestId, std::size_t> index;
  for (std::size_t i = 0; i < reqs.size(); ++i) index[e.submit(reqs[i])] = i;
  std::vector<GenerationResult> out(reqs.size());
  while (e.has_unfinished())
    for (auto& f : e.step()) {
      if (!f.error.empty()) throw std::runtime_error("request failed: " + f.error);
      out[index.at(f.id)] = std::move(f.result);
    }
  return {std::move(out), sw.seconds()};
}

/// CPU seconds of the whole process (all threads): steadier than wall time on a shared machine.
double process_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

std::string fmt(double v, int prec = 3) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(prec) << v;
  return s.str();
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  const int rc = quarry::bench::parse_options(
      argc, argv, "bench_prefix",
      "usage: bench_prefix [--workloads long-rag-8k,long-rag-32k,qa] [--questions 4] [--max-tokens 256]\n"
      "         [--question-tokens 20] [--concurrency 1,2,4,8] [--runs 3] [--threads 2]\n"
      "         [--max-batch-tokens 256] [--hidden 64] [--intermediate 128] [--layers 1] [--heads 1]\n"
      "         [--kv-heads 1] [--head-dim 16] [--vocab 151936] [--dtype bf16] [--work DIR] [--out DIR]\n"
      "         [--commit HASH]\n",
      [&](const std::string& a, const std::string& v) {
        if (a == "--workloads") o.workloads = split(v);
        else if (a == "--questions") o.questions = std::stoul(v);
        else if (a == "--max-tokens") o.max_tokens = std::stoul(v);
        else if (a == "--question-tokens") o.question_tokens = std::stoul(v);
        else if (a == "--concurrency") o.concurrency = parse_list(v);
        else if (a == "--runs") o.runs = std::stoul(v);
        else if (a == "--threads") o.threads = std::stoul(v);
        else if (a == "--max-batch-tokens") o.max_batch_tokens = std::stoul(v);
        else if (a == "--hidden") o.hidden = std::stoul(v);
        else if (a == "--intermediate") o.intermediate = std::stoul(v);
        else if (a == "--layers") o.layers = std::stoul(v);
        else if (a == "--heads") o.heads = std::stoul(v);
        else if (a == "--kv-heads") o.kv_heads = std::stoul(v);
        else if (a == "--head-dim") o.head_dim = std::stoul(v);
        else if (a == "--vocab") o.vocab = std::stoul(v);
        else if (a == "--dtype") o.dtype = v;
        else if (a == "--work") o.work = v;
        else if (a == "--out") o.out = v;
        else if (a == "--commit") o.commit = v;
        else return false;
        return true;
      });
  if (rc >= 0) return rc;
  if (o.questions < 2 || o.runs == 0 || o.concurrency.empty()) {
    std::cerr << "bench_prefix: need --questions >= 2, --runs >= 1, a --concurrency list\n";
    return 1;
  }
  if (o.commit.empty()) o.commit = git_commit();
  const DType dtype = o.dtype == "f32" ? DType::f32 : o.dtype == "f16" ? DType::f16 : DType::bf16;

  // The checkpoint: Qwen3 layout, the preset's 40,960 positions, the requested shape.
  auto cfg = nlohmann::json::parse(preset_config_json("tiny"));
  cfg["hidden_size"] = o.hidden;
  cfg["intermediate_size"] = o.intermediate;
  cfg["num_hidden_layers"] = o.layers;
  cfg["max_window_layers"] = o.layers;
  cfg["num_attention_heads"] = o.heads;
  cfg["num_key_value_heads"] = o.kv_heads;
  cfg["head_dim"] = o.head_dim;
  cfg["vocab_size"] = o.vocab;
  const std::string model_name = "qwen3-h" + std::to_string(o.hidden) + "-l" + std::to_string(o.layers) + "-v" +
                                 std::to_string(o.vocab) + "-" + o.dtype;
  const fs::path model_dir = o.work / (model_name + "-random");
  if (!fs::exists(model_dir / "model.safetensors")) {
    std::cerr << "writing " << model_dir << " ...\n";
    write_random_checkpoint(cfg.dump(), model_dir, dtype, 1);
  }
  EngineOptions eo;
  eo.n_threads = o.threads;
  eo.max_batch_tokens = o.max_batch_tokens;
  eo.max_kv_tokens = 40960 + 16 * (o.question_tokens + o.max_tokens);
  auto fresh = [&] { return Engine::open(model_dir, nullptr, eo); };
  const std::size_t block = fresh()->kv_cache().spec().block_size;

  nlohmann::json report = {{"bench", "bench_prefix"},
                           {"machine", {{"cpu", cpu_model()}, {"hardware_threads", std::thread::hardware_concurrency()}}},
                           {"commit", o.commit},
                           {"model", {{"name", model_name}, {"config", cfg}}},
                           {"dtype", o.dtype},
                           {"threads", o.threads},
                           {"device", fresh()->backend().description()},
                           {"max_batch_tokens", o.max_batch_tokens},
                           {"block_size", block},
                           {"questions", o.questions},
                           {"question_tokens", o.question_tokens},
                           {"max_tokens", o.max_tokens},
                           {"runs", o.runs},
                           {"workloads", nlohmann::json::array()}};
  std::ostringstream md;
  md << "# bench_prefix\n\n"
     << "Model: random-weight " << model_name << " (hidden " << o.hidden << ", " << o.layers << " layers, "
     << o.heads << "/" << o.kv_heads << " heads x " << o.head_dim << ", vocab " << o.vocab << "), " << o.threads
     << " threads, " << cpu_model() << ", commit " << o.commit << ", max_batch_tokens " << o.max_batch_tokens
     << ", block " << block << ", " << o.max_tokens << " output tokens per request (greedy, EOS ignored), "
     << o.questions << " questions of " << o.question_tokens << " tokens.\n\n";

  Tokens tokens(std::min<std::size_t>(o.vocab, 150000), 2026);
  for (const auto& w : o.workloads) {
    std::size_t doc_tokens = 0;
    if (w == "long-rag-8k") doc_tokens = 7500;
    else if (w == "long-rag-32k") doc_tokens = 30000;
    else if (w != "qa") {
      std::cerr << "bench_prefix: unknown workload " << w << " (long-rag-8k, long-rag-32k, qa)\n";
      return 1;
    }
    std::cerr << w << " ...\n";
    nlohmann::json wj = {{"name", w}, {"document_tokens", doc_tokens}};
    md << "## " << w << "\n\n";
    const auto doc = tokens(doc_tokens);
    std::unique_ptr<Engine> engine;

    if (doc_tokens > 0) {
      // 1. Sequential TTFT.
      auto e = fresh();
      std::vector<double> ttft, ttft_cpu;
      nlohmann::json rows = nlohmann::json::array();
      md << "Sequential questions over one document (fresh engine):\n\n"
         << "| question | TTFT s | TTFT CPU s | prompt tokens | cached | computed | decode tok/s |\n"
         << "| --- | --- | --- | --- | --- | --- | --- |\n";
      for (std::size_t q = 0; q < o.questions; ++q) {
        auto req = request(doc, tokens(o.question_tokens), o.max_tokens);
        double cpu_first = -1.0;
        req.on_token = [&](TokenId) {
          if (cpu_first < 0) cpu_first = process_cpu_s();
        };
        const double cpu0 = process_cpu_s();
        const auto r = e->generate(req);
        ttft.push_back(r.stats.ttft_s);
        ttft_cpu.push_back(cpu_first - cpu0);
        rows.push_back({{"ttft_s", r.stats.ttft_s},
                        {"ttft_cpu_s", cpu_first - cpu0},
                        {"prompt_tokens", r.stats.prompt_tokens},
                        {"cached_tokens", r.stats.cached_tokens},
                        {"prefill_tokens", r.stats.prefill_tokens},
                        {"decode_tok_s", r.stats.decode_tok_s()}});
        md << "| " << q + 1 << " | " << fmt(r.stats.ttft_s, 4) << " | " << fmt(ttft_cpu.back(), 4) << " | "
           << r.stats.prompt_tokens << " | "
           << r.stats.cached_tokens << " | " << r.stats.prefill_tokens << " | " << fmt(r.stats.decode_tok_s(), 1)
           << " |\n";
      }
      const double later = median(std::vector<double>(ttft.begin() + 1, ttft.end()));
      const double later_cpu = median(std::vector<double>(ttft_cpu.begin() + 1, ttft_cpu.end()));
      wj["sequential"] = {{"requests", rows},
                          {"first_ttft_s", ttft[0]},
                          {"later_ttft_median_s", later},
                          {"later_over_first", later / ttft[0]},
                          {"first_ttft_cpu_s", ttft_cpu[0]},
                          {"later_ttft_cpu_median_s", later_cpu},
                          {"later_over_first_cpu", later_cpu / ttft_cpu[0]}};
      md << "\nTTFT first " << fmt(ttft[0], 4) << " s, later (median) " << fmt(later, 4) << " s: later/first = "
         << fmt(100.0 * later / ttft[0], 2) << "% (target <= 5%); in process CPU time " << fmt(ttft_cpu[0], 4)
         << " s vs " << fmt(later_cpu, 4) << " s = " << fmt(100.0 * later_cpu / ttft_cpu[0], 2) << "%.\n\n";

      // 2. Concurrent prefill accounting.
      engine = fresh();
      Engine* c = engine.get();
      std::vector<GenerationRequest> reqs;
      std::size_t question_total = 0;
      for (std::size_t q = 0; q < o.questions; ++q) {
        reqs.push_back(request(doc, tokens(o.question_tokens), o.max_tokens));
        question_total += o.question_tokens;
      }
      const auto [res, wall] = run_together(*c, reqs);
      const std::size_t computed = c->stats().prefill_tokens;
      const std::size_t bound = doc_tokens + o.questions * block + question_total;
      const std::size_t no_cache = o.questions * (doc_tokens + o.question_tokens);
      std::vector<double> tt;
      for (const auto& r : res) tt.push_back(r.stats.ttft_s);
      wj["concurrent"] = {{"prefill_tokens_computed", computed},
                          {"bound_doc_plus_n_question_plus_block", bound},
                          {"without_cache", no_cache},
                          {"prefix_hit_tokens", c->stats().prefix_hit_tokens},
                          {"wall_s", wall},
                          {"ttft_s", tt}};
      md << o.questions << " questions submitted together (fresh engine): prompt tokens computed " << computed
         << " (bound: document + N x (question + block) = " << bound << "; without the cache " << no_cache
         << "), served from the cache " << c->stats().prefix_hit_tokens << ", wall " << fmt(wall, 2) << " s.\n\n";
    }

    // 3. Concurrency sweep: for the RAG shapes on the engine of step 2 (the document is cached).
    if (!engine) engine = fresh();
    Engine* e = engine.get();
    nlohmann::json sweep = nlohmann::json::array();
    double base = 0.0, base_cpu = 0.0;
    md << "Concurrency (" << (doc_tokens > 0 ? "questions over the cached document" : "independent short prompts")
       << ", median of " << o.runs << " runs):\n\n"
       << "| sequences | aggregate tok/s | x vs 1 | tokens / CPU s | x vs 1 | TTFT p50 s | decode tok/s per request (median) |\n"
       << "| --- | --- | --- | --- | --- | --- | --- |\n";
    for (std::size_t n : o.concurrency) {
      std::vector<double> agg, agg_cpu, ttft, dec;
      for (std::size_t run = 0; run < o.runs; ++run) {
        std::vector<GenerationRequest> reqs;
        for (std::size_t i = 0; i < n; ++i) reqs.push_back(request(doc, tokens(o.question_tokens), o.max_tokens));
        const double cpu0 = process_cpu_s();
        const auto [res, wall] = run_together(*e, reqs);
        const double cpu = process_cpu_s() - cpu0;
        std::size_t generated = 0;
        for (const auto& r : res) {
          generated += r.stats.generated_tokens;
          ttft.push_back(r.stats.ttft_s);
          dec.push_back(r.stats.decode_tok_s());
        }
        agg.push_back(static_cast<double>(generated) / wall);
        agg_cpu.push_back(static_cast<double>(generated) / cpu);
      }
      const double a = median(agg), ac = median(agg_cpu);
      if (base == 0.0) {
        base = a;
        base_cpu = ac;
      }
      sweep.push_back({{"sequences", n}, {"aggregate_tok_s", a}, {"aggregate_runs", agg}, {"ratio_to_first", a / base},
                       {"tokens_per_cpu_s", ac}, {"cpu_ratio_to_first", ac / base_cpu},
                       {"ttft_p50_s", median(ttft)}, {"decode_tok_s_median", median(dec)}});
      md << "| " << n << " | " << fmt(a, 1) << " | " << fmt(a / base, 2) << " | " << fmt(ac, 1) << " | "
         << fmt(ac / base_cpu, 2) << " | " << fmt(median(ttft), 4) << " | " << fmt(median(dec), 1) << " |\n";
    }
    wj["concurrency"] = sweep;
    md << "\n";
    report["workloads"].push_back(wj);
  }

  fs::create_directories(o.out);
  std::ofstream(o.out / "bench_prefix.json") << report.dump(2) << "\n";
  std::ofstream(o.out / "bench_prefix.md") << md.str();
  std::cout << md.str();
  return 0;
}
