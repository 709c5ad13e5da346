// Prefix caching and continuous batching through the Engine: greedy outputs with the prefix cache
// equal the transformers references and the outputs without it (fixture models, the default model,
// random-weight checkpoints); eviction under a tiny budget; no block leaks after 1,000 requests;
// submit / step / cancel; requests submitted while others run; the scheduler's limits and order.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "tests/common/device.hpp"
#include "engine/models/random_checkpoint.hpp"
#include "engine/runtime/engine.hpp"
#include "tests/engine/fixtures.hpp"

namespace quarry::engine {
namespace {

namespace fs = std::filesystem;
using testing::fixture_dir;
using testing::load_reference;

GenerationRequest greedy(std::vector<TokenId> prompt, std::size_t max_tokens) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  return r;
}

/// Runs every request to completion through submit/step; results by submission index.
std::vector<FinishedRequest> run_all(Engine& e, const std::vector<GenerationRequest>& reqs) {
  std::map<RequestId, std::size_t> index;
  for (std::size_t i = 0; i < reqs.size(); ++i) index[e.submit(reqs[i])] = i;
  std::vector<FinishedRequest> out(reqs.size());
  while (e.has_unfinished())
    for (auto& f : e.step()) out.at(index.at(f.id)) = std::move(f);
  return out;
}

/// The allocator holds no referenced block, and every cached block can be evicted.
void expect_no_leak(const Engine& e) {
  const auto& a = e.kv_cache().allocator();
  EXPECT_EQ(a.n_used(), 0u);
  EXPECT_EQ(a.n_free(), a.max_blocks());
  EXPECT_EQ(a.n_cached(), a.n_evictable());
}

/// A random-weight Qwen3 checkpoint (small vocabulary, long context) in a per-process scratch folder.
fs::path random_checkpoint(const std::string& name, std::size_t layers, std::uint64_t seed) {
  static std::map<std::string, fs::path> made;
  if (auto it = made.find(name); it != made.end()) return it->second;
  auto cfg = nlohmann::json::parse(preset_config_json("tiny"));
  cfg["vocab_size"] = 2048;
  cfg["num_hidden_layers"] = layers;
  cfg["max_window_layers"] = layers;
  cfg["max_position_embeddings"] = 8192;
  cfg["initializer_range"] = 0.2;  // peaked logits: greedy choices are far from ties
  const auto dir = testing::scratch_dir("prefix_" + name);
  write_random_checkpoint(cfg.dump(), dir, DType::f32, seed);
  made[name] = dir;
  return dir;
}

std::vector<TokenId> random_tokens(std::mt19937& rng, std::size_t n, std::size_t vocab) {
  std::uniform_int_distribution<TokenId> d(0, static_cast<TokenId>(vocab - 1));
  std::vector<TokenId> v(n);
  for (auto& t : v) t = d(rng);
  return v;
}

/// Prompts that share prefixes: `docs` documents of doc_len tokens, each followed by `q` questions.
std::vector<GenerationRequest> shared_prefix_requests(std::mt19937& rng, std::size_t vocab, std::size_t docs,
                                                      std::size_t doc_len, std::size_t q, std::size_t max_tokens) {
  std::vector<GenerationRequest> reqs;
  std::uniform_int_distribution<std::size_t> qlen(1, 40);
  for (std::size_t d = 0; d < docs; ++d) {
    const auto doc = random_tokens(rng, doc_len, vocab);
    for (std::size_t i = 0; i < q; ++i) {
      auto p = doc;
      const auto tail = random_tokens(rng, qlen(rng), vocab);
      p.insert(p.end(), tail.begin(), tail.end());
      reqs.push_back(greedy(std::move(p), max_tokens));
    }
  }
  return reqs;
}

TEST(PrefixEngine, CachedPromptsMatchTransformers) {
  for (const auto& name : testing::fixture_models()) {
    const auto ref = load_reference(name);
    auto engine = Engine::open(fixture_dir(name), nullptr, {.device = testing::test_device(), .n_threads = 2, .max_batch_tokens = 7, .compute = Compute::exact});
    const auto cfg = load_model_config(fixture_dir(name) / "config.json");
    const bool stateful = cfg.attention_layers() < cfg.num_hidden_layers;
    for (int round = 0; round < 2; ++round)
      for (const auto& p : ref["prompts"]) {
        const auto prompt = p["ids"].get<std::vector<TokenId>>();
        auto r = engine->generate(greedy(prompt, 32));
        EXPECT_EQ(r.tokens, p["greedy"].get<std::vector<TokenId>>()) << name << " round " << round;
        EXPECT_EQ(r.stats.cached_tokens + r.stats.prefill_tokens, prompt.size());
        // Round 2: every whole block before the last prompt token comes from the cache (hybrid models
        // keep recurrent state that cached K/V blocks cannot restore: the engine reuses nothing there).
        if (round == 1) {
          EXPECT_EQ(r.stats.cached_tokens, stateful ? 0 : (prompt.size() - 1) / 16 * 16) << name;
        }
      }
    if (stateful) EXPECT_EQ(engine->stats().prefix_hit_tokens, 0u) << name;
    else EXPECT_GT(engine->stats().prefix_hit_tokens, 0u) << name;
    expect_no_leak(*engine);
  }
}

TEST(PrefixEngine, GreedyWithCacheEqualsWithoutRandomCheckpoints) {
  for (std::size_t layers : {2, 3}) {
    const auto dir = random_checkpoint("l" + std::to_string(layers), layers, 11 + layers);
    EngineOptions on{.device = testing::test_device(), .n_threads = 2, .max_batch_tokens = 64};
    EngineOptions off = on;
    off.enable_prefix_caching = false;
    auto cached = Engine::open(dir, nullptr, on);
    auto plain = Engine::open(dir, nullptr, off);
    std::mt19937 rng(5 + layers);
    const auto reqs = shared_prefix_requests(rng, 2048, 3, 150, 4, 12);
    // Without the cache, one at a time; with it, all at once (in-flight sharing) and again one at a time.
    std::vector<std::vector<TokenId>> want;
    for (const auto& r : reqs) want.push_back(plain->generate(r).tokens);
    EXPECT_EQ(plain->stats().prefix_hit_tokens, 0u);
    const auto together = run_all(*cached, reqs);
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      EXPECT_TRUE(together[i].error.empty());
      EXPECT_EQ(together[i].result.tokens, want[i]) << "layers " << layers << " request " << i;
    }
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      const auto r = cached->generate(reqs[i]);
      EXPECT_EQ(r.tokens, want[i]) << "layers " << layers << " request " << i << " (sequential)";
      EXPECT_GE(r.stats.cached_tokens, 144u);  // the document's 9 whole blocks at least
    }
    expect_no_leak(*cached);
  }
}

