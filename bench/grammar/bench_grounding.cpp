// Grounded-decoding bench: bitmask time per token with and without grounding, in the same run, on
// the shipped invoice schema and a 10-page document (the six text sample invoices and four HTML
// sample invoices with their tags removed, one page each), single-threaded, the Qwen3 vocabulary.
//
// usage: bench_grounding [--tokenizer TOKENIZER_JSON] [--walks N] [--max-tokens N] [--repeats N]
//                        [--cpu-time] [--out PREFIX] [--slow-us X]
//
// Per mode ("ungrounded": the schema's grammar alone; "grounded": the same grammar with a
// GroundingIndex of the document, engine/grammar/grounding.hpp):
//   cold p50/p99/max  bitmask µs per token over N random legal walks (random_walk), on a fresh
//                     compiled grammar (and, grounded, a fresh index): every cache fills along the
//                     way; with --repeats R the medians of R such runs
//   warm p50/p99/max  the same token sequences replayed with the caches filled
//   index_build_ms    GroundingIndex::build (suffix automaton, candidate tries, the eager masks of the
//                     start of a copy / number / date value): once per request, before its first token
// Wall clock by default; --cpu-time uses the thread's CPU time (leaves out waits for a core on a
// shared machine). Writes PREFIX.json and prints a Markdown table.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/grammar/grounding.hpp"
#include "engine/grammar/matcher.hpp"
#include "engine/grammar/random_walk.hpp"
#include "engine/tokenizer/tokenizer.hpp"

namespace eg = quarry::engine::grammar;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

bool g_cpu = false;

double now_us() {
  if (g_cpu) {
    timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_nsec) / 1e3;
  }
  return std::chrono::duration<double, std::micro>(Clock::now().time_since_epoch()).count();
}

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  std::size_t k = static_cast<std::size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(k, v.size() - 1)];
}

double median(std::vector<double> v) { return pct(std::move(v), 50); }

std::string read(const fs::path& p) {
  std::ifstream in(p);
  if (!in) throw std::runtime_error("cannot read " + p.string());
  return {std::istreambuf_iterator<char>(in), {}};
}

// Text of an HTML page, roughly: tags dropped (block tags become line breaks), a few entities decoded.
std::string html_text(const std::string& h) {
  std::string out;
  for (std::size_t i = 0; i < h.size();) {
    if (h[i] == '<') {
      const std::size_t e = h.find('>', i);
      if (e == std::string::npos) break;
      const std::string tag = h.substr(i + 1, std::min<std::size_t>(e - i - 1, 4));
      if (tag.starts_with("/tr") || tag.starts_with("br") || tag.starts_with("/p") || tag.starts_with("/h") ||
          tag.starts_with("/div"))
        out += '\n';
      else if (tag.starts_with("/td") || tag.starts_with("/th"))
        out += "  ";
      i = e + 1;
    } else if (h.compare(i, 5, "&amp;") == 0) { out += '&'; i += 5; }
    else if (h.compare(i, 6, "&nbsp;") == 0) { out += "\xC2\xA0"; i += 6; }
    else { out += h[i++]; }
  }
  return out;
}

struct Stats {
  std::vector<double> cold_p50, cold_p99, cold_max, warm_p50, warm_p99, warm_max, build_ms;
  std::size_t masks = 0;
};

}  // namespace

