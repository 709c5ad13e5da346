// Tensor parallelism (engine/models/parallel.hpp, tensor_parallel.hpp): the model split over N ranks
// (simulated ranks on the CPU: N CPU backends in one process with the in-process collectives; in the
// gpu-labelled build N GPUs over NCCL, skipped where fewer are present) against the transformers
// fixtures and against the unsplit model, the engine's greedy outputs, and the refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <thread>

#include "engine/backend/collective.hpp"
#include "engine/backend/cpu/ops.hpp"
#include "engine/models/model.hpp"
#include "engine/models/parallel.hpp"
#include "engine/models/quantize.hpp"
#include "engine/models/random_checkpoint.hpp"
#include "engine/models/tensor_parallel.hpp"
#include "engine/runtime/engine.hpp"
#include "engine/tokenizer/tokenizer.hpp"
#include "fixtures.hpp"
#include "tests/common/device.hpp"

namespace quarry::engine {
namespace {

using testing::fixture_dir;
using testing::load_reference;

/// N backends of the test device: N CPU backends of one thread, or cuda:0..N-1 (empty when absent).
std::vector<std::shared_ptr<Backend>> rank_backends(std::size_t n) {
  std::vector<std::shared_ptr<Backend>> out;
  if (testing::on_gpu() && static_cast<std::size_t>(cuda_device_count()) < n) return out;
  for (std::size_t r = 0; r < n; ++r) {
    DeviceSpec d = testing::test_device();
    if (d.kind == DeviceSpec::Kind::cuda) d.index = static_cast<int>(r);
    out.push_back(make_backend({d, 1}));
  }
  return out;
}

/// Engine options of a test run: the test device split over `tp` ranks, MTP depth `mtp`, f32 compute.
EngineOptions tp_options(std::size_t tp, std::size_t mtp, std::size_t threads) {
  EngineOptions o;
  o.device = testing::test_device();
  o.n_threads = threads;
  o.tensor_parallel = tp;
  o.mtp_depth = mtp;
  o.compute = Compute::exact;
  return o;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float d = 0.f;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

/// Prefills `prompt` in chunks of 5 then decodes greedily `steps` tokens; returns the logits of the
/// prompt's last position and the tokens.
std::pair<std::vector<float>, std::vector<TokenId>> run_greedy(Model& m, const std::vector<TokenId>& prompt,
                                                               std::size_t steps) {
  const std::size_t V = m.config().vocab_size;
  auto kv = m.make_kv_cache(1024);
  const SeqId seq = kv->create_sequence();
  EXPECT_TRUE(kv->reserve(seq, prompt.size() + steps));
  std::vector<float> logits(V), first;
  for (std::size_t s = 0; s < prompt.size(); s += 5) {
    Batch b;
    const std::size_t e = std::min(prompt.size(), s + 5);
    for (std::size_t i = s; i < e; ++i) b.add(prompt[i], static_cast<std::int32_t>(i), seq, i + 1 == prompt.size());
    m.forward(b, *kv, logits.data());
  }
  first = logits;
  std::vector<TokenId> tokens;
  std::size_t pos = prompt.size();
  for (std::size_t step = 0; step < steps; ++step) {
    const TokenId next = cpu::argmax(logits.data(), V);
    tokens.push_back(next);
    Batch b;
    b.add(next, static_cast<std::int32_t>(pos++), seq, true);
    m.forward(b, *kv, logits.data());
  }
  return {first, tokens};
}

struct TpCase {
  std::string fixture;
  std::size_t ranks;
};

class TensorParallelParity : public ::testing::TestWithParam<TpCase> {};

TEST_P(TensorParallelParity, LogitsAndGreedyTokensMatchTransformersAndTheUnsplitModel) {
  const auto [name, N] = GetParam();
  auto backends = rank_backends(N);
  if (backends.empty()) GTEST_SKIP() << "fewer than " << N << " GPUs";
  const auto ref = load_reference(name);
  auto whole = load_model(fixture_dir(name), rank_backends(1)[0], Compute::exact);
  auto split = load_model_parallel(fixture_dir(name), backends, Compute::exact);
  // The split model reads the slices: over all ranks as many weight bytes as the whole model, plus
  // each rank's own embedding row and norms.
  EXPECT_GE(split->weight_bytes_per_step(), whole->weight_bytes_per_step());
  EXPECT_EQ(split->kv_spec().n_kv_heads, std::max<std::size_t>(1, whole->kv_spec().n_kv_heads / N));
  float worst_ref = 0.f, worst_whole = 0.f;
  for (const auto& p : ref["prompts"]) {
    const auto prompt = p["ids"].get<std::vector<TokenId>>();
    const auto greedy = p["greedy"].get<std::vector<TokenId>>();
    const auto [logits, tokens] = run_greedy(*split, prompt, greedy.size());
    const auto [whole_logits, whole_tokens] = run_greedy(*whole, prompt, greedy.size());
    const auto want = p["last_logits"].get<std::vector<float>>();
    worst_ref = std::max(worst_ref, max_abs_diff(logits, want));
    worst_whole = std::max(worst_whole, max_abs_diff(logits, whole_logits));
    EXPECT_EQ(tokens, greedy) << name << " tp " << N << " prompt length " << prompt.size();
    EXPECT_EQ(tokens, whole_tokens);
  }
  EXPECT_LE(worst_ref, 1e-3f) << name;
  EXPECT_LE(worst_whole, 1e-4f) << name;
  std::cout << "[   info   ] " << name << " tp " << N << ": max |logit - transformers| = " << worst_ref
            << ", max |logit - tp 1| = " << worst_whole << "\n";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TensorParallelParity,
                         ::testing::Values(TpCase{"tiny_gqa_tied_f32", 2}, TpCase{"tiny_gqa_tied_f32", 4},
                                           TpCase{"tiny_mha_untied_sharded_f32", 2},
                                           TpCase{"tiny_mha_untied_sharded_f32", 4},
                                           TpCase{"tiny_gqa_untied_bf16", 2}, TpCase{"tiny_moe_f32", 2},
                                           TpCase{"tiny_moe_f32_fused", 4}, TpCase{"tiny_moe_bf16_fused", 2},
                                           // hybrid: Gated DeltaNet heads, gated attention, shared expert
                                           TpCase{"tiny_next_f32", 2}, TpCase{"tiny_next_bf16", 2},
                                           TpCase{"tiny_qwen35_f32", 2}, TpCase{"tiny_qwen35moe_f32", 2}),
                         [](const auto& info) { return info.param.fixture + "_tp" + std::to_string(info.param.ranks); });

TEST(TensorParallel, QuantizedCheckpointsSplitAsPublished) {
  // Quantized layouts split over 2 ranks (the packed values, scale groups and GPTQ's desc_act g_idx
  // sliced per rank) give the tokens and, within float rounding, the logits of the unsplit quantized model;
  // a slice through an FP8 128 x 128 scale block is refused with the reason.
  const char* config = R"({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 512,
    "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 32, "max_position_embeddings": 512, "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0, "tie_word_embeddings": false, "initializer_range": 0.05})";
  auto backends = rank_backends(2);
  if (backends.empty()) GTEST_SKIP() << "fewer than 2 GPUs";
  const auto root = testing::scratch_dir("tp_quant");
  write_random_checkpoint(config, root / "f", DType::bf16, 5);
  const std::vector<TokenId> prompt = {1, 17, 250, 3, 99, 511, 42, 7, 300, 64};
  struct V {
    std::string name, method;
    std::size_t group;
    bool desc_act;
  };
  for (const V& v : {V{"int8_channel", "int8", 0, false}, V{"gptq4_g32", "int4-gptq", 32, false},
                     V{"gptq4_desc_act_g32", "int4-gptq", 32, true}, V{"ct_int4_g32", "int4-ct", 32, false}}) {
    QuantizeOptions o;
    o.method = v.method;
    o.group_size = v.group;
    o.desc_act = v.desc_act;
    o.sym = !v.desc_act;
    o.keep = {};  // the LM head too: split by vocabulary
    quantize_checkpoint(root / "f", root / v.name, o);
    auto whole = load_model(root / v.name, rank_backends(1)[0], Compute::exact);
    auto split = load_model_parallel(root / v.name, rank_backends(2), Compute::exact);
    // Packed slices: over both ranks about the bytes of the whole packed model (a float copy would be 4x+).
    EXPECT_LT(split->weight_bytes_per_step(), whole->weight_bytes_per_step() * 5 / 4) << v.name;
    const auto [a, ta] = run_greedy(*whole, prompt, 12);
    const auto [b, tb] = run_greedy(*split, prompt, 12);
    EXPECT_EQ(ta, tb) << v.name;
    EXPECT_LE(max_abs_diff(a, b), 1e-4f) << v.name;
  }
  QuantizeOptions fp8;
  fp8.method = "fp8";
  quantize_checkpoint(root / "f", root / "fp8", fp8);
  try {
    load_model_parallel(root / "fp8", rank_backends(2), Compute::exact);
    FAIL() << "an FP8 block was split";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot be split"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(root);
}

TEST(TensorParallel, HybridEngineWithMtpAndBatchingEqualsOneDevice) {
  // Qwen3-Next layout with an MTP module: drafts verified on every rank, each rank restoring the
  // recurrent state of its own heads when drafts are rejected (random weights: most are).
  if (testing::on_gpu() && cuda_device_count() < 2) GTEST_SKIP() << "fewer than 2 GPUs";
  auto j = nlohmann::json::parse(preset_config_json("tiny-next"));
  j["vocab_size"] = 512;
  j["eos_token_id"] = nullptr;
  j["bos_token_id"] = nullptr;
  j["initializer_range"] = 0.1;
  j["mtp_num_hidden_layers"] = 1;
  const auto dir = testing::scratch_dir("tp_hybrid_mtp");
  write_random_checkpoint(j.dump(), dir, DType::f32, 11);
  // Prompts sharing their first 40 tokens: with prefix caching the later ones resume from the state
  // snapshot each rank kept at position 32.
  std::vector<GenerationRequest> reqs;
  for (std::size_t i = 0; i < 3; ++i) {
    GenerationRequest r;
    for (std::size_t k = 0; k < 40; ++k) r.prompt.push_back(static_cast<TokenId>((k * 31 + 3) % 512));
    for (std::size_t k = 0; k < 5 + 7 * i; ++k) r.prompt.push_back(static_cast<TokenId>((k * 31 + i * 17 + 3) % 512));
    r.max_tokens = 24;
    r.ignore_eos = true;
    reqs.push_back(std::move(r));
  }
  struct Run {
    std::vector<std::vector<TokenId>> tokens;
    std::uint64_t rejected = 0, cached = 0;
  };
  const auto run = [&](std::size_t tp, std::size_t mtp, bool caching) {
    EngineOptions o = tp_options(tp, mtp, 1);
    o.enable_prefix_caching = caching;
    o.state_snapshot_tokens = 32;
    auto engine = Engine::open(dir, nullptr, o);
    Run r;
    for (const auto& g : engine->generate(reqs)) r.tokens.push_back(g.tokens);
    r.rejected = engine->stats().draft_tokens - engine->stats().accepted_tokens;
    r.cached = engine->stats().prefix_hit_tokens;
    return r;
  };
  const auto one = run(1, 0, false).tokens;
  EXPECT_EQ(run(2, 0, false).tokens, one);
  const Run drafted = run(2, 3, false);
  EXPECT_EQ(drafted.tokens, one);
  EXPECT_GT(drafted.rejected, 0u);  // the state restore ran
  const Run cached = run(2, 3, true);
  EXPECT_EQ(cached.tokens, one);
  EXPECT_EQ(cached.cached, 2u * 32u);  // the second and third prompts resumed from the snapshot
}

TEST(TensorParallel, QuantizedHybridCheckpointsSplit) {
  // Qwen3.5-MoE layout quantized (int8 per channel, GPTQ int4 groups of 32): each rank gathers its linear-
  // attention channels and its query / gate rows from the packed tensors; TP 2 = TP 1.
  auto backends = rank_backends(2);
  if (backends.empty()) GTEST_SKIP() << "fewer than 2 GPUs";
  const auto root = testing::scratch_dir("tp_quant_hybrid");
  write_random_checkpoint(preset_config_json("tiny-qwen3.5-moe"), root / "f", DType::bf16, 9);
  const std::vector<TokenId> prompt = {1, 17, 250, 3, 99, 511, 42, 7, 300, 64};
  for (const std::string method : {"int8", "int4-gptq"}) {
    QuantizeOptions o;
    o.method = method;
    o.group_size = method == "int8" ? 0 : 32;
    quantize_checkpoint(root / "f", root / method, o);
    auto whole = load_model(root / method, rank_backends(1)[0], Compute::exact);
    auto split = load_model_parallel(root / method, rank_backends(2), Compute::exact);
    const auto [a, ta] = run_greedy(*whole, prompt, 12);
    const auto [b, tb] = run_greedy(*split, prompt, 12);
    EXPECT_EQ(ta, tb) << method;
    EXPECT_LE(max_abs_diff(a, b), 1e-4f) << method;
  }
}

TEST(TensorParallel, ShardDimsCoverEveryHeadColumnAndId) {
  ModelConfig c;
  c.architecture = "Qwen3ForCausalLM";
  c.num_attention_heads = 32;
  c.num_key_value_heads = 8;
  c.intermediate_size = 12288;
  c.moe_intermediate_size = 768;
  c.vocab_size = 151937;  // odd: the last rank's slice is short
  for (std::size_t N : {1, 2, 4, 8, 16, 32}) {
    std::size_t q = 0, inter = 0, moe = 0, vocab = 0;
    std::vector<int> kv_readers(8, 0);
    for (std::size_t r = 0; r < N; ++r) {
      const ShardDims d = shard_dims(c, r, N);
      EXPECT_EQ(d.q_head0, q);
      EXPECT_EQ(d.inter0, inter);
      EXPECT_EQ(d.moe_inter0, moe);
      EXPECT_EQ(d.vocab0, vocab);
      q += d.q_heads;
      inter += d.inter;
      moe += d.moe_inter;
      vocab += d.vocab;
      EXPECT_LE(d.vocab, d.vocab_chunk);
      // The rank's query heads all read KV heads it holds (GQA groups of 4).
      for (std::size_t h = d.q_head0; h < d.q_head0 + d.q_heads; ++h) {
        EXPECT_GE(h / 4, d.kv_head0);
        EXPECT_LT(h / 4, d.kv_head0 + d.kv_heads);
        ++kv_readers[h / 4];
      }
    }
    EXPECT_EQ(q, 32u);
    EXPECT_EQ(inter, 12288u);
    EXPECT_EQ(moe, 768u);
    EXPECT_EQ(vocab, 151937u);
    for (int n : kv_readers) EXPECT_EQ(n, 4);
  }
  EXPECT_THROW(shard_dims(c, 0, 3), std::invalid_argument);  // 32 heads over 3
  // Hybrid (Qwen3.5-122B-A10B's linear attention: 16 key heads, 64 value heads): every value head on the
  // rank of the key head it reads; the shared expert's columns covered once.
  c.linear_num_key_heads = 16;
  c.linear_num_value_heads = 64;
  c.shared_expert_intermediate_size = 1024;
  for (std::size_t N : {2, 4, 8, 16}) {
    std::size_t k = 0, v = 0, shared = 0;
    for (std::size_t r = 0; r < N; ++r) {
      const ShardDims d = shard_dims(c, r, N);
      EXPECT_EQ(d.lin_k_head0, k);
      EXPECT_EQ(d.lin_v_head0, v);
      EXPECT_EQ(d.shared_inter0, shared);
      for (std::size_t h = d.lin_v_head0; h < d.lin_v_head0 + d.lin_v_heads; ++h) {
        EXPECT_GE(h / 4, d.lin_k_head0);
        EXPECT_LT(h / 4, d.lin_k_head0 + d.lin_k_heads);
      }
      k += d.lin_k_heads;
      v += d.lin_v_heads;
      shared += d.shared_inter;
    }
    EXPECT_EQ(k, 16u);
    EXPECT_EQ(v, 64u);
    EXPECT_EQ(shared, 1024u);
  }
  EXPECT_THROW(shard_dims(c, 0, 32), std::invalid_argument);  // 16 key heads over 32 ranks
  c.linear_num_key_heads = c.linear_num_value_heads = 0;
  c.num_key_value_heads = 6;
  c.num_attention_heads = 36;
  EXPECT_THROW(shard_dims(c, 0, 4), std::invalid_argument);  // 6 KV heads neither divisible by 4 nor dividing it
}

TEST(TensorParallel, RefusalsNameTheCheckpointAndTheReason) {
  if (testing::on_gpu()) GTEST_SKIP() << "the refusals happen before any device work";
  try {  // 2 linear-attention key heads (each with its recurrent state) over 4 ranks
    load_model_parallel(fixture_dir("tiny_next_f32"), rank_backends(4), Compute::exact);
    FAIL() << "2 linear-attention key heads were split over 4 ranks";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("linear_num_key_heads 2"), std::string::npos) << e.what();
  }
  try {
    load_model_parallel(fixture_dir("tiny_gqa_tied_f32"), rank_backends(3), Compute::exact);
    FAIL() << "4 heads were split over 3 ranks";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("num_attention_heads 4"), std::string::npos) << e.what();
  }
}

