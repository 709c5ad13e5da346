// Random quantized matrices in every layout of Backend::load_quantized, packed by the tests themselves
// from random integers and scales, with the value every element must dequantize to (the one-rounding
// f32 product): shared by the CPU kernel tests and the backend op tests.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/backend.hpp"
#include "engine/core/dtype.hpp"

namespace quarry::engine::testing {

/// A quantized matrix made by the test from random integers, packed by the test, with the values it
/// must dequantize to.
struct Case {
  std::string name;
  QuantizedMatrix q;
  std::vector<std::uint32_t> words;
  std::vector<std::uint8_t> bytes;
  std::vector<float> scales;
  std::vector<std::int16_t> zeros;
  std::vector<std::int32_t> g_idx;
  std::vector<float> want;  ///< [rows, cols]
};

inline Case gptq_case(const std::string& name, std::size_t N, std::size_t K, std::size_t bits, std::size_t gs, bool desc_act,
               bool asym, std::uint32_t seed) {
  std::mt19937 rng(seed);
  Case c;
  c.name = name;
  const std::size_t per = 32 / bits, maxq = (1u << bits) - 1, G = (K + gs - 1) / gs;
  c.words.assign(K / per * N, 0);
  c.scales.resize(G * N);
  c.zeros.resize(G * N);
  std::uniform_real_distribution<float> us(1e-3f, 2e-2f);
  for (auto& s : c.scales) s = us(rng);
  for (auto& z : c.zeros)
    z = static_cast<std::int16_t>(asym ? rng() % (maxq + 2) : (maxq + 1) / 2);  // asym: 0 .. 2^bits (v1's 16)
  std::vector<std::size_t> group(K);
  for (std::size_t k = 0; k < K; ++k) group[k] = k / gs;
  if (desc_act) {
    std::shuffle(group.begin(), group.end(), rng);
    c.g_idx.assign(group.begin(), group.end());
  }
  c.want.resize(N * K);
  for (std::size_t n = 0; n < N; ++n)
    for (std::size_t k = 0; k < K; ++k) {
      const std::uint32_t q = rng() & maxq;
      c.words[(k / per) * N + n] |= q << ((k % per) * bits);
      const std::size_t g = group[k];
      c.want[n * K + k] = static_cast<float>(static_cast<int>(q) - c.zeros[g * N + n]) * c.scales[g * N + n];
    }
  c.q.rows = N;
  c.q.cols = K;
  c.q.layout = QuantLayout::gptq;
  c.q.element = bits == 4 ? QuantElement::int4 : QuantElement::int8;
  c.q.data = c.words.data();
  c.q.scales = c.scales;
  c.q.zeros = c.zeros;
  c.q.g_idx = c.g_idx;
  c.q.group_size = gs;
  c.q.n_groups = G;
  return c;
}

inline Case rows_case(const std::string& name, std::size_t N, std::size_t K, QuantElement e, std::size_t br, std::size_t bc,
               std::uint32_t seed) {
  std::mt19937 rng(seed);
  Case c;
  c.name = name;
  const std::size_t sr = (N + br - 1) / br, sc = (K + bc - 1) / bc;
  c.scales.resize(sr * sc);
  std::uniform_real_distribution<float> us(1e-4f, 3e-2f);
  for (auto& s : c.scales) s = us(rng);
  c.want.resize(N * K);
  if (e == QuantElement::int4) c.words.assign(N * K / 8, 0);
  else c.bytes.resize(N * K);
  for (std::size_t n = 0; n < N; ++n)
    for (std::size_t k = 0; k < K; ++k) {
      const float s = c.scales[(n / br) * sc + k / bc];
      float v;
      if (e == QuantElement::int4) {
        const std::uint32_t u = rng() & 15u;
        c.words[n * (K / 8) + k / 8] |= u << ((k % 8) * 4);
        v = static_cast<float>(static_cast<int>(u) - 8);
      } else if (e == QuantElement::int8) {
        const auto b = static_cast<std::int8_t>(rng() & 0xff);
        c.bytes[n * K + k] = static_cast<std::uint8_t>(b);
        v = static_cast<float>(b);
      } else {
        std::uint8_t b = static_cast<std::uint8_t>(rng() & 0xff);
        if ((b & 0x7f) == 0x7f) b &= 0xfe;  // no NaN in the products (tested on its own below)
        c.bytes[n * K + k] = b;
        v = fp8_e4m3_to_f32(b);
      }
      c.want[n * K + k] = v * s;
    }
  c.q.rows = N;
  c.q.cols = K;
  c.q.layout = QuantLayout::rows;
  c.q.element = e;
  c.q.data = e == QuantElement::int4 ? static_cast<const void*>(c.words.data()) : c.bytes.data();
  c.q.scales = c.scales;
  c.q.block_rows = br;
  c.q.block_cols = bc;
  return c;
}

}  // namespace quarry::engine::testing
