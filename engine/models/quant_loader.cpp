#include "engine/models/quant_loader.hpp"

#include <cstring>
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

LoadedQuantized read_gptq(const TensorStore& store, const QuantizationConfig& q, const std::string& m,
                          std::size_t rows, std::size_t cols) {
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
  LoadedQuantized l;
  l.scales = std::move(scales);
  l.zeros = std::move(zeros);
  l.g_idx = std::move(g_idx);
  QuantizedMatrix& mat = l.m;
  mat.rows = rows;
  mat.cols = cols;
  mat.layout = QuantLayout::gptq;
  mat.element = bits == 4 ? QuantElement::int4 : QuantElement::int8;
  mat.data = qw.data;
  mat.scales = l.scales;
  mat.zeros = l.zeros;
  mat.g_idx = l.g_idx;
  mat.group_size = gs;
  mat.n_groups = G;
  return l;
}

/// Row-quantized modules (fp8, compressed-tensors): the scale blocks from the scale tensor's shape.
LoadedQuantized read_rows(const TensorStore& store, const QuantizationConfig& q, std::size_t rows, std::size_t cols,
                          const TensorView& values, QuantElement element, const TensorView& scale) {
  LoadedQuantized l;
  QuantizedMatrix& mat = l.m;
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
  l.scales = floats_of(store, q, scale);
  mat.scales = l.scales;
  mat.block_rows = br;
  mat.block_cols = bc;
  return l;
}

}  // namespace

std::optional<LoadedQuantized> read_quantized(const TensorStore& store, const QuantizationConfig& q,
                                              const std::string& name, std::size_t rows, std::size_t cols) {
  const std::string suffix = ".weight";
  if (!q.present() || name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix))
    return std::nullopt;
  const std::string m = name.substr(0, name.size() - suffix.size());
  if (q.is_not_converted(m)) return std::nullopt;  // modules_to_not_convert / ignore: stored in their float dtype
  const std::string& method = q.quant_method;
  if (method == "gptq" || method == "auto-round") {
    if (store.has(m + ".qweight")) return read_gptq(store, q, m, rows, cols);
    return std::nullopt;
  }
  if (method == "fp8") {
    if (!store.has(m + ".weight_scale_inv")) return std::nullopt;
    const TensorView& w = store.get_raw(name, {rows, cols}, "F8_E4M3");
    return read_rows(store, q, rows, cols, w, QuantElement::fp8_e4m3, *store.find(m + ".weight_scale_inv"));
  }
  // compressed-tensors
  const TensorView* scale = store.find(m + ".weight_scale");
  if (store.has(m + ".weight_packed")) {
    if (!scale) fail(store, q, "module '" + m + "' has weight_packed but no weight_scale");
    if (cols % 8 != 0) fail(store, q, "module '" + m + "': int4 packing needs inputs in multiples of 8");
    const TensorView& w = store.get_raw(m + ".weight_packed", {rows, cols / 8}, "I32");
    return read_rows(store, q, rows, cols, w, QuantElement::int4, *scale);
  }
  if (!scale) return std::nullopt;
  const bool fp8 = q.element == "float";
  const TensorView& w = store.get_raw(name, {rows, cols}, fp8 ? "F8_E4M3" : "I8");
  return read_rows(store, q, rows, cols, w, fp8 ? QuantElement::fp8_e4m3 : QuantElement::int8, *scale);
}