TEST(PrefixEngine, HybridModelsResumeFromStateSnapshots) {
  // Qwen3-Next and Qwen3.5 fixtures (Gated DeltaNet layers keep a recurrent state): prompts sharing a
  // 150-token document resume from the state kept every 32 prompt positions, with the outputs of a cold
  // run; chunks of 64 tokens end on those points.
  for (const std::string name : {"tiny_next_f32", "tiny_qwen35_f32"}) {
    EngineOptions on{.device = testing::test_device(), .n_threads = 2, .max_batch_tokens = 64,
                     .compute = Compute::exact};
    on.state_snapshot_tokens = 32;
    EngineOptions off = on;
    off.enable_prefix_caching = false;
    auto cached = Engine::open(fixture_dir(name), nullptr, on);
    auto plain = Engine::open(fixture_dir(name), nullptr, off);
    std::mt19937 rng(17);
    const std::size_t vocab = cached->model().config().vocab_size;
    const auto reqs = shared_prefix_requests(rng, vocab, 2, 150, 3, 10);
    std::vector<std::vector<TokenId>> want;
    for (const auto& r : reqs) want.push_back(plain->generate(r).tokens);
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      const auto r = cached->generate(reqs[i]);
      EXPECT_EQ(r.tokens, want[i]) << name << " request " << i;
      // The first question of each document computes it; the next ones resume after 128 of its tokens
      // (the last snapshot point inside the 150 shared ones).
      EXPECT_EQ(r.stats.cached_tokens, i % 3 == 0 ? 0u : 128u) << name << " request " << i;
    }
    EXPECT_GT(cached->stats().state_snapshots, 0u);
    // The default cap: as many snapshots as 2 GiB hold, at most 32 (these states are a few KB).
    EXPECT_EQ(cached->kv_cache().prefix_options().max_state_snapshots, 32u);
    // All at once: in-flight sharing waits for the first of each document, then resumes the same way.
    const auto together = run_all(*cached, reqs);
    for (std::size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(together[i].result.tokens, want[i]) << name << " request " << i;
    expect_no_leak(*cached);
  }
}

