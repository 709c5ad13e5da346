// Host sampling cost per draw (engine/runtime/sampler.hpp) over one row of logits of a Qwen3-sized
// vocabulary: the filters a request can ask for, on two shapes of logits. Prints a Markdown table and,
// with --json, writes the figures as JSON.
//
// usage: bench_sampler [--vocab N] [--draws N] [--runs N] [--device cpu|cuda[:N]] [--rows N] [--json OUT.json]
//
// With --device cuda the same rows also live in device memory, and two more columns give what a decode
// step pays there: the host path (download the row, then the host sampler) and Backend::sample_rows
// (the draw where the logits are; one call of --rows rows, its microseconds divided by the rows; only
// the ids come back). With --device cpu the backend column is the CPU reference implementation.
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
#include "engine/backend/backend.hpp"
#include "engine/runtime/sampler.hpp"

using namespace quarry::engine;

int main(int argc, char** argv) {
  std::size_t vocab = 151936, draws = 20, runs = 5, rows = 1;
  std::string json_out, device;
  const std::string usage =
      "usage: bench_sampler [--vocab N] [--draws N] [--runs N] [--device cpu|cuda[:N]] [--rows N] [--json OUT.json]\n";
  const int rc = quarry::bench::parse_options(argc, argv, "bench_sampler", usage, [&](const std::string& k, const std::string& v) {
    if (k == "--vocab") vocab = std::stoul(v);
    else if (k == "--draws") draws = std::stoul(v);
    else if (k == "--runs") runs = std::stoul(v);
    else if (k == "--json") json_out = v;
    else if (k == "--device") device = v;
    else if (k == "--rows") rows = std::max<std::size_t>(1, std::stoul(v));
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
                            {"temperature 0.7, top-k 20, top-p 0.8", {0.7f, 20, 0.8f, 0.f, 1}},
                            {"temperature 1, min-p 0.05", {1.f, 0, 1.f, 0.05f, 1}}};
  std::shared_ptr<Backend> be;
  if (!device.empty()) be = make_backend({parse_device(device), 0});
  nlohmann::json report = {{"bench", "sampler"}, {"vocab", vocab}, {"draws", draws}, {"runs", runs}, {"rows", nlohmann::json::array()}};
  if (be) report["device"] = be->description(), report["rows_a_call"] = rows;
  std::cout << "| logits | filter | us a draw | x greedy |" << (be ? " download + host, us | backend, us a row | x download + host |" : "")
            << "\n| --- | --- | ---: | ---: |" << (be ? " ---: | ---: | ---: |" : "") << "\n";
  // The median over the runs of the mean microseconds of `per` repetitions of fn (run 0: warm-up).
  const auto time_us = [&](std::size_t per, const auto& fn) {
    std::vector<double> us;
    for (std::size_t r = 0; r <= runs; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      for (std::size_t d = 0; d < per; ++d) fn();
      const double t = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      if (r > 0) us.push_back(t / static_cast<double>(per));
    }
    std::sort(us.begin(), us.end());
    return us[us.size() / 2];
  };
  for (const char* shape : {"peaked", "flat"}) {
    const bool peaked = std::string(shape) == "peaked";
    std::mt19937 g(1);
    std::normal_distribution<float> n(0.f, peaked ? 2.f : 3.f);
    std::vector<float> logits(vocab);
    for (auto& x : logits) x = n(g);
    if (peaked)
      for (std::size_t i = 0; i < 16; ++i) logits[(i * 7919) % vocab] = 10.f + 0.4f * static_cast<float>(i);
    DeviceBuffer dev;
    std::vector<float> host_row(vocab);
    if (be) {
      dev = be->alloc(vocab * rows * sizeof(float));
      for (std::size_t r = 0; r < rows; ++r) be->upload(dev.as<float>() + r * vocab, logits.data(), vocab * sizeof(float));
    }
    double base = 0.0;
    for (const Filter& f : filters) {
      Sampler s(f.p);
      std::int64_t sink = 0;
      const double med = time_us(draws, [&] { sink += s.sample(logits); });
      if (f.p.temperature == 0.f) base = med;
      nlohmann::json row = {{"logits", shape}, {"filter", f.name}, {"us_per_draw", med}, {"x_greedy", med / base}};
      std::cout << "| " << shape << " | " << f.name << " | " << std::fixed << std::setprecision(1) << med << " | "
                << std::setprecision(2) << med / base << " |";
      if (be) {
        const double host_path = time_us(draws, [&] {
          be->download(host_row.data(), dev.data(), vocab * sizeof(float));
          sink += s.sample(host_row);
        });
        std::vector<RowSampling> params(rows, RowSampling{f.p.temperature, static_cast<std::uint32_t>(f.p.top_k), f.p.top_p, f.p.min_p});
        std::vector<std::int32_t> ids(rows);
        std::uint64_t key = 0;
        const double call = time_us(draws, [&] {
          for (auto& p : params) p.key = ++key;
          be->sample_rows(dev.as<float>(), rows, vocab, vocab, {}, 0, params, ids.data());
          sink += ids[0];
        });
        const double per_row = call / static_cast<double>(rows);
        std::cout << " " << std::setprecision(1) << host_path << " | " << per_row << " | " << std::setprecision(2)
                  << host_path / per_row << " |";
        row["download_host_us"] = host_path;
        row["backend_us_per_row"] = per_row;
        row["backend_us_per_call"] = call;
      }
      std::cout << "\n";
      row["sink"] = sink;
      report["rows"].push_back(row);
    }
  }
  if (!json_out.empty()) std::ofstream(json_out) << report.dump(2) << "\n";
  return 0;
}
