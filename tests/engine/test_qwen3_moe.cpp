// Qwen3-MoE beyond the transformers parity of test_qwen3_parity.cpp: the config keys, which layers are
// sparse, both expert layouts giving the same numbers, the bytes a decode step reads, and the errors.
#include <gtest/gtest.h>

#include <fstream>

#include "engine/models/config.hpp"
#include "engine/models/model.hpp"
#include "fixtures.hpp"
#include "last_logits.hpp"
#include "tests/common/device.hpp"

namespace quarry::engine {
namespace {

using testing::fixture_dir;

const char* kMoeConfig = R"({"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
  "vocab_size": 512, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 6,
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "num_experts": 8,
  "num_experts_per_tok": 2, "moe_intermediate_size": 32, "norm_topk_prob": true,
  "decoder_sparse_step": 2, "mlp_only_layers": [3]})";

TEST(MoeConfig, KeysAndSparseLayers) {
  const auto c = parse_model_config(kMoeConfig, "config.json");
  EXPECT_EQ(c.num_experts, 8u);
  EXPECT_EQ(c.num_experts_per_tok, 2u);
  EXPECT_EQ(c.moe_intermediate_size, 32u);
  EXPECT_TRUE(c.norm_topk_prob);
  // (l + 1) % 2 == 0 and l not in mlp_only_layers: 1 and 5 (3 is listed).
  std::vector<bool> sparse;
  for (std::size_t l = 0; l < 6; ++l) sparse.push_back(c.is_sparse_layer(l));
  EXPECT_EQ(sparse, (std::vector<bool>{false, true, false, false, false, true}));
}

TEST(MoeConfig, ActiveLinearParametersCountTheRoutedExpertsOnly) {
  const auto c = parse_model_config(kMoeConfig, "config.json");
  const double attn = 64.0 * 16 * (2 * 4 + 2 * 2);   // q, o: 4 heads of 16; k, v: 2
  const double dense = 3.0 * 64 * 96;
  const double sparse = 64.0 * 8 + 3.0 * 64 * 2 * 32;  // router + 2 of 8 experts of width 32
  EXPECT_DOUBLE_EQ(c.active_linear_parameters(), 6 * attn + 4 * dense + 2 * sparse);  // layers 1 and 5 sparse
  auto j = nlohmann::json::parse(kMoeConfig);
  j.erase("num_experts");
  EXPECT_DOUBLE_EQ(parse_model_config(j.dump(), "config.json").active_linear_parameters(), 6 * (attn + dense));
}

TEST(MoeConfig, NumLocalExpertsIsTheSameKey) {
  auto j = nlohmann::json::parse(kMoeConfig);
  j.erase("num_experts");
  j["num_local_experts"] = 16;
  EXPECT_EQ(parse_model_config(j.dump(), "config.json").num_experts, 16u);
}

TEST(MoeConfig, BadTopKIsRefusedNamingTheFile) {
  auto j = nlohmann::json::parse(kMoeConfig);
  j["num_experts_per_tok"] = 9;
  try {
    parse_model_config(j.dump(), "moe/config.json");
    FAIL() << "accepted top-k 9 of 8 experts";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("moe/config.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("num_experts_per_tok"), std::string::npos) << e.what();
  }
  j["num_experts_per_tok"] = 2;
  j["decoder_sparse_step"] = 0;
  EXPECT_THROW(parse_model_config(j.dump(), "config.json"), std::runtime_error);
}

using testing::last_logits;

TEST(MoeModel, FusedAndPerExpertLayoutsGiveIdenticalLogits) {
  std::vector<TokenId> prompt;
  for (int i = 0; i < 40; ++i) prompt.push_back(static_cast<TokenId>((i * 53 + 11) % 512));
  for (const std::string name : {"tiny_moe_f32", "tiny_moe_bf16"}) {
    auto per_expert = load_model(fixture_dir(name), testing::test_backend(), Compute::exact);
    auto fused = load_model(fixture_dir(name + "_fused"), testing::test_backend(), Compute::exact);
    EXPECT_EQ(last_logits(*per_expert, prompt), last_logits(*fused, prompt)) << name;
  }
}

TEST(MoeModel, ADecodeStepReadsTheActiveExpertsOnly) {
  // tiny_moe_f32 (f32): 3 layers, layer 1 dense (mlp_only_layers), layers 0 and 2 sparse with 8 experts
  // of width 32, top 2; hidden 64, 4 heads / 2 kv heads of 16, dense width 96, vocab 512, untied head.
  auto m = load_model(fixture_dir("tiny_moe_f32"), testing::test_backend(), Compute::exact);
  const std::size_t f = 4, H = 64, V = 512;
  const std::size_t attn = (64 * H + 32 * H + 32 * H + H * 64) * f + (H + 16 + 16) * f;
  const std::size_t dense = 3 * 96 * H * f + H * f;
  const std::size_t sparse_active = 8 * H * f + H * f + 2 * (3 * 32 * H * f);
  const std::size_t want = V * H * f + H * f + 3 * attn + dense + 2 * sparse_active + H * f;
  EXPECT_EQ(m->weight_bytes_per_step(), want);
  // Recordable where the backend routes on the device (CUDA, small batches), not where it downloads.
  if (testing::test_device_name() == "cpu") {
    EXPECT_FALSE(m->supports_capture(1));
  } else {
    EXPECT_TRUE(m->supports_capture(1));
  }
}

TEST(MoeModel, ADenseArchitectureWithExpertsIsRefused) {
  const auto dir = testing::scratch_dir("moe_as_dense");
  for (const auto& f : std::filesystem::directory_iterator(fixture_dir("tiny_moe_f32")))
    std::filesystem::copy_file(f.path(), dir / f.path().filename());
  auto cfg = nlohmann::json::parse(std::ifstream(dir / "config.json"));
  cfg["architectures"] = {"Qwen3ForCausalLM"};
  std::ofstream(dir / "config.json") << cfg.dump();
  EXPECT_THROW(load_model(dir, testing::test_backend(), Compute::exact), std::runtime_error);
}

}  // namespace
}  // namespace quarry::engine
