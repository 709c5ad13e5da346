// Grounded decoding (engine/grammar/grounding.hpp): reading numbers, dates and spans of a document;
// the matcher never lets a grounded value leave the document and is not stricter than that (a toy
// vocabulary: the mask equals "accept() takes the token" at every step, every short span is
// reachable); escapes, rollback, jump-forward; random walks with the Qwen3 vocabulary over the
// shipped invoice schema; the evidence of records and rule:evidence.
#include <gtest/gtest.h>

#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include "engine/grammar/grounding.hpp"
#include "engine/grammar/random_walk.hpp"
#include "engine/tokenizer/tokenizer.hpp"
#include "schemas/evidence.hpp"

namespace g = quarry::engine::grammar;
namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::ordered_json;

namespace {

std::string read(const fs::path& p) {
  std::ifstream in(p);
  if (!in) throw std::runtime_error("cannot read " + p.string());
  return {std::istreambuf_iterator<char>(in), {}};
}

std::set<std::string> decimals(const std::vector<std::string>& pages) {
  std::set<std::string> s;
  for (const auto& n : g::find_numbers(pages)) s.insert(n.decimal);
  return s;
}

std::set<std::string> isos(const std::vector<std::string>& pages) {
  std::set<std::string> s;
  for (const auto& d : g::find_dates(pages)) s.insert(d.iso);
  return s;
}

// A toy byte-level vocabulary: every single byte, some longer tokens that cross value boundaries,
// and EOS.
struct Toy {
  std::vector<std::string> tokens;
  std::shared_ptr<g::TokenizerInfo> info;
  g::TokenId eos;
  Toy() {
    for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
    for (const char* t : {"\",", "\":\"", "\"}", "{\"", "\":", "HU", "42", " 1177", "null", "\\\"", "\\\\", "\\n",
                          "\xC3\xA9", "\":1", ":\"Ac", "\",\"n\":", "12", "2.5", ".50", "-3", "2024-", "03-15",
                          "Acme", " Kft", "\"Acme\"", "a\"", "1\"", "\",\"d\":\"2024"})
      tokens.push_back(t);
    eos = static_cast<g::TokenId>(tokens.size());
    tokens.push_back("<eos>");
    info = std::make_shared<g::TokenizerInfo>(tokens, std::vector<g::TokenId>{eos});
  }
};

const char* kToySchema = R"({"type":"object","properties":{
  "a":{"type":["string","null"],"x-quarry-source":"copy"},
  "n":{"type":["number","null"],"x-quarry-source":"number"},
  "d":{"type":"string","x-quarry-source":"date"}},
  "required":["a","n","d"],"additionalProperties":false})";

const std::vector<std::string> kToyDoc = {
    "Acme Kft.\nIBAN: HU42 1177 3016\nTotal: 1 234,50 EUR  -3 fee\nDate: 15.03.2024\n",
    "Page two: say \"hi\" \\ back\nAcmé Kft 2.5 kg\f",
};

// Only whitespace (as grounding counts it): no span to find.
bool blank(const std::string& s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    std::size_t len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    char32_t cp = len == 1 ? b : (b & (0x3F >> (len - 1)));
    for (std::size_t k = 1; k < len && i + k < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    if (!g::is_ground_space(cp)) return false;
    i += len;
  }
  return true;
}

bool mask_has(const std::vector<std::uint32_t>& m, g::TokenId id) { return (m[id / 32] >> (id % 32)) & 1u; }

