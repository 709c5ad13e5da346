// Qwen3 and Qwen3-MoE forward passes against Hugging Face transformers (fixtures from
// tools/fixtures/qwen3/gen_fixtures.py and tools/fixtures/qwen3_moe/gen_fixtures.py):
// last-position logits within 1e-3, greedy continuations token-identical, batching and chunking invariance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>

#include "tests/common/device.hpp"
#include "engine/backend/cpu/ops.hpp"
#include "engine/models/model.hpp"
#include "engine/models/random_checkpoint.hpp"
#include "fixtures.hpp"

namespace quarry::engine {
namespace {

using testing::fixture_dir;
using testing::load_reference;

std::vector<TokenId> ids_of(const nlohmann::json& j) { return j.get<std::vector<TokenId>>(); }

float max_abs_diff(const float* a, const std::vector<float>& b) {
  float d = 0.f;
  for (std::size_t i = 0; i < b.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

/// Prefill `prompt` in chunks of `chunk` tokens into a fresh sequence; returns last-position logits.
std::vector<float> prefill(Model& m, KvCache& kv, SeqId seq, const std::vector<TokenId>& prompt, std::size_t chunk) {
  const std::size_t V = m.config().vocab_size;
  std::vector<float> logits(V);
  EXPECT_TRUE(kv.reserve(seq, prompt.size()));
  for (std::size_t s = 0; s < prompt.size(); s += chunk) {
    Batch b;
    const std::size_t e = std::min(prompt.size(), s + chunk);
    for (std::size_t i = s; i < e; ++i) b.add(prompt[i], static_cast<std::int32_t>(i), seq, i + 1 == prompt.size());
    m.forward(b, kv, logits.data());
  }
  return logits;
}

class Parity : public ::testing::TestWithParam<std::string> {};

TEST_P(Parity, LastLogitsAndGreedyMatchTransformers) {
  const auto ref = load_reference(GetParam());
  auto model = load_model(fixture_dir(GetParam()), testing::test_backend(), Compute::exact);
  const std::size_t V = model->config().vocab_size;
  float worst = 0.f;
  for (const auto& p : ref["prompts"]) {
    const auto prompt = ids_of(p["ids"]);
    auto kv_owner = model->make_kv_cache(1024);
  KvCache& kv = *kv_owner;
    SeqId seq = kv.create_sequence();
    auto logits = prefill(*model, kv, seq, prompt, prompt.size());
    const auto want = p["last_logits"].get<std::vector<float>>();
    ASSERT_EQ(want.size(), V);
    worst = std::max(worst, max_abs_diff(logits.data(), want));
    EXPECT_LE(max_abs_diff(logits.data(), want), 1e-3f) << GetParam() << " prompt length " << prompt.size();

    // Greedy decode through the KV cache, one token per forward.
    const auto greedy = ids_of(p["greedy"]);
    std::vector<TokenId> got;
    std::size_t pos = prompt.size();
    for (std::size_t step = 0; step < greedy.size(); ++step) {
      TokenId next = cpu::argmax(logits.data(), V);
      got.push_back(next);
      ASSERT_TRUE(kv.reserve(seq, pos + 1));
      Batch b;
      b.add(next, static_cast<std::int32_t>(pos++), seq, true);
      model->forward(b, kv, logits.data());
    }
    EXPECT_EQ(got, greedy) << GetParam() << " prompt length " << prompt.size();
  }
  std::cout << "[   info   ] " << GetParam() << ": max |logit - transformers| = " << worst << "\n";
}

TEST_P(Parity, AllPositionLogitsMatchTransformers) {
  const auto ref = load_reference(GetParam());
  auto model = load_model(fixture_dir(GetParam()), testing::test_backend(), Compute::exact);
  const std::size_t V = model->config().vocab_size;
  for (const auto& p : ref["prompts"]) {
    if (!p.contains("all_logits")) continue;
    const auto prompt = ids_of(p["ids"]);
    auto kv_owner = model->make_kv_cache(256);
  KvCache& kv = *kv_owner;
    SeqId seq = kv.create_sequence();
    ASSERT_TRUE(kv.reserve(seq, prompt.size()));
    Batch b;
    for (std::size_t i = 0; i < prompt.size(); ++i) b.add(prompt[i], static_cast<std::int32_t>(i), seq, true);
    std::vector<float> logits(prompt.size() * V);
    model->forward(b, kv, logits.data());
    const auto all = p["all_logits"].get<std::vector<std::vector<float>>>();
    ASSERT_EQ(all.size(), prompt.size());
    for (std::size_t i = 0; i < prompt.size(); ++i)
      EXPECT_LE(max_abs_diff(logits.data() + i * V, all[i]), 1e-3f) << "position " << i;
  }
}

TEST_P(Parity, ChunkedPrefillEqualsOneShot) {
  const auto ref = load_reference(GetParam());
  auto model = load_model(fixture_dir(GetParam()), testing::test_backend(), Compute::exact);
  const auto prompt = ids_of(ref["prompts"][3]["ids"]);  // 45 tokens: chunks cross block boundaries
  auto kv_owner = model->make_kv_cache(1024);
  KvCache& kv = *kv_owner;
  auto one = prefill(*model, kv, kv.create_sequence(), prompt, prompt.size());
  // Products over other row counts may block differently; a hybrid model's recurrence carries that on.
  const float tolerance = kv.spec().state_floats > 0 ? 5e-5f : 1e-5f;
  for (std::size_t chunk : {1u, 7u, 16u}) {
    auto chunked = prefill(*model, kv, kv.create_sequence(), prompt, chunk);
    EXPECT_LE(max_abs_diff(chunked.data(), one), tolerance) << "chunk " << chunk;
  }
}

TEST_P(Parity, MultiSequenceBatchEqualsEachAlone) {
  const auto ref = load_reference(GetParam());
  auto model = load_model(fixture_dir(GetParam()), testing::test_backend(), Compute::exact);
  const std::size_t V = model->config().vocab_size;
  const auto a = ids_of(ref["prompts"][1]["ids"]), c = ids_of(ref["prompts"][2]["ids"]);
  auto kv_owner = model->make_kv_cache(1024);
  KvCache& kv = *kv_owner;
  auto alone_a = prefill(*model, kv, kv.create_sequence(), a, a.size());
  auto alone_c = prefill(*model, kv, kv.create_sequence(), c, c.size());
  SeqId sa = kv.create_sequence(), sc = kv.create_sequence();
  ASSERT_TRUE(kv.reserve(sa, a.size()));
  ASSERT_TRUE(kv.reserve(sc, c.size()));
  Batch b;  // interleaved: the call must not depend on token order across sequences
  for (std::size_t i = 0; i < std::max(a.size(), c.size()); ++i) {
    if (i < c.size()) b.add(c[i], static_cast<std::int32_t>(i), sc, i + 1 == c.size());
    if (i < a.size()) b.add(a[i], static_cast<std::int32_t>(i), sa, i + 1 == a.size());
  }
  std::vector<float> logits(2 * V);
  model->forward(b, kv, logits.data());
  // Row order follows batch order: a's last token (index 10) comes before c's (index 22).
  EXPECT_LE(max_abs_diff(logits.data(), alone_a), 1e-5f);
  EXPECT_LE(max_abs_diff(logits.data() + V, alone_c), 1e-5f);
  const auto want_c = ref["prompts"][2]["last_logits"].get<std::vector<float>>();
  EXPECT_LE(max_abs_diff(logits.data() + V, want_c), 1e-3f);
}

INSTANTIATE_TEST_SUITE_P(Qwen3, Parity, ::testing::ValuesIn(testing::fixture_models()));

}  // namespace
}  // namespace quarry::engine

namespace quarry::engine {
namespace {

/// The same random weights stored as f32, bf16 and f16 (write_random_checkpoint rounds to nearest even)
/// give nearly the same logits: the f16 and bf16 paths read the stored dtype correctly.
TEST(StoredDtypes, F16AndBf16CheckpointsAgreeWithF32) {
  nlohmann::json cfg = nlohmann::json::parse(preset_config_json("tiny"));
  cfg["vocab_size"] = 300;
  cfg["initializer_range"] = 0.1;
  std::map<DType, std::vector<float>> logits;
  const std::vector<TokenId> prompt = {5, 17, 299, 42, 0, 8};
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    auto dir = testing::scratch_dir(std::string("dtype_") + dtype_name(dt));
    write_random_checkpoint(cfg.dump(), dir, dt, 99);
    auto model = load_model(dir, testing::test_backend());
    auto kv_owner = model->make_kv_cache(64);
  KvCache& kv = *kv_owner;
    logits[dt] = prefill(*model, kv, kv.create_sequence(), prompt, prompt.size());
  }
  const float d16 = max_abs_diff(logits[DType::f16].data(), logits[DType::f32]);
  const float dbf = max_abs_diff(logits[DType::bf16].data(), logits[DType::f32]);
  EXPECT_GT(d16, 0.f);   // really rounded
  EXPECT_LT(d16, 5e-3f);  // f16 keeps 11 significant bits
  EXPECT_GT(dbf, d16);    // bf16 keeps 8
  EXPECT_LT(dbf, 5e-2f);
}

}  // namespace
}  // namespace quarry::engine
