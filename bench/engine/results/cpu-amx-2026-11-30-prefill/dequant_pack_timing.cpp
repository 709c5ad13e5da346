#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>
#include "engine/backend/cpu/quant.hpp"
#include "engine/backend/cpu/gemm_kernels.hpp"
#include "tests/backend/quant_cases.hpp"
using namespace quarry::engine;
using namespace quarry::engine::testing;
template <class F> double best(F f, int n = 15) { std::vector<double> t; for (int r = 0; r < n; ++r) { auto t0 = std::chrono::steady_clock::now(); f(); t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count()); } std::sort(t.begin(), t.end()); return t[0]; }
int main() {
  const std::size_t m = 64, K = 4096, N = 4096;
  std::vector<Case> cs;
  cs.push_back(rows_case("int8", N, K, QuantElement::int8, 1, K, 1));
  cs.push_back(gptq_case("gptq4", N, K, 4, 128, false, false, 2));
  cs.push_back(rows_case("fp8", N, K, QuantElement::fp8_e4m3, 128, 128, 3));
  std::mt19937 rng(5); std::normal_distribution<float> nd;
  std::vector<float> x(m * K), y(m * N);
  for (auto& v : x) v = nd(rng);
  std::vector<std::uint16_t> xb(cpu::packed_x_elements(m, K));
  cpu::round_x_packed(x.data(), m, K, K, xb.data());
  for (auto& c : cs) {
    cpu::QuantWeight w = cpu::make_quant_weight(c.q);
    std::vector<float> buf(128 * K);
    cpu::PackedBf16 pk; pk.n = 128; pk.k = K; pk.data.resize(8 * (K / 32) * 512);
    for (std::size_t st : {128, 16}) {
      double tdq = best([&] { for (std::size_t j0 = 0; j0 < N; j0 += st) cpu::detail::dequant_rows_avx512(w.view, j0, j0 + st, buf.data()); });
      double tpk = best([&] { for (std::size_t j0 = 0; j0 < N; j0 += 128) for (std::size_t r = 0; r < 128; r += st) { cpu::detail::dequant_rows_avx512(w.view, j0 + r, j0 + r + st, buf.data()); cpu::detail::amx_pack_b(buf.data(), cpu::WeightType::f32, st, K, 0, st / 16, pk.data.data() + r / 16 * (K / 32) * 512); } });
      std::printf("%s stage %zu: dequant %.2f ms, dequant+pack %.2f ms\n", c.name.c_str(), st, tdq, tpk);
    }
    double tf = best([&] { for (std::size_t j0 = 0; j0 < N; j0 += 128) cpu::detail::dequant_pack_bf16_avx512(w.view, j0, j0 + 128, pk.data.data()); });
    std::printf("%s fused dequant+pack %.2f ms\n", c.name.c_str(), tf);
    double tg = best([&] { for (std::size_t j0 = 0; j0 < N; j0 += 128) cpu::gemm_packed_rounded(xb.data(), m, pk, 128, y.data() + j0, N, nullptr); });
    std::printf("%s gemm_packed_rounded (VDPBF16PS here) %.2f ms\n", c.name.c_str(), tg);
  }
}