// The code point of the UTF-8 character starting at s[i] (its length in len).
char32_t char_at(const std::string& s, std::size_t i, std::size_t& len) {
  const auto b = static_cast<unsigned char>(s[i]);
  len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  char32_t cp = len == 1 ? b : (b & (0x3F >> (len - 1)));
  for (std::size_t k = 1; k < len && i + k < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return cp;
}

// The code point of the character ending just before s[i] (i > 0).
char32_t char_before(const std::string& s, std::size_t i) {
  std::size_t j = i - 1;
  while (j > 0 && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) --j;
  std::size_t len = 0;
  return char_at(s, j, len);
}

// Whether a word boundary (the whole-word rule of copied values) lies between characters a and b,
// written here from the rule's words: not through the index's markers.
bool boundary_between(char32_t a, char32_t b) {
  if (g::is_ground_space(a) || g::is_ground_space(b)) return true;
  const auto ca = g::word_class(a), cb = g::word_class(b);
  return ca == 0 || cb == 0 || ca != cb || ca == 3;
}

// Whether page.substr(i, len) may be copied there: it starts and ends at word boundaries (or with
// characters that are not letters or digits).
bool whole_words_at(const std::string& page, std::size_t i, std::size_t len) {
  std::size_t l0 = 0;
  const char32_t first = char_at(page, i, l0);
  const char32_t last = char_before(page, i + len);
  const bool start_ok = i == 0 || boundary_between(char_before(page, i), first);
  std::size_t l1 = 0;
  const bool end_ok = i + len == page.size() || boundary_between(last, char_at(page, i + len, l1));
  return start_ok && end_ok;
}

}  // namespace

// ---- reading a document ----------------------------------------------------------------------------

TEST(Grounding, NumbersInTheirPrintedFormats) {
  const auto n = decimals({"a 1 234,56 b 1.234,56 c 1,234.56 d 1234.56 e -7,5 f (12.00) g 27% h 0,27 i 1'000"});
  for (const char* v : {"1234.56", "-7.5", "7.5", "-12", "12", "27", "0.27", "1000", "1234"}) EXPECT_TRUE(n.count(v)) << v;
  const auto amb = decimals({"1,234"});  // grouping or a decimal comma: both readings
  EXPECT_TRUE(amb.count("1234"));
  EXPECT_TRUE(amb.count("1.234"));
  const auto hu = decimals({"Nettó összesen: 1.465.870 Ft"});
  EXPECT_TRUE(hu.count("1465870"));
  EXPECT_FALSE(hu.count("1.465"));  // "1.465.870" is not a decimal
  EXPECT_EQ(g::canonical_decimal("1234.50"), "1234.5");
  EXPECT_EQ(g::canonical_decimal("-0.0"), "0");
  EXPECT_EQ(g::canonical_decimal("1.5e3"), "1500");
  EXPECT_EQ(g::canonical_decimal("007"), "7");
  EXPECT_EQ(g::canonical_decimal("1."), std::nullopt);
  EXPECT_EQ(g::canonical_decimal("abc"), std::nullopt);
  g::NumberOccurrence o{"1234", {}, 2};
  EXPECT_EQ(g::number_spellings(o), (std::vector<std::string>{"1234", "1234.0", "1234.00"}));
}

TEST(Grounding, DatesInUsualFormsAndLanguages) {
  const auto d = isos({"2024.03.15. | 15.03.2024 | 15/03/2024 | March 15, 2024 | 15. März 2024 | 2024. március 15. | "
                       "15 de marzo de 2024 | 15 mars 2024 | 15 maart 2024 | 15 marca 2024 | 15 marzo 2024 | "
                       "2024-03-15 | 1er janvier 2025 | 3rd Feb 2023 | 29.02.2023 | 31/04/2024"});
  for (const char* v : {"2024-03-15", "2025-01-01", "2023-02-03"}) EXPECT_TRUE(d.count(v)) << v;
  EXPECT_FALSE(d.count("2023-02-29"));  // not a leap year
  EXPECT_FALSE(d.count("2024-04-31"));
  // Long digit runs next to date separators are not dates (and do not overflow).
  EXPECT_TRUE(isos({"123456789012345678901234567890.03.2024 99999999999999999999/1/2"}).empty());
  const auto us = isos({"03/04/2024"});  // day-month or month-day: both
  EXPECT_TRUE(us.count("2024-04-03"));
  EXPECT_TRUE(us.count("2024-03-04"));
  // Every format above, one by one.
  for (const char* t : {"2024.03.15.", "15.03.2024", "15/03/2024", "March 15, 2024", "15. März 2024",
                        "2024. március 15.", "15 de marzo de 2024", "15 mars 2024", "15 maart 2024", "15 marca 2024",
                        "15 marzo 2024", "2024-03-15", "15. MÄRZ 2024", "2024. 03. 15.", "Mar. 15, 2024"})
    EXPECT_TRUE(isos({t}).count("2024-03-15")) << t;
}

