// Quantized checkpoints end to end: tiny random Qwen3 / Qwen3-MoE checkpoints quantized by
// quantize_checkpoint (what `quarry quantize` runs) in every layout, loaded from their
// quantization_config, must give the logits and greedy tokens of the same model with the dequantized
// weights written as f32 (--compute exact); and the loader's errors.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/backend/backend.hpp"
#include "engine/backend/cpu/ops.hpp"
#include "engine/models/config.hpp"
#include "engine/models/model.hpp"
#include "engine/models/quantize.hpp"
#include "engine/models/random_checkpoint.hpp"
#include "engine/models/safetensors.hpp"
#include "fixtures.hpp"
#include "tests/common/device.hpp"

namespace quarry::engine {
namespace {

const char* kDense = R"({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 512,
  "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
  "num_key_value_heads": 2, "head_dim": 32, "max_position_embeddings": 512, "rms_norm_eps": 1e-6,
  "rope_theta": 10000.0, "tie_word_embeddings": false, "initializer_range": 0.05})";

const char* kMoe = R"({"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "vocab_size": 384,
  "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
  "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 512, "rms_norm_eps": 1e-6,
  "rope_theta": 10000.0, "tie_word_embeddings": true, "initializer_range": 0.05, "num_experts": 8,
  "num_experts_per_tok": 2, "moe_intermediate_size": 32, "norm_topk_prob": true, "decoder_sparse_step": 1,
  "mlp_only_layers": [1]})";

/// Greedy continuation of `prompt` (one token per forward) and the logits of every step, concatenated.
struct Run {
  std::vector<TokenId> tokens;
  std::vector<float> logits;
};

Run greedy(const std::filesystem::path& dir, const std::vector<TokenId>& prompt, std::size_t steps) {
  auto model = load_model(dir, testing::test_backend(2), Compute::exact);
  const std::size_t V = model->config().vocab_size;
  auto kv_owner = model->make_kv_cache(256);
  KvCache& kv = *kv_owner;
  const SeqId seq = kv.create_sequence();
  std::vector<float> logits(V);
  EXPECT_TRUE(kv.reserve(seq, prompt.size()));
  Batch b;
  for (std::size_t i = 0; i < prompt.size(); ++i)
    b.add(prompt[i], static_cast<std::int32_t>(i), seq, i + 1 == prompt.size());
  model->forward(b, kv, logits.data());
  Run r;
  std::size_t pos = prompt.size();
  for (std::size_t s = 0; s < steps; ++s) {
    r.logits.insert(r.logits.end(), logits.begin(), logits.end());
    const TokenId next = cpu::argmax(logits.data(), V);
    r.tokens.push_back(next);
    EXPECT_TRUE(kv.reserve(seq, pos + 1));
    Batch d;
    d.add(next, static_cast<std::int32_t>(pos++), seq, true);
    model->forward(d, kv, logits.data());
  }
  return r;
}

struct Variant {
  std::string name;
  QuantizeOptions o;
};

std::vector<Variant> variants() {
  std::vector<Variant> v;
  auto add = [&](const std::string& name, auto&& set) {
    QuantizeOptions o;
    set(o);
    v.push_back({name, o});
  };
  add("int8_channel", [](QuantizeOptions& o) { o.method = "int8"; o.group_size = 0; });
  add("int8_group32_lm_head", [](QuantizeOptions& o) { o.method = "int8"; o.group_size = 32; o.keep = {}; });
  add("gptq4_sym_g32", [](QuantizeOptions& o) { o.method = "int4-gptq"; o.group_size = 32; });
  add("gptq4_asym_g64_v1", [](QuantizeOptions& o) { o.method = "int4-gptq"; o.group_size = 64; o.sym = false; });
  add("gptq4_asym_g32_v2", [](QuantizeOptions& o) {
    o.method = "int4-gptq"; o.group_size = 32; o.sym = false; o.gptq_v2 = true; });
  add("gptq4_desc_act_g32", [](QuantizeOptions& o) {
    o.method = "int4-gptq"; o.group_size = 32; o.sym = false; o.desc_act = true; });
  add("gptq4_channel", [](QuantizeOptions& o) { o.method = "int4-gptq"; o.group_size = 0; });
  add("gptq8_g128", [](QuantizeOptions& o) { o.method = "int4-gptq"; o.bits = 8; o.group_size = 128; o.sym = false; });
  add("autoround4_g32", [](QuantizeOptions& o) { o.method = "int4-gptq"; o.group_size = 32; o.auto_round = true; o.sym = false; });
  add("fp8_block128", [](QuantizeOptions& o) { o.method = "fp8"; });
  add("ct_int4_g32", [](QuantizeOptions& o) { o.method = "int4-ct"; o.group_size = 32; });
  add("ct_int4_channel_lm_head", [](QuantizeOptions& o) { o.method = "int4-ct"; o.group_size = 0; o.keep = {}; });
  add("gptq4_keep_down_proj", [](QuantizeOptions& o) {
    o.method = "int4-gptq"; o.group_size = 32; o.keep = {"lm_head", "mlp.down_proj"}; });
  return v;
}

