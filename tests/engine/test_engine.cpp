// Engine: generate loop against the transformers greedy fixtures, continuous batching, sampling
// reproducibility, stop strings, max tokens, EOS, token bitmask.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "tests/common/device.hpp"
#include "engine/runtime/engine.hpp"
#include "fixtures.hpp"

namespace quarry::engine {
namespace {

using testing::fixture_dir;
using testing::load_reference;

/// A stand-in vocabulary for the tiny fixture models: token i decodes to two letters.
class LetterTokenizer final : public Tokenizer {
 public:
  explicit LetterTokenizer(std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) bytes_.push_back({char('a' + i % 26), char('a' + (i / 26) % 26)});
  }
  std::vector<TokenId> encode(std::string_view) const override { return {}; }
  std::string decode(const std::vector<TokenId>& ids, bool) const override {
    std::string s;
    for (auto id : ids) s += bytes_[static_cast<std::size_t>(id)];
    return s;
  }
  const std::string& token_bytes(TokenId id) const override { return bytes_[static_cast<std::size_t>(id)]; }
  std::size_t vocab_size() const override { return bytes_.size(); }
  bool is_special(TokenId) const override { return false; }
  std::optional<TokenId> token_to_id(std::string_view) const override { return std::nullopt; }
  const std::vector<TokenId>& eos_ids() const override { return eos_; }
  std::string apply_chat_template(const std::vector<ChatMessage>&, bool, bool) const override { return {}; }

 private:
  std::vector<std::string> bytes_;
  std::vector<TokenId> eos_;
};

GenerationRequest greedy_request(const nlohmann::json& p, std::size_t max_tokens) {
  GenerationRequest r;
  r.prompt = p["ids"].get<std::vector<TokenId>>();
  r.max_tokens = max_tokens;
  return r;
}

TEST(Engine, GreedyGenerateMatchesTransformers) {
  for (const auto& name : testing::fixture_models()) {
    const auto ref = load_reference(name);
    auto engine = Engine::open(fixture_dir(name), nullptr, {.device = testing::test_device(), .n_threads = 2, .compute = Compute::exact});
    for (const auto& p : ref["prompts"]) {
      auto r = engine->generate(greedy_request(p, 32));
      EXPECT_EQ(r.tokens, p["greedy"].get<std::vector<TokenId>>()) << name;
      EXPECT_EQ(r.finish, FinishReason::length);
      EXPECT_EQ(r.stats.prompt_tokens, p["ids"].size());
      EXPECT_EQ(r.stats.generated_tokens, 32u);
    }
    EXPECT_GT(engine->stats().decode_tokens, 0u);
    EXPECT_GT(engine->stats().decode_bytes, engine->model().weight_bytes_per_step());
  }
}

TEST(Engine, ContinuousBatchEqualsOneAtATime) {
  const std::string name = "tiny_mha_untied_sharded_f32";
  const auto ref = load_reference(name);
  // Small prefill budget: the long prompts are chunked while the short ones already decode.
  auto engine = Engine::open(fixture_dir(name), nullptr, {.device = testing::test_device(), .n_threads = 2, .max_batch_tokens = 9, .compute = Compute::exact});
  std::vector<GenerationRequest> reqs;
  for (const auto& p : ref["prompts"]) reqs.push_back(greedy_request(p, 20 + reqs.size()));
  auto results = engine->generate(reqs);
  ASSERT_EQ(results.size(), reqs.size());
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    auto want = ref["prompts"][i]["greedy"].get<std::vector<TokenId>>();
    want.resize(reqs[i].max_tokens);
    EXPECT_EQ(results[i].tokens, want) << "request " << i;
  }
  // All sequences released their KV blocks.
  auto again = engine->generate(reqs[0]);
  EXPECT_EQ(again.tokens, results[0].tokens);
}

TEST(Engine, PrefillChunkDefaultsToTheBackendsAndKeepsAGivenOne) {
  const auto dir = fixture_dir("tiny_mha_untied_sharded_f32");
  auto by_default = Engine::open(dir, nullptr, {.device = testing::test_device(), .n_threads = 2});
  const bool host = by_default->backend().host_memory();
  EXPECT_EQ(by_default->options().max_batch_tokens, host ? kHostBatchTokens : kDeviceBatchTokens);
  auto given = Engine::open(dir, nullptr, {.device = testing::test_device(), .n_threads = 2, .max_batch_tokens = 9});
  EXPECT_EQ(given->options().max_batch_tokens, 9u);
  // A prompt longer than the chunk takes several prefill steps.
  GenerationRequest r;
  for (TokenId t = 1; t <= 40; ++t) r.prompt.push_back(t * 7 % 500);
  r.max_tokens = 1;
  given->generate(r);
  EXPECT_EQ(given->stats().prefill_steps, 5u);  // 40 tokens in chunks of 9
  by_default->generate(r);
  EXPECT_EQ(by_default->stats().prefill_steps, 1u);
}

TEST(Engine, SeededSamplingIsReproducibleAndSeedSensitive) {
  const std::string name = "tiny_gqa_tied_f32";
  const auto ref = load_reference(name);
  auto engine = Engine::open(fixture_dir(name), nullptr, {.device = testing::test_device(), .n_threads = 1, .compute = Compute::exact});
  auto req = greedy_request(ref["prompts"][1], 24);
  req.sampling.temperature = 1.5f;
  req.sampling.top_p = 0.95f;
  req.sampling.seed = 42;
  auto a = engine->generate(req);
  auto b = engine->generate(req);
  EXPECT_EQ(a.tokens, b.tokens);
  req.sampling.seed = 43;
  auto c = engine->generate(req);
  EXPECT_NE(a.tokens, c.tokens);
  EXPECT_NE(a.tokens, ref["prompts"][1]["greedy"].get<std::vector<TokenId>>());
  // In a batch the per-request RNG gives the same stream as alone.
  req.sampling.seed = 42;
  std::vector<GenerationRequest> two = {req, greedy_request(ref["prompts"][3], 10)};
  auto batched = engine->generate(two);
  EXPECT_EQ(batched[0].tokens, a.tokens);
}

