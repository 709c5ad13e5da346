// Every op of the backend under test (QUARRY_TEST_DEVICE: "cpu", or "cuda" in the gpu-labelled build of
// this file) against direct double-precision formulas and, for a backend other than the CPU, against the
// CPU backend's result on the same inputs (llama.cpp's test-backend-ops). Shapes of the real models
// (Qwen3-0.6B / -8B widths, GQA 2:1 and 4:1, head_dim 64 / 128, contexts past the CUDA backend's
// 512-position attention split) and odd sizes; weights in f32, f16 and bf16; exact and bf16 compute.
// Error measure: normalised mean squared error sum((a - b)^2) / sum(b^2), as test-backend-ops.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/backend.hpp"
#include "engine/core/rng.hpp"
#include "engine/memory/kv_cache.hpp"
#include "quant_cases.hpp"
#include "tests/common/device.hpp"

namespace quarry::engine {
namespace {

// ---------------------------------------------------------------------------------------------- helpers

std::vector<float> randn(std::size_t n, std::uint64_t seed, float scale = 1.f) {
  Rng r(seed);
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; i += 2) {  // Box-Muller
    const double u1 = std::max(r.uniform(), 1e-12), u2 = r.uniform();
    const double rad = std::sqrt(-2.0 * std::log(u1));
    v[i] = static_cast<float>(rad * std::cos(6.283185307179586 * u2)) * scale;
    if (i + 1 < n) v[i + 1] = static_cast<float>(rad * std::sin(6.283185307179586 * u2)) * scale;
  }
  return v;
}

std::uint16_t to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
float from_bf16(std::uint16_t h) {
  const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
std::uint16_t to_f16(float f) {  // round to nearest even, normal range only (test values are small)
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const int exp = static_cast<int>((u >> 23) & 0xff) - 127 + 15;
  std::uint32_t mant = u & 0x7fffffu;
  if (exp <= 0) return static_cast<std::uint16_t>(sign);
  std::uint32_t h = (static_cast<std::uint32_t>(exp) << 10) | (mant >> 13);
  const std::uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<std::uint16_t>(sign | h);
}
float from_f16(std::uint16_t h) {
  const std::uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  std::uint32_t u = exp == 0 ? sign : sign | ((exp + 127 - 15) << 23) | (mant << 13);
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// A weight matrix in a stored dtype plus its exact f32 values.
struct HostWeight {
  DType dtype;
  std::size_t rows, cols;
  std::vector<std::uint8_t> bytes;
  std::vector<float> values;  ///< the stored values widened
};

HostWeight make_weight(std::size_t rows, std::size_t cols, DType dt, std::uint64_t seed, float scale = 0.05f) {
  HostWeight w{dt, rows, cols, {}, randn(rows * cols, seed, scale)};
  w.bytes.resize(rows * cols * dtype_size(dt));
  for (std::size_t i = 0; i < rows * cols; ++i) {
    if (dt == DType::f32) {
      std::memcpy(w.bytes.data() + 4 * i, &w.values[i], 4);
    } else {
      const std::uint16_t h = dt == DType::bf16 ? to_bf16(w.values[i]) : to_f16(w.values[i]);
      w.values[i] = dt == DType::bf16 ? from_bf16(h) : from_f16(h);
      std::memcpy(w.bytes.data() + 2 * i, &h, 2);
    }
  }
  return w;
}

double nmse(const std::vector<float>& a, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(a[i])) return std::numeric_limits<double>::infinity();
    num += (a[i] - ref[i]) * (a[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den > 0 ? num / den : num;
}
double nmse(const std::vector<float>& a, const std::vector<float>& b) {
  return nmse(a, std::vector<double>(b.begin(), b.end()));
}

/// Device buffers of a backend from host vectors and back.
struct Dev {
  std::shared_ptr<Backend> be;
  DeviceBuffer put(const std::vector<float>& v) {
    DeviceBuffer b = be->alloc(std::max<std::size_t>(v.size(), 1) * sizeof(float));
    be->upload(b.data(), v.data(), v.size() * sizeof(float));
    return b;
  }
  DeviceBuffer put_ints(const std::vector<std::int32_t>& v) {
    DeviceBuffer b = be->alloc(std::max<std::size_t>(v.size(), 1) * sizeof(std::int32_t));
    be->upload(b.data(), v.data(), v.size() * sizeof(std::int32_t));
    return b;
  }
  DeviceBuffer zeros(std::size_t n, float poison = std::numeric_limits<float>::quiet_NaN()) {
    DeviceBuffer b = be->alloc(std::max<std::size_t>(n, 1) * sizeof(float));
    be->fill(b.as<float>(), n, poison);  // unwritten outputs show up as NaN
    return b;
  }
  std::vector<float> get(const DeviceBuffer& b, std::size_t n) {
    std::vector<float> v(n);
    be->download(v.data(), b.data(), n * sizeof(float));
    return v;
  }
};

class BackendOps : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::test_device_present()) GTEST_SKIP() << "no " << testing::test_device_name() << " device here";
    under_test_ = testing::test_backend(2);
    dev_ = Dev{under_test_};
    if (under_test_->device().kind != DeviceSpec::Kind::cpu) reference_ = Dev{make_backend({DeviceSpec{}, 2})};
  }
  bool has_reference() const { return reference_.be != nullptr; }
  std::shared_ptr<Backend> under_test_;
  Dev dev_, reference_;
};

// ---------------------------------------------------------------------------------------------- matmul

const StagedBatch& stage_positions(Backend& be, const std::vector<std::int32_t>& positions,
                                   std::vector<std::int32_t>& storage);

/// y = x . W^T through `d` with weight `w` loaded under `compute`; x [m, k] at stride ldx.
std::vector<float> run_matmul(Dev& d, const std::vector<float>& x, std::size_t m, std::size_t ldx, const HostWeight& w,
                              std::size_t n, Compute compute) {
  auto weight = d.be->load_matrix(w.bytes.data(), w.dtype, w.rows, w.cols, WeightUse::matmul,
                                  d.be->resolve_compute(compute, w.dtype));
  auto xb = d.put(x);
  auto yb = d.zeros(m * n);
  d.be->matmul(xb.as<float>(), m, ldx, *weight, n, yb.as<float>(), n);
  return d.get(yb, m * n);
}

std::vector<double> ref_matmul(const std::vector<float>& x, std::size_t m, std::size_t ldx, const HostWeight& w,
                               std::size_t n) {
  std::vector<double> y(m * n);
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      double s = 0;
      for (std::size_t p = 0; p < w.cols; ++p) s += static_cast<double>(x[i * ldx + p]) * w.values[j * w.cols + p];
      y[i * n + j] = s;
    }
  return y;
}

TEST_F(BackendOps, MatmulAllShapesDtypesAndComputeModes) {
  struct Shape {
    std::size_t m, n, k, ldx_pad, n_used;
  };
  const std::vector<Shape> shapes = {
      {1, 1024, 1024, 0, 1024},  // 0.6B q_proj, decode
      {3, 512, 1024, 0, 512},    // k_proj, a verify step
      {8, 96, 3072, 0, 96},      // down_proj slice, the GEMV path's largest batch
      {9, 200, 1024, 0, 200},    // first size past the GEMV path
      {64, 384, 512, 0, 384},    // prefill chunk
      {5, 77, 100, 4, 77},       // odd sizes, ldx > k
      {2, 300, 64, 0, 123},      // leading slice of the rows (a draft vocabulary)
      {130, 33, 40, 8, 33},      // odd everything
  };
  std::uint64_t seed = 1;
  for (const DType dt : {DType::f32, DType::f16, DType::bf16})
    for (const Compute compute : {Compute::exact, Compute::bf16})
      for (const auto& s : shapes) {
        const std::size_t ldx = s.k + s.ldx_pad;
        const HostWeight w = make_weight(s.n, s.k, dt, seed++);
        const auto x = randn(s.m * ldx, seed++);
        const Compute resolved = under_test_->resolve_compute(compute, dt);
        const auto got = run_matmul(dev_, x, s.m, ldx, w, s.n_used, compute);
        const auto ref = ref_matmul(x, s.m, ldx, w, s.n_used);
        // exact: f32 sums in another order; bf16: activations (and f32 weights) rounded to bf16.
        const double tol = resolved == Compute::exact ? 1e-10 : 2e-4;
        const std::string what = std::string(dtype_name(dt)) + " " + compute_name(resolved) + " m=" +
                                 std::to_string(s.m) + " n=" + std::to_string(s.n_used) + " k=" + std::to_string(s.k);
        EXPECT_LT(nmse(got, ref), tol) << what;
        if (has_reference() && resolved == Compute::exact) {
          const auto cpu = run_matmul(reference_, x, s.m, ldx, w, s.n_used, Compute::exact);
          EXPECT_LT(nmse(got, cpu), 1e-10) << what << " against the CPU backend";
        }
      }
}

