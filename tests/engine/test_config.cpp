// config.json parsing: transformers 4.x and 5.x layouts, defaults, errors naming the file.
#include <gtest/gtest.h>

#include "engine/models/config.hpp"
#include "fixtures.hpp"

namespace quarry::engine {
namespace {

TEST(ModelConfig, ReadsTransformers5Fixture) {
  auto c = load_model_config(testing::fixture_dir("tiny_gqa_untied_bf16") / "config.json");
  EXPECT_EQ(c.architecture, "Qwen3ForCausalLM");
  EXPECT_EQ(c.hidden_size, 128u);
  EXPECT_EQ(c.head_dim, 32u);
  EXPECT_EQ(c.num_key_value_heads, 2u);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);  // nested under rope_parameters
  EXPECT_EQ(c.torch_dtype, "bfloat16");       // "dtype" key
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.rotary_dim(), 32u);
}

TEST(ModelConfig, ReadsTransformers4Layout) {
  // The real Qwen3-4B config.json layout (transformers 4.51): top-level rope_theta, torch_dtype.
  auto c = parse_model_config(R"({"architectures": ["Qwen3ForCausalLM"], "head_dim": 128, "hidden_size": 2560,
    "intermediate_size": 9728, "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 5000000, "tie_word_embeddings": true,
    "torch_dtype": "bfloat16", "vocab_size": 151936, "eos_token_id": 151645, "hidden_act": "silu"})", "cfg4");
  EXPECT_DOUBLE_EQ(c.rope_theta, 5000000.0);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_TRUE(c.tie_word_embeddings);
  ASSERT_EQ(c.eos_token_ids.size(), 1u);
  EXPECT_EQ(c.eos_token_ids[0], 151645);
}

TEST(ModelConfig, DefaultsAndPartialRotary) {
  auto c = parse_model_config(R"({"model_type": "qwen3", "hidden_size": 64, "intermediate_size": 128,
    "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 100,
    "rope_parameters": {"rope_theta": 1000.0, "rope_type": "default", "partial_rotary_factor": 0.25}})", "cfg");
  EXPECT_EQ(c.num_key_value_heads, 4u);  // MHA default
  EXPECT_EQ(c.head_dim, 16u);            // hidden / heads
  EXPECT_EQ(c.rotary_dim(), 4u);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1000.0);
}

void expect_error(const std::string& json, const std::string& fragment) {
  try {
    parse_model_config(json, "some/dir/config.json");
    ADD_FAILURE() << "no error for " << json;
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("some/dir/config.json"), std::string::npos) << what;
    EXPECT_NE(what.find(fragment), std::string::npos) << what;
  }
}

TEST(ModelConfig, ErrorsNameTheFileAndTheReason) {
  const std::string base = R"("model_type": "qwen3", "intermediate_size": 8, "num_attention_heads": 4,
    "num_hidden_layers": 1, "vocab_size": 10)";
  expect_error("{" + base + "}", "hidden_size");
  expect_error("{" + base + ", \"hidden_size\": 16, \"num_key_value_heads\": 3}", "num_key_value_heads");
  expect_error("{" + base + ", \"hidden_size\": 16, \"rope_scaling\": {\"rope_type\": \"yarn\"}}", "yarn");
  expect_error("{" + base + ", \"hidden_size\": -16}", "hidden_size");
  expect_error("{not json", "malformed JSON");
  EXPECT_THROW(load_model_config("/nonexistent/config.json"), std::runtime_error);
}

}  // namespace
}  // namespace quarry::engine