TEST(Engine, StopStringCutsTextAndEndsGeneration) {
  const std::string name = "tiny_gqa_untied_bf16";
  const auto ref = load_reference(name);
  auto tok = std::make_shared<LetterTokenizer>(512);
  auto engine = Engine::open(fixture_dir(name), tok, {.device = testing::test_device(), .n_threads = 2, .compute = Compute::exact});
  const auto greedy = ref["prompts"][3]["greedy"].get<std::vector<TokenId>>();
  const std::string full = tok->decode(greedy, false);
  // Stop on the text of tokens 10..11, shifted by one byte so that it straddles token boundaries.
  const std::string stop = full.substr(21, 3);
  const std::size_t at = full.find(stop);
  auto req = greedy_request(ref["prompts"][3], 32);
  req.stop = {"zzzzzzzzzzzz-never", stop};
  auto r = engine->generate(req);
  EXPECT_EQ(r.finish, FinishReason::stop_string);
  EXPECT_EQ(r.text, full.substr(0, at));
  // Generation ended on the token that completed the stop string.
  const std::size_t end_token = (at + stop.size() + 1) / 2;
  EXPECT_EQ(r.tokens, std::vector<TokenId>(greedy.begin(), greedy.begin() + static_cast<std::ptrdiff_t>(end_token)));
}

TEST(Engine, MaxTokensAndStopTokenIds) {
  const std::string name = "tiny_gqa_tied_f32";
  const auto ref = load_reference(name);
  auto engine = Engine::open(fixture_dir(name), nullptr, {.device = testing::test_device(), .n_threads = 2, .compute = Compute::exact});
  const auto greedy = ref["prompts"][3]["greedy"].get<std::vector<TokenId>>();
  auto req = greedy_request(ref["prompts"][3], 5);
  auto r = engine->generate(req);
  EXPECT_EQ(r.tokens, std::vector<TokenId>(greedy.begin(), greedy.begin() + 5));
  EXPECT_EQ(r.finish, FinishReason::length);
  req.max_tokens = 0;
  EXPECT_TRUE(engine->generate(req).tokens.empty());
  req.max_tokens = 32;
  req.stop_token_ids = {greedy[7]};
  const auto first = std::find(greedy.begin(), greedy.end(), greedy[7]);
  r = engine->generate(req);
  EXPECT_EQ(r.finish, FinishReason::eos);
  EXPECT_EQ(r.tokens, std::vector<TokenId>(greedy.begin(), first + 1));
}

/// Allows only even token ids: the output must obey it and equal the argmax over allowed tokens.
class EvenOnly final : public TokenConstraint {
 public:
  void fill_bitmask(std::span<std::uint32_t> m) override {
    for (auto& w : m) w = 0x55555555u;
    ++calls;
  }
  void accept(TokenId t) override { accepted.push_back(t); }
  int calls = 0;
  std::vector<TokenId> accepted;
};

TEST(Engine, TokenBitmaskRestrictsSampling) {
  const std::string name = "tiny_gqa_tied_f32";
  const auto ref = load_reference(name);
  auto engine = Engine::open(fixture_dir(name), nullptr, {.device = testing::test_device(), .n_threads = 2, .compute = Compute::exact});
  auto c = std::make_shared<EvenOnly>();
  auto req = greedy_request(ref["prompts"][2], 16);
  req.constraint = c;
  auto r = engine->generate(req);
  ASSERT_EQ(r.tokens.size(), 16u);
  for (auto t : r.tokens) EXPECT_EQ(t % 2, 0) << t;
  EXPECT_EQ(c->calls, 16);
  EXPECT_EQ(c->accepted, r.tokens);
  EXPECT_NE(r.tokens, std::vector<TokenId>(ref["prompts"][2]["greedy"].begin(), ref["prompts"][2]["greedy"].begin() + 16));
}

TEST(Engine, RejectsBadPrompts) {
  auto engine = Engine::open(fixture_dir("tiny_gqa_tied_f32"), nullptr, {.device = testing::test_device(), .n_threads = 1, .compute = Compute::exact});
  GenerationRequest r;
  EXPECT_THROW(engine->generate(r), std::invalid_argument);
  r.prompt = {1, 512};
  EXPECT_THROW(engine->generate(r), std::invalid_argument);
  r.prompt = {1, 2};
  r.stop = {"x"};
  EXPECT_THROW(engine->generate(r), std::invalid_argument);  // stop strings need a tokenizer
}

TEST(Engine, KvCacheTooSmallIsAnError) {
  auto engine = Engine::open(fixture_dir("tiny_gqa_tied_f32"), nullptr, {.device = testing::test_device(), .n_threads = 1, .max_kv_tokens = 32, .compute = Compute::exact});
  GenerationRequest r;
  r.prompt.assign(20, 3);
  r.max_tokens = 40;
  EXPECT_THROW(engine->generate(r), std::runtime_error);
  r.max_tokens = 5;  // fits: the failed request released its blocks
  EXPECT_EQ(engine->generate(r).tokens.size(), 5u);
}

}  // namespace
}  // namespace quarry::engine
