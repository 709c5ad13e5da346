// CPU kernel benchmark: measures, in one run and for each thread count,
//  - memory bandwidth: multi-threaded streaming read of a buffer far larger than the caches,
//  - peak FLOP/s: an FMA loop with enough independent accumulators to fill both FMA pipes,
//  - GEMV (m = 1, bf16 weights) GB/s for the Qwen3-0.6B projection shapes, weights not in cache,
//  - one whole Qwen3-0.6B-shaped decode step (28 layers of q/k/v/o/gate/up/down + tied LM head, bf16),
//    as tokens/s and GB/s, against the roofline tokens/s <= bandwidth / bytes of weights per token,
//  - GEMM GFLOP/s at m = 512 (prefill) for the same shapes, against the measured peak.
// Every figure is the median of several timed runs after a warm-up; ratios use the bandwidth and
// peak measured in the same run with the same thread count: each rep of a workload is paired with a
// rep of its baseline run just before it, and the ratio is the median of the per-rep ratios (the
// machine's load may drift between reps). Writes JSON and a Markdown table.
//
// usage: bench_kernels [--out DIR] [--threads 1,2] [--reps N] [--quick]
#include "engine/backend/cpu/intrinsics.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <time.h>
#include <vector>

#include "engine/backend/cpu/stream_read.hpp"
#include "engine/backend/cpu/cpu_features.hpp"
#include "engine/backend/cpu/gemm.hpp"
#include "engine/backend/cpu/thread_pool.hpp"

