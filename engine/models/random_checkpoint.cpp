#include "engine/models/random_checkpoint.hpp"

#include <cmath>
#include <cstring>
#include <fstream>
#include <numbers>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "engine/core/rng.hpp"

namespace quarry::engine {

namespace {

nlohmann::json qwen3_base() {
  return {{"architectures", {"Qwen3ForCausalLM"}},
          {"model_type", "qwen3"},
          {"attention_bias", false},
          {"attention_dropout", 0.0},
          {"hidden_act", "silu"},
          {"initializer_range", 0.02},
          {"rms_norm_eps", 1e-6},
          {"rope_parameters", {{"rope_theta", 1000000.0}, {"rope_type", "default"}}},
          {"use_cache", true},
          {"use_sliding_window", false},
          {"sliding_window", nullptr},
          {"vocab_size", 151936},
          {"bos_token_id", 151643},
          {"eos_token_id", 151645},
          {"tie_word_embeddings", true},
          {"max_position_embeddings", 40960}};
}

std::uint16_t f32_to_bf16(float f) {  // round to nearest even
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

std::uint16_t f32_to_f16(float f) {  // round to nearest even; values here are small, no inf/nan
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  int exp = static_cast<int>((u >> 23) & 0xffu) - 127 + 15;
  std::uint32_t mant = u & 0x7fffffu;
  if (exp >= 31) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (exp <= 0) {
    if (exp < -10) return static_cast<std::uint16_t>(sign);
    mant |= 0x800000u;
    const int shift = 14 - exp;
    std::uint32_t h = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) ++h;
    return static_cast<std::uint16_t>(sign | h);
  }
  std::uint32_t h = (static_cast<std::uint32_t>(exp) << 10) | (mant >> 13);
  const std::uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<std::uint16_t>(sign | h);
}

/// The standard normal quantile (inverse CDF) at p in (0, 1): P. J. Acklam's rational approximation
/// (relative error < 1.2e-9), refined by one Newton step on erfc.
double normal_quantile(double p) {
  static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
                             1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00};
  static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                             6.680131188771972e+01, -1.328068155288572e+01};
  static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                             -2.549732539343734e+00, 4.374664141464968e+00, 2.938163982698783e+00};
  static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                             3.754408661907416e+00};
  double x;
  if (p < 0.02425) {
    const double q = std::sqrt(-2 * std::log(p));
    x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  } else if (p > 1 - 0.02425) {
    const double q = std::sqrt(-2 * std::log(1 - p));
    x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  } else {
    const double q = p - 0.5, r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
  }
  const double e = 0.5 * std::erfc(-x / std::numbers::sqrt2) - p;
  const double u = e * std::sqrt(2 * std::numbers::pi) * std::exp(x * x / 2);
  return x - u / (1 + x * u / 2);
}

struct Spec {
  std::string name;
  std::vector<std::size_t> shape;
  bool norm;  // ones instead of noise
};

}  // namespace

std::string preset_names() {
  return "tiny, tiny-moe, tiny-next, tiny-qwen3.5-moe, qwen3-0.6b, qwen3-4b, qwen3-8b, qwen3-30b-a3b, "
         "qwen3-next-80b-a3b, qwen3.5-122b-a10b";
}