TEST_F(BackendOps, FusedProductsEqualTheirPlainSequences) {
  // matmul_many (q, k, v), matmul_add (the residual), matmul_swiglu: decode sizes (one launch each on the
  // GPU) and a prefill size (cuBLAS / the tiled kernel), against dense double references.
  const std::size_t k = 512;
  std::uint64_t seed = 500;
  for (const Compute compute : {Compute::exact, Compute::bf16})
    for (const std::size_t m : {1u, 4u, 12u}) {
      const Compute resolved = under_test_->resolve_compute(compute, DType::bf16);
      const double tol = resolved == Compute::exact ? 1e-10 : 2e-4;
      const std::string what = std::string(compute_name(resolved)) + " m=" + std::to_string(m);
      const auto x = randn(m * k, seed++);
      auto xb = dev_.put(x);
      std::vector<HostWeight> hw = {make_weight(256, k, DType::bf16, seed++), make_weight(64, k, DType::bf16, seed++),
                                    make_weight(64, k, DType::bf16, seed++)};
      std::vector<std::unique_ptr<Weight>> w;
      for (const auto& h : hw)
        w.push_back(under_test_->load_matrix(h.bytes.data(), h.dtype, h.rows, h.cols, WeightUse::matmul, resolved));
      // matmul_many
      std::vector<DeviceBuffer> ys;
      std::vector<Backend::MatmulOut> outs;
      for (std::size_t i = 0; i < 3; ++i) {
        ys.push_back(dev_.zeros(m * hw[i].rows));
        outs.push_back({w[i].get(), ys.back().as<float>(), hw[i].rows});
      }
      under_test_->matmul_many(xb.as<float>(), m, k, outs);
      for (std::size_t i = 0; i < 3; ++i)
        EXPECT_LT(nmse(dev_.get(ys[i], m * hw[i].rows), ref_matmul(x, m, k, hw[i], hw[i].rows)), tol)
            << "matmul_many output " << i << " " << what;
      // matmul_add: y = y0 + x W^T
      const auto y0 = randn(m * 256, seed++);
      auto yb = dev_.put(y0);
      auto scratch = dev_.zeros(m * 256);
      under_test_->matmul_add(xb.as<float>(), m, k, *w[0], yb.as<float>(), 256, scratch.as<float>());
      auto ref = ref_matmul(x, m, k, hw[0], 256);
      for (std::size_t i = 0; i < ref.size(); ++i) ref[i] += y0[i];
      EXPECT_LT(nmse(dev_.get(yb, m * 256), ref), tol) << "matmul_add " << what;
      // matmul_swiglu with gate = weight 1, up = weight 2
      auto ob = dev_.zeros(m * 64), sb = dev_.zeros(m * 64);
      under_test_->matmul_swiglu(xb.as<float>(), m, k, *w[1], *w[2], ob.as<float>(), 64, sb.as<float>());
      const auto g = ref_matmul(x, m, k, hw[1], 64), u = ref_matmul(x, m, k, hw[2], 64);
      std::vector<double> sw(g.size());
      for (std::size_t i = 0; i < g.size(); ++i) sw[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
      EXPECT_LT(nmse(dev_.get(ob, m * 64), sw), tol * 4) << "matmul_swiglu " << what;
    }
}

TEST_F(BackendOps, QuantizedProductsEqualTheirDequantizedValues) {
  // Every packed layout (tests/backend/quant_cases.hpp) at widths the GPU's wide-load kernel takes (1024,
  // 2048: int8 per channel, int4 groups of 64, FP8 128x128 blocks, GPTQ int4 / int8 groups of 128, GPTQ
  // int4 with desc_act) and at odd ones (the CPU kernel tests' cases): decode rows (GEMV) and a prefill
  // block, exact compute, against double products of the values; and embedding rows of the packed table.
  std::vector<testing::Case> cs;
  std::uint32_t seed = 4000;
  for (const std::size_t K : {1024u, 2048u}) {
    cs.push_back(testing::rows_case("int8_channel", 136, K, QuantElement::int8, 1, K, seed++));
    cs.push_back(testing::rows_case("int4_g64", 136, K, QuantElement::int4, 1, 64, seed++));
    cs.push_back(testing::rows_case("fp8_block128", 136, K, QuantElement::fp8_e4m3, 128, 128, seed++));
    cs.push_back(testing::gptq_case("gptq4_g128", 136, K, 4, 128, false, true, seed++));
    cs.push_back(testing::gptq_case("gptq8_g128", 136, K, 8, 128, false, true, seed++));
    cs.push_back(testing::gptq_case("gptq4_desc_act", 136, K, 4, 128, true, true, seed++));
  }
  cs.push_back(testing::gptq_case("gptq4_asym_g24", 24, 72, 4, 24, false, true, seed++));
  cs.push_back(testing::rows_case("int8_g24", 9, 72, QuantElement::int8, 1, 24, seed++));
  cs.push_back(testing::rows_case("fp8_channel", 21, 48, QuantElement::fp8_e4m3, 1, 48, seed++));
  // Tall weights: the GPU's quantized GEMV gives each warp 2 or 4 output rows once there are enough rows
  // for every multiprocessor (8,501 rows: 4 per warp on 132 multiprocessors, the last warp short).
  cs.push_back(testing::rows_case("int8_channel_tall", 8501, 512, QuantElement::int8, 1, 512, seed++));
  cs.push_back(testing::rows_case("int4_g32_tall", 8501, 512, QuantElement::int4, 1, 32, seed++));
  cs.push_back(testing::rows_case("fp8_block128_tall", 8501, 512, QuantElement::fp8_e4m3, 128, 128, seed++));
  cs.push_back(testing::gptq_case("gptq4_g64_tall", 8501, 512, 4, 64, false, true, seed++));
  cs.push_back(testing::gptq_case("gptq8_g32_tall", 8501, 512, 8, 32, false, true, seed++));
  for (const auto& c : cs)
    for (const std::size_t m : {1u, 5u, 8u, 13u}) {
      const std::size_t rows = c.q.rows, cols = c.q.cols;
      const auto w = under_test_->load_quantized(c.q, WeightUse::both, Compute::exact);
      EXPECT_EQ(w->bytes(), c.q.bytes());
      const auto x = randn(m * cols, seed++);
      auto xb = dev_.put(x), yb = dev_.zeros(m * rows);
      under_test_->matmul(xb.as<float>(), m, cols, *w, rows, yb.as<float>(), rows);
      std::vector<double> ref(m * rows, 0.0);
      for (std::size_t i = 0; i < m; ++i)
        for (std::size_t n = 0; n < rows; ++n)
          for (std::size_t k = 0; k < cols; ++k) ref[i * rows + n] += static_cast<double>(x[i * cols + k]) * c.want[n * cols + k];
      const std::string what = c.name + " cols=" + std::to_string(cols) + " m=" + std::to_string(m);
      EXPECT_LT(nmse(dev_.get(yb, m * rows), ref), 1e-10) << what;
      if (m == 1) {  // embedding rows of the packed table
        const std::vector<std::int32_t> ids = {0, static_cast<std::int32_t>(rows / 2), static_cast<std::int32_t>(rows - 1)};
        auto idb = dev_.put_ints(ids);
        auto eb = dev_.zeros(ids.size() * cols);
        under_test_->embedding(idb.as<const TokenId>(), ids.size(), *w, eb.as<float>(), cols);
        const auto got = dev_.get(eb, ids.size() * cols);
        for (std::size_t i = 0; i < ids.size(); ++i)
          for (std::size_t k = 0; k < cols; ++k) ASSERT_EQ(got[i * cols + k], c.want[ids[i] * cols + k]) << what;
      }
    }
}

TEST_F(BackendOps, Fp8ProductsUnderBf16ComputeAreThoseOfTheRoundedActivations) {
  // Under bf16 compute FP8 weights meet the activations rounded to bf16, and nothing else is rounded but
  // the f32 sums (the GPU's tensor-core GEMV takes them as f16 scaled by a power of two per 64 columns:
  // exact for these values): decode and verify rows; 128 x 128 blocks (the last tile of 16 rows short),
  // per-channel scales, 64-column blocks on a narrow weight; widths of a chunk or two per warp and 12,288.
  // Against the double products of the rounded activations (or, where a CPU resolves bf16 compute to
  // exact, of the activations themselves).
  std::uint32_t seed = 4700;
  std::vector<testing::Case> cs;
  cs.push_back(testing::rows_case("fp8_block128", 1000, 1024, QuantElement::fp8_e4m3, 128, 128, seed++));
  cs.push_back(testing::rows_case("fp8_block128_wide", 300, 12288, QuantElement::fp8_e4m3, 128, 128, seed++));
  cs.push_back(testing::rows_case("fp8_channel", 517, 4096, QuantElement::fp8_e4m3, 1, 4096, seed++));
  cs.push_back(testing::rows_case("fp8_block64_narrow", 37, 192, QuantElement::fp8_e4m3, 32, 64, seed++));
  const bool gpu = under_test_->device().kind != DeviceSpec::Kind::cpu;
  for (const auto& c : cs)
    for (const std::size_t m : {1u, 3u, 8u}) {
      const std::size_t rows = c.q.rows, cols = c.q.cols;
      const auto w = under_test_->load_quantized(c.q, WeightUse::matmul, Compute::bf16);
      auto x = randn(m * cols, seed++, 4.f);
      x[cols / 2] = 0.f;  // a zero and a chunk of zeros among the activations
      for (std::size_t k = 0; k < std::min<std::size_t>(64, cols); ++k) x[(m - 1) * cols + k] = 0.f;
      auto xb = dev_.put(x), yb = dev_.zeros(m * rows);
      under_test_->matmul(xb.as<float>(), m, cols, *w, rows, yb.as<float>(), rows);
      const auto got = dev_.get(yb, m * rows);
      std::vector<double> rounded(m * rows, 0.0), plain(m * rows, 0.0);
      for (std::size_t i = 0; i < m; ++i)
        for (std::size_t n = 0; n < rows; ++n)
          for (std::size_t k = 0; k < cols; ++k) {
            const double wv = c.want[n * cols + k], xv = x[i * cols + k];
            rounded[i * rows + n] += static_cast<double>(from_bf16(to_bf16(x[i * cols + k]))) * wv;
            plain[i * rows + n] += xv * wv;
          }
      const std::string what = c.name + " cols=" + std::to_string(cols) + " m=" + std::to_string(m);
      const double e = gpu ? nmse(got, rounded) : std::min(nmse(got, rounded), nmse(got, plain));
      EXPECT_LT(e, 1e-10) << what;
    }
}

/// "" when a and b hold the same bits, else where and how many values differ (a short failure message).
std::string bit_difference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return "sizes " + std::to_string(a.size()) + " and " + std::to_string(b.size());
  std::size_t first = a.size(), count = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      if (first == a.size()) first = i;
      ++count;
    }
  if (count == 0) return "";
  return std::to_string(count) + " of " + std::to_string(a.size()) + " differ, first at " + std::to_string(first) +
         ": " + std::to_string(a[first]) + " vs " + std::to_string(b[first]);
}

TEST_F(BackendOps, QuantizedProductOfARowHasTheSameBitsAloneAndInABatch) {
  // Lossless speculative decoding needs a verify step (several rows) to give each row the bits a decode
  // step (that row alone) gives it: every quantized layout, both computes, batches of 2 .. 8 rows, a
  // weight tall enough for several rows per GPU warp. (On the CPU under bf16 compute the verify rows
  // take the decode kernels in pieces: quant_gemm.)
  std::uint32_t seed = 9100;
  const std::size_t K = 1024;
  std::vector<testing::Case> cs;
  cs.push_back(testing::rows_case("int8_channel", 4500, K, QuantElement::int8, 1, K, seed++));
  cs.push_back(testing::rows_case("int4_g64", 4500, K, QuantElement::int4, 1, 64, seed++));
  cs.push_back(testing::rows_case("fp8_block128", 4500, K, QuantElement::fp8_e4m3, 128, 128, seed++));
  cs.push_back(testing::gptq_case("gptq4_g128", 4500, K, 4, 128, false, true, seed++));
  cs.push_back(testing::gptq_case("gptq8_g32", 4500, K, 8, 32, false, true, seed++));
  for (const Compute compute : {Compute::exact, Compute::bf16})
    for (const auto& c : cs) {
      const auto w = under_test_->load_quantized(c.q, WeightUse::matmul, compute);
      const std::size_t n = c.q.rows;
      for (const std::size_t m : {2u, 3u, 5u, 8u}) {
        const std::string what = c.name + " " + std::string(compute_name(compute)) + " m=" + std::to_string(m);
        const auto x = randn(m * K, seed++);
        auto xb = dev_.put(x), yb = dev_.zeros(m * n);
        under_test_->matmul(xb.as<float>(), m, K, *w, n, yb.as<float>(), n);
        const auto batch = dev_.get(yb, m * n);
        for (std::size_t r = 0; r < m; r += m - 1) {  // the first and the last row alone
          auto x1 = dev_.put(std::vector<float>(x.begin() + r * K, x.begin() + (r + 1) * K)), y1 = dev_.zeros(n);
          under_test_->matmul(x1.as<float>(), 1, K, *w, n, y1.as<float>(), n);
          EXPECT_EQ(bit_difference(dev_.get(y1, n), std::vector<float>(batch.begin() + r * n, batch.begin() + (r + 1) * n)), "")
              << "row " << r << " " << what;
        }
      }
    }
}