LoadedQuantized slice_quantized(const LoadedQuantized& full, std::size_t row0, std::size_t n_rows, std::size_t col0,
                                std::size_t n_cols, const std::string& what) {
  const QuantizedMatrix& f = full.m;
  const auto refuse = [&](const std::string& why) {
    throw std::runtime_error(what + ": rows [" + std::to_string(row0) + ", " + std::to_string(row0 + n_rows) +
                             "), columns [" + std::to_string(col0) + ", " + std::to_string(col0 + n_cols) +
                             ") of the quantized matrix cannot be split across ranks: " + why);
  };
  if (row0 + n_rows > f.rows || col0 + n_cols > f.cols) refuse("outside the matrix");
  LoadedQuantized s;
  QuantizedMatrix& m = s.m;
  m = f;
  m.rows = n_rows;
  m.cols = n_cols;
  const auto* src = static_cast<const unsigned char*>(f.data);
  if (f.layout == QuantLayout::rows) {
    const std::size_t br = f.block_rows, bc = f.block_cols ? f.block_cols : f.cols;
    const std::size_t sc = (f.cols + bc - 1) / bc;
    if (row0 % br != 0 || (n_rows % br != 0 && row0 + n_rows != f.rows))
      refuse("the scale blocks are " + std::to_string(br) + " rows high");
    const bool one_block_col = bc >= f.cols;
    if (!one_block_col && (col0 % bc != 0 || (n_cols % bc != 0 && col0 + n_cols != f.cols)))
      refuse("the scale blocks are " + std::to_string(bc) + " columns wide");
    const bool int4 = f.element == QuantElement::int4;
    if (int4 && (col0 % 8 != 0 || n_cols % 8 != 0)) refuse("int4 values are packed 8 to an int32");
    // Values: the rows' column range, each row contiguous.
    const std::size_t in_row = int4 ? f.cols / 2 : f.cols, out_row = int4 ? n_cols / 2 : n_cols;
    const std::size_t off = int4 ? col0 / 2 : col0;
    s.data.resize(n_rows * out_row);
    for (std::size_t r = 0; r < n_rows; ++r)
      std::memcpy(s.data.data() + r * out_row, src + (row0 + r) * in_row + off, out_row);
    // Scales: the blocks the slice covers.
    const std::size_t b0 = row0 / br, b1 = (row0 + n_rows + br - 1) / br;
    const std::size_t c0 = one_block_col ? 0 : col0 / bc, c1 = one_block_col ? 1 : (col0 + n_cols + bc - 1) / bc;
    for (std::size_t b = b0; b < b1; ++b)
      for (std::size_t c = c0; c < c1; ++c) s.scales.push_back(full.scales[b * sc + c]);
    m.block_cols = one_block_col ? n_cols : bc;
  } else {
    const std::size_t bits = f.bits(), per = 32 / bits, N = f.rows, G = f.n_groups;
    if (col0 % per != 0 || n_cols % per != 0)
      refuse(std::to_string(per) + " values are packed to an int32 along the inputs");
    std::size_t g0 = 0, g1 = G;
    if (full.g_idx.empty()) {
      const std::size_t gs = f.group_size;
      if (col0 % gs != 0 || (n_cols % gs != 0 && col0 + n_cols != f.cols))
        refuse("the groups are " + std::to_string(gs) + " columns wide");
      g0 = col0 / gs;
      g1 = (col0 + n_cols + gs - 1) / gs;
    } else {  // desc_act: the columns keep their groups; every group's table stays
      s.g_idx.assign(full.g_idx.begin() + static_cast<std::ptrdiff_t>(col0),
                     full.g_idx.begin() + static_cast<std::ptrdiff_t>(col0 + n_cols));
    }
    // qweight [cols / per, N]: the slice's word rows, each its output columns.
    const auto* w = reinterpret_cast<const std::uint32_t*>(src);
    std::vector<std::uint32_t> words;
    for (std::size_t kw = col0 / per; kw < (col0 + n_cols) / per; ++kw)
      words.insert(words.end(), w + kw * N + row0, w + kw * N + row0 + n_rows);
    s.data.resize(words.size() * 4);
    std::memcpy(s.data.data(), words.data(), s.data.size());
    for (std::size_t g = g0; g < g1; ++g)
      for (std::size_t n = row0; n < row0 + n_rows; ++n) {
        s.scales.push_back(full.scales[g * N + n]);
        s.zeros.push_back(full.zeros[g * N + n]);
      }
    m.n_groups = g1 - g0;
  }
  m.data = s.data.data();
  m.scales = s.scales;
  m.zeros = s.zeros;
  m.g_idx = s.g_idx;
  return s;
}

LoadedQuantized gather_rows_quantized(const LoadedQuantized& full,
                                      const std::vector<std::pair<std::size_t, std::size_t>>& runs,
                                      const std::string& what) {
  const QuantizedMatrix& f = full.m;
  std::vector<LoadedQuantized> parts;
  std::size_t n = 0;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const auto [row0, count] = runs[i];
    if (f.layout == QuantLayout::rows && i + 1 < runs.size() && count % f.block_rows != 0)
      throw std::runtime_error(what + ": rows [" + std::to_string(row0) + ", " + std::to_string(row0 + count) +
                               ") end inside a scale block of " + std::to_string(f.block_rows) + " rows");
    parts.push_back(slice_quantized(full, row0, count, 0, f.cols, what));
    n += count;
  }
  LoadedQuantized g;
  g.m = f;
  g.m.rows = n;
  if (f.layout == QuantLayout::rows) {  // whole rows and whole scale-block rows, one part after another
    g.m.block_cols = parts.empty() ? f.block_cols : parts[0].m.block_cols;
    for (const auto& p : parts) {
      g.data.insert(g.data.end(), p.data.begin(), p.data.end());
      g.scales.insert(g.scales.end(), p.scales.begin(), p.scales.end());
    }
  } else {  // GPTQ: output rows are the columns of qweight [K / per, N] and of the [G, N] tables
    const std::size_t words = f.cols / (32 / f.bits()), G = f.n_groups;
    g.data.resize(words * n * 4);
    auto* w = reinterpret_cast<std::uint32_t*>(g.data.data());
    g.scales.resize(G * n);
    g.zeros.resize(G * n);
    std::size_t at = 0;
    for (const auto& p : parts) {
      const std::size_t c = p.m.rows;
      const auto* pw = reinterpret_cast<const std::uint32_t*>(p.data.data());
      for (std::size_t kw = 0; kw < words; ++kw) std::memcpy(&w[kw * n + at], pw + kw * c, c * 4);
      for (std::size_t gi = 0; gi < G; ++gi) {
        std::memcpy(&g.scales[gi * n + at], p.scales.data() + gi * c, c * sizeof(float));
        std::memcpy(&g.zeros[gi * n + at], p.zeros.data() + gi * c, c * sizeof(std::int16_t));
      }
      at += c;
    }
    g.g_idx = full.g_idx;
  }
  g.m.data = g.data.data();
  g.m.scales = g.scales;
  g.m.zeros = g.zeros;
  g.m.g_idx = g.g_idx;
  return g;
}

std::unique_ptr<Weight> load_linear(const TensorStore& store, Backend& backend, Compute compute,
                                    const QuantizationConfig& q, const std::string& name, std::size_t rows,
                                    std::size_t cols, WeightUse use) {
  if (auto l = read_quantized(store, q, name, rows, cols)) return backend.load_quantized(l->m, use, compute);
  const TensorView& t = store.get(name, {rows, cols});
  return backend.load_matrix(t.data, t.dtype, rows, cols, use, compute);
}

}  // namespace quarry::engine
