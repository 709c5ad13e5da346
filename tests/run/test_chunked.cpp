// Documents longer than the context (pipeline/run/chunked.hpp): the windows a document is cut into,
// the evidence moved back to the document's pages, the merge rules, and the chunked messages' wire form.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "engine/grammar/grounding.hpp"
#include "pipeline/run/chunked.hpp"
#include "pipeline/run/messages.hpp"

namespace {

using namespace quarry;
using namespace quarry::run;
using json = nlohmann::ordered_json;

/// A document of `pages` pages of `lines` lines each, every line unique ("p3 l17 ..."), with random
/// blank lines and a few lines far longer than a window piece.
std::string make_document(std::size_t pages, std::size_t lines, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::string text;
  for (std::size_t p = 0; p < pages; ++p) {
    if (p > 0) text.push_back('\f');
    for (std::size_t l = 0; l < lines; ++l) {
      if (l > 0) text.push_back('\n');
      if (rng() % 7 == 0) text.push_back('\n');  // a blank line
      text += "p" + std::to_string(p + 1) + " l" + std::to_string(l + 1) + " item " + std::to_string(rng() % 100000) +
              " qty " + std::to_string(rng() % 50);
      if (rng() % 23 == 0)
        for (int k = 0; k < 120; ++k) text += " word" + std::to_string(k);  // an over-long line
    }
  }
  return text;
}

TEST(Windows, CoverTheDocumentInOrderWithOverlapAndExactOffsets) {
  const EstimateTokenCounter counter;
  for (std::uint32_t seed = 1; seed <= 5; ++seed) {
    const std::string text = make_document(4 + seed, 30, seed);
    const auto pages = engine::grammar::split_pages(text);
    WindowOptions wo;
    wo.budget_tokens = 200;
    wo.overlap_tokens = 40;
    const auto windows = plan_windows(text, counter, wo);
    ASSERT_GT(windows.size(), 3u) << "seed " << seed;
    std::size_t prev_page = 0, prev_offset = 0;
    for (std::size_t i = 0; i < windows.size(); ++i) {
      const auto& w = windows[i];
      // Within budget (a piece alone may exceed it only if it is longer than the budget: none here).
      EXPECT_LE(w.tokens, wo.budget_tokens) << "seed " << seed << " window " << i;
      // The window's text is the document's own text from (first_page, first_offset).
      const auto wp = engine::grammar::split_pages(w.text);
      ASSERT_EQ(wp.size(), w.last_page - w.first_page + 1);
      for (std::size_t k = 0; k < wp.size(); ++k) {
        const std::string& page = pages[w.first_page - 1 + k];
        const std::size_t off = k == 0 ? w.first_offset : 0;
        ASSERT_LE(off + wp[k].size(), page.size());
        EXPECT_EQ(page.compare(off, wp[k].size(), wp[k]), 0) << "seed " << seed << " window " << i << " page " << k;
        if (k + 1 < wp.size()) {
          EXPECT_EQ(off + wp[k].size(), page.size());  // inner pages are whole to their end
        }
      }
      // Document order, each start after the previous one's.
      if (i > 0) {
        EXPECT_TRUE(w.first_page > prev_page || (w.first_page == prev_page && w.first_offset > prev_offset));
        // Overlap: this window starts before the previous one ends.
        const auto& p = windows[i - 1];
        EXPECT_TRUE(w.first_page < p.last_page ||
                    (w.first_page == p.last_page &&
                     w.first_offset < (p.first_page == p.last_page ? p.first_offset : 0) +
                                          engine::grammar::split_pages(p.text).back().size()))
            << "seed " << seed << " window " << i << " does not overlap the previous one";
      }
      prev_page = w.first_page;
      prev_offset = w.first_offset;
    }
    // Every line of the document is whole in some window.
    EXPECT_EQ(windows.front().first_page, 1u);
    EXPECT_EQ(windows.front().first_offset, 0u);
    EXPECT_EQ(windows.back().last_page, pages.size());
    std::size_t start = 0;
    while (start < text.size()) {
      std::size_t end = text.find_first_of("\n\f", start);
      if (end == std::string::npos) end = text.size();
      const std::string line = text.substr(start, end - start);
      if (!line.empty() && line.size() < 400) {
        bool found = false;
        for (const auto& w : windows) found = found || w.text.find(line) != std::string::npos;
        EXPECT_TRUE(found) << "seed " << seed << ": line not in any window: " << line;
      }
      start = end + 1;
    }
  }
}

TEST(Windows, OneWindowWhenItFitsAndRefusesATinyBudget) {
  const EstimateTokenCounter counter;
  const std::string text = "Invoice 1\nTotal 5\fPage two";
  const auto w = plan_windows(text, counter, {4096, 512});
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].text, text);
  EXPECT_EQ(w[0].last_page, 2u);
  EXPECT_THROW(plan_windows(text, counter, {8, 0}), std::invalid_argument);
  const auto blank = plan_windows("\f\n\f", counter, {64, 8});
  ASSERT_EQ(blank.size(), 1u);
  EXPECT_EQ(blank[0].text, "\f\n\f");
}

