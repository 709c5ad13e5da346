// `quarry bench` on a tiny configuration (the shipped model and a tiny random-weight checkpoint, a
// few tokens per run): the report has every section, every figure is finite and the measured ones
// are positive; the Markdown and SVG files are written; bad options fail with a clear message.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "pipeline/bench/harness.hpp"
#include "tests/common/run_command.hpp"

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;
using quarry::test_support::run_quarry;

namespace {

fs::path temp_dir(const std::string& name) {
  const fs::path d = fs::path(QUARRY_BINARY_DIR) / "test_tmp" / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// Every number anywhere in `j` is finite and not negative; returns how many numbers there are.
std::size_t check_numbers(const json& j, const std::string& where) {
  std::size_t n = 0;
  if (j.is_number()) {
    const double v = j.get<double>();
    EXPECT_TRUE(std::isfinite(v)) << where;
    EXPECT_GE(v, 0.0) << where;
    return 1;
  }
  if (j.is_object())
    for (auto it = j.begin(); it != j.end(); ++it) n += check_numbers(it.value(), where + "/" + it.key());
  if (j.is_array())
    for (std::size_t i = 0; i < j.size(); ++i) n += check_numbers(j[i], where + "/" + std::to_string(i));
  return n;
}

void expect_positive(const json& j, const char* key, const std::string& where) {
  ASSERT_TRUE(j.contains(key)) << where << " lacks " << key;
  ASSERT_TRUE(j[key].is_number()) << where << "/" << key;
  const double v = j[key].get<double>();
  EXPECT_TRUE(std::isfinite(v) && v > 0) << where << "/" << key << " = " << v;
}

quarry::bench::BenchOptions tiny_options(const fs::path& work) {
  quarry::bench::BenchOptions o;
  o.models = {fs::path(QUARRY_SOURCE_DIR) / "models" / "quarry-extract-11m"};
  quarry::bench::RandomModelSpec r;
  r.preset = "tiny";
  o.random_models = {r};
  o.random_model_workloads = {"long-rag-8k"};
  o.work_dir = work;
  o.workloads = {"qa", "json-kie", "long-rag-8k"};
  o.context_scale = 0.03;  // long-rag-8k: ~225 prompt tokens
  o.output_scale = 0.03;   // 8 or 9 output tokens
  o.runs = 2;
  o.concurrency = {1, 2};
  o.pp = {40};  // 2 full KV blocks + 8 tokens: a prompt seen before would be 32 tokens cached
  o.tg = {4, 6};  // two tests with the same prompt length: each must still compute its whole prompt
  o.depth = {0, 32, 1000000};  // the last exceeds every model's positions: recorded as skipped
  o.threads = 2;
  o.bandwidth_mib = 16;
  o.samples_dir = fs::path(QUARRY_SOURCE_DIR) / "samples";
  o.invoice_schema = fs::path(QUARRY_SOURCE_DIR) / "schemas" / "invoice.schema.json";
  o.commit = "test";
  return o;
}

}  // namespace

TEST(BenchStats, MatchNumpyDefinitions) {
  using namespace quarry::bench;
  // numpy.percentile(..., method="linear") and numpy.std(..., ddof=1) values.
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4}, 95), 3.85);
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile({10}, 95), 10.0);
  EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2.0);
  EXPECT_DOUBLE_EQ(median({}), 0.0);
  EXPECT_NEAR(stddev({2, 4, 4, 4, 5, 5, 7, 9}), 2.138089935299395, 1e-12);
  EXPECT_DOUBLE_EQ(mean({1, 2, 3, 4}), 2.5);
}

TEST(BenchStats, RandomModelSpec) {
  using quarry::bench::parse_random_model_spec;
  EXPECT_EQ(parse_random_model_spec("qwen3-0.6b:1").layers, 1u);
  EXPECT_EQ(parse_random_model_spec("qwen3-0.6b").layers, 0u);
  EXPECT_THROW(parse_random_model_spec("qwen3-0.6b:x"), std::invalid_argument);
  EXPECT_THROW(parse_random_model_spec("qwen3-0.6b:0"), std::invalid_argument);
  EXPECT_THROW(parse_random_model_spec("gpt-9"), std::invalid_argument);
}