TEST_F(BackendOps, FloatProductOfARowHasTheSameBitsAloneAndInABatch) {
  // The same for float weights, through the products a decode step makes (the input norm folded into
  // q / k / v and into gate / up with the SwiGLU, the residual product): on the GPU one row of x takes
  // a GEMV with 4, 2 or 1 output rows per warp (by the weight's height) and several rows take one row per
  // warp, which must sum each row alike.
  const std::size_t K = 1024;
  std::uint64_t seed = 9600;
  for (const DType dt : {DType::bf16, DType::f16, DType::f32})
    for (const Compute compute : {Compute::exact, Compute::bf16}) {
      const Compute resolved = under_test_->resolve_compute(compute, dt);
      std::vector<HostWeight> hw;
      for (const std::size_t n : {4500u, 2500u, 2500u, 600u}) hw.push_back(make_weight(n, K, dt, seed++));
      std::vector<std::unique_ptr<Weight>> w;
      for (const auto& h : hw)
        w.push_back(under_test_->load_matrix(h.bytes.data(), h.dtype, h.rows, h.cols, WeightUse::matmul, resolved));
      const auto nw = randn(K, seed++);
      auto nb = dev_.put(nw);
      // Every output of one step over m rows of x: q / k / v (weights 0, 1, 3), the SwiGLU (1, 2), the
      // residual product (0).
      const auto step = [&](const std::vector<float>& x, std::size_t m) {
        auto xb = dev_.put(x), hb = dev_.zeros(m * K), sb = dev_.zeros(m * 2500);
        std::vector<DeviceBuffer> ys;
        std::vector<Backend::MatmulOut> outs;
        for (const std::size_t i : {0u, 1u, 3u}) {
          ys.push_back(dev_.zeros(m * hw[i].rows));
          outs.push_back({w[i].get(), ys.back().as<float>(), hw[i].rows});
        }
        under_test_->norm_matmul_many(xb.as<float>(), m, K, K, nb.as<float>(), 1e-6f, hb.as<float>(), outs);
        ys.push_back(dev_.zeros(m * 2500));
        under_test_->norm_matmul_swiglu(xb.as<float>(), m, K, K, nb.as<float>(), 1e-6f, hb.as<float>(), *w[1], *w[2],
                                        ys.back().as<float>(), 2500, sb.as<float>());
        ys.push_back(dev_.put(std::vector<float>(m * hw[0].rows, 0.25f)));
        auto scratch = dev_.zeros(m * hw[0].rows);
        under_test_->matmul_add(xb.as<float>(), m, K, *w[0], ys.back().as<float>(), hw[0].rows, scratch.as<float>());
        std::vector<std::vector<float>> got;
        for (auto& y : ys) got.push_back(dev_.get(y, y.bytes() / sizeof(float)));
        return got;
      };
      for (const std::size_t m : {2u, 3u, 5u, 8u}) {
        const std::string what = std::string(dtype_name(dt)) + " " + compute_name(resolved) + " m=" + std::to_string(m);
        const auto x = randn(m * K, seed++, 3.f);
        const auto batch = step(x, m);
        for (std::size_t r = 0; r < m; r += m - 1) {  // the first and the last row alone
          const auto alone = step(std::vector<float>(x.begin() + r * K, x.begin() + (r + 1) * K), 1);
          for (std::size_t o = 0; o < alone.size(); ++o) {
            const std::size_t n = alone[o].size();
            EXPECT_EQ(bit_difference(alone[o], std::vector<float>(batch[o].begin() + r * n, batch[o].begin() + (r + 1) * n)),
                      "")
                << "output " << o << " row " << r << " " << what;
          }
        }
      }
    }
}

TEST_F(BackendOps, QuantizedWeightsInOneLaunchGiveTheBitsOfSeparateProducts) {
  // Quantized q / k / v in one product (matmul_many), with the input norm folded in (norm_matmul_many),
  // and gate / up with the SwiGLU (norm_matmul_swiglu): the same bits as rms_norm, then each product on
  // its own, then silu(gate) * up; and the values of the dequantized weights' double products. Decode
  // (1 row) and verify (5, 8 rows) steps; widths where a warp of the GPU kernel takes 1 row and more; and
  // 12 rows (the GPU's cuBLAS path: the weights dequantized, one bf16 operand for the call's products).
  // Each set: three weights for matmul_many, the last two also gate and up. (Cases are moved, never
  // copied: their QuantizedMatrix points into their own buffers.)
  struct Set {
    std::vector<testing::Case> w;
  };
  std::uint32_t seed = 7000;
  const std::size_t K = 1024;
  std::vector<Set> sets(5);
  const auto rows3 = [&](Set& set, const char* name, QuantElement e, std::size_t br, std::size_t bc,
                         std::initializer_list<std::size_t> ns) {
    for (const std::size_t n : ns) set.w.push_back(testing::rows_case(name, n, K, e, br, bc, seed++));
  };
  const auto gptq3 = [&](Set& set, const char* name, std::size_t bits, std::size_t gs,
                         std::initializer_list<std::size_t> ns) {
    for (const std::size_t n : ns) set.w.push_back(testing::gptq_case(name, n, K, bits, gs, false, true, seed++));
  };
  rows3(sets[0], "int8_channel", QuantElement::int8, 1, K, {640, 2300, 2300});
  rows3(sets[1], "fp8_block128", QuantElement::fp8_e4m3, 128, 128, {256, 4400, 4400});
  rows3(sets[2], "int4_g64", QuantElement::int4, 1, 64, {200, 96, 96});
  gptq3(sets[3], "gptq4_g128", 4, 128, {128, 2200, 2200});
  gptq3(sets[4], "gptq8_g32", 8, 32, {64, 64, 64});
  for (const Compute compute : {Compute::exact, Compute::bf16})
    for (const auto& set : sets) {
      std::vector<std::unique_ptr<Weight>> w;
      for (const auto& c : set.w) w.push_back(under_test_->load_quantized(c.q, WeightUse::matmul, compute));
      for (const std::size_t m : {1u, 5u, 8u, 12u}) {
        const std::string what = set.w[0].name + " " + std::string(compute_name(compute)) + " m=" + std::to_string(m);
        const auto x = randn(m * K, seed++, 3.f), nw = randn(K, seed++);
        auto xb = dev_.put(x), nb = dev_.put(nw), hb = dev_.zeros(m * K), h2 = dev_.zeros(m * K);
        under_test_->rms_norm(xb.as<float>(), h2.as<float>(), m, K, K, nb.as<float>(), 1e-6f);
        std::vector<DeviceBuffer> fused, plain, many;
        std::vector<Backend::MatmulOut> fo, mo;
        for (std::size_t i = 0; i < 3; ++i) {
          const std::size_t n = set.w[i].q.rows;
          fused.push_back(dev_.zeros(m * n));
          plain.push_back(dev_.zeros(m * n));
          many.push_back(dev_.zeros(m * n));
          fo.push_back({w[i].get(), fused.back().as<float>(), n});
          mo.push_back({w[i].get(), many.back().as<float>(), n});
          under_test_->matmul(h2.as<float>(), m, K, *w[i], n, plain.back().as<float>(), n);
        }
        under_test_->norm_matmul_many(xb.as<float>(), m, K, K, nb.as<float>(), 1e-6f, hb.as<float>(), fo);
        under_test_->matmul_many(h2.as<float>(), m, K, mo);
        const auto h = dev_.get(h2, m * K);
        for (std::size_t i = 0; i < 3; ++i) {
          const std::size_t n = set.w[i].q.rows;
          const auto got = dev_.get(plain[i], m * n);
          EXPECT_EQ(bit_difference(dev_.get(fused[i], m * n), got), "") << "norm_matmul_many output " << i << " " << what;
          EXPECT_EQ(bit_difference(dev_.get(many[i], m * n), got), "") << "matmul_many output " << i << " " << what;
          std::vector<double> ref(m * n, 0.0);  // the dequantized values' product
          for (std::size_t r = 0; r < m; ++r)
            for (std::size_t j = 0; j < n; ++j)
              for (std::size_t k = 0; k < K; ++k)
                ref[r * n + j] += static_cast<double>(h[r * K + k]) * set.w[i].want[j * K + k];
          // bf16 compute: activations rounded to bf16, and for integer weights quantized to int8 (per 16
          // columns on the GPU, per group or 128 columns on the CPU): close, not exact.
          EXPECT_LT(nmse(got, ref), compute == Compute::exact ? 1e-10 : 1e-3) << "output " << i << " " << what;
        }
        if (set.w[1].q.rows != set.w[2].q.rows) continue;
        const std::size_t n = set.w[1].q.rows;
        auto of = dev_.zeros(m * n), sf = dev_.zeros(m * n), sp = dev_.zeros(m * n);
        under_test_->norm_matmul_swiglu(xb.as<float>(), m, K, K, nb.as<float>(), 1e-6f, hb.as<float>(), *w[1], *w[2],
                                        of.as<float>(), n, sf.as<float>());
        under_test_->silu_mul(plain[1].as<float>(), n, plain[2].as<float>(), n, sp.as<float>(), n, m, n);
        EXPECT_EQ(bit_difference(dev_.get(of, m * n), dev_.get(sp, m * n)), "") << "swiglu " << what;
      }
    }
}

TEST_F(BackendOps, NormFoldedIntoProductsGivesTheSameBitsAsNormThenProduct) {
  // norm_matmul_many / norm_matmul_swiglu (CUDA: the GEMV at up to 8 rows; beyond, the norm writes the
  // bf16 operand that every cuBLAS product of the call shares) against rms_norm then the products on the
  // same backend, and against rms_norm then one matmul a weight (each converting its own operand):
  // bit-identical, so that decode and verify steps of any size agree (lossless MTP) whichever path a row
  // takes.
  const std::size_t k = 1024;
  std::uint64_t seed = 900;
  for (const Compute compute : {Compute::exact, Compute::bf16})
    for (const std::size_t m : {1u, 3u, 8u, 12u, 33u}) {
      const Compute resolved = under_test_->resolve_compute(compute, DType::bf16);
      const std::string what = std::string(compute_name(resolved)) + " m=" + std::to_string(m);
      const auto x = randn(m * k, seed++, 3.f), nw = randn(k, seed++);
      auto xb = dev_.put(x), nb = dev_.put(nw), hb = dev_.zeros(m * k), h2 = dev_.zeros(m * k);
      std::vector<HostWeight> hw = {make_weight(192, k, DType::bf16, seed++), make_weight(64, k, DType::bf16, seed++),
                                    make_weight(64, k, DType::bf16, seed++)};
      std::vector<std::unique_ptr<Weight>> w;
      for (const auto& h : hw)
        w.push_back(under_test_->load_matrix(h.bytes.data(), h.dtype, h.rows, h.cols, WeightUse::matmul, resolved));
      std::vector<DeviceBuffer> fused, plain;
      std::vector<Backend::MatmulOut> fo, po;
      for (std::size_t i = 0; i < 3; ++i) {
        fused.push_back(dev_.zeros(m * hw[i].rows));
        plain.push_back(dev_.zeros(m * hw[i].rows));
        fo.push_back({w[i].get(), fused.back().as<float>(), hw[i].rows});
        po.push_back({w[i].get(), plain.back().as<float>(), hw[i].rows});
      }
      under_test_->norm_matmul_many(xb.as<float>(), m, k, k, nb.as<float>(), 1e-6f, hb.as<float>(), fo);
      under_test_->rms_norm(xb.as<float>(), h2.as<float>(), m, k, k, nb.as<float>(), 1e-6f);
      under_test_->matmul_many(h2.as<float>(), m, k, po);
      for (std::size_t i = 0; i < 3; ++i) {
        const auto got = dev_.get(fused[i], m * hw[i].rows);
        EXPECT_EQ(got, dev_.get(plain[i], m * hw[i].rows)) << "output " << i << " " << what;
        auto one = dev_.zeros(m * hw[i].rows);
        under_test_->matmul(h2.as<float>(), m, k, *w[i], hw[i].rows, one.as<float>(), hw[i].rows);
        EXPECT_EQ(got, dev_.get(one, m * hw[i].rows)) << "output " << i << " against its own matmul, " << what;
      }
      auto of = dev_.zeros(m * 64), op = dev_.zeros(m * 64), sf = dev_.zeros(m * 64), sp = dev_.zeros(m * 64);
      under_test_->norm_matmul_swiglu(xb.as<float>(), m, k, k, nb.as<float>(), 1e-6f, hb.as<float>(), *w[1], *w[2],
                                      of.as<float>(), 64, sf.as<float>());
      under_test_->matmul_swiglu(h2.as<float>(), m, k, *w[1], *w[2], op.as<float>(), 64, sp.as<float>());
      const auto got = dev_.get(of, m * 64);
      EXPECT_EQ(got, dev_.get(op, m * 64)) << "swiglu " << what;
      if (m > 8) {  // beyond the GEMV: the same as the two products and silu_mul one by one
        auto g = dev_.zeros(m * 64), u = dev_.zeros(m * 64);
        under_test_->matmul(h2.as<float>(), m, k, *w[1], 64, g.as<float>(), 64);
        under_test_->matmul(h2.as<float>(), m, k, *w[2], 64, u.as<float>(), 64);
        under_test_->silu_mul(g.as<float>(), 64, u.as<float>(), 64, g.as<float>(), 64, m, 64);
        EXPECT_EQ(got, dev_.get(g, m * 64)) << "swiglu against its own products, " << what;
      }
    }
}