TEST(Grounding, CopySpansAreWhitespaceInsensitiveWithOffsets) {
  const std::vector<std::string> pages{"x\n", "IBAN:  HU42 1177\n3016 end é"};
  auto sp = g::find_copy_span(pages, "HU4211773016");
  ASSERT_TRUE(sp);
  EXPECT_EQ(sp->page, 1u);
  EXPECT_EQ(pages[1].substr(sp->start, sp->end - sp->start), "HU42 1177\n3016");
  EXPECT_TRUE(g::find_copy_span(pages, "HU42 1177 3016"));
  EXPECT_FALSE(g::find_copy_span(pages, "HU4 21177"));  // a space where the document has none
  EXPECT_FALSE(g::find_copy_span(pages, "HU43"));
  auto e = g::find_copy_span(pages, "end é");
  ASSERT_TRUE(e);
  EXPECT_EQ(pages[1].substr(e->start, e->end - e->start), "end é");
  EXPECT_FALSE(g::find_copy_span(pages, "x IBAN"));  // spans do not cross pages
  EXPECT_FALSE(g::find_copy_span(pages, "  "));
}

// Hostile text: invalid UTF-8, a 200,000-digit run, separators without end, more than the index keeps.
TEST(Grounding, HostileDocumentsAreReadWithinBounds) {
  std::mt19937_64 rng(3);
  std::string junk(300000, '\0');
  for (auto& c : junk) c = static_cast<char>(rng() & 0xFF);
  const std::string digits(200000, '7');
  std::string seps;
  for (int i = 0; i < 50000; ++i) seps += "1.";
  std::string big;
  while (big.size() < g::GroundingIndex::kMaxText + 200000) big += "Invoice 12.03.2024 total 1 234,50 EUR\n";
  const std::vector<std::string> pages{junk, digits, seps, big, "\xC3", "\xE2\x80", "12/", "2024."};
  const auto t0 = std::chrono::steady_clock::now();
  (void)g::find_numbers(pages);
  (void)g::find_dates(pages);
  EXPECT_FALSE(g::find_copy_span(pages, "not in it at all"));
  Toy toy;
  auto idx = g::GroundingIndex::build(std::make_shared<g::GroundingVocab>(toy.info), pages);
  EXPECT_LE(idx->text_bytes(), g::GroundingIndex::kMaxText + pages.size());
  EXPECT_GT(idx->date_candidates(), 0u);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(60));
}

