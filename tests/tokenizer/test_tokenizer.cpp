// Behaviour of engine/tokenizer beyond the reference fixture: special tokens, streaming decode,
// malformed tokenizer.json files, merges in both serialisations, and that pathological inputs finish.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/tokenizer/bpe.hpp"
#include "engine/tokenizer/pretokenizer.hpp"
#include "engine/tokenizer/unicode.hpp"
#include "tests/tokenizer/fixture.hpp"

namespace quarry::test {
namespace {

using engine::StreamDecoder;
using engine::TokenId;
using engine::Tokenizer;
using nlohmann::json;

TEST(Tokenizer, VocabularyAndSpecialTokens) {
  const auto tok = qwen3();
  // tokenizer.json: 151643 base tokens and added tokens up to </think> (id 151668).
  EXPECT_EQ(tok->vocab_size(), 151669u);
  const auto im_start = tok->token_to_id("<|im_start|>");
  const auto im_end = tok->token_to_id("<|im_end|>");
  const auto eot = tok->token_to_id("<|endoftext|>");
  const auto tool_call = tok->token_to_id("<tool_call>");
  ASSERT_TRUE(im_start && im_end && eot && tool_call);
  EXPECT_TRUE(tok->is_special(*im_start));
  EXPECT_TRUE(tok->is_special(*eot));
  EXPECT_FALSE(tok->is_special(*tool_call));  // added but not special in tokenizer.json
  EXPECT_EQ(tok->token_bytes(*im_start), "<|im_start|>");
  EXPECT_EQ(tok->token_bytes(-1), "");
  EXPECT_EQ(tok->token_bytes(1 << 29), "");
  // eos: tokenizer_config eos_token (<|im_end|>), config.json eos_token_id, <|endoftext|>.
  const auto& eos = tok->eos_ids();
  EXPECT_NE(std::find(eos.begin(), eos.end(), *im_end), eos.end());
  EXPECT_NE(std::find(eos.begin(), eos.end(), *eot), eos.end());
  // Added tokens are split out before normalisation and never merged with their neighbours.
  const auto ids = tok->encode("a<|im_end|>b");
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[1], *im_end);
  EXPECT_EQ(tok->decode(ids, /*skip_special=*/true), "ab");
  EXPECT_EQ(tok->decode(ids), "a<|im_end|>b");
}

TEST(Tokenizer, TokenBytesCoverAllBytes) {
  const auto tok = qwen3();
  // Every single byte is a token of its own (byte-level BPE), and no base token is empty.
  std::vector<bool> seen(256);
  for (TokenId id = 0; id < 151643; ++id) {
    const std::string& b = tok->token_bytes(id);
    ASSERT_FALSE(b.empty()) << id;
    if (b.size() == 1) seen[static_cast<unsigned char>(b[0])] = true;
  }
  for (int b = 0; b < 256; ++b) EXPECT_TRUE(seen[b]) << b;
}

TEST(Tokenizer, InvalidUtf8BecomesReplacementCharacter) {
  const auto tok = qwen3();
  EXPECT_EQ(tok->encode("a\xff" "b"), tok->encode("a\xEF\xBF\xBD" "b"));
  // Maximal subparts: E2 82 is one truncated sequence -> one U+FFFD.
  EXPECT_EQ(engine::unicode::utf8_lossy("x\xE2\x82y"), "x\xEF\xBF\xBDy");
  EXPECT_EQ(engine::unicode::utf8_lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(engine::unicode::utf8_lossy("\xF0\x9F\x91\x8D"), "\xF0\x9F\x91\x8D");
}

TEST(StreamDecoder, HoldsBackIncompleteUtf8) {
  const auto tok = qwen3();
  // Single-byte tokens for the four bytes of U+1F44D: nothing comes out until the last one.
  const std::string thumbs = "\xF0\x9F\x91\x8D";
  std::vector<TokenId> byte_ids;
  for (const char c : thumbs) {
    for (TokenId id = 0; id < 151643; ++id) {
      if (tok->token_bytes(id) == std::string(1, c)) {
        byte_ids.push_back(id);
        break;
      }
    }
  }
  ASSERT_EQ(byte_ids.size(), 4u);
  StreamDecoder dec(tok);
  EXPECT_EQ(dec.push(byte_ids[0]), "");
  EXPECT_EQ(dec.push(byte_ids[1]), "");
  EXPECT_EQ(dec.push(byte_ids[2]), "");
  EXPECT_EQ(dec.push(byte_ids[3]), thumbs);
  EXPECT_EQ(dec.finish(), "");
  // A truncated sequence left at the end becomes U+FFFD.
  StreamDecoder dec2(tok);
  EXPECT_EQ(dec2.push(byte_ids[0]), "");
  EXPECT_EQ(dec2.finish(), "\xEF\xBF\xBD");
}

TEST(StreamDecoder, ConcatenationEqualsDecode) {
  const auto tok = qwen3();
  const std::string text =
      "Árvíztűrő tükörfúrógép 👨‍👩‍👧‍👦 👍🏽 中文分词 नमस्ते <|im_end|> مرحبا 1234 ½";
  const auto ids = tok->encode(text);
  StreamDecoder dec(tok, /*skip_special=*/false);
  std::string streamed;
  std::size_t held = 0;
  for (const TokenId id : ids) {
    const std::string piece = dec.push(id);
    if (piece.empty()) ++held;
    EXPECT_EQ(engine::unicode::valid_utf8_prefix(piece), piece.size()) << "piece is not well-formed UTF-8";
    streamed += piece;
  }
  streamed += dec.finish();
  EXPECT_EQ(streamed, tok->decode(ids));
  EXPECT_EQ(streamed, engine::unicode::nfc(text));
  EXPECT_GT(held, 0u) << "the emoji tokens should have split a UTF-8 sequence";
  // skip_special drops the special token.
  StreamDecoder skip(tok);
  std::string s;
  for (const TokenId id : ids) s += skip.push(id);
  s += skip.finish();
  EXPECT_EQ(s, tok->decode(ids, true));
}

TEST(Tokenizer, RandomBytesRoundTripToNfcOfTheirLossyText) {
  const auto tok = qwen3();
  std::mt19937 rng(17);
  const std::vector<std::string> atoms = {"a", "Z", " ", "  ", "\n", "\r\n", "\t", "'s", "'LL", "1", "23", "é",
                                          "e\xCC\x81", "\xE2\x82", "\xFF", "\xF0\x9F", "\xF0\x9F\x91\x8D",
                                          "中", "<|im_end|>", "<|im_start", "!", "...", "\xC2\xA0", "\xE3\x80\x80"};
  for (int i = 0; i < 2000; ++i) {
    std::string s;
    const int n = 1 + static_cast<int>(rng() % 30);
    for (int k = 0; k < n; ++k) s += atoms[rng() % atoms.size()];
    const auto ids = tok->encode(s);
    const std::string lossy = engine::unicode::utf8_lossy(s);
    // Added tokens are cut out before NFC: normalise the parts between them separately.
    std::string expected;
    const std::string marker = "<|im_end|>";
    std::size_t from = 0;
    for (std::size_t at; (at = lossy.find(marker, from)) != std::string::npos; from = at + marker.size()) {
      expected += engine::unicode::nfc(lossy.substr(from, at - from)) + marker;
    }
    expected += engine::unicode::nfc(lossy.substr(from));
    ASSERT_EQ(tok->decode(ids), expected) << "input " << i;
  }
}

TEST(StreamDecoder, RandomTokenStreamsEqualLossyDecode) {
  const auto tok = qwen3();
  std::mt19937 rng(23);
  for (int i = 0; i < 500; ++i) {
    std::vector<TokenId> ids;
    const int n = 1 + static_cast<int>(rng() % 20);
    // Mostly single-byte and short tokens (ids below 2000 include every byte token), some special.
    for (int k = 0; k < n; ++k) ids.push_back(rng() % 8 == 0 ? 151643 + static_cast<TokenId>(rng() % 26)
                                                             : static_cast<TokenId>(rng() % 2000));
    StreamDecoder dec(tok, /*skip_special=*/false);
    std::string streamed;
    for (const TokenId id : ids) streamed += dec.push(id);
    streamed += dec.finish();
    ASSERT_EQ(streamed, engine::unicode::utf8_lossy(tok->decode(ids))) << "stream " << i;
  }
}

TEST(Tokenizer, ConcurrentEncodesAgree) {
  // encode is const and shares the word cache between threads: results must not depend on it.
  const auto tok = qwen3();
  std::vector<std::string> texts;
  std::mt19937 rng(3);
  const char* words[] = {"számla ", "Rechnung ", "facture ", "12 ", "total: ", "\n", "  ", "中文", "it's ", "ab"};
  for (int i = 0; i < 64; ++i) {
    std::string t;
    for (int k = 0; k < 200; ++k) t += words[rng() % 10];
    texts.push_back(t);
  }
  std::vector<std::vector<TokenId>> expected;
  for (const auto& t : texts) expected.push_back(tok->encode(t));
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (int th = 0; th < 4; ++th) {
    threads.emplace_back([&, th] {
      for (int rep = 0; rep < 3; ++rep) {
        for (std::size_t i = 0; i < texts.size(); ++i) {
          if (tok->encode(texts[(i + static_cast<std::size_t>(th) * 7) % texts.size()]) !=
              expected[(i + static_cast<std::size_t>(th) * 7) % texts.size()]) {
            ++failures[static_cast<std::size_t>(th)];
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int th = 0; th < 4; ++th) EXPECT_EQ(failures[static_cast<std::size_t>(th)], 0) << "thread " << th;
}

TEST(Tokenizer, PathologicalInputsFinish) {
  const auto tok = qwen3();
  using clock = std::chrono::steady_clock;
  std::mt19937 rng(5);
  std::string word;
  const char* letters[] = {"a", "b", "é", "ő", "z", "ü", "k"};
  for (int i = 0; i < 3000; ++i) word += letters[rng() % 7];
  auto t0 = clock::now();
  const auto ids = tok->encode(word);
  EXPECT_EQ(tok->decode(ids), word);
  EXPECT_LT(std::chrono::duration<double>(clock::now() - t0).count(), 1.0) << "3,000-letter word";

  const std::string spaces(100000, ' ');
  t0 = clock::now();
  EXPECT_EQ(tok->decode(tok->encode(spaces + "x" + spaces)), spaces + "x" + spaces);
  EXPECT_LT(std::chrono::duration<double>(clock::now() - t0).count(), 2.0) << "100k-space runs";

  // 1 MB of mixed text: a generous "does it finish" bound, not a speed assertion (see bench/tokenizer).
  const std::string chunk =
      "Számla 2024/001: végösszeg 12 700 Ft.\r\n\tGröße: 12,5 cm — 中文 नमस्ते 👍🏽 {\"a\": [1, 2]} it's   ";
  std::string mb;
  while (mb.size() < (1u << 20)) mb += chunk;
  t0 = clock::now();
  const auto mb_ids = tok->encode(mb);
  EXPECT_LT(std::chrono::duration<double>(clock::now() - t0).count(), 10.0) << "1 MB mixed text";
  EXPECT_EQ(tok->decode(mb_ids), engine::unicode::nfc(mb));
}

// --- malformed and unsupported tokenizer.json files

class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("quarry_tok_" + std::to_string(std::random_device{}()) + std::to_string(reinterpret_cast<std::uintptr_t>(this)));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::filesystem::path write(const std::string& name, const std::string& content) const {
    const auto p = path_ / name;
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }

 private:
  std::filesystem::path path_;
};

json minimal_tokenizer() {
  // A tiny byte-level BPE: the 256 byte tokens, merges "a b" -> "ab", "ab c" -> "abc".
  json vocab = json::object();
  engine::ByteLevelAlphabet alphabet;
  for (int b = 0; b < 256; ++b) {
    std::string s;
    engine::unicode::append_utf8(s, alphabet.byte_to_cp[b]);
    vocab[s] = b;
  }
  vocab["ab"] = 256;
  vocab["abc"] = 257;
  vocab["bc"] = 258;
  return json{{"version", "1.0"},
              {"added_tokens", json::array({json{{"id", 259}, {"content", "<|x|>"}, {"special", true},
                                                 {"normalized", false}}})},
              {"normalizer", json{{"type", "NFC"}}},
              {"pre_tokenizer",
               json{{"type", "Sequence"},
                    {"pretokenizers",
                     json::array({json{{"type", "Split"},
                                       {"pattern", json{{"Regex", engine::RegexSplitter::qwen2_pattern()}}},
                                       {"behavior", "Isolated"},
                                       {"invert", false}},
                                  json{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}}},
              {"decoder", json{{"type", "ByteLevel"}}},
              {"model", json{{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array({"b c", "a b", "ab c"})}}}};
}

void expect_error(const std::filesystem::path& file, const std::string& reason_part) {
  try {
    Tokenizer::from_file(file);
    ADD_FAILURE() << "no error for " << file;
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(file.string()), std::string::npos) << what;
    EXPECT_NE(what.find(reason_part), std::string::npos) << what;
  }
}

TEST(TokenizerErrors, MalformedFilesNameTheFileAndReason) {
  TempDir dir;
  expect_error(dir.write("missing_dir_marker.json", "{\"model\": "), "invalid JSON");
  expect_error(std::filesystem::path("/nonexistent/tokenizer.json"), "cannot open");
  expect_error(dir.write("array.json", "[1, 2]"), "not a JSON object");
  expect_error(dir.write("nomodel.json", "{}"), "model");

  json j = minimal_tokenizer();
  j["normalizer"] = json{{"type", "NFKC"}};
  expect_error(dir.write("nfkc.json", j.dump()), "unsupported normalizer type 'NFKC'");

  j = minimal_tokenizer();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+";
  expect_error(dir.write("regex.json", j.dump()), "unsupported pre_tokenizer Split regex");

  j = minimal_tokenizer();
  j["model"]["merges"].push_back("q zz");
  expect_error(dir.write("merge.json", j.dump()), "model.merges[3]");

  j = minimal_tokenizer();
  j["model"]["type"] = "WordPiece";
  expect_error(dir.write("wp.json", j.dump()), "unsupported model type");

  j = minimal_tokenizer();
  j["model"]["vocab"]["ab"] = "x";
  expect_error(dir.write("vocab.json", j.dump()), "model.vocab['ab'] is not a valid id");

  j = minimal_tokenizer();
  j["model"]["vocab"] = json::array({1, 2});
  expect_error(dir.write("vocab_array.json", j.dump()), "model.vocab is missing or not an object");

  j = minimal_tokenizer();
  j["model"]["merges"] = json::array({json::array({"a", "b", "c"})});
  expect_error(dir.write("merge_triple.json", j.dump()), "model.merges[0] is neither");

  j = minimal_tokenizer();
  j["model"]["merges"] = json::array({"b c", 7});
  expect_error(dir.write("merge_number.json", j.dump()), "model.merges[1] is neither");

  j = minimal_tokenizer();
  j["model"].erase("merges");
  expect_error(dir.write("no_merges.json", j.dump()), "model.merges is missing");
}

TEST(Tokenizer, VocabAndMergesKeysElsewhereAreNotTheModels) {
  // Only model.vocab / model.merges are read as the vocabulary; same-named keys elsewhere are ordinary JSON.
  TempDir dir;
  json j = minimal_tokenizer();
  const auto plain = Tokenizer::from_file(dir.write("plain.json", j.dump()));
  j["extra"] = json{{"vocab", json{{"zz", 1}}}, {"merges", json::array({"z z"})}};
  j["model"]["options"] = json{{"vocab", json::array()}};
  const auto extra = Tokenizer::from_file(dir.write("extra.json", j.dump()));
  EXPECT_EQ(plain->vocab_size(), extra->vocab_size());
  EXPECT_EQ(plain->encode("abcab zz"), extra->encode("abcab zz"));
}

TEST(Tokenizer, MergesInBothSerialisationsAgree) {
  TempDir dir;
  json j = minimal_tokenizer();
  const auto a = Tokenizer::from_file(dir.write("strings.json", j.dump()));
  json arrays = json::array();
  for (const json& m : j["model"]["merges"]) {
    const std::string s = m;
    arrays.push_back(json::array({s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1)}));
  }
  j["model"]["merges"] = arrays;
  const auto b = Tokenizer::from_file(dir.write("arrays.json", j.dump()));
  for (const char* text : {"abc", "abcabc ab bc", "xabcx<|x|>abc", ""}) {
    EXPECT_EQ(a->encode(text), b->encode(text)) << text;
    EXPECT_EQ(a->decode(a->encode(text)), text);
  }
  // Rank order: "b c" (rank 0) is merged before "a b" (rank 1), so "abc" is a + bc, not abc.
  EXPECT_EQ(a->encode("abc"), (std::vector<TokenId>{'a', 258}));
  EXPECT_EQ(a->encode("<|x|>"), (std::vector<TokenId>{259}));
  EXPECT_THROW(a->apply_chat_template({{"user", "x"}}), std::runtime_error);  // no chat template
}

TEST(Tokenizer, ChatTemplateFamilyIsRecognisedFromTheTemplateText) {
  TempDir dir;
  const auto tokenizer_json = dir.write("tokenizer.json", minimal_tokenizer().dump());
  const std::vector<engine::ChatMessage> chat = {{"system", "S"}, {"user", "U"}};
  const std::string head = "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n";
  // Hybrid (the template reads enable_thinking): thinking off adds the empty think block.
  dir.write("tokenizer_config.json",
            json{{"chat_template", "{{'<|im_start|>'}} {% if enable_thinking is false %}<think>{% endif %}"},
                 {"eos_token", "<|x|>"}}
                .dump());
  auto t = Tokenizer::from_file(tokenizer_json);
  EXPECT_EQ(t->apply_chat_template(chat, true, false), head + "<|im_start|>assistant\n<think>\n\n</think>\n\n");
  EXPECT_EQ(t->apply_chat_template(chat, true, true), head + "<|im_start|>assistant\n");
  EXPECT_EQ(t->apply_chat_template(chat, false, false), head);
  EXPECT_EQ(t->eos_ids(), (std::vector<TokenId>{259}));
  EXPECT_THROW(t->apply_chat_template({}), std::invalid_argument);
  EXPECT_THROW(t->apply_chat_template({{"narrator", "x"}}), std::invalid_argument);
  // Plain ChatML (no think blocks at all).
  dir.write("tokenizer_config.json", json{{"chat_template", "{{'<|im_start|>' + m.role}}"}}.dump());
  t = Tokenizer::from_file(tokenizer_json);
  EXPECT_EQ(t->apply_chat_template(chat, true, false), head + "<|im_start|>assistant\n");
  // A malformed tokenizer_config.json is an error naming that file.
  const auto config = dir.write("tokenizer_config.json", "{\"chat_template\": ");
  try {
    Tokenizer::from_file(tokenizer_json);
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(config.string()), std::string::npos) << e.what();
  }
}

TEST(Tokenizer, IgnoreMergesTakesWholeWordsFromTheVocab) {
  TempDir dir;
  json j = minimal_tokenizer();
  j["model"]["ignore_merges"] = true;
  const auto t = Tokenizer::from_file(dir.write("ignore.json", j.dump()));
  EXPECT_EQ(t->encode("abc"), (std::vector<TokenId>{257}));  // in the vocab: taken whole
  EXPECT_EQ(t->encode("abcc"), (std::vector<TokenId>{'a', 258, 'c'}));
}

}  // namespace
}  // namespace quarry::test
