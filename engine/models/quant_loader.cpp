#include "engine/models/quant_loader.hpp"

#include <stdexcept>
#include <vector>

#include "engine/core/dtype.hpp"

namespace quarry::engine {

namespace {

[[noreturn]] void fail(const TensorStore& store, const QuantizationConfig& q, const std::string& why) {
  throw std::runtime_error(store.origin().string() + " (quant_method \"" + q.quant_method + "\"): " + why);
}

/// A small float table widened to f32 (scales).
std::vector<float> floats_of(const TensorStore& store, const QuantizationConfig& q, const TensorView& t) {
  if (!t.is_float) fail(store, q, "tensor '" + t.name + "' is " + t.stored + ", expected F32, F16 or BF16");
  std::vector<float> v(t.numel());
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = element_as_f32(t.data, t.dtype, i);
  return v;
}

std::unique_ptr<Weight> load_gptq(const TensorStore& store, Backend& backend, Compute compute,
                                  const QuantizationConfig& q, const std::string& m, std::size_t rows, std::size_t cols,
                                  WeightUse use) {
  const std::size_t bits = q.bits, per = 32 / bits;
  if (cols % per != 0 || rows % per != 0)
    fail(store, q, "module '" + m + "' of shape [" + std::to_string(rows) + ", " + std::to_string(cols) +
                       "] cannot be packed " + std::to_string(per) + " values to an int32");
  const TensorView& qw = store.get_raw(m + ".qweight", {cols / per, rows}, "I32");
  const TensorView* st = store.find(m + ".scales");
  if (!st || st->shape.size() != 2 || st->shape[1] != rows)
    fail(store, q, "module '" + m + "' has no scales of shape [groups, " + std::to_string(rows) + "]");
  const std::size_t G = st->shape[0];
  std::vector<float> scales = floats_of(store, q, *st);
  const TensorView& qz = store.get_raw(m + ".qzeros", {G, rows / per}, "I32");
  std::vector<std::int16_t> zeros(G * rows);
  const auto* zw = static_cast<const std::uint32_t*>(qz.data);
  const std::uint32_t mask = (1u << bits) - 1;
  for (std::size_t g = 0; g < G; ++g)
    for (std::size_t n = 0; n < rows; ++n)
      zeros[g * rows + n] = static_cast<std::int16_t>(((zw[g * (rows / per) + n / per] >> ((n % per) * bits)) & mask) +
                                                      (q.zero_point_offset ? 1 : 0));
  const std::size_t gs = q.group_size ? q.group_size : cols;
  std::vector<std::int32_t> g_idx;
  if (const TensorView* gi = store.find(m + ".g_idx")) {
    const TensorView& t = store.get_raw(m + ".g_idx", {cols}, "");
    if (t.stored != "I32" && t.stored != "I64")
      fail(store, q, "tensor '" + gi->name + "' is " + t.stored + ", expected I32");
    g_idx.resize(cols);
    bool trivial = true;
    for (std::size_t k = 0; k < cols; ++k) {
      const std::int64_t g = t.stored == "I32" ? static_cast<const std::int32_t*>(t.data)[k]
                                               : static_cast<const std::int64_t*>(t.data)[k];
      if (g < 0 || static_cast<std::size_t>(g) >= G)
        fail(store, q, "tensor '" + gi->name + "' holds group " + std::to_string(g) + " of " + std::to_string(G));
      g_idx[k] = static_cast<std::int32_t>(g);
      trivial = trivial && static_cast<std::size_t>(g) == k / gs;
    }
    if (trivial) g_idx.clear();  // the contiguous groups of group_size: no per-column lookup needed
  }
  if (g_idx.empty() && (cols + gs - 1) / gs != G)
    fail(store, q, "module '" + m + "' has " + std::to_string(G) + " groups, group_size " + std::to_string(gs) +
                       " over " + std::to_string(cols) + " inputs needs " + std::to_string((cols + gs - 1) / gs));
  QuantizedMatrix mat;
  mat.rows = rows;
  mat.cols = cols;
  mat.layout = QuantLayout::gptq;
  mat.element = bits == 4 ? QuantElement::int4 : QuantElement::int8;
  mat.data = qw.data;
  mat.scales = scales;
  mat.zeros = zeros;
  mat.g_idx = g_idx;
  mat.group_size = gs;
  mat.n_groups = G;
  return backend.load_quantized(mat, use, compute);
}

/// Row-quantized modules (fp8, compressed-tensors): the scale blocks from the scale tensor's shape.
std::unique_ptr<Weight> load_rows(const TensorStore& store, Backend& backend, Compute compute,
                                  const QuantizationConfig& q, const std::string& /*module*/, std::size_t rows, std::size_t cols,
                                  WeightUse use, const TensorView& values, QuantElement element,
                                  const TensorView& scale) {
  QuantizedMatrix mat;
  mat.rows = rows;
  mat.cols = cols;
  mat.layout = QuantLayout::rows;
  mat.element = element;
  mat.data = values.data;
  std::size_t br = 1, bc = cols;
  const std::string& s = q.strategy;
  if (s == "block") {
    br = q.block_rows;
    bc = q.block_cols;
  } else if (s == "group") {
    bc = q.group_size;
  } else if (s == "tensor") {
    br = rows;
  }
  const std::size_t sr = (rows + br - 1) / br, sc = (cols + bc - 1) / bc;
  if (scale.numel() != sr * sc || (scale.shape.size() == 2 && (scale.shape[0] != sr || scale.shape[1] != sc)))
    fail(store, q, "tensor '" + scale.name + "' has shape " + shape_string(scale.shape) + ", the " + s +
                       " strategy over [" + std::to_string(rows) + ", " + std::to_string(cols) + "] needs [" +
                       std::to_string(sr) + ", " + std::to_string(sc) + "]");
  std::vector<float> scales = floats_of(store, q, scale);
  mat.scales = scales;
  mat.block_rows = br;
  mat.block_cols = bc;
  return backend.load_quantized(mat, use, compute);
}

}  // namespace

std::unique_ptr<Weight> load_linear(const TensorStore& store, Backend& backend, Compute compute,
                                    const QuantizationConfig& q, const std::string& name, std::size_t rows,
                                    std::size_t cols, WeightUse use) {
  const auto plain = [&] {
    const TensorView& t = store.get(name, {rows, cols});
    return backend.load_matrix(t.data, t.dtype, rows, cols, use, compute);
  };
  const std::string suffix = ".weight";
  if (!q.present() || name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix))
    return plain();
  const std::string m = name.substr(0, name.size() - suffix.size());
  if (q.is_not_converted(m)) return plain();  // modules_to_not_convert / ignore: stored in their float dtype
  const std::string& method = q.quant_method;
  if (method == "gptq" || method == "auto-round") {
    if (store.has(m + ".qweight")) return load_gptq(store, backend, compute, q, m, rows, cols, use);
    return plain();
  }
  if (method == "fp8") {
    if (!store.has(m + ".weight_scale_inv")) return plain();
    const TensorView& w = store.get_raw(name, {rows, cols}, "F8_E4M3");
    return load_rows(store, backend, compute, q, m, rows, cols, use, w, QuantElement::fp8_e4m3,
                     *store.find(m + ".weight_scale_inv"));
  }
  // compressed-tensors
  const TensorView* scale = store.find(m + ".weight_scale");
  if (store.has(m + ".weight_packed")) {
    if (!scale) fail(store, q, "module '" + m + "' has weight_packed but no weight_scale");
    if (cols % 8 != 0) fail(store, q, "module '" + m + "': int4 packing needs inputs in multiples of 8");
    const TensorView& w = store.get_raw(m + ".weight_packed", {rows, cols / 8}, "I32");
    return load_rows(store, backend, compute, q, m, rows, cols, use, w, QuantElement::int4, *scale);
  }
  if (!scale) return plain();
  const bool fp8 = q.element == "float";
  const TensorView& w = store.get_raw(name, {rows, cols}, fp8 ? "F8_E4M3" : "I8");
  return load_rows(store, backend, compute, q, m, rows, cols, use, w, fp8 ? QuantElement::fp8_e4m3 : QuantElement::int8,
                   *scale);
}

}  // namespace quarry::engine
