#include "engine/models/quantize.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "engine/core/dtype.hpp"
#include "engine/models/config.hpp"
#include "engine/models/safetensors.hpp"

namespace quarry::engine {

namespace {

[[noreturn]] void fail(const std::filesystem::path& where, const std::string& why) {
  throw std::runtime_error(where.string() + ": " + why);
}

/// IEEE f16 from f32, round to nearest even (scales: normal range; tiny values flush through subnormals).
std::uint16_t f32_to_f16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const float a = std::fabs(f);
  if (a >= 65520.f) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (a < 6.103515625e-05f) {  // subnormal f16: multiples of 2^-24
    const auto m = static_cast<std::uint32_t>(std::nearbyint(a * 16777216.f));
    return static_cast<std::uint16_t>(sign | m);
  }
  std::uint32_t mag = u & 0x7fffffffu;
  mag += 0xfffu + ((mag >> 13) & 1u);  // round to nearest even at bit 13
  return static_cast<std::uint16_t>(sign | (((mag >> 23) - 112) << 10) | ((mag >> 13) & 0x3ffu));
}

/// Symmetric round-to-nearest per group of `gs` input columns of each row of w [rows, cols]: scale
/// absmax / qmax (1 for an all-zero group), q = clamp(round(w / scale), qmin, qmax). Hands each group's
/// scale to put_scale(n, g, s) and each value to put_value(n, k, q); deq (optional) gets q * s.
template <class PutScale, class PutValue>
void quantize_symmetric_groups(const float* w, std::size_t rows, std::size_t cols, std::size_t gs, int qmin, int qmax,
                               PutScale&& put_scale, PutValue&& put_value, std::vector<float>* deq) {
  const std::size_t G = (cols + gs - 1) / gs;
  for (std::size_t n = 0; n < rows; ++n)
    for (std::size_t g = 0; g < G; ++g) {
      const std::size_t k1 = std::min(cols, (g + 1) * gs);
      float amax = 0.f;
      for (std::size_t k = g * gs; k < k1; ++k) amax = std::max(amax, std::fabs(w[n * cols + k]));
      const float s = amax > 0.f ? amax / static_cast<float>(qmax) : 1.f;
      put_scale(n, g, s);
      for (std::size_t k = g * gs; k < k1; ++k) {
        const int q = std::clamp(static_cast<int>(std::nearbyint(w[n * cols + k] / s)), qmin, qmax);
        put_value(n, k, q);
        if (deq) (*deq)[n * cols + k] = static_cast<float>(q) * s;
      }
    }
}

struct Part {
  std::string suffix, dtype;
  std::vector<std::size_t> shape;
  std::size_t element_size = 4;
  std::vector<std::uint8_t> bytes;
  std::size_t size() const {
    return std::accumulate(shape.begin(), shape.end(), element_size, std::multiplies<>());
  }
};

template <class T>
void put(std::vector<std::uint8_t>& out, std::size_t i, T v) {
  std::memcpy(out.data() + i * sizeof(T), &v, sizeof(T));
}

/// The tensors a module of [rows, cols] quantizes to (shapes only, or with data when `w` is given), and
/// the dequantized values [rows * cols] when `deq` is not null.
std::vector<Part> quantize_module(const QuantizeOptions& o, std::size_t rows, std::size_t cols, const float* w,
                                  std::vector<float>* deq) {
  std::vector<Part> parts;
  if (deq) deq->assign(rows * cols, 0.f);
  if (o.method == "int4-gptq") {
    const std::size_t bits = o.bits, per = 32 / bits, maxq = (1u << bits) - 1;
    const std::size_t gs = o.group_size ? o.group_size : cols, G = cols / gs;
    parts.push_back({".qweight", "I32", {cols / per, rows}, 4, {}});
    parts.push_back({".qzeros", "I32", {G, rows / per}, 4, {}});
    parts.push_back({".g_idx", "I32", {cols}, 4, {}});
    parts.push_back({".scales", "F16", {G, rows}, 2, {}});
    if (!w) return parts;
    for (auto& p : parts) p.bytes.assign(p.size(), 0);
    // Groups: k / gs, or in activation order (columns by decreasing squared norm) for desc_act.
    std::vector<std::size_t> order(cols), group(cols);
    std::iota(order.begin(), order.end(), 0);
    if (o.desc_act) {
      std::vector<double> norm(cols, 0.0);
      for (std::size_t n = 0; n < rows; ++n)
        for (std::size_t k = 0; k < cols; ++k) norm[k] += static_cast<double>(w[n * cols + k]) * w[n * cols + k];
      std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return norm[a] > norm[b]; });
    }
    for (std::size_t i = 0; i < cols; ++i) group[order[i]] = i / gs;
    for (std::size_t k = 0; k < cols; ++k) put(parts[2].bytes, k, static_cast<std::int32_t>(group[k]));
    auto* qw = reinterpret_cast<std::uint32_t*>(parts[0].bytes.data());
    auto* qz = reinterpret_cast<std::uint32_t*>(parts[1].bytes.data());
    const int zmin = o.gptq_v2 ? 0 : 1;  // v1 stores z - 1: a zero point of 0 cannot be written
    for (std::size_t n = 0; n < rows; ++n) {
      const float* row = w + n * cols;
      for (std::size_t g = 0; g < G; ++g) {
        float lo = 0.f, hi = 0.f;
        for (std::size_t i = g * gs; i < (g + 1) * gs; ++i) {
          lo = std::min(lo, row[order[i]]);
          hi = std::max(hi, row[order[i]]);
        }
        float scale;
        int zero;
        if (o.sym) {
          const float amax = std::max(-lo, hi);
          scale = 2.f * amax / static_cast<float>(maxq);
          zero = static_cast<int>((maxq + 1) / 2);
        } else {
          scale = (hi - lo) / static_cast<float>(maxq);
          zero = scale > 0.f ? static_cast<int>(std::nearbyint(-lo / scale)) : 0;
        }
        const std::uint16_t sh = f32_to_f16(scale > 0.f ? scale : 1.f);
        const float s = f16_to_f32(sh);
        zero = std::clamp(zero, zmin, static_cast<int>(maxq));
        put(parts[3].bytes, g * rows + n, sh);
        const auto zs = static_cast<std::uint32_t>(zero - (o.gptq_v2 ? 0 : 1));
        qz[g * (rows / per) + n / per] |= zs << ((n % per) * bits);
        for (std::size_t i = g * gs; i < (g + 1) * gs; ++i) {
          const std::size_t k = order[i];
          const int q = std::clamp(static_cast<int>(std::nearbyint(row[k] / s)) + zero, 0, static_cast<int>(maxq));
          qw[(k / per) * rows + n] |= static_cast<std::uint32_t>(q) << ((k % per) * bits);
          if (deq) (*deq)[n * cols + k] = static_cast<float>(q - zero) * s;
        }
      }
    }
    return parts;
  }
  if (o.method == "int4-ct") {
    // compressed-tensors pack-quantized: symmetric int4 (-8..7, scale absmax / 7 per group of input
    // columns), stored as value + 8, eight to an int32 along the input dimension, lowest bits first.
    const std::size_t gs = o.group_size ? o.group_size : cols, G = (cols + gs - 1) / gs;
    parts.push_back({".weight_packed", "I32", {rows, cols / 8}, 4, {}});
    parts.push_back({".weight_scale", "F32", {rows, G}, 4, {}});
    parts.push_back({".weight_shape", "I64", {2}, 8, {}});
    if (!w) return parts;
    for (auto& p : parts) p.bytes.assign(p.size(), 0);
    put(parts[2].bytes, 0, static_cast<std::int64_t>(rows));
    put(parts[2].bytes, 1, static_cast<std::int64_t>(cols));
    auto* packed = reinterpret_cast<std::uint32_t*>(parts[0].bytes.data());
    quantize_symmetric_groups(
        w, rows, cols, gs, -8, 7, [&](std::size_t n, std::size_t g, float s) { put(parts[1].bytes, n * G + g, s); },
        [&](std::size_t n, std::size_t k, int q) {
          packed[n * (cols / 8) + k / 8] |= static_cast<std::uint32_t>(q + 8) << ((k % 8) * 4);
        },
        deq);
    return parts;
  }
  if (o.method == "int8") {
    const std::size_t gs = o.group_size ? o.group_size : cols, G = (cols + gs - 1) / gs;
    parts.push_back({".weight_scale", "F32", {rows, G}, 4, {}});
    parts.push_back({".weight", "I8", {rows, cols}, 1, {}});
    if (!w) return parts;
    for (auto& p : parts) p.bytes.assign(p.size(), 0);
    quantize_symmetric_groups(
        w, rows, cols, gs, -127, 127, [&](std::size_t n, std::size_t g, float s) { put(parts[0].bytes, n * G + g, s); },
        [&](std::size_t n, std::size_t k, int q) {
          parts[1].bytes[n * cols + k] = static_cast<std::uint8_t>(static_cast<std::int8_t>(q));
        },
        deq);
    return parts;
  }
  // fp8, 128 x 128 blocks
  constexpr std::size_t B = 128;
  const std::size_t br = (rows + B - 1) / B, bc = (cols + B - 1) / B;
  parts.push_back({".weight_scale_inv", "F32", {br, bc}, 4, {}});
  parts.push_back({".weight", "F8_E4M3", {rows, cols}, 1, {}});
  if (!w) return parts;
  for (auto& p : parts) p.bytes.assign(p.size(), 0);
  for (std::size_t a = 0; a < br; ++a)
    for (std::size_t b = 0; b < bc; ++b) {
      const std::size_t n1 = std::min(rows, (a + 1) * B), k1 = std::min(cols, (b + 1) * B);
      float amax = 0.f;
      for (std::size_t n = a * B; n < n1; ++n)
        for (std::size_t k = b * B; k < k1; ++k) amax = std::max(amax, std::fabs(w[n * cols + k]));
      const float s = amax > 0.f ? amax / 448.f : 1.f;
      put(parts[0].bytes, a * bc + b, s);
      for (std::size_t n = a * B; n < n1; ++n)
        for (std::size_t k = b * B; k < k1; ++k) {
          const std::uint8_t q = f32_to_fp8_e4m3(w[n * cols + k] / s);
          parts[1].bytes[n * cols + k] = q;
          if (deq) (*deq)[n * cols + k] = fp8_e4m3_to_f32(q) * s;
        }
    }
  return parts;
}