TEST(PrefixEngine, DefaultModelWithCacheEqualsWithout) {
  const fs::path model = fs::path(QUARRY_SOURCE_DIR) / "models/quarry-extract-11m";
  ASSERT_TRUE(fs::is_directory(model)) << model;
  auto tok = Tokenizer::from_dir(model);
  EngineOptions on{.device = testing::test_device(), .n_threads = 2, .max_batch_tokens = 256};
  EngineOptions off = on;
  off.enable_prefix_caching = false;
  auto cached = Engine::open(model, tok, on);
  auto plain = Engine::open(model, tok, off);
  // Invoice extraction prompts: one system prompt, four documents; then a second question per document.
  std::ifstream pin(model / "prompts.json");
  const auto prompts = nlohmann::json::parse(pin);
  const std::string system = prompts["kie"]["system"].get<std::string>();
  std::vector<GenerationRequest> reqs;
  for (const char* name : {"en-txt-1.txt", "en-txt-2.txt", "de-txt-1.txt", "hu-txt-1.txt"}) {
    std::ifstream in(fs::path(QUARRY_SOURCE_DIR) / "samples/invoices" / name);
    if (!in) continue;
    std::stringstream doc;
    doc << in.rdbuf();
    for (const char* tail : {"", "\nTotal?"}) {
      const auto text = tok->apply_chat_template({{"system", system}, {"user", doc.str() + tail}}, true, false);
      reqs.push_back(greedy(tok->encode(text), 16));
      reqs.back().ignore_eos = false;
    }
  }
  ASSERT_EQ(reqs.size(), 8u);
  std::vector<GenerationResult> want;
  for (const auto& r : reqs) want.push_back(plain->generate(r));
  const auto together = run_all(*cached, reqs);
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(together[i].result.tokens, want[i].tokens) << "request " << i;
    EXPECT_EQ(together[i].result.text, want[i].text) << "request " << i;
  }
  for (std::size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(cached->generate(reqs[i]).tokens, want[i].tokens);
  EXPECT_GT(cached->stats().prefix_hit_tokens, 0u);
  EXPECT_LT(cached->stats().prefill_tokens, plain->stats().prefill_tokens);
  expect_no_leak(*cached);
}