TEST(Grounding, AnnotationValuesAreCheckedAndChangeNoLanguage) {
  try {
    g::compile_json_schema(std::string(R"({"type":"object","properties":{"a":{"type":"string","x-quarry-source":"quote"}}})"));
    FAIL() << "an unknown x-quarry-source value compiled";
  } catch (const g::SchemaError& e) {
    EXPECT_EQ(e.pointer, "/properties/a/x-quarry-source");
  }
  // The same strings and numbers with and without the annotation (only the tags differ).
  auto tagged = g::compile_json_schema(std::string(kToySchema));
  auto plain = g::compile_json_schema(std::string(R"({"type":"object","properties":{
    "a":{"type":["string","null"]},"n":{"type":["number","null"]},"d":{"type":"string"}},
    "required":["a","n","d"],"additionalProperties":false})"));
  for (const char* t : {R"({"a":"x\"y","n":-1.5e3,"d":""})", R"({"a":null,"n":null,"d":"é"})", R"({"a":"","n":0,"d":"2"})"}) {
    const auto inst = ordered_json::parse(t);
    EXPECT_TRUE(g::check_instance(*tagged.grammar, inst, false)) << t;
    EXPECT_TRUE(g::check_instance(*plain.grammar, inst, false)) << t;
  }
  EXPECT_FALSE(g::check_instance(*tagged.grammar, ordered_json::parse(R"({"a":1,"n":null,"d":""})"), false));
  std::size_t n_tagged = 0;
  for (const auto& nd : tagged.grammar->nodes) n_tagged += nd.source != 0;
  EXPECT_GT(n_tagged, 0u);
  for (const auto& nd : plain.grammar->nodes) EXPECT_EQ(nd.source, 0);
}

// ---- the matcher with a toy vocabulary ---------------------------------------------------------------

TEST(Grounding, ToyMaskEqualsAcceptAndValuesStayInTheDocument) {
  Toy toy;
  auto r = g::compile_json_schema(std::string(kToySchema));
  auto cg = std::make_shared<g::CompiledGrammar>(r.grammar, toy.info, r);
  auto gv = std::make_shared<g::GroundingVocab>(toy.info);
  auto idx = g::GroundingIndex::build(gv, kToyDoc);
  const auto printed = decimals(kToyDoc);
  const auto dates = isos(kToyDoc);
  std::mt19937_64 rng(7);
  std::vector<std::uint32_t> mask(toy.info->mask_words());
  int copies = 0, numbers = 0;
  for (int w = 0; w < 150; ++w) {
    g::GrammarMatcher m(cg);
    m.set_grounding(idx);
    for (int step = 0; step < 200 && !m.is_terminated(); ++step) {
      m.fill_bitmask(mask);
      // Exact both ways: the mask allows a token iff accept() takes it (grammar and grounding).
      std::vector<g::TokenId> allowed;
      for (g::TokenId id = 0; id <= toy.eos; ++id) {
        const bool ok = m.accept(id);
        if (ok) m.rollback(1);
        ASSERT_EQ(mask_has(mask, id), ok) << "token " << json(toy.tokens[id]).dump() << " step " << step;
        if (ok) allowed.push_back(id);
      }
      ASSERT_FALSE(allowed.empty());
      // Prefer value-ending tokens now and then so that walks finish.
      g::TokenId pick = allowed[rng() % allowed.size()];
      if (rng() % 4 == 0)
        for (g::TokenId id : allowed)
          if (toy.tokens[id].find_first_of("\",}") != std::string::npos || id == toy.eos) pick = id;
      ASSERT_TRUE(m.accept(pick));
    }
    ASSERT_TRUE(m.is_terminated());
  }
  // Walks again, now checking the values produced.
  for (int w = 0; w < 300; ++w) {
    auto res = g::random_walk(cg, rng, 300, {}, [&](g::GrammarMatcher& m) {
      if (m.num_steps() == 0 && !m.grounded()) m.set_grounding(idx);
    });
    ASSERT_TRUE(res.terminated) << res.text;
    json v = json::parse(res.text);
    if (v["a"].is_string() && !v["a"].get<std::string>().empty()) {
      const std::string a = v["a"].get<std::string>();
      if (!blank(a)) {
        EXPECT_TRUE(g::find_copy_span(kToyDoc, a)) << res.text;
        ++copies;
      }
    }
    if (v["n"].is_number()) {
      EXPECT_TRUE(printed.count(*g::canonical_decimal(v["n"].dump()))) << res.text;
      ++numbers;
    }
    EXPECT_TRUE(dates.count(v["d"].get<std::string>())) << res.text;
  }
  EXPECT_GT(copies, 50);
  EXPECT_GT(numbers, 20);
}

