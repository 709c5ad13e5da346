// gemm(): every kernel set available on this machine against a double-precision reference computed
// here from the definition y = x W^T (weights decoded by the IEEE 754 / bfloat16 formulas, written
// independently of the kernels), over many shapes, strides, dtypes, thread counts and the accumulate
// flag. Outputs are poisoned first; padding columns of y must stay untouched.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "engine/backend/cpu/cpu_features.hpp"
#include "engine/backend/cpu/gemm.hpp"
#include "engine/backend/cpu/thread_pool.hpp"

namespace {

using quarry::engine::ThreadPool;
using namespace quarry::engine::cpu;

constexpr float kSentinel = -12345.5f;

// Weights in their stored form plus their exact values as doubles.
struct Weights {
  WeightType type;
  std::vector<float> f32;
  std::vector<std::uint16_t> u16;
  std::vector<double> value;
  const void* data() const { return type == WeightType::f32 ? static_cast<const void*>(f32.data()) : u16.data(); }
};

double f16_value(std::uint16_t h) {  // IEEE 754 binary16
  const int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  const double mag = exp == 0 ? std::ldexp(mant / 1024.0, -14) : std::ldexp(1.0 + mant / 1024.0, exp - 15);
  return sign ? -mag : mag;
}

double bf16_value(std::uint16_t b) {  // the upper half of an IEEE 754 binary32
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

Weights make_weights(WeightType type, std::size_t count, std::mt19937& rng) {
  Weights w{type, {}, {}, std::vector<double>(count)};
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  std::uniform_int_distribution<int> bit(0, 1), mant10(0, 1023), mant7(0, 127), e16(8, 17), e_bf(118, 127);
  std::uniform_int_distribution<int> pct(0, 99);
  if (type == WeightType::f32) {
    w.f32.resize(count);
    for (std::size_t i = 0; i < count; ++i) w.value[i] = w.f32[i] = uni(rng);
  } else {
    w.u16.resize(count);
    for (std::size_t i = 0; i < count; ++i) {
      std::uint16_t h;
      if (type == WeightType::f16)  // normal numbers around 2^-7..2^2, 3% subnormals
        h = static_cast<std::uint16_t>((bit(rng) << 15) | ((pct(rng) < 3 ? 0 : e16(rng)) << 10) | mant10(rng));
      else
        h = static_cast<std::uint16_t>((bit(rng) << 15) | (e_bf(rng) << 7) | mant7(rng));
      w.u16[i] = h;
      w.value[i] = type == WeightType::f16 ? f16_value(h) : bf16_value(h);
    }
  }
  return w;
}

struct Case {
  std::size_t m, k, n, ldx_pad, ldy_pad;
  bool accumulate;
  std::size_t threads;  // 0: no pool
};

// f32 -> bf16 -> f32 with round to nearest even (finite inputs), as VCVTNEPS2BF16 does.
double round_to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

// The amx kernel set rounds x and W to bf16 for m > 16, the bf16 set at every m (see gemm.hpp); the
// reference does the same.
bool rounds_to_bf16(GemmKernel kernel, std::size_t m) {
  return (kernel == GemmKernel::amx && m > 16) || kernel == GemmKernel::bf16;
}

// Runs one case and returns ||y - ref|| / ||ref||; fails the test on any untouched or stray write.
double run_case(GemmKernel kernel, WeightType type, const Case& c, std::mt19937& rng, ThreadPool* pool) {
  const std::size_t ldx = c.k + c.ldx_pad, ldy = c.n + c.ldy_pad;
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  std::vector<float> x(c.m * ldx);
  for (auto& v : x) v = uni(rng);
  Weights w = make_weights(type, c.n * c.k, rng);
  const bool round = rounds_to_bf16(kernel, c.m);
  std::vector<double> xv(x.begin(), x.end());
  if (round) {
    for (auto& v : xv) v = round_to_bf16(static_cast<float>(v));
    for (auto& v : w.value) v = round_to_bf16(static_cast<float>(v));
  }
  std::vector<float> y(c.m * ldy, kSentinel);
  std::vector<double> ref(c.m * c.n);
  for (std::size_t i = 0; i < c.m; ++i)
    for (std::size_t j = 0; j < c.n; ++j) {
      float& out = y[i * ldy + j];
      out = c.accumulate ? uni(rng) : std::numeric_limits<float>::quiet_NaN();  // poison
      double s = c.accumulate ? out : 0.0;
      for (std::size_t p = 0; p < c.k; ++p) s += xv[i * ldx + p] * w.value[j * c.k + p];
      ref[i * c.n + j] = s;
    }
  gemm(kernel, x.data(), c.m, c.k, ldx, w.data(), type, c.n, y.data(), ldy, pool, c.accumulate);
  double err = 0, norm = 0;
  for (std::size_t i = 0; i < c.m; ++i) {
    for (std::size_t j = 0; j < c.n; ++j) {
      const double d = y[i * ldy + j] - ref[i * c.n + j];
      if (!std::isfinite(y[i * ldy + j])) {
        ADD_FAILURE() << "non-finite y[" << i << "," << j << "]";
        return 1.0;
      }
      err += d * d;
      norm += ref[i * c.n + j] * ref[i * c.n + j];
    }
    for (std::size_t j = c.n; j < ldy; ++j)
      if (y[i * ldy + j] != kSentinel) {
        ADD_FAILURE() << "stray write at y[" << i << "," << j << "] (ldy padding)";
        return 1.0;
      }
  }
  return norm > 0 ? std::sqrt(err / norm) : std::sqrt(err);
}

const char* type_name(WeightType t) {
  return t == WeightType::f32 ? "f32" : t == WeightType::f16 ? "f16" : "bf16";
}

class GemmKernelTest : public ::testing::TestWithParam<std::tuple<GemmKernel, WeightType>> {
 protected:
  void SetUp() override {
    if (!gemm_kernel_available(std::get<0>(GetParam())))
      GTEST_SKIP() << gemm_kernel_name(std::get<0>(GetParam())) << " kernels not available on this CPU";
  }
  void check(const std::vector<Case>& cases, std::uint32_t seed) {
    const auto [kernel, type] = GetParam();
    std::mt19937 rng(seed);
    ThreadPool pool2(2), pool3(3);
    for (const Case& c : cases) {
      ThreadPool* pool = c.threads == 2 ? &pool2 : c.threads == 3 ? &pool3 : nullptr;
      const double rel = run_case(kernel, type, c, rng, pool);
      EXPECT_LE(rel, 1e-5) << gemm_kernel_name(kernel) << " " << type_name(type) << " m=" << c.m << " k=" << c.k
                           << " n=" << c.n << " ldx=" << c.k + c.ldx_pad << " ldy=" << c.n + c.ldy_pad
                           << " acc=" << c.accumulate << " threads=" << c.threads;
      if (HasFailure()) return;
    }
  }
};

// m = 1..17, 64, 100 (both sides of every kernel's small-m bound and of the micro-tile heights),
// k and n that are not multiples of any vector width, with and without padding, accumulate, threads.
TEST_P(GemmKernelTest, ManyShapesAgainstDoubleReference) {
  std::vector<std::size_t> ms;
  for (std::size_t m = 1; m <= 17; ++m) ms.push_back(m);
  ms.push_back(64);
  ms.push_back(100);
  const std::size_t kn[][2] = {{1, 1}, {7, 5}, {17, 33}, {33, 31}, {100, 67}, {129, 47}};
  std::vector<Case> cases;
  std::size_t variant = 0;
  for (std::size_t m : ms)
    for (const auto& s : kn) {
      ++variant;
      cases.push_back({m, s[0], s[1], variant % 3 == 0 ? 0u : variant % 5 + 1, variant % 2 ? 3u : 0u,
                       variant % 4 == 1, variant % 3});
    }
  check(cases, 1234);
}

// Blocks larger than the packing block sizes: k past several k blocks with a tail, n past one n block.
TEST_P(GemmKernelTest, LargeBlocksAndThreads) {
  check({{1, 1030, 600, 0, 0, false, 2},
         {3, 600, 515, 5, 1, true, 3},
         {9, 1030, 77, 0, 0, false, 0},
         {40, 600, 600, 2, 7, false, 2},
         {100, 530, 530, 0, 0, true, 3},
         {13, 257, 1100, 1, 0, false, 2}},
        99);
}

// Fresh random inputs on every run of the test binary (the seed is printed on failure).
TEST_P(GemmKernelTest, FreshRandomShapes) {
  const std::uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::size_t> m(1, 40), k(1, 300), n(1, 200), pad(0, 4), thr(0, 3);
  std::vector<Case> cases;
  for (int i = 0; i < 12; ++i) cases.push_back({m(rng), k(rng), n(rng), pad(rng), pad(rng), pad(rng) % 2 == 1, thr(rng) % 3});
  check(cases, seed + 1);
}

INSTANTIATE_TEST_SUITE_P(
    AllKernels, GemmKernelTest,
    ::testing::Combine(::testing::Values(GemmKernel::scalar, GemmKernel::avx2, GemmKernel::avx512, GemmKernel::amx,
                                         GemmKernel::bf16),
                       ::testing::Values(WeightType::f32, WeightType::f16, WeightType::bf16)),
    [](const auto& info) {
      return std::string(gemm_kernel_name(std::get<0>(info.param))) + "_" + type_name(std::get<1>(info.param));
    });

// f16 subnormals and extreme normals, decoded exactly: x = 1 selects a single weight per output.
TEST(Gemm, F16SpecialValuesDecodeExactly) {
  const std::vector<std::uint16_t> w = {0x0001, 0x03ff, 0x8001, 0x0400, 0x7bff, 0xfbff, 0x3c00, 0x0000, 0x8000};
  for (GemmKernel kernel : {GemmKernel::scalar, GemmKernel::avx2, GemmKernel::avx512, GemmKernel::amx}) {  // bf16 rounds W
    if (!gemm_kernel_available(kernel)) continue;
    for (std::size_t k : {1u, 3u, 17u}) {  // the weight sits at column 0; other columns are zero
      std::vector<std::uint16_t> wk(w.size() * k, 0);
      for (std::size_t j = 0; j < w.size(); ++j) wk[j * k] = w[j];
      const std::vector<float> x(k, 1.f);
      std::vector<float> y(w.size(), std::numeric_limits<float>::quiet_NaN());
      gemm(kernel, x.data(), 1, k, k, wk.data(), WeightType::f16, w.size(), y.data(), w.size(), nullptr);
      for (std::size_t j = 0; j < w.size(); ++j)
        EXPECT_EQ(static_cast<double>(y[j]), f16_value(w[j])) << gemm_kernel_name(kernel) << " j=" << j << " k=" << k;
    }
  }
}

TEST(Gemm, DefaultKernelIsTheWidestAvailable) {
  const CpuFeatures f = detect_cpu_features();
  GemmKernel expected = f.avx512 ? GemmKernel::avx512 : f.avx2 ? GemmKernel::avx2 : GemmKernel::scalar;
  if (const char* want = std::getenv("QUARRY_CPU_KERNELS"))
    for (GemmKernel k : {GemmKernel::scalar, GemmKernel::avx2, GemmKernel::avx512, GemmKernel::amx, GemmKernel::bf16})
      if (std::string(want) == gemm_kernel_name(k) && gemm_kernel_available(k)) expected = k;
  EXPECT_EQ(gemm_default_kernel(), expected);
  EXPECT_STREQ(gemm_kernel_name(), gemm_kernel_name(expected));
  EXPECT_TRUE(gemm_kernel_available(GemmKernel::scalar));
  if (f.avx512) {
    EXPECT_TRUE(f.avx2);
  }
}

TEST(Gemm, DefaultEntryPointMatchesExplicitKernel) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  const std::size_t m = 20, k = 70, n = 45;
  std::vector<float> x(m * k), w(n * k), y1(m * n), y2(m * n);
  for (auto& v : x) v = uni(rng);
  for (auto& v : w) v = uni(rng);
  ThreadPool pool(2);
  gemm(x.data(), m, k, k, w.data(), WeightType::f32, n, y1.data(), n, &pool);
  gemm(gemm_default_kernel(), x.data(), m, k, k, w.data(), WeightType::f32, n, y2.data(), n, nullptr);
  EXPECT_EQ(y1, y2);  // same kernel, same summation order whatever the thread split
}

// Speculative verification is lossless only if a row of y is the same bits whether its row of x is
// multiplied alone (decode) or among the few rows of a verify step: checked for every GEMV path.
TEST(Gemm, SmallMRowsDoNotDependOnTheOtherRows) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  for (GemmKernel kernel : {GemmKernel::scalar, GemmKernel::avx2, GemmKernel::avx512, GemmKernel::amx, GemmKernel::bf16}) {
    if (!gemm_kernel_available(kernel)) continue;
    for (WeightType type : {WeightType::f32, WeightType::bf16}) {
      for (std::size_t k : {256u, 768u, 2100u, 4500u}) {
        const std::size_t n = 37;
        Weights w = make_weights(type, n * k, rng);
        std::vector<float> x(16 * k);
        for (auto& v : x) v = uni(rng);
        std::vector<float> one(n);
        for (std::size_t m : {2u, 5u, 9u, 12u}) {  // up to the smallest GEMV bound (avx2: 12)
          std::vector<float> y(m * n);
          gemm(kernel, x.data(), m, k, k, w.data(), type, n, y.data(), n, nullptr);
          for (std::size_t i = 0; i < m; ++i) {
            gemm(kernel, x.data() + i * k, 1, k, k, w.data(), type, n, one.data(), n, nullptr);
            for (std::size_t j = 0; j < n; ++j)
              ASSERT_EQ(one[j], y[i * n + j]) << gemm_kernel_name(kernel) << " " << type_name(type) << " k " << k
                                              << " m " << m << " row " << i << " col " << j;
          }
        }
      }
    }
  }
}

