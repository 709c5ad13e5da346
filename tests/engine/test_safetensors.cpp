// Safetensors loading: sharded index, dtype handling, and errors that name the file (missing tensor,
// shape mismatch, truncated file, bad header, unsupported dtype, unsupported architecture).
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "engine/models/model.hpp"
#include "engine/models/safetensors.hpp"
#include "fixtures.hpp"

namespace quarry::engine {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}
void spit(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

/// Copies a fixture model into a scratch folder so a test can damage it.
fs::path copy_fixture(const std::string& model, const std::string& scratch) {
  auto dir = testing::scratch_dir(scratch);
  for (const auto& e : fs::directory_iterator(testing::fixture_dir(model)))
    fs::copy_file(e.path(), dir / e.path().filename());
  return dir;
}

/// Rewrites the JSON header of a single-file checkpoint (data block unchanged).
void edit_header(const fs::path& file, const std::function<void(nlohmann::json&)>& edit) {
  std::string s = slurp(file);
  std::uint64_t n = 0;
  std::memcpy(&n, s.data(), 8);
  auto h = nlohmann::json::parse(s.substr(8, n));
  edit(h);
  std::string nh = h.dump();
  std::uint64_t nn = nh.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &nn, 8);
  spit(file, out + nh + s.substr(8 + n));
}

void expect_load_error(const fs::path& dir, const std::string& file_fragment, const std::string& reason) {
  try {
    load_model(dir);
    ADD_FAILURE() << "loaded without error";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(file_fragment), std::string::npos) << what;
    EXPECT_NE(what.find(reason), std::string::npos) << what;
  }
}

TEST(Safetensors, UnpaddedHeaderLoadsTheSameWeights) {
  // edit_header writes the header unpadded: with this length the data block starts misaligned.
  auto dir = copy_fixture("tiny_gqa_tied_f32", "unpadded");
  edit_header(dir / "model.safetensors", [](nlohmann::json& h) { h["__metadata__"]["x"] = "y"; });
  std::string s = slurp(dir / "model.safetensors");
  std::uint64_t n = 0;
  std::memcpy(&n, s.data(), 8);
  ASSERT_NE((8 + n) % 4, 0u) << "pick another metadata string so the data block is misaligned";
  auto moved = TensorStore::open(dir);
  auto orig = TensorStore::open(testing::fixture_dir("tiny_gqa_tied_f32"));
  const auto& a = moved->get("model.layers.0.self_attn.q_proj.weight", {64, 64});
  const auto& b = orig->get("model.layers.0.self_attn.q_proj.weight", {64, 64});
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.data) % 4, 0u);
  EXPECT_EQ(std::memcmp(a.data, b.data, a.n_bytes), 0);
}

TEST(Safetensors, ShardedIndexMapsEveryTensor) {
  auto store = TensorStore::open(testing::fixture_dir("tiny_mha_untied_sharded_f32"));
  EXPECT_NE(store->origin().string().find("model.safetensors.index.json"), std::string::npos);
  const auto& t = store->get("model.layers.2.mlp.down_proj.weight", {64, 96});
  EXPECT_EQ(t.dtype, DType::f32);
  EXPECT_NE(t.file->filename().string().find("-of-00005"), std::string::npos);
  EXPECT_TRUE(store->has("lm_head.weight"));
  EXPECT_EQ(store->total_bytes(), 682112u);  // metadata.total_size of the index
}

TEST(Safetensors, Bf16TensorsStayBf16) {
  auto store = TensorStore::open(testing::fixture_dir("tiny_gqa_untied_bf16"));
  const auto& t = store->get("model.embed_tokens.weight", {512, 128});
  EXPECT_EQ(t.dtype, DType::bf16);
  EXPECT_EQ(t.n_bytes, 512u * 128u * 2u);
}

TEST(Safetensors, MissingTensorNamesFileAndTensor) {
  auto dir = copy_fixture("tiny_gqa_tied_f32", "missing_tensor");
  edit_header(dir / "model.safetensors", [](nlohmann::json& h) { h.erase("model.layers.1.self_attn.k_norm.weight"); });
  expect_load_error(dir, "model.safetensors", "missing tensor 'model.layers.1.self_attn.k_norm.weight'");
}