std::string preset_config_json(const std::string& name) {
  nlohmann::json j = qwen3_base();
  auto set = [&](std::size_t h, std::size_t inter, std::size_t layers, std::size_t heads, std::size_t kv,
                 std::size_t hd) {
    j["hidden_size"] = h;
    j["intermediate_size"] = inter;
    j["num_hidden_layers"] = layers;
    j["num_attention_heads"] = heads;
    j["num_key_value_heads"] = kv;
    j["head_dim"] = hd;
    j["max_window_layers"] = layers;
  };
  // The hybrid layout: linear attention every layer but each fourth (key / value heads of one width, conv
  // kernel 4), partial RoPE over a quarter of the head, an untied head unless said otherwise.
  auto hybrid = [&](const char* arch, const char* type, std::size_t nk, std::size_t nv, std::size_t d, double theta) {
    j["architectures"] = {arch};
    j["model_type"] = type;
    j["tie_word_embeddings"] = false;
    j["full_attention_interval"] = 4;
    j["linear_num_key_heads"] = nk;
    j["linear_num_value_heads"] = nv;
    j["linear_key_head_dim"] = d;
    j["linear_value_head_dim"] = d;
    j["linear_conv_kernel_dim"] = 4;
    j["rope_parameters"] = {{"rope_theta", theta}, {"rope_type", "default"}, {"partial_rotary_factor", 0.25}};
  };
  // E routed experts of width `inter`, top k (renormalised), and a shared expert of width `shared`.
  auto experts = [&](std::size_t E, std::size_t k, std::size_t inter, std::size_t shared) {
    j["num_experts"] = E;
    j["num_experts_per_tok"] = k;
    j["moe_intermediate_size"] = inter;
    j["shared_expert_intermediate_size"] = shared;
    j["norm_topk_prob"] = true;
  };
  if (name == "tiny") set(64, 128, 2, 4, 2, 16);
  else if (name == "qwen3-0.6b") set(1024, 3072, 28, 16, 8, 128);
  else if (name == "qwen3-4b") set(2560, 9728, 36, 32, 8, 128);
  else if (name == "qwen3-8b") {
    set(4096, 12288, 36, 32, 8, 128);
    j["tie_word_embeddings"] = false;
  } else if (name == "qwen3-30b-a3b") {  // Qwen3-30B-A3B: 128 experts of width 768, top 8, every layer sparse
    set(2048, 6144, 48, 32, 4, 128);
    j["architectures"] = {"Qwen3MoeForCausalLM"};
    j["model_type"] = "qwen3_moe";
    j["tie_word_embeddings"] = false;
    j["num_experts"] = 128;
    j["num_experts_per_tok"] = 8;
    j["moe_intermediate_size"] = 768;
    j["norm_topk_prob"] = true;
    j["decoder_sparse_step"] = 1;
    j["mlp_only_layers"] = nlohmann::json::array();
  } else if (name == "tiny-moe") {  // Qwen3-MoE layout at the "tiny" size: 8 experts of width 32, top 2
    set(64, 128, 2, 4, 2, 16);
    j["architectures"] = {"Qwen3MoeForCausalLM"};
    j["model_type"] = "qwen3_moe";
    j["num_experts"] = 8;
    j["num_experts_per_tok"] = 2;
    j["moe_intermediate_size"] = 32;
    j["norm_topk_prob"] = true;
  } else if (name == "qwen3-next-80b-a3b" || name == "tiny-next") {
    // Qwen3-Next-80B-A3B: 48 layers, three Gated DeltaNet layers to one gated attention layer, 512 experts
    // of width 512, top 10, a shared expert of width 512; "tiny-next" is its layout at the "tiny" size.
    const bool tiny = name == "tiny-next";
    if (tiny) set(64, 128, 4, 4, 2, 32);
    else set(2048, 5120, 48, 16, 2, 256);
    hybrid("Qwen3NextForCausalLM", "qwen3_next", tiny ? 2 : 16, tiny ? 4 : 32, tiny ? 16 : 128, 10000000.0);
    experts(tiny ? 8 : 512, tiny ? 2 : 10, tiny ? 32 : 512, tiny ? 32 : 512);
    j["tie_word_embeddings"] = tiny;
    j["decoder_sparse_step"] = 1;
    j["mlp_only_layers"] = nlohmann::json::array();
  } else if (name == "tiny-qwen3.5-moe") {
    // Qwen3.5-MoE's layout, small: 3 Gated DeltaNet layers (2 key / 4 value heads of 32) and 1 gated
    // attention layer of 2 heads of 128 (whole FP8 128-row blocks per head), 4 experts of 64, top 2, a
    // shared expert of 64, hidden 128, vocabulary 512.
    set(128, 256, 4, 2, 1, 128);
    hybrid("Qwen3_5MoeForCausalLM", "qwen3_5_moe_text", 2, 4, 32, 10000.0);
    experts(4, 2, 64, 64);
    j["vocab_size"] = 512;
    j["max_position_embeddings"] = 512;
    j["initializer_range"] = 0.05;
  } else if (name == "qwen3.5-122b-a10b") {
    // Qwen3.5-122B-A10B's text model: 48 layers (36 Gated DeltaNet with 16 key / 64 value heads, 12 gated
    // attention with 32 query / 2 KV heads of 256), hidden 3072, 256 experts of width 1024, top 8, a shared
    // expert of width 1024, vocabulary 248,320.
    set(3072, 1024, 48, 32, 2, 256);
    hybrid("Qwen3_5MoeForCausalLM", "qwen3_5_moe_text", 16, 64, 128, 10000000.0);
    experts(256, 8, 1024, 1024);
    j["vocab_size"] = 248320;
  } else
    throw std::invalid_argument("unknown checkpoint preset \"" + name + "\" (" + preset_names() + ")");
  return j.dump(2);
}

