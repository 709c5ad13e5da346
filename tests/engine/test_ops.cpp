// CPU ops against direct dense formulas: RoPE (rotate_half pairs, partial rotary), RMSNorm, paged GQA
// attention over scattered blocks vs dense softmax attention, SiLU-and-mul, bf16/f16 embedding rows.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "engine/backend/cpu/ops.hpp"
#include "engine/backend/cpu/thread_pool.hpp"

namespace quarry::engine::cpu {
namespace {

std::vector<float> randn(std::size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

TEST(Ops, RopeRotatesHalfPairsAndLeavesThePartialTail) {
  const std::size_t hd = 8, heads = 2;
  Rope r(100.0, 4);  // partial rotary: 4 of 8 dims
  ASSERT_EQ(r.inv_freq.size(), 2u);
  EXPECT_FLOAT_EQ(r.inv_freq[1], 0.1f);  // 100^(-2/4)
  auto x = randn(2 * heads * hd, 1);
  auto y = x;
  const std::int32_t pos[2] = {0, 3};
  rope(y.data(), 2, heads, hd, heads * hd, pos, r, nullptr);
  for (std::size_t t = 0; t < 2; ++t)
    for (std::size_t h = 0; h < heads; ++h) {
      const float* a = x.data() + (t * heads + h) * hd;
      const float* b = y.data() + (t * heads + h) * hd;
      for (std::size_t i = 0; i < 2; ++i) {
        const double ang = pos[t] * (i == 0 ? 1.0 : 0.1);
        EXPECT_NEAR(b[i], a[i] * std::cos(ang) - a[i + 2] * std::sin(ang), 1e-5);
        EXPECT_NEAR(b[i + 2], a[i + 2] * std::cos(ang) + a[i] * std::sin(ang), 1e-5);
      }
      for (std::size_t i = 4; i < hd; ++i) EXPECT_EQ(b[i], a[i]);
    }
}

TEST(Ops, RmsNorm) {
  std::vector<float> x = {1.f, 2.f, 3.f, 4.f}, w = {1.f, 0.5f, 2.f, 1.f}, y(4);
  rms_norm(x.data(), y.data(), 1, 4, 4, w.data(), 0.f, nullptr);
  const float rms = std::sqrt(30.f / 4.f);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_NEAR(y[i], x[i] / rms * w[i], 1e-6);
}

namespace {

/// One KV layer of `ctx` random positions in scattered blocks (slots in reverse order), with the
/// queries of every position.
struct PagedFixture {
  std::size_t n_heads, n_kv, hd, bs, ctx;
  std::vector<std::vector<float>> storage;
  std::vector<float*> ptrs;
  std::vector<std::int32_t> table, pos;
  std::vector<const std::int32_t*> tables;
  std::vector<float> k, v, q;
  KvLayerView view;
  PagedFixture(std::size_t n_heads_, std::size_t n_kv_, std::size_t hd_, std::size_t bs_, std::size_t ctx_)
      : n_heads(n_heads_), n_kv(n_kv_), hd(hd_), bs(bs_), ctx(ctx_) {
    const std::size_t per = bs * n_kv * hd, n_blocks = (ctx + bs - 1) / bs;
    // Blocks hold NaN until written: positions past a token's own must never be read.
    storage.assign(n_blocks, std::vector<float>(2 * per, std::numeric_limits<float>::quiet_NaN()));
    for (auto& b : storage) ptrs.push_back(b.data());
    for (std::size_t b = 0; b < n_blocks; ++b) table.push_back(static_cast<std::int32_t>(n_blocks - 1 - b));
    view = KvLayerView{ptrs.data(), 0, per, bs, n_kv, hd};
    k = randn(ctx * n_kv * hd, 2);
    v = randn(ctx * n_kv * hd, 3);
    q = randn(ctx * n_heads * hd, 4);
    for (std::size_t i = 0; i < ctx; ++i) pos.push_back(static_cast<std::int32_t>(i));
    tables.assign(ctx, table.data());
  }
  void store(std::size_t t0, std::size_t t1, ThreadPool* pool) {
    kv_store(k.data() + t0 * n_kv * hd, v.data() + t0 * n_kv * hd, n_kv * hd, t1 - t0, pos.data() + t0,
             tables.data() + t0, view, pool);
  }
  /// Attention of tokens t0..t1 (their K/V stored), [t1 - t0, n_heads * hd].
  std::vector<float> attend(std::size_t t0, std::size_t t1, ThreadPool* pool) const {
    std::vector<float> out((t1 - t0) * n_heads * hd);
    attention(q.data() + t0 * n_heads * hd, n_heads * hd, out.data(), n_heads * hd, t1 - t0, n_heads,
              pos.data() + t0, tables.data() + t0, view, 1.f / std::sqrt(static_cast<float>(hd)), pool);
    return out;
  }
  /// Dense softmax attention in double for token t, head h.
  std::vector<double> reference(std::size_t t, std::size_t h) const {
    const std::size_t g = h / (n_heads / n_kv);
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    std::vector<double> s(t + 1), o(hd, 0.0);
    double mx = -1e30, sum = 0;
    for (std::size_t p = 0; p <= t; ++p) {
      double d = 0;
      for (std::size_t i = 0; i < hd; ++i) d += double{q[(t * n_heads + h) * hd + i]} * k[(p * n_kv + g) * hd + i];
      s[p] = d * scale;
      mx = std::max(mx, s[p]);
    }
    for (auto& e : s) sum += (e = std::exp(e - mx));
    for (std::size_t i = 0; i < hd; ++i)
      for (std::size_t p = 0; p <= t; ++p) o[i] += s[p] / sum * v[(p * n_kv + g) * hd + i];
    return o;
  }
};

void expect_dense(std::size_t n_heads, std::size_t n_kv, std::size_t hd, std::size_t bs, std::size_t ctx) {
  ThreadPool pool(2);
  PagedFixture f(n_heads, n_kv, hd, bs, ctx);
  f.store(0, ctx, &pool);
  const auto out = f.attend(0, ctx, &pool);
  for (std::size_t t = 0; t < ctx; ++t)
    for (std::size_t h = 0; h < n_heads; ++h) {
      const auto o = f.reference(t, h);
      for (std::size_t i = 0; i < hd; ++i)
        ASSERT_NEAR(out[(t * n_heads + h) * hd + i], o[i], 2e-5) << "hd " << hd << " t " << t << " h " << h;
    }
}

}  // namespace

TEST(Ops, PagedGqaAttentionEqualsDenseAttention) {
  expect_dense(4, 2, 8, 4, 11);     // scalar path (head_dim not a multiple of 16, block_size 4)
  expect_dense(4, 2, 64, 16, 75);   // vector path, GQA group 2, a partial last block
  expect_dense(8, 2, 128, 16, 40);  // group 4: runs of 4 tokens
  expect_dense(2, 2, 32, 16, 17);   // no GQA
}

// Lossless speculative decoding needs a token's attention output to be the same bits whether the
// token is computed alone (plain decode) or among the rows of a verify step or a prefill chunk.
TEST(Ops, AttentionOfATokenDoesNotDependOnTheOtherTokensOfTheCall) {
  ThreadPool pool(2);
  for (const std::size_t hd : {64, 128}) {
    PagedFixture f(4, 2, hd, 16, 53);
    f.store(0, 53, &pool);
    const auto all = f.attend(0, 53, &pool);
    const std::size_t row = f.n_heads * hd;
    for (std::size_t t0 : {0, 15, 16, 47}) {
      const std::size_t t1 = std::min<std::size_t>(53, t0 + 5);  // a verify step's 5 rows
      const auto some = f.attend(t0, t1, nullptr);
      for (std::size_t t = t0; t < t1; ++t) {
        const auto one = f.attend(t, t + 1, nullptr);
        for (std::size_t i = 0; i < row; ++i) {
          ASSERT_EQ(one[i], all[t * row + i]) << "hd " << hd << " t " << t << " i " << i;
          ASSERT_EQ(one[i], some[(t - t0) * row + i]) << "hd " << hd << " t " << t << " i " << i;
        }
      }
    }
  }
}

TEST(Ops, SiluMul) {
  std::vector<float> g = {-2.f, 0.f, 3.f}, u = {1.f, 5.f, -2.f}, o(3);
  silu_mul(g.data(), 3, u.data(), 3, o.data(), 3, 1, 3, nullptr);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_NEAR(o[i], g[i] / (1 + std::exp(-g[i])) * u[i], 1e-6);
}

TEST(Ops, EmbeddingWidensBf16AndF16Exactly) {
  // bf16 0x3fc0 = 1.5, 0xc000 = -2; f16 0x3e00 = 1.5, 0xc000 = -2, 0x0001 = 2^-24 (subnormal).
  const std::uint16_t bf[4] = {0, 0, 0x3fc0, 0xc000}, hf[4] = {0, 0, 0x3e00, 0x0001};
  const std::int32_t tok = 1;
  float out[2];
  embedding(&tok, 1, Weight{bf, WeightType::bf16, 2, 2}, out, nullptr);
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], -2.f);
  embedding(&tok, 1, Weight{hf, WeightType::f16, 2, 2}, out, nullptr);
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], std::ldexp(1.f, -24));
}

TEST(Ops, ArgmaxFirstOfTies) {
  const float l[5] = {1.f, 4.f, 2.f, 4.f, -1.f};
  EXPECT_EQ(argmax(l, 5), 1);
}

}  // namespace
}  // namespace quarry::engine::cpu