TEST(Grounding, ToyEverySpanIsReachable) {
  Toy toy;
  auto r = g::compile_json_schema(std::string(kToySchema));
  auto cg = std::make_shared<g::CompiledGrammar>(r.grammar, toy.info, r);
  auto idx = g::GroundingIndex::build(std::make_shared<g::GroundingVocab>(toy.info), kToyDoc);
  std::vector<std::uint32_t> mask(toy.info->mask_words());
  g::GrammarMatcher m(cg);
  m.set_grounding(idx);
  ASSERT_TRUE(m.accept_string("{\"a\":\""));
  std::size_t checked = 0, reachable = 0;
  for (const auto& page : kToyDoc) {
    for (std::size_t i = 0; i < page.size(); ++i) {
      if ((static_cast<unsigned char>(page[i]) & 0xC0) == 0x80) continue;  // a character start
      for (std::size_t len = 1; len <= 10 && i + len <= page.size(); ++len) {
        const std::string span = page.substr(i, len);
        if ((static_cast<unsigned char>(page[i + len - 1]) & 0x80) && i + len < page.size() &&
            (static_cast<unsigned char>(page[i + len]) & 0xC0) == 0x80)
          continue;  // ends inside a character
        if (span.find('\f') != std::string::npos) continue;
        if (std::isspace(static_cast<unsigned char>(span.front())))
          continue;  // a copied value does not start with whitespace (checked below)
        // Whole words: reachable iff some place of the document prints it starting and ending at word
        // boundaries (the toy document prints its short spans only as they are written).
        bool whole = false;
        for (const auto& pg : kToyDoc)
          for (std::size_t at = pg.find(span); at != std::string::npos && !whole; at = pg.find(span, at + 1))
            whole = whole_words_at(pg, at, span.size());
        const std::string body = ordered_json(span).dump();  // JSON-escaped, quotes around
        std::size_t steps = 0;
        bool ok = true;
        for (std::size_t k = 1; k < body.size() && ok; ++k) {  // byte tokens, closing quote included
          m.fill_bitmask(mask);
          const auto id = static_cast<g::TokenId>(static_cast<unsigned char>(body[k]));
          ok = mask_has(mask, id) && m.accept(id);
          if (ok) ++steps;
        }
        EXPECT_EQ(ok, whole) << "span " << json(span).dump() << (whole ? " not reachable" : " reachable inside a word");
        m.rollback(steps);
        ++checked;
        reachable += ok;
      }
    }
  }
  EXPECT_GT(checked, 500u);
  EXPECT_GT(reachable, 100u);
  // Whitespace may be skipped or written as one space; letters outside the document may not.
  for (const char* v : {"HU4211773016", "HU42 1177 3016", "Acme Kft.", "say \\\"hi\\\" \\\\ back", "Acm\xC3\xA9"}) {
    const std::string body = std::string(v) + "\"";
    EXPECT_TRUE(m.accept_string(body)) << v;
    m.rollback(1);
  }
  // The blank before a span is not part of it: a value may not start with whitespace.
  for (const char* v : {" Acme\"", "\\nAcme\"", " "}) {
    EXPECT_FALSE(m.accept_string(v)) << v;
  }
  EXPECT_TRUE(m.accept_string("Acme Kft\""));
  m.rollback(1);
  for (const char* v : {"HU4311", "HU42  1177X", "Zebra", "say \\u0022"}) {
    std::size_t k = 0;
    bool ok = true;
    for (; k < std::strlen(v) && ok; ++k) ok = m.accept(static_cast<g::TokenId>(static_cast<unsigned char>(v[k])));
    EXPECT_FALSE(ok) << v;
    m.rollback(ok ? k : k - 1);
  }
  // Without grounding the same grammar writes anything.
  g::GrammarMatcher free(cg);
  EXPECT_TRUE(free.accept_string("{\"a\":\"Zebra\""));
}