namespace {

using quarry::engine::ThreadPool;
using namespace quarry::engine::cpu;
using Clock = std::chrono::steady_clock;

// Each timing records wall-clock time and the calling thread's CPU time. With one thread, CPU time
// leaves out the time other processes held the core (a shared machine); with more threads only wall
// time is meaningful.
double cpu_now() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct Stats {
  double median = 0, min = 0, max = 0;  // wall seconds
  double cpu_median = 0;                // calling thread's CPU seconds
};

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Stats stats_of(std::vector<double> wall, const std::vector<double>& cpu) {
  std::sort(wall.begin(), wall.end());
  return {wall[wall.size() / 2], wall.front(), wall.back(), median_of(cpu)};
}

Stats time_runs(int reps, const std::function<void()>& f) {
  f();  // warm-up
  std::vector<double> t, c;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    const double c0 = cpu_now();
    f();
    c.push_back(cpu_now() - c0);
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return stats_of(t, c);
}

// Each rep times `base` then `work` back to back and records both and their ratio base/work, so a
// drift of the machine's load between reps shifts both; returns the medians of the series.
struct Paired {
  Stats base, work;
  double ratio = 0;      // median of wall t_base / t_work
  double ratio_cpu = 0;  // the same with CPU times
};

Paired time_paired(int reps, const std::function<void()>& base, const std::function<void()>& work) {
  base();
  work();
  std::vector<double> tb, tw, cb, cw, r, rc;
  for (int i = 0; i < reps; ++i) {
    auto t0 = Clock::now();
    double c0 = cpu_now();
    base();
    cb.push_back(cpu_now() - c0);
    tb.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    t0 = Clock::now();
    c0 = cpu_now();
    work();
    cw.push_back(cpu_now() - c0);
    tw.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    r.push_back(tb.back() / tw.back());
    rc.push_back(cb.back() / cw.back());
  }
  return {stats_of(tb, cb), stats_of(tw, cw), median_of(r), median_of(rc)};
}

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

// ---- memory bandwidth ------------------------------------------------------------------------------

// ---- peak FLOP/s -------------------------------------------------------------------------------------

// 24 (AVX-512) or 12 (AVX2) independent FMA chains: >= 2 pipes x 4 cycles latency.
__attribute__((target("avx512f,fma"))) float fma_loop_avx512(long iters, float b, float c) {
  __m512 acc[24];
  for (auto& a : acc) a = _mm512_set1_ps(1.f);
  const __m512 vb = _mm512_set1_ps(b), vc = _mm512_set1_ps(c);
  for (long i = 0; i < iters; ++i)
#pragma GCC unroll 24
    for (int j = 0; j < 24; ++j) acc[j] = _mm512_fmadd_ps(acc[j], vb, vc);
  __m512 s = acc[0];
  for (int j = 1; j < 24; ++j) s = _mm512_add_ps(s, acc[j]);
  return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"))) float fma_loop_avx2(long iters, float b, float c) {
  __m256 acc[12];
  for (auto& a : acc) a = _mm256_set1_ps(1.f);
  const __m256 vb = _mm256_set1_ps(b), vc = _mm256_set1_ps(c);
  for (long i = 0; i < iters; ++i)
#pragma GCC unroll 12
    for (int j = 0; j < 12; ++j) acc[j] = _mm256_fmadd_ps(acc[j], vb, vc);
  __m256 s = acc[0];
  for (int j = 1; j < 12; ++j) s = _mm256_add_ps(s, acc[j]);
  alignas(32) float l[8];
  _mm256_store_ps(l, s);
  return l[0] + l[1] + l[2] + l[3] + l[4] + l[5] + l[6] + l[7];
}

// ---- the model shapes ----------------------------------------------------------------------------------

struct Shape {
  const char* name;
  std::size_t k, n;
};

// Qwen3-0.6B (config.json: hidden_size 1024, intermediate_size 3072, 16 attention heads and 8 KV heads
// of head_dim 128, 28 layers, vocab 151936, tie_word_embeddings true).
const Shape kLayer[] = {{"q_proj", 1024, 2048}, {"k_proj", 1024, 1024}, {"v_proj", 1024, 1024},
                        {"o_proj", 2048, 1024}, {"gate_proj", 1024, 3072}, {"up_proj", 1024, 3072},
                        {"down_proj", 3072, 1024}};
const Shape kLmHead{"lm_head", 1024, 151936};
constexpr int kLayers = 28;

std::string run_command(const std::string& cmd) {
  std::string out;
  if (FILE* f = popen(cmd.c_str(), "r")) {
    char buf[256];
    while (fgets(buf, sizeof buf, f)) out += buf;
    pclose(f);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

std::string fmt(double v, int prec = 1) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(prec);
  s << v;
  return s.str();
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_dir = ".";
  std::vector<std::size_t> thread_counts;
  int reps = 7;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--out" && i + 1 < argc) {
      out_dir = argv[++i];
    } else if (a == "--threads" && i + 1 < argc) {
      std::stringstream ss(argv[++i]);
      for (std::string t; std::getline(ss, t, ',');) thread_counts.push_back(std::stoul(t));
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::stoi(argv[++i]));
    } else if (a == "--quick") {
      quick = true;
    } else {
      std::cerr << "usage: bench_kernels [--out DIR] [--threads 1,2] [--reps N] [--quick]\n";
      return 2;
    }
  }
  if (thread_counts.empty()) {
    const std::size_t hw = std::max(1u, std::thread::hardware_concurrency());
    for (std::size_t t = 1; t < hw; t *= 2) thread_counts.push_back(t);
    thread_counts.push_back(hw);
  }
  const CpuFeatures feat = detect_cpu_features();

  // All weights of one decode step, contiguous, bf16 (random values of moderate magnitude).
  std::size_t model_elems = kLmHead.k * kLmHead.n;
  for (const Shape& s : kLayer) model_elems += kLayers * s.k * s.n;
  const std::size_t model_bytes = model_elems * 2;
  std::uint16_t* model = static_cast<std::uint16_t*>(::operator new(model_bytes, std::align_val_t(64)));
  {
    std::mt19937 rng(1);
    std::vector<std::uint16_t> block(1 << 16);
    for (auto& v : block) v = static_cast<std::uint16_t>((rng() & 0x807f) | ((118 + rng() % 10) << 7));
    for (std::size_t i = 0; i < model_elems; i += block.size())
      std::memcpy(model + i, block.data(), std::min(block.size(), model_elems - i) * 2);
  }
  std::vector<float> x(512 * 3072), y(512 * 3072);  // the largest y: m = 512, n = 3072
  {
    std::mt19937 rng(2);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    for (auto& v : x) v = u(rng);
  }
  std::vector<float> y_head(kLmHead.n);

  nlohmann::json report;
  report["bench"] = "kernels";
  report["machine"] = {{"cpu", cpu_model()},
                       {"hardware_threads", std::thread::hardware_concurrency()},
                       {"avx2", feat.avx2},
                       {"avx512", feat.avx512},
                       {"avx512_bf16", feat.avx512_bf16},
                       {"amx_bf16", feat.amx_bf16}};
  report["commit"] = run_command(std::string("git -C '") + QUARRY_SOURCE_DIR + "' rev-parse --short HEAD 2>/dev/null");
  report["kernel"] = gemm_kernel_name();
  report["dtype"] = "bf16 weights, f32 activations and accumulation";
  report["model_shapes"] = "Qwen3-0.6B";
  report["reps"] = reps;
  report["statistic"] = "median";
  nlohmann::json runs = nlohmann::json::array();
  std::ostringstream md;
  md << "# CPU kernels (" << cpu_model() << ", kernel set " << gemm_kernel_name() << ", commit "
     << report["commit"].get<std::string>() << ")\n\nMedians of " << reps << " runs after a warm-up.\n\n";

  for (std::size_t nt : thread_counts) {
    ThreadPool pool(nt);
    nlohmann::json run;
    run["threads"] = nt;
    run["load_average_before"] = load_average();
    std::cerr << "threads " << nt << "\n";

    // Memory bandwidth over the whole weight buffer (~1.2 GB, far past the L3).
    volatile std::uint64_t sink = 0;
    const auto* bytes = reinterpret_cast<const std::uint8_t*>(model);
    const std::function<void()> read_all = [&] {
      pool.run([&](std::size_t t, std::size_t n) {
        std::size_t b = model_bytes * t / n / 256 * 256, e = model_bytes * (t + 1) / n / 256 * 256;
        const std::uint64_t s = quarry::engine::cpu::stream_read(feat, bytes + b, e - b);
        if (s == 42) sink = s;
      });
    };
    const Stats bw = time_runs(reps, read_all);
    const double bw_gbs = model_bytes / bw.median / 1e9;
    run["memory_read_GBps"] = bw_gbs;
    std::cerr << "  memory read " << fmt(bw_gbs) << " GB/s\n";

    // Fork-join latency of the pool: one empty parallel region (what every matmul of a decode step
    // pays on top of its work).
    const int regions = 2000;
    const Stats fj = time_runs(reps, [&] {
      for (int r = 0; r < regions; ++r) pool.run([](std::size_t, std::size_t) {});
    });
    run["pool_run_us"] = fj.median / regions * 1e6;
    std::cerr << "  empty pool.run " << fmt(fj.median / regions * 1e6, 2) << " us\n";
    // A region where every index busy-waits 20 us: ~20 us when the workers take part (the rest is
    // fork-join overhead), up to nt x 20 us when the caller has to run their indices itself.
    const int busy_regions = 200;
    const Stats busy = time_runs(reps, [&] {
      for (int r = 0; r < busy_regions; ++r)
        pool.run([](std::size_t, std::size_t) {
          const auto until = Clock::now() + std::chrono::microseconds(20);
          while (Clock::now() < until) {
          }
        });
    });
    run["pool_region_20us_us"] = busy.median / busy_regions * 1e6;
    std::cerr << "  pool.run of 20 us per index " << fmt(busy.median / busy_regions * 1e6, 2) << " us\n";

    // Peak FLOP/s.
    const long iters = quick ? 1000000 : 4000000;
    const int lanes_x_chains = feat.avx512 ? 16 * 24 : 8 * 12;
    volatile float fsink = 0;
    const std::function<void()> fma_all = [&] {
      pool.run([&](std::size_t, std::size_t) {
        const float r = feat.avx512 ? fma_loop_avx512(iters, 0.999999f, 1e-7f)
                        : feat.avx2 ? fma_loop_avx2(iters, 0.999999f, 1e-7f) : 0.f;
        if (r == 42.f) fsink = r;
      });
    };
    const double fma_flops = feat.avx2 ? 2.0 * lanes_x_chains * iters * nt : 0.0;
    const Stats pk = time_runs(reps, fma_all);
    const double peak = fma_flops / pk.median / 1e9;
    run["peak_fma_GFLOPs"] = peak;
    if (nt == 1) {
      run["cpu_time"]["memory_read_GBps"] = model_bytes / bw.cpu_median / 1e9;
      run["cpu_time"]["peak_fma_GFLOPs"] = fma_flops / pk.cpu_median / 1e9;
    }
    std::cerr << "  peak FMA " << fmt(peak) << " GFLOP/s\n";

    // GEMV, m = 1, bf16, weights streamed from memory: successive calls use different parts of the
    // 1.2 GB buffer, so nothing is reused from the caches.
    nlohmann::json gemv = nlohmann::json::array();
    const Shape gemv_shapes[] = {{"k1024_n1024", 1024, 1024}, {"k1024_n2048", 1024, 2048},
                                 {"k1024_n3072", 1024, 3072}, {"k1024_n151936", 1024, 151936}};
    for (const Shape& s : gemv_shapes) {
      const std::size_t elems = s.k * s.n, slots = model_elems / elems;
      const std::size_t calls = std::min<std::size_t>(slots, 64);
      std::size_t slot = 0;
      const Paired st = time_paired(reps, read_all, [&] {
        for (std::size_t c = 0; c < calls; ++c) {
          gemm(x.data(), 1, s.k, s.k, model + (slot++ % slots) * elems, WeightType::bf16, s.n, y_head.data(), s.n,
               &pool);
        }
      });
      const double work_bytes = calls * elems * 2.0, gbs = work_bytes / st.work.median / 1e9;
      const double ratio = st.ratio * work_bytes / model_bytes;  // (work GB/s) / (read GB/s), per rep
      gemv.push_back({{"shape", s.name}, {"k", s.k}, {"n", s.n}, {"us_per_call", st.work.median / calls * 1e6},
                      {"GBps", gbs}, {"ratio_to_memory_read", ratio}});
      if (nt == 1)
        run["cpu_time"]["gemv_bf16_m1"].push_back({{"shape", s.name},
                                                   {"GBps", work_bytes / st.work.cpu_median / 1e9},
                                                   {"ratio_to_memory_read", st.ratio_cpu * work_bytes / model_bytes}});
      std::cerr << "  gemv " << s.name << " " << fmt(gbs) << " GB/s (" << fmt(100 * ratio) << "% of paired read)\n";
    }
    run["gemv_bf16_m1"] = gemv;

    // A whole decode step of Qwen3-0.6B (weights only: the matmuls of 28 layers and the LM head).
    const Paired step = time_paired(reps, read_all, [&] {
      const std::uint16_t* w = model;
      for (int l = 0; l < kLayers; ++l)
        for (const Shape& s : kLayer) {
          gemm(x.data(), 1, s.k, s.k, w, WeightType::bf16, s.n, y.data(), s.n, &pool);
          w += s.k * s.n;
        }
      gemm(x.data(), 1, kLmHead.k, kLmHead.k, w, WeightType::bf16, kLmHead.n, y_head.data(), kLmHead.n, &pool);
    });
    const double step_gbs = model_bytes / step.work.median / 1e9;
    run["decode_step"] = {{"weight_bytes", model_bytes},
                          {"ms_per_token", step.work.median * 1e3},
                          {"tokens_per_s", 1.0 / step.work.median},
                          {"roofline_tokens_per_s", bw_gbs * 1e9 / model_bytes},
                          {"GBps", step_gbs},
                          {"paired_read_GBps", model_bytes / step.base.median / 1e9},
                          {"ratio_to_roofline", step.ratio}};
    if (nt == 1)
      run["cpu_time"]["decode_step"] = {{"ms_per_token", step.work.cpu_median * 1e3},
                                        {"GBps", model_bytes / step.work.cpu_median / 1e9},
                                        {"ratio_to_roofline", step.ratio_cpu}};
    std::cerr << "  decode step " << fmt(step.work.median * 1e3, 2) << " ms, " << fmt(step_gbs) << " GB/s ("
              << fmt(100 * step.ratio) << "% of roofline)\n";

    // GEMM, m = 512 (prefill chunk), bf16 weights.
    nlohmann::json gemms = nlohmann::json::array();
    const Shape gemm_shapes[] = {{"k1024_n2048", 1024, 2048}, {"k1024_n3072", 1024, 3072}, {"k3072_n1024", 3072, 1024}};
    const std::size_t m = 512;
    for (const Shape& s : gemm_shapes) {
      const Paired st = time_paired(reps, fma_all, [&] {
        gemm(x.data(), m, s.k, s.k, model, WeightType::bf16, s.n, y.data(), s.n, &pool);
      });
      const double flops = 2.0 * m * s.k * s.n, gf = flops / st.work.median / 1e9;
      const double ratio = fma_flops > 0 ? st.ratio * flops / fma_flops : 0.0;
      gemms.push_back({{"shape", s.name}, {"m", m}, {"k", s.k}, {"n", s.n}, {"ms", st.work.median * 1e3},
                       {"GFLOPs", gf}, {"ratio_to_peak", ratio}});
      if (nt == 1)
        run["cpu_time"]["gemm_bf16_m512"].push_back(
            {{"shape", s.name}, {"GFLOPs", flops / st.work.cpu_median / 1e9},
             {"ratio_to_peak", fma_flops > 0 ? st.ratio_cpu * flops / fma_flops : 0.0}});
      std::cerr << "  gemm m512 " << s.name << " " << fmt(gf) << " GFLOP/s (" << fmt(100 * ratio) << "% of paired peak)\n";
    }
    run["gemm_bf16_m512"] = gemms;

    // Every kernel set this CPU runs (scalar left out: minutes), on one prefill shape.
    nlohmann::json sets = nlohmann::json::array();
    for (GemmKernel kset : {GemmKernel::avx2, GemmKernel::avx512, GemmKernel::amx}) {
      if (!gemm_kernel_available(kset)) continue;
      const Shape s{"k1024_n3072", 1024, 3072};
      const Paired st = time_paired(reps, fma_all, [&] {
        gemm(kset, x.data(), m, s.k, s.k, model, WeightType::bf16, s.n, y.data(), s.n, &pool);
      });
      const double flops = 2.0 * m * s.k * s.n;
      const double ratio = fma_flops > 0 ? st.ratio * flops / fma_flops : 0.0;
      sets.push_back({{"kernel", gemm_kernel_name(kset)}, {"shape", s.name}, {"GFLOPs", flops / st.work.median / 1e9},
                      {"ratio_to_fma_peak", ratio}});
      std::cerr << "  gemm m512 " << s.name << " kernel " << gemm_kernel_name(kset) << " "
                << fmt(flops / st.work.median / 1e9) << " GFLOP/s (" << fmt(100 * ratio) << "% of paired FMA peak)\n";
    }
    run["gemm_bf16_m512_by_kernel"] = sets;

    // Small-m sweep (decode with drafts, short prefill chunks): time per call and effective rates.
    nlohmann::json sweep = nlohmann::json::array();
    for (std::size_t ms : {1u, 2u, 4u, 8u, 12u, 16u, 17u, 24u, 32u, 64u}) {
      const Shape s{"k1024_n3072", 1024, 3072};
      const std::size_t elems = s.k * s.n, slots = model_elems / elems, calls = 32;
      std::size_t slot = 0;
      const Stats st = time_runs(reps, [&] {
        for (std::size_t c = 0; c < calls; ++c)
          gemm(x.data(), ms, s.k, s.k, model + (slot++ % slots) * elems, WeightType::bf16, s.n, y.data(), s.n, &pool);
      });
      const double per = st.median / calls;
      sweep.push_back({{"m", ms}, {"us_per_call", per * 1e6}, {"weight_GBps", elems * 2.0 / per / 1e9},
                       {"GFLOPs", 2.0 * ms * elems / per / 1e9}});
    }
    run["small_m_sweep_k1024_n3072"] = sweep;
    runs.push_back(run);
  }
  report["runs"] = runs;

  md << "| threads | memory read GB/s | peak FMA GFLOP/s | pool.run us: empty / 20 us per index | decode step ms (GB/s, % roofline) |";
  for (const auto& g : runs[0]["gemv_bf16_m1"]) md << " gemv " << g["shape"].get<std::string>() << " GB/s (%) |";
  for (const auto& g : runs[0]["gemm_bf16_m512"]) md << " gemm m512 " << g["shape"].get<std::string>() << " GFLOP/s (% peak) |";
  md << "\n|---|---|---|---|---|";
  for (std::size_t i = 0; i < runs[0]["gemv_bf16_m1"].size() + runs[0]["gemm_bf16_m512"].size(); ++i) md << "---|";
  md << "\n";
  for (const auto& r : runs) {
    const auto& d = r["decode_step"];
    md << "| " << r["threads"].get<std::size_t>() << " | " << fmt(r["memory_read_GBps"]) << " | "
       << fmt(r["peak_fma_GFLOPs"]) << " | " << fmt(r["pool_run_us"], 2) << " / " << fmt(r["pool_region_20us_us"], 1) << " | "
       << fmt(d["ms_per_token"].get<double>(), 2) << " ("
       << fmt(d["GBps"]) << ", " << fmt(100 * d["ratio_to_roofline"].get<double>()) << "%) |";
    for (const auto& g : r["gemv_bf16_m1"])
      md << " " << fmt(g["GBps"]) << " (" << fmt(100 * g["ratio_to_memory_read"].get<double>()) << "%) |";
    for (const auto& g : r["gemm_bf16_m512"])
      md << " " << fmt(g["GFLOPs"]) << " (" << fmt(100 * g["ratio_to_peak"].get<double>()) << "%) |";
    md << "\n";
  }
  for (const auto& r : runs) {
    if (!r.contains("cpu_time")) continue;
    const auto& c = r["cpu_time"];
    md << "| 1 (CPU time) | " << fmt(c["memory_read_GBps"]) << " | " << fmt(c["peak_fma_GFLOPs"]) << " | - | "
       << fmt(c["decode_step"]["ms_per_token"].get<double>(), 2) << " (" << fmt(c["decode_step"]["GBps"]) << ", "
       << fmt(100 * c["decode_step"]["ratio_to_roofline"].get<double>()) << "%) |";
    for (const auto& g : c["gemv_bf16_m1"])
      md << " " << fmt(g["GBps"]) << " (" << fmt(100 * g["ratio_to_memory_read"].get<double>()) << "%) |";
    for (const auto& g : c["gemm_bf16_m512"])
      md << " " << fmt(g["GFLOPs"]) << " (" << fmt(100 * g["ratio_to_peak"].get<double>()) << "%) |";
    md << "\n";
  }
  md << "\nGEMM m=512 k=1024 n=3072 bf16 by kernel set, GFLOP/s (% of the AVX-512 FMA-loop peak; amx rounds x "
        "to bf16):\n\n| threads |";
  for (const auto& g : runs[0]["gemm_bf16_m512_by_kernel"]) md << " " << g["kernel"].get<std::string>() << " |";
  md << "\n|---|";
  for (std::size_t i = 0; i < runs[0]["gemm_bf16_m512_by_kernel"].size(); ++i) md << "---|";
  md << "\n";
  for (const auto& r : runs) {
    md << "| " << r["threads"].get<std::size_t>() << " |";
    for (const auto& g : r["gemm_bf16_m512_by_kernel"])
      md << " " << fmt(g["GFLOPs"]) << " (" << fmt(100 * g["ratio_to_fma_peak"].get<double>()) << "%) |";
    md << "\n";
  }
  md << "\nSmall-m sweep, k=1024 n=3072 bf16 (us per call / GFLOP/s):\n\n| threads |";
  for (const auto& s : runs[0]["small_m_sweep_k1024_n3072"]) md << " m=" << s["m"].get<std::size_t>() << " |";
  md << "\n|---|";
  for (std::size_t i = 0; i < runs[0]["small_m_sweep_k1024_n3072"].size(); ++i) md << "---|";
  md << "\n";
  for (const auto& r : runs) {
    md << "| " << r["threads"].get<std::size_t>() << " |";
    for (const auto& s : r["small_m_sweep_k1024_n3072"])
      md << " " << fmt(s["us_per_call"]) << " / " << fmt(s["GFLOPs"]) << " |";
    md << "\n";
  }
  md << "\nPercentages: decode and gemv against the streaming-read bandwidth, gemm against the FMA-loop peak, "
        "each the median of per-rep ratios to a baseline rep run just before. ";
  md << "Rows \"1 (CPU time)\": the single-thread run timed by its thread's CPU time (excludes time "
        "other processes held the core). Load average at the start of each thread count: ";
  for (const auto& r : runs) md << r["threads"].get<std::size_t>() << " thread(s): " << r["load_average_before"].get<std::string>() << "; ";
  md << "\n\nWeights bf16, activations and accumulation f32. The decode step is the 196 projection matmuls "
        "of 28 layers plus the tied LM head at m = 1 (" << fmt(model_bytes / 1e9, 3)
     << " GB of weights per token); its roofline is memory read GB/s / bytes per token.\n";

  const std::string json_path = out_dir + "/bench_kernels.json", md_path = out_dir + "/bench_kernels.md";
  std::ofstream(json_path) << report.dump(2) << "\n";
  std::ofstream(md_path) << md.str();
  std::cout << md.str();
  std::cerr << "wrote " << json_path << " and " << md_path << "\n";
  ::operator delete(model, std::align_val_t(64));
  return 0;
}
