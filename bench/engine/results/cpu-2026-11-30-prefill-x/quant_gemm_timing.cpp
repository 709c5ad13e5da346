#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>
#include "engine/backend/cpu/quant.hpp"
#include "tests/backend/quant_cases.hpp"
using namespace quarry::engine;
using namespace quarry::engine::testing;
int main(int argc, char** argv) {
  const std::size_t m = argc > 1 ? std::atoi(argv[1]) : 64;
  std::vector<Case> cs;
  cs.push_back(rows_case("int8", 4096, 4096, QuantElement::int8, 1, 4096, 1));
  cs.push_back(gptq_case("gptq4", 4096, 4096, 4, 128, false, false, 2));
  cs.push_back(rows_case("fp8", 4096, 4096, QuantElement::fp8_e4m3, 128, 128, 3));
  std::mt19937 rng(5); std::normal_distribution<float> nd;
  std::vector<float> x(m * 4096), y(m * 4096);
  for (auto& v : x) v = nd(rng);
  for (auto& c : cs) {
    cpu::QuantWeight w = cpu::make_quant_weight(c.q);
    w.bf16_compute = true;
    cpu::QuantScratch s;
    std::vector<double> t;
    for (int r = 0; r < 25; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      cpu::quant_gemm(cpu::GemmKernel::avx512, x.data(), m, 4096, w, 4096, y.data(), 4096, nullptr, s);
      t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    std::printf("%s m=%zu median %.2f ms min %.2f\n", c.name.c_str(), m, t[t.size() / 2], t[0]);
  }
}