// Copied values are whole words of the document: they start where a word starts and end where one
// ends (letters, digits and characters of scripts without spaces are the words' units).
TEST(Grounding, CopiedValuesAreWholeWords) {
  Toy toy;
  auto r = g::compile_json_schema(std::string(kToySchema));
  auto cg = std::make_shared<g::CompiledGrammar>(r.grammar, toy.info, r);
  const std::vector<std::string> doc = {
      "Sz\xC3\xA1mlak\xC3\xB6nyv: INV12345/B\nSerial number 7\nElad\xC3\xB3: \xC3\x89rt\xC3\xA9kes\xC3\xADt\xC5\x91 Kft.\n"
      "\xE6\xA0\xAA\xE5\xBC\x8F\xE4\xBC\x9A\xE7\xA4\xBE\xE5\xB1\xB1\xE7\x94\xB0 (\xC2\xA7 12)\n"};
  auto idx = g::GroundingIndex::build(std::make_shared<g::GroundingVocab>(toy.info), doc);
  g::GrammarMatcher m(cg);
  m.set_grounding(idx);
  ASSERT_TRUE(m.accept_string("{\"a\":\""));
  auto takes = [&](const std::string& value) {  // the value with its closing quote, byte by byte
    const std::string body = value + "\"";
    std::size_t k = 0;
    bool ok = true;
    std::vector<std::uint32_t> mask(toy.info->mask_words());
    for (; k < body.size() && ok; ++k) {
      m.fill_bitmask(mask);
      const auto id = static_cast<g::TokenId>(static_cast<unsigned char>(body[k]));
      ok = mask_has(mask, id);
      EXPECT_EQ(ok, m.accept(id)) << value << " at byte " << k;  // the mask agrees with accept()
    }
    m.rollback(ok ? k : k - 1);
    return ok;
  };
  for (const char* v : {"Sz\xC3\xA1mlak\xC3\xB6nyv", "INV12345", "INV", "12345", "12345/B", "B", "Serial",
                        "Serial number", "\xC3\x89rt\xC3\xA9kes\xC3\xADt\xC5\x91 Kft", "\xC3\x89rt\xC3\xA9kes\xC3\xADt\xC5\x91 Kft.",
                        "Kft.", ": INV", "\xE5\xB1\xB1\xE7\x94\xB0", "\xE7\xA4\xBE", "\xE4\xBC\x9A\xE7\xA4\xBE\xE5\xB1\xB1",
                        "(\xC2\xA7 12)", "\xC2\xA7 12", "Kft.\\n", "7 ", "number7", "INV12345/B"})
    EXPECT_TRUE(takes(v)) << v;
  // Whitespace runs of a value are at most two characters (`\r\n`), however wide the document's gap.
  EXPECT_TRUE(takes("Serial  number"));
  EXPECT_TRUE(takes("Serial\\r\\nnumber"));
  EXPECT_FALSE(takes("Serial   number"));
  EXPECT_FALSE(takes("7   "));
  for (const char* v : {"k\xC3\xB6nyv", "Sz\xC3\xA1mla", "NV1", "2345", "1234", "Seria", "erial", "rt\xC3\xA9kes\xC3\xADt\xC5\x91",
                        "\xC3\x89rt\xC3\xA9kes", "Kf", "number 7 E", "ft.", "Serialnumber", "Serial numbe"})
    EXPECT_FALSE(takes(v)) << v;
  // The validators' span search stays whitespace-insensitive and does not ask for whole words: a
  // record keeps its evidence wherever the text is printed.
  EXPECT_TRUE(g::find_copy_span(doc, "Seria"));
}