TEST(PrefixEngine, TinyBudgetEvictsAndStaysCorrect) {
  const auto dir = random_checkpoint("l2", 2, 13);
  // 12 blocks of 16 tokens: two requests of ~170 tokens each need them all; the cache keeps evicting.
  auto cached = Engine::open(dir, nullptr, {.device = testing::test_device(), .n_threads = 2, .max_kv_tokens = 192, .max_batch_tokens = 32});
  auto plain = Engine::open(dir, nullptr, {.device = testing::test_device(), .n_threads = 2, .max_batch_tokens = 32, .enable_prefix_caching = false});
  std::mt19937 rng(17);
  auto reqs = shared_prefix_requests(rng, 2048, 4, 120, 3, 8);
  std::shuffle(reqs.begin(), reqs.end(), rng);
  const auto got = run_all(*cached, reqs);
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_TRUE(got[i].error.empty()) << got[i].error;
    EXPECT_EQ(got[i].result.tokens, plain->generate(reqs[i]).tokens) << "request " << i;
  }
  EXPECT_GT(cached->stats().kv_evictions, 0u);
  EXPECT_GT(cached->stats().prefix_hit_tokens, 0u);
  EXPECT_LE(cached->kv_cache().allocator().high_water(), 12u);
  expect_no_leak(*cached);
  // kv_cache_mb bounds the cache the same way: 2 layers x 2 kv heads x 16 dims x K,V x 4 B = 512 B a token.
  auto mb = Engine::open(dir, nullptr, {.device = testing::test_device(), .n_threads = 1, .kv_cache_mb = 1});
  EXPECT_EQ(mb->kv_cache().allocator().max_blocks(), (1u << 20) / (512u * 16u));
}

TEST(PrefixEngine, NoLeakAfterThousandRequests) {
  const auto dir = fixture_dir("tiny_gqa_tied_f32");
  auto engine = Engine::open(dir, nullptr, {.device = testing::test_device(), .n_threads = 2, .max_kv_tokens = 1024, .max_batch_tokens = 128,
                                            .max_num_seqs = 16});
  std::mt19937 rng(3);
  std::vector<std::vector<TokenId>> prefixes;
  for (int i = 0; i < 6; ++i) prefixes.push_back(random_tokens(rng, 16 + 16 * i, 512));
  std::uniform_int_distribution<std::size_t> pick(0, prefixes.size() - 1), len(1, 30), out(1, 6), coin(0, 9);
  std::size_t submitted = 0, finished = 0, cancelled = 0;
  std::vector<RequestId> live;
  while (submitted < 1000 || engine->has_unfinished()) {
    for (int k = 0; k < 4 && submitted < 1000; ++k, ++submitted) {
      auto p = prefixes[pick(rng)];
      const auto tail = random_tokens(rng, len(rng), 512);
      p.insert(p.end(), tail.begin(), tail.end());
      live.push_back(engine->submit(greedy(std::move(p), out(rng))));
    }
    if (coin(rng) == 0 && !live.empty()) engine->cancel(live[live.size() / 2]);
    for (auto& f : engine->step()) {
      ++finished;
      if (f.result.finish == FinishReason::cancelled) {
        ++cancelled;
        EXPECT_EQ(f.error, "cancelled");
      } else {
        EXPECT_TRUE(f.error.empty()) << f.error;
      }
      std::erase(live, f.id);
    }
    EXPECT_LE(engine->n_running(), 16u);
  }
  EXPECT_EQ(finished, 1000u);
  EXPECT_GT(cancelled, 0u);
  EXPECT_EQ(engine->stats().requests_finished, 1000u);
  EXPECT_GT(engine->stats().prefix_hit_tokens, 0u);
  expect_no_leak(*engine);
}