TEST(Safetensors, ShapeMismatchNamesFile) {
  auto dir = copy_fixture("tiny_gqa_tied_f32", "shape_mismatch");
  edit_header(dir / "model.safetensors",
              [](nlohmann::json& h) { h["model.norm.weight"]["shape"] = {32, 2}; });
  expect_load_error(dir, "model.safetensors", "shape mismatch for tensor 'model.norm.weight'");
}

TEST(Safetensors, TruncatedFileNamesFile) {
  auto dir = copy_fixture("tiny_gqa_tied_f32", "truncated");
  std::string s = slurp(dir / "model.safetensors");
  spit(dir / "model.safetensors", s.substr(0, s.size() - 1000));
  expect_load_error(dir, "model.safetensors", "truncated");
  spit(dir / "model.safetensors", s.substr(0, 5));
  expect_load_error(dir, "model.safetensors", "truncated");
}

TEST(Safetensors, BadHeaderNamesFile) {
  auto dir = copy_fixture("tiny_gqa_tied_f32", "bad_header");
  std::string s = slurp(dir / "model.safetensors");
  s[8] = '[';
  s[9] = ';';
  spit(dir / "model.safetensors", s);
  expect_load_error(dir, "model.safetensors", "bad safetensors header");
}

TEST(Safetensors, UnsupportedDtypeNamesFile) {
  auto dir = copy_fixture("tiny_gqa_tied_f32", "bad_dtype");
  // U32 has the same width as F32, so offsets stay consistent: only the dtype is wrong.
  edit_header(dir / "model.safetensors", [](nlohmann::json& h) { h["model.norm.weight"]["dtype"] = "U32"; });
  expect_load_error(dir, "model.safetensors", "unsupported dtype U32");
}

TEST(Safetensors, IntegerTensorWhereAFloatIsExpectedNamesFileAndTensor) {
  auto dir = copy_fixture("tiny_gqa_tied_f32", "int_dtype");
  // I32 is read (GPTQ's qweight), but not where the model wants a float tensor.
  edit_header(dir / "model.safetensors", [](nlohmann::json& h) { h["model.norm.weight"]["dtype"] = "I32"; });
  expect_load_error(dir, "model.safetensors", "tensor 'model.norm.weight' is I32 where F32, F16 or BF16 is expected");
}

TEST(Safetensors, ShardListedButMissingNamesShard) {
  auto dir = copy_fixture("tiny_mha_untied_sharded_f32", "missing_shard");
  fs::remove(dir / "model-00003-of-00005.safetensors");
  expect_load_error(dir, "model-00003-of-00005.safetensors", "cannot open");
}

TEST(Safetensors, UnsupportedArchitectureNamesConfig) {
  auto dir = copy_fixture("tiny_gqa_tied_f32", "bad_arch");
  auto cfg = nlohmann::json::parse(slurp(dir / "config.json"));
  cfg["architectures"] = {"MambaForCausalLM"};
  spit(dir / "config.json", cfg.dump());
  expect_load_error(dir, "config.json", "unsupported architecture \"MambaForCausalLM\"");
}

TEST(Safetensors, NoCheckpointNamesFolder) {
  auto dir = testing::scratch_dir("no_checkpoint");
  fs::copy_file(testing::fixture_dir("tiny_gqa_tied_f32") / "config.json", dir / "config.json");
  expect_load_error(dir, "no_checkpoint", "no model.safetensors");
}

TEST(Safetensors, TiedCheckpointWithExplicitLmHeadIsUsed) {
  // Transformers 4.x style config (top-level rope_theta) over the same weights loads the same model.
  auto dir = copy_fixture("tiny_gqa_tied_f32", "config_v4");
  auto cfg = nlohmann::json::parse(slurp(dir / "config.json"));
  cfg["rope_theta"] = cfg["rope_parameters"]["rope_theta"];
  cfg.erase("rope_parameters");
  cfg["torch_dtype"] = cfg["dtype"];
  cfg.erase("dtype");
  spit(dir / "config.json", cfg.dump());
  auto model = load_model(dir);
  EXPECT_DOUBLE_EQ(model->config().rope_theta, 10000.0);
  EXPECT_TRUE(model->config().tie_word_embeddings);
}

}  // namespace
}  // namespace quarry::engine
