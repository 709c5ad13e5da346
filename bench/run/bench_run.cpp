// bench_run: the whole `quarry run` job (pipeline/run/runner.hpp) over a folder of documents
// (default samples/invoices), each configuration in a fresh output folder, `--reps` times; reports the
// median of documents per minute, documents per CPU-minute (quarry and its extraction workers),
// decode tok/s (wall), and the busy seconds per stage of that run.
// Configurations: every --isolation value (on: extraction in worker processes, the default; off: in
// the run's threads) x every --prefer value x every --inflight value (requests kept in flight by the
// engine worker). Repetitions alternate the configurations (rep 1 of each, then rep 2 of each, ...), so
// that a machine's changing load falls on all of them alike. Ratios are to the first configuration.
// --copies N: instead of the folder itself, N distinct copies of its files of extension --copy-ext
// (cycling through them; each copy gets one more line naming it, so every copy is its own document),
// split into --batches B folders of consecutive copies: each configuration runs batch 1, then each runs
// batch 2, ..., and a repetition's figures are the sums over its batches (a long run alternates
// configurations every few minutes instead of once).
//
//   build/bench/bench_run [--inputs DIR] [--isolation on,off] [--inflight 1,4] [--prefer auto,model]
//                         [--copies N --copy-ext txt [--batches B]] [--reps 1] [--threads 0] [--device auto]
//                         [--json FILE] [--md FILE]
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <map>
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

/// CPU seconds (user + system) of this process and of its reaped children (the extraction workers,
/// reaped when a run ends) so far: with other work on the machine, throughput per CPU second is the
/// figure that does not depend on how much of the CPU the run got.
double cpu_seconds() {
  double total = 0;
  for (const int who : {RUSAGE_SELF, RUSAGE_CHILDREN}) {
    rusage ru{};
    getrusage(who, &ru);
    total += static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
             static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
  }
  return total;
}

/// `n` distinct copies of the files of `src` ending in `.ext`, in `batches` folders dir/batch-B (copy i
/// in batch i * batches / n: consecutive ranges); returns the folders.
std::vector<fs::path> make_copies(const fs::path& src, const std::string& ext, std::size_t n, const fs::path& dir,
                                  std::size_t batches) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(src))
    if (e.is_regular_file() && e.path().extension() == "." + ext) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  if (files.empty()) throw std::runtime_error(src.string() + ": no ." + ext + " file to copy");
  std::vector<fs::path> folders;
  for (std::size_t b = 0; b < batches; ++b) {
    folders.push_back(dir / ("batch-" + std::to_string(b + 1)));
    fs::create_directories(folders.back());
  }
  for (std::size_t i = 0; i < n; ++i) {
    const auto& f = files[i % files.size()];
    std::ifstream in(f, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string tag = "copy " + std::to_string(i + 1) + " of " + f.filename().string();
    text += ext == "xml" || ext == "html" ? "\n<!-- " + tag + " -->\n" : "\n" + tag + "\n";
    char name[64];
    std::snprintf(name, sizeof name, "%05zu-", i + 1);
    std::ofstream(folders[i * batches / n] / (name + f.filename().string()), std::ios::binary) << text;
  }
  return folders;
}

