// `quarry generate` / `quarry tokenize` end to end on a random-weight Qwen3 checkpoint with the real
// Qwen3 vocabulary (written at test time), against the engine library and Hugging Face token ids.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/common/run_command.hpp"
#include "engine/models/random_checkpoint.hpp"
#include "engine/runtime/engine.hpp"
#include "fixtures.hpp"

namespace quarry::engine {
namespace {

namespace fs = std::filesystem;

using Run = quarry::test_support::CommandResult;

Run run(const std::string& args, bool with_stderr = false) {
  return quarry::test_support::run_quarry(args, with_stderr);
}

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> v;
  std::size_t a = 0;
  while (a < s.size()) {
    auto b = s.find('\n', a);
    if (b == std::string::npos) b = s.size();
    v.push_back(s.substr(a, b - a));
    a = b + 1;
  }
  return v;
}

class CliGenerate : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const fs::path tok = fs::path(QUARRY_SHARED_DIR) / "tokenizers/qwen3";
    if (!fs::exists(tok / "tokenizer.json")) return;
    dir_ = new fs::path(testing::scratch_dir("cli_tiny_qwen3"));
    write_random_checkpoint(preset_config_json("tiny"), *dir_, DType::bf16, 7);
    fs::copy_file(tok / "tokenizer.json", *dir_ / "tokenizer.json");
    fs::copy_file(tok / "tokenizer_config.json", *dir_ / "tokenizer_config.json");
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (!dir_) GTEST_SKIP() << "Qwen3 tokenizer not found under QUARRY_SHARED_DIR";
  }
  static std::string model() { return "--model " + dir_->string(); }
  static fs::path* dir_;
};
fs::path* CliGenerate::dir_ = nullptr;

TEST_F(CliGenerate, TokenizeMatchesHuggingFaceIds) {
  // Hugging Face tokenizers, Qwen3 tokenizer.json: encode("Hello, world!", add_special_tokens=False).
  auto r = run("tokenize " + model() + " 'Hello, world!'");
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(nlohmann::json::parse(r.out), nlohmann::json({9707, 11, 1879, 0}));
}

TEST_F(CliGenerate, GreedyIdsEqualTheLibrary) {
  auto r = run("generate " + model() + " --prompt 'The invoice total is' --max-tokens 12 --print-token-ids --threads 2");
  ASSERT_EQ(r.code, 0);
  auto ls = lines(r.out);
  ASSERT_GE(ls.size(), 2u);
  auto cli_ids = nlohmann::json::parse(ls.back()).get<std::vector<TokenId>>();

  auto tok = Tokenizer::from_dir(*dir_);
  auto engine = Engine::open(*dir_, tok, {});
  GenerationRequest req;
  req.prompt = tok->encode("The invoice total is");
  req.max_tokens = 12;
  auto lib = engine->generate(req);
  EXPECT_EQ(cli_ids, lib.tokens);
  EXPECT_NE(r.out.find(lib.text), std::string::npos);
}

TEST_F(CliGenerate, TensorParallelGivesTheSameGreedyIds) {
  // --tensor-parallel 2 on the CPU: two simulated ranks (the split a GPU pair runs), the same tokens.
  const std::string args = "generate " + model() + " --prompt 'The invoice total is' --max-tokens 12 --print-token-ids "
                           "--threads 2 --device cpu --compute exact";
  auto one = run(args), two = run(args + " --tensor-parallel 2");
  ASSERT_EQ(one.code, 0);
  ASSERT_EQ(two.code, 0) << two.out;
  EXPECT_EQ(lines(one.out).back(), lines(two.out).back());
  auto bad = run(args + " --tensor-parallel 3", true);  // the tiny preset's heads do not split in 3
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.out.find("num_attention_heads"), std::string::npos) << bad.out;
}

TEST_F(CliGenerate, SeedMakesSamplingReproducible) {
  const std::string args = "generate " + model() + " --prompt Hi --temperature 1.0 --top-k 50 --max-tokens 10 --print-token-ids";
  auto a = run(args + " --seed 11"), b = run(args + " --seed 11"), c = run(args + " --seed 12");
  ASSERT_EQ(a.code, 0);
  EXPECT_EQ(lines(a.out).back(), lines(b.out).back());
  EXPECT_NE(lines(a.out).back(), lines(c.out).back());
}

TEST_F(CliGenerate, MessagesApplyTheChatTemplate) {
  const auto file = testing::scratch_dir("cli_messages") / "m.json";
  std::ofstream(file) << R"([{"role": "user", "content": "Hello"}])";
  auto r = run("generate " + model() + " --messages " + file.string() + " --max-tokens 3 --print-token-ids --stats",
               true);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("decode:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("GB/s"), std::string::npos) << r.out;
  std::ofstream(file) << "[{\"role\": 1}]";
  r = run("generate " + model() + " --messages " + file.string(), true);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("m.json"), std::string::npos) << r.out;
}

TEST_F(CliGenerate, StopStringCutsOutput) {
  auto full = run("generate " + model() + " --prompt 'Dear customer,' --max-tokens 16 --print-token-ids");
  ASSERT_EQ(full.code, 0);
  auto ls = lines(full.out);
  const std::string text = ls[0];
  ASSERT_GE(text.size(), 6u);
  const std::string stop = text.substr(text.size() / 2, 2);
  auto cut = run("generate " + model() + " --prompt 'Dear customer,' --max-tokens 16 --stop '" + stop + "'");
  ASSERT_EQ(cut.code, 0);
  EXPECT_EQ(lines(cut.out)[0], text.substr(0, text.find(stop)));
}

TEST_F(CliGenerate, UsageAndModelErrors) {
  EXPECT_EQ(run("generate " + model()).code, 1);  // neither --prompt nor --messages
  EXPECT_NE(run("generate --model /nonexistent --prompt x").code, 0);
  auto empty = testing::scratch_dir("cli_empty_model");
  auto r = run("generate --model " + empty.string() + " --prompt x", true);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("cli_empty_model"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace quarry::engine