void write_random_checkpoint(const std::string& config_json, const std::filesystem::path& out_dir, DType dtype,
                             std::uint64_t seed) {
  const ModelConfig c = parse_model_config(config_json, "checkpoint config");
  std::filesystem::create_directories(out_dir);
  nlohmann::json cfg = nlohmann::json::parse(config_json);
  cfg["dtype"] = dtype == DType::bf16 ? "bfloat16" : dtype == DType::f16 ? "float16" : "float32";
  cfg.erase("torch_dtype");
  {
    std::ofstream out(out_dir / "config.json");
    out << cfg.dump(2) << "\n";
    if (!out) throw std::runtime_error((out_dir / "config.json").string() + ": write failed");
  }
  const double std_dev = cfg.value("initializer_range", 0.02);

  const std::size_t H = c.hidden_size, D = c.head_dim, I = c.intermediate_size;
  std::vector<Spec> specs;
  specs.push_back({"model.embed_tokens.weight", {c.vocab_size, H}, false});
  const bool hybrid = !c.layer_types.empty();
  auto decoder_layer = [&](const std::string& p, bool sparse, bool linear) {
    specs.push_back({p + "input_layernorm.weight", {H}, true});
    specs.push_back({p + "post_attention_layernorm.weight", {H}, true});
    if (linear) {  // Gated DeltaNet, Qwen3.5 layout (qwen3_next.cpp reads it for every hybrid architecture)
      const std::size_t nk = c.linear_num_key_heads, nv = c.linear_num_value_heads;
      const std::size_t dk = c.linear_key_head_dim, dv = c.linear_value_head_dim;
      const std::size_t conv = 2 * nk * dk + nv * dv;
      specs.push_back({p + "linear_attn.in_proj_qkv.weight", {conv, H}, false});
      specs.push_back({p + "linear_attn.in_proj_z.weight", {nv * dv, H}, false});
      specs.push_back({p + "linear_attn.in_proj_b.weight", {nv, H}, false});
      specs.push_back({p + "linear_attn.in_proj_a.weight", {nv, H}, false});
      specs.push_back({p + "linear_attn.conv1d.weight", {conv, 1, c.linear_conv_kernel_dim}, false});
      specs.push_back({p + "linear_attn.A_log", {nv}, false});
      specs.push_back({p + "linear_attn.dt_bias", {nv}, true});
      specs.push_back({p + "linear_attn.norm.weight", {dv}, true});
      specs.push_back({p + "linear_attn.out_proj.weight", {H, nv * dv}, false});
    } else {
      specs.push_back({p + "self_attn.q_norm.weight", {D}, true});
      specs.push_back({p + "self_attn.k_norm.weight", {D}, true});
      // Hybrid models' gated attention: q_proj holds each head's query and output gate.
      specs.push_back({p + "self_attn.q_proj.weight", {(hybrid ? 2 : 1) * c.num_attention_heads * D, H}, false});
      specs.push_back({p + "self_attn.k_proj.weight", {c.num_key_value_heads * D, H}, false});
      specs.push_back({p + "self_attn.v_proj.weight", {c.num_key_value_heads * D, H}, false});
      specs.push_back({p + "self_attn.o_proj.weight", {H, c.num_attention_heads * D}, false});
    }
    if (sparse) {  // router and the experts as fused 3-D tensors (layers::load_moe reads both layouts)
      const std::size_t E = c.num_experts, EI = c.moe_intermediate_size;
      specs.push_back({p + "mlp.gate.weight", {E, H}, false});
      specs.push_back({p + "mlp.experts.gate_up_proj", {E, 2 * EI, H}, false});
      specs.push_back({p + "mlp.experts.down_proj", {E, H, EI}, false});
      if (const std::size_t S = c.shared_expert_intermediate_size; S > 0) {
        specs.push_back({p + "mlp.shared_expert.gate_proj.weight", {S, H}, false});
        specs.push_back({p + "mlp.shared_expert.up_proj.weight", {S, H}, false});
        specs.push_back({p + "mlp.shared_expert.down_proj.weight", {H, S}, false});
        specs.push_back({p + "mlp.shared_expert_gate.weight", {1, H}, false});
      }
      return;
    }
    specs.push_back({p + "mlp.gate_proj.weight", {I, H}, false});
    specs.push_back({p + "mlp.up_proj.weight", {I, H}, false});
    specs.push_back({p + "mlp.down_proj.weight", {H, I}, false});
  };
  for (std::size_t l = 0; l < c.num_hidden_layers; ++l)
    decoder_layer("model.layers." + std::to_string(l) + ".", c.is_sparse_layer(l), c.is_linear_attention_layer(l));
  specs.push_back({"model.norm.weight", {H}, true});
  if (!c.tie_word_embeddings) specs.push_back({"lm_head.weight", {c.vocab_size, H}, false});
  if (c.mtp_num_hidden_layers > 0) {  // Qwen3-Next / Qwen3.5 MTP layout
    specs.push_back({"mtp.fc.weight", {H, 2 * H}, false});
    specs.push_back({"mtp.pre_fc_norm_embedding.weight", {H}, true});
    specs.push_back({"mtp.pre_fc_norm_hidden.weight", {H}, true});
    decoder_layer("mtp.layers.0.", c.num_experts > 0, false);
    specs.push_back({"mtp.norm.weight", {H}, true});
  }
  for (std::size_t k = 0; k < c.num_nextn_predict_layers; ++k) {  // DeepSeek-V3 MTP layout
    const std::string p = "model.layers." + std::to_string(c.num_hidden_layers + k) + ".";
    specs.push_back({p + "eh_proj.weight", {H, 2 * H}, false});
    specs.push_back({p + "enorm.weight", {H}, true});
    specs.push_back({p + "hnorm.weight", {H}, true});
    decoder_layer(p, c.num_experts > 0, false);
    specs.push_back({p + "shared_head.norm.weight", {H}, true});
  }

  const std::size_t esize = dtype_size(dtype);
  const char* st_dtype = dtype == DType::bf16 ? "BF16" : dtype == DType::f16 ? "F16" : "F32";
  nlohmann::ordered_json header;
  header["__metadata__"] = {{"format", "pt"}};
  std::size_t offset = 0;
  for (const auto& s : specs) {
    std::size_t n = 1;
    for (auto d : s.shape) n *= d;
    header[s.name] = {{"dtype", st_dtype}, {"shape", s.shape}, {"data_offsets", {offset, offset + n * esize}}};
    offset += n * esize;
  }
  std::string h = header.dump();
  while ((h.size() + 8) % 8 != 0) h += ' ';  // align the data block to 8 bytes, as the reference writer
  const auto path = out_dir / "model.safetensors";
  std::ofstream out(path, std::ios::binary);
  if (!out) throw std::runtime_error(path.string() + ": cannot create");
  std::uint64_t hl = h.size();
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(hl >> (8 * i));
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));

  // Values: N(0, std^2) through a table of 65,536 normal quantiles indexed by 16 random bits (the
  // inverse CDF at (i + 0.5) / 65536, Acklam's rational approximation refined by one Newton step), so
  // that an 8B-parameter checkpoint is written in seconds. Each chunk of 2^20 values has its own stream
  // (seeded from the seed, the tensor and the chunk): the bytes do not depend on the thread count.
  static const std::vector<float> quantiles = [] {
    std::vector<float> q(65536);
    for (std::size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>(normal_quantile((i + 0.5) / 65536.0));
    return q;
  }();
  constexpr std::size_t kChunk = std::size_t{1} << 20;
  const std::size_t n_threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  struct Job {
    std::size_t spec, chunk, begin, count;
  };
  std::vector<Job> jobs;
  for (std::size_t t = 0; t < specs.size(); ++t) {
    std::size_t n = 1;
    for (auto d : specs[t].shape) n *= d;
    for (std::size_t c = 0; c * kChunk < n; ++c) jobs.push_back({t, c, c * kChunk, std::min(kChunk, n - c * kChunk)});
  }
  const float scale = static_cast<float>(std_dev);
  auto fill = [&](const Job& j, std::vector<char>& buf) {
    buf.resize(j.count * esize);
    Rng rng(seed ^ (0x9e3779b97f4a7c15ULL * (j.spec + 1)) ^ (0xbf58476d1ce4e5b9ULL * (j.chunk + 1)));
    std::uint64_t bits = 0;
    for (std::size_t i = 0; i < j.count; ++i) {
      if (i % 4 == 0) bits = rng.next();
      const float v = specs[j.spec].norm ? 1.f : quantiles[(bits >> (16 * (i % 4))) & 0xffffu] * scale;
      char* dst = buf.data() + i * esize;
      if (dtype == DType::f32) std::memcpy(dst, &v, 4);
      else {
        const std::uint16_t b = dtype == DType::bf16 ? f32_to_bf16(v) : f32_to_f16(v);
        std::memcpy(dst, &b, 2);
      }
    }
  };
  std::vector<std::vector<char>> bufs(4 * n_threads);
  for (std::size_t first = 0; first < jobs.size(); first += bufs.size()) {
    const std::size_t batch = std::min(bufs.size(), jobs.size() - first);
    std::vector<std::thread> workers;
    for (std::size_t w = 0; w < std::min(n_threads, batch); ++w)
      workers.emplace_back([&, w] {
        for (std::size_t i = w; i < batch; i += n_threads) fill(jobs[first + i], bufs[i]);
      });
    for (auto& th : workers) th.join();
    for (std::size_t i = 0; i < batch; ++i) out.write(bufs[i].data(), static_cast<std::streamsize>(bufs[i].size()));
  }
  out.close();
  if (!out) throw std::runtime_error(path.string() + ": write failed");
}

}  // namespace quarry::engine