int main(int argc, char** argv) {
  std::string tokenizer = std::string(QUARRY_SHARED_DIR) + "/tokenizers/qwen3/tokenizer.json";
  int walks = 20, repeats = 3;
  double slow_us = 0;  // --slow-us X: print every cold mask slower than X µs (diagnostics)
  std::size_t max_tokens = 400;
  std::string out_prefix = "bench_grounding";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--tokenizer") tokenizer = next();
    else if (a == "--walks") walks = std::stoi(next());
    else if (a == "--max-tokens") max_tokens = std::stoul(next());
    else if (a == "--repeats") repeats = std::stoi(next());
    else if (a == "--out") out_prefix = next();
    else if (a == "--cpu-time") g_cpu = true;
    else if (a == "--slow-us") slow_us = std::stod(next());
    else {
      std::cerr << "usage: bench_grounding [--tokenizer F] [--walks N] [--max-tokens N] [--repeats N] [--cpu-time] [--out PREFIX]\n";
      return 2;
    }
  }
  const fs::path src(QUARRY_SOURCE_DIR);
  const std::string schema = read(src / "schemas/invoice.schema.json");
  std::vector<std::string> pages;
  for (const char* f : {"hu-txt-1.txt", "hu-txt-2.txt", "en-txt-1.txt", "en-txt-2.txt", "de-txt-1.txt", "de-txt-2.txt"})
    pages.push_back(read(src / "samples/invoices" / f));
  for (const char* f : {"hu-html-1.html", "de-html-1.html", "en-html-1.html", "fr-html-1.html"})
    pages.push_back(html_text(read(src / "samples/invoices" / f)));
  std::size_t doc_bytes = 0;
  for (const auto& p : pages) doc_bytes += p.size();

  auto info = eg::TokenizerInfo::from_tokenizer(*quarry::engine::Tokenizer::from_file(tokenizer));
  auto gvocab = std::make_shared<eg::GroundingVocab>(info);
  const auto res = eg::compile_json_schema(schema);

  nlohmann::json report;
  report["document"] = {{"pages", pages.size()}, {"bytes", doc_bytes}};
  report["walks"] = walks;
  report["repeats"] = repeats;
  report["clock"] = g_cpu ? "thread cpu time" : "wall";
  std::size_t sam_states = 0, n_numbers = 0, n_dates = 0;
  for (const bool grounded : {false, true}) {
    Stats st;
    for (int rep = 0; rep < repeats; ++rep) {
      auto cg = std::make_shared<eg::CompiledGrammar>(res.grammar, info, res);
      std::shared_ptr<eg::GroundingIndex> idx;
      if (grounded) {
        const double t0 = now_us();
        idx = eg::GroundingIndex::build(gvocab, pages);
        st.build_ms.push_back((now_us() - t0) / 1e3);
        sam_states = idx->automaton_states();
        n_numbers = idx->number_candidates();
        n_dates = idx->date_candidates();
      }
      std::mt19937_64 rng(1234 + static_cast<std::uint64_t>(rep));
      std::vector<double> cold, warm;
      for (int w = 0; w < walks; ++w) {
        double t0 = 0;
        eg::random_walk(
            cg, rng, max_tokens,
            [&](eg::GrammarMatcher& m, const std::vector<std::uint32_t>&) {
              cold.push_back(now_us() - t0);
              if (slow_us > 0 && cold.back() > slow_us) {
                const auto& gs = m.ground_state();
                std::cerr << (grounded ? "grounded" : "ungrounded") << " slow mask " << cold.back() << " us: kind "
                          << int(gs.kind) << " lost " << int(gs.lost) << " esc " << int(gs.esc) << " need "
                          << int(gs.need) << " states " << int(gs.n) << " step " << m.num_steps() << "\n";
              }
            },
            [&](eg::GrammarMatcher& m) {
              if (grounded && m.num_steps() == 0 && !m.grounded()) m.set_grounding(idx);
              t0 = now_us();
            });
      }
      // Warm: replay walks of the same seed (the same choices: the masks are the same) with the caches filled.
      std::mt19937_64 rng2(1234 + static_cast<std::uint64_t>(rep));
      for (int w = 0; w < walks; ++w) {
        double t0 = 0;
        eg::random_walk(
            cg, rng2, max_tokens, [&](eg::GrammarMatcher&, const std::vector<std::uint32_t>&) { warm.push_back(now_us() - t0); },
            [&](eg::GrammarMatcher& m) {
              if (grounded && m.num_steps() == 0 && !m.grounded()) m.set_grounding(idx);
              t0 = now_us();
            });
      }
      st.cold_p50.push_back(pct(cold, 50));
      st.cold_p99.push_back(pct(cold, 99));
      st.cold_max.push_back(pct(cold, 100));
      st.warm_p50.push_back(pct(warm, 50));
      st.warm_p99.push_back(pct(warm, 99));
      st.warm_max.push_back(pct(warm, 100));
      st.masks += cold.size();
    }
    nlohmann::json j = {{"masks", st.masks},
                        {"cold_p50_us", median(st.cold_p50)},
                        {"cold_p99_us", median(st.cold_p99)},
                        {"cold_max_us", median(st.cold_max)},
                        {"warm_p50_us", median(st.warm_p50)},
                        {"warm_p99_us", median(st.warm_p99)},
                        {"warm_max_us", median(st.warm_max)},
                        {"runs", {{"cold_p50_us", st.cold_p50}, {"cold_p99_us", st.cold_p99}, {"warm_p99_us", st.warm_p99}}}};
    if (grounded) {
      j["index_build_ms"] = median(st.build_ms);
      j["automaton_states"] = sam_states;
      j["number_candidates"] = n_numbers;
      j["date_candidates"] = n_dates;
    }
    report[grounded ? "grounded" : "ungrounded"] = j;
  }
  std::ofstream(out_prefix + ".json") << report.dump(2) << "\n";
  std::cout << "document: " << pages.size() << " pages, " << doc_bytes << " bytes; " << walks << " walks x " << repeats
            << " runs; " << report["clock"].get<std::string>() << "\n\n";
  std::cout << "| mode | masks | cold p50 µs | cold p99 µs | cold max µs | warm p50 µs | warm p99 µs | index build ms |\n";
  std::cout << "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  for (const char* mode : {"ungrounded", "grounded"}) {
    const auto& j = report[mode];
    char line[512];
    std::snprintf(line, sizeof line, "| %s | %zu | %.1f | %.1f | %.0f | %.1f | %.1f | %s |\n", mode,
                  j["masks"].get<std::size_t>(), j["cold_p50_us"].get<double>(), j["cold_p99_us"].get<double>(),
                  j["cold_max_us"].get<double>(), j["warm_p50_us"].get<double>(), j["warm_p99_us"].get<double>(),
                  j.contains("index_build_ms") ? std::to_string(j["index_build_ms"].get<double>()).substr(0, 6).c_str() : "-");
    std::cout << line;
  }
  return 0;
}
