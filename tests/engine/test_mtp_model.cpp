// MTP forward against PyTorch running tools/train/train.py's math on the default model (fixture from
// tools/fixtures/mtp/gen_mtp_fixture.py: main logits and MTP logits at depths 1..4).
//
// Tolerances: the reference ran in f32 on a GPU (TF32 off) over the checkpoint's bf16 weights, the engine
// runs f32 activations over the same bf16 weights on the CPU; logits of this model are O(10), and f32
// summation order differs, so each recorded logit (top-8 and 64 probe ids) must agree within 2e-3 (measured: 4e-5) and the
// log-sum-exp within 2e-3; the argmax of every row must agree where the reference's top-1/top-2 margin
// exceeds 0.05 (below that the two sides may legitimately pick either token).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/common/device.hpp"
#include "engine/models/model.hpp"
#include "engine/models/random_checkpoint.hpp"
#include "fixtures.hpp"

namespace quarry::engine {
namespace {

constexpr float kLogitTol = 2e-3f;
constexpr float kMarginForArgmax = 0.05f;

std::filesystem::path default_model() { return std::filesystem::path(QUARRY_SOURCE_DIR) / "models/quarry-extract-11m"; }

nlohmann::json load_mtp_reference() {
  std::ifstream in(testing::fixture_dir("mtp") / "mtp_reference.json");
  return nlohmann::json::parse(in);
}

double logsumexp(const float* x, std::size_t n) {
  double mx = x[0];
  for (std::size_t i = 1; i < n; ++i) mx = std::max<double>(mx, x[i]);
  double s = 0;
  for (std::size_t i = 0; i < n; ++i) s += std::exp(x[i] - mx);
  return mx + std::log(s);
}

/// Checks one row of logits against a recorded row; returns the largest difference seen.
float check_row(const float* got, std::size_t V, const nlohmann::json& want, const nlohmann::json& probe,
                const std::string& what) {
  float worst = 0.f;
  const auto ids = want["top_ids"].get<std::vector<int>>();
  const auto vals = want["top_values"].get<std::vector<float>>();
  for (std::size_t k = 0; k < ids.size(); ++k) worst = std::max(worst, std::fabs(got[ids[k]] - vals[k]));
  const auto pv = want["probe_values"].get<std::vector<float>>();
  for (std::size_t k = 0; k < pv.size(); ++k) worst = std::max(worst, std::fabs(got[probe[k].get<int>()] - pv[k]));
  const double lse = logsumexp(got, V);
  EXPECT_NEAR(lse, want["logsumexp"].get<double>(), kLogitTol) << what;
  EXPECT_LE(worst, kLogitTol) << what;
  return worst;
}

std::size_t argmax(const float* x, std::size_t n) { return static_cast<std::size_t>(std::max_element(x, x + n) - x); }

TEST(MtpModel, DefaultModelMatchesTrainingMath) {
  const auto ref = load_mtp_reference();
  auto model = load_model(default_model(), testing::test_backend(), Compute::exact);  // the fixture is f32 math
  ASSERT_GE(model->mtp_depths(), 4u);
  const auto& cfg = model->config();
  const std::size_t V = cfg.vocab_size, H = cfg.hidden_size;
  const auto tokens = ref["tokens"].get<std::vector<TokenId>>();
  const auto rows = ref["rows"].get<std::vector<std::size_t>>();
  const std::size_t L = tokens.size();
  auto kv_owner = model->make_kv_cache(2048);
  KvCache& kv = *kv_owner;
  const SeqId seq = kv.create_sequence();
  ASSERT_TRUE(kv.reserve(seq, L));

  // Main model over the whole sequence, logits and hidden state of every row.
  Batch b;
  for (std::size_t i = 0; i < L; ++i) b.add(tokens[i], static_cast<std::int32_t>(i), seq, true);
  std::vector<float> logits(L * V), hidden(L * H);
  model->forward(b, kv, logits.data(), hidden.data());
  float worst = 0.f;
  for (std::size_t r = 0; r < rows.size(); ++r)
    worst = std::max(worst, check_row(&logits[rows[r] * V], V, ref["main"][r], ref["probe_ids"],
                                      "main row " + std::to_string(rows[r])));
  std::size_t checked = 0;
  for (std::size_t i = 0; i < L; ++i)
    if (ref["argmax_main"]["margin"][i].get<float>() > kMarginForArgmax) {
      EXPECT_EQ(argmax(&logits[i * V], V), ref["argmax_main"]["ids"][i].get<std::size_t>()) << "main row " << i;
      ++checked;
    }
  EXPECT_GT(checked, L / 2);

  // MTP depths: depth d runs over rows 0..L-d-2 with tokens t[i+d] and the previous depth's hidden.
  for (std::size_t d = 1; d <= 4; ++d) {
    const std::size_t n = L - d - 1;
    Batch md;
    for (std::size_t i = 0; i < n; ++i) md.add(tokens[i + d], static_cast<std::int32_t>(i), seq, true);
    std::vector<float> out(n * H), lg(n * V);
    model->mtp_forward(d, md, hidden.data(), kv, out.data(), lg.data());
    for (std::size_t r = 0; r < rows.size(); ++r) {
      if (rows[r] >= n) continue;
      worst = std::max(worst, check_row(&lg[rows[r] * V], V, ref["depths"][d - 1][r], ref["probe_ids"],
                                        "depth " + std::to_string(d) + " row " + std::to_string(rows[r])));
    }
    const auto& am = ref["argmax"][d - 1];
    std::size_t agree = 0, total = 0;
    for (std::size_t i = 0; i < n; ++i)
      if (am["margin"][i].get<float>() > kMarginForArgmax) {
        ++total;
        agree += argmax(&lg[i * V], V) == am["ids"][i].get<std::size_t>();
      }
    EXPECT_EQ(agree, total) << "depth " << d;
    hidden.assign(out.begin(), out.end());
  }
  std::cout << "largest logit difference to the reference: " << worst << "\n";
}

TEST(MtpModel, RandomCheckpointsOfBothLayoutsLoadAndRun) {
  for (const std::string layout : {"next", "deepseek"}) {
    auto j = nlohmann::json::parse(preset_config_json("tiny"));
    j["vocab_size"] = 512;
    if (layout == "next") j["mtp_num_hidden_layers"] = 1;
    else j["num_nextn_predict_layers"] = 2;
    const auto dir = testing::scratch_dir("mtp_random_" + layout);
    write_random_checkpoint(j.dump(), dir, DType::f32, 7);
    auto model = load_model(dir, testing::test_backend());
    ASSERT_GE(model->mtp_depths(), layout == "next" ? 4u : 2u) << layout;
    EXPECT_EQ(model->kv_spec().n_layers, 2 + model->mtp_depths());
    auto kv_owner = model->make_kv_cache(256);
  KvCache& kv = *kv_owner;
    const SeqId s = kv.create_sequence();
    ASSERT_TRUE(kv.reserve(s, 8));
    Batch b;
    for (int i = 0; i < 6; ++i) b.add(10 + i, i, s, true);
    const std::size_t H = 64, V = 512;
    std::vector<float> lg(6 * V), h(6 * H);
    model->forward(b, kv, lg.data(), h.data());
    // The same inputs at depths 1 and 2 (own KV layers): the recursive layout reuses its one module
    // (identical outputs), the DeepSeek layout runs its second module there (different outputs).
    Batch m;
    for (int i = 0; i < 5; ++i) m.add(11 + i, i, s, true);
    std::vector<float> o1(5 * H), o2(5 * H), l1(5 * V), l2(5 * V);
    model->mtp_forward(1, m, h.data(), kv, o1.data(), l1.data());
    model->mtp_forward(2, m, h.data(), kv, o2.data(), l2.data());
    for (float v : l1) ASSERT_TRUE(std::isfinite(v));
    if (layout == "next") EXPECT_EQ(o1, o2);
    else EXPECT_NE(o1, o2);
    EXPECT_THROW(model->mtp_forward(model->mtp_depths() + 1, m, h.data(), kv, o1.data(), l1.data()),
                 std::invalid_argument);
  }
}

}  // namespace
}  // namespace quarry::engine
