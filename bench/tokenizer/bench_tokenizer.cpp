// Tokenizer encode throughput on the text of the real documents (corpora/: XML and HTML files as
// they are). Prints a Markdown table and, with --json, writes the figures as JSON.
//
// usage: bench_tokenizer [--tokenizer FILE] [--corpora DIR] [--runs N] [--json OUT.json]
//
// Two datasets: "all" (every XML / HTML file, including a 3.3 MB e-invoice whose base64 PDF
// attachment is hard on BPE: every piece is new) and "text" (the files under 1 MB).
// For each, the median MB/s over N measured runs after one warm-up of:
//   copy         a byte copy of the text: the baseline, measured in the same run
//   nfc          UTF-8 check + NFC (quick check, normalisation where needed)
//   split        NFC + the pre-tokenizer regex scanner
//   encode       Tokenizer::encode (added tokens, NFC, split, BPE; word cache warm)
//   encode_cold  the first encode after loading (word cache empty), a single run
// Single thread. The figures move with the load of the machine: compare ratios to `copy`.
#include <sys/utsname.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/tokenizer/pretokenizer.hpp"
#include "engine/tokenizer/tokenizer.hpp"
#include "engine/tokenizer/unicode.hpp"
#include "quarry/version.hpp"
#include "bench/common/options.hpp"

namespace fs = std::filesystem;
using namespace quarry::engine;

namespace {

double seconds(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

struct Dataset {
  std::string name;
  std::vector<std::string> docs;
  std::size_t bytes = 0;
};

}  // namespace

int main(int argc, char** argv) {
  fs::path tokenizer = fs::path(QUARRY_SHARED_DIR) / "tokenizers" / "qwen3" / "tokenizer.json";
  fs::path corpora = fs::path(QUARRY_SHARED_DIR) / "corpora";
  fs::path json_out;
  int runs = 5;
  const int rc = quarry::bench::parse_options(
      argc, argv, "bench_tokenizer", "usage: bench_tokenizer [--tokenizer FILE] [--corpora DIR] [--runs N] [--json OUT.json]\n",
      [&](const std::string& a, const std::string& v) {
        if (a == "--tokenizer") tokenizer = v;
        else if (a == "--corpora") corpora = v;
        else if (a == "--runs") runs = std::max(1, std::stoi(v));
        else if (a == "--json") json_out = v;
        else return false;
        return true;
      });
  if (rc >= 0) return rc;

  Dataset all{"all", {}, 0}, text{"text", {}, 0};
  std::vector<fs::path> files;
  if (fs::is_directory(corpora)) {
    for (const auto& e : fs::recursive_directory_iterator(corpora)) {
      const std::string ext = e.path().extension().string();
      if (e.is_regular_file() && (ext == ".xml" || ext == ".XML" || ext == ".html")) files.push_back(e.path());
    }
  }
  std::sort(files.begin(), files.end());
  for (const auto& p : files) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string d = ss.str();
    if (d.size() < (1u << 20)) {
      text.docs.push_back(d);
      text.bytes += d.size();
    }
    all.bytes += d.size();
    all.docs.push_back(std::move(d));
  }
  if (all.docs.empty()) {
    std::cerr << "bench_tokenizer: no XML/HTML files under " << corpora << "\n";
    return 1;
  }

  std::shared_ptr<const Tokenizer> tok;
  const double load_s = seconds([&] { tok = Tokenizer::from_file(tokenizer); });
  const auto splitter = RegexSplitter::for_pattern(RegexSplitter::qwen2_pattern());

  std::ostringstream js;
  utsname un{};
  uname(&un);
  js << "{\"bench\":\"tokenizer_encode\",\"version\":\"" << QUARRY_VERSION << "\",\"machine\":\"" << un.machine << " "
     << un.release << "\",\"hardware_threads\":" << std::thread::hardware_concurrency()
     << ",\"threads\":1,\"runs\":" << runs << ",\"tokenizer\":\"" << tokenizer.filename().string()
     << "\",\"load_s\":" << load_s << ",\"datasets\":[";
  std::cout << "tokenizer load " << load_s << " s; median of " << runs << " runs, single thread\n\n"
            << "| dataset | docs | MB | tokens | stage | MB/s | x copy |\n|---|---|---|---|---|---|---|\n";
  bool first_ds = true;
  for (Dataset* ds : {&all, &text}) {
    const double mb = static_cast<double>(ds->bytes) / 1e6;
    std::size_t n_tokens = 0, sink = 0;
    std::vector<std::pair<std::size_t, std::size_t>> pieces;
    // Cold: a fresh tokenizer (empty word cache) for the first dataset only; the text subset is
    // part of "all", so its cold figure would be warm.
    double cold_s = 0;
    if (ds == &all) {
      cold_s = seconds([&] {
        for (const auto& d : ds->docs) n_tokens += tok->encode(d).size();
      });
    } else {
      for (const auto& d : ds->docs) n_tokens += tok->encode(d).size();
    }
    struct Stage {
      const char* name;
      std::function<void()> fn;
      std::vector<double> s;
    };
    std::vector<Stage> stages = {
        {"copy", [&] { for (const auto& d : ds->docs) { std::string c = d; sink += c.size(); } }, {}},
        {"nfc", [&] { for (const auto& d : ds->docs) sink += unicode::nfc(unicode::utf8_lossy(d)).size(); }, {}},
        {"split", [&] { for (const auto& d : ds->docs) { splitter->split(unicode::nfc(d), pieces); sink += pieces.size(); } }, {}},
        {"encode", [&] { for (const auto& d : ds->docs) sink += tok->encode(d).size(); }, {}},
    };
    for (auto& st : stages) st.fn();  // warm-up
    for (int r = 0; r < runs; ++r) {
      for (auto& st : stages) st.s.push_back(seconds(st.fn));
    }
    const double copy_mbs = mb / median(stages[0].s);
    js << (first_ds ? "" : ",") << "{\"name\":\"" << ds->name << "\",\"documents\":" << ds->docs.size()
       << ",\"bytes\":" << ds->bytes << ",\"tokens\":" << n_tokens;
    first_ds = false;
    auto row = [&](const char* stage, double mbs) {
      std::cout << "| " << ds->name << " | " << ds->docs.size() << " | " << mb << " | " << n_tokens << " | " << stage
                << " | " << mbs << " | " << mbs / copy_mbs << " |\n";
      js << ",\"" << stage << "_mb_s\":" << mbs;
    };
    for (auto& st : stages) row(st.name, mb / median(st.s));
    if (cold_s > 0) row("encode_cold", mb / cold_s);
    js << "}";
    if (sink == 0xFFFFFFFF) std::cout << "";  // keeps the work observable
  }
  js << "]}\n";
  if (!json_out.empty()) std::ofstream(json_out) << js.str();
  return 0;
}
