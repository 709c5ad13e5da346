// Parity of engine/tokenizer with Hugging Face tokenizers 0.23 / transformers 5.x on the Qwen3
// tokenizer: ids, decoded text, NFC, the split regex's character classes, chat template renders.
// Reference: tests/tokenizer/fixtures/tokenizer_fixture.json.gz (tools/fixtures/tokenizer/gen_tokenizer_fixtures.py).
#include <gtest/gtest.h>

#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "tests/common/run_command.hpp"
#include "engine/tokenizer/unicode.hpp"
#include "tests/tokenizer/fixture.hpp"

namespace quarry::test {
namespace {

using engine::TokenId;
using nlohmann::json;

std::string ids_str(const std::vector<TokenId>& ids, std::size_t max = 40) {
  std::string s;
  for (std::size_t i = 0; i < ids.size() && i < max; ++i) s += std::to_string(ids[i]) + " ";
  if (ids.size() > max) s += "...";
  return s;
}

std::string utf8_of(const json& cps) {
  std::string s;
  for (const json& c : cps) engine::unicode::append_utf8(s, c.get<char32_t>());
  return s;
}

TEST(TokenizerParity, CasesIdsAndDecode) {
  const auto tok = qwen3();
  const json& cases = fixture().at("cases");
  ASSERT_GT(cases.size(), 100u);
  std::size_t mismatches = 0;
  for (const json& c : cases) {
    const std::string name = c.at("name");
    const std::string text = c.at("text");
    const auto expected = c.at("ids").get<std::vector<TokenId>>();
    const auto ids = tok->encode(text);
    if (ids != expected) {
      if (++mismatches <= 10) {
        ADD_FAILURE() << "case " << name << ": ids differ\n  ours: " << ids_str(ids) << "\n  HF:   " << ids_str(expected);
      }
      continue;
    }
    EXPECT_EQ(engine::unicode::utf8_lossy(tok->decode(ids)), c.at("decoded").get<std::string>()) << name;
    EXPECT_EQ(engine::unicode::utf8_lossy(tok->decode(ids, true)), c.at("decoded_skip_special").get<std::string>())
        << name;
    EXPECT_EQ(engine::unicode::nfc(text), c.at("normalized").get<std::string>()) << name;
    bool has_added = false;
    for (const TokenId id : ids) has_added |= id >= 151643;
    if (!has_added) {
      // decode(encode(s)) == NFC(s): byte-level BPE loses nothing but the normalisation.
      EXPECT_EQ(tok->decode(ids), engine::unicode::nfc(text)) << name;
    }
  }
  EXPECT_EQ(mismatches, 0u) << "of " << cases.size() << " cases";
}

TEST(TokenizerParity, CorpusFiles) {
  const auto tok = qwen3();
  std::size_t checked = 0;
  for (const json& f : fixture().at("files")) {
    const auto path = shared_dir() / f.at("path").get<std::string>();
    if (!std::filesystem::exists(path)) continue;
    const std::string data = read_file(path);
    ASSERT_EQ(fnv1a64(data), f.at("fnv1a64").get<std::string>()) << path << " changed since the fixture was made";
    const auto ids = tok->encode(data);
    const auto expected = f.at("ids").get<std::vector<TokenId>>();
    EXPECT_EQ(ids, expected) << path << ": " << ids.size() << " ids vs " << expected.size() << " from HF";
    EXPECT_EQ(fnv1a64(engine::unicode::utf8_lossy(tok->decode(ids))), f.at("decoded_fnv1a64").get<std::string>())
        << path;
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "corpora not found under " << shared_dir();
  EXPECT_GE(checked, 30u);
}

std::string run_pdftotext(const std::filesystem::path& pdf, bool& ok) {
  auto r = quarry::test_support::pdftotext_layout(pdf);
  ok = r.code == 0;
  return r.out;
}

TEST(TokenizerParity, PdfTexts) {
  const auto tok = qwen3();
  std::size_t checked = 0, same_text = 0;
  for (const json& f : fixture().at("pdfs")) {
    const auto expected = f.at("ids").get<std::vector<TokenId>>();
    // Always: the reference ids re-encode to themselves (their decoded text is NFC already).
    EXPECT_EQ(tok->encode(tok->decode(expected)), expected) << f.at("path");
    ++checked;
    const auto path = shared_dir() / f.at("path").get<std::string>();
    if (!std::filesystem::exists(path)) continue;
    bool ok = false;
    const std::string text = run_pdftotext(path, ok);
    if (!ok || fnv1a64(text) != f.at("fnv1a64").get<std::string>()) continue;  // other poppler version
    EXPECT_EQ(tok->encode(text), expected) << path;
    ++same_text;
  }
  EXPECT_GE(checked, 10u);
  RecordProperty("pdfs_with_identical_pdftotext_output", static_cast<int>(same_text));
}

TEST(TokenizerParity, ChatTemplate) {
  const auto tok = qwen3();
  const json& fx = fixture();
  if (!fx.contains("chat") || fx["chat"].empty()) GTEST_SKIP() << "fixture has no chat renders";
  const bool hybrid = fx.at("chat_template_mentions_enable_thinking").get<bool>();
  for (const json& c : fx["chat"]) {
    std::vector<engine::ChatMessage> messages;
    for (const json& m : c.at("messages")) messages.push_back({m.at("role"), m.at("content")});
    const bool gen = c.at("add_generation_prompt"), think = c.at("enable_thinking");
    std::string expected = c.at("rendered");
    if (!hybrid && gen && !think) {
      // The thinking-only template has no switch and always opens <think>; with thinking off quarry
      // closes the block empty, so its prompt is the reference render followed by "\n</think>\n\n".
      expected += "\n</think>\n\n";
    }
    EXPECT_EQ(tok->apply_chat_template(messages, gen, think), expected)
        << "messages " << c.at("messages").dump() << " gen " << gen << " think " << think;
  }
}

char our_class(char32_t cp) {
  if (cp == '\r' || cp == '\n') return 'C';
  const auto p = engine::unicode::props(cp);
  if (p.is_letter()) return 'L';
  if (p.is_number()) return 'N';
  if (p.is_whitespace()) return 'W';
  return 'O';
}

TEST(TokenizerParity, SplitRegexCharacterClasses) {
  const json& runs = fixture().at("unicode").at("classes");
  ASSERT_FALSE(runs.empty());
  // The reference's regex engine (Oniguruma) has Unicode 16.0 property tables, the UCD here is 15.0:
  // code points first assigned in 16.0 (unassigned, Cn, for us) may differ and are only counted.
  std::size_t mismatches = 0, newer_unicode = 0;
  std::string first;
  for (std::size_t r = 0; r < runs.size(); ++r) {
    const char32_t start = runs[r][0].get<char32_t>();
    const char32_t end = r + 1 < runs.size() ? runs[r + 1][0].get<char32_t>() : 0x110000;
    const char expected = runs[r][1].get<std::string>()[0];
    if (expected == 'X') continue;  // surrogates
    for (char32_t cp = start; cp < end; ++cp) {
      // ' ' is the literal optional space of ` ?[^\s\p{L}\p{N}]+`, so the probe "c!" reads it as
      // "other"; its class is checked by the cases (whitespace runs) instead.
      if (cp == ' ') continue;
      if (our_class(cp) != expected && engine::unicode::props(cp).category() == 0) {
        ++newer_unicode;
        continue;
      }
      if (our_class(cp) != expected) {
        if (++mismatches <= 20) {
          char buf[64];
          std::snprintf(buf, sizeof buf, "U+%04X ours %c HF %c; ", static_cast<unsigned>(cp), our_class(cp), expected);
          first += buf;
        }
      }
    }
  }
  EXPECT_EQ(mismatches, 0u) << first;
  RecordProperty("code_points_new_in_unicode_16", static_cast<int>(newer_unicode));
  EXPECT_LT(newer_unicode, 6000u);
}

TEST(TokenizerParity, ContractionCaseFolding) {
  std::set<char32_t> expected;
  for (const json& c : fixture().at("unicode").at("apostrophe_fold")) expected.insert(c.get<char32_t>());
  std::set<char32_t> ours;
  for (char32_t cp = 0; cp < 0x110000; ++cp) {
    if (!engine::unicode::props(cp).is_letter()) continue;
    for (const char l : {'s', 't', 'm', 'd'}) {
      if (engine::unicode::folds_to(cp, l)) ours.insert(cp);
    }
  }
  EXPECT_EQ(ours, expected);
}

TEST(TokenizerParity, NfcEveryCodePointAndSequences) {
  const json& u = fixture().at("unicode");
  std::set<char32_t> changed;
  std::size_t mismatches = 0;
  for (const json& e : u.at("nfc_single")) {
    const char32_t cp = e[0].get<char32_t>();
    changed.insert(cp);
    std::string in;
    engine::unicode::append_utf8(in, cp);
    if (engine::unicode::nfc(in) != utf8_of(e[1]) && ++mismatches <= 10) {
      ADD_FAILURE() << "NFC(U+" << std::hex << static_cast<unsigned>(cp) << ") differs";
    }
  }
  // Every other code point must be left alone.
  for (char32_t cp = 0; cp < 0x110000; ++cp) {
    if ((cp >= 0xD800 && cp <= 0xDFFF) || changed.count(cp)) continue;
    std::string in;
    engine::unicode::append_utf8(in, cp);
    if (engine::unicode::nfc(in) != in && ++mismatches <= 10) {
      ADD_FAILURE() << "NFC(U+" << std::hex << static_cast<unsigned>(cp) << ") changed it, HF does not";
    }
  }
  for (const json& e : u.at("nfc_sequences")) {
    if (engine::unicode::nfc(utf8_of(e[0])) != utf8_of(e[1]) && ++mismatches <= 10) {
      ADD_FAILURE() << "NFC of sequence " << e[0].dump() << " differs from " << e[1].dump();
    }
  }
  EXPECT_EQ(mismatches, 0u);
}

}  // namespace
}  // namespace quarry::test
