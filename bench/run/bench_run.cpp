// bench_run: the whole `quarry run` job (pipeline/run/runner.hpp) over a folder of documents
// (default samples/invoices), each configuration in a fresh output folder, `--reps` times; reports the
// median of documents per minute, decode tok/s (wall), and the busy seconds per stage of that run.
// Configurations: every --inflight value (requests kept in flight by the engine worker; 1 = one request
// at a time, the baseline) x every --prefer value. Ratios are to the first configuration, same run.
//
//   build/bench/bench_run [--inputs DIR] [--inflight 1,4] [--prefer auto,model] [--reps 1] [--threads 0]
//                         [--json FILE] [--md FILE]
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <string>
#include <vector>

#include "pipeline/extract/extractor.hpp"
#include "pipeline/paths.hpp"
#include "pipeline/run/report.hpp"
#include "pipeline/run/runner.hpp"
#include "quarry/version.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string x;
  while (std::getline(ss, x, ',')) out.push_back(x);
  return out;
}

/// CPU seconds (user + system) of this process so far: with other work on the machine, throughput
/// per CPU second is the figure that does not depend on how much of the CPU the run got.
double cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "?";
}

}  // namespace

int main(int argc, char** argv) {
  // The extraction workers of the runs below are this program (pipeline/extract/extractor.hpp).
  if (const auto status = quarry::extract::maybe_run_worker(argc, argv)) return *status;
  std::string inputs = (quarry::project_root() / "samples" / "invoices").string();
  std::string inflight = "1,4", prefer = "auto", json_out, md_out;
  std::size_t reps = 1, threads = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_run: %s needs a value\n", a.c_str());
        std::exit(1);
      }
      return argv[++i];
    };
    if (a == "--inputs") inputs = next();
    else if (a == "--inflight") inflight = next();
    else if (a == "--prefer") prefer = next();
    else if (a == "--reps") reps = std::stoul(next());
    else if (a == "--threads") threads = std::stoul(next());
    else if (a == "--json") json_out = next();
    else if (a == "--md") md_out = next();
    else {
      std::fprintf(stderr, "usage: bench_run [--inputs DIR] [--inflight 1,4] [--prefer auto,model] [--reps N] [--threads N] [--json FILE] [--md FILE]\n");
      return 1;
    }
  }
  const fs::path scratch = fs::temp_directory_path() / ("quarry_bench_run_" + std::to_string(::getpid()));
  json rows = json::array();
  for (const auto& pf : split(prefer)) {
    for (const auto& inf : split(inflight)) {
      std::vector<double> dpm, tps, dpcm, cpu;
      json best;
      for (std::size_t r = 0; r < reps; ++r) {
        fs::remove_all(scratch);
        quarry::run::JobSpec job;
        job.inputs = {inputs};
        job.output = scratch;
        job.prefer = pf == "model" ? quarry::run::Prefer::model : quarry::run::Prefer::automatic;
        job.engine.max_inflight = std::stoul(inf);
        job.engine.threads = threads;
        quarry::run::RunControl control;
        const double cpu0 = cpu_seconds();
        const auto m = quarry::run::run_job(job, control);
        cpu.push_back(cpu_seconds() - cpu0);
        dpcm.push_back(cpu.back() > 0 ? static_cast<double>(m.written) / cpu.back() * 60.0 : 0.0);
        quarry::run::resolve_defaults(job);
        const auto rep = quarry::run::build_report(job, m);
        dpm.push_back(rep["this_run"]["docs_per_min"].get<double>());
        tps.push_back(rep["this_run"]["decode_tok_s_wall"].get<double>());
        std::fprintf(stderr, "prefer %s, inflight %s, rep %zu: %.1f docs/min, %.1f docs per CPU-min, %.1f tok/s, %.1f s wall, %.1f s CPU\n",
                     pf.c_str(), inf.c_str(), r + 1, dpm.back(), dpcm.back(), tps.back(), m.wall_s, cpu.back());
        if (best.is_null() || std::abs(dpm.back() - median(dpm)) < 1e-9) best = rep;
      }
      const auto& t = best["this_run"];
      rows.push_back({{"prefer", pf},
                      {"max_inflight", std::stoul(inf)},
                      {"docs", t["written"]},
                      {"by_status", best["by_status"]},
                      {"by_method", best["by_method"]},
                      {"docs_per_min_median", median(dpm)},
                      {"decode_tok_s_median", median(tps)},
                      {"docs_per_cpu_min_median", median(dpcm)},
                      {"cpu_s_median", median(cpu)},
                      {"wall_s", t["wall_s"]},
                      {"model_requests", t["model_requests"]},
                      {"tokens", t["tokens"]},
                      {"stage_busy_s", t["stage_busy_s"]}});
    }
  }
  fs::remove_all(scratch);
  const double base_dpm = rows.empty() ? 0 : rows[0]["docs_per_min_median"].get<double>();
  const double base_cpu = rows.empty() ? 0 : rows[0]["docs_per_cpu_min_median"].get<double>();
  for (auto& r : rows) {
    r["ratio_to_first"] = base_dpm > 0 ? r["docs_per_min_median"].get<double>() / base_dpm : 0;
    r["cpu_ratio_to_first"] = base_cpu > 0 ? r["docs_per_cpu_min_median"].get<double>() / base_cpu : 0;
  }
  json out = {{"bench", "run"},
              {"version", QUARRY_VERSION},
              {"machine", {{"cpu", cpu_model()}, {"hardware_threads", std::thread::hardware_concurrency()}}},
              {"engine_threads", threads},
              {"inputs", inputs},
              {"reps", reps},
              {"model", quarry::default_model_dir().string()},
              {"rows", rows}};
  std::ostringstream md;
  md << "| prefer | in flight | docs | ok/invalid/error | docs/min | x first | docs per CPU-min | x first | decode tok/s | "
        "prompt/cached tokens | extract s | build s | engine s | validate s | write s |\n";
  md << "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n";
  for (const auto& r : rows) {
    const auto& st = r["stage_busy_s"];
    char buf[512];
    std::snprintf(buf, sizeof buf, "| %s | %zu | %zu | %zu/%zu/%zu | %.1f | %.2f | %.1f | %.2f | %.1f | %llu/%llu | %.2f | %.3f | %.1f | %.3f | %.3f |\n",
                  r["prefer"].get<std::string>().c_str(), r["max_inflight"].get<std::size_t>(), r["docs"].get<std::size_t>(),
                  r["by_status"].value("ok", std::size_t{0}), r["by_status"].value("invalid", std::size_t{0}),
                  r["by_status"].value("error", std::size_t{0}), r["docs_per_min_median"].get<double>(),
                  r["ratio_to_first"].get<double>(), r["docs_per_cpu_min_median"].get<double>(),
                  r["cpu_ratio_to_first"].get<double>(), r["decode_tok_s_median"].get<double>(),
                  static_cast<unsigned long long>(r["tokens"]["prompt"].get<std::uint64_t>()),
                  static_cast<unsigned long long>(r["tokens"]["cached"].get<std::uint64_t>()), st["extract"].get<double>(),
                  st["build"].get<double>(), st["engine"].get<double>(), st["validate"].get<double>(), st["write"].get<double>());
    md << buf;
  }
  std::printf("%s", md.str().c_str());
  if (!json_out.empty()) std::ofstream(json_out) << out.dump(2) << "\n";
  if (!md_out.empty()) std::ofstream(md_out) << md.str();
  return 0;
}
