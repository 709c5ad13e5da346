// CPU ops against direct dense formulas: RoPE (rotate_half pairs, partial rotary), RMSNorm, paged GQA
// attention over scattered blocks vs dense softmax attention, SiLU-and-mul, bf16/f16 embedding rows.
#include <gtest/gtest.h>

#include <cmath>
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

TEST(Ops, PagedGqaAttentionEqualsDenseAttention) {
  const std::size_t n_heads = 4, n_kv = 2, hd = 8, bs = 4, ctx = 11;
  ThreadPool pool(2);
  // Three blocks in scattered storage slots, one layer; the block table maps positions to slots 2, 0, 1.
  const std::size_t per = bs * n_kv * hd;
  std::vector<std::vector<float>> storage(3, std::vector<float>(2 * per));
  std::vector<float*> ptrs = {storage[0].data(), storage[1].data(), storage[2].data()};
  KvLayerView view{ptrs.data(), 0, per, bs, n_kv, hd};
  const std::int32_t table[3] = {2, 0, 1};
  auto k = randn(ctx * n_kv * hd, 2), v = randn(ctx * n_kv * hd, 3), q = randn(ctx * n_heads * hd, 4);
  std::vector<std::int32_t> pos(ctx);
  std::vector<const std::int32_t*> tables(ctx, table);
  for (std::size_t i = 0; i < ctx; ++i) pos[i] = static_cast<std::int32_t>(i);
  kv_store(k.data(), v.data(), n_kv * hd, ctx, pos.data(), tables.data(), view, &pool);
  std::vector<float> out(ctx * n_heads * hd);
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  attention(q.data(), n_heads * hd, out.data(), n_heads * hd, ctx, n_heads, pos.data(), tables.data(), view, scale,
            &pool);
  for (std::size_t t = 0; t < ctx; ++t)
    for (std::size_t h = 0; h < n_heads; ++h) {
      const std::size_t g = h / (n_heads / n_kv);
      std::vector<double> s(t + 1);
      double mx = -1e30, sum = 0;
      for (std::size_t p = 0; p <= t; ++p) {
        double d = 0;
        for (std::size_t i = 0; i < hd; ++i) d += q[(t * n_heads + h) * hd + i] * k[(p * n_kv + g) * hd + i];
        s[p] = d * scale;
        mx = std::max(mx, s[p]);
      }
      for (auto& e : s) sum += (e = std::exp(e - mx));
      for (std::size_t i = 0; i < hd; ++i) {
        double o = 0;
        for (std::size_t p = 0; p <= t; ++p) o += s[p] / sum * v[(p * n_kv + g) * hd + i];
        EXPECT_NEAR(out[(t * n_heads + h) * hd + i], o, 1e-5) << "t " << t << " h " << h;
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