TEST(Evidence, ShiftedToTheDocumentsPagesAndOffsets) {
  const json ev = {{"/a", {{"page", 1}, {"start", 3}, {"end", 7}, {"text", "abcd"}}},
                   {"/b", {{"page", 2}, {"start", 0}, {"end", 2}, {"text", "xy"}}},
                   {"/c", {{"derived", "sum"}, {"of", "/items/*/n"}}}};
  const json moved = shift_evidence(ev, 5, 100);
  EXPECT_EQ(moved["/a"]["page"], 5);
  EXPECT_EQ(moved["/a"]["start"], 103);
  EXPECT_EQ(moved["/a"]["end"], 107);
  EXPECT_EQ(moved["/b"]["page"], 6);  // a later page of the window starts at its byte 0
  EXPECT_EQ(moved["/b"]["start"], 0);
  EXPECT_EQ(moved["/c"], ev["/c"]);
}

json entry(int page, int start, const std::string& text) {
  return json{{"page", page}, {"start", start}, {"end", start + static_cast<int>(text.size())}, {"text", text}};
}

TEST(Merge, ScalarsFromTheWindowThatSupportsThemArraysInOrderWithoutOverlapDuplicates) {
  std::vector<WindowRecord> w(4);
  // Window 0: the header; a guessed total that it has no evidence for; the first line items.
  w[0].text = "Invoice INV-7\nSeller ACME Ltd\nWidget 2 10.00\nBolt 5 1.00";
  w[0].data = json::parse(R"({"invoice_number":"INV-7","seller":{"name":"ACME Ltd","vat":null},"total":99,
    "line_items":[{"d":"Widget","n":10},{"d":"Bolt","n":1}],"parties":["ACME Ltd"]})");
  w[0].evidence = {{"/invoice_number", entry(1, 8, "INV-7")},
                   {"/seller/name", entry(1, 21, "ACME Ltd")},
                   {"/line_items/0/d", entry(1, 30, "Widget")},
                   {"/line_items/1/d", entry(1, 45, "Bolt")}};
  // Window 1 overlaps window 0 (Bolt again), adds a nut, a seller VAT id, another invoice number it
  // cannot support, and a party spelt differently.
  w[1].text = "Bolt 5 1.00\nNut 9 0.50\nVAT HU123";
  w[1].data = json::parse(R"({"invoice_number":"INV-8","seller":{"name":null,"vat":"HU123"},"total":null,
    "line_items":[{"d":"Bolt","n":1},{"d":"Nut","n":0.5}],"parties":["acme  LTD","Beta Kft"]})");
  w[1].evidence = {{"/line_items/0/d", entry(2, 0, "Bolt")},
                   {"/line_items/1/d", entry(2, 12, "Nut")},
                   {"/seller/vat", entry(2, 27, "HU123")}};
  // Window 2: its output was not JSON.
  w[2].data = nullptr;
  // Window 3 (not a neighbour of window 1): a Bolt again is a new item; the supported total.
  w[3].text = "Bolt 5 1.00\nTotal 12";
  w[3].data = json::parse(R"({"invoice_number":null,"total":12,"line_items":[{"d":"Bolt","n":1}],"parties":[]})");
  w[3].evidence = {{"/total", entry(4, 18, "12")}, {"/line_items/0/d", entry(4, 0, "Bolt")}};

  const auto m = merge_window_records(w);
  EXPECT_EQ(m.data["invoice_number"], "INV-7");          // supported in window 0 (INV-8 is not)
  EXPECT_EQ(m.data["seller"]["name"], "ACME Ltd");
  EXPECT_EQ(m.data["seller"]["vat"], "HU123");           // from window 1
  EXPECT_EQ(m.data["total"], 12);                        // window 3 has evidence; window 0's 99 none
  ASSERT_EQ(m.data["line_items"].size(), 4u);            // Widget, Bolt, Nut (Bolt of window 1 dropped), Bolt
  EXPECT_EQ(m.data["line_items"][0]["d"], "Widget");
  EXPECT_EQ(m.data["line_items"][1]["d"], "Bolt");
  EXPECT_EQ(m.data["line_items"][2]["d"], "Nut");
  EXPECT_EQ(m.data["line_items"][3]["d"], "Bolt");
  EXPECT_EQ(m.data["parties"], json::parse(R"(["ACME Ltd","Beta Kft"])"));  // same name, other case: one
  // Evidence follows each value, renumbered.
  EXPECT_EQ(m.evidence["/invoice_number"]["page"], 1);
  EXPECT_EQ(m.evidence["/seller/vat"]["page"], 2);
  EXPECT_EQ(m.evidence["/total"]["page"], 4);
  EXPECT_EQ(m.evidence["/line_items/2/d"]["text"], "Nut");
  EXPECT_EQ(m.evidence["/line_items/2/d"]["page"], 2);
  EXPECT_EQ(m.evidence["/line_items/3/d"]["page"], 4);
  EXPECT_FALSE(m.evidence.contains("/line_items/4/d"));
  EXPECT_EQ(m.windows_used, (std::vector<std::size_t>{0, 1, 3}));
}