TEST(TensorParallel, CollectivesSumInRankOrderAddAndGather) {
  // Simulated ranks on the CPU (3), or 2 GPUs: NCCL, and the one-shot collectives over peer memory
  // (all-reduces up to 65,536 floats, all-gathers up to 131,072 a rank). Sizes on both sides of those
  // bounds (75,968: a rank's logits of Qwen3's vocabulary at TP 2) and odd ones; repeated calls with new
  // values each round, so that a rank reading a value of an earlier call (a wrong epoch or buffer parity)
  // shows.
  const std::size_t N = testing::on_gpu() ? 2 : 3;
  auto backends = rank_backends(N);
  if (backends.empty()) GTEST_SKIP() << "fewer than " << N << " GPUs";
  auto comms = make_collectives(backends);
  std::cout << "collectives: " << comms[0]->description() << "\n";
  const auto value = [](std::size_t r, std::size_t i, std::size_t round) {
    return static_cast<float>(std::sin(0.1 * (i + 1) * (r + 1) + 0.7 * round)) * 1e3f;
  };
  for (const std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{1001}, std::size_t{4096}, std::size_t{65536},
                              std::size_t{65537}, std::size_t{75968}, std::size_t{131072}, std::size_t{131073}}) {
    for (std::size_t round = 0; round < 3; ++round) {
      // Per rank: x (all_reduce_sum in place), base + y (all_reduce_add), the gather.
      std::vector<std::vector<float>> x(N), y(N), base(N), gathered(N, std::vector<float>(N * n));
      for (std::size_t r = 0; r < N; ++r)
        for (std::size_t i = 0; i < n; ++i) {
          x[r].push_back(value(r, i, round));
          y[r].push_back(value(r + N, i, round));
          base[r].push_back(value(7, i, round));  // the residual stream: the same on every rank
        }
      std::vector<std::thread> threads;
      for (std::size_t r = 0; r < N; ++r)
        threads.emplace_back([&, r] {
          Backend& b = *backends[r];
          b.bind_thread();
          DeviceBuffer dx = b.alloc(n * sizeof(float)), dy = b.alloc(n * sizeof(float)),
                       db = b.alloc(n * sizeof(float)), dg = b.alloc(N * n * sizeof(float));
          b.upload(dx.data(), x[r].data(), n * sizeof(float));
          b.upload(dy.data(), y[r].data(), n * sizeof(float));
          b.upload(db.data(), base[r].data(), n * sizeof(float));
          comms[r]->all_gather(dx.as<float>(), n, dg.as<float>());
          comms[r]->all_reduce_sum(dx.as<float>(), n);
          comms[r]->all_reduce_add(db.as<float>(), dy.as<float>(), n);
          b.download(gathered[r].data(), dg.data(), N * n * sizeof(float));
          b.download(x[r].data(), dx.data(), n * sizeof(float));
          b.download(base[r].data(), db.data(), n * sizeof(float));
          b.synchronize();
        });
      for (auto& t : threads) t.join();
      for (std::size_t i = 0; i < n; ++i) {
        float sum = value(0, i, round), add = value(N, i, round);
        for (std::size_t r = 1; r < N; ++r) {
          sum += value(r, i, round);
          add += value(r + N, i, round);
        }
        const float want_add = value(7, i, round) + add;
        for (std::size_t r = 0; r < N; ++r) {
          ASSERT_EQ(x[r][i], sum) << "n " << n << " round " << round << " element " << i << " rank " << r;
          ASSERT_EQ(base[r][i], want_add) << "n " << n << " round " << round << " element " << i << " rank " << r;
        }
      }
      for (std::size_t r = 0; r < N; ++r)
        for (std::size_t q = 0; q < N; ++q)
          for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(gathered[r][q * n + i], value(q, i, round)) << "n " << n;
    }
  }
  // A rank that fails releases the others from their wait.
  backends[1]->bind_thread();
  DeviceBuffer d = backends[1]->alloc(16 * sizeof(float));
  std::thread waiter([&] {
    backends[1]->bind_thread();
    EXPECT_THROW(comms[1]->all_reduce_sum(d.as<float>(), 16), std::runtime_error);
  });
  comms[0]->abort();
  waiter.join();
}

