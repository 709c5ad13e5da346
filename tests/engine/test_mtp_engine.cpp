// MTP speculative decoding in the engine is lossless:
//  * greedy outputs with mtp_depth 1..4 are token-identical to mtp_depth 0, on random-weight checkpoints
//    of both MTP layouts (several sequences batched per forward call) and on the default model over the
//    sample invoices constrained by the invoice schema (drafts, grammar-forced drafts, rollback);
//  * the same with a hybrid model (Qwen3-Next layout), whose recurrent state verification restores;
//  * with temperature > 0, the joint distribution of the first three generated tokens of a tiny-vocabulary
//    random model matches the exact distribution computed from the model's own logits (chi-square at
//    the 0.999 level), with drafts accepted and rejected along the way.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/common/device.hpp"
#include "engine/models/random_checkpoint.hpp"
#include "engine/runtime/engine.hpp"
#include "fixtures.hpp"
#include "mtp_lossless.hpp"

namespace quarry::engine {
namespace {

std::filesystem::path random_mtp_checkpoint(const std::string& layout, std::size_t vocab, double init,
                                            std::uint64_t seed) {
  // "hybrid": Qwen3-Next's layout (Gated DeltaNet layers: verification restores their state).
  auto j = nlohmann::json::parse(preset_config_json(layout == "hybrid" ? "tiny-next" : "tiny"));
  j["vocab_size"] = vocab;
  j["eos_token_id"] = nullptr;
  j["bos_token_id"] = nullptr;
  j["initializer_range"] = init;
  if (layout == "next" || layout == "hybrid") j["mtp_num_hidden_layers"] = 1;
  else j["num_nextn_predict_layers"] = 2;
  const auto dir = testing::scratch_dir("mtp_engine_" + layout + "_" + std::to_string(vocab));
  write_random_checkpoint(j.dump(), dir, DType::f32, seed);
  return dir;
}

std::vector<GenerationRequest> random_prompts(std::size_t vocab, std::size_t n, std::size_t max_tokens) {
  std::vector<GenerationRequest> reqs;
  for (std::size_t i = 0; i < n; ++i) {
    GenerationRequest r;
    for (std::size_t k = 0; k < 5 + 7 * i; ++k) r.prompt.push_back(static_cast<TokenId>((k * 31 + i * 17 + 3) % vocab));
    r.max_tokens = max_tokens;
    reqs.push_back(std::move(r));
  }
  return reqs;
}

TEST(MtpEngine, GreedyIsLosslessOnRandomCheckpoints) {
  for (const std::string layout : {"next", "deepseek", "hybrid"}) {
    const auto dir = random_mtp_checkpoint(layout, 512, 0.1, 11);
    const auto reqs = random_prompts(512, 4, 40);
    std::vector<std::vector<TokenId>> want;
    {
      auto engine = Engine::open(dir, nullptr, {.device = testing::test_device(), .n_threads = 2});
      for (auto& r : engine->generate(reqs)) want.push_back(r.tokens);
    }
    for (std::size_t depth = 1; depth <= 4; ++depth) {
      EngineOptions o;
      o.device = testing::test_device();
      o.n_threads = 2;
      o.mtp_depth = depth;
      auto engine = Engine::open(dir, nullptr, o);
      const auto got = engine->generate(reqs);
      for (std::size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(got[i].tokens, want[i]) << layout << " depth " << depth;
      EXPECT_GT(engine->stats().verify_steps, 0u);
      EXPECT_GT(engine->stats().draft_tokens, 0u);
      // Random MTP weights: most drafts are rejected, which exercises the KV truncation.
      EXPECT_LT(engine->stats().accepted_tokens, engine->stats().draft_tokens);
    }
  }
}

TEST(MtpEngine, GreedyIsLosslessOnSampleInvoices) {
  check_default_model_lossless({"hu-txt-1.txt"}, {3});
}

// Grounded decoding through the request (json_schema + document_pages): drafts are verified and rolled
// back with the grounding state, so greedy output is the same with and without drafting, and the IBAN
// the model writes is the document's.
TEST(MtpEngine, GroundedGreedyIsLosslessAndTheIbanIsTheDocuments) {
  auto tok = Tokenizer::from_dir(default_model());
  const auto prompts = nlohmann::json::parse(read_file(default_model() / "prompts.json"));
  const std::string schema = read_file(std::filesystem::path(QUARRY_SOURCE_DIR) / "schemas/invoice.schema.json");
  const std::string text = read_file(std::filesystem::path(QUARRY_SOURCE_DIR) / "samples/invoices/en-txt-1.txt");
  GenerationRequest r;
  r.prompt = tok->encode(tok->apply_chat_template(
      {{"system", prompts["kie"]["system"].get<std::string>()}, {"user", text}}, true, false));
  r.max_tokens = 1200;
  r.json_schema = schema;
  r.document_pages = {text};
  std::vector<TokenId> want;
  std::string want_text;
  for (std::size_t depth : {0, 3}) {
    EngineOptions o;
    o.device = testing::test_device();
    o.n_threads = 2;
    o.mtp_depth = depth;
    auto engine = Engine::open(default_model(), tok, o);
    const auto got = engine->generate(r);
    ASSERT_EQ(got.finish, FinishReason::constraint) << got.text;
    if (depth == 0) {
      want = got.tokens;
      want_text = got.text;
    } else {
      EXPECT_EQ(got.tokens, want);
      EXPECT_GT(engine->stats().draft_tokens, engine->stats().accepted_tokens);  // some drafts rolled back
    }
  }
  const auto data = nlohmann::json::parse(want_text);
  ASSERT_TRUE(data["payment"]["iban"].is_string()) << want_text;
  std::string squeezed;
  for (char c : text)
    if (c != ' ' && c != '\n') squeezed += c;
  EXPECT_NE(squeezed.find(data["payment"]["iban"].get<std::string>()), std::string::npos) << want_text;
}

// A request served from the prefix cache drafts as well as one computed from scratch: blocks are shared
// only once their MTP rows are final (a request that ends before any draft round leaves none behind).
TEST(MtpEngine, PrefixCacheHitsKeepTheDrafts) {
  // The default model (its trained MTP module accepts most drafts, so stale MTP rows would show).
  auto tok = Tokenizer::from_dir(default_model());
  GenerationRequest req;
  req.prompt = tok->encode(tok->apply_chat_template(
      {{"system", "You extract data from invoices. Write one JSON object following the invoice schema."},
       {"user", "INVOICE INV-2024-0117, 14 March 2024. Seller: Kovacs Trading Kft. Total: 177.67 EUR"}},
      true, false));
  req.max_tokens = 48;
  EngineOptions o;
  o.device = testing::test_device();
  o.n_threads = 2;
  o.mtp_depth = 3;
  auto fresh = Engine::open(default_model(), tok, o);
  const auto want = fresh->generate(req);
  ASSERT_GT(want.stats.accepted_tokens, want.stats.draft_tokens / 2);
  auto cached = Engine::open(default_model(), tok, o);
  GenerationRequest first = req;
  first.max_tokens = 1;  // prefill only: no draft round, so its blocks must not be shared
  cached->generate(first);
  cached->generate(req);
  const auto got = cached->generate(req);  // served from the blocks of the previous full request
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_GT(got.stats.cached_tokens, 0u);
  EXPECT_EQ(got.stats.draft_tokens, want.stats.draft_tokens);
  EXPECT_EQ(got.stats.accepted_tokens, want.stats.accepted_tokens);
}

// --------------------------------------------------------------- sampling keeps the distribution

/// Softmax at temperature 1 of the last-position logits after `prefix`.
std::vector<double> next_probs(Model& m, const std::vector<TokenId>& prefix) {
  const std::size_t V = m.config().vocab_size;
  auto kv_owner = m.make_kv_cache(256);
  KvCache& kv = *kv_owner;
  const SeqId s = kv.create_sequence();
  kv.reserve(s, prefix.size());
  Batch b;
  for (std::size_t i = 0; i < prefix.size(); ++i) b.add(prefix[i], static_cast<std::int32_t>(i), s, i + 1 == prefix.size());
  std::vector<float> lg(V);
  m.forward(b, kv, lg.data());
  std::vector<double> p(V);
  double mx = *std::max_element(lg.begin(), lg.end()), sum = 0;
  for (std::size_t i = 0; i < V; ++i) sum += p[i] = std::exp(lg[i] - mx);
  for (auto& x : p) x /= sum;
  return p;
}

double chi2_quantile_999(double dof) {  // Wilson-Hilferty
  const double z = 3.090232, a = 2.0 / (9.0 * dof);
  return dof * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

class MtpSampling : public ::testing::TestWithParam<std::string> {};

TEST_P(MtpSampling, KeepsTheJointDistributionOfThreeTokens) {
  const std::size_t V = 4;
  const auto dir = random_mtp_checkpoint(GetParam(), V, 0.5, 5);
  const std::vector<TokenId> prompt = {1, 3, 0, 2, 2};
  // Exact joint distribution of (t1, t2, t3) from the main model.
  std::vector<double> exact(V * V * V);
  {
    auto model = load_model(dir, testing::test_backend());
    const auto p1 = next_probs(*model, prompt);
    for (std::size_t a = 0; a < V; ++a) {
      auto pa = prompt;
      pa.push_back(static_cast<TokenId>(a));
      const auto p2 = next_probs(*model, pa);
      for (std::size_t b = 0; b < V; ++b) {
        auto pb = pa;
        pb.push_back(static_cast<TokenId>(b));
        const auto p3 = next_probs(*model, pb);
        for (std::size_t c = 0; c < V; ++c) exact[(a * V + b) * V + c] = p1[a] * p2[b] * p3[c];
      }
    }
  }
  EngineOptions o;
  o.device = testing::test_device();
  o.n_threads = 2;
  o.mtp_depth = 2;
  auto engine = Engine::open(dir, nullptr, o);
  const std::size_t N = 6000, per_call = 500;
  std::vector<double> seen(V * V * V, 0.0);
  for (std::size_t done = 0; done < N; done += per_call) {
    std::vector<GenerationRequest> reqs(per_call);
    for (std::size_t i = 0; i < per_call; ++i) {
      reqs[i].prompt = prompt;
      reqs[i].max_tokens = 4;
      reqs[i].sampling.temperature = 1.0f;
      reqs[i].sampling.seed = 1000 + done + i;
    }
    for (const auto& r : engine->generate(reqs)) {
      ASSERT_GE(r.tokens.size(), 3u);
      seen[(static_cast<std::size_t>(r.tokens[0]) * V + static_cast<std::size_t>(r.tokens[1])) * V +
           static_cast<std::size_t>(r.tokens[2])] += 1;
    }
  }
  double chi2 = 0;
  std::size_t cells = 0;
  for (std::size_t i = 0; i < exact.size(); ++i) {
    const double e = exact[i] * N;
    if (e < 1e-9) continue;
    chi2 += (seen[i] - e) * (seen[i] - e) / e;
    ++cells;
  }
  const auto& st = engine->stats();
  std::cout << "chi2 " << chi2 << " over " << cells << " cells; drafts " << st.draft_tokens << ", accepted "
            << st.accepted_tokens << "\n";
  EXPECT_LT(chi2, chi2_quantile_999(static_cast<double>(cells - 1)));
  EXPECT_GT(st.accepted_tokens, st.draft_tokens / 10);  // drafts were accepted ...
  EXPECT_LT(st.accepted_tokens, st.draft_tokens);       // ... and rejected
}

INSTANTIATE_TEST_SUITE_P(MtpEngine, MtpSampling, ::testing::Values("next", "hybrid"));

}  // namespace
}  // namespace quarry::engine