TEST_F(BackendOps, QkNormRopeStoreEqualsItsThreeOps) {
  // The fused step (CUDA: one launch) against head_norm_rope of q and k then kv_store: the same q, k
  // and the same cache contents (read back through attention), bit for bit.
  const std::size_t D = 128, NH = 8, NKV = 2, QD = NH * D, KD = NKV * D;
  for (const DType kv_dtype : {DType::f32, DType::bf16}) {
    if (kv_dtype == DType::bf16 && under_test_->kv_dtype(Compute::bf16, NH, NKV, D, 16) != DType::bf16) continue;
    KvSpec spec;
    spec.n_layers = 1;
    spec.n_kv_heads = NKV;
    spec.head_dim = D;
    spec.dtype = kv_dtype;
    KvCache a(*under_test_, spec, 256), b(*under_test_, spec, 256);
    const SeqId sa = a.create_sequence(), sb = b.create_sequence();
    ASSERT_TRUE(a.reserve(sa, 40));
    ASSERT_TRUE(b.reserve(sb, 40));
    // Every position a query attends to is stored (fresh caches hold arbitrary bytes elsewhere).
    std::vector<std::int32_t> pos(21);
    for (std::size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<std::int32_t>(i);
    std::vector<TokenId> tokens(pos.size(), 0);
    std::vector<std::int32_t> seq(pos.size(), 0), table(a.block_table(sa).begin(), a.block_table(sa).end());
    ASSERT_EQ(table, std::vector<std::int32_t>(b.block_table(sb).begin(), b.block_table(sb).end()));
    BatchInputs in;
    in.tokens = tokens;
    in.positions = pos;
    in.seq_index = seq;
    in.block_tables = table;
    in.max_blocks = table.size();
    const StagedBatch& st = under_test_->stage(in);
    std::vector<float> inv(D / 2);
    for (std::size_t i = 0; i < D / 2; ++i) inv[i] = static_cast<float>(1.0 / std::pow(1e6, 2.0 * i / D));
    auto invb = dev_.put(inv), cs = dev_.zeros(pos.size() * D / 2), sn = dev_.zeros(pos.size() * D / 2);
    under_test_->rope_angles(st, invb.as<float>(), D, cs.as<float>(), sn.as<float>());
    const auto q = randn(pos.size() * QD, 31, 2.f), k = randn(pos.size() * KD, 32, 2.f), v = randn(pos.size() * KD, 33);
    const auto qn = randn(D, 34), kn = randn(D, 35);
    auto q1 = dev_.put(q), k1 = dev_.put(k), q2 = dev_.put(q), k2 = dev_.put(k), vb = dev_.put(v);
    auto qnb = dev_.put(qn), knb = dev_.put(kn);
    under_test_->qk_norm_rope_store(q1.as<float>(), QD, k1.as<float>(), vb.as<float>(), KD, NH, NKV, D, qnb.as<float>(),
                                    knb.as<float>(), 1e-6f, D, cs.as<float>(), sn.as<float>(), st, a.storage(), 0);
    under_test_->head_norm_rope(q2.as<float>(), pos.size(), NH, D, QD, qnb.as<float>(), 1e-6f, D, cs.as<float>(),
                                sn.as<float>());
    under_test_->head_norm_rope(k2.as<float>(), pos.size(), NKV, D, KD, knb.as<float>(), 1e-6f, D, cs.as<float>(),
                                sn.as<float>());
    under_test_->kv_store(k2.as<float>(), vb.as<float>(), KD, st, b.storage(), 0);
    EXPECT_EQ(dev_.get(q1, q.size()), dev_.get(q2, q.size()));
    EXPECT_EQ(dev_.get(k1, k.size()), dev_.get(k2, k.size()));
    auto o1 = dev_.zeros(pos.size() * QD), o2 = dev_.zeros(pos.size() * QD);
    under_test_->attention(q1.as<float>(), QD, o1.as<float>(), QD, NH, st, a.storage(), 0, 0.1f);
    under_test_->attention(q1.as<float>(), QD, o2.as<float>(), QD, NH, st, b.storage(), 0, 0.1f);
    EXPECT_EQ(dev_.get(o1, q.size()), dev_.get(o2, q.size())) << dtype_name(kv_dtype);
  }
}

TEST_F(BackendOps, HeadNormRopeEqualsNormThenRope) {
  const std::size_t head_dim = 128, heads = 8, half = 64, ld = heads * head_dim;
  const std::vector<std::int32_t> pos = {0, 5, 300, 4097};
  std::vector<float> inv(half);
  for (std::size_t i = 0; i < half; ++i) inv[i] = static_cast<float>(1.0 / std::pow(1e6, 2.0 * i / 128.0));
  auto invb = dev_.put(inv);
  std::vector<std::int32_t> zeros;
  const StagedBatch& b = stage_positions(*under_test_, pos, zeros);
  auto cs = dev_.zeros(pos.size() * half), sn = dev_.zeros(pos.size() * half);
  under_test_->rope_angles(b, invb.as<float>(), 128, cs.as<float>(), sn.as<float>());
  const auto x = randn(pos.size() * ld, 77, 2.f), w = randn(head_dim, 78);
  auto xb = dev_.put(x), wb = dev_.put(w);
  under_test_->head_norm_rope(xb.as<float>(), pos.size(), heads, head_dim, ld, wb.as<float>(), 1e-6f, 128, cs.as<float>(),
                              sn.as<float>());
  const auto y = dev_.get(xb, pos.size() * ld);
  std::vector<double> ref(y.size());
  for (std::size_t t = 0; t < pos.size(); ++t)
    for (std::size_t h = 0; h < heads; ++h) {
      const float* a = x.data() + t * ld + h * head_dim;
      double ss = 0;
      for (std::size_t i = 0; i < head_dim; ++i) ss += static_cast<double>(a[i]) * a[i];
      const double inv_rms = 1.0 / std::sqrt(ss / head_dim + 1e-6);
      std::vector<double> n(head_dim);
      for (std::size_t i = 0; i < head_dim; ++i) n[i] = w[i] * a[i] * inv_rms;
      for (std::size_t i = 0; i < head_dim; ++i) {
        const std::size_t j = i % half;
        const double ang = static_cast<double>(static_cast<float>(pos[t]) * inv[j]);
        ref[t * ld + h * head_dim + i] = i < half ? n[i] * std::cos(ang) - n[i + half] * std::sin(ang)
                                                  : n[i] * std::cos(ang) + n[i - half] * std::sin(ang);
      }
    }
  EXPECT_LT(nmse(y, ref), 1e-12);
}

TEST_F(BackendOps, MatmulIdsComputesOnlyTheListedLogits) {
  const std::size_t k = 256, rows = 1000;
  const HostWeight w = make_weight(rows, k, DType::bf16, 7);
  auto weight = under_test_->load_matrix(w.bytes.data(), w.dtype, rows, k, WeightUse::matmul, Compute::exact);
  const std::size_t m = 3, ld = 600;  // a draft vocabulary of 600 ids
  const auto x = randn(m * k, 8);
  const std::vector<std::vector<std::int32_t>> ids = {{0, 5, 599}, {17}, {3, 4, 100, 200, 300}};
  auto xb = dev_.put(x);
  auto yb = dev_.zeros(m * ld);
  under_test_->matmul_ids(xb.as<float>(), m, k, *weight, ids, yb.as<float>(), ld);
  const auto y = dev_.get(yb, m * ld);
  for (std::size_t r = 0; r < m; ++r)
    for (std::size_t j = 0; j < ld; ++j) {
      const bool listed = std::find(ids[r].begin(), ids[r].end(), static_cast<std::int32_t>(j)) != ids[r].end();
      if (!listed) {
        EXPECT_EQ(y[r * ld + j], -std::numeric_limits<float>::infinity()) << r << "," << j;
        continue;
      }
      double s = 0;
      for (std::size_t p = 0; p < k; ++p) s += static_cast<double>(x[r * k + p]) * w.values[j * k + p];
      EXPECT_NEAR(y[r * ld + j], s, 1e-4 * (1 + std::fabs(s))) << r << "," << j;
    }
  const std::vector<std::vector<std::int32_t>> bad = {{1000}, {1}, {2}};
  EXPECT_THROW(under_test_->matmul_ids(xb.as<float>(), m, k, *weight, bad, yb.as<float>(), ld), std::invalid_argument);
}

// ---------------------------------------------------------------------------------------------- small ops

TEST_F(BackendOps, EmbeddingWidensEveryStoredDtypeExactly) {
  for (const DType dt : {DType::f32, DType::f16, DType::bf16}) {
    const HostWeight table = make_weight(300, 72, dt, 11, 1.f);
    auto weight = under_test_->load_matrix(table.bytes.data(), dt, 300, 72, WeightUse::embedding, Compute::exact);
    const std::vector<std::int32_t> tokens = {0, 299, 17, 17, 150};
    auto tb = dev_.put_ints(tokens);
    const std::size_t ldo = 80;
    auto out = dev_.zeros(tokens.size() * ldo, 7.f);
    under_test_->embedding(tb.as<TokenId>(), tokens.size(), *weight, out.as<float>(), ldo);
    const auto y = dev_.get(out, tokens.size() * ldo);
    for (std::size_t t = 0; t < tokens.size(); ++t) {
      for (std::size_t i = 0; i < 72; ++i)
        ASSERT_EQ(y[t * ldo + i], table.values[static_cast<std::size_t>(tokens[t]) * 72 + i]) << dtype_name(dt);
      for (std::size_t i = 72; i < ldo; ++i) ASSERT_EQ(y[t * ldo + i], 7.f) << "wrote past the row";
    }
  }
}

TEST_F(BackendOps, RmsNormRowsAtAStride) {
  for (const std::size_t dim : {1024u, 100u, 128u, 4096u}) {
    const std::size_t rows = dim <= 512 ? 19 : 7, ld = dim + 3;  // narrow rows: CUDA's warp a row, 8 a block
    const auto x = randn(rows * ld, dim, 3.f);
    const auto w = randn(dim, dim + 1);
    auto xb = dev_.put(x), wb = dev_.put(w);
    auto yb = dev_.put(std::vector<float>(rows * ld, 0.f));
    under_test_->rms_norm(xb.as<float>(), yb.as<float>(), rows, dim, ld, wb.as<float>(), 1e-6f);
    const auto y = dev_.get(yb, rows * ld);
    std::vector<float> got;
    std::vector<double> ref;
    for (std::size_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (std::size_t i = 0; i < dim; ++i) ss += static_cast<double>(x[r * ld + i]) * x[r * ld + i];
      const double inv = 1.0 / std::sqrt(ss / dim + 1e-6);
      for (std::size_t i = 0; i < dim; ++i) {
        got.push_back(y[r * ld + i]);
        ref.push_back(w[i] * x[r * ld + i] * inv);
      }
    }
    EXPECT_LT(nmse(got, ref), 1e-12) << "dim " << dim;
    // In place.
    under_test_->rms_norm(xb.as<float>(), xb.as<float>(), rows, dim, ld, wb.as<float>(), 1e-6f);
    const auto z = dev_.get(xb, rows * ld);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t i = 0; i < dim; ++i)
        ASSERT_EQ(z[r * ld + i], y[r * ld + i]) << "in place differs from out of place, dim " << dim;
  }
}