TEST(BenchReport, TinyRunHasEverySectionAndPositiveFiniteFigures) {
  const fs::path work = temp_dir("bench_work"), out = temp_dir("bench_out");
  const json r = quarry::bench::run_bench(tiny_options(work), [](std::string_view) {});

  for (const char* k : {"bench", "schema_version", "commit", "started_utc", "machine", "options", "roofline", "models"})
    EXPECT_TRUE(r.contains(k)) << k;
  EXPECT_EQ(r["commit"], "test");
  for (const char* k : {"cpu", "hardware_threads", "threads_used", "device"}) EXPECT_TRUE(r["machine"].contains(k)) << k;
  expect_positive(r["roofline"], "memory_bandwidth_gb_s", "roofline");
  expect_positive(r["roofline"], "gemm_gflop_s", "roofline");
  EXPECT_GT(check_numbers(r, ""), 100u);

  ASSERT_EQ(r["models"].size(), 2u);
  const json& shipped = r["models"][0];
  const json& random = r["models"][1];
  for (const char* k : {"dtype", "layers", "vocab_size", "max_position_embeddings"}) EXPECT_TRUE(shipped["model"].contains(k)) << k;
  expect_positive(shipped["model"], "weight_bytes_per_step", "model");
  EXPECT_FALSE(shipped["model"]["random_weights"].get<bool>());
  EXPECT_TRUE(random["model"]["random_weights"].get<bool>());

  ASSERT_EQ(shipped["workloads"].size(), 3u);
  ASSERT_EQ(random["workloads"].size(), 1u);  // only the long-rag workload runs on the random checkpoint
  EXPECT_EQ(random["workloads"][0]["workload"], "long-rag-8k");
  for (const json* m : {&shipped, &random})
    for (const auto& w : (*m)["workloads"]) {
      const std::string where = w["workload"].get<std::string>();
      for (const char* k : {"decode_tok_s", "ttft_cold_s", "ttft_warm_s", "prefill_tok_s_cold", "output_tokens",
                            "bytes_per_decode_step", "achieved_gb_s", "roofline_tok_s", "fraction_of_roofline",
                            "prefill_gflop_s_cold"})
        expect_positive(w, k, where);
      EXPECT_EQ(w["runs"].size(), 3u) << where;  // 1 warm-up + 2 measured
      EXPECT_TRUE(w["runs"][0]["warmup"].get<bool>());
      EXPECT_EQ(w["decode_tok_s_runs"].size(), 2u);
    }
  EXPECT_TRUE(shipped["workloads"][1]["constrained"].get<bool>());
  // A fresh engine per workload: the warm-up run finds an empty prefix cache (cold); the measured
  // runs of the same prompt find its full blocks cached (warm).
  for (const json* m : {&shipped, &random})
    for (const auto& w : (*m)["workloads"]) {
      EXPECT_EQ(w["runs"][0]["cached_tokens"].get<std::size_t>(), 0u) << w["workload"];
      const double prompt = w["prompt_tokens"].get<double>();
      EXPECT_GE(w["cached_tokens_warm"].get<double>(), prompt - 16) << w["workload"];
      EXPECT_LT(w["cached_tokens_warm"].get<double>(), prompt) << w["workload"];
    }
  const json& rag = shipped["workloads"][2];
  EXPECT_NEAR(rag["prompt_tokens"].get<double>(), rag["target_prompt_tokens"].get<double>(), 8.0);

  ASSERT_TRUE(shipped.contains("concurrency"));
  ASSERT_EQ(shipped["concurrency"].size(), 2u);
  EXPECT_FALSE(random.contains("concurrency"));
  for (const auto& l : shipped["concurrency"]) {
    expect_positive(l, "aggregate_tok_s", "concurrency");
    for (const char* k : {"p50", "p95"}) {
      expect_positive(l["ttft_s"], k, "concurrency ttft");
      expect_positive(l["decode_tok_s_per_request"], k, "concurrency decode");
    }
    EXPECT_EQ(l["samples"].get<std::size_t>(), 2 * l["concurrency"].get<std::size_t>());
  }

  for (const json* m : {&shipped, &random}) {
    ASSERT_EQ((*m)["pp_tg"].size(), 6u);
    std::size_t skipped = 0;
    for (const auto& t : (*m)["pp_tg"]) {
      if (t.contains("skipped")) {
        ++skipped;
        EXPECT_NE(t["skipped"].get<std::string>().find("positions"), std::string::npos);
        continue;
      }
      expect_positive(t["pp_tok_s"], "median", "pp");
      expect_positive(t["tg_tok_s"], "median", "tg");
      expect_positive(t, "tg_achieved_gb_s", "tg");
      if (t["depth"].get<std::size_t>() == 32) {  // context loaded first, pp over the 32 cached tokens
        expect_positive(t["ctx_pp_tok_s"], "median", "ctx_pp");
        EXPECT_EQ(t["prompt_tokens_computed"].get<double>(), 40.0) << t["test"];
      } else {
        EXPECT_FALSE(t.contains("ctx_pp_tok_s"));
        EXPECT_EQ(t["prompt_tokens_computed"].get<double>(), 40.0) << t["test"];
      }
    }
    EXPECT_EQ(skipped, 2u);
  }
  EXPECT_FALSE(shipped["drafting"]["available"].get<bool>());

  const auto files = quarry::bench::write_report(r, out);
  EXPECT_EQ(json::parse(read(out / "report.json")), r);
  const std::string md = read(out / "report.md");
  for (const char* s : {"# quarry bench", "| workload |", "qa", "json-kie", "long-rag-8k", "### Concurrency", "### pp / tg",
                        "skipped"})
    EXPECT_NE(md.find(s), std::string::npos) << s;
  for (const char* f : {"decode_by_workload.svg", "tok_s_by_concurrency.svg"}) {
    const std::string svg = read(out / f);
    EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u) << f;
    EXPECT_NE(svg.find("</svg>"), std::string::npos) << f;
    EXPECT_EQ(svg.find("nan"), std::string::npos) << f;
  }
  EXPECT_FALSE(fs::exists(out / "acceptance_by_position.svg"));  // no drafting figures, no plot
}