class QuantModel : public ::testing::TestWithParam<std::string> {};

void check_variant(const std::string& config, const std::string& tag, const QuantizeOptions& base, std::size_t vocab) {
  const auto root = testing::scratch_dir("quant_" + tag);
  write_random_checkpoint(config, root / "f", DType::bf16, 17);
  QuantizeOptions o = base;
  o.dequantized_dir = root / "ref";
  const auto rep = quantize_checkpoint(root / "f", root / "q", o);
  EXPECT_GT(rep.quantized, 0u) << tag;
  EXPECT_LT(rep.bytes_out, rep.bytes_in) << tag;
  // 12 prompt tokens: prefill takes the products of more than 8 rows (CUDA: the dequantized rows on the
  // float kernels), decode the packed-weight GEMV.
  const std::vector<TokenId> prompt = {1, 17, 250, 3, 99, static_cast<TokenId>(vocab - 1), 42, 7, 300, 64, 5, 2};
  const Run q = greedy(root / "q", prompt, 12), ref = greedy(root / "ref", prompt, 12),
            orig = greedy(root / "f", prompt, 12);
  EXPECT_EQ(q.tokens, ref.tokens) << tag;
  ASSERT_EQ(q.logits.size(), ref.logits.size());
  float worst = 0.f, from_orig = 0.f;
  for (std::size_t i = 0; i < q.logits.size(); ++i) {
    worst = std::max(worst, std::fabs(q.logits[i] - ref.logits[i]));
    from_orig = std::max(from_orig, std::fabs(q.logits[i] - orig.logits[i]));
  }
  // The same f32 products on the same dequantized values: identical on the CPU, not merely close. On
  // CUDA close: decode's quantized GEMV applies each scale once per 16-byte load and sums in its own
  // order, and the experts of the f32 model run on the device's gather kernels, the quantized ones per
  // expert.
  if (testing::on_gpu()) EXPECT_LE(worst, 1e-3f) << tag;  // the parity bar of f32 logits
  else EXPECT_EQ(worst, 0.f) << tag;
  // And the quantization did change the model (the packed weights were read, not float copies).
  EXPECT_GT(from_orig, 0.f) << tag;
  std::filesystem::remove_all(root);
}

TEST_P(QuantModel, GreedyTokensAndLogitsEqualTheDequantizedF32Model) {
  for (const auto& v : variants())
    if (v.name == GetParam()) check_variant(kDense, v.name, v.o, 512);
}

INSTANTIATE_TEST_SUITE_P(Layouts, QuantModel, ::testing::Values("int8_channel", "int8_group32_lm_head", "gptq4_sym_g32",
                                                                 "gptq4_asym_g64_v1", "gptq4_asym_g32_v2",
                                                                 "gptq4_desc_act_g32", "gptq4_channel", "gptq8_g128",
                                                                 "autoround4_g32", "fp8_block128", "gptq4_keep_down_proj",
                                                                 "ct_int4_g32", "ct_int4_channel_lm_head"));

TEST(QuantModelMoe, QuantizedExpertsGiveTheDequantizedModelsTokens) {
  QuantizeOptions o;
  o.method = "int4-gptq";
  o.group_size = 32;
  check_variant(kMoe, "moe_gptq4", o, 384);
  o.method = "int8";
  o.group_size = 0;
  check_variant(kMoe, "moe_int8", o, 384);
}

TEST(QuantModelHybrid, QuantizedHybridGivesTheDequantizedModelsTokens) {
  // Every linear of the Gated DeltaNet and gated attention layers and the experts quantized; the regrouped
  // projections (query / gate rows of q_proj) gathered from the packed tensors, not dequantized copies.
  for (const auto& v : variants())
    if (v.name == "int8_channel" || v.name == "gptq4_sym_g32" || v.name == "gptq4_desc_act_g32" ||
        v.name == "fp8_block128")
      check_variant(preset_config_json("tiny-qwen3.5-moe"), "hybrid_" + v.name, v.o, 512);
}