TEST(PrefixEngine, CancelWaitingAndRunning) {
  const std::string name = "tiny_mha_untied_sharded_f32";
  const auto ref = load_reference(name);
  auto engine = Engine::open(fixture_dir(name), nullptr, {.device = testing::test_device(), .n_threads = 2, .max_batch_tokens = 8, .max_num_seqs = 2, .compute = Compute::exact});
  std::vector<RequestId> ids;
  for (const auto& p : ref["prompts"]) ids.push_back(engine->submit(greedy(p["ids"].get<std::vector<TokenId>>(), 32)));
  engine->step();
  engine->step();
  ASSERT_EQ(engine->n_running(), 2u);
  ASSERT_EQ(engine->n_waiting(), 2u);
  engine->cancel(ids[1]);  // running (prefilling its 11 tokens or decoding)
  engine->cancel(ids[3]);  // waiting
  engine->cancel(987654);  // unknown: ignored
  std::map<RequestId, FinishedRequest> done;
  while (engine->has_unfinished())
    for (auto& f : engine->step()) done[f.id] = std::move(f);
  ASSERT_EQ(done.size(), 4u);
  for (std::size_t i : {1u, 3u}) {
    EXPECT_EQ(done[ids[i]].result.finish, FinishReason::cancelled);
    EXPECT_EQ(done[ids[i]].error, "cancelled");
    EXPECT_LT(done[ids[i]].result.tokens.size(), 32u);
  }
  EXPECT_TRUE(done[ids[3]].result.tokens.empty());
  for (std::size_t i : {0u, 2u}) {
    EXPECT_TRUE(done[ids[i]].error.empty());
    EXPECT_EQ(done[ids[i]].result.tokens, ref["prompts"][i]["greedy"].get<std::vector<TokenId>>());
  }
  EXPECT_STREQ(finish_reason_name(FinishReason::cancelled), "cancelled");
  expect_no_leak(*engine);
}

TEST(PrefixEngine, RequestsSubmittedWhileOthersRun) {
  const std::string name = "tiny_gqa_untied_bf16";
  const auto ref = load_reference(name);
  auto engine = Engine::open(fixture_dir(name), nullptr, {.device = testing::test_device(), .n_threads = 2, .max_batch_tokens = 16, .compute = Compute::exact});
  std::map<RequestId, std::size_t> which;
  std::map<std::size_t, GenerationResult> got;
  const auto& prompts = ref["prompts"];
  std::size_t next = 0, steps = 0;
  while (next < prompts.size() || engine->has_unfinished()) {
    if (next < prompts.size() && steps % 5 == 0) {  // a new request every 5 steps
      which[engine->submit(greedy(prompts[next]["ids"].get<std::vector<TokenId>>(), 32))] = next;
      ++next;
    }
    for (auto& f : engine->step()) got[which.at(f.id)] = std::move(f.result);
    ++steps;
    EXPECT_LT(steps, 1000u);
  }
  ASSERT_EQ(got.size(), prompts.size());
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(got[i].tokens, prompts[i]["greedy"].get<std::vector<TokenId>>()) << i;
    EXPECT_GE(got[i].stats.ttft_s, got[i].stats.queue_s);
  }
  // Fewer steps than running them one after another: decode steps were shared.
  EXPECT_LT(steps, 4u * 32u);
  expect_no_leak(*engine);
}

TEST(PrefixEngine, GenerateBesideSubmittedRequestsKeepsTheirResults) {
  const std::string name = "tiny_gqa_tied_f32";
  const auto ref = load_reference(name);
  auto engine = Engine::open(fixture_dir(name), nullptr, {.device = testing::test_device(), .n_threads = 2, .compute = Compute::exact});
  const auto& prompts = ref["prompts"];
  // A short request submitted first finishes inside the generate() call of a longer one.
  const RequestId a = engine->submit(greedy(prompts[1]["ids"].get<std::vector<TokenId>>(), 4));
  const auto b = engine->generate(greedy(prompts[3]["ids"].get<std::vector<TokenId>>(), 32));
  EXPECT_EQ(b.tokens, prompts[3]["greedy"].get<std::vector<TokenId>>());
  ASSERT_TRUE(engine->has_unfinished());  // a's result waits for the caller of step()
  const auto done = engine->step();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].id, a);
  auto want = prompts[1]["greedy"].get<std::vector<TokenId>>();
  want.resize(4);
  EXPECT_EQ(done[0].result.tokens, want);
  EXPECT_FALSE(engine->has_unfinished());
  expect_no_leak(*engine);
}

