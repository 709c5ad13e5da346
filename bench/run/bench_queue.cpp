// bench_queue: a job over NATS JetStream (`quarry submit`, N x `quarry worker`, `quarry collect`) against
// the same documents in one local `quarry run`, on one machine, with a private `nats-server -js`.
//
// Part 1, throughput (--inputs, default samples/invoices, the bundled model): documents per minute of a
// local run and of the queue with each --workers count (each worker and the local run with --threads
// engine threads), wall time from the first process started to the last record committed (model loads
// included on both sides), and documents per CPU-minute (user + system seconds of every quarry process
// of the configuration, reaped with wait4).
// Part 2, the queue's overhead per document (--overhead-docs N distinct copies of the XML e-invoices:
// the mapper's path, milliseconds of pipeline work each, so that the queue's share shows): a local run
// against one worker, the difference in wall time and in CPU time (quarry processes plus the
// nats-server's own CPU, from /proc) divided by N.
// Configurations alternate within each repetition; figures are medians over --reps.
//
//   build/bench/bench_queue [--inputs DIR] [--workers 1,2,3] [--threads 1] [--overhead-docs 600] [--reps 1]
//                           [--json FILE] [--md FILE]
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include "quarry/version.hpp"
#include "tests/queue/queue_support.hpp"

namespace {

using namespace quarry::test_queue;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string x;
  while (std::getline(ss, x, ',')) out.push_back(x);
  return out;
}

