// Tokenizer encode throughput on the text of the real documents (corpora/: XML and HTML files as
// they are). Prints a Markdown table and writes JSON.
//
// usage: bench_tokenizer [--tokenizer FILE] [--corpora DIR] [--runs N] [--json OUT.json]
// Reports, over N measured runs after one warm-up, the median MB/s of:
//   copy       a byte copy of the text (the baseline: the memory bandwidth this run gets)
//   nfc        UTF-8 check + NFC quick check / normalisation
//   split      NFC + the pre-tokenizer regex scanner
//   encode     full Tokenizer::encode (added tokens, NFC, split, BPE with its word cache warm)
//   encode_cold  the first encode of a freshly loaded tokenizer (empty word cache), single run
#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/tokenizer/pretokenizer.hpp"
#include "engine/tokenizer/tokenizer.hpp"
#include "engine/tokenizer/unicode.hpp"

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

}  // namespace

int main(int argc, char** argv) {
  fs::path tokenizer = fs::path(QUARRY_SHARED_DIR) / "tokenizers" / "qwen3" / "tokenizer.json";
  fs::path corpora = fs::path(QUARRY_SHARED_DIR) / "corpora";
  fs::path json_out;
  int runs = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--tokenizer") tokenizer = argv[i + 1];
    else if (a == "--corpora") corpora = argv[i + 1];
    else if (a == "--runs") runs = std::max(1, std::atoi(argv[i + 1]));
    else if (a == "--json") json_out = argv[i + 1];
    else {
      std::cerr << "bench_tokenizer: unknown option " << a << "\n";
      return 2;
    }
  }
  std::vector<std::string> docs;
  std::size_t total = 0;
  for (const auto& e : fs::recursive_directory_iterator(corpora)) {
    const std::string ext = e.path().extension().string();
    if (!e.is_regular_file() || (ext != ".xml" && ext != ".XML" && ext != ".html")) continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    docs.push_back(ss.str());
    total += docs.back().size();
  }
  if (docs.empty()) {
    std::cerr << "bench_tokenizer: no XML/HTML files under " << corpora << "\n";
    return 1;
  }
  const double mb = static_cast<double>(total) / 1e6;

  std::shared_ptr<const Tokenizer> tok;
  const double load_s = seconds([&] { tok = Tokenizer::from_file(tokenizer); });
  std::size_t n_tokens = 0;
  const double cold_s = seconds([&] {
    for (const auto& d : docs) n_tokens += tok->encode(d).size();
  });

  const auto splitter = RegexSplitter::for_pattern(RegexSplitter::qwen2_pattern());
  std::vector<std::pair<std::size_t, std::size_t>> pieces;
  std::size_t sink = 0;
  struct Stage {
    const char* name;
    std::function<void()> fn;
    std::vector<double> s;
  };
  std::vector<Stage> stages = {
      {"copy", [&] { for (const auto& d : docs) { std::string c = d; sink += c.size(); } }, {}},
      {"nfc", [&] { for (const auto& d : docs) sink += unicode::nfc(unicode::utf8_lossy(d)).size(); }, {}},
      {"split", [&] { for (const auto& d : docs) { splitter->split(unicode::nfc(d), pieces); sink += pieces.size(); } }, {}},
      {"encode", [&] { for (const auto& d : docs) sink += tok->encode(d).size(); }, {}},
  };
  for (auto& st : stages) st.fn();  // warm-up
  for (int r = 0; r < runs; ++r) {
    for (auto& st : stages) st.s.push_back(seconds(st.fn));
  }
  const double copy_mbs = mb / median(stages[0].s);
  std::cout << "| stage | median MB/s | x copy |\n|---|---|---|\n";
  for (auto& st : stages) {
    const double mbs = mb / median(st.s);
    std::cout << "| " << st.name << " | " << mbs << " | " << mbs / copy_mbs << " |\n";
  }
  std::cout << "| encode_cold | " << mb / cold_s << " | " << (mb / cold_s) / copy_mbs << " |\n\n"
            << docs.size() << " documents, " << total << " bytes, " << n_tokens << " tokens ("
            << static_cast<double>(total) / static_cast<double>(n_tokens) << " bytes/token), load " << load_s
            << " s, " << runs << " runs, single thread\n";
  if (!json_out.empty()) {
    std::ofstream out(json_out);
    out << "{\"bench\":\"tokenizer_encode\",\"tokenizer\":\"" << tokenizer.string() << "\",\"documents\":" << docs.size()
        << ",\"bytes\":" << total << ",\"tokens\":" << n_tokens << ",\"runs\":" << runs << ",\"threads\":1"
        << ",\"load_s\":" << load_s << ",\"encode_cold_mb_s\":" << mb / cold_s;
    for (auto& st : stages) out << ",\"" << st.name << "_mb_s\":" << mb / median(st.s);
    out << "}\n";
  }
  return sink == 0xFFFFFFFF ? 1 : 0;
}