TEST(QuantLoader, WrittenLayoutsAreThePublishedOnes) {
  const auto root = testing::scratch_dir("quant_layout");
  write_random_checkpoint(kDense, root / "f", DType::bf16, 3);
  QuantizeOptions o;
  o.method = "int4-gptq";
  o.group_size = 32;
  o.desc_act = true;
  o.keep = {"lm_head", "mlp.down_proj"};
  quantize_checkpoint(root / "f", root / "q", o);
  std::ifstream in(root / "q" / "config.json");
  const auto cfg = nlohmann::json::parse(in);
  const auto& qc = cfg["quantization_config"];
  EXPECT_EQ(qc["quant_method"], "gptq");
  EXPECT_EQ(qc["checkpoint_format"], "gptq");
  EXPECT_EQ(qc["bits"], 4);
  EXPECT_EQ(qc["group_size"], 32);
  EXPECT_EQ(qc["desc_act"], true);
  const auto skipped = qc["modules_to_not_convert"].get<std::vector<std::string>>();
  EXPECT_NE(std::find(skipped.begin(), skipped.end(), "model.layers.0.mlp.down_proj"), skipped.end());
  EXPECT_NE(std::find(skipped.begin(), skipped.end(), "lm_head"), skipped.end());
  const auto store = TensorStore::open(root / "q");
  EXPECT_EQ(store->get_raw("model.layers.0.self_attn.q_proj.qweight", {128 / 8, 128}, "I32").stored, "I32");
  EXPECT_EQ(store->get_raw("model.layers.0.mlp.gate_proj.qzeros", {128 / 32, 256 / 8}, "I32").stored, "I32");
  EXPECT_EQ(store->get_raw("model.layers.0.mlp.gate_proj.scales", {128 / 32, 256}, "F16").stored, "F16");
  const auto& g = store->get_raw("model.layers.1.mlp.up_proj.g_idx", {128}, "I32");
  bool trivial = true;
  for (std::size_t k = 0; k < 128; ++k) trivial = trivial && static_cast<const std::int32_t*>(g.data)[k] == static_cast<std::int32_t>(k / 32);
  EXPECT_FALSE(trivial) << "desc_act must give a permuted g_idx";
  EXPECT_EQ(store->get("model.layers.0.mlp.down_proj.weight", {128, 256}).dtype, DType::bf16);  // kept
  EXPECT_FALSE(store->has("model.layers.0.self_attn.q_proj.weight"));
  std::filesystem::remove_all(root);
}

TEST(QuantLoader, NotConvertedListsMatchNamesSuffixesAndPatterns) {
  const auto c = parse_model_config(R"({"architectures": ["Qwen3ForCausalLM"], "vocab_size": 8, "hidden_size": 8,
    "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 1,
    "quantization_config": {"quant_method": "compressed-tensors", "format": "int-quantized",
      "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "int",
        "symmetric": true, "strategy": "channel"}}},
      "ignore": ["lm_head", "re:.*mlp.gate$", "model.layers.0.self_attn.o_proj"]}})", "test config");
  const auto& q = c.quantization;
  EXPECT_EQ(q.quant_method, "compressed-tensors");
  EXPECT_EQ(q.bits, 8u);
  EXPECT_TRUE(q.is_not_converted("lm_head"));
  EXPECT_TRUE(q.is_not_converted("model.layers.3.mlp.gate"));
  EXPECT_FALSE(q.is_not_converted("model.layers.3.mlp.gate_proj"));
  EXPECT_TRUE(q.is_not_converted("model.layers.0.self_attn.o_proj"));
  EXPECT_FALSE(q.is_not_converted("model.layers.1.self_attn.o_proj"));
  EXPECT_FALSE(q.is_not_converted("model.layers.0.self_attn.q_proj"));
}

void rewrite_config(const std::filesystem::path& dir, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json cfg;
  {
    std::ifstream in(dir / "config.json");
    cfg = nlohmann::json::parse(in);
  }
  edit(cfg);
  std::ofstream(dir / "config.json") << cfg.dump(2);
}

