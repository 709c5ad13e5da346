// End-to-end runs of `quarry run` on small subsets of samples/ and ../shared/corpora (the full
// corpora are in test_run_corpora, label slow): one record per input, ok records valid for the
// schema, error records for malformed files, resume, kill -9 and Ctrl-C followed by a rerun.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>

#include "engine/grammar/grounding.hpp"
#include "pipeline/run/ledger.hpp"
#include "schemas/evidence.hpp"
#include "schemas/schemas.hpp"
#include "schemas/validate.hpp"
#include "tests/run/run_support.hpp"
#include "schemas/rules.hpp"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace quarry::test_run;

const fs::path k_src = QUARRY_SOURCE_DIR;
const fs::path k_shared = QUARRY_SHARED_DIR;
const fs::path k_samples = k_src / "samples" / "invoices";

/// Checks the invariants every output folder must satisfy; returns the records by source.
std::map<std::string, json> check_output(const fs::path& out, const std::vector<fs::path>& inputs) {
  const auto records = read_records(out / "results.jsonl");
  std::map<std::string, json> by_source;
  for (const auto& r : records) {
    for (const char* k : {"source", "sha256", "status", "method", "data", "errors", "stats"})
      EXPECT_TRUE(r.contains(k)) << "record without \"" << k << "\": " << r.dump();
    EXPECT_TRUE(by_source.emplace(r["source"].get<std::string>(), r).second) << "duplicate record: " << r["source"];
  }
  std::set<std::string> expected;
  for (const auto& p : inputs) expected.insert(p.string());
  std::set<std::string> got;
  for (const auto& [s, _] : by_source) got.insert(s);
  EXPECT_EQ(got, expected) << "exactly one record per input";

  quarry::schemas::Validator v(quarry::schemas::load("invoice.schema.json"), "invoice.schema.json");
  add_invoice_rules(v);
  for (const auto& [s, r] : by_source) {
    const std::string status = r["status"];
    EXPECT_TRUE(status == "ok" || status == "invalid" || status == "error") << s;
    if (status == "ok") {
      const auto violations = v.validate(r["data"]);
      EXPECT_TRUE(violations.empty()) << s << ": " << (violations.empty() ? "" : violations[0].message);
      EXPECT_TRUE(r["errors"].empty()) << s;
    } else {
      EXPECT_FALSE(r["errors"].empty()) << s;
      for (const auto& e : r["errors"]) {
        EXPECT_TRUE(e.contains("pointer") && e.contains("rule") && e.contains("message")) << e.dump();
        EXPECT_FALSE(e["message"].get<std::string>().empty()) << s;
      }
    }
    if (r["method"] == "model" && status != "error") {
      const auto& st = r["stats"];
      EXPECT_GT(st["prefill_tokens"].get<std::size_t>() + st["cached_tokens"].get<std::size_t>(), 0u) << s;
      EXPECT_GT(st["decode_tokens"].get<std::size_t>(), 0u) << s;
      EXPECT_GT(st["ttft_ms"].get<double>(), 0.0) << s;
      EXPECT_GE(st["attempts"].get<int>(), 1) << s;
    }
  }
  return by_source;
}

/// `got` equals `expected`, except for object members absent from `expected` that are null in `got`.
bool same_except_nulls(const json& expected, const json& got) {
  if (expected.is_object() && got.is_object()) {
    for (const auto& [k, v] : expected.items())
      if (!got.contains(k) || !same_except_nulls(v, got[k])) return false;
    for (const auto& [k, v] : got.items())
      if (!expected.contains(k) && !v.is_null()) return false;
    return true;
  }
  if (expected.is_array() && got.is_array()) {
    if (expected.size() != got.size()) return false;
    for (std::size_t i = 0; i < expected.size(); ++i)
      if (!same_except_nulls(expected[i], got[i])) return false;
    return true;
  }
  return expected == got;
}