/// Stages a batch of the given positions, one sequence per token run (for ops that only read positions).
const StagedBatch& stage_positions(Backend& be, const std::vector<std::int32_t>& positions,
                                   std::vector<std::int32_t>& storage) {
  storage.assign(positions.size(), 0);
  BatchInputs in;
  static const std::vector<std::int32_t> table = {0};
  in.tokens = storage;
  in.positions = positions;
  in.seq_index = storage;
  in.block_tables = table;
  in.max_blocks = 1;
  return be.stage(in);
}

TEST_F(BackendOps, RopeFullAndPartialRotary) {
  for (const std::size_t rotary : {128u, 64u}) {
    const std::size_t head_dim = 128, heads = 3, ld = heads * head_dim + 8, half = rotary / 2;
    const std::vector<std::int32_t> pos = {0, 1, 17, 511, 4097, 32767};
    std::vector<float> inv(half);
    for (std::size_t i = 0; i < half; ++i)
      inv[i] = static_cast<float>(1.0 / std::pow(1e6, static_cast<double>(static_cast<float>(2 * i) / rotary)));
    auto invb = dev_.put(inv);
    std::vector<std::int32_t> zeros;
    const StagedBatch& b = stage_positions(*under_test_, pos, zeros);
    auto cs = dev_.zeros(pos.size() * half), sn = dev_.zeros(pos.size() * half);
    under_test_->rope_angles(b, invb.as<float>(), rotary, cs.as<float>(), sn.as<float>());
    const auto x = randn(pos.size() * ld, rotary);
    auto xb = dev_.put(x);
    under_test_->rope(xb.as<float>(), pos.size(), heads, head_dim, ld, rotary, cs.as<float>(), sn.as<float>());
    const auto y = dev_.get(xb, pos.size() * ld);
    std::vector<float> got;
    std::vector<double> ref;
    for (std::size_t t = 0; t < pos.size(); ++t)
      for (std::size_t h = 0; h < heads; ++h)
        for (std::size_t i = 0; i < head_dim; ++i) {
          const float* a = x.data() + t * ld + h * head_dim;
          double want = a[i];
          if (i < rotary) {
            const std::size_t j = i % half;
            const double ang = static_cast<double>(static_cast<float>(pos[t]) * inv[j]);
            want = i < half ? a[i] * std::cos(ang) - a[i + half] * std::sin(ang)
                            : a[i] * std::cos(ang) + a[i - half] * std::sin(ang);
          }
          got.push_back(y[t * ld + h * head_dim + i]);
          ref.push_back(want);
        }
    EXPECT_LT(nmse(got, ref), 1e-12) << "rotary " << rotary;
    for (std::size_t t = 0; t < pos.size(); ++t)  // the padding past the heads is untouched
      for (std::size_t i = heads * head_dim; i < ld; ++i) EXPECT_EQ(y[t * ld + i], x[t * ld + i]);
  }
}

TEST_F(BackendOps, SiluMulAddFillCopyGather) {
  const std::size_t rows = 5, n = 3072, ld = n + 5;
  const auto g = randn(rows * ld, 1, 4.f), u = randn(rows * ld, 2);
  auto gb = dev_.put(g), ub = dev_.put(u), ob = dev_.zeros(rows * ld);
  under_test_->silu_mul(gb.as<float>(), ld, ub.as<float>(), ld, ob.as<float>(), ld, rows, n);
  const auto o = dev_.get(ob, rows * ld);
  std::vector<float> got;
  std::vector<double> ref;
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t i = 0; i < n; ++i) {
      const double x = g[r * ld + i];
      got.push_back(o[r * ld + i]);
      ref.push_back(x / (1 + std::exp(-x)) * u[r * ld + i]);
    }
  EXPECT_LT(nmse(got, ref), 1e-12);

  auto ab = dev_.put(g);
  under_test_->add(ab.as<float>(), ub.as<float>(), rows * ld);
  const auto a = dev_.get(ab, rows * ld);
  for (std::size_t i = 0; i < rows * ld; ++i) ASSERT_EQ(a[i], g[i] + u[i]);

  auto cb = dev_.zeros(rows * 10, 0.f);
  under_test_->copy_rows(cb.as<float>(), 10, gb.as<float>() + 3, ld, rows, 6);
  const auto c = dev_.get(cb, rows * 10);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t i = 0; i < 10; ++i) ASSERT_EQ(c[r * 10 + i], i < 6 ? g[r * ld + 3 + i] : 0.f);

  const std::vector<std::int32_t> pick = {4, 0, 4, 2};
  auto pb = dev_.put_ints(pick);
  auto sb = dev_.zeros(pick.size() * n);
  under_test_->gather_rows(sb.as<float>(), n, gb.as<float>(), ld, pb.as<std::int32_t>(), pick.size(), n);
  const auto s = dev_.get(sb, pick.size() * n);
  for (std::size_t i = 0; i < pick.size(); ++i)
    for (std::size_t j = 0; j < n; ++j) ASSERT_EQ(s[i * n + j], g[static_cast<std::size_t>(pick[i]) * ld + j]);
}

// ---------------------------------------------------------------------------------------------- MoE

/// x[:H] += w * down(silu(gate h) * (up h)) in double: one (token, expert) pair of a mixture of experts
/// (gate, up [I, H] and down [H, I] row-major values).
void add_expert_ref(double* x, const float* h, double w, const std::vector<float>& gate, const std::vector<float>& up,
                    const std::vector<float>& down, std::size_t H, std::size_t I) {
  std::vector<double> act(I);
  for (std::size_t r = 0; r < I; ++r) {
    double a = 0, b = 0;
    for (std::size_t c = 0; c < H; ++c) {
      a += h[c] * static_cast<double>(gate[r * H + c]);
      b += h[c] * static_cast<double>(up[r * H + c]);
    }
    act[r] = a / (1 + std::exp(-a)) * b;
  }
  for (std::size_t c = 0; c < H; ++c) {
    double y = 0;
    for (std::size_t r = 0; r < I; ++r) y += act[r] * down[c * I + r];
    x[c] += w * y;
  }
}

TEST_F(BackendOps, MoeRouteAndExpertsAgainstADirectReference) {
  // 16 experts of width 96 over hidden 256, top 4: token counts on both sides of the CUDA gather-GEMV
  // limit (16) and of its grouped path's tile sizes (20 tokens: 32-slot tiles; 150: 64-slot tiles, the
  // shared expert's 150 pairs over three, width 96 over two column tiles of 64, the reduction over 96
  // neither a step of 64 nor of 128), weights in f32 and bf16, exact and bf16 compute, with and without
  // renormalisation, and with a shared expert run as expert E (its gate logit last in each row, its pair
  // last: weight sigmoid(logit)).
  const std::size_t E = 16, K = 4, H = 256, I = 96;
  std::uint64_t seed = 900;
  for (const DType dt : {DType::f32, DType::bf16})
    for (const Compute compute : {Compute::exact, Compute::bf16})
      for (const std::size_t T : {1u, 5u, 20u, 150u})
        for (const std::size_t S : {0u, 1u}) {
          const bool renorm = T != 5;
          const std::size_t L = E + S, KO = K + S;  // logits a row, pairs a token
          const Compute resolved = under_test_->resolve_compute(compute, dt);
          const std::string what = std::string(dtype_name(dt)) + " " + compute_name(resolved) +
                                   " T=" + std::to_string(T) + (S ? " shared expert" : "");
          std::vector<HostWeight> gate, up, down;
          std::vector<std::unique_ptr<Weight>> owned;
          std::vector<const Weight*> g, u, d;
          for (std::size_t e = 0; e < L; ++e) {
            gate.push_back(make_weight(I, H, dt, seed++));
            up.push_back(make_weight(I, H, dt, seed++));
            down.push_back(make_weight(H, I, dt, seed++));
            for (auto* hw : {&gate.back(), &up.back(), &down.back()}) {
              owned.push_back(
                  under_test_->load_matrix(hw->bytes.data(), dt, hw->rows, hw->cols, WeightUse::matmul, resolved));
            }
            g.push_back(owned[owned.size() - 3].get());
            u.push_back(owned[owned.size() - 2].get());
            d.push_back(owned[owned.size() - 1].get());
          }
          auto set = under_test_->make_expert_set(g, u, d);
          // Routing: logits with distinct values, so that the top K is unambiguous.
          const auto logits = randn(T * L, seed++, 2.f);
          auto lb = dev_.put(logits);
          auto ib = dev_.put_ints(std::vector<std::int32_t>(T * KO, -1));
          auto wb = dev_.zeros(T * KO);
          under_test_->moe_route(lb.as<float>(), T, E, K, renorm, S == 1, ib.as<std::int32_t>(), wb.as<float>());
          std::vector<std::int32_t> ids(T * KO);
          under_test_->download(ids.data(), ib.data(), ids.size() * sizeof(std::int32_t));
          const auto weights = dev_.get(wb, T * KO);
          std::vector<double> want_w(T * KO);
          std::vector<std::int32_t> want_ids(T * KO);
          for (std::size_t t = 0; t < T; ++t) {
            std::vector<double> p(E);
            double mx = -1e300, sum = 0;
            for (std::size_t e = 0; e < E; ++e) mx = std::max(mx, static_cast<double>(logits[t * L + e]));
            for (std::size_t e = 0; e < E; ++e) sum += (p[e] = std::exp(logits[t * L + e] - mx));
            std::vector<std::int32_t> order(E);
            for (std::size_t e = 0; e < E; ++e) order[e] = static_cast<std::int32_t>(e);
            std::sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) { return p[a] > p[b]; });
            std::sort(order.begin(), order.begin() + K);
            double top = 0;
            for (std::size_t j = 0; j < K; ++j) top += p[order[j]] / sum;
            for (std::size_t j = 0; j < K; ++j) {
              want_ids[t * KO + j] = order[j];
              want_w[t * KO + j] = p[order[j]] / sum / (renorm ? top : 1.0);
            }
            if (S) {
              want_ids[t * KO + K] = static_cast<std::int32_t>(E);
              want_w[t * KO + K] = 1 / (1 + std::exp(-static_cast<double>(logits[t * L + E])));
            }
          }
          ASSERT_EQ(ids, want_ids) << what;
          EXPECT_LT(nmse(weights, want_w), 1e-12) << what;
          // Experts: x = x0 + sum_j w_j down_e(silu(gate_e h) * up_e h).
          const auto h = randn(T * H, seed++), x0 = randn(T * H, seed++);
          auto hb = dev_.put(h), xb = dev_.put(x0);
          auto scratch = dev_.zeros(Backend::moe_scratch_floats(T, KO, H, I));
          under_test_->moe_experts(*set, hb.as<float>(), H, T, ib.as<std::int32_t>(), wb.as<float>(), KO,
                                   xb.as<float>(), H, scratch.as<float>());
          std::vector<double> ref(x0.begin(), x0.end());
          for (std::size_t t = 0; t < T; ++t)
            for (std::size_t j = 0; j < KO; ++j) {
              const std::size_t e = static_cast<std::size_t>(want_ids[t * KO + j]);
              add_expert_ref(&ref[t * H], &h[t * H], want_w[t * KO + j], gate[e].values, up[e].values,
                             down[e].values, H, I);
            }
          // The error of what was added (x0 would hide it).
          auto got = dev_.get(xb, T * H);
          for (std::size_t i = 0; i < got.size(); ++i) {
            got[i] -= x0[i];
            ref[i] -= x0[i];
          }
          EXPECT_LT(nmse(got, ref), resolved == Compute::exact ? 1e-10 : 1e-4) << what;
        }
}