std::string load_error(const std::filesystem::path& dir) {
  try {
    load_model(dir, make_backend({}), Compute::exact);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(QuantLoader, ThreadsChangeNoByte) {
  // Modules are quantized ahead of the writer on worker threads: one thread and several write the same
  // files, byte for byte (the dequantized reference too), for a layout with per-module tables (desc_act's
  // g_idx) and one with blocks.
  const auto root = testing::scratch_dir("quant_threads");
  write_random_checkpoint(kDense, root / "f", DType::bf16, 9);
  const auto bytes = [](const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  for (const std::string method : {"int4-gptq", "fp8"}) {
    std::string files[2][2];
    for (const std::size_t threads : {1u, 5u}) {
      QuantizeOptions o;
      o.method = method;
      o.group_size = 32;
      o.desc_act = method == "int4-gptq";
      o.sym = false;
      o.threads = threads;
      const std::string tag = method + "_t" + std::to_string(threads);
      o.dequantized_dir = root / (tag + "_ref");
      quantize_checkpoint(root / "f", root / tag, o);
      files[threads == 1 ? 0 : 1][0] = bytes(root / tag / "model.safetensors");
      files[threads == 1 ? 0 : 1][1] = bytes(o.dequantized_dir / "model.safetensors");
    }
    EXPECT_GT(files[0][0].size(), 1000u) << method;
    EXPECT_TRUE(files[0][0] == files[1][0]) << method << ": the quantized checkpoints differ";
    EXPECT_TRUE(files[0][1] == files[1][1]) << method << ": the dequantized references differ";
  }
  std::filesystem::remove_all(root);
}

TEST(QuantLoader, ClearErrors) {
  const auto root = testing::scratch_dir("quant_errors");
  write_random_checkpoint(kDense, root / "f", DType::bf16, 5);
  QuantizeOptions o;
  o.method = "int4-gptq";
  o.group_size = 32;
  quantize_checkpoint(root / "f", root / "q", o);
  // An unknown method: named, with the config file.
  rewrite_config(root / "q", [](nlohmann::json& c) { c["quantization_config"]["quant_method"] = "awq"; });
  std::string e = load_error(root / "q");
  EXPECT_NE(e.find("\"awq\""), std::string::npos) << e;
  EXPECT_NE(e.find("config.json"), std::string::npos) << e;
  // Bits the packing does not hold.
  rewrite_config(root / "q", [](nlohmann::json& c) {
    c["quantization_config"]["quant_method"] = "gptq";
    c["quantization_config"]["bits"] = 3;
  });
  e = load_error(root / "q");
  EXPECT_NE(e.find("bits 3"), std::string::npos) << e;
  // Asymmetric compressed-tensors weights are refused, naming the method.
  rewrite_config(root / "q", [](nlohmann::json& c) {
    c["quantization_config"] = nlohmann::json::parse(R"({"quant_method": "compressed-tensors",
      "format": "pack-quantized", "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 4,
      "type": "int", "symmetric": false, "strategy": "group", "group_size": 32}}}})");
  });
  e = load_error(root / "q");
  EXPECT_NE(e.find("compressed-tensors"), std::string::npos) << e;
  EXPECT_NE(e.find("asymmetric"), std::string::npos) << e;
  // The config says nothing of quantization, but the tensors are packed: the tensor is named.
  rewrite_config(root / "q", [](nlohmann::json& c) { c.erase("quantization_config"); });
  e = load_error(root / "q");
  EXPECT_NE(e.find("q_proj.weight"), std::string::npos) << e;
  // 8 bits declared for 4-bit tensors: the packed tensor's shape does not match; named with the method.
  rewrite_config(root / "q", [](nlohmann::json& c) {
    c["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 8}, {"group_size", 32}, {"sym", true}};
  });
  e = load_error(root / "q");
  EXPECT_NE(e.find("qweight"), std::string::npos) << e;
  EXPECT_NE(e.find("shape mismatch"), std::string::npos) << e;
  // A g_idx that names a group the scales do not have.
  rewrite_config(root / "q", [](nlohmann::json& c) { c["quantization_config"]["bits"] = 4; });
  EXPECT_EQ(load_error(root / "q"), "");
  {
    // Overwrite g_idx[5] of one module with group 999 in the file.
    const auto path = root / "q" / "model.safetensors";
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    std::uint64_t hl = 0;
    f.read(reinterpret_cast<char*>(&hl), 8);
    std::string h(hl, ' ');
    f.read(h.data(), static_cast<std::streamsize>(hl));
    const auto begin = nlohmann::json::parse(h)["model.layers.1.self_attn.o_proj.g_idx"]["data_offsets"][0].get<std::size_t>();
    const std::int32_t bad = 999;
    f.seekp(static_cast<std::streamoff>(8 + hl + begin + 5 * 4));
    f.write(reinterpret_cast<const char*>(&bad), 4);
  }
  e = load_error(root / "q");
  EXPECT_NE(e.find("o_proj.g_idx"), std::string::npos) << e;
  EXPECT_NE(e.find("999"), std::string::npos) << e;
  // A quantized input cannot be quantized again.
  EXPECT_THROW(quantize_checkpoint(root / "q", root / "qq", o), std::runtime_error);
  o.method = "int3";
  EXPECT_THROW(quantize_checkpoint(root / "f", root / "q3", o), std::runtime_error);
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace quarry::engine
