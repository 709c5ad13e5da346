// bench_mtp: MTP speculative decoding on the default model, against no drafting in the same run.
//
// Workloads (BENCH.md; greedy, thinking off, single stream):
//   json-kie  the sample invoices (samples/invoices, every format, through the extractors) -> JSON by
//             schemas/invoice.schema.json, constrained; the model's "kie" prompt;
//   qa        the questions of samples/questions against the first ~1,500 characters of the services
//             agreement, answer by schemas/rag_answer.schema.json (constrained); the "rag" prompt;
//   long-rag  the same questions against the whole long sample (samples/long/services-agreement.pdf).
// For each workload and each draft depth cap (--depths, 0 = no drafting): 1 warm-up pass + --runs
// measured passes over all its requests; per pass, decode tok/s = output tokens after the first /
// decode wall time (summed over the requests); the median over passes is reported with its ratio to
// depth 0. Acceptance per draft position, mean acceptance length (tokens per verify step), verify
// steps and the draft / verify time split come from the measured passes. Outputs are checked
// token-identical to depth 0 (lossless) and any difference is reported.
//
// The machine may be shared: besides wall-clock decode tok/s, each pass also reports decode tok/s over
// process CPU time (--threads 1 makes that the work done): CPU seconds of the request minus CPU seconds
// of the same request stopped after its first token (the prefill), which is robust to other processes.
//
// Usage: bench_mtp [--model DIR] [--depths 0,2,4] [--runs 3] [--threads 2] [--workloads json-kie,qa,long-rag]
//                  [--max-docs N] [--max-questions N] [--draft-vocab N (0: the engine's default)]
//                  [--compute auto|exact|bf16] [--grammar-lm-head on|off] [--out DIR]
// Writes OUT/bench_mtp.json and OUT/bench_mtp.md.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "engine/runtime/engine.hpp"
#include "bench/common/options.hpp"
#include "pipeline/bench/harness.hpp"
#include "extractors/extract.hpp"

namespace fs = std::filesystem;
using namespace quarry::engine;

using quarry::bench::median;

namespace {

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error(p.string() + ": cannot open");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, sep);)
    if (!x.empty()) out.push_back(x);
  return out;
}

std::string document_text(const fs::path& p) {
  auto d = quarry::extract_file(p);
  if (!d) throw std::runtime_error(p.string() + ": extraction failed");
  return d->text();
}

struct Workload {
  std::string name;
  std::vector<std::vector<ChatMessage>> messages;
  std::string schema;
  std::size_t max_tokens = 256;
};

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