TEST(Grounding, ToyRollbackAndJumpForward) {
  Toy toy;
  auto r = g::compile_json_schema(std::string(kToySchema));
  auto cg = std::make_shared<g::CompiledGrammar>(r.grammar, toy.info, r);
  auto idx = g::GroundingIndex::build(std::make_shared<g::GroundingVocab>(toy.info), kToyDoc);
  g::GrammarMatcher m(cg);
  m.set_grounding(idx);
  // The grammar forces {"a": and the opening quote may be forced too, but not the value.
  const std::string jf = m.jump_forward();
  EXPECT_EQ(jf, "{\"a\":");  // a is string or null: the quote is a choice
  ASSERT_TRUE(m.accept_string(jf));
  std::vector<std::uint32_t> at_value(toy.info->mask_words()), mask(toy.info->mask_words());
  m.fill_bitmask(at_value);
  ASSERT_TRUE(m.accept_string("\"Acme"));
  EXPECT_EQ(m.ground_state().kind, static_cast<std::uint8_t>(g::SourceKind::kCopy));
  ASSERT_TRUE(m.accept_string(" Kft"));
  EXPECT_FALSE(m.accept_string("X"));
  m.rollback(2);
  EXPECT_EQ(m.ground_state().kind, 0);
  m.fill_bitmask(mask);
  EXPECT_EQ(mask, at_value);
  // Rolled back into the middle of a value: its state comes back with it.
  ASSERT_TRUE(m.accept_string("\"HU42"));
  ASSERT_TRUE(m.accept_string(" 1177"));
  m.fill_bitmask(at_value);
  ASSERT_TRUE(m.accept_string("3016\""));
  m.rollback(1);
  m.fill_bitmask(mask);
  EXPECT_EQ(mask, at_value);
  EXPECT_FALSE(m.accept_string("4"));  // "HU42 11774" is not printed
  ASSERT_TRUE(m.accept_string("3016\","));
  // Jump-forward stops before a grounded number: `"n":` is forced, its digits are not.
  EXPECT_EQ(m.jump_forward(), "\"n\":");
  ASSERT_TRUE(m.accept_string("\"n\":"));
  EXPECT_FALSE(m.accept_string("1234.6,"));
  EXPECT_FALSE(m.accept_string("99,"));
  ASSERT_TRUE(m.accept_string("1234.50,"));
  // Tokens crossing from one value into the next are checked byte by byte: the date must be printed.
  EXPECT_FALSE(m.accept_string("\"d\":\"2023"));
  ASSERT_TRUE(m.accept_string("\"d\":\"2024-03-15\"}"));
  EXPECT_TRUE(m.can_terminate());
}

// ---- the Qwen3 vocabulary and the shipped invoice schema ----------------------------------------------

TEST(Grounding, QwenInvoiceWalksStayInTheDocument) {
  const std::string tok_path = std::string(QUARRY_SHARED_DIR) + "/tokenizers/qwen3/tokenizer.json";
  if (!fs::exists(tok_path)) GTEST_SKIP() << "no Qwen3 tokenizer at " << tok_path;
  auto info = g::TokenizerInfo::from_tokenizer(*quarry::engine::Tokenizer::from_file(tok_path));
  const fs::path src(QUARRY_SOURCE_DIR);
  const std::string schema_text = read(src / "schemas/invoice.schema.json");
  const json schema = json::parse(schema_text);
  g::GrammarCompiler compiler(info);
  auto cg = compiler.compile_json_schema(schema_text);
  auto gv = std::make_shared<g::GroundingVocab>(info);
  std::mt19937_64 rng(11);
  std::vector<std::uint32_t> mask(info->mask_words());
  std::size_t values = 0, checks = 0, lost = 0;
  for (const char* name : {"hu-txt-1.txt", "en-txt-1.txt", "de-txt-2.txt"}) {
    SCOPED_TRACE(name);
    const auto pages = g::split_pages(read(src / "samples/invoices" / name));
    auto idx = g::GroundingIndex::build(gv, pages);
    for (int w = 0; w < 2; ++w) {
      auto res = g::random_walk(
          cg, rng, 1500,
          [&](g::GrammarMatcher& m, const std::vector<std::uint32_t>& mk) {
            // Sampled tokens: the mask allows exactly those accept() takes.
            for (int k = 0; k < 24; ++k) {
              auto id = static_cast<g::TokenId>(rng() % info->vocab_size());
              const bool ok = m.accept(id);
              if (ok) m.rollback(1);
              ASSERT_EQ(mask_has(mk, id), ok) << "token " << json(info->token(id)).dump();
              ++checks;
            }
          },
          [&](g::GrammarMatcher& m) {
            if (m.num_steps() == 0 && !m.grounded()) m.set_grounding(idx);
          });
      if (!res.terminated) continue;  // ran past the token budget (long free arrays)
      const json data = json::parse(res.text);
      const auto ev = quarry::schemas::find_evidence(schema, data, pages);
      // Every grounded value is printed, except where a pattern or bounds met a dead end (the IBAN
      // pattern after letters that do not begin an IBAN; a rate bound): those went on ungrounded, and
      // rule:evidence reports them, so such a record is never ok.
      for (const auto& v : ev.violations) {
        const bool restricted = v.pointer == "/payment/iban" || v.pointer.ends_with("/vat_rate") ||
                                v.pointer.ends_with("/rate");
        EXPECT_TRUE(restricted) << res.text << "\n" << v.pointer;
        ++lost;
      }
      values += ev.grounded;
    }
  }
  EXPECT_GT(values, 20u);
  EXPECT_LT(lost * 5, values);
  EXPECT_GT(checks, 1000u);
}