// Weights packed once: the bf16 reference (x and W rounded), leading column slices, accumulation,
// threads, and rows independent of m.
TEST(Gemm, PackedBf16MatchesTheRoundedReference) {
  if (!packed_bf16_available()) GTEST_SKIP() << "neither AMX-BF16 nor AVX512_BF16 here";
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  ThreadPool pool(2);
  for (WeightType type : {WeightType::f32, WeightType::f16, WeightType::bf16})
    for (const auto& [m, k, n] : {std::array<std::size_t, 3>{1, 256, 300}, {5, 70, 33}, {17, 768, 130},
                                  {40, 33, 16}, {3, 2100, 64}}) {
      Weights w = make_weights(type, n * k, rng);
      const PackedBf16 p = pack_bf16(w.data(), type, n, k, &pool);
      std::vector<float> x(m * (k + 3));
      for (auto& v : x) v = uni(rng);
      for (std::size_t use : {n, n / 2 + 1}) {
        for (bool acc : {false, true}) {
          const std::size_t ldy = use + 2;
          std::vector<float> y(m * ldy, 0.5f);
          gemm_packed(x.data(), m, k + 3, p, use, y.data(), ldy, use % 2 ? &pool : nullptr, acc);
          double err = 0, norm = 0;
          for (std::size_t i = 0; i < m; ++i) {
            for (std::size_t j = 0; j < use; ++j) {
              double s = acc ? 0.5 : 0.0;
              for (std::size_t q = 0; q < k; ++q)
                s += round_to_bf16(x[i * (k + 3) + q]) * round_to_bf16(static_cast<float>(w.value[j * k + q]));
              err += (y[i * ldy + j] - s) * (y[i * ldy + j] - s);
              norm += s * s;
            }
            for (std::size_t j = use; j < ldy; ++j) ASSERT_EQ(y[i * ldy + j], 0.5f) << "stray write";
          }
          EXPECT_LT(std::sqrt(err / norm), 1e-5) << type_name(type) << " m " << m << " k " << k << " n " << use;
        }
      }
      std::vector<float> all(m * n), one(n);
      gemm_packed(x.data(), m, k + 3, p, n, all.data(), n, &pool);
      for (std::size_t i = 0; i < m; ++i) {
        gemm_packed(x.data() + i * (k + 3), 1, k + 3, p, n, one.data(), n, nullptr);
        for (std::size_t j = 0; j < n; ++j) ASSERT_EQ(one[j], all[i * n + j]) << "row " << i << " col " << j;
      }
    }
  EXPECT_THROW(gemm_packed(nullptr, 1, 8, PackedBf16{{}, 4, 8}, 5, nullptr, 5, nullptr), std::invalid_argument);
}