TEST_F(BackendOps, MoeQuantizedExpertsAgainstTheirDequantizedValues) {
  // Packed experts (int8 per channel, int4 groups of 64, FP8 128x128 blocks, GPTQ int4 with desc_act, GPTQ
  // int8 groups of 32) under bf16 compute, through the decode path (5 tokens) and the prefill one (40: on
  // CUDA the grouped products, which dequantize each tile's weights to bf16 as they load it), against
  // double products of the values the layouts hold. 6 experts of width 128 over hidden 256, top 2.
  const std::size_t E = 6, K = 2, H = 256, I = 128;
  std::uint32_t seed = 7100;
  using Make = testing::Case (*)(std::size_t, std::size_t, std::uint32_t);
  const std::vector<std::pair<std::string, Make>> layouts = {
      {"int8_channel", [](std::size_t n, std::size_t k, std::uint32_t sd) {
         return testing::rows_case("int8_channel", n, k, QuantElement::int8, 1, k, sd);
       }},
      {"int4_g64", [](std::size_t n, std::size_t k, std::uint32_t sd) {
         return testing::rows_case("int4_g64", n, k, QuantElement::int4, 1, 64, sd);
       }},
      {"fp8_block128", [](std::size_t n, std::size_t k, std::uint32_t sd) {
         return testing::rows_case("fp8_block128", n, k, QuantElement::fp8_e4m3, 128, 128, sd);
       }},
      {"gptq4_desc_act", [](std::size_t n, std::size_t k, std::uint32_t sd) {
         return testing::gptq_case("gptq4_desc_act", n, k, 4, 128, true, true, sd);
       }},
      {"gptq8_g32", [](std::size_t n, std::size_t k, std::uint32_t sd) {
         return testing::gptq_case("gptq8_g32", n, k, 8, 32, false, true, sd);
       }},
  };
  for (const auto& [name, make] : layouts) {
    std::vector<testing::Case> gate, up, down;
    std::vector<std::unique_ptr<Weight>> owned;
    std::vector<const Weight*> g, u, d;
    for (std::size_t e = 0; e < E; ++e) {
      gate.push_back(make(I, H, seed++));
      up.push_back(make(I, H, seed++));
      down.push_back(make(H, I, seed++));
      for (auto* c : {&gate.back(), &up.back(), &down.back()})
        owned.push_back(under_test_->load_quantized(c->q, WeightUse::matmul, Compute::bf16));
      g.push_back(owned[owned.size() - 3].get());
      u.push_back(owned[owned.size() - 2].get());
      d.push_back(owned[owned.size() - 1].get());
    }
    auto set = under_test_->make_expert_set(g, u, d);
    for (const std::size_t T : {5u, 40u}) {
      const std::string what = name + " T=" + std::to_string(T);
      const auto logits = randn(T * E, seed++, 2.f);
      auto lb = dev_.put(logits);
      auto ib = dev_.put_ints(std::vector<std::int32_t>(T * K, -1));
      auto wb = dev_.zeros(T * K);
      under_test_->moe_route(lb.as<float>(), T, E, K, true, false, ib.as<std::int32_t>(), wb.as<float>());
      std::vector<std::int32_t> ids(T * K);
      under_test_->download(ids.data(), ib.data(), ids.size() * sizeof(std::int32_t));
      const auto weights = dev_.get(wb, T * K);
      const auto h = randn(T * H, seed++), x0 = randn(T * H, seed++);
      auto hb = dev_.put(h), xb = dev_.put(x0);
      auto scratch = dev_.zeros(Backend::moe_scratch_floats(T, K, H, I));
      under_test_->moe_experts(*set, hb.as<float>(), H, T, ib.as<std::int32_t>(), wb.as<float>(), K, xb.as<float>(),
                               H, scratch.as<float>());
      std::vector<double> ref(T * H, 0.0);
      for (std::size_t t = 0; t < T; ++t)
        for (std::size_t j = 0; j < K; ++j) {
          const auto e = static_cast<std::size_t>(ids[t * K + j]);
          ASSERT_LT(e, E) << what;
          add_expert_ref(&ref[t * H], &h[t * H], weights[t * K + j], gate[e].want, up[e].want, down[e].want, H, I);
        }
      auto got = dev_.get(xb, T * H);
      for (std::size_t i = 0; i < got.size(); ++i) got[i] -= x0[i];
      // The CPU's integer kernels quantize the activations to int8 per row as well (about 1% each); the
      // GPU rounds them and the dequantized weights to bf16.
      const bool cpu = under_test_->device().kind == DeviceSpec::Kind::cpu;
      EXPECT_LT(nmse(got, ref), cpu ? 1e-3 : 1e-4) << what;
    }
  }
}

// ------------------------------------------------------------------------------- hybrid token mixing

TEST_F(BackendOps, SigmoidMulPerElementAndScalarGates) {
  const std::size_t rows = 7, n = 300, ld = n + 3;
  const auto g = randn(rows * ld, 5, 3.f), x = randn(rows * ld, 6);
  for (const std::size_t gate_cols : {n, std::size_t{1}}) {
    auto gb = dev_.put(g), xb = dev_.put(x);
    under_test_->sigmoid_mul(gb.as<float>(), ld, gate_cols, xb.as<float>(), ld, rows, n);
    const auto o = dev_.get(xb, rows * ld);
    std::vector<float> got;
    std::vector<double> ref;
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t i = 0; i < n; ++i) {
        got.push_back(o[r * ld + i]);
        ref.push_back(x[r * ld + i] / (1 + std::exp(-static_cast<double>(g[r * ld + (gate_cols == 1 ? 0 : i)]))));
      }
    EXPECT_LT(nmse(got, ref), 1e-12) << "gate_cols " << gate_cols;
  }
}

/// The gated delta rule of Backend::gated_delta_net in double, token by token (HF
/// torch_recurrent_gated_delta_rule after torch_causal_conv1d_update): out [T, nv dv].
std::vector<double> ref_gated_delta(const Backend::GatedDeltaNetShape& sh, const std::vector<float>& qkv,
                                    const std::vector<float>& a, const std::vector<float>& b,
                                    const std::vector<float>& w, const std::vector<float>& A_log,
                                    const std::vector<float>& dt, const std::vector<std::int32_t>& pos,
                                    const std::vector<std::int32_t>& seq, std::size_t n_seqs) {
  const std::size_t T = pos.size(), C = sh.conv_dim(), K = sh.conv_kernel, nk = sh.n_k_heads, nv = sh.n_v_heads;
  const std::size_t dk = sh.k_head_dim, dv = sh.v_head_dim;
  std::vector<std::vector<double>> win(n_seqs, std::vector<double>((K - 1) * C)), S(n_seqs, std::vector<double>(nv * dk * dv));
  std::vector<double> out(T * nv * dv);
  for (std::size_t t = 0; t < T; ++t) {
    auto& W = win[static_cast<std::size_t>(seq[t])];
    auto& St = S[static_cast<std::size_t>(seq[t])];
    if (pos[t] == 0) {
      std::fill(W.begin(), W.end(), 0.0);
      std::fill(St.begin(), St.end(), 0.0);
    }
    std::vector<double> y(C);
    for (std::size_t c = 0; c < C; ++c) {
      double acc = w[c * K + K - 1] * static_cast<double>(qkv[t * C + c]);
      for (std::size_t j = 0; j + 1 < K; ++j) acc += w[c * K + j] * W[j * C + c];
      y[c] = acc / (1 + std::exp(-acc));
    }
    for (std::size_t j = 0; j + 2 < K; ++j)
      for (std::size_t c = 0; c < C; ++c) W[j * C + c] = W[(j + 1) * C + c];
    if (K > 1)
      for (std::size_t c = 0; c < C; ++c) W[(K - 2) * C + c] = qkv[t * C + c];
    for (std::size_t hh = 0; hh < 2 * nk; ++hh) {
      double ss = 0;
      for (std::size_t i = 0; i < dk; ++i) ss += y[hh * dk + i] * y[hh * dk + i];
      const double inv = 1 / std::sqrt(ss + 1e-6) * (hh < nk ? 1 / std::sqrt(static_cast<double>(dk)) : 1.0);
      for (std::size_t i = 0; i < dk; ++i) y[hh * dk + i] *= inv;
    }
    for (std::size_t h = 0; h < nv; ++h) {
      const std::size_t kh = h / (nv / nk);
      const double* q = &y[kh * dk];
      const double* k = &y[nk * dk + kh * dk];
      const double* v = &y[2 * nk * dk + h * dv];
      const double beta = 1 / (1 + std::exp(-static_cast<double>(b[t * nv + h])));
      const double x = a[t * nv + h] + static_cast<double>(dt[h]);
      const double g = -std::exp(static_cast<double>(A_log[h])) * (x > 20 ? x : std::log1p(std::exp(x)));
      double* Sh = &St[h * dk * dv];
      for (std::size_t i = 0; i < dk * dv; ++i) Sh[i] *= std::exp(g);
      for (std::size_t j = 0; j < dv; ++j) {
        double kv = 0;
        for (std::size_t i = 0; i < dk; ++i) kv += Sh[i * dv + j] * k[i];
        const double delta = (v[j] - kv) * beta;
        for (std::size_t i = 0; i < dk; ++i) Sh[i * dv + j] += k[i] * delta;
      }
      for (std::size_t j = 0; j < dv; ++j) {
        double o = 0;
        for (std::size_t i = 0; i < dk; ++i) o += Sh[i * dv + j] * q[i];
        out[t * nv * dv + h * dv + j] = o;
      }
    }
  }
  return out;
}