// ---- evidence -----------------------------------------------------------------------------------------

TEST(Grounding, EvidencePointsAtTheValueAndRuleEvidenceFlagsTheRest) {
  const json schema = json::parse(read(fs::path(QUARRY_SOURCE_DIR) / "schemas/invoice.schema.json"));
  EXPECT_TRUE(quarry::schemas::has_grounded_locations(schema));
  const std::vector<std::string> pages{"Invoice INV-7\nDate: 15.03.2024\n", "IBAN HU42 1177 3016 1111\nTotal 1.234,50\n"};
  json data = {{"invoice_number", "INV-7"},
               {"issue_date", "2024-03-15"},
               {"line_items", json::array({{{"net_amount", 1000}}, {{"net_amount", 200}}})},
               {"totals", {{"gross", 1234.5}, {"net", 1200}}},
               {"payment", {{"iban", "HU42117730161111"}, {"bic", "ABCDHUHB"}}}};
  auto ev = quarry::schemas::find_evidence(schema, data, pages);
  auto at = [&](const char* p) { return ev.evidence.at(p); };
  EXPECT_EQ(at("/invoice_number")["page"], 1);
  EXPECT_EQ(at("/invoice_number")["text"], "INV-7");
  EXPECT_EQ(pages[0].substr(at("/invoice_number")["start"].get<std::size_t>(), 5), "INV-7");
  EXPECT_EQ(at("/issue_date")["text"], "15.03.2024");
  EXPECT_EQ(at("/payment/iban")["page"], 2);
  EXPECT_EQ(at("/payment/iban")["text"], "HU42 1177 3016 1111");
  EXPECT_EQ(at("/totals/gross")["text"], "1.234,50");
  // 1000 and 200 are not printed; totals.net is their sum (derived).
  EXPECT_EQ(at("/totals/net")["derived"], "sum");
  std::set<std::string> bad;
  for (const auto& v : ev.violations) {
    EXPECT_EQ(v.keyword, "rule:evidence");
    bad.insert(v.pointer);
  }
  EXPECT_EQ(bad, (std::set<std::string>{"/line_items/0/net_amount", "/line_items/1/net_amount", "/payment/bic"}));
  // A letter changed inside the IBAN: no evidence.
  data["payment"]["iban"] = "HU42117730161112";
  ev = quarry::schemas::find_evidence(schema, data, pages);
  EXPECT_FALSE(ev.evidence.contains("/payment/iban"));
}
