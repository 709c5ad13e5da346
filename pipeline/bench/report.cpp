// report.json, report.md and the SVG plots of a `quarry bench` report.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include "pipeline/bench/harness.hpp"

namespace quarry::bench {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

std::string num(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

double get(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

std::string xml_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

struct Bar {
  std::string label;
  double value = 0;
  int series = 0;  ///< colour index
};

/// A horizontal bar chart: one row per bar, value printed at the bar's end, a legend per series.
std::string bar_chart(const std::string& title, const std::string& unit, const std::vector<Bar>& bars,
                      const std::vector<std::string>& series_names) {
  static const char* colours[] = {"#4878a8", "#e4813b", "#59a14f", "#b07aa1", "#9c755f", "#e15759"};
  const int left = 300, width = 820, plot_w = width - left - 90, row = 22, top = 50;
  const int legend_h = series_names.size() > 1 ? 20 * static_cast<int>(series_names.size()) + 10 : 0;
  const int height = top + row * static_cast<int>(bars.size()) + 40 + legend_h;
  double vmax = 0;
  for (const auto& b : bars) vmax = std::max(vmax, b.value);
  if (vmax <= 0) vmax = 1;
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  s << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s << "<text x=\"10\" y=\"22\" font-size=\"15\" font-weight=\"bold\">" << xml_escape(title) << "</text>\n";
  s << "<text x=\"10\" y=\"40\" fill=\"#555\">" << xml_escape(unit) << "</text>\n";
  for (int g = 0; g <= 4; ++g) {  // grid lines at 0, 25, 50, 75, 100 % of the largest value
    const double x = left + plot_w * g / 4.0;
    s << "<line x1=\"" << x << "\" y1=\"" << top - 4 << "\" x2=\"" << x << "\" y2=\"" << top + row * bars.size()
      << "\" stroke=\"#ddd\"/>\n";
    s << "<text x=\"" << x << "\" y=\"" << top + row * bars.size() + 16 << "\" text-anchor=\"middle\" fill=\"#555\">"
      << num(vmax * g / 4.0, vmax >= 100 ? 0 : vmax >= 10 ? 1 : 2) << "</text>\n";
  }
  for (std::size_t i = 0; i < bars.size(); ++i) {
    const auto& b = bars[i];
    const double y = top + row * static_cast<double>(i);
    const double w = std::max(0.0, plot_w * b.value / vmax);
    s << "<text x=\"" << left - 6 << "\" y=\"" << y + 15 << "\" text-anchor=\"end\">" << xml_escape(b.label)
      << "</text>\n";
    s << "<rect x=\"" << left << "\" y=\"" << y + 3 << "\" width=\"" << num(w, 1) << "\" height=\"" << row - 6
      << "\" fill=\"" << colours[b.series % 6] << "\"/>\n";
    s << "<text x=\"" << left + w + 4 << "\" y=\"" << y + 15 << "\">"
      << num(b.value, b.value >= 100 ? 0 : b.value >= 10 ? 1 : 2) << "</text>\n";
  }
  if (series_names.size() > 1)
    for (std::size_t k = 0; k < series_names.size(); ++k) {
      const double y = top + row * static_cast<double>(bars.size()) + 32 + 20 * static_cast<double>(k);
      s << "<rect x=\"" << left << "\" y=\"" << y - 10 << "\" width=\"12\" height=\"12\" fill=\"" << colours[k % 6]
        << "\"/>\n<text x=\"" << left + 18 << "\" y=\"" << y << "\">" << xml_escape(series_names[k]) << "</text>\n";
    }
  s << "</svg>\n";
  return s.str();
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
  if (!out) throw std::runtime_error(p.string() + ": write failed");
}

std::string model_name(const json& m) { return m["model"].value("label", std::string("model")); }

}  // namespace

std::string report_markdown(const json& r) {
  std::ostringstream s;
  const json& mach = r["machine"];
  const json& roof = r["roofline"];
  const json& opt = r["options"];
  s << "# quarry bench\n\n";
  s << "- commit `" << r.value("commit", "unknown") << "`, quarry " << r.value("quarry_version", "") << ", started "
    << r.value("started_utc", "") << ", " << num(get(r, "wall_s"), 0) << " s in all\n";
  s << "- machine: " << mach.value("cpu", "") << "; " << mach.value("threads_used", 0) << " of "
    << mach.value("hardware_threads", 0) << " hardware threads used; " << num(get(mach, "memory_gib"), 1)
    << " GiB; device " << mach.value("device", "") << "; load average at start "
    << (mach["load_average_at_start"].empty() ? std::string("?") : num(mach["load_average_at_start"][0].get<double>(), 2))
    << ", at end "
    << (mach.contains("load_average_at_end") && !mach["load_average_at_end"].empty()
            ? num(mach["load_average_at_end"][0].get<double>(), 2)
            : std::string("?"))
    << "\n";
  s << "- roofline: memory bandwidth " << num(get(roof, "memory_bandwidth_gb_s"), 2) << " GB/s (best of "
    << roof.value("memory_bandwidth_runs", 0) << " runs; median " << num(get(roof, "memory_bandwidth_gb_s_median"), 2)
    << "), GEMM " << num(get(roof, "gemm_gflop_s"), 1) << " GFLOP/s (" << roof.value("gemm_weights", "")
    << " weights, 256x1024x1024)\n";
  s << "- method: greedy, thinking off; 1 warm-up + " << opt.value("runs", 0)
    << " measured runs per workload on a fresh engine, medians; TTFT cold = the warm-up run (empty prefix cache), "
       "TTFT warm = median of the measured runs (same prompt again; prefix cache "
    << (opt.value("prefix_caching", false) ? "on" : "off") << ")\n";
  if (!opt.value("preset", std::string()).empty())
    s << "- preset `" << opt.value("preset", "") << "`: " << opt.value("scaling", "") << "\n";
  s << "\n";

  for (const auto& m : r["models"]) {
    const json& mi = m["model"];
    s << "## " << model_name(m) << "\n\n";
    s << mi.value("architecture", "") << ", " << mi.value("dtype", "") << ", " << mi.value("layers", 0) << " layers, hidden "
      << mi.value("hidden_size", 0) << ", heads " << mi.value("attention_heads", 0) << "/" << mi.value("kv_heads", 0)
      << " x " << mi.value("head_dim", 0) << ", vocab " << mi.value("vocab_size", 0) << ", "
      << mi.value("max_position_embeddings", 0) << " positions; " << num(get(mi, "weight_bytes_per_step") / 1e6, 1)
      << " MB of weights read per decode step, KV " << num(get(mi, "kv_bytes_per_token") / 1e3, 1)
      << " KB per token (" << (mi.value("compute", std::string("exact")) == "bf16" ? "bf16" : "f32") << "); compute "
      << mi.value("compute", std::string("exact")) << (mi.value("random_weights", false) ? "; random weights" : "")
      << ".\n\n";
    if (mi.value("weights_fit_in_last_level_cache", false))
      s << "Its weights fit in the CPU's last-level cache (" << num(get(mach, "last_level_cache_bytes") / 1e6, 0)
        << " MB), so decode is not bound by the DRAM bandwidth: the roofline columns are a reference, not a "
           "ceiling, and can be exceeded.\n\n";
    if (!m["workloads"].empty()) {
      s << "| workload | prompt tok | output tok | decode tok/s | TTFT cold s | TTFT warm s | cached tok (warm) "
           "| prefill tok/s (cold) | MB/step | achieved GB/s | roofline tok/s | % of roofline | CPU share |\n";
      s << "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
      for (const auto& w : m["workloads"])
        s << "| " << w.value("workload", "") << (w.value("constrained", false) ? " (constrained)" : "") << " | "
          << w.value("prompt_tokens", 0) << " | " << num(get(w, "output_tokens"), 0) << " | "
          << num(get(w, "decode_tok_s"), 2) << " | " << num(get(w, "ttft_cold_s"), 3) << " | "
          << num(get(w, "ttft_warm_s"), 3) << " | " << num(get(w, "cached_tokens_warm"), 0) << " | "
          << num(get(w, "prefill_tok_s_cold"), 1) << " | "
          << num(get(w, "bytes_per_decode_step") / 1e6, 1) << " | " << num(get(w, "achieved_gb_s"), 2) << " | "
          << num(get(w, "roofline_tok_s"), 1) << " | " << num(100 * get(w, "fraction_of_roofline"), 1) << " | "
          << num(get(w, "cpu_share"), 2) << " |\n";
      s << "\n";
    }
    for (const auto& k : m["skipped_workloads"])
      s << "- skipped " << k.value("workload", "") << ": " << k.value("reason", "") << "\n";
    if (!m["skipped_workloads"].empty()) s << "\n";
    if (m.contains("concurrency")) {
      s << "### Concurrency (requests submitted together: qa, code, json-kie, hungarian in turn)\n\n";
      s << "| concurrency | aggregate tok/s | TTFT p50 s | TTFT p95 s | decode tok/s per request p50 | p95 | "
           "achieved GB/s | CPU share |\n| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
      for (const auto& l : m["concurrency"])
        s << "| " << l.value("concurrency", 0) << " | " << num(get(l, "aggregate_tok_s"), 2) << " | "
          << num(get(l["ttft_s"], "p50"), 3) << " | " << num(get(l["ttft_s"], "p95"), 3) << " | "
          << num(get(l["decode_tok_s_per_request"], "p50"), 2) << " | "
          << num(get(l["decode_tok_s_per_request"], "p95"), 2) << " | " << num(get(l, "achieved_gb_s"), 2) << " | "
          << num(get(l, "cpu_share"), 2) << " |\n";
      s << "\n";
    }
    if (m.contains("pp_tg")) {
      s << "### pp / tg (llama-benchy style; pp t/s = prompt tokens computed / TTFT, tg t/s = (tokens - 1) / decode "
           "time; with a prefix cache and a depth, the context is loaded first (ctx_pp) and pp runs over it)\n\n";
      s << "| test | pp t/s | tg t/s | ctx_pp t/s | pp tokens computed | TTFT s | tg GB/s | tg % of roofline "
           "| pp % of GEMM peak |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
      for (const auto& t : m["pp_tg"]) {
        if (t.contains("skipped")) {
          s << "| " << t.value("test", "") << " | skipped: " << t.value("skipped", "") << " | | | | | | | |\n";
          continue;
        }
        s << "| " << t.value("test", "") << " | " << num(get(t["pp_tok_s"], "median"), 1) << " ± "
          << num(get(t["pp_tok_s"], "std"), 1) << " | " << num(get(t["tg_tok_s"], "median"), 2) << " ± "
          << num(get(t["tg_tok_s"], "std"), 2) << " | "
          << (t.contains("ctx_pp_tok_s") ? num(get(t["ctx_pp_tok_s"], "median"), 1) : std::string("-")) << " | "
          << num(get(t, "prompt_tokens_computed"), 0) << " | " << num(get(t, "ttft_s"), 3) << " | "
          << num(get(t, "tg_achieved_gb_s"), 2) << " | " << num(100 * get(t, "tg_fraction_of_roofline"), 1) << " | "
          << num(100 * get(t, "pp_fraction_of_gemm_peak"), 1) << " |\n";
      }
      s << "\n";
    }
    const json& d = m["drafting"];
    if (d.value("available", false)) {
      s << "### Drafting (MTP depth " << d.value("mtp_depth", 0)
        << "; the no-draft baseline runs the same workload without drafting in the same run)\n\n"
           "| workload | acceptance by position | mean acceptance length | decode tok/s | no-draft tok/s | speedup |\n"
           "| --- | --- | ---: | ---: | ---: | ---: |\n";
      for (const auto& w : m["workloads"]) {
        if (!w.contains("acceptance_by_position")) continue;
        std::string acc;
        for (const auto& a : w["acceptance_by_position"]) acc += (acc.empty() ? "" : ", ") + num(100 * a.get<double>(), 1) + "%";
        s << "| " << w.value("workload", "") << " | " << acc << " | " << num(get(w, "mean_acceptance_length"), 2) << " | "
          << num(get(w, "decode_tok_s"), 2) << " | "
          << (w.contains("no_draft") ? num(get(w["no_draft"], "decode_tok_s"), 2) : std::string("-")) << " | "
          << (w.contains("draft_speedup") ? num(get(w, "draft_speedup"), 2) + "x" : std::string("-")) << " |\n";
      }
      s << "\n";
    } else {
      s << "Drafting: " << d.value("note", "none") << ".\n\n";
    }
  }
  return s.str();
}

std::vector<fs::path> write_report(const json& report, const fs::path& out_dir) {
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) throw std::runtime_error(out_dir.string() + ": cannot create the output folder: " + ec.message());
  std::vector<fs::path> written;
  write_text(out_dir / "report.json", report.dump(2) + "\n");
  written.push_back(out_dir / "report.json");
  write_text(out_dir / "report.md", report_markdown(report));
  written.push_back(out_dir / "report.md");

  std::vector<std::string> model_names;
  std::vector<Bar> by_workload, by_conc, acceptance;
  for (std::size_t i = 0; i < report["models"].size(); ++i) {
    const json& m = report["models"][i];
    model_names.push_back(model_name(m));
    for (const auto& w : m["workloads"]) {
      by_workload.push_back({w.value("workload", "") + " · " + model_name(m).substr(0, 24), get(w, "decode_tok_s"),
                             static_cast<int>(i)});
      if (w.contains("acceptance_by_position")) {
        std::size_t k = 1;
        for (const auto& a : w["acceptance_by_position"])
          acceptance.push_back({w.value("workload", "") + " · draft " + std::to_string(k++), 100 * a.get<double>(),
                                static_cast<int>(i)});
      }
    }
    if (m.contains("concurrency"))
      for (const auto& l : m["concurrency"]) {
        const std::string c = "c=" + std::to_string(l.value("concurrency", 0));
        by_conc.push_back({c + " aggregate", get(l, "aggregate_tok_s"), 0});
        by_conc.push_back({c + " per request p50", get(l["decode_tok_s_per_request"], "p50"), 1});
      }
  }
  if (!by_workload.empty()) {
    write_text(out_dir / "decode_by_workload.svg",
               bar_chart("Decode tok/s by workload", "output tokens per second of decode (median of the measured runs)",
                         by_workload, model_names));
    written.push_back(out_dir / "decode_by_workload.svg");
  }
  if (!by_conc.empty()) {
    write_text(out_dir / "tok_s_by_concurrency.svg",
               bar_chart("tok/s by concurrency", "aggregate: all output tokens / wall time; per request: decode tok/s",
                         by_conc, {"aggregate", "per request, p50"}));
    written.push_back(out_dir / "tok_s_by_concurrency.svg");
  }
  if (!acceptance.empty()) {
    write_text(out_dir / "acceptance_by_position.svg",
               bar_chart("Draft acceptance by position", "% of drafts at that position accepted", acceptance, model_names));
    written.push_back(out_dir / "acceptance_by_position.svg");
  }
  return written;
}

}  // namespace quarry::bench
