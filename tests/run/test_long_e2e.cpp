// Documents longer than the context, end to end: a multi-page invoice PDF made at test time, several
// times longer than a small --max-context, gives one merged record (not `error`), with header fields
// and line items from different windows in document order and evidence on the document's own pages;
// `quarry ask` answers stay within the schema's bounds, their quotes spans of the document.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <set>

#include "engine/grammar/grounding.hpp"
#include "pipeline/rag/rag.hpp"
#include "schemas/schemas.hpp"
#include "schemas/validate.hpp"
#include "tests/extractors/pdf_gen.hpp"
#include "tests/run/run_support.hpp"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace quarry::test_run;
namespace pdfgen = quarry::test::pdfgen;

/// A content stream showing `lines` one under the other (PDF string syntax: no parentheses or
/// backslashes in the lines).
int lines_content(pdfgen::Doc& d, const std::vector<std::string>& lines) {
  std::string s = "BT /F1 10 Tf 12 TL 60 750 Td\n";
  for (const auto& l : lines) s += "(" + l + ") Tj T*\n";
  s += "ET\n";
  return d.b.add_stream("/Filter /FlateDecode", pdfgen::deflate(s));
}

/// The document's text as every command reads it (`quarry ingest`'s "text": pages joined by '\f').
std::string ingested_text(const fs::path& doc, const fs::path& dir) {
  const int rc = run_quarry_args({"ingest", doc.string(), "-o", (dir / "ingest.jsonl").string()}, dir / "ingest.log");
  EXPECT_EQ(rc, 0) << read_file(dir / "ingest.log");
  const auto lines = read_records(dir / "ingest.jsonl");
  return lines.size() == 1 && lines[0].contains("text") ? lines[0]["text"].get<std::string>() : std::string();
}

/// `quarry run DOC -o DIR/out --progress none --threads 2 ARGS...`: its only record (null, with the
/// failure reported, when there is not exactly one).
json run_single_record(const fs::path& doc, const fs::path& dir, const std::vector<std::string>& args) {
  std::vector<std::string> all = {"run", doc.string(), "-o", (dir / "out").string(), "--progress", "none", "--threads", "2"};
  all.insert(all.end(), args.begin(), args.end());
  const int rc = run_quarry_args(all, dir / "log");
  EXPECT_TRUE(rc == 0 || rc == 2) << read_file(dir / "log");
  const auto records = read_records(dir / "out" / "results.jsonl");
  EXPECT_EQ(records.size(), 1u) << read_file(dir / "log");
  return records.size() == 1 ? records[0] : json(nullptr);
}

struct LongInvoice {
  std::string pdf;
  std::size_t pages = 0;
};

/// An invoice of `item_pages` pages of line items between a header page and a totals page; each
/// item's description is unique ("Bracket type K-4711").
LongInvoice make_long_invoice(std::size_t item_pages, std::size_t items_per_page, std::uint32_t seed) {
  std::mt19937 rng(seed);
  const char* kinds[] = {"Bracket", "Hinge", "Gasket", "Valve", "Flange", "Spring", "Bearing", "Bushing"};
  pdfgen::Doc d;
  LongInvoice out;
  std::vector<std::string> page = {"Tax Invoice",
                                   "Invoice number: INV-58213",
                                   "Date: 5 September 2020",
                                   "Due date: 20 October 2020",
                                   "Currency: GBP",
                                   "Seller: Kestrel Print Limited",
                                   "Unit 25, 51 Church Lane, London SW1A 2AA",
                                   "VAT reg. no.: GB676100840",
                                   "Customer: Harbour Analytics Ltd",
                                   "141 Queens Road, London EC2A 4NE",
                                   "VAT reg. no.: GB234852655"};
  d.page(lines_content(d, page));
  double net = 0;
  std::size_t n = 0;
  for (std::size_t p = 0; p < item_pages; ++p) {
    page = {"Line items, continued"};
    for (std::size_t k = 0; k < items_per_page; ++k) {
      ++n;
      const std::string desc = std::string(kinds[rng() % 8]) + " type K-" + std::to_string(1000 + 37 * n);
      const int qty = 1 + static_cast<int>(rng() % 9);
      const int cents = 200 + static_cast<int>(rng() % 9000);
      const double amount = qty * cents / 100.0;
      net += amount;
      char buf[160];
      std::snprintf(buf, sizeof buf, "%zu. %s   %d pc x %d.%02d   Amount: %.2f   VAT: 20%%", n, desc.c_str(), qty,
                    cents / 100, cents % 100, amount);
      page.push_back(buf);
    }
    page.push_back("Page " + std::to_string(p + 2));
    d.page(lines_content(d, page));
  }
  char t[3][80];
  std::snprintf(t[0], sizeof t[0], "Net total: %.2f GBP", net);
  std::snprintf(t[1], sizeof t[1], "Tax: %.2f GBP", net * 0.2);
  std::snprintf(t[2], sizeof t[2], "Total incl. VAT: %.2f GBP", net * 1.2);
  d.page(lines_content(d, {t[0], t[1], t[2], "IBAN: GB92PTUO27688989446510", "SWIFT: NWBKGB2L"}));
  out.pages = item_pages + 2;
  out.pdf = d.finish();
  return out;
}