std::vector<std::string> args_of(const std::vector<fs::path>& inputs, const fs::path& out,
                                 std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {"run"};
  for (const auto& p : inputs) a.push_back(p.string());
  a.insert(a.end(), {"-o", out.string(), "--progress", "log", "--threads", "2"});
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

std::vector<fs::path> malformed_inputs() {
  std::vector<fs::path> v;
  for (const auto& e : fs::directory_iterator(k_shared / "corpora" / "malformed")) v.push_back(e.path());
  std::sort(v.begin(), v.end());
  return v;
}

TEST(RunE2E, SamplesAndCorporaSubsetThenResumeSkipsEverything) {
  Scratch s("subset");
  std::vector<fs::path> inputs;
  for (const char* n : {"de-xml-1.xml", "en-xml-1.xml", "hu-xml-1.xml", "hu-xml-3.xml", "en-txt-1.txt"})
    inputs.push_back(k_samples / n);
  inputs.push_back(k_shared / "corpora" / "zugferd" / "EN16931_Einfach.pdf");  // CII embedded in a PDF
  inputs.push_back(k_shared / "corpora" / "en16931" / "ubl" / fs::directory_iterator(k_shared / "corpora" / "en16931" / "ubl")->path().filename());
  for (const auto& m : malformed_inputs()) inputs.push_back(m);
  const auto out = s.dir / "out";
  const int rc = run_quarry_args(args_of(inputs, out, {"--retries", "1"}), s.dir / "log");
  EXPECT_EQ(rc == 0 || rc == 2, true) << read_file(s.dir / "log");
  const auto recs = check_output(out, inputs);
  for (const auto& m : malformed_inputs()) EXPECT_EQ(recs.at(m.string())["status"], "error");
  EXPECT_EQ(recs.at((k_samples / "de-xml-1.xml").string())["method"], "einvoice-cii");
  EXPECT_EQ(recs.at((k_samples / "en-xml-1.xml").string())["method"], "einvoice-ubl");
  EXPECT_EQ(recs.at((k_shared / "corpora" / "zugferd" / "EN16931_Einfach.pdf").string())["method"], "einvoice-cii");
  EXPECT_EQ(recs.at((k_samples / "en-txt-1.txt").string())["method"], "model");
  // The mapper's record equals the sample's expected JSON (members the expected file leaves out
  // must be null: optional schema members added after the samples were made).
  EXPECT_TRUE(same_except_nulls(json::parse(read_file(k_src / "samples" / "expected" / "en-xml-1.json")),
                                recs.at((k_samples / "en-xml-1.xml").string())["data"]))
      << recs.at((k_samples / "en-xml-1.xml").string())["data"].dump();

  const auto report = json::parse(read_file(out / "report.json"));
  std::size_t n = 0;
  for (const auto& [k, v] : report["by_status"].items()) n += v.get<std::size_t>();
  EXPECT_EQ(n, inputs.size());
  EXPECT_TRUE(fs::exists(out / "report.md"));

  // Rerun: everything is in the ledger, nothing is written again.
  const auto before = read_file(out / "results.jsonl");
  const int rc2 = run_quarry_args(args_of(inputs, out, {"--retries", "1"}), s.dir / "log2");
  EXPECT_EQ(rc2, rc);
  EXPECT_EQ(read_file(out / "results.jsonl"), before);
  const auto report2 = json::parse(read_file(out / "report.json"));
  EXPECT_EQ(report2["this_run"]["written"], 0);
  EXPECT_EQ(report2["this_run"]["skipped_already_done"], inputs.size());
}

TEST(RunE2E, PreferModelSendsStructuredInvoicesToTheModel) {
  Scratch s("prefer");
  const std::vector<fs::path> inputs = {k_samples / "en-xml-1.xml", k_samples / "en-txt-1.txt"};
  const auto out = s.dir / "out";
  const int rc = run_quarry_args(args_of(inputs, out, {"--prefer", "model", "--retries", "0"}), s.dir / "log");
  EXPECT_TRUE(rc == 0 || rc == 2) << read_file(s.dir / "log");
  const auto recs = check_output(out, inputs);
  for (const auto& [src, r] : recs) EXPECT_EQ(r["method"], "model") << src;
}

TEST(RunE2E, JobFileRunsLikeTheCommandLine) {
  Scratch s("jobfile");
  std::ofstream(s.dir / "job.toml") << "inputs = [\"" << (k_samples / "*-xml-2.xml").string() << "\"]\n"
                                    << "output = \"out\"\n[engine]\nthreads = 2\n";
  const int rc = run_quarry_args({"run", (s.dir / "job.toml").string(), "--progress", "none"}, s.dir / "log");
  EXPECT_TRUE(rc == 0 || rc == 2) << read_file(s.dir / "log");
  std::vector<fs::path> inputs;
  for (const char* n : {"de-xml-2.xml", "en-xml-2.xml", "hu-xml-2.xml"}) inputs.push_back(k_samples / n);
  check_output(s.dir / "out", inputs);
}

TEST(RunE2E, KillNineThenRerunGivesTheSameRecordsWithoutDuplicates) {
  Scratch s("kill");
  auto inputs = make_copies(s.dir / "in", 400);
  fs::copy_file(k_samples / "en-txt-1.txt", s.dir / "in" / "en-txt-1.txt");
  inputs.push_back(s.dir / "in" / "en-txt-1.txt");
  std::sort(inputs.begin(), inputs.end());
  const std::vector<fs::path> folder = {s.dir / "in"};

  // Kill -9 three times at different points, then let it finish.
  const auto out = s.dir / "out";
  for (std::size_t at : {5u, 120u, 300u}) {
    const pid_t pid = spawn_quarry(args_of(folder, out, {"--retries", "0"}), s.dir / "log");
    ASSERT_GT(pid, 0);
    wait_for_lines(pid, out / "results.jsonl", at, std::chrono::seconds(120));
    ::kill(pid, SIGKILL);
    EXPECT_EQ(wait_child(pid), 128 + SIGKILL);
  }
  const int rc = run_quarry_args(args_of(folder, out, {"--retries", "0"}), s.dir / "log");
  EXPECT_TRUE(rc == 0 || rc == 2) << read_file(s.dir / "log");
  const auto killed = check_output(out, inputs);

  // A clean run of the same inputs gives the same records.
  const auto clean_out = s.dir / "clean";
  run_quarry_args(args_of(folder, clean_out, {"--retries", "0"}), s.dir / "log_clean");
  const auto clean = check_output(clean_out, inputs);
  ASSERT_EQ(killed.size(), clean.size());
  for (const auto& [src, r] : clean) {
    const auto& k = killed.at(src);
    EXPECT_EQ(k["sha256"], r["sha256"]) << src;
    EXPECT_EQ(k["status"], r["status"]) << src;
    EXPECT_EQ(k["method"], r["method"]) << src;
    if (r["method"] != "model") {
      EXPECT_EQ(k["data"], r["data"]) << src;
    }
  }
}

TEST(RunE2E, CtrlCFinishesInFlightWorkAndSaysHowToResume) {
  Scratch s("sigint");
  std::vector<fs::path> inputs;
  for (const char* n : {"en-txt-1.txt", "en-html-1.html", "de-xml-1.xml"}) inputs.push_back(k_samples / n);
  const auto out = s.dir / "out";
  const auto args = args_of(inputs, out, {"--retries", "0", "--max-inflight", "1"});
  const pid_t pid = spawn_quarry(args, s.dir / "log");
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(wait_for_lines(pid, out / "results.jsonl", 1, std::chrono::seconds(120))) << read_file(s.dir / "log");
  ::kill(pid, SIGINT);
  const int rc = wait_child(pid);
  const auto log = read_file(s.dir / "log");
  const std::size_t first = count_lines(out / "results.jsonl");
  if (first < inputs.size()) {
    EXPECT_EQ(rc, 130) << log;
    EXPECT_NE(log.find("Resume with:"), std::string::npos) << log;
  }
  const int rc2 = run_quarry_args(args, s.dir / "log2");
  EXPECT_TRUE(rc2 == 0 || rc2 == 2) << read_file(s.dir / "log2");
  check_output(out, inputs);
}

TEST(RunE2E, MissingInputAndUnreadableFileBecomeErrorRecords) {
  Scratch s("missing");
  std::ofstream(s.dir / "empty.txt").close();
  const std::vector<fs::path> inputs = {s.dir / "no-such-file.pdf", s.dir / "empty.txt"};
  const auto out = s.dir / "out";
  const int rc = run_quarry_args(args_of(inputs, out), s.dir / "log");
  EXPECT_EQ(rc, 2) << read_file(s.dir / "log");
  const auto recs = check_output(out, inputs);
  for (const auto& [src, r] : recs) {
    EXPECT_EQ(r["status"], "error") << src;
    EXPECT_NE(r["errors"][0]["message"].get<std::string>(), "") << src;
  }
}

TEST(RunE2E, AskGivesOneRecordPerDocumentAndQuestionSharingThePrefix) {
  Scratch s("ask");
  std::ofstream(s.dir / "questions.txt") << "What is the invoice number?\n{\"id\": \"total\", \"question\": \"What is the total amount due?\"}\n";
  const fs::path doc = k_samples / "en-txt-1.txt";
  const fs::path bad = malformed_inputs().front();
  const auto out = s.dir / "out";
  const int rc = run_quarry_args({"ask", doc.string(), bad.string(), "--questions", (s.dir / "questions.txt").string(),
                                  "-o", out.string(), "--max-inflight", "1", "--retries", "0", "--threads", "2",
                                  "--progress", "none"},
                                 s.dir / "log");
  EXPECT_EQ(rc, 2) << read_file(s.dir / "log");  // the malformed file gives error records
  const auto records = read_records(out / "results.jsonl");
  ASSERT_EQ(records.size(), 4u) << read_file(s.dir / "log");
  quarry::schemas::Validator v(quarry::schemas::load("rag_answer.schema.json"), "rag_answer.schema.json");
  std::set<std::pair<std::string, std::string>> keys;
  std::size_t cached_after_first = 0;
  for (const auto& r : records) {
    EXPECT_TRUE(keys.emplace(r["source"], r["question_id"]).second) << r.dump();
    if (r["source"] == bad.string()) {
      EXPECT_EQ(r["status"], "error");
      continue;
    }
    EXPECT_EQ(r["method"], "model");
    if (r["status"] == "ok") {
      EXPECT_TRUE(v.validate(r["data"]).empty()) << r.dump();
    }
    if (r["question_id"] == "total") cached_after_first += r["stats"]["cached_tokens"].get<std::size_t>();
  }
  EXPECT_TRUE(keys.count({doc.string(), "1"}) && keys.count({doc.string(), "total"}));
  // One request at a time: the second question reuses the document prefix of the first.
  EXPECT_GT(cached_after_first, 100u);
  // Resume: nothing written twice.
  const auto before = read_file(out / "results.jsonl");
  run_quarry_args({"ask", doc.string(), bad.string(), "--questions", (s.dir / "questions.txt").string(), "-o",
                   out.string(), "--progress", "none"},
                  s.dir / "log2");
  EXPECT_EQ(read_file(out / "results.jsonl"), before);
}

}  // namespace

