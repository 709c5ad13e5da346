// Portable dequantization of quantized weight rows (the reference the SIMD sets must match bit for bit).
#include "engine/backend/cpu/quant_kernels.hpp"
#include "engine/core/dtype.hpp"

namespace quarry::engine::cpu::detail {

void dequant_rows_scalar(const QuantView& q, std::size_t j0, std::size_t j1, float* out) {
  const std::size_t K = q.k, N = q.n;
  if (q.layout == QuantView::gptq) {
    const auto* w = static_cast<const std::uint32_t*>(q.data);
    const unsigned bits = q.element == QuantView::int4 ? 4 : 8, per = 32 / bits, mask = (1u << bits) - 1;
    for (std::size_t n = j0; n < j1; ++n) {
      float* o = out + (n - j0) * K;
      for (std::size_t k = 0; k < K; ++k) {
        const auto v = static_cast<std::int32_t>((w[(k / per) * N + n] >> ((k % per) * bits)) & mask);
        const std::size_t g = q.g_idx ? static_cast<std::size_t>(q.g_idx[k]) : k / q.group_size;
        o[k] = static_cast<float>(v - q.zeros[g * N + n]) * q.scales[g * N + n];
      }
    }
    return;
  }
  const std::size_t bc = q.block_cols;
  for (std::size_t n = j0; n < j1; ++n) {
    float* o = out + (n - j0) * K;
    const float* srow = q.scales + (n / q.block_rows) * q.scale_cols;
    if (q.element == QuantView::int4) {
      const auto* w = static_cast<const std::uint32_t*>(q.data) + n * (K / 8);
      for (std::size_t k = 0; k < K; ++k)
        o[k] = static_cast<float>(static_cast<std::int32_t>((w[k / 8] >> ((k % 8) * 4)) & 15u) - 8) * srow[k / bc];
    } else if (q.element == QuantView::int8) {
      const auto* b = static_cast<const std::int8_t*>(q.data) + n * K;
      for (std::size_t k = 0; k < K; ++k) o[k] = static_cast<float>(b[k]) * srow[k / bc];
    } else {
      const auto* b = static_cast<const std::uint8_t*>(q.data) + n * K;
      for (std::size_t k = 0; k < K; ++k) o[k] = fp8_e4m3_to_f32(b[k]) * srow[k / bc];
    }
  }
}

}  // namespace quarry::engine::cpu::detail