bool listed(const std::vector<std::string>& keep, const std::string& module) {
  for (const auto& k : keep)
    if (module == k || (module.size() > k.size() && module.compare(module.size() - k.size(), k.size(), k) == 0 &&
                        module[module.size() - k.size() - 1] == '.'))
      return true;
  return false;
}

/// One tensor of an output file: copied (widened to f32 for the dequantized reference) or part of a module.
struct Entry {
  std::string name, dtype;
  std::vector<std::size_t> shape;
  std::size_t bytes = 0;
  const TensorView* source = nullptr;
  bool widen = false;
  std::size_t module = 0, part = 0;  ///< for module parts (source null)
};

class Writer {
 public:
  explicit Writer(std::filesystem::path path) : path_(std::move(path)) {}
  void add(Entry e) { entries_.push_back(std::move(e)); }
  /// Writes the header, then every entry's bytes from `produce(entry)`.
  template <class F>
  std::size_t write(F&& produce) {
    nlohmann::ordered_json header;
    header["__metadata__"] = {{"format", "pt"}};
    std::size_t offset = 0;
    for (const auto& e : entries_) {
      header[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.bytes}}};
      offset += e.bytes;
    }
    std::string h = header.dump();
    while (h.size() % 8 != 0) h += ' ';
    std::ofstream out(path_, std::ios::binary);
    if (!out) fail(path_, "cannot create");
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(static_cast<std::uint64_t>(h.size()) >> (8 * i));
    out.write(reinterpret_cast<const char*>(len), 8);
    out.write(h.data(), static_cast<std::streamsize>(h.size()));
    for (const auto& e : entries_) {
      const std::vector<std::uint8_t>& b = produce(e);
      if (b.size() != e.bytes) throw std::logic_error("quantize: " + e.name + " produced the wrong size");
      out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    }
    out.flush();
    if (!out) fail(path_, "write failed (disk full?)");
    return offset;
  }

 private:
  std::filesystem::path path_;
  std::vector<Entry> entries_;
};