// Grounded decoding (on by default): the two text invoices whose IBAN the model used to misspell
// come out ok, every grounded value has evidence, and every copy value is a span of the file's text.
TEST(RunE2E, GroundedValuesAreSpansOfTheDocumentWithEvidence) {
  Scratch s("grounded");
  const std::vector<fs::path> inputs = {k_samples / "en-txt-1.txt", k_samples / "en-txt-2.txt"};
  const auto out = s.dir / "out";
  const int rc = run_quarry_args(args_of(inputs, out, {"--retries", "0"}), s.dir / "log");
  EXPECT_TRUE(rc == 0 || rc == 2) << read_file(s.dir / "log");
  const auto recs = check_output(out, inputs);
  const json schema = quarry::schemas::load("invoice.schema.json");
  for (const auto& in : inputs) {
    const json& r = recs.at(in.string());
    EXPECT_EQ(r["status"], "ok") << r.dump();
    if (r["status"] != "ok") continue;
    const auto pages = quarry::engine::grammar::split_pages(read_file(in));
    const json& ev = r.at("evidence");
    const auto expected = quarry::schemas::find_evidence(schema, r["data"], pages);
    EXPECT_TRUE(expected.violations.empty());
    EXPECT_EQ(ev.size(), expected.grounded) << ev.dump();
    std::size_t copies = 0;
    for (const auto& [ptr, e] : ev.items()) {
      const json& v = r["data"].at(json::json_pointer(ptr));
      if (e.contains("derived")) continue;
      // The evidence (offsets in the extracted text, which normalises the file's whitespace) is text
      // of the file, and holds the value (whitespace aside for copy).
      EXPECT_GE(e["page"].get<std::size_t>(), 1u);
      EXPECT_EQ(e["end"].get<std::size_t>() - e["start"].get<std::size_t>(), e["text"].get<std::string>().size());
      EXPECT_TRUE(quarry::engine::grammar::find_copy_span(pages, e["text"].get<std::string>())) << ptr << ": " << e;
      if (v.is_string() && ptr.find("date") == std::string::npos) {
        ++copies;
        EXPECT_TRUE(quarry::engine::grammar::find_copy_span({e["text"].get<std::string>()}, v.get<std::string>()))
            << ptr << ": " << v << " vs " << e["text"];
      }
    }
    EXPECT_GT(copies, 5u);
  }
}
