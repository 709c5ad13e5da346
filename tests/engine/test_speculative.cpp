// Speculative decoding units: verify_drafts keeps the target distribution (chi-square against the exact
// distribution of the first two emitted tokens), greedy verification accepts the argmax prefix, and
// the incremental MTP drafter (KV rows reused across rounds, rows that read drafts recomputed) drafts
// what a from-scratch pass of the training recursion gives.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "tests/common/device.hpp"
#include "engine/models/model.hpp"
#include "engine/runtime/speculative.hpp"

namespace quarry::engine {
namespace {

/// Chi-square statistic's p-value upper bound check: returns the statistic; the caller compares it to the
/// 0.999 quantile of chi-square with `dof` degrees of freedom (Wilson-Hilferty approximation).
double chi2_quantile_999(double dof) {
  const double z = 3.090232;  // standard normal 0.999 quantile
  const double a = 2.0 / (9.0 * dof);
  return dof * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

TEST(VerifyDrafts, GreedyAcceptsTheArgmaxPrefix) {
  const std::size_t V = 4;
  Sampler s({});
  // rows: argmax 2, 1, 3, 0
  std::vector<float> lg = {0, 1, 5, 0, /**/ 0, 4, 1, 0, /**/ 1, 0, 0, 2, /**/ 9, 0, 0, 0};
  std::vector<TokenId> drafts = {2, 1, 0};
  auto r = verify_drafts(s, lg, V, {}, drafts, {});
  EXPECT_EQ(r.n_accepted, 2u);
  EXPECT_EQ(r.next, 3);
  drafts = {2, 1, 3};
  r = verify_drafts(s, lg, V, {}, drafts, {});
  EXPECT_EQ(r.n_accepted, 3u);
  EXPECT_EQ(r.next, 0);  // bonus
  r = verify_drafts(s, lg, V, {}, drafts, {}, /*want_bonus=*/false);
  EXPECT_EQ(r.next, -1);
  // A bitmask that forbids token 2 at row 0: the target's argmax there is 1, so draft 2 is rejected.
  std::vector<std::vector<std::uint32_t>> masks = {{0b1011u}, {0xfu}, {0xfu}, {0xfu}};
  r = verify_drafts(s, lg, V, masks, drafts, {});
  EXPECT_EQ(r.n_accepted, 0u);
  EXPECT_EQ(r.next, 1);
}

// Target p and draft q over 5 tokens for two positions (p2 depends on the first token only through
// the row used: rows are fixed here, as a target model would give for a fixed context). The emitted pair
// (first token, second token if the first draft was accepted... ) is compared with p exactly: the first
// emitted token must follow p1; given the first token was the accepted draft, the second follows p2.
TEST(VerifyDrafts, SpeculativeSamplingKeepsTheTargetDistribution) {
  const std::size_t V = 5;
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.seed = 1234;
  Sampler target(sp), drafter([] {
    SamplingParams d;
    d.temperature = 1.0f;
    d.seed = 99;
    return d;
  }());
  const std::vector<float> p_logits = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f, /**/ -1.0f, 0.5f, 1.5f, 0.0f, 0.3f};
  const std::vector<float> q_logits = {0.0f, 1.5f, 0.0f, 1.0f, -1.0f, /**/ 0.5f, 0.5f, 0.0f, 1.0f, -2.0f};
  TokenDistribution p1, p2, q1, q2;
  target.distribution(std::span(p_logits).subspan(0, V), {}, p1);
  target.distribution(std::span(p_logits).subspan(V, V), {}, p2);
  drafter.distribution(std::span(q_logits).subspan(0, V), {}, q1);
  drafter.distribution(std::span(q_logits).subspan(V, V), {}, q2);
  // Rows of the target: row 0 scores token 1, row 1 scores token 2 (after the first draft), row 2 the bonus.
  std::vector<float> rows(p_logits);
  rows.insert(rows.end(), p_logits.begin(), p_logits.begin() + V);
  const int N = 200000;
  std::vector<double> first(V, 0.0);
  std::vector<double> second(V, 0.0);
  double n_second = 0;
  for (int it = 0; it < N; ++it) {
    std::vector<TokenId> d = {drafter.sample_from(q1), drafter.sample_from(q2)};
    std::vector<TokenDistribution> qs = {q1, q2};
    auto r = verify_drafts(target, rows, V, {}, d, qs);
    const TokenId t1 = r.n_accepted >= 1 ? d[0] : r.next;
    first[static_cast<std::size_t>(t1)] += 1;
    if (r.n_accepted >= 1) {
      const TokenId t2 = r.n_accepted >= 2 ? d[1] : r.next;
      second[static_cast<std::size_t>(t2)] += 1;
      n_second += 1;
    }
  }
  auto chi2 = [&](const std::vector<double>& obs, double n, const TokenDistribution& p) {
    double x = 0;
    for (std::size_t i = 0; i < V; ++i) {
      const double e = n * p.prob(static_cast<TokenId>(i));
      x += (obs[i] - e) * (obs[i] - e) / e;
    }
    return x;
  };
  EXPECT_LT(chi2(first, N, p1), chi2_quantile_999(V - 1));
  EXPECT_GT(n_second, N / 10);
  EXPECT_LT(chi2(second, n_second, p2), chi2_quantile_999(V - 1));
  // Not vacuous: the draft distribution itself is far from p (the same statistic rejects it).
  std::vector<double> qobs(V);
  for (std::size_t i = 0; i < V; ++i) qobs[i] = N * q1.prob(static_cast<TokenId>(i));
  EXPECT_GT(chi2(qobs, N, p1), 100 * chi2_quantile_999(V - 1));
}

std::filesystem::path default_model() { return std::filesystem::path(QUARRY_SOURCE_DIR) / "models/quarry-extract-11m"; }

/// Reference drafts from scratch: main model over t[0..C-2], then depth passes over all rows 0..C-2
/// with the training recursion, where t[C..] are the drafts so far. Returns the argmax draft of each depth.
std::vector<TokenId> drafts_from_scratch(Model& m, const std::vector<TokenId>& t, std::size_t C, std::size_t k) {
  const std::size_t H = m.config().hidden_size, V = m.config().vocab_size;
  auto kv_owner = m.make_kv_cache(4096);
  KvCache& kv = *kv_owner;
  const SeqId s = kv.create_sequence();
  kv.reserve(s, C + k);
  Batch b;
  for (std::size_t i = 0; i + 1 < C; ++i) b.add(t[i], static_cast<std::int32_t>(i), s, false);
  std::vector<float> hidden((C - 1) * H), none;
  m.forward(b, kv, none.data(), hidden.data());
  std::vector<TokenId> seq(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(C)), out;
  for (std::size_t d = 1; d <= k; ++d) {
    Batch md;
    for (std::size_t i = 0; i + 1 < C; ++i) md.add(seq[i + d], static_cast<std::int32_t>(i), s, i + 2 == C);
    std::vector<float> h2((C - 1) * H), lg(V);
    m.mtp_forward(d, md, hidden.data(), kv, h2.data(), lg.data());
    const auto x = static_cast<TokenId>(std::max_element(lg.begin(), lg.end()) - lg.begin());
    out.push_back(x);
    seq.push_back(x);
    hidden = std::move(h2);
  }
  return out;
}

TEST(MtpDrafter, IncrementalDraftsEqualFromScratchTrainingRecursion) {
  auto model = load_model(default_model(), testing::test_backend());
  const std::size_t H = model->config().hidden_size, K = 4;
  // A prompt-like sequence: the tokens of the MTP reference fixture.
  std::ifstream in(std::filesystem::path(QUARRY_SOURCE_DIR) / "tests/engine/fixtures/mtp/mtp_reference.json");
  const auto t = nlohmann::json::parse(in)["tokens"].get<std::vector<TokenId>>();
  auto kv_owner = model->make_kv_cache(4096);
  KvCache& kv = *kv_owner;
  const SeqId s = kv.create_sequence();
  kv.reserve(s, t.size() + K + 1);
  MtpState st(K, H);
  // "Prefill" the first 40 tokens; then commit 1..4 tokens per round (as verification would).
  std::size_t C = 41;
  {
    Batch b;
    for (std::size_t i = 0; i + 1 < C; ++i) b.add(t[i], static_cast<std::int32_t>(i), s, false);
    std::vector<float> h((C - 1) * H), none;
    model->forward(b, kv, none.data(), h.data());
    st.push_main_hidden(h.data(), C - 1, 0);
  }
  SamplingParams greedy;
  Sampler sampler(greedy);
  MtpDrafter drafter(*model, kv);
  std::size_t rounds = 0, compared = 0;
  const std::size_t steps[] = {1, 3, 2, 4, 1, 1, 5, 2};
  for (std::size_t r = 0; r < 8; ++r) {
    DraftJob job;
    job.seq = s;
    job.state = &st;
    job.token_at = [&](std::size_t i) { return t[i]; };
    job.n_committed = C;
    job.max_drafts = K;
    job.sampler = &sampler;
    DraftJob* jp = &job;
    drafter.draft(std::span<DraftJob* const>(&jp, 1));
    ASSERT_EQ(job.drafts.size(), K) << "round " << r;
    const auto want = drafts_from_scratch(*model, t, C, K);
    EXPECT_EQ(job.drafts, want) << "round " << r << " C " << C;
    compared += K;
    ++rounds;
    // Commit `steps[r]` tokens of the true sequence: the main model runs them (positions C-1..).
    const std::size_t a = steps[r];
    Batch b;
    for (std::size_t i = C - 1; i < C - 1 + a; ++i) b.add(t[i], static_cast<std::int32_t>(i), s, false);
    std::vector<float> h(a * H), none;
    model->forward(b, kv, none.data(), h.data());
    st.push_main_hidden(h.data(), a, C - 1);
    C += a;
  }
  EXPECT_EQ(compared, rounds * K);
}

}  // namespace
}  // namespace quarry::engine
