// Per-document cost of the e-invoice path on the real examples of each syntax:
//   parse     hardened libxml2 parse only (extractors/xml/xml_safe) — the baseline;
//   map_xml   parse + detect + map to invoice JSON (what the extractor pays per e-invoice);
//   validate  valijson conformance of the mapped JSON against schemas/invoice.schema.json.
// Compare map_xml with parse in the same run: the ratio is the cost of mapping over parsing.
//
//   build/bench/einvoice/bench_einvoice --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//       --benchmark_out=einvoice.json --benchmark_out_format=json      (one command line)
#include <benchmark/benchmark.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "extractors/einvoice/einvoice.hpp"
#include "extractors/xml/xml_safe.hpp"
#include "schemas/validate.hpp"

namespace fs = std::filesystem;

namespace {

std::vector<std::string> load(const fs::path& dir) {
  std::vector<fs::path> paths;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file()) paths.push_back(e.path());
  std::sort(paths.begin(), paths.end());
  std::vector<std::string> docs;
  for (const auto& p : paths) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    docs.push_back(s.str());
  }
  return docs;
}

const fs::path kCorpora = fs::path(QUARRY_SHARED_DIR) / "corpora";

const std::vector<std::string>& docs(int format) {
  static const std::vector<std::string> ubl = load(kCorpora / "en16931" / "ubl");
  static const std::vector<std::string> cii = load(kCorpora / "en16931" / "cii");
  static const std::vector<std::string> nav = load(kCorpora / "nav" / "xml");
  return format == 0 ? ubl : format == 1 ? cii : nav;
}

void set_counters(benchmark::State& state, const std::vector<std::string>& d) {
  std::size_t bytes = 0;
  for (const auto& x : d) bytes += x.size();
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * d.size()));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
  state.SetLabel(state.range(0) == 0 ? "ubl" : state.range(0) == 1 ? "cii" : "nav");
}

void BM_Parse(benchmark::State& state) {
  const auto& d = docs(static_cast<int>(state.range(0)));
  const quarry::ExtractOptions opts;
  for (auto _ : state)
    for (const auto& x : d) benchmark::DoNotOptimize(quarry::xml::parse(x, "bench.xml", opts));
  set_counters(state, d);
}

void BM_MapXml(benchmark::State& state) {
  const auto& d = docs(static_cast<int>(state.range(0)));
  const quarry::ExtractOptions opts;
  for (auto _ : state)
    for (const auto& x : d) benchmark::DoNotOptimize(quarry::einvoice::map_xml(x, "bench.xml", opts));
  set_counters(state, d);
}

void BM_Validate(benchmark::State& state) {
  const auto& d = docs(static_cast<int>(state.range(0)));
  std::vector<nlohmann::json> mapped;
  for (const auto& x : d)
    if (auto r = quarry::einvoice::map_xml(x, "bench.xml", {}); r && r->has_value()) mapped.push_back((*r)->invoice);
  quarry::schemas::SchemaCache cache;
  auto v = cache.get("invoice.schema.json");
  for (auto _ : state)
    for (const auto& j : mapped) benchmark::DoNotOptimize(v->validate(j));
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * mapped.size()));
  state.SetLabel(state.range(0) == 0 ? "ubl" : state.range(0) == 1 ? "cii" : "nav");
}

}  // namespace

BENCHMARK(BM_Parse)->DenseRange(0, 2)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MapXml)->DenseRange(0, 2)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Validate)->DenseRange(0, 2)->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();