TEST(LongDocuments, ExtractedOverWindowsAndMergedIntoOneRecord) {
  Scratch s("long");
  const auto inv = make_long_invoice(4, 8, 7);
  const fs::path doc = s.dir / "long-invoice.pdf";
  std::ofstream(doc, std::ios::binary) << inv.pdf;
  const auto out = s.dir / "out";
  // 1536 tokens of context with 768 of output leave about 600 tokens of document per window: the
  // document (about 2,000 tokens) takes several.
  const json r = run_single_record(doc, s.dir, {"--max-context", "1536", "--max-tokens", "768", "--retries", "0"});
  ASSERT_TRUE(r.is_object());
  ASSERT_NE(r["status"], "error") << r.dump();
  EXPECT_EQ(r["method"], "model");
  const std::size_t chunks = r["stats"].value("chunks", std::size_t{0});
  EXPECT_GE(chunks, 3u) << r["stats"].dump();
  ASSERT_TRUE(r["data"].is_object()) << r.dump();
  ASSERT_TRUE(r.contains("evidence")) << r.dump();
  const json& ev = r["evidence"];

  // Evidence is on the document's own pages: each entry's text is the page's bytes at its offsets.
  const std::string text = ingested_text(doc, s.dir);
  const auto pages = quarry::engine::grammar::split_pages(text);
  ASSERT_EQ(pages.size(), inv.pages) << text;
  std::set<int> evidence_pages;
  for (const auto& [ptr, e] : ev.items()) {
    if (!e.contains("page")) continue;
    const int page = e["page"].get<int>();
    ASSERT_GE(page, 1);
    ASSERT_LE(static_cast<std::size_t>(page), pages.size());
    const std::size_t start = e["start"], end = e["end"];
    ASSERT_LE(end, pages[page - 1].size()) << ptr;
    EXPECT_EQ(pages[page - 1].substr(start, end - start), e["text"].get<std::string>()) << ptr;
    evidence_pages.insert(page);
  }
  // Header fields from the first window (page 1), and values from windows further down.
  ASSERT_TRUE(ev.contains("/invoice_number")) << ev.dump();
  EXPECT_EQ(r["data"]["invoice_number"], "INV-58213");
  EXPECT_EQ(ev["/invoice_number"]["page"], 1);
  EXPECT_GE(*evidence_pages.rbegin(), 4) << "nothing taken from the later windows: " << ev.dump();

  // The IBAN is printed on the last page only, which only the last window holds.
  ASSERT_TRUE(ev.contains("/payment/iban")) << ev.dump();
  EXPECT_EQ(r["data"]["payment"]["iban"], "GB92PTUO27688989446510");
  EXPECT_EQ(ev["/payment/iban"]["page"].get<std::size_t>(), inv.pages);

  // Line items from several windows, in document order: the pages their amounts are printed on
  // never go back, and span more than one page.
  const json& items = r["data"]["line_items"];
  ASSERT_TRUE(items.is_array());
  std::vector<int> item_pages;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const std::string ptr = "/line_items/" + std::to_string(i) + "/net_amount";
    if (ev.contains(ptr) && ev[ptr].contains("page")) item_pages.push_back(ev[ptr]["page"].get<int>());
  }
  ASSERT_GE(item_pages.size(), 2u) << r.dump();
  EXPECT_TRUE(std::is_sorted(item_pages.begin(), item_pages.end())) << r.dump();
  EXPECT_GT(item_pages.back(), item_pages.front()) << "line items from one page only: " << r.dump();

  // The report counts the chunked document.
  const json report = json::parse(read_file(out / "report.json"));
  EXPECT_EQ(report["chunked_documents"], 1);
}

