// `quarry run` over every file of ../shared/corpora (label slow): with the deterministic mapper for
// structured e-invoices, and with --prefer model on the structured ones; 10,000 inputs in bounded memory.
#include <gtest/gtest.h>

#include <set>

#include "engine/grammar/grounding.hpp"
#include "schemas/evidence.hpp"
#include "schemas/schemas.hpp"
#include "schemas/validate.hpp"
#include "tests/run/run_support.hpp"
#include "schemas/rules.hpp"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace quarry::test_run;

const fs::path k_corpora = fs::path(QUARRY_SHARED_DIR) / "corpora";

std::set<std::string> files_under(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.path().filename().string()[0] != '.') out.insert(e.path().string());
  return out;
}

void check(const fs::path& out, const std::set<std::string>& expected, bool all_model) {
  quarry::schemas::Validator v(quarry::schemas::load("invoice.schema.json"), "invoice.schema.json");
  add_invoice_rules(v);
  std::set<std::string> got;
  for (const auto& r : read_records(out / "results.jsonl")) {
    const std::string src = r["source"];
    EXPECT_TRUE(got.insert(src).second) << "duplicate " << src;
    if (r["status"] == "ok") {
      EXPECT_TRUE(v.validate(r["data"]).empty()) << src;
    }
    if (src.find("/malformed/") != std::string::npos) {
      EXPECT_EQ(r["status"], "error") << src;
    }
    if (all_model && r["status"] != "error") {
      EXPECT_EQ(r["method"], "model") << src;
    }
    if (!all_model && src.size() > 4 && src.substr(src.size() - 4) == ".xml" && src.find("/nav/") != std::string::npos) {
      EXPECT_EQ(r["method"], "einvoice-nav") << src;
    }
  }
  EXPECT_EQ(got, expected);
}

TEST(RunCorpora, EveryCorpusFileGetsOneRecord) {
  Scratch s("corpora");
  const auto expected = files_under(k_corpora);
  const int rc = run_quarry_args({"run", k_corpora.string(), "-o", (s.dir / "out").string(), "--progress", "log"},
                                 s.dir / "log");
  EXPECT_TRUE(rc == 0 || rc == 2) << read_file(s.dir / "log");
  check(s.dir / "out", expected, false);
}

TEST(RunCorpora, PreferModelOnStructuredInvoices) {
  Scratch s("corpora_model");
  const auto dirs = {k_corpora / "zugferd", k_corpora / "en16931" / "ubl", k_corpora / "nav" / "xml"};
  std::set<std::string> expected;
  std::vector<std::string> args = {"run"};
  for (const auto& d : dirs) {
    const auto f = files_under(d);
    expected.insert(f.begin(), f.end());
    args.push_back(d.string());
  }
  args.insert(args.end(), {"-o", (s.dir / "out").string(), "--prefer", "model", "--retries", "0", "--progress", "log"});
  const int rc = run_quarry_args(args, s.dir / "log");
  EXPECT_TRUE(rc == 0 || rc == 2) << read_file(s.dir / "log");
  check(s.dir / "out", expected, true);
}

std::vector<std::string> args_of(const std::vector<fs::path>& inputs, const fs::path& out) {
  std::vector<std::string> a = {"run"};
  for (const auto& p : inputs) a.push_back(p.string());
  a.insert(a.end(), {"-o", out.string(), "--progress", "log", "--threads", "2"});
  return a;
}

TEST(RunSlow, TenThousandInputsInBoundedMemory) {
  Scratch s("tenk");
  auto inputs = make_copies(s.dir / "in", 10000);
  const auto out = s.dir / "out";
  // Peak RSS of a 100-input run vs the 10,000-input run (children's max RSS, KiB).
  Scratch small("tenk_small");
  make_copies(small.dir / "in", 100);
  long small_kib = 0, big_kib = 0;
  run_quarry_args(args_of({small.dir / "in"}, small.dir / "out"), small.dir / "log", &small_kib);
  const int rc = run_quarry_args(args_of({s.dir / "in"}, out), s.dir / "log", &big_kib);
  EXPECT_TRUE(rc == 0 || rc == 2) << read_file(s.dir / "log");
  EXPECT_EQ(count_lines(out / "results.jsonl"), inputs.size());
  std::printf("peak RSS: 100 inputs %ld KiB, 10,000 inputs %ld KiB\n", small_kib, big_kib);
  EXPECT_LT(big_kib, small_kib + 64 * 1024) << "memory grows with the number of inputs";
}

}  // namespace

// Every sample invoice with grounded decoding (the default): every grounded value of every ok record
// has evidence whose text holds the value; the ok counts with and without grounding are printed.
TEST(RunSlow, SamplesGroundedEveryCopyValueIsASpan) {
  const fs::path samples = fs::path(QUARRY_SOURCE_DIR) / "samples" / "invoices";
  const json schema = quarry::schemas::load("invoice.schema.json");
  std::size_t ok_on = 0, ok_off = 0;
  for (const bool grounded : {true, false}) {
    Scratch s(grounded ? "samples_grounded" : "samples_ungrounded");
    const int rc = run_quarry_args({"run", samples.string(), "-o", (s.dir / "out").string(), "--progress", "log",
                                    "--grounding", grounded ? "on" : "off"},
                                   s.dir / "log");
    EXPECT_TRUE(rc == 0 || rc == 2) << read_file(s.dir / "log");
    for (const auto& r : read_records(s.dir / "out" / "results.jsonl")) {
      if (r["status"] != "ok") continue;
      ++(grounded ? ok_on : ok_off);
      if (!grounded || r["method"] != "model") continue;
      const auto want = quarry::schemas::find_evidence(schema, r["data"], {});
      ASSERT_TRUE(r.contains("evidence")) << r["source"];
      EXPECT_EQ(r["evidence"].size(), want.grounded) << r["source"];
      for (const auto& [ptr, e] : r["evidence"].items()) {
        const json& v = r["data"].at(json::json_pointer(ptr));
        if (v.is_string() && ptr.find("date") == std::string::npos) {
          EXPECT_TRUE(quarry::engine::grammar::find_copy_span({e.at("text").get<std::string>()}, v.get<std::string>()))
              << r["source"] << " " << ptr;
        }
      }
    }
  }
  std::cout << "samples ok: " << ok_on << " grounded, " << ok_off << " ungrounded\n";
  EXPECT_GE(ok_on, ok_off);
}