// Only some column groups: bit-identical to the full packed product there, nothing written elsewhere
// (the LM head restricted to the groups a grammar allows).
TEST(Gemm, PackedGroupsEqualTheFullProductBitForBit) {
  if (!packed_bf16_available()) GTEST_SKIP() << "neither AMX-BF16 nor AVX512_BF16 here";
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  ThreadPool pool(2);
  for (const auto& [m, k, n] : {std::array<std::size_t, 3>{1, 256, 300}, {5, 70, 170}, {17, 768, 1000}}) {
    Weights w = make_weights(WeightType::bf16, n * k, rng);
    const PackedBf16 p = pack_bf16(w.data(), WeightType::bf16, n, k, &pool);
    std::vector<float> x(m * k);
    for (auto& v : x) v = uni(rng);
    std::vector<float> full(m * n);
    gemm_packed(x.data(), m, k, p, n, full.data(), n, &pool);
    const std::size_t n_groups = (n + 15) / 16;
    for (const std::vector<std::uint32_t>& groups :
         {std::vector<std::uint32_t>{0}, std::vector<std::uint32_t>{1, 2, 3, 7, static_cast<std::uint32_t>(n_groups - 1)},
          [&] {  // every other group: many runs, split over the pool
            std::vector<std::uint32_t> g;
            for (std::uint32_t i = 0; i < n_groups; i += 2) g.push_back(i);
            return g;
          }()}) {
      for (ThreadPool* tp : {static_cast<ThreadPool*>(nullptr), &pool}) {
        std::vector<float> y(m * n, -7.f);
        gemm_packed_groups(x.data(), m, k, p, n, groups, y.data(), n, tp);
        std::vector<char> in(n_groups, 0);
        for (auto g : groups) in[g] = 1;
        for (std::size_t i = 0; i < m; ++i)
          for (std::size_t j = 0; j < n; ++j) {
            if (in[j / 16]) ASSERT_EQ(y[i * n + j], full[i * n + j]) << "m " << m << " row " << i << " col " << j;
            else ASSERT_EQ(y[i * n + j], -7.f) << "stray write at row " << i << " col " << j;
          }
      }
    }
    const std::vector<std::uint32_t> unsorted{2, 1}, outside{static_cast<std::uint32_t>(n_groups)};
    std::vector<float> y(m * n);
    EXPECT_THROW(gemm_packed_groups(x.data(), m, k, p, n, unsorted, y.data(), n, nullptr), std::invalid_argument);
    EXPECT_THROW(gemm_packed_groups(x.data(), m, k, p, n, outside, y.data(), n, nullptr), std::invalid_argument);
  }
}