// A document that fits the context but whose JSON does not fit --max-tokens (a sample invoice of 33
// line items): the output cut at max_tokens sends it back to be extracted over smaller windows, merged
// into one record with complete JSON (before: an `invalid` record, "not complete JSON (finish: length)",
// with no data).
TEST(LongDocuments, AnOutputLongerThanMaxTokensIsExtractedOverSmallerWindows) {
  Scratch s("long-output");
  const fs::path src = fs::path(QUARRY_SOURCE_DIR) / "samples" / "invoices" / "de-txt-2.txt";
  const fs::path doc = s.dir / "many-items.txt";
  fs::copy_file(src, doc);
  const std::string text = read_file(doc);
  const auto out = s.dir / "out";
  // Its JSON takes about 1,700 tokens; the document (about 1,500 tokens) fits the default context.
  const json r = run_single_record(doc, s.dir, {"--max-tokens", "800", "--retries", "0"});
  ASSERT_TRUE(r.is_object());
  ASSERT_NE(r["status"], "error") << r.dump();
  const json& st = r["stats"];
  EXPECT_GE(st.value("output_splits", std::size_t{0}), 1u) << st.dump();
  EXPECT_GE(st.value("chunks", std::size_t{0}), 2u) << st.dump();
  ASSERT_TRUE(r["data"].is_object()) << "the merged JSON is complete: " << r.dump();
  for (const auto& e : r["errors"]) EXPECT_NE(e["rule"], "json") << r.dump();
  EXPECT_EQ(r["data"]["seller"]["vat_id"], "DE882013748");  // the first window
  // Line items from the windows down the whole table, in document order.
  const json& ev = r["evidence"];
  std::vector<std::size_t> starts;
  for (std::size_t i = 0; i < r["data"]["line_items"].size(); ++i) {
    const std::string ptr = "/line_items/" + std::to_string(i) + "/description";
    if (ev.contains(ptr) && ev[ptr].contains("start")) starts.push_back(ev[ptr]["start"].get<std::size_t>());
  }
  ASSERT_GE(starts.size(), 10u) << r.dump();
  EXPECT_LT(starts.front(), text.size() / 3) << r.dump();
  EXPECT_GT(starts.back(), text.size() / 2) << "no line items from the later windows: " << r.dump();
  const json report = json::parse(read_file(out / "report.json"));
  EXPECT_EQ(report["chunked_documents"], 1);
}

TEST(LongDocuments, AskAnswersAreBoundedAndQuoteTheDocument) {
  Scratch s("ask-long");
  const auto inv = make_long_invoice(3, 8, 11);
  const fs::path doc = s.dir / "long-invoice.pdf";
  std::ofstream(doc, std::ios::binary) << inv.pdf;
  std::ofstream(s.dir / "q.txt") << "What is the invoice number?\nWhich items were delivered?\nWhat is the IBAN?\n";
  const auto out = s.dir / "out";
  const int rc = run_quarry_args({"ask", doc.string(), "--questions", (s.dir / "q.txt").string(), "-o", out.string(),
                                  "--progress", "none", "--threads", "2", "--max-context", "2048", "--retries", "0"},
                                 s.dir / "log");
  EXPECT_TRUE(rc == 0 || rc == 2) << read_file(s.dir / "log");
  const auto records = read_records(out / "results.jsonl");
  ASSERT_EQ(records.size(), 3u) << read_file(s.dir / "log");
  const json schema = quarry::schemas::load("rag_answer.schema.json");
  const std::size_t max_answer = schema["properties"]["answer"]["maxLength"];
  const std::size_t max_quote = schema["properties"]["evidence"]["items"]["maxLength"];
  const std::size_t max_quotes = schema["properties"]["evidence"]["maxItems"];
  quarry::schemas::Validator v(schema, "rag_answer.schema.json");
  const auto pages = quarry::engine::grammar::split_pages(ingested_text(doc, s.dir));
  for (const auto& r : records) {
    ASSERT_NE(r["status"], "error") << r.dump();
    // Not cut at the output limit: the answer is complete JSON within the schema's bounds.
    ASSERT_TRUE(r["data"].is_object()) << r.dump();
    EXPECT_TRUE(v.validate(r["data"]).empty()) << r.dump();
    const json& a = r["data"];
    if (a["answer"].is_string()) {
      EXPECT_LE(a["answer"].get<std::string>().size(), max_answer * 4);  // characters, at most 4 UTF-8 bytes each
    }
    EXPECT_LE(a["evidence"].size(), max_quotes);
    std::set<int> quoted_on;
    for (const auto& q : a["evidence"]) {
      EXPECT_LE(q.get<std::string>().size(), max_quote * 4);
      const auto span = quarry::engine::grammar::find_copy_span(pages, q.get<std::string>());
      EXPECT_TRUE(span.has_value()) << "not quoted from the document: " << q;
      if (span) quoted_on.insert(static_cast<int>(span->page) + 1);
    }
    // The pages are where the quotes are printed.
    EXPECT_EQ(a["pages"], json(std::vector<int>(quoted_on.begin(), quoted_on.end()))) << a.dump();
    EXPECT_LT(r["stats"]["decode_tokens"].get<std::size_t>(), 1024u) << "the answer ran to the output limit";
    for (const auto& e : r["errors"]) EXPECT_NE(e["rule"], "rule:evidence") << r.dump();
  }
}

}  // namespace
