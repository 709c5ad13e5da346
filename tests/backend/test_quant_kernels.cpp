// Quantized-weight kernels (engine/backend/cpu/quant.hpp) on every instruction set this CPU runs
// (scalar, avx2, avx512; the wider sets forced down one by one): dequantized values bit-identical to the
// one-rounding products the test computes from its own random integers and scales, and products against
// a double reference; the FP8 E4M3 conversions over all 256 codes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/backend.hpp"
#include "engine/backend/cpu/gemm.hpp"
#include "engine/backend/cpu/quant_kernels.hpp"
#include "engine/backend/cpu/quant.hpp"
#include "engine/backend/cpu/thread_pool.hpp"
#include "engine/core/dtype.hpp"
#include "quant_cases.hpp"

namespace quarry::engine {
namespace {

using cpu::GemmKernel;
using testing::Case;
using testing::gptq_case;
using testing::rows_case;

std::vector<GemmKernel> kernel_sets() {
  std::vector<GemmKernel> k;
  for (auto s : {GemmKernel::scalar, GemmKernel::avx2, GemmKernel::avx512})
    if (cpu::gemm_kernel_available(s)) k.push_back(s);
  return k;
}

std::vector<Case> cases() {
  std::vector<Case> v;
  v.push_back(gptq_case("gptq4_sym_g32", 40, 96, 4, 32, false, false, 1));
  v.push_back(gptq_case("gptq4_asym_g24", 24, 72, 4, 24, false, true, 2));  // groups not a multiple of 16
  v.push_back(gptq_case("gptq4_asym_desc_act_g16", 33, 128, 4, 16, true, true, 3));
  v.push_back(gptq_case("gptq4_channel", 16, 136, 4, 136, false, true, 4));   // one group, K % 16 = 8
  v.push_back(gptq_case("gptq4_g32_tail", 48, 72, 4, 32, false, true, 15));  // last group partial, K % 16 = 8
  v.push_back(gptq_case("gptq8_asym_g32", 20, 64, 8, 32, false, true, 5));
  v.push_back(gptq_case("gptq8_desc_act_g8", 17, 40, 8, 8, true, false, 6));
  v.push_back(rows_case("int8_channel", 37, 200, QuantElement::int8, 1, 200, 7));
  v.push_back(rows_case("int8_g32", 19, 96, QuantElement::int8, 1, 32, 8));
  v.push_back(rows_case("int8_g24", 9, 72, QuantElement::int8, 1, 24, 9));
  v.push_back(rows_case("int8_g32_tail", 18, 72, QuantElement::int8, 1, 32, 16));
  v.push_back(rows_case("fp8_block128", 200, 264, QuantElement::fp8_e4m3, 128, 128, 10));
  v.push_back(rows_case("fp8_channel", 21, 48, QuantElement::fp8_e4m3, 1, 48, 11));
  v.push_back(rows_case("fp8_tensor", 5, 40, QuantElement::fp8_e4m3, 5, 40, 12));
  v.push_back(rows_case("int4_rows_g32", 23, 96, QuantElement::int4, 1, 32, 13));
  v.push_back(rows_case("int4_rows_channel", 7, 56, QuantElement::int4, 1, 56, 14));
  return v;
}

TEST(QuantKernels, DequantizedRowsAreTheOneRoundingProductsOnEverySet) {
  for (const auto& c : cases()) {
    const cpu::QuantWeight w = cpu::make_quant_weight(c.q);
    for (const auto k : kernel_sets()) {
      std::vector<float> got(c.want.size(), -1.f);
      cpu::quant_dequant_rows(k, w, 0, c.q.rows, got.data());
      EXPECT_EQ(std::memcmp(got.data(), c.want.data(), got.size() * 4), 0) << c.name << " on " << cpu::gemm_kernel_name(k);
      // A middle range of rows lands at the start of the output.
      const std::size_t j0 = c.q.rows / 3, j1 = c.q.rows - 1;
      std::vector<float> part((j1 - j0) * c.q.cols);
      cpu::quant_dequant_rows(k, w, j0, j1, part.data());
      EXPECT_EQ(std::memcmp(part.data(), c.want.data() + j0 * c.q.cols, part.size() * 4), 0)
          << c.name << " rows " << j0 << ".." << j1 << " on " << cpu::gemm_kernel_name(k);
    }
  }
}

TEST(QuantKernels, ProductsMatchDoubleReferenceAndTheDequantizedF32Product) {
  ThreadPool pool(2);
  std::mt19937 rng(99);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (const auto& c : cases()) {
    const cpu::QuantWeight w = cpu::make_quant_weight(c.q);
    const std::size_t N = c.q.rows, K = c.q.cols;
    for (const std::size_t m : {1u, 3u, 17u, 40u}) {
      const std::size_t ldx = K + 3, n = N - N / 4, ldy = N + 1;  // strides wider than rows; a leading slice
      std::vector<float> x(m * ldx);
      for (auto& v : x) v = nd(rng);
      for (const auto k : kernel_sets()) {
        std::vector<float> y(m * ldy, 7.f), dense(m * ldy, 7.f);
        cpu::QuantScratch scratch;
        cpu::quant_gemm(k, x.data(), m, ldx, w, n, y.data(), ldy, &pool, scratch);
        cpu::gemm(cpu::quant_kernel_for(k), x.data(), m, K, ldx, c.want.data(), DType::f32, n, dense.data(), ldy, &pool);
        for (std::size_t i = 0; i < m; ++i) {
          for (std::size_t j = 0; j < n; ++j) {
            double ref = 0, mag = 0;
            for (std::size_t p = 0; p < K; ++p) {
              ref += static_cast<double>(x[i * ldx + p]) * c.want[j * K + p];
              mag += std::fabs(static_cast<double>(x[i * ldx + p]) * c.want[j * K + p]);
            }
            const float got = y[i * ldy + j];
            ASSERT_NEAR(got, ref, 2e-6 * mag + 1e-30)
                << c.name << " m " << m << " [" << i << ", " << j << "] on " << cpu::gemm_kernel_name(k);
            ASSERT_EQ(got, dense[i * ldy + j])
                << c.name << " m " << m << " [" << i << ", " << j << "] differs from the f32 product on "
                << cpu::gemm_kernel_name(k);
          }
          for (std::size_t j = n; j < ldy; ++j) ASSERT_EQ(y[i * ldy + j], 7.f) << c.name << ": wrote past n";
        }
      }
    }
  }
}

// bf16 compute: GPTQ int4 and int8-row decode products with int8 activations (VNNI where present). The
// error of a product is bounded by the activation rounding: |x - xs x_q| <= xs / 2 per element, xs =
// absmax / 127 of the element's block (the weight group; 128 columns for int8 rows), times |W| summed;
// the exact path stays exact.
TEST(QuantKernels, Int8ActivationProductsWithinTheActivationRounding) {
  ThreadPool pool(2);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (const auto& c : {gptq_case("vnni_sym_g32", 600, 128, 4, 32, false, false, 21),
                        gptq_case("vnni_asym_g64", 37, 192, 4, 64, false, true, 22),
                        gptq_case("vnni_tail_g40", 530, 80, 4, 40, false, true, 23),
                        rows_case("vnni_int8_channel", 130, 384, QuantElement::int8, 1, 384, 24),
                        rows_case("vnni_int8_g128", 70, 256, QuantElement::int8, 1, 128, 25)}) {
    cpu::QuantWeight w = cpu::make_quant_weight(c.q);
    w.bf16_compute = true;
    const std::size_t N = c.q.rows, K = c.q.cols;
    const std::size_t gs = c.q.layout == QuantLayout::gptq ? c.q.group_size : 128;
    for (const std::size_t m : {1u, 2u, 4u}) {
      std::vector<float> x(m * K);
      for (auto& v : x) v = nd(rng);
      x[3] = 0.f;
      for (const auto k : kernel_sets()) {
        std::vector<float> y(m * N, 7.f);
        cpu::QuantScratch scratch;
        cpu::quant_gemm(k, x.data(), m, K, w, N, y.data(), N, &pool, scratch);
        const bool vnni = cpu::quant_uses_vnni(k, w, m);
        for (std::size_t i = 0; i < m; ++i)
          for (std::size_t j = 0; j < N; ++j) {
            double ref = 0, bound = 0, mag = 0;
            for (std::size_t g = 0; g * gs < K; ++g) {
              float amax = 0.f;
              for (std::size_t p = g * gs; p < std::min(K, (g + 1) * gs); ++p) amax = std::max(amax, std::fabs(x[i * K + p]));
              for (std::size_t p = g * gs; p < std::min(K, (g + 1) * gs); ++p) {
                const double wv = c.want[j * K + p];
                ref += static_cast<double>(x[i * K + p]) * wv;
                mag += std::fabs(static_cast<double>(x[i * K + p]) * wv);
                bound += std::fabs(wv) * amax / 127.0 / 2.0;
              }
            }
            const double tol = vnni ? bound * 1.01 + 1e-5 * mag : 2e-6 * mag + 1e-30;
            ASSERT_NEAR(y[i * N + j], ref, tol) << c.name << " m " << m << " [" << i << ", " << j << "] on "
                                                << cpu::gemm_kernel_name(k) << (vnni ? " (vnni)" : "");
          }
      }
    }
  }
}

// bf16 compute: FP8 rows against activations rounded to bf16 (AVX512_BF16 where present): within the
// rounding of x (2^-9 relative) plus f32 accumulation; the FP8 values themselves widen exactly.
TEST(QuantKernels, Fp8Bf16ActivationProductsWithinTheActivationRounding) {
  ThreadPool pool(2);
  std::mt19937 rng(8);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (const auto& c : {rows_case("bf16_fp8_block128", 200, 256, QuantElement::fp8_e4m3, 128, 128, 31),
                        rows_case("bf16_fp8_channel", 67, 96, QuantElement::fp8_e4m3, 1, 96, 32),
                        rows_case("bf16_fp8_g32", 9, 64, QuantElement::fp8_e4m3, 1, 32, 33)}) {
    cpu::QuantWeight w = cpu::make_quant_weight(c.q);
    w.bf16_compute = true;
    const std::size_t N = c.q.rows, K = c.q.cols;
    for (const std::size_t m : {1u, 3u}) {
      std::vector<float> x(m * K);
      for (auto& v : x) v = nd(rng);
      for (const auto k : kernel_sets()) {
        std::vector<float> y(m * N, 7.f);
        cpu::QuantScratch scratch;
        cpu::quant_gemm(k, x.data(), m, K, w, N, y.data(), N, &pool, scratch);
        const bool fast = cpu::quant_uses_bf16(k, w, m);
        for (std::size_t i = 0; i < m; ++i)
          for (std::size_t j = 0; j < N; ++j) {
            double ref = 0, mag = 0;
            for (std::size_t p = 0; p < K; ++p) {
              ref += static_cast<double>(x[i * K + p]) * c.want[j * K + p];
              mag += std::fabs(static_cast<double>(x[i * K + p]) * c.want[j * K + p]);
            }
            const double tol = fast ? mag * (std::ldexp(1.0, -9) + 1e-5) : 2e-6 * mag + 1e-30;
            ASSERT_NEAR(y[i * N + j], ref, tol) << c.name << " m " << m << " [" << i << ", " << j << "] on "
                                                << cpu::gemm_kernel_name(k) << (fast ? " (bf16)" : "");
          }
      }
    }
  }
}

// The bf16 FP8 kernels widen every code exactly: one-hot activations (exact in bf16) pick single weights.
// 32 columns take the 32-value kernel, 128 the 64-value one where AVX512_VBMI is present (interleaved
// activations: a wrong order picks another weight).
TEST(QuantKernels, Fp8Bf16KernelWidensEveryCodeExactly) {
  for (const std::size_t K : {32u, 128u}) {
    std::vector<std::uint8_t> codes(8 * K);
    for (std::size_t i = 0; i < codes.size(); ++i)
      codes[i] = ((i * 37) & 0x7f) == 0x7f ? 0 : static_cast<std::uint8_t>(i * 37);  // every code
    std::vector<float> scales = {1.f, 0.5f, 2.f, 0.25f, 1.f, 3.f, 1.f, 0.125f};
    QuantizedMatrix q;
    q.rows = 8;
    q.cols = K;
    q.layout = QuantLayout::rows;
    q.element = QuantElement::fp8_e4m3;
    q.data = codes.data();
    q.scales = scales;
    q.block_rows = 1;
    q.block_cols = K;
    cpu::QuantWeight w = cpu::make_quant_weight(q);
    w.bf16_compute = true;
    for (const auto k : kernel_sets())
      for (std::size_t p = 0; p < K; ++p) {
        std::vector<float> x(K, 0.f), y(8);
        x[p] = 1.f;
        cpu::QuantScratch scratch;
        cpu::quant_gemm(k, x.data(), 1, K, w, 8, y.data(), 8, nullptr, scratch);
        for (std::size_t j = 0; j < 8; ++j)
          ASSERT_EQ(y[j], fp8_e4m3_to_f32(codes[j * K + p]) * scales[j])
              << "code " << int(codes[j * K + p]) << " column " << p << " of " << K << " on "
              << cpu::gemm_kernel_name(k) << (cpu::quant_uses_bf16(k, w, 1) ? " (bf16)" : "");
      }
  }
}

// bf16 compute, prefill-sized m: the dequantized weights and x rounded to bf16 (gemm_packed), within
// the two roundings (2^-8 relative each) of the double reference.
TEST(QuantKernels, Bf16PrefillProductsWithinBf16Rounding) {
  ThreadPool pool(2);
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (const auto& c : cases()) {
    cpu::QuantWeight w = cpu::make_quant_weight(c.q);
    w.bf16_compute = true;
    const std::size_t N = c.q.rows, K = c.q.cols, m = 37;
    std::vector<float> x(m * K);
    for (auto& v : x) v = nd(rng);
    for (const auto k : kernel_sets()) {
      std::vector<float> y(m * N, 7.f);
      cpu::QuantScratch scratch;
      cpu::quant_gemm(k, x.data(), m, K, w, N, y.data(), N, &pool, scratch);
      for (std::size_t i = 0; i < m; ++i)
        for (std::size_t j = 0; j < N; ++j) {
          double ref = 0, mag = 0;
          for (std::size_t p = 0; p < K; ++p) {
            ref += static_cast<double>(x[i * K + p]) * c.want[j * K + p];
            mag += std::fabs(static_cast<double>(x[i * K + p]) * c.want[j * K + p]);
          }
          ASSERT_NEAR(y[i * N + j], ref, mag * (std::ldexp(1.0, -7) + 1e-5))
              << c.name << " [" << i << ", " << j << "] on " << cpu::gemm_kernel_name(k);
        }
    }
  }
}

// The same prefill product has the bits of the bf16 checkpoint's path: the dequantized rows packed whole
// (pack_bf16) and gemm_packed over them, x rounded once; the quantized path packs 128 rows at a time and
// rounds x once for all its blocks (round_x_packed, gemm_packed_rounded). Also 300 rows (a short last
// block) and a row count that is not a multiple of 16.
TEST(QuantKernels, Bf16PrefillProductsHaveTheBitsOfTheDequantizedPackedProduct) {
  if (!cpu::packed_bf16_available() || !cpu::gemm_kernel_available(GemmKernel::avx512))
    GTEST_SKIP() << "no AMX-BF16 or AVX512_BF16 here";
  ThreadPool pool(2);
  std::mt19937 rng(19);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<Case> cs = cases();
  cs.push_back(rows_case("int8_300", 300, 256, QuantElement::int8, 1, 256, 77));
  cs.push_back(gptq_case("gptq4_137", 137, 256, 4, 64, false, true, 78));
  for (const auto& c : cs) {
    cpu::QuantWeight w = cpu::make_quant_weight(c.q);
    w.bf16_compute = true;
    const std::size_t N = c.q.rows, K = c.q.cols, m = 37;
    std::vector<float> x(m * K);
    for (auto& v : x) v = nd(rng);
    std::vector<float> got(m * N, 7.f), want(m * N, -7.f), deq(N * K);
    cpu::QuantScratch scratch;
    cpu::quant_gemm(GemmKernel::avx512, x.data(), m, K, w, N, got.data(), N, &pool, scratch);
    cpu::quant_dequant_rows(GemmKernel::avx512, w, 0, N, deq.data());
    const cpu::PackedBf16 pk = cpu::pack_bf16(deq.data(), DType::f32, N, K, &pool);
    cpu::gemm_packed(x.data(), m, K, pk, N, want.data(), N, &pool);
    ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << c.name;
  }
}

// The prefill path's direct dequantization into bf16 tiles (no f32 rows): the same tiles as dequantizing to
// f32 and packing, for every layout it takes, over the whole matrix and from a group inside it; FP8 with
// every byte code planted (the NaN codes included); false and nothing written where it does not apply.
TEST(QuantKernels, RowsDequantizedIntoTilesHaveTheBitsOfPackingTheDequantizedRows) {
  if (!cpu::packed_bf16_available() || !cpu::gemm_kernel_available(GemmKernel::avx512))
    GTEST_SKIP() << "no AMX-BF16 or AVX512_BF16 here";
  std::vector<Case> cs;
  cs.push_back(gptq_case("gptq4_sym_g32", 48, 256, 4, 32, false, false, 31));
  cs.push_back(gptq_case("gptq4_asym_g64", 32, 384, 4, 64, false, true, 32));
  cs.push_back(gptq_case("gptq4_asym_g128", 144, 256, 4, 128, false, true, 33));
  cs.push_back(rows_case("int8_channel", 48, 320, QuantElement::int8, 1, 320, 34));
  cs.push_back(rows_case("int8_g32", 32, 256, QuantElement::int8, 1, 32, 35));
  cs.push_back(rows_case("fp8_block128", 160, 384, QuantElement::fp8_e4m3, 128, 128, 36));
  cs.push_back(rows_case("int4_rows_g32", 32, 256, QuantElement::int4, 1, 32, 41));
  cs.push_back(rows_case("int4_rows_channel", 48, 128, QuantElement::int4, 1, 128, 42));
  cs.push_back(rows_case("fp8_channel_all_codes", 16, 512, QuantElement::fp8_e4m3, 1, 512, 37));
  for (std::size_t i = 0; i < 16 * 512; ++i) cs.back().bytes[i] = static_cast<std::uint8_t>(i * 7);
  for (const auto& c : cs) {
    const cpu::QuantWeight w = cpu::make_quant_weight(c.q);
    const std::size_t N = c.q.rows, K = c.q.cols, tiles = K / 32 * 512;
    std::vector<float> deq(N * K);
    cpu::quant_dequant_rows(GemmKernel::avx512, w, 0, N, deq.data());
    const cpu::PackedBf16 want = cpu::pack_bf16(deq.data(), DType::f32, N, K, nullptr);
    std::vector<std::uint16_t> got(N / 16 * tiles, 0x5555);
    ASSERT_TRUE(cpu::detail::dequant_pack_bf16_avx512(w.view, 0, N, got.data())) << c.name;
    ASSERT_EQ(want.data.size(), got.size()) << c.name;
    EXPECT_TRUE(std::equal(got.begin(), got.end(), want.data.begin())) << c.name;
    std::vector<std::uint16_t> part((N - 16) / 16 * tiles, 0x5555);  // empty for 16 rows
    ASSERT_TRUE(cpu::detail::dequant_pack_bf16_avx512(w.view, 16, N, part.data())) << c.name;
    EXPECT_TRUE(std::equal(part.begin(), part.end(), want.data.begin() + tiles)) << c.name;
  }
  const Case desc = gptq_case("gptq4_desc_act", 32, 128, 4, 32, true, false, 38);
  const Case g16 = gptq_case("gptq4_g16", 32, 128, 4, 16, false, false, 39);
  const Case k40 = rows_case("int8_k40", 32, 40, QuantElement::int8, 1, 40, 40);
  for (const Case* c : {&desc, &g16, &k40}) {
    const cpu::QuantWeight w = cpu::make_quant_weight(c->q);
    std::vector<std::uint16_t> out(2 * 4 * 512, 0x5555);
    EXPECT_FALSE(cpu::detail::dequant_pack_bf16_avx512(w.view, 0, 32, out.data())) << c->name;
    EXPECT_FALSE(cpu::detail::dequant_pack_bf16_avx512(w.view, 0, 24, out.data())) << c->name << " (24 rows)";
    EXPECT_EQ(out, std::vector<std::uint16_t>(2 * 4 * 512, 0x5555)) << c->name;
  }
}

TEST(QuantKernels, RejectsBadShapesAndTables) {
  Case c = gptq_case("bad", 8, 32, 4, 16, false, false, 1);
  QuantizedMatrix q = c.q;
  q.n_groups = 3;
  EXPECT_THROW(cpu::make_quant_weight(q), std::invalid_argument);
  std::vector<std::int32_t> g(32, 0);
  g[5] = 2;  // only groups 0 and 1 exist
  q = c.q;
  q.g_idx = g;
  EXPECT_THROW(cpu::make_quant_weight(q), std::invalid_argument);
  std::vector<std::int16_t> z(c.zeros.size(), 17);  // above 2^4
  q = c.q;
  q.zeros = z;
  EXPECT_THROW(cpu::make_quant_weight(q), std::invalid_argument);
  const cpu::QuantWeight w = cpu::make_quant_weight(c.q);
  std::vector<float> x(32), y(8);
  cpu::QuantScratch s;
  EXPECT_THROW(cpu::quant_gemm(GemmKernel::scalar, x.data(), 1, 32, w, 9, y.data(), 9, nullptr, s), std::invalid_argument);
}

TEST(Fp8, AllCodesRoundTripAndKnownValues) {
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.f);
  EXPECT_EQ(fp8_e4m3_to_f32(0xfe), -448.f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), std::ldexp(1.f, -9));   // smallest subnormal
  EXPECT_EQ(fp8_e4m3_to_f32(0x08), std::ldexp(1.f, -6));   // smallest normal
  EXPECT_EQ(fp8_e4m3_to_f32(0x38), 1.f);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0xff)));
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) continue;
    const float f = fp8_e4m3_to_f32(static_cast<std::uint8_t>(b));
    const std::uint8_t back = f32_to_fp8_e4m3(f);
    if (b == 0x80) EXPECT_EQ(back, 0x80);
    else EXPECT_EQ(back, b) << "code " << b;
  }
  EXPECT_EQ(f32_to_fp8_e4m3(1e6f), 0x7e);    // saturates
  EXPECT_EQ(f32_to_fp8_e4m3(-1e6f), 0xfe);
  EXPECT_EQ(f32_to_fp8_e4m3(1.0625f), 0x38);  // halfway between 1 and 1.125: to even
  EXPECT_EQ(f32_to_fp8_e4m3(1.1875f), 0x3a);  // halfway between 1.125 and 1.25: to even (1.25)
  EXPECT_EQ(f32_to_fp8_e4m3(std::ldexp(1.f, -10)), 0x00);  // half the smallest subnormal: to even (0)
  // The SIMD conversions inside the kernels agree with this one on every code, NaN included.
  std::vector<std::uint8_t> codes(256);
  for (int b = 0; b < 256; ++b) codes[b] = static_cast<std::uint8_t>(b);
  std::vector<float> one(1, 1.f);
  QuantizedMatrix q;
  q.rows = 1;
  q.cols = 256;
  q.layout = QuantLayout::rows;
  q.element = QuantElement::fp8_e4m3;
  q.data = codes.data();
  q.scales = one;
  q.block_rows = 1;
  q.block_cols = 256;
  const cpu::QuantWeight w = cpu::make_quant_weight(q);
  for (const auto k : kernel_sets()) {
    std::vector<float> got(256);
    cpu::quant_dequant_rows(k, w, 0, 1, got.data());
    for (int b = 0; b < 256; ++b) {
      const float want = fp8_e4m3_to_f32(static_cast<std::uint8_t>(b));
      if (std::isnan(want)) EXPECT_TRUE(std::isnan(got[b])) << b;
      else EXPECT_EQ(got[b], want) << "code " << b << " on " << cpu::gemm_kernel_name(k);
    }
  }
}

}  // namespace
}  // namespace quarry::engine