/// The 1-minute load average (other work on the machine).
double load_average() {
  std::ifstream in("/proc/loadavg");
  double l = 0;
  in >> l;
  return l;
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
  std::string inflight = "1,4", prefer = "auto", isolation = "on", copy_ext = "txt", device = "auto", json_out, md_out;
  std::size_t reps = 1, threads = 0, copies = 0, batches = 1;
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
    else if (a == "--isolation") isolation = next();
    else if (a == "--copies") copies = std::stoul(next());
    else if (a == "--copy-ext") copy_ext = next();
    else if (a == "--batches") batches = std::stoul(next());
    else if (a == "--reps") reps = std::stoul(next());
    else if (a == "--threads") threads = std::stoul(next());
    else if (a == "--device") device = next();
    else if (a == "--json") json_out = next();
    else if (a == "--md") md_out = next();
    else {
      std::fprintf(stderr,
                   "usage: bench_run [--inputs DIR] [--isolation on,off] [--inflight 1,4] [--prefer auto,model] "
                   "[--copies N --copy-ext txt [--batches B]] [--reps N] [--threads N] [--device auto|cpu|cuda[:N]] "
                   "[--json FILE] [--md FILE]\n");
      return 1;
    }
  }
  const fs::path scratch = fs::temp_directory_path() / ("quarry_bench_run_" + std::to_string(::getpid()));
  const fs::path copies_dir = scratch.string() + "_inputs";
  std::vector<fs::path> run_inputs = {inputs};
  if (copies > 0) {
    fs::remove_all(copies_dir);
    run_inputs = make_copies(inputs, copy_ext, copies, copies_dir, std::max<std::size_t>(1, std::min(batches, copies)));
  }
  // One measurement of a configuration: the sums over its batches.
  struct Sums {
    double wall = 0, cpu = 0, extract = 0, build = 0, engine = 0, validate = 0, write = 0;
    std::size_t written = 0, model_requests = 0;
    std::uint64_t decode = 0, prompt = 0, cached = 0;
    std::map<std::string, std::size_t> by_status;
  };
  struct Config {
    std::string isolation, prefer, inflight;
    std::vector<double> dpm, tps, dpcm, cpu;
    std::vector<Sums> sums;
  };
  std::vector<Config> configs;
  for (const auto& iso : split(isolation))
    for (const auto& pf : split(prefer))
      for (const auto& inf : split(inflight)) configs.push_back(Config{iso, pf, inf, {}, {}, {}, {}, {}});
  // Repetitions and batches alternate the configurations, so that the machine's changing load falls
  // on all of them alike.
  for (std::size_t r = 0; r < reps; ++r) {
    for (auto& c : configs) c.sums.emplace_back();
    for (std::size_t b = 0; b < run_inputs.size(); ++b) {
      for (auto& c : configs) {
        fs::remove_all(scratch);
        quarry::run::JobSpec job;
        job.inputs = {run_inputs[b].string()};
        job.output = scratch;
        job.prefer = c.prefer == "model" ? quarry::run::Prefer::model : quarry::run::Prefer::automatic;
        job.engine.max_inflight = std::stoul(c.inflight);
        job.engine.threads = threads;
        job.engine.device = device;
        job.extract.isolation = c.isolation != "off";
        quarry::run::RunControl control;
        const double cpu0 = cpu_seconds();
        const auto m = quarry::run::run_job(job, control);
        const double cpu = cpu_seconds() - cpu0;
        quarry::run::resolve_defaults(job);
        const auto rep = quarry::run::build_report(job, m);
        Sums& sm = c.sums.back();
        sm.wall += m.wall_s;
        sm.cpu += cpu;
        sm.extract += m.extract_s;
        sm.build += m.build_s;
        sm.engine += m.engine_s;
        sm.validate += m.validate_s;
        sm.write += m.write_s;
        sm.written += m.written;
        sm.model_requests += m.model_requests;
        sm.decode += m.decode_tokens;
        sm.prompt += m.prompt_tokens;
        sm.cached += m.cached_tokens;
        for (const auto& [k, v] : rep["by_status"].items()) sm.by_status[k] += v.get<std::size_t>();
        std::fprintf(stderr,
                     "isolation %s, prefer %s, inflight %s, rep %zu, batch %zu/%zu: %zu docs, %.1f s wall, %.1f s CPU, "
                     "extract busy %.2f s, load %.1f\n",
                     c.isolation.c_str(), c.prefer.c_str(), c.inflight.c_str(), r + 1, b + 1, run_inputs.size(),
                     m.written, m.wall_s, cpu, m.extract_s, load_average());
      }
    }
    for (auto& c : configs) {
      const Sums& sm = c.sums.back();
      c.cpu.push_back(sm.cpu);
      c.dpm.push_back(sm.wall > 0 ? static_cast<double>(sm.written) / sm.wall * 60.0 : 0.0);
      c.dpcm.push_back(sm.cpu > 0 ? static_cast<double>(sm.written) / sm.cpu * 60.0 : 0.0);
      c.tps.push_back(sm.wall > 0 ? static_cast<double>(sm.decode) / sm.wall : 0.0);
      std::fprintf(stderr, "isolation %s, prefer %s, inflight %s, rep %zu: %.1f docs/min, %.1f docs per CPU-min\n",
                   c.isolation.c_str(), c.prefer.c_str(), c.inflight.c_str(), r + 1, c.dpm.back(), c.dpcm.back());
    }
  }
  json rows = json::array();
  for (auto& c : configs) {
    // The repetition at the median of documents per minute.
    std::size_t at = 0;
    for (std::size_t i = 0; i < c.dpm.size(); ++i)
      if (std::abs(c.dpm[i] - median(c.dpm)) < 1e-9) at = i;
    const Sums& sm = c.sums[at];
    rows.push_back({{"isolation", c.isolation},
                    {"prefer", c.prefer},
                    {"max_inflight", std::stoul(c.inflight)},
                    {"docs", sm.written},
                    {"by_status", sm.by_status},
                    {"docs_per_min_median", median(c.dpm)},
                    {"docs_per_min_all", c.dpm},
                    {"decode_tok_s_median", median(c.tps)},
                    {"docs_per_cpu_min_median", median(c.dpcm)},
                    {"docs_per_cpu_min_all", c.dpcm},
                    {"cpu_s_median", median(c.cpu)},
                    {"wall_s", sm.wall},
                    {"model_requests", sm.model_requests},
                    {"tokens", {{"prompt", sm.prompt}, {"cached", sm.cached}, {"decode", sm.decode}}},
                    {"stage_busy_s",
                     {{"extract", sm.extract},
                      {"build", sm.build},
                      {"engine", sm.engine},
                      {"validate", sm.validate},
                      {"write", sm.write}}}});
  }
  if (copies > 0) fs::remove_all(copies_dir);
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
              {"device", device},
              {"inputs", inputs},
              {"copies", copies},
              {"copy_ext", copies > 0 ? copy_ext : ""},
              {"batches", run_inputs.size()},
              {"load_average", load_average()},
              {"reps", reps},
              {"model", quarry::default_model_dir().string()},
              {"rows", rows}};
  std::ostringstream md;
  md << "| isolation | prefer | in flight | docs | ok/invalid/error | docs/min | x first | docs per CPU-min | x first | "
        "decode tok/s | prompt/cached tokens | extract s | build s | engine s | validate s | write s |\n";
  md << "| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n";
  for (const auto& r : rows) {
    const auto& st = r["stage_busy_s"];
    char buf[512];
    std::snprintf(buf, sizeof buf, "| %s | %s | %zu | %zu | %zu/%zu/%zu | %.1f | %.3f | %.1f | %.3f | %.1f | %llu/%llu | %.2f | %.3f | %.1f | %.3f | %.3f |\n",
                  r["isolation"].get<std::string>().c_str(), r["prefer"].get<std::string>().c_str(), r["max_inflight"].get<std::size_t>(), r["docs"].get<std::size_t>(),
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