void write_config(const std::filesystem::path& path, const nlohmann::json& cfg) {
  std::ofstream out(path);
  out << cfg.dump(2) << "\n";
  if (!out) fail(path, "write failed");
}

}  // namespace

QuantizeReport quantize_checkpoint(const std::filesystem::path& in_dir, const std::filesystem::path& out_dir,
                                   const QuantizeOptions& o) {
  if (o.method != "int8" && o.method != "int4-gptq" && o.method != "int4-ct" && o.method != "fp8")
    throw std::runtime_error("quantize: unknown method \"" + o.method + "\" (int8, int4-gptq, int4-ct, fp8)");
  if (o.method == "int4-gptq" && o.bits != 4 && o.bits != 8)
    throw std::runtime_error("quantize: int4-gptq takes bits 4 or 8, not " + std::to_string(o.bits));
  const auto cfg_path = in_dir / "config.json";
  std::ifstream cin(cfg_path);
  if (!cin) fail(cfg_path, "cannot open");
  std::stringstream ss;
  ss << cin.rdbuf();
  const ModelConfig mc = parse_model_config(ss.str(), cfg_path.string());
  if (mc.quantization.present()) fail(cfg_path, "the checkpoint is already quantized (" + mc.quantization.quant_method + ")");
  nlohmann::json cfg = nlohmann::json::parse(ss.str());
  const auto store = TensorStore::open(in_dir);
  std::filesystem::create_directories(out_dir);
  if (!o.dequantized_dir.empty()) std::filesystem::create_directories(o.dequantized_dir);

  // The tensors in name order; the modules to quantize: 2-D *_proj.weight and lm_head.weight.
  std::vector<std::string> names;
  // TensorStore has no listing: the names come from the index or the single file's header.
  {
    std::vector<std::filesystem::path> files;
    if (std::filesystem::exists(in_dir / "model.safetensors.index.json")) {
      std::ifstream in(in_dir / "model.safetensors.index.json");
      const auto idx = nlohmann::json::parse(in, nullptr, false);
      if (idx.is_discarded() || !idx.contains("weight_map")) fail(in_dir, "bad model.safetensors.index.json");
      for (auto it = idx["weight_map"].begin(); it != idx["weight_map"].end(); ++it) names.push_back(it.key());
    } else {
      const SafetensorsFile f(in_dir / "model.safetensors");
      for (const auto& [n, _] : f.tensors()) names.push_back(n);
    }
  }
  std::sort(names.begin(), names.end());
  QuantizeReport rep;
  struct Module {
    std::string name;  ///< without ".weight"
    const TensorView* w;
    std::size_t offset = 0, rows = 0, cols = 0;  ///< a [rows, cols] matrix at element `offset` of w
  };
  std::vector<Module> modules;
  std::vector<std::string> not_converted;
  Writer qout(out_dir / "model.safetensors"), dout(o.dequantized_dir.empty() ? std::filesystem::path() : o.dequantized_dir / "model.safetensors");
  const std::string suffix = ".weight";
  // Whether a [rows, cols] linear can be written in the method's layout.
  const auto fits = [&](std::size_t rows, std::size_t cols) {
    if (o.method == "int4-ct") return cols % 8 == 0;
    if (o.method != "int4-gptq") return true;
    const std::size_t per = 32 / o.bits, gs = o.group_size ? o.group_size : cols;
    return cols % per == 0 && rows % per == 0 && cols % gs == 0;
  };
  // Adds module m: quantized parts to the checkpoint, its dequantized values to the reference.
  const auto add_module = [&](Module m) {
    const std::size_t id = modules.size();
    const auto parts = quantize_module(o, m.rows, m.cols, nullptr, nullptr);
    for (std::size_t p = 0; p < parts.size(); ++p)
      qout.add({m.name + parts[p].suffix, parts[p].dtype, parts[p].shape, parts[p].size(), nullptr, false, id, p});
    dout.add({m.name + ".weight", "F32", {m.rows, m.cols}, m.rows * m.cols * 4, nullptr, false, id, parts.size()});
    modules.push_back(std::move(m));
    ++rep.quantized;
  };
  for (const auto& name : names) {
    const TensorView* t = store->find(name);
    if (!t->is_float) fail(*t->file, "tensor '" + name + "' is " + t->stored + ": the input must be a float checkpoint");
    rep.bytes_in += t->n_bytes;
    // Fused 3-D experts (transformers 5 save_pretrained) are written per expert, as the quantized MoE
    // checkpoints on the hub store them: mlp.experts.N.{gate,up,down}_proj.
    const bool gate_up = name.ends_with("mlp.experts.gate_up_proj"), down = name.ends_with("mlp.experts.down_proj");
    if ((gate_up || down) && t->shape.size() == 3) {
      const std::string p = name.substr(0, name.size() - (gate_up ? 12 : 9));  // "...mlp.experts."
      const std::size_t E = t->shape[0], R = t->shape[1], C = t->shape[2];
      const bool split_ok = gate_up ? R % 2 == 0 : true;
      const std::size_t rows = gate_up ? R / 2 : R;
      if (split_ok && fits(rows, C)) {
        for (std::size_t e = 0; e < E; ++e) {
          const std::string q = p + std::to_string(e) + ".";
          if (gate_up) {
            add_module({q + "gate_proj", t, e * R * C, rows, C});
            add_module({q + "up_proj", t, e * R * C + rows * C, rows, C});
          } else {
            add_module({q + "down_proj", t, e * R * C, rows, C});
          }
        }
        continue;
      }
    }
    const bool linear = t->shape.size() == 2 && name.size() > suffix.size() &&
                        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
                        (name.find("_proj.weight") != std::string::npos || name == "lm_head.weight");
    const std::string module = linear ? name.substr(0, name.size() - suffix.size()) : std::string();
    const bool quantize = linear && !listed(o.keep, module) && fits(t->shape[0], t->shape[1]);
    if (linear && !quantize) not_converted.push_back(module);
    if (!quantize) {
      Entry e{name, t->stored, t->shape, t->n_bytes, t, false, 0, 0};
      qout.add(e);
      e.dtype = "F32";
      e.bytes = t->numel() * 4;
      e.widen = true;
      dout.add(e);
      ++rep.kept;
      continue;
    }
    add_module({module, t, 0, t->shape[0], t->shape[1]});
  }

  // Module parts are produced when the module's first part is written (parts are adjacent, every module
  // is asked for, in increasing order). The modules after it are quantized meanwhile on worker threads:
  // `ahead` holds modules next_launch - ahead.size() .. next_launch - 1, at most `threads` of them and no
  // more than kAheadElements values (their f32 copies) unless it holds one.
  struct Computed {
    std::vector<Part> parts;
    std::vector<float> deq;
  };
  constexpr std::size_t kAheadElements = std::size_t{256} << 20;
  const std::size_t threads = o.threads ? o.threads : std::max(1u, std::thread::hardware_concurrency());
  const auto elements = [&](std::size_t id) { return modules[id].rows * modules[id].cols; };
  std::deque<std::future<Computed>> ahead;
  std::size_t next_launch = 0, ahead_elements = 0;
  std::size_t cached = static_cast<std::size_t>(-1);
  std::vector<Part> parts;
  std::vector<float> deq;
  std::vector<std::uint8_t> buf;
  const auto compute = [&](std::size_t id, bool want_deq) {
    if (cached == id) return;
    if (ahead.empty()) next_launch = id;
    while (next_launch < modules.size() && ahead.size() < threads &&
           (ahead.empty() || ahead_elements + elements(next_launch) <= kAheadElements)) {
      const std::size_t n = elements(next_launch);
      const Module* m = &modules[next_launch++];
      ahead.push_back(std::async(std::launch::async, [&o, m, n, want_deq] {
        Computed c;
        std::vector<float> w(n);
        for (std::size_t i = 0; i < w.size(); ++i) w[i] = element_as_f32(m->w->data, m->w->dtype, m->offset + i);
        c.parts = quantize_module(o, m->rows, m->cols, w.data(), want_deq ? &c.deq : nullptr);
        return c;
      }));
      ahead_elements += n;
    }
    if (next_launch - ahead.size() != id) throw std::logic_error("quantize: modules asked for out of order");
    Computed c = ahead.front().get();
    ahead.pop_front();
    ahead_elements -= elements(id);
    parts = std::move(c.parts);
    deq = std::move(c.deq);
    cached = id;
  };
  const auto copy = [&](const Entry& e) -> const std::vector<std::uint8_t>& {
    const TensorView* t = e.source;
    if (!e.widen || t->dtype == DType::f32) {
      buf.assign(static_cast<const std::uint8_t*>(t->data), static_cast<const std::uint8_t*>(t->data) + t->n_bytes);
    } else {
      buf.resize(t->numel() * 4);
      for (std::size_t i = 0; i < t->numel(); ++i) put(buf, i, element_as_f32(t->data, t->dtype, i));
    }
    return buf;
  };
  rep.bytes_out = qout.write([&](const Entry& e) -> const std::vector<std::uint8_t>& {
    if (e.source) return copy(e);
    compute(e.module, false);
    return parts[e.part].bytes;
  });
  if (!o.dequantized_dir.empty()) {
    cached = static_cast<std::size_t>(-1);
    dout.write([&](const Entry& e) -> const std::vector<std::uint8_t>& {
      if (e.source) return copy(e);
      compute(e.module, true);
      buf.resize(deq.size() * 4);
      std::memcpy(buf.data(), deq.data(), buf.size());
      return buf;
    });
    nlohmann::json dcfg = cfg;
    dcfg["dtype"] = "float32";
    dcfg.erase("torch_dtype");
    write_config(o.dequantized_dir / "config.json", dcfg);
  }

  nlohmann::json q;
  if (o.method == "int4-gptq") {
    q = {{"bits", o.bits}, {"group_size", o.group_size ? static_cast<std::int64_t>(o.group_size) : -1},
         {"sym", o.sym}, {"desc_act", o.desc_act}};
    if (o.auto_round) {
      q["quant_method"] = "auto-round";
      q["packing_format"] = o.gptq_v2 ? "auto_round" : "auto_round:auto_gptq";
      q["data_type"] = "int";
      q["extra_config_ignore"] = not_converted;
    } else {
      q["quant_method"] = "gptq";
      q["checkpoint_format"] = o.gptq_v2 ? "gptq_v2" : "gptq";
      q["modules_to_not_convert"] = not_converted;
    }
  } else if (o.method == "int4-ct") {
    nlohmann::json weights = {{"num_bits", 4}, {"type", "int"}, {"symmetric", true}, {"dynamic", false},
                              {"strategy", o.group_size ? "group" : "channel"}};
    if (o.group_size) weights["group_size"] = o.group_size;
    q = {{"quant_method", "compressed-tensors"}, {"format", "pack-quantized"}, {"quantization_status", "compressed"},
         {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", weights}, {"input_activations", nullptr}}}}},
         {"ignore", not_converted}};
  } else if (o.method == "int8") {
    nlohmann::json weights = {{"num_bits", 8}, {"type", "int"}, {"symmetric", true}, {"dynamic", false},
                              {"strategy", o.group_size ? "group" : "channel"}};
    if (o.group_size) weights["group_size"] = o.group_size;
    q = {{"quant_method", "compressed-tensors"}, {"format", "int-quantized"}, {"quantization_status", "compressed"},
         {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", weights}, {"input_activations", nullptr}}}}},
         {"ignore", not_converted}};
  } else {
    q = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"},
         {"weight_block_size", {128, 128}}, {"modules_to_not_convert", not_converted}};
  }
  cfg["quantization_config"] = q;
  write_config(out_dir / "config.json", cfg);
  // The rest of the model folder (tokenizer, generation config, chat template) travels along.
  for (const auto& entry : std::filesystem::directory_iterator(in_dir)) {
    const std::string fname = entry.path().filename().string();
    if (!entry.is_regular_file() || fname == "config.json" || fname.ends_with(".safetensors") ||
        fname == "model.safetensors.index.json")
      continue;
    for (const auto& dir : {out_dir, o.dequantized_dir})
      if (!dir.empty()) std::filesystem::copy_file(entry.path(), dir / fname, std::filesystem::copy_options::overwrite_existing);
  }
  return rep;
}

}  // namespace quarry::engine