/// Waits for a child; its CPU seconds (user + system).
double reap_cpu(pid_t pid, int* rc = nullptr) {
  int status = 0;
  rusage ru{};
  ::wait4(pid, &status, 0, &ru);
  if (rc) *rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

/// CPU seconds a running process has used (/proc/PID/stat utime + stime).
double proc_cpu(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(in, stat);
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(stat.substr(close + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i)
    if (i == 14 || i == 15) ticks += std::stod(field);
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

struct Figures {
  double wall_s = 0, cpu_s = 0, server_cpu_s = 0;
  std::size_t records = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  fs::path inputs = fs::path(QUARRY_SOURCE_DIR) / "samples" / "invoices";
  std::vector<int> worker_counts = {1, 2, 3};
  std::size_t threads = 1, overhead_docs = 600, reps = 1;
  std::string json_out, md_out;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--inputs") inputs = next();
    else if (a == "--workers") {
      worker_counts.clear();
      for (const auto& w : split(next())) worker_counts.push_back(std::stoi(w));
    } else if (a == "--threads") threads = std::stoul(next());
    else if (a == "--overhead-docs") overhead_docs = std::stoul(next());
    else if (a == "--reps") reps = std::max<std::size_t>(1, std::stoul(next()));
    else if (a == "--json") json_out = next();
    else if (a == "--md") md_out = next();
    else {
      std::fprintf(stderr, "usage: bench_queue [--inputs DIR] [--workers 1,2,3] [--threads 1] [--overhead-docs 600] "
                           "[--reps 1] [--json FILE] [--md FILE]\n");
      return 1;
    }
  }
  const auto server_bin = find_nats_server();
  if (!server_bin) {
    std::fprintf(stderr, "bench_queue: nats-server is not installed (apt-get install nats-server)\n");
    return 1;
  }
  const fs::path scratch = fs::temp_directory_path() / ("quarry_bench_queue_" + std::to_string(::getpid()));
  fs::remove_all(scratch);
  fs::create_directories(scratch);
  NatsServer server(*server_bin, scratch / "nats");
  if (!server.start()) {
    std::fprintf(stderr, "bench_queue: nats-server did not start\n");
    return 1;
  }
  const pid_t server_pid = server.pid();
  const std::vector<std::string> common = {"--threads", std::to_string(threads), "--progress", "none"};
  const auto with = [&](std::vector<std::string> a) {
    a.insert(a.end(), common.begin(), common.end());
    return a;
  };
  int job_no = 0;

  const auto local_run = [&](const fs::path& in, const std::string& tag) {
    Figures f;
    const auto out = scratch / ("local-" + tag);
    const auto t0 = Clock::now();
    const pid_t p = spawn_quarry_env(with({"run", in.string(), "-o", out.string()}), scratch / (tag + ".log"));
    f.cpu_s = reap_cpu(p);
    f.wall_s = since(t0);
    f.records = count_lines(out / "results.jsonl");
    return f;
  };
  const auto queue_run = [&](const fs::path& in, int workers, const std::string& tag) {
    Figures f;
    const std::string job = "bench" + std::to_string(job_no++);
    const auto out = scratch / ("queue-" + tag);
    const auto q = [&](std::vector<std::string> a) {
      a.insert(a.end(), {"--queue", server.url(), "--job", job});
      return with(a);
    };
    const double server_cpu0 = proc_cpu(server_pid);
    const auto t0 = Clock::now();
    std::vector<pid_t> ws;
    for (int w = 0; w < workers; ++w)
      ws.push_back(spawn_quarry_env(q({"worker", "--idle-exit", "3"}), scratch / (tag + "-worker" + std::to_string(w) + ".log")));
    const pid_t submit = spawn_quarry_env(q({"submit", in.string()}), scratch / (tag + "-submit.log"));
    f.cpu_s += reap_cpu(submit);
    const pid_t collect = spawn_quarry_env(q({"collect", "-o", out.string()}), scratch / (tag + "-collect.log"));
    f.cpu_s += reap_cpu(collect);
    f.wall_s = since(t0);
    f.server_cpu_s = proc_cpu(server_pid) - server_cpu0;
    for (const auto w : ws) f.cpu_s += reap_cpu(w);  // they exit 3 s after their last task (idle time: no CPU)
    f.records = count_lines(out / "results.jsonl");
    return f;
  };

  // Part 1: throughput on the inputs.
  std::size_t docs = 0;
  for (const auto& e : fs::recursive_directory_iterator(inputs))
    if (e.is_regular_file() && e.path().filename().string()[0] != '.') ++docs;
  std::map<std::string, std::vector<Figures>> part1;
  for (std::size_t r = 0; r < reps; ++r) {
    part1["local"].push_back(local_run(inputs, "local-r" + std::to_string(r)));
    std::fprintf(stderr, "rep %zu local: %.1f s\n", r + 1, part1["local"].back().wall_s);
    for (const int w : worker_counts) {
      const auto name = std::to_string(w) + " worker" + (w > 1 ? "s" : "");
      part1[name].push_back(queue_run(inputs, w, "w" + std::to_string(w) + "-r" + std::to_string(r)));
      std::fprintf(stderr, "rep %zu %s: %.1f s\n", r + 1, name.c_str(), part1[name].back().wall_s);
    }
  }

  // Part 2: overhead per document on fast documents.
  const auto copies_dir = scratch / "copies";
  make_copies(copies_dir, overhead_docs);
  std::size_t i = 0;
  for (const auto& e : fs::directory_iterator(copies_dir)) std::ofstream(e.path(), std::ios::app) << "\n<!-- " << i++ << " -->\n";
  std::vector<double> d_wall, d_cpu, local_wall, queue_wall, local_cpu, queue_cpu, server_cpu;
  for (std::size_t r = 0; r < reps; ++r) {
    const auto l = local_run(copies_dir, "copies-local-r" + std::to_string(r));
    const auto q = queue_run(copies_dir, 1, "copies-w1-r" + std::to_string(r));
    if (l.records != overhead_docs || q.records != overhead_docs)
      std::fprintf(stderr, "bench_queue: records %zu (local) / %zu (queue) of %zu\n", l.records, q.records, overhead_docs);
    local_wall.push_back(l.wall_s);
    queue_wall.push_back(q.wall_s);
    local_cpu.push_back(l.cpu_s);
    queue_cpu.push_back(q.cpu_s);
    server_cpu.push_back(q.server_cpu_s);
    d_wall.push_back((q.wall_s - l.wall_s) / static_cast<double>(overhead_docs) * 1e3);
    d_cpu.push_back((q.cpu_s + q.server_cpu_s - l.cpu_s) / static_cast<double>(overhead_docs) * 1e3);
    std::fprintf(stderr, "rep %zu overhead: local %.2f s, queue %.2f s: %.2f ms/doc wall, %.2f ms/doc CPU\n", r + 1, l.wall_s,
                 q.wall_s, d_wall.back(), d_cpu.back());
  }

  // Report.
  json j;
  j["bench"] = "bench_queue";
  j["quarry_version"] = QUARRY_VERSION;
  j["hardware_threads"] = std::thread::hardware_concurrency();
  j["engine_threads_per_process"] = threads;
  j["inputs"] = inputs.string();
  j["documents"] = docs;
  j["reps"] = reps;
  std::ostringstream md;
  md << "| configuration | docs | records | wall s | docs/min | x local | docs per CPU-min |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  double local_dpm = 0;
  std::vector<std::string> order = {"local"};
  for (const int w : worker_counts) order.push_back(std::to_string(w) + " worker" + (w > 1 ? "s" : ""));
  for (const auto& name : order) {
    std::vector<double> walls, cpus;
    for (const auto& f : part1[name]) {
      walls.push_back(f.wall_s);
      cpus.push_back(f.cpu_s);
    }
    const double wall = median(walls), cpu = median(cpus);
    const double dpm = static_cast<double>(docs) / wall * 60, dpcm = cpu > 0 ? static_cast<double>(docs) / cpu * 60 : 0;
    if (name == "local") local_dpm = dpm;
    j["throughput"][name] = {{"wall_s", wall}, {"cpu_s", cpu}, {"docs_per_min", dpm}, {"docs_per_cpu_min", dpcm},
                             {"records", part1[name].back().records}};
    char row[256];
    std::snprintf(row, sizeof row, "| %s | %zu | %zu | %.1f | %.1f | %.2f | %.1f |\n", name.c_str(), docs,
                  part1[name].back().records, wall, dpm, local_dpm > 0 ? dpm / local_dpm : 0, dpcm);
    md << row;
  }
  j["overhead"] = {{"documents", overhead_docs},
                   {"local_wall_s", median(local_wall)},
                   {"queue_wall_s", median(queue_wall)},
                   {"local_cpu_s", median(local_cpu)},
                   {"queue_cpu_s", median(queue_cpu)},
                   {"server_cpu_s", median(server_cpu)},
                   {"wall_ms_per_doc", median(d_wall)},
                   {"cpu_ms_per_doc", median(d_cpu)}};
  char row[512];
  std::snprintf(row, sizeof row,
                "\nQueue overhead on %zu XML e-invoices (mapper path), 1 worker against a local run: local %.2f s / queue "
                "%.2f s wall, local %.2f / queue %.2f + nats-server %.2f CPU s: **%.2f ms per document (wall), %.2f ms "
                "CPU per document**.\n",
                overhead_docs, median(local_wall), median(queue_wall), median(local_cpu), median(queue_cpu),
                median(server_cpu), median(d_wall), median(d_cpu));
  md << row;
  std::printf("%s", md.str().c_str());
  if (!json_out.empty()) std::ofstream(json_out) << j.dump(2) << "\n";
  if (!md_out.empty()) std::ofstream(md_out) << md.str();
  server.kill(SIGTERM);
  fs::remove_all(scratch);
  return 0;
}