TEST(BenchCli, WritesReportAndRejectsBadOptions) {
  const fs::path out = temp_dir("bench_cli");
  const auto ok = run_quarry("bench --workloads qa --runs 1 --output-scale 0.02 --concurrency none --random-model none "
                             "--bandwidth-mib 16 --threads 2 -o '" + out.string() + "'");
  ASSERT_EQ(ok.code, 0) << ok.out;
  const json r = json::parse(read(out / "report.json"));
  EXPECT_EQ(r["models"].size(), 1u);
  EXPECT_EQ(r["models"][0]["workloads"][0]["workload"], "qa");

  const auto bad = run_quarry("bench --workloads qa,nope --random-model none -o '" + out.string() + "'");
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.out.find("unknown workload \"nope\""), std::string::npos) << bad.out;
  const auto bad_c = run_quarry("bench --concurrency 1,x --random-model none -o '" + out.string() + "'");
  EXPECT_EQ(bad_c.code, 1);
  EXPECT_NE(bad_c.out.find("--concurrency"), std::string::npos) << bad_c.out;
  const auto bad_r = run_quarry("bench --random-model qwen3-0.6b:zero -o '" + out.string() + "'");
  EXPECT_EQ(bad_r.code, 1);
  EXPECT_NE(bad_r.out.find("layers"), std::string::npos) << bad_r.out;
}

TEST(BenchReport, DraftingFiguresWithMtp) {
  // The shipped model has an MTP module: --mtp 2 gives acceptance per draft position (a rate in
  // [0, 1] at each of the 2 positions) and a mean acceptance length in [1, 3], and their plot.
  quarry::bench::BenchOptions o = tiny_options(temp_dir("bench_work_mtp"));
  o.random_models.clear();
  o.workloads = {"json-kie"};
  o.concurrency.clear();
  o.pp.clear();
  o.runs = 1;
  o.output_scale = 0.1;  // 30 tokens
  o.mtp = 2;
  const json r = quarry::bench::run_bench(o, [](std::string_view) {});
  const json& m = r["models"][0];
  ASSERT_TRUE(m["drafting"]["available"].get<bool>()) << m["drafting"].dump();
  const json& w = m["workloads"][0];
  ASSERT_EQ(w["acceptance_by_position"].size(), 2u) << w.dump();
  for (const auto& a : w["acceptance_by_position"]) {
    EXPECT_GE(a.get<double>(), 0.0);
    EXPECT_LE(a.get<double>(), 1.0);
  }
  EXPECT_GE(w["mean_acceptance_length"].get<double>(), 1.0);
  EXPECT_LE(w["mean_acceptance_length"].get<double>(), 3.0);
  EXPECT_GT(w["tokens_per_decode_step"].get<double>(), 1.0);  // drafts were accepted: fewer steps than tokens
  // The no-draft baseline of the same run: one token per step.
  ASSERT_TRUE(w.contains("no_draft"));
  expect_positive(w["no_draft"], "decode_tok_s", "no_draft");
  expect_positive(w, "draft_speedup", "json-kie");
  check_numbers(r, "");
  const fs::path out = temp_dir("bench_out_mtp");
  (void)quarry::bench::write_report(r, out);
  EXPECT_TRUE(fs::exists(out / "acceptance_by_position.svg"));
  EXPECT_NE(read(out / "report.md").find("### Drafting (MTP depth 2;"), std::string::npos);
}