TEST(TensorParallel, RowParallelProductAllReduceEqualsProductThenAllReduce) {
  // Backend::matmul_all_reduce_add (on the GPU: the GEMV that sends each column to the peers as it ends,
  // at one row on float weights that fit) against matmul then all_reduce_add: the same bits on every rank,
  // and the ranks' summed products of the host reference. Widths that fit the fused GEMV (1,000; 4,096)
  // and one that does not (65,536 columns: more blocks than the device holds at once), 1 and 3 rows, f32
  // and bf16 compute, three rounds each.
  const std::size_t N = testing::on_gpu() ? 2 : 3, k = 512;
  auto backends = rank_backends(N);
  if (backends.empty()) GTEST_SKIP() << "fewer than " << N << " GPUs";
  auto comms = make_collectives(backends);
  const auto value = [](std::size_t seed, std::size_t i) {
    return static_cast<float>(std::sin(0.37 * static_cast<double>(i) + 1.3 * static_cast<double>(seed)));
  };
  for (const Compute compute : {Compute::exact, Compute::bf16}) {
    for (const std::size_t n : {std::size_t{1000}, std::size_t{4096}, std::size_t{65536}}) {
      for (const std::size_t m : {std::size_t{1}, std::size_t{3}}) {
        std::vector<std::vector<float>> fused(N), split(N);
        std::vector<float> base(m * n);
        for (std::size_t i = 0; i < base.size(); ++i) base[i] = value(99, i);
        std::vector<std::thread> threads;
        for (std::size_t r = 0; r < N; ++r)
          threads.emplace_back([&, r] {
            Backend& b = *backends[r];
            b.bind_thread();
            std::vector<float> w(n * k), x(m * k);
            for (std::size_t i = 0; i < w.size(); ++i) w[i] = value(r, i) * 0.05f;
            for (std::size_t i = 0; i < x.size(); ++i) x[i] = value(r + 10, i);
            auto weight = b.load_matrix(w.data(), DType::f32, n, k, WeightUse::matmul, compute);
            DeviceBuffer dx = b.alloc(x.size() * sizeof(float)), dy1 = b.alloc(m * n * sizeof(float)),
                         dy2 = b.alloc(m * n * sizeof(float)), ds = b.alloc(m * n * sizeof(float));
            b.upload(dx.data(), x.data(), x.size() * sizeof(float));
            fused[r].resize(m * n);
            split[r].resize(m * n);
            for (int round = 0; round < 3; ++round) {
              b.upload(dy1.data(), base.data(), m * n * sizeof(float));
              b.upload(dy2.data(), base.data(), m * n * sizeof(float));
              b.matmul_all_reduce_add(dx.as<float>(), m, k, *weight, dy1.as<float>(), ds.as<float>(), *comms[r]);
              b.matmul(dx.as<float>(), m, k, *weight, n, ds.as<float>(), n);
              comms[r]->all_reduce_add(dy2.as<float>(), ds.as<float>(), m * n);
              b.download(fused[r].data(), dy1.data(), m * n * sizeof(float));
              b.download(split[r].data(), dy2.data(), m * n * sizeof(float));
              b.synchronize();
            }
          });
        for (auto& t : threads) t.join();
        const std::string what = "n " + std::to_string(n) + " m " + std::to_string(m) +
                                 (compute == Compute::bf16 ? " bf16" : " exact");
        for (std::size_t r = 0; r < N; ++r) {
          ASSERT_EQ(fused[r], split[r]) << what << " rank " << r;
          ASSERT_EQ(fused[r], fused[0]) << what << " rank " << r;
        }
        for (std::size_t row = 0; row < m; ++row)
          for (std::size_t j = 0; j < n; j += 97) {
            double want = base[row * n + j];
            for (std::size_t r = 0; r < N; ++r)
              for (std::size_t c = 0; c < k; ++c)
                want += static_cast<double>(value(r, j * k + c) * 0.05f) * value(r + 10, row * k + c);
            ASSERT_NEAR(fused[0][row * n + j], want, 0.05) << what << " row " << row << " column " << j;
          }
      }
    }
  }
}