TEST(Merge, StringsWithoutEvidenceArePreferredWhenTheirWindowPrintsThem) {
  std::vector<WindowRecord> w(2);
  w[0].text = "This Agreement is made by Acme.";
  w[0].data = json::parse(R"({"jurisdiction":"Delaware","term":null})");
  w[1].text = "governed by the laws of the State of New York for a term of 2 years";
  w[1].data = json::parse(R"({"jurisdiction":"New York","term":"2 years"})");
  const auto m = merge_window_records(w);
  EXPECT_EQ(m.data["jurisdiction"], "New York");  // window 0 does not print "Delaware"
  EXPECT_EQ(m.data["term"], "2 years");
  // None printed anywhere: the first non-null value.
  w[1].data["jurisdiction"] = "Texas";
  EXPECT_EQ(merge_window_records(w).data["jurisdiction"], "Delaware");
}

TEST(Merge, NoDataAndOddShapesNeverThrow) {
  std::vector<WindowRecord> w(3);
  EXPECT_TRUE(merge_window_records(w).data.is_null());
  w[0].data = json::parse(R"({"a":[1,2],"b":{"c":1}})");
  w[1].data = json::parse(R"({"a":"x","b":[3]})");
  w[2].data = json::parse(R"([1,2,3])");
  const auto m = merge_window_records(w);
  // The root's values are of different kinds (objects and an array): the first one is taken whole.
  EXPECT_EQ(m.data, w[0].data);
  w[2].data = nullptr;
  // Members of different kinds: the first window's value of each.
  const auto m2 = merge_window_records(w);
  EXPECT_EQ(m2.data["a"], json::parse("[1,2]"));
  EXPECT_EQ(m2.data["b"], json::parse(R"({"c":1})"));
}