TEST_F(BackendOps, GatedDeltaNetAgainstADirectReference) {
  struct Case {
    Backend::GatedDeltaNetShape shape;
    const char* what;
  };
  const std::vector<Case> cases = {
      {{2, 4, 16, 16, 4}, "GQA 2:1, dk 16, dv 16 (fewer columns than a block's 32)"},
      {{1, 2, 128, 128, 4}, "Qwen3-Next heads: dk 128, dv 128"},
      {{2, 2, 24, 32, 3}, "dk 24, kernel 3 (the host path on a GPU)"},
  };
  // Calls over two sequences. Short runs (decode, verify steps): positions 0..5 of sequence 0 and 0..2
  // of sequence 1 interleaved, then 6..8 of sequence 0 and 3 of sequence 1 (the state carries over),
  // then sequence 1 restarts at 0. Long runs (prefill): sequence 0's positions 0..149 beside sequence 1's
  // 0..11 and, in the same call, its restart 0..8; then 150..179 and 9..10.
  struct Calls {
    std::vector<std::vector<std::int32_t>> pos, seq;
  };
  std::vector<Calls> patterns = {{{{0, 0, 1, 1, 2, 2, 3, 4, 5}, {6, 3, 7, 8}, {0, 1}},
                                  {{0, 1, 0, 1, 0, 1, 0, 0, 0}, {0, 1, 0, 0}, {1, 1}}}};
  // Calls made of runs (call, first position, end position, sequence).
  const auto runs_of = [](std::initializer_list<std::array<std::int32_t, 4>> runs, std::size_t n_calls) {
    Calls c{std::vector<std::vector<std::int32_t>>(n_calls), std::vector<std::vector<std::int32_t>>(n_calls)};
    for (const auto& [call, from, to, sq] : runs)
      for (std::int32_t i = from; i < to; ++i) {
        c.pos[static_cast<std::size_t>(call)].push_back(i);
        c.seq[static_cast<std::size_t>(call)].push_back(sq);
      }
    return c;
  };
  patterns.push_back(runs_of({{0, 0, 150, 0}, {0, 0, 12, 1}, {0, 0, 9, 1}, {1, 150, 180, 0}, {1, 9, 11, 1}}, 2));
  // Prefill calls whose every sequence is one run (CUDA: the chunked form, chunks of 64 from each run's
  // first token): sequence 0's 0..149 beside sequence 1's 0..69; then 150..299 (the state carried into
  // chunks that do not start at a multiple of 64) beside 70..72; then sequence 1 restarting at 0 for 80
  // tokens beside sequence 0's 300..363.
  patterns.push_back(
      runs_of({{0, 0, 150, 0}, {0, 0, 70, 1}, {1, 150, 300, 0}, {1, 70, 73, 1}, {2, 0, 80, 1}, {2, 300, 364, 0}}, 3));
  const char* pattern_names[] = {"", ", long runs", ", runs of whole sequences"};
  for (std::size_t pi = 0; pi < patterns.size(); ++pi)
    for (const auto& c : cases) {
      const auto& pattern = patterns[pi];
      const auto& sh = c.shape;
      const std::size_t C = sh.conv_dim(), nv = sh.n_v_heads, VD = nv * sh.v_head_dim;
      const auto& call_pos = pattern.pos;
      const auto& call_seq = pattern.seq;
      // Each sequence's state in a slot of a KV storage, as the second of two layers' (state_offset):
      // sequence s in slot 2 - s, so that a kernel taking the row for the slot fails.
      const std::size_t state = Backend::gated_delta_net_state_floats(sh);
      KvSpec spec;
      spec.n_layers = 1;
      spec.n_kv_heads = 1;
      spec.head_dim = 16;
      spec.state_floats = 2 * state;
      auto kv = under_test_->make_kv_storage(spec, 1);
      kv->ensure_state_slots(3);
      for (std::size_t slot = 0; slot < 3; ++slot) under_test_->fill(kv->recurrent_state(slot), 2 * state, 0.f);
      const auto w = randn(C * sh.conv_kernel, 41, 0.5f), A_log = randn(nv, 42, 0.5f), dt = randn(nv, 43, 0.5f);
      auto wb = dev_.put(w), alb = dev_.put(A_log), dtb = dev_.put(dt);
      std::vector<float> all_qkv, all_a, all_b;
      std::vector<std::int32_t> all_pos, all_seq;
      std::vector<float> got;
      for (std::size_t call = 0; call < call_pos.size(); ++call) {
        const std::size_t T = call_pos[call].size();
        const auto qkv = randn(T * C, 50 + call), a = randn(T * nv, 60 + call), b = randn(T * nv, 70 + call);
        // Rows of the staged tables: sequence ids in order of first appearance in the call.
        std::vector<std::int32_t> rows(T), seqs;
        for (std::size_t t = 0; t < T; ++t) {
          auto it = std::find(seqs.begin(), seqs.end(), call_seq[call][t]);
          if (it == seqs.end()) it = seqs.insert(seqs.end(), call_seq[call][t]);
          rows[t] = static_cast<std::int32_t>(it - seqs.begin());
        }
        std::vector<TokenId> tokens(T, 0);
        std::vector<std::int32_t> tables(seqs.size() * 16, -1);
        BatchInputs in;
        in.tokens = tokens;
        in.positions = call_pos[call];
        in.seq_index = rows;
        in.block_tables = tables;
        in.max_blocks = 16;
        std::vector<std::int32_t> slots;
        for (auto sq : seqs) slots.push_back(2 - sq);
        in.state_slots = slots;
        const StagedBatch& st = under_test_->stage(in);
        auto xb = dev_.put(qkv), ab = dev_.put(a), bb = dev_.put(b), ob = dev_.zeros(T * VD);
        under_test_->gated_delta_net(sh, xb.as<float>(), C, ab.as<float>(), bb.as<float>(), nv, wb.as<float>(),
                                     alb.as<float>(), dtb.as<float>(), st, *kv, state, ob.as<float>(), VD);
        const auto o = dev_.get(ob, T * VD);
        got.insert(got.end(), o.begin(), o.end());
        all_qkv.insert(all_qkv.end(), qkv.begin(), qkv.end());
        all_a.insert(all_a.end(), a.begin(), a.end());
        all_b.insert(all_b.end(), b.begin(), b.end());
        all_pos.insert(all_pos.end(), call_pos[call].begin(), call_pos[call].end());
        all_seq.insert(all_seq.end(), call_seq[call].begin(), call_seq[call].end());
      }
      const auto ref = ref_gated_delta(sh, all_qkv, all_a, all_b, w, A_log, dt, all_pos, all_seq, 2);
      // The chunked form's products (exp(G_i - G_j) factors, the triangular solve) round differently.
      EXPECT_LT(nmse(got, ref), pi == 2 ? 1e-9 : 1e-10) << c.what << pattern_names[pi];
    }
}

TEST_F(BackendOps, ArgmaxRowsFirstOfTies) {
  const std::size_t rows = 4, n = 151936, ld = n + 16;
  auto v = randn(rows * ld, 5);
  v[0 * ld + 70000] = 50.f;
  v[0 * ld + 90000] = 50.f;  // tie: the first wins
  v[1 * ld + n - 1] = 60.f;  // the last id
  v[2 * ld + 0] = 70.f;
  v[3 * ld + n + 3] = 1e9f;  // past the row: ignored
  auto b = dev_.put(v);
  std::vector<std::int32_t> out(rows, -1);
  under_test_->argmax_rows(b.as<float>(), rows, n, ld, {}, 0, out.data());
  std::vector<std::int32_t> want(rows);
  for (std::size_t r = 0; r < rows; ++r)
    want[r] = static_cast<std::int32_t>(std::max_element(v.begin() + r * ld, v.begin() + r * ld + n) - (v.begin() + r * ld));
  EXPECT_EQ(out, want);
  EXPECT_EQ(out[0], 70000);
}

TEST_F(BackendOps, ArgmaxRowsOnlyAmongWhatTheBitmaskAllows) {
  // Token bitmasks as the grammar makes them: the masked argmax of each row against a host loop over
  // the allowed ids, rows that allow one id, a whole word, nothing, and only -inf logits.
  const std::size_t rows = 6, n = 151936, ld = n + 8, words = (n + 31) / 32 + 3;  // spare words at the end
  auto v = randn(rows * ld, 9);
  std::vector<std::uint32_t> masks(rows * words, 0);
  std::mt19937 rng(11);
  for (std::size_t w = 0; w < (n + 31) / 32; ++w) masks[0 * words + w] = static_cast<std::uint32_t>(rng()) & static_cast<std::uint32_t>(rng());
  masks[1 * words + 4000] = 1u << 7;  // one id: 128007
  masks[2 * words + 17] = 0xffffffffu;  // ids 544 .. 575
  v[2 * ld + 560] = 80.f;
  v[2 * ld + 100] = 90.f;  // larger, but not allowed
  // row 3: nothing allowed
  for (std::size_t w = 0; w < (n + 31) / 32; ++w) masks[4 * words + w] = 0xffffffffu;  // everything
  masks[5 * words + 2] = 0x30u;  // ids 68, 69 at -inf: the first
  v[5 * ld + 68] = -INFINITY;
  v[5 * ld + 69] = -INFINITY;
  auto b = dev_.put(v);
  std::vector<std::int32_t> out(rows, 7);
  under_test_->argmax_rows(b.as<float>(), rows, n, ld, masks, words, out.data());
  for (std::size_t r = 0; r < rows; ++r) {
    std::int32_t want = -1;
    for (std::size_t i = 0; i < n; ++i)
      if (((masks[r * words + i / 32] >> (i % 32)) & 1u) && (want < 0 || v[r * ld + i] > v[r * ld + static_cast<std::size_t>(want)]))
        want = static_cast<std::int32_t>(i);
    EXPECT_EQ(out[r], want) << "row " << r;
  }
  EXPECT_EQ(out[1], 128007);
  EXPECT_EQ(out[2], 560);
  EXPECT_EQ(out[3], -1);
  EXPECT_EQ(out[5], 68);
  std::vector<std::uint32_t> short_masks(rows * words - 1);
  EXPECT_THROW(under_test_->argmax_rows(b.as<float>(), rows, n, ld, short_masks, words, out.data()), std::invalid_argument);
  EXPECT_THROW(under_test_->argmax_rows(b.as<float>(), rows, n, ld, masks, n / 32 - 1, out.data()), std::invalid_argument);
}

TEST_F(BackendOps, SampleRowsDrawTheCpuReferencesIds) {
  // Qwen3's vocabulary; rows of random logits flat and peaked, with ties everywhere, under a random
  // bitmask, with NaN / -inf, one allowed id, none allowed, +inf twice; each filter set with four keys. A
  // GPU's ids equal the CPU reference's on every row (the same kept set and the same Gumbel draw); on every
  // backend temperature 0 and top-k 1 give argmax_rows's id, and the rows allowing one id / none give it / -1.
  const std::size_t R = 8, n = 151936, ld = n + 8, W = (n + 31) / 32;
  std::vector<float> v(R * ld, 0.f);
  const auto fill = [&](std::size_t r, float scale, std::uint64_t seed) {
    const auto x = randn(n, seed, scale);
    std::copy(x.begin(), x.end(), v.begin() + static_cast<std::ptrdiff_t>(r * ld));
  };
  fill(0, 1.f, 31);
  fill(1, 4.f, 32);
  fill(2, 2.f, 33);
  for (std::size_t i = 0; i < n; ++i) v[2 * ld + i] = std::round(v[2 * ld + i] * 4.f) / 4.f;  // ties
  fill(3, 3.f, 34);
  fill(4, 2.f, 35);
  fill(5, 2.f, 36);
  fill(6, 2.f, 37);
  for (std::size_t i = 0; i < n; i += 97) v[6 * ld + i] = std::numeric_limits<float>::quiet_NaN();
  for (std::size_t i = 5; i < n; i += 89) v[6 * ld + i] = -INFINITY;
  fill(7, 2.f, 38);
  v[7 * ld + 1234] = INFINITY;
  v[7 * ld + 5678] = INFINITY;
  std::vector<std::uint32_t> masks(R * W, 0xffffffffu);
  std::mt19937 rng(41);
  for (std::size_t w = 0; w < W; ++w) masks[3 * W + w] = static_cast<std::uint32_t>(rng());
  std::fill_n(masks.begin() + 4 * W, W, 0u);
  masks[4 * W + 77777 / 32] = 1u << (77777 % 32);
  std::fill_n(masks.begin() + 5 * W, W, 0u);
  auto b = dev_.put(v);
  std::vector<std::int32_t> argmax(R);
  under_test_->argmax_rows(b.as<float>(), R, n, ld, masks, W, argmax.data());
  std::unique_ptr<DeviceBuffer> rb;
  if (has_reference()) rb = std::make_unique<DeviceBuffer>(reference_.put(v));
  const RowSampling sets[] = {{0.f, 0, 1.f, 0.f},      {1.f, 0, 1.f, 0.f},        {0.7f, 20, 1.f, 0.f},
                              {0.7f, 0, 0.8f, 0.f},    {1.f, 50, 0.9f, 0.05f},    {1.3f, 0, 1.f, 0.1f},
                              {1.f, 0, 0.999f, 0.f},   {1.f, 1, 1.f, 0.f},        {0.6f, 20, 0.95f, 0.f}};
  int set = 0;
  for (const RowSampling& base : sets) {
    for (std::uint64_t key = 0; key < 4; ++key) {
      SCOPED_TRACE("set " + std::to_string(set) + ", key " + std::to_string(key));
      std::vector<RowSampling> params(R, base);
      for (std::size_t r = 0; r < R; ++r) params[r].key = key * 7919 + r + 1000 * static_cast<std::uint64_t>(set);
      std::vector<std::int32_t> got(R, -7);
      under_test_->sample_rows(b.as<float>(), R, n, ld, masks, W, params, got.data());
      if (has_reference()) {
        std::vector<std::int32_t> want(R, -7);
        reference_.be->sample_rows(rb->as<float>(), R, n, ld, masks, W, params, want.data());
        EXPECT_EQ(got, want);
      }
      if (base.temperature == 0.f || base.top_k == 1) EXPECT_EQ(got, argmax);
      EXPECT_EQ(got[4], 77777);
      EXPECT_EQ(got[5], -1);
      EXPECT_EQ(got[7], 1234);
      for (std::size_t r = 0; r < R; ++r) {
        ASSERT_GE(got[r], r == 5 ? -1 : 0);
        if (got[r] >= 0) {
          const float x = v[r * ld + static_cast<std::size_t>(got[r])];
          EXPECT_FALSE(std::isnan(x) || x == -INFINITY) << "row " << r;
          EXPECT_TRUE((masks[r * W + static_cast<std::size_t>(got[r]) / 32] >> (got[r] % 32)) & 1u) << "row " << r;
        }
      }
    }
    ++set;
  }
}