TEST(PrefixEngine, InFlightSharingComputesTheDocumentOnce) {
  const auto dir = random_checkpoint("l2", 2, 13);
  auto engine = Engine::open(dir, nullptr, {.device = testing::test_device(), .n_threads = 2, .max_batch_tokens = 64});
  std::mt19937 rng(23);
  const std::size_t doc_len = 400, n_q = 6;
  const auto reqs = shared_prefix_requests(rng, 2048, 1, doc_len, n_q, 4);
  std::size_t question_tokens = 0;
  for (const auto& r : reqs) question_tokens += r.prompt.size() - doc_len;
  const auto got = run_all(*engine, reqs);
  // The document once, then each question plus at most one block of re-computed document tail.
  EXPECT_LE(engine->stats().prefill_tokens, doc_len + question_tokens + n_q * 16);
  std::size_t hits = 0;
  for (const auto& f : got) {
    hits += f.result.stats.cached_tokens;
    EXPECT_EQ(f.result.stats.cached_tokens + f.result.stats.prefill_tokens, f.result.stats.prompt_tokens);
  }
  EXPECT_EQ(hits, engine->stats().prefix_hit_tokens);
  EXPECT_GE(hits, (n_q - 1) * (doc_len / 16) * 16);
}

TEST(PrefixEngine, LongestCachedPrefixIsAdmittedFirstWithoutStarvation) {
  const auto dir = random_checkpoint("l2", 2, 13);
  auto engine = Engine::open(dir, nullptr, {.device = testing::test_device(), .n_threads = 2, .max_batch_tokens = 256, .max_num_seqs = 1});
  std::mt19937 rng(29);
  const auto doc = random_tokens(rng, 160, 2048);
  auto with_doc = [&](std::size_t n) {
    auto p = doc;
    const auto t = random_tokens(rng, n, 2048);
    p.insert(p.end(), t.begin(), t.end());
    return greedy(std::move(p), 2);
  };
  engine->generate(with_doc(3));  // the document is cached now
  // Submitted first: a cold prompt; then many sharing the document. LPM admits the sharers first,
  // but the cold one is passed over a bounded number of times only.
  const RequestId cold = engine->submit(greedy(random_tokens(rng, 100, 2048), 2));
  std::vector<RequestId> warm;
  for (int i = 0; i < 40; ++i) warm.push_back(engine->submit(with_doc(5)));
  std::vector<RequestId> order;
  while (engine->has_unfinished())
    for (auto& f : engine->step()) order.push_back(f.id);
  ASSERT_EQ(order.size(), 41u);
  const auto pos = std::find(order.begin(), order.end(), cold) - order.begin();
  EXPECT_GT(pos, 0);   // a warm request went first
  EXPECT_LE(pos, 17);  // ... but at most 16 of them
  expect_no_leak(*engine);
}

TEST(PrefixEngine, PromptLargerThanTheCacheFailsThatRequestOnly) {
  auto engine = Engine::open(fixture_dir("tiny_gqa_tied_f32"), nullptr, {.device = testing::test_device(), .n_threads = 1, .max_kv_tokens = 64, .compute = Compute::exact});
  const RequestId big = engine->submit(greedy(std::vector<TokenId>(100, 3), 4));
  const RequestId ok = engine->submit(greedy(std::vector<TokenId>(10, 3), 4));
  std::map<RequestId, FinishedRequest> done;
  while (engine->has_unfinished())
    for (auto& f : engine->step()) done[f.id] = std::move(f);
  EXPECT_NE(done[big].error.find("does not fit the KV cache"), std::string::npos) << done[big].error;
  EXPECT_TRUE(done[ok].error.empty());
  EXPECT_EQ(done[ok].result.tokens.size(), 4u);
  EXPECT_THROW(engine->generate(greedy(std::vector<TokenId>(100, 3), 4)), std::runtime_error);
  EXPECT_THROW(engine->submit(greedy({}, 4)), std::invalid_argument);
  expect_no_leak(*engine);
}

}  // namespace
}  // namespace quarry::engine