TEST(TensorParallel, EngineGreedyOutputsEqualOneDeviceWithMtpAndBatching) {
  const auto dir = std::filesystem::path(QUARRY_SOURCE_DIR) / "models/quarry-extract-11m";
  if (testing::on_gpu() && cuda_device_count() < 2) GTEST_SKIP() << "fewer than 2 GPUs";
  auto tok = Tokenizer::from_file(dir / "tokenizer.json");
  const std::vector<std::string> prompts = {"Invoice number: INV-2024-0042\nTotal: 1 250,00 EUR\n",
                                            "Rechnung Nr. 77/2023, Datum 12.03.2023, Betrag 99,95 EUR",
                                            "Számla sorszáma: A-15, kelte: 2024.01.31."};
  const auto run = [&](std::size_t tp, std::size_t mtp) {
    auto engine = Engine::open(dir, tok, tp_options(tp, mtp, 2));
    std::vector<GenerationRequest> reqs;
    for (const auto& p : prompts) {
      GenerationRequest r;
      r.prompt = tok->encode(p);
      r.max_tokens = 24;
      r.ignore_eos = true;
      reqs.push_back(r);
    }
    std::vector<std::vector<TokenId>> out;
    for (const auto& g : engine->generate(reqs)) out.push_back(g.tokens);
    return out;
  };
  const auto one = run(1, 0);
  EXPECT_EQ(run(2, 0), one);
  EXPECT_EQ(run(2, 3), one);  // MTP drafting on every rank, verified losslessly
}

}  // namespace
}  // namespace quarry::engine
