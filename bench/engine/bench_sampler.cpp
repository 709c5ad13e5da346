// Host sampling cost per draw (engine/runtime/sampler.hpp) over one row of logits of a Qwen3-sized
// vocabulary: the filters a request can ask for, on two shapes of logits. Prints a Markdown table and,
// with --json, writes the figures as JSON.
//
// usage: bench_sampler [--vocab N] [--draws N] [--runs N] [--json OUT.json]
//
// Shapes: "peaked" (16 tokens far above the rest, which are normal with sigma 2: a model that knows what
// comes next) and "flat" (all normal with sigma 3: the long tail a top-p of 0.95 keeps much of). For
// each filter the median over --runs runs of the mean microseconds a draw over --draws draws, and its
// ratio to greedy argmax over the same row (the baseline, measured in the same run). Single thread.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/common/options.hpp"
#include "engine/runtime/sampler.hpp"

using namespace quarry::engine;

int main(int argc, char** argv) {
  std::size_t vocab = 151936, draws = 20, runs = 5;
  std::string json_out;
  const std::string usage = "usage: bench_sampler [--vocab N] [--draws N] [--runs N] [--json OUT.json]\n";
  const int rc = quarry::bench::parse_options(argc, argv, "bench_sampler", usage, [&](const std::string& k, const std::string& v) {
    if (k == "--vocab") vocab = std::stoul(v);
    else if (k == "--draws") draws = std::stoul(v);
    else if (k == "--runs") runs = std::stoul(v);
    else if (k == "--json") json_out = v;
    else return false;
    return true;
  });
  if (rc >= 0) return rc;
  if (vocab < 64 || draws == 0 || runs == 0) {
    std::cerr << "bench_sampler: --vocab must be >= 64, --draws and --runs >= 1\n" << usage;
    return 2;
  }
  struct Filter {
    const char* name;
    SamplingParams p;
  };
  const Filter filters[] = {{"greedy (baseline)", {0.f, 0, 1.f, 0.f, 1}},
                            {"temperature 1", {1.f, 0, 1.f, 0.f, 1}},
                            {"temperature 0.7, top-p 0.8", {0.7f, 0, 0.8f, 0.f, 1}},
                            {"temperature 1, top-p 0.95", {1.f, 0, 0.95f, 0.f, 1}},
                            {"temperature 1, top-k 50", {1.f, 50, 1.f, 0.f, 1}},
                            {"temperature 1, min-p 0.05", {1.f, 0, 1.f, 0.05f, 1}}};
  nlohmann::json report = {{"bench", "sampler"}, {"vocab", vocab}, {"draws", draws}, {"runs", runs}, {"rows", nlohmann::json::array()}};
  std::cout << "| logits | filter | us a draw | x greedy |\n| --- | --- | ---: | ---: |\n";
  for (const char* shape : {"peaked", "flat"}) {
    const bool peaked = std::string(shape) == "peaked";
    std::mt19937 g(1);
    std::normal_distribution<float> n(0.f, peaked ? 2.f : 3.f);
    std::vector<float> logits(vocab);
    for (auto& x : logits) x = n(g);
    if (peaked)
      for (std::size_t i = 0; i < 16; ++i) logits[(i * 7919) % vocab] = 10.f + 0.4f * static_cast<float>(i);
    double base = 0.0;
    for (const Filter& f : filters) {
      Sampler s(f.p);
      std::vector<double> us;
      std::int64_t sink = 0;
      for (std::size_t r = 0; r <= runs; ++r) {  // run 0: warm-up
        const auto t0 = std::chrono::steady_clock::now();
        for (std::size_t d = 0; d < draws; ++d) sink += s.sample(logits);
        const double t = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
        if (r > 0) us.push_back(t / static_cast<double>(draws));
      }
      std::sort(us.begin(), us.end());
      const double med = us[us.size() / 2];
      if (f.p.temperature == 0.f) base = med;
      std::cout << "| " << shape << " | " << f.name << " | " << std::fixed << std::setprecision(1) << med << " | "
                << std::setprecision(2) << med / base << " |\n";
      report["rows"].push_back({{"logits", shape}, {"filter", f.name}, {"us_per_draw", med}, {"x_greedy", med / base}, {"sink", sink}});
    }
  }
  if (!json_out.empty()) std::ofstream(json_out) << report.dump(2) << "\n";
  return 0;
}