TEST(Merge, TheValidatorsChooseAmongTheWindowsValues) {
  std::vector<WindowRecord> w(3);
  // Window 0 guesses a total from its own numbers; window 2 prints the real one.
  w[0].text = "Widget 10.00\nPage total 10.00";
  w[0].data = json::parse(R"({"items":[{"n":10}],"total":10,"note":"a"})");
  w[0].evidence = {{"/total", entry(1, 21, "10.00")}, {"/items/0/n", entry(1, 7, "10.00")}};
  w[1].text = "Bolt 5.00";
  w[1].data = json::parse(R"({"items":[{"n":5}],"total":null,"note":"b"})");
  w[1].evidence = {{"/items/0/n", entry(2, 5, "5.00")}};
  w[2].text = "Total 15.00";
  w[2].data = json::parse(R"({"items":[],"total":15,"note":"c"})");
  w[2].evidence = {{"/total", entry(3, 6, "15.00")}};
  auto m = merge_window_records(w);
  EXPECT_EQ(m.data["total"], 10);  // the first supported value
  ASSERT_EQ(m.alternatives.count("/total"), 1u);
  EXPECT_EQ(m.alternatives["/total"].size(), 1u);
  // The rule: total is the sum of the items' n; plus a rule nothing can satisfy (note must be "z").
  std::size_t calls = 0;
  const auto rules = [&](const json& d) {
    ++calls;
    std::vector<std::string> out;
    double sum = 0;
    for (const auto& it : d["items"]) sum += it["n"].get<double>();
    if (!d["total"].is_number() || d["total"].get<double>() != sum) out.push_back("/total");
    if (d["note"] != "z") out.push_back("/note");
    return out;
  };
  EXPECT_EQ(refine_merge(m, w, rules), 1u);
  EXPECT_EQ(m.data["total"], 15);
  EXPECT_EQ(m.evidence["/total"]["page"], 3);  // the evidence of the value taken
  EXPECT_EQ(m.data["note"], "a");              // no alternative helps: the first stays
  EXPECT_LE(calls, 8u);
  // Nothing to choose: nothing changes.
  std::vector<WindowRecord> one(1);
  one[0].data = json::parse(R"({"items":[],"total":3,"note":"a"})");
  auto m1 = merge_window_records(one);
  EXPECT_EQ(refine_merge(m1, one, rules), 0u);
  EXPECT_EQ(m1.data["total"], 3);
}

TEST(ChunkedStats, SumsTheWindowsAndCountsThem) {
  const json a = {{"prompt_tokens", 100}, {"prefill_tokens", 90},  {"cached_tokens", 10}, {"decode_tokens", 20},
                  {"forced_tokens", 5},   {"ttft_ms", 12.0},       {"decode_tok_s", 10.0}};
  const json b = {{"prompt_tokens", 50}, {"prefill_tokens", 50},  {"cached_tokens", 0}, {"decode_tokens", 30},
                  {"forced_tokens", 1},  {"ttft_ms", 40.0},       {"decode_tok_s", 30.0}};
  const json s = chunked_stats({a, b});
  EXPECT_EQ(s["prompt_tokens"], 150);
  EXPECT_EQ(s["decode_tokens"], 50);
  EXPECT_EQ(s["forced_tokens"], 6);
  EXPECT_EQ(s["ttft_ms"], 12.0);
  EXPECT_DOUBLE_EQ(s["decode_tok_s"].get<double>(), 50.0 / (2.0 + 1.0));
  EXPECT_EQ(s["chunks"], 2);
  EXPECT_FALSE(s.contains("draft_tokens"));
}

TEST(ChunkedMessages, WindowsAndTheirOutputsComeBackAsSent) {
  GeneratedMsg g;
  g.task.subject.key = g.task.subject.source = "long.txt";
  g.task.document_text = "a\fb";
  ChunkPart p;
  p.prompt = {1, 2, 3};
  p.text = "b";
  p.first_page = 2;
  p.first_offset = 7;
  g.task.chunks = {p, p};
  g.chunk_outputs.push_back(ChunkOutput{"{}", "stop", json{{"decode_tokens", 1}}, ""});
  g.chunk_outputs.push_back(ChunkOutput{"{", "length", json::object(), "boom"});
  const auto bytes = encode(Message(g));
  const Message back = decode(bytes.data(), bytes.size());
  const auto* g2 = std::get_if<GeneratedMsg>(&back);
  ASSERT_NE(g2, nullptr);
  ASSERT_EQ(g2->task.chunks.size(), 2u);
  EXPECT_EQ(g2->task.chunks[1].prompt, p.prompt);
  EXPECT_EQ(g2->task.chunks[1].first_page, 2u);
  EXPECT_EQ(g2->task.chunks[1].first_offset, 7u);
  ASSERT_EQ(g2->chunk_outputs.size(), 2u);
  EXPECT_EQ(g2->chunk_outputs[1].finish, "length");
  EXPECT_EQ(g2->chunk_outputs[1].error, "boom");
  EXPECT_EQ(g2->chunk_outputs[0].stats["decode_tokens"], 1);
}

}  // namespace