// ---------------------------------------------------------------------------------------------- attention

/// Random K/V for several sequences in a paged cache of `kv_dtype`, queries for chosen tokens, through
/// kv_store + attention on `be`; returns the attention outputs [n_tokens, n_heads * head_dim].
struct AttentionCase {
  std::size_t n_heads, n_kv, head_dim;
  std::vector<std::size_t> contexts;  ///< per sequence: positions 0..ctx-1 stored
  DType kv_dtype;
  /// Per sequence (empty: all 0): queries for positions first_query..ctx-1 only, in a second batch after
  /// the whole context's K/V was stored (a prefill chunk after a cached prefix).
  std::vector<std::size_t> first_query = {};
};

std::vector<float> run_attention(Dev& d, const AttentionCase& c, std::vector<double>* dense_ref) {
  KvSpec spec;
  spec.n_layers = 2;
  spec.n_kv_heads = c.n_kv;
  spec.head_dim = c.head_dim;
  spec.dtype = c.kv_dtype;
  std::size_t total = 0;
  for (auto ctx : c.contexts) total += ctx + 16;
  KvCache kv(*d.be, spec, 2 * total + 64);
  // Scatter the blocks: a filler sequence takes every other block while the others grow.
  std::vector<SeqId> seqs;
  for (std::size_t s = 0; s < c.contexts.size(); ++s) seqs.push_back(kv.create_sequence());
  const SeqId filler = kv.create_sequence();
  for (std::size_t step = 1;; ++step) {
    bool grew = false;
    for (std::size_t s = 0; s < seqs.size(); ++s)
      if (kv.capacity(seqs[s]) < c.contexts[s]) {
        EXPECT_TRUE(kv.reserve(seqs[s], std::min(c.contexts[s], step * 16)));
        grew = true;
      }
    if (!grew) break;
    if (kv.allocator().n_free() > 1) {
      EXPECT_TRUE(kv.reserve(filler, kv.capacity(filler) + 1));
    }
  }
  // The first batch: every position of every sequence, whose K/V are stored; the second (the same batch
  // unless first_query is set): the positions that query, with logits-free rows.
  std::vector<std::int32_t> positions, seq_index, q_positions, q_seq_index;
  std::vector<std::size_t> offset;  // of each sequence's position 0 in the first batch
  std::size_t max_blocks = 0;
  for (auto s : seqs) max_blocks = std::max(max_blocks, kv.block_table(s).size());
  std::vector<std::int32_t> tables(seqs.size() * max_blocks, -1);
  for (std::size_t s = 0; s < seqs.size(); ++s) {
    const auto& t = kv.block_table(seqs[s]);
    std::copy(t.begin(), t.end(), tables.begin() + static_cast<std::ptrdiff_t>(s * max_blocks));
    offset.push_back(positions.size());
    const std::size_t first = c.first_query.empty() ? 0 : c.first_query[s];
    for (std::size_t p = 0; p < c.contexts[s]; ++p) {
      positions.push_back(static_cast<std::int32_t>(p));
      seq_index.push_back(static_cast<std::int32_t>(s));
      if (p >= first) {
        q_positions.push_back(static_cast<std::int32_t>(p));
        q_seq_index.push_back(static_cast<std::int32_t>(s));
      }
    }
  }
  const std::size_t T = positions.size(), TQ = q_positions.size(), QD = c.n_heads * c.head_dim,
                    KD = c.n_kv * c.head_dim;
  const std::uint64_t seed = 1000 + T + c.head_dim;
  const auto q = randn(TQ * QD, seed), k = randn(T * KD, seed + 1), v = randn(T * KD, seed + 2);
  auto stage = [&](const std::vector<std::int32_t>& pos, const std::vector<std::int32_t>& seq) -> const StagedBatch& {
    BatchInputs in;
    const std::vector<TokenId> tokens(pos.size(), 0);
    in.tokens = tokens;
    in.positions = pos;
    in.seq_index = seq;
    in.block_tables = tables;
    in.max_blocks = max_blocks;
    return d.be->stage(in);
  };
  auto kb = d.put(k), vb = d.put(v);
  d.be->kv_store(kb.as<float>(), vb.as<float>(), KD, stage(positions, seq_index), kv.storage(), 1);
  const StagedBatch& b = stage(q_positions, q_seq_index);
  auto qb = d.put(q), ob = d.zeros(TQ * QD);
  const float scale = 1.f / std::sqrt(static_cast<float>(c.head_dim));
  d.be->attention(qb.as<float>(), QD, ob.as<float>(), QD, c.n_heads, b, kv.storage(), 1, scale);
  const auto out = d.get(ob, TQ * QD);
  if (dense_ref) {  // dense causal softmax attention per sequence, in double, over the stored K/V
    auto stored = [&](float x) { return c.kv_dtype == DType::bf16 ? static_cast<double>(from_bf16(to_bf16(x))) : x; };
    dense_ref->assign(TQ * QD, 0.0);
    const std::size_t group = c.n_heads / c.n_kv;
    for (std::size_t t = 0; t < TQ; ++t)
      for (std::size_t h = 0; h < c.n_heads; ++h) {
        const std::size_t g = h / group, base = offset[static_cast<std::size_t>(q_seq_index[t])];
        const std::size_t n_ctx = static_cast<std::size_t>(q_positions[t]) + 1;
        std::vector<double> sc;
        for (std::size_t u = base; u < base + n_ctx; ++u) {
          double s = 0;
          for (std::size_t i = 0; i < c.head_dim; ++i)
            s += static_cast<double>(q[t * QD + h * c.head_dim + i]) * stored(k[u * KD + g * c.head_dim + i]);
          sc.push_back(s * scale);
        }
        const double mx = *std::max_element(sc.begin(), sc.end());
        double sum = 0;
        for (auto& s : sc) sum += (s = std::exp(s - mx));
        for (std::size_t j = 0; j < n_ctx; ++j)
          for (std::size_t i = 0; i < c.head_dim; ++i)
            (*dense_ref)[t * QD + h * c.head_dim + i] += sc[j] / sum * stored(v[(base + j) * KD + g * c.head_dim + i]);
      }
  }
  return out;
}

TEST_F(BackendOps, PagedAttentionEqualsDenseAttention) {
  const std::vector<AttentionCase> cases = {
      {16, 8, 128, {5, 37, 1}, DType::f32},    // Qwen3-0.6B heads, GQA 2:1
      {32, 8, 128, {20, 3}, DType::f32},       // Qwen3-8B heads, GQA 4:1
      {8, 8, 64, {33, 16, 17}, DType::f32},    // MHA, head_dim 64, block boundaries
      {4, 2, 128, {700}, DType::f32},          // past the 512-position split of the CUDA backend
      {16, 8, 128, {40, 9}, DType::bf16},      // bf16 KV cache: a prefill run (flash tiles on the GPU) and a short one
      {8, 2, 64, {700, 20, 5}, DType::bf16},   // bf16, head_dim 64, past the split, runs of 64 + a partial tile
      {4, 2, 16, {30, 3}, DType::f32},         // head_dim 16 (the tiny test models)
      {4, 4, 48, {20}, DType::f32},            // head_dim not a multiple of 32
      // Prefill chunks after a cached prefix: query runs that start inside a K/V tile, several tiles of
      // keys (the flash kernel's loads one tile ahead), GQA 4:1 as Qwen3-8B, and runs shorter than a tile.
      {16, 4, 128, {700, 100}, DType::bf16, {333, 0}},
      {8, 2, 64, {530, 90}, DType::bf16, {130, 67}},
      {16, 2, 256, {300, 40}, DType::bf16, {100, 0}},  // head_dim 256 (Qwen3-Next / Qwen3.5 attention layers)
      {16, 8, 128, {200}, DType::f32, {150}},
  };
  for (const auto& c : cases) {
    const DType kv_dtype = c.kv_dtype == DType::bf16 && under_test_->kv_dtype(Compute::bf16, c.n_heads, c.n_kv,
                                                                              c.head_dim, 16) == DType::bf16
                               ? DType::bf16
                               : DType::f32;
    if (kv_dtype != c.kv_dtype) continue;  // no bf16 KV cache on this backend (CPU without AMX)
    AttentionCase run = c;
    run.kv_dtype = kv_dtype;
    std::vector<double> ref;
    const auto got = run_attention(dev_, run, &ref);
    const std::string what = std::to_string(c.n_heads) + "/" + std::to_string(c.n_kv) + " heads, head_dim " +
                             std::to_string(c.head_dim) + ", " + dtype_name(kv_dtype) + " KV, " +
                             std::to_string(c.contexts.size()) + " sequences, longest " +
                             std::to_string(*std::max_element(c.contexts.begin(), c.contexts.end())) +
                             (c.first_query.empty() ? "" : ", queries after a prefix");
    EXPECT_LT(nmse(got, ref), kv_dtype == DType::f32 ? 1e-11 : 2e-4) << what;
    if (has_reference() && kv_dtype == DType::f32) {
      const auto cpu = run_attention(reference_, run, nullptr);
      EXPECT_LT(nmse(got, cpu), 1e-11) << what << " against the CPU backend";
    }
  }
}

// ---------------------------------------------------------------------------------------------- probes

TEST_F(BackendOps, ProbesGiveFinitePositiveFigures) {
  for (double v : under_test_->probe_bandwidth_gb_s(std::size_t{16} << 20, 2)) EXPECT_TRUE(std::isfinite(v) && v > 0);
  for (double v : under_test_->probe_matmul_gflops(64, 256, 256, DType::bf16, Compute::automatic, 2))
    EXPECT_TRUE(std::isfinite(v) && v > 0);
  EXPECT_FALSE(under_test_->description().empty());
}


}  // namespace
}  // namespace quarry::engine
