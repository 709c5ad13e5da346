// Hybrid models (Gated DeltaNet + gated attention: Qwen3-Next, Qwen3.5) beyond the transformers parity of
// test_qwen3_parity.cpp: the config keys, the multimodal wrapper checkpoint layout, the recurrent state
// in the KV cache (per sequence, reset at position 0, copied by a fork), and the engine running them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "engine/models/config.hpp"
#include "engine/models/model.hpp"
#include "engine/models/random_checkpoint.hpp"
#include "engine/runtime/engine.hpp"
#include "fixtures.hpp"
#include "last_logits.hpp"
#include "tests/common/device.hpp"

namespace quarry::engine {
namespace {

using testing::fixture_dir;
using testing::load_reference;

const char* kNextConfig = R"({"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next",
  "vocab_size": 512, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 8,
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "num_experts": 8,
  "num_experts_per_tok": 2, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 48,
  "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16,
  "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4, "full_attention_interval": 4,
  "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25}})";

TEST(HybridConfig, LayerTypesFromTheIntervalAndDefaults) {
  const auto c = parse_model_config(kNextConfig, "config.json");
  ASSERT_EQ(c.layer_types.size(), 8u);
  std::vector<bool> linear;
  for (std::size_t l = 0; l < 8; ++l) linear.push_back(c.is_linear_attention_layer(l));
  EXPECT_EQ(linear, (std::vector<bool>{true, true, true, false, true, true, true, false}));
  EXPECT_EQ(c.attention_layers(), 2u);
  EXPECT_TRUE(c.norm_topk_prob);  // Qwen3-Next's default
  EXPECT_EQ(c.rotary_dim(), 8u);  // 0.25 of head_dim 32
  EXPECT_EQ(c.shared_expert_intermediate_size, 48u);
}

TEST(HybridConfig, OtherArchitecturesLayerTypesDoNotMakeThemHybrid) {
  // transformers 5 writes layer_types into every Qwen3 config (full / sliding attention).
  const auto c = parse_model_config(R"({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
    "vocab_size": 512, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "layer_types": ["full_attention", "full_attention"]})", "config.json");
  EXPECT_TRUE(c.layer_types.empty());
  EXPECT_EQ(c.attention_layers(), 2u);
  EXPECT_FALSE(c.is_linear_attention_layer(0));
}

TEST(HybridConfig, BadLayerTypesAreRefusedNamingTheFile) {
  auto j = nlohmann::json::parse(kNextConfig);
  j["layer_types"] = {"linear_attention", "sliding_attention"};
  try {
    parse_model_config(j.dump(), "next/config.json");
    FAIL() << "accepted two layer types for eight layers";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("next/config.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("layer_types"), std::string::npos) << e.what();
  }
  j["layer_types"] = std::vector<std::string>(8, "sliding_attention");
  EXPECT_THROW(parse_model_config(j.dump(), "config.json"), std::runtime_error);
  j["layer_types"] = std::vector<std::string>(8, "linear_attention");
  j["linear_num_value_heads"] = 3;  // not a multiple of the 2 key heads
  EXPECT_THROW(parse_model_config(j.dump(), "config.json"), std::runtime_error);
}

/// `src` (one model.safetensors) rewritten in the ForConditionalGeneration layout: config.json with the
/// text model in text_config, tensors model.* renamed model.language_model.* (lm_head stays).
void write_wrapper_checkpoint(const std::filesystem::path& src, const std::filesystem::path& dst) {
  std::filesystem::create_directories(dst);
  auto text = nlohmann::json::parse(std::ifstream(src / "config.json"));
  const std::string arch = text["architectures"][0].get<std::string>();
  nlohmann::json top = {{"architectures", {arch.substr(0, arch.find("ForCausalLM")) + "ForConditionalGeneration"}},
                        {"model_type", "qwen3_5_moe"},
                        {"tie_word_embeddings", text["tie_word_embeddings"]},
                        {"vision_config", {{"depth", 2}}}};
  text.erase("tie_word_embeddings");
  top["text_config"] = text;
  std::ofstream(dst / "config.json") << top.dump(1);
  std::ifstream in(src / "model.safetensors", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  auto header = nlohmann::json::parse(bytes.substr(8, n));
  nlohmann::json renamed;
  for (const auto& [k, v] : header.items())
    renamed[k.rfind("model.", 0) == 0 ? "model.language_model." + k.substr(6) : k] = v;
  std::string h = renamed.dump();
  while (h.size() % 8) h += ' ';
  const std::uint64_t hn = h.size();
  std::ofstream out(dst / "model.safetensors", std::ios::binary);
  out.write(reinterpret_cast<const char*>(&hn), 8);
  out << h;
  out.write(bytes.data() + 8 + n, static_cast<std::streamsize>(bytes.size() - 8 - n));
}

using testing::last_logits;

TEST(HybridModel, ConditionalGenerationCheckpointLoadsItsTextModel) {
  const auto dir = testing::scratch_dir("hybrid_wrapper");
  write_wrapper_checkpoint(fixture_dir("tiny_qwen35moe_f32"), dir);
  const auto c = load_model_config(dir / "config.json");
  EXPECT_EQ(c.architecture, "Qwen3_5MoeForCausalLM");
  EXPECT_EQ(c.weight_prefix, "model.language_model.");
  EXPECT_NE(c.not_loaded.find("vision"), std::string::npos) << c.not_loaded;
  EXPECT_EQ(c.hidden_size, 64u);
  auto wrapped = load_model(dir, testing::test_backend(), Compute::exact);
  auto plain = load_model(fixture_dir("tiny_qwen35moe_f32"), testing::test_backend(), Compute::exact);
  const auto ref = load_reference("tiny_qwen35moe_f32");
  const auto prompt = ref["prompts"][2]["ids"].get<std::vector<TokenId>>();
  EXPECT_EQ(last_logits(*wrapped, prompt), last_logits(*plain, prompt));
}

TEST(HybridModel, StateIsPerSequenceResetAtPositionZeroAndCopiedByFork) {
  auto m = load_model(fixture_dir("tiny_next_f32"), testing::test_backend(), Compute::exact);
  auto kv = m->make_kv_cache(512);
  EXPECT_GT(kv->spec().state_floats, 0u);
  EXPECT_EQ(kv->spec().n_layers, 1u);  // one full-attention layer of four
  const auto ref = load_reference("tiny_next_f32");
  const auto a = ref["prompts"][1]["ids"].get<std::vector<TokenId>>();
  const std::size_t V = m->config().vocab_size;
  const auto run = [&](SeqId s, std::size_t from, std::size_t to, std::vector<float>& logits) {
    ASSERT_TRUE(kv->reserve(s, to));
    Batch b;
    for (std::size_t i = from; i < to; ++i) b.add(a[i], static_cast<std::int32_t>(i), s, i + 1 == to);
    m->forward(b, *kv, logits.data());
  };
  std::vector<float> whole(V), again(V), half(V), forked(V);
  const SeqId s = kv->create_sequence();
  run(s, 0, a.size(), whole);
  run(s, 0, a.size(), again);  // position 0 again: the state restarts, same logits
  EXPECT_EQ(whole, again);
  const SeqId t = kv->create_sequence();
  run(t, 0, 5, half);
  const SeqId f = kv->fork_sequence(t);  // carries t's state (and shares its blocks)
  run(f, 5, a.size(), forked);
  // Products over 5 + 6 rows instead of 11 may round differently on a GPU: equal within 1e-4.
  for (std::size_t i = 0; i < V; ++i) ASSERT_NEAR(forked[i], whole[i], 1e-4f) << "logit " << i;
  kv->free_sequence(f);
  kv->free_sequence(t);
  const SeqId u = kv->create_sequence();  // reuses a freed slot: starts clean at position 0
  run(u, 0, a.size(), again);
  EXPECT_EQ(again, whole);
}

TEST(HybridModel, RandomCheckpointPresetsHaveTheHybridLayout) {
  const auto big = parse_model_config(preset_config_json("qwen3-next-80b-a3b"), "preset");
  EXPECT_EQ(big.attention_layers(), 12u);
  EXPECT_EQ(big.rotary_dim(), 64u);
  // Active linear weights per token: about 3B, as the model's name says (the LM head not counted).
  EXPECT_GT(big.active_linear_parameters(), 2.5e9);
  EXPECT_LT(big.active_linear_parameters(), 3.5e9);
  const auto q35 = parse_model_config(preset_config_json("qwen3.5-122b-a10b"), "preset");
  EXPECT_EQ(q35.attention_layers(), 12u);
  EXPECT_EQ(q35.linear_num_value_heads, 64u);
  EXPECT_TRUE(q35.is_sparse_layer(0) && q35.is_sparse_layer(47));
  // About 10B active with the embedding and LM head (0.76B each); the linear layers alone about 8.4B.
  EXPECT_GT(q35.active_linear_parameters(), 7.5e9);
  EXPECT_LT(q35.active_linear_parameters(), 10.5e9);
  const auto dir = testing::scratch_dir("hybrid_random");
  write_random_checkpoint(preset_config_json("tiny-next"), dir, DType::bf16, 11);
  auto m = load_model(dir, testing::test_backend(), Compute::exact);
  auto kv = m->make_kv_cache(64);
  const SeqId s = kv->create_sequence();
  ASSERT_TRUE(kv->reserve(s, 20));
  Batch b;
  for (int i = 0; i < 20; ++i) b.add(100 + 7 * i, i, s, i == 19);
  std::vector<float> logits(m->config().vocab_size);
  m->forward(b, *kv, logits.data());
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
  EXPECT_GT(m->weight_bytes_per_step(), 0u);
}

TEST(HybridEngine, KvBudgetHoldsTheRecurrentStatesFirst) {
  // kv_cache_mb covers each running sequence's state (and its saved copy with MTP) and the prefix
  // snapshots before any K/V block; a budget too small for them is refused with the reason.
  const auto dir = fixture_dir("tiny_next_f32");
  EngineOptions o{.device = testing::test_device(), .n_threads = 1, .kv_cache_mb = 4, .max_num_seqs = 64};
  o.max_state_snapshots = 8;
  auto engine = Engine::open(dir, nullptr, o);
  const KvSpec& spec = engine->kv_cache().spec();
  const std::size_t state = spec.state_floats * sizeof(float), block = engine->kv_cache().bytes_per_block();
  ASSERT_GT(state, 0u);
  const std::size_t want_blocks = ((std::size_t{4} << 20) - (64 + 8) * state) / block;
  EXPECT_EQ(engine->kv_cache().allocator().max_blocks(), want_blocks);
  o.kv_cache_mb = (64 + 8) * state >> 20;  // not even the states fit
  try {
    Engine::open(dir, nullptr, o);
    FAIL() << "a KV budget smaller than the recurrent states was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("recurrent state"), std::string::npos) << e.what();
  }
}

TEST(HybridEngine, GreedyBatchMatchesTransformersWithoutPrefixReuse) {
  for (const std::string name : {"tiny_next_f32", "tiny_qwen35_f32"}) {
    const auto ref = load_reference(name);
    // Prefix caching on: a stateful model resumes only from a state snapshot, kept every 1024 prompt
    // positions by default, and these prompts are shorter (test_prefix_engine.cpp resumes from them).
    // These fixtures have no MTP module: no drafts (test_mtp_engine.cpp drafts on a hybrid model).
    auto engine = Engine::open(fixture_dir(name), nullptr,
                               {.device = testing::test_device(), .n_threads = 2, .enable_prefix_caching = true,
                                .mtp_depth = 2, .compute = Compute::exact});
    std::vector<GenerationRequest> reqs;
    for (int round = 0; round < 2; ++round)  // the same prompts twice: nothing may be reused
      for (const auto& p : ref["prompts"]) {
        GenerationRequest r;
        r.prompt = p["ids"].get<std::vector<TokenId>>();
        r.max_tokens = 32;
        reqs.push_back(std::move(r));
      }
    const auto results = engine->generate(reqs);
    ASSERT_EQ(results.size(), reqs.size());
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      const auto& p = ref["prompts"][i % ref["prompts"].size()];
      EXPECT_EQ(results[i].tokens, p["greedy"].get<std::vector<TokenId>>()) << name << " request " << i;
    }
    EXPECT_EQ(engine->stats().prefix_hit_tokens, 0u) << name;
    EXPECT_EQ(engine->stats().draft_tokens, 0u) << name;
  }
}

}  // namespace
}  // namespace quarry::engine