int main(int argc, char** argv) {
  fs::path model = fs::path(QUARRY_SOURCE_DIR) / "models/quarry-extract-11m", out = ".";
  std::vector<std::size_t> depths = {0, 2, 4};
  std::vector<std::string> workloads = {"json-kie", "qa", "long-rag"};
  std::size_t runs = 3, threads = 2, max_docs = 1000, max_questions = 3, draft_vocab = 0;
  Compute compute = Compute::automatic;
  bool grammar_lm_head = true;
  const int rc = quarry::bench::parse_options(
      argc, argv, "bench_mtp",
      "usage: bench_mtp [--model DIR] [--depths 0,2,4] [--runs 3] [--threads 2]\n"
      "         [--workloads json-kie,qa,long-rag] [--max-docs N] [--max-questions N]\n"
      "         [--draft-vocab N] [--compute auto|exact|bf16] [--grammar-lm-head on|off] [--out DIR]\n",
      [&](const std::string& a, const std::string& v) {
        if (a == "--model") model = v;
        else if (a == "--depths") {
          depths.clear();
          for (auto& d : split(v, ',')) depths.push_back(std::stoul(d));
        } else if (a == "--runs") runs = std::stoul(v);
        else if (a == "--threads") threads = std::stoul(v);
        else if (a == "--workloads") workloads = split(v, ',');
        else if (a == "--max-docs") max_docs = std::stoul(v);
        else if (a == "--max-questions") max_questions = std::stoul(v);
        else if (a == "--out") out = v;
        else if (a == "--draft-vocab") draft_vocab = std::stoul(v);
        else if (a == "--compute") compute = parse_compute(v);
        else if (a == "--grammar-lm-head") {
          if (v != "on" && v != "off") throw std::invalid_argument("takes on or off");
          grammar_lm_head = v == "on";
        } else {
          return false;
        }
        return true;
      });
  if (rc >= 0) return rc;
  if (std::find(depths.begin(), depths.end(), 0u) == depths.end()) depths.insert(depths.begin(), 0);
  const fs::path root(QUARRY_SOURCE_DIR);
  const auto prompts = nlohmann::json::parse(read_file(model / "prompts.json"));
  auto tok = Tokenizer::from_dir(model);

  std::vector<Workload> wls;
  for (const auto& name : workloads) {
    Workload w;
    w.name = name;
    if (name == "json-kie") {
      w.schema = read_file(root / "schemas/invoice.schema.json");
      w.max_tokens = 1024;
      std::vector<fs::path> docs;
      for (const auto& e : fs::directory_iterator(root / "samples/invoices")) docs.push_back(e.path());
      std::sort(docs.begin(), docs.end());
      // At most max_docs, spread evenly over the sorted list (languages and formats alternate in it).
      const std::size_t n = std::min(max_docs, docs.size());
      for (std::size_t i = 0; i < n; ++i)
        w.messages.push_back({{"system", prompts["kie"]["system"].get<std::string>()},
                              {"user", document_text(docs[i * docs.size() / n])}});
    } else if (name == "qa" || name == "long-rag") {
      w.schema = read_file(root / "schemas/rag_answer.schema.json");
      std::string doc = document_text(root / "samples/long/services-agreement.pdf");
      if (name == "qa") doc = doc.substr(0, std::min<std::size_t>(doc.size(), 1500));
      const auto qs = split(read_file(root / "samples/questions/services-agreement.txt"), '\n');
      const std::string user = prompts["rag"]["user"].get<std::string>();
      for (std::size_t q = 0; q < qs.size() && q < max_questions; ++q) {
        std::string u = user;
        u.replace(u.find("{document}"), 10, doc);
        u.replace(u.find("{question}"), 10, qs[q]);
        w.messages.push_back({{"system", prompts["rag"]["system"].get<std::string>()}, {"user", u}});
      }
    } else {
      std::cerr << "bench_mtp: unknown workload " << name << "\n";
      return 1;
    }
    wls.push_back(std::move(w));
  }

  nlohmann::json report = {{"model", model.filename().string()}, {"threads", threads}, {"runs", runs},
                            {"compute", compute_name(compute)}, {"grammar_lm_head", grammar_lm_head}};
  std::ostringstream md;
  md << "| workload | requests | depth | decode tok/s wall (median) | x depth 0 | decode tok per CPU s (median) | x depth 0 | mean acceptance length | accepted/proposed per position | forced drafts | draft s / verify s | lossless |\n"
     << "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
  for (const auto& w : wls) {
    double base = 0, cpu_base = 0;
    std::vector<std::vector<TokenId>> base_out;
    // One engine per depth, opened up front; the measured passes then alternate between the depths
    // (pass r of every depth before pass r + 1 of any), so that a change of load on a shared machine
    // falls on all of them alike.
    struct Arm {
      std::size_t depth = 0;
      std::unique_ptr<Engine> engine;
      std::vector<GenerationRequest> reqs;
      std::vector<double> prefill_cpu;  // CPU seconds of each request's prefill (stopped after 1 token)
      std::vector<double> tps, cpu_tps;
      std::vector<std::vector<TokenId>> outputs;
      EngineStats before;
    };
    std::vector<Arm> arms;
    std::size_t prompt_tokens = 0;
    for (std::size_t depth : depths) {
      Arm a;
      a.depth = depth;
      EngineOptions o;
      o.n_threads = threads;
      o.mtp_depth = depth;
      o.mtp_draft_vocab = draft_vocab;
      o.compute = compute;
      o.grammar_lm_head = grammar_lm_head;
      o.enable_prefix_caching = false;  // every pass computes its prompt: decode figures only
      a.engine = Engine::open(model, tok, o);
      prompt_tokens = 0;
      for (const auto& m : w.messages) {
        GenerationRequest r;
        r.prompt = tok->encode(tok->apply_chat_template(m, true, false));
        prompt_tokens += r.prompt.size();
        r.max_tokens = w.max_tokens;
        a.reqs.push_back(std::move(r));
      }
      for (auto r : a.reqs) {
        if (!w.schema.empty()) r.constraint = a.engine->json_schema_constraint(w.schema, true);
        r.max_tokens = 1;
        const double c0 = cpu_seconds();
        a.engine->generate(r);
        a.prefill_cpu.push_back(cpu_seconds() - c0);
      }
      arms.push_back(std::move(a));
    }
    for (std::size_t run = 0; run <= runs; ++run)
      for (Arm& a : arms) {
        if (run == 1) a.before = a.engine->stats();  // stats of the measured passes only
        std::size_t tokens = 0;
        double secs = 0, cpu = 0;
        a.outputs.clear();
        for (std::size_t i = 0; i < a.reqs.size(); ++i) {
          auto& r = a.reqs[i];
          if (!w.schema.empty()) r.constraint = a.engine->json_schema_constraint(w.schema, true);
          const double c0 = cpu_seconds();
          const auto res = a.engine->generate(r);
          cpu += std::max(0.0, cpu_seconds() - c0 - a.prefill_cpu[i]);
          tokens += res.tokens.size() > 0 ? res.tokens.size() - 1 : 0;
          secs += res.stats.decode_s;
          a.outputs.push_back(res.tokens);
        }
        if (run > 0) {
          a.tps.push_back(secs > 0 ? static_cast<double>(tokens) / secs : 0.0);
          a.cpu_tps.push_back(cpu > 0 ? static_cast<double>(tokens) / cpu : 0.0);
        }
      }
    for (Arm& a : arms) {
      const std::size_t depth = a.depth;
      const auto& reqs = a.reqs;
      const auto& outputs = a.outputs;
      const auto& before = a.before;
      const auto& tps = a.tps;
      const auto& cpu_tps = a.cpu_tps;
      const auto& s = a.engine->stats();
      const double med = median(tps), cpu_med = median(cpu_tps);
      if (depth == 0) {
        base = med;
        cpu_base = cpu_med;
        base_out = outputs;
      }
      std::size_t same = 0;
      for (std::size_t i = 0; i < outputs.size(); ++i) same += outputs[i] == base_out[i];
      nlohmann::json per_pos = nlohmann::json::array();
      std::string pos_md;
      for (std::size_t j = 0; j < s.draft_proposed.size(); ++j) {
        const std::size_t prop = s.draft_proposed[j] - (j < before.draft_proposed.size() ? before.draft_proposed[j] : 0);
        const std::size_t acc = s.draft_accepted[j] - (j < before.draft_accepted.size() ? before.draft_accepted[j] : 0);
        per_pos.push_back({{"position", j + 1}, {"proposed", prop}, {"accepted", acc},
                           {"acceptance", prop ? static_cast<double>(acc) / static_cast<double>(prop) : 0.0}});
        char buf[64];
        std::snprintf(buf, sizeof buf, "%s%.3f", j ? " / " : "", prop ? static_cast<double>(acc) / static_cast<double>(prop) : 0.0);
        pos_md += buf;
      }
      const std::size_t verify = s.verify_steps - before.verify_steps;
      const std::size_t accepted = s.accepted_tokens - before.accepted_tokens;
      const std::size_t drafts = s.draft_tokens - before.draft_tokens;
      const std::size_t forced = s.forced_drafts - before.forced_drafts;
      const double mal = verify ? static_cast<double>(accepted + verify) / static_cast<double>(verify) : 1.0;
      const double draft_s = s.draft_s - before.draft_s, verify_s = s.verify_s - before.verify_s;
      report["results"].push_back({{"workload", w.name},
                                   {"requests", reqs.size()},
                                   {"prompt_tokens", prompt_tokens},
                                   {"output_tokens_per_pass", [&] {
                                      std::size_t n = 0;
                                      for (auto& o2 : outputs) n += o2.size();
                                      return n;
                                    }()},
                                   {"depth_cap", depth},
                                   {"decode_tok_s_runs", tps},
                                   {"decode_tok_s_median", med},
                                   {"speedup_vs_depth0", base > 0 ? med / base : 0.0},
                                   {"decode_tok_per_cpu_s_runs", cpu_tps},
                                   {"decode_tok_per_cpu_s_median", cpu_med},
                                   {"cpu_speedup_vs_depth0", cpu_base > 0 ? cpu_med / cpu_base : 0.0},
                                   {"drafts", drafts},
                                   {"forced_drafts", forced},
                                   {"accepted", accepted},
                                   {"verify_steps", verify},
                                   {"mean_acceptance_length", mal},
                                   {"acceptance_per_position", per_pos},
                                   {"draft_s", draft_s},
                                   {"verify_s", verify_s},
                                   {"identical_to_depth0", same},
                                   {"outputs", outputs.size()}});
      char line[512];
      std::snprintf(line, sizeof line, "| %s | %zu | %zu | %.1f | %.2f | %.1f | %.2f | %.2f | %s | %zu | %.2f / %.2f | %zu/%zu |\n",
                    w.name.c_str(), reqs.size(), depth, med, base > 0 ? med / base : 0.0, cpu_med,
                    cpu_base > 0 ? cpu_med / cpu_base : 0.0, mal,
                    pos_md.empty() ? "-" : pos_md.c_str(), forced, draft_s, verify_s, same, outputs.size());
      md << line;
      std::cout << line << std::flush;
    }
  }
  fs::create_directories(out);
  std::ofstream(out / "bench_mtp.json") << report.dump(2) << "\n";
  std::ofstream(out / "bench_mtp.md") << md.str();
  std::cout << "wrote " << (out / "bench_mtp.json").string() << "\n";
  return 0;
}