TEST(Gemm, ZeroKZeroesOrKeepsY) {
  std::vector<float> y(6, 5.f);
  gemm(nullptr, 2, 0, 0, nullptr, WeightType::bf16, 3, y.data(), 3, nullptr, /*accumulate=*/true);
  EXPECT_EQ(y, std::vector<float>(6, 5.f));
  gemm(nullptr, 2, 0, 0, nullptr, WeightType::bf16, 3, y.data(), 3, nullptr);
  EXPECT_EQ(y, std::vector<float>(6, 0.f));
  gemm(nullptr, 0, 4, 4, nullptr, WeightType::bf16, 3, nullptr, 3, nullptr);  // m == 0: nothing to do
}

TEST(Gemm, RejectsBadArguments) {
  std::vector<float> x(16, 1.f), w(16, 1.f), y(16);
  EXPECT_THROW(gemm(x.data(), 2, 4, 3, w.data(), WeightType::f32, 2, y.data(), 2, nullptr), std::invalid_argument);
  EXPECT_THROW(gemm(x.data(), 2, 4, 4, w.data(), WeightType::f32, 3, y.data(), 2, nullptr), std::invalid_argument);
  EXPECT_THROW(gemm(nullptr, 2, 4, 4, w.data(), WeightType::f32, 2, y.data(), 2, nullptr), std::invalid_argument);
  EXPECT_THROW(gemm(x.data(), 2, 4, 4, nullptr, WeightType::f32, 2, y.data(), 2, nullptr), std::invalid_argument);
  EXPECT_THROW(gemm(x.data(), 2, 4, 4, w.data(), WeightType::f32, 2, nullptr, 2, nullptr), std::invalid_argument);
  for (GemmKernel kernel : {GemmKernel::avx2, GemmKernel::avx512, GemmKernel::amx, GemmKernel::bf16})
    if (!gemm_kernel_available(kernel)) {
      EXPECT_THROW(gemm(kernel, x.data(), 2, 4, 4, w.data(), WeightType::f32, 2, y.data(), 2, nullptr),
                   std::invalid_argument);
    }
}

}  // namespace
