#include "engine/backend/cpu/ops.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "engine/backend/cpu/attention_kernels.hpp"
#include "engine/backend/cpu/cpu_features.hpp"
#include "engine/backend/cpu/thread_pool.hpp"
#include "engine/backend/sampling.hpp"
#include "engine/core/dtype.hpp"

namespace quarry::engine::cpu {

namespace {

using engine::bf16_to_f32;
using engine::f16_to_f32;
using engine::f32_to_bf16;

template <typename F>
void split(ThreadPool* pool, std::size_t n, F&& fn) {
  if (pool && pool->size() > 1 && n > 1) pool->parallel_for(n, fn);
  else if (n > 0) fn(std::size_t{0}, n);
}

}  // namespace

float weight_value(const void* data, WeightType type, std::size_t i) { return element_as_f32(data, type, i); }

void embedding(const std::int32_t* tokens, std::size_t n, const Weight& table, float* out, ThreadPool* pool,
               std::size_t ldo) {
  const std::size_t h = table.cols;
  if (ldo == 0) ldo = h;
  split(pool, n, [&](std::size_t t0, std::size_t t1) {
    for (std::size_t t = t0; t < t1; ++t) {
      const std::size_t row = static_cast<std::size_t>(tokens[t]) * h;
      float* o = out + t * ldo;
      if (table.type == WeightType::f32) {
        std::memcpy(o, static_cast<const float*>(table.data) + row, h * sizeof(float));
      } else {
        for (std::size_t i = 0; i < h; ++i) o[i] = weight_value(table.data, table.type, row + i);
      }
    }
  });
}

void matmul(const float* x, std::size_t m, const Weight& w, float* y, ThreadPool* pool) {
  if (w.packed) return gemm_packed(x, m, w.cols, *w.packed, w.rows, y, w.rows, pool);
  gemm(x, m, w.cols, w.cols, w.data, w.type, w.rows, y, w.rows, pool);
}

namespace {

template <class Load>
__attribute__((target_clones("avx512f", "avx2", "default"))) float dot_row(const float* x, std::size_t n, Load load) {
  float part[16] = {};
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (std::size_t l = 0; l < 16; ++l) part[l] += x[i + l] * load(i + l);
  for (std::size_t w = 8; w >= 1; w /= 2)
    for (std::size_t l = 0; l < w; ++l) part[l] += part[l + w];
  float s = part[0];
  for (; i < n; ++i) s += x[i] * load(i);
  return s;
}

}  // namespace

void dot_rows(const float* x, const Weight& w, const std::int32_t* ids, std::size_t n_ids, float* out) {
  for (std::size_t r = 0; r < n_ids; ++r) {
    const std::size_t off = static_cast<std::size_t>(ids[r]) * w.cols;
    switch (w.type) {
      case WeightType::f32: {
        const float* p = static_cast<const float*>(w.data) + off;
        out[r] = dot_row(x, w.cols, [p](std::size_t i) { return p[i]; });
        break;
      }
      case WeightType::bf16: {
        const std::uint16_t* p = static_cast<const std::uint16_t*>(w.data) + off;
        out[r] = dot_row(x, w.cols, [p](std::size_t i) {
          const std::uint32_t u = static_cast<std::uint32_t>(p[i]) << 16;
          float f;
          std::memcpy(&f, &u, 4);
          return f;
        });
        break;
      }
      case WeightType::f16: {
        const std::uint16_t* p = static_cast<const std::uint16_t*>(w.data) + off;
        out[r] = dot_row(x, w.cols, [p](std::size_t i) { return f16_to_f32(p[i]); });
        break;
      }
    }
  }
}

namespace {

// Sum of squares in double over 8 interleaved partial sums (vectorisable), then the row scaled.
__attribute__((target_clones("avx512f", "avx2", "default"))) void rms_norm_rows(
    const float* x, float* y, std::size_t r0, std::size_t r1, std::size_t dim, std::size_t ld, const float* weight,
    float eps) {
  for (std::size_t r = r0; r < r1; ++r) {
    const float* xr = x + r * ld;
    float* yr = y + r * ld;
    double part[8] = {};
    std::size_t i = 0;
    for (; i + 8 <= dim; i += 8)
      for (std::size_t l = 0; l < 8; ++l) part[l] += static_cast<double>(xr[i + l]) * xr[i + l];
    double ss = ((part[0] + part[4]) + (part[2] + part[6])) + ((part[1] + part[5]) + (part[3] + part[7]));
    for (; i < dim; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float inv = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(dim)) + eps);
    for (std::size_t j = 0; j < dim; ++j) yr[j] = weight[j] * (xr[j] * inv);
  }
}

}  // namespace

void rms_norm(const float* x, float* y, std::size_t rows, std::size_t dim, std::size_t ld, const float* weight,
              float eps, ThreadPool* pool) {
  split(pool, rows, [&](std::size_t r0, std::size_t r1) { rms_norm_rows(x, y, r0, r1, dim, ld, weight, eps); });
}

Rope::Rope(double theta, std::size_t rdim) : rotary_dim(rdim), inv_freq(rdim / 2) {
  for (std::size_t i = 0; i < rdim / 2; ++i) {
    // As HF: exponent computed in f32, then theta ** exponent, then reciprocal.
    const float e = static_cast<float>(2 * i) / static_cast<float>(rdim);
    inv_freq[i] = static_cast<float>(1.0 / std::pow(theta, static_cast<double>(e)));
  }
}

void rope_angles(const std::int32_t* positions, std::size_t n, const float* inv_freq, std::size_t half, float* cos,
                 float* sin) {
  for (std::size_t t = 0; t < n; ++t) {
    const float pos = static_cast<float>(positions[t]);
    for (std::size_t i = 0; i < half; ++i) {
      const float angle = pos * inv_freq[i];  // f32 product, as HF's f32 matmul of one term
      cos[t * half + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      sin[t * half + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
}

RopeAngles rope_angles(const std::int32_t* positions, std::size_t n, const Rope& r) {
  RopeAngles a;
  a.half = r.rotary_dim / 2;
  a.cos.resize(n * a.half);
  a.sin.resize(n * a.half);
  rope_angles(positions, n, r.inv_freq.data(), a.half, a.cos.data(), a.sin.data());
  return a;
}

void rope(float* x, std::size_t n_tokens, std::size_t n_heads, std::size_t head_dim, std::size_t ld,
          const RopeAngles& a, ThreadPool* pool) {
  rope(x, n_tokens, n_heads, head_dim, ld, a.half, a.cos.data(), a.sin.data(), pool);
}

void rope(float* x, std::size_t n_tokens, std::size_t n_heads, std::size_t head_dim, std::size_t ld,
          std::size_t half, const float* cos, const float* sin, ThreadPool* pool) {
  split(pool, n_tokens, [&](std::size_t t0, std::size_t t1) {
    for (std::size_t t = t0; t < t1; ++t) {
      const float* cs = cos + t * half;
      const float* sn = sin + t * half;
      for (std::size_t h = 0; h < n_heads; ++h) {
        float* v = x + t * ld + h * head_dim;
        for (std::size_t i = 0; i < half; ++i) {
          const float p = v[i], q = v[i + half];
          v[i] = p * cs[i] - q * sn[i];
          v[i + half] = q * cs[i] + p * sn[i];
        }
      }
    }
  });
}

void rope(float* x, std::size_t n_tokens, std::size_t n_heads, std::size_t head_dim, std::size_t ld,
          const std::int32_t* positions, const Rope& r, ThreadPool* pool) {
  rope(x, n_tokens, n_heads, head_dim, ld, rope_angles(positions, n_tokens, r), pool);
}

void kv_store(const float* k, const float* v, std::size_t ld, std::size_t n_tokens, const std::int32_t* positions,
              const std::int32_t* const* block_tables, const KvLayerView& kv, ThreadPool* pool) {
  const std::size_t row = kv.n_kv_heads * kv.head_dim, bs = kv.block_size;
  if (kv.bf16) {
    const std::size_t hd = kv.head_dim, per = bs * hd;
    split(pool, n_tokens, [&](std::size_t t0, std::size_t t1) {
      for (std::size_t t = t0; t < t1; ++t) {
        const auto pos = static_cast<std::size_t>(positions[t]);
        float* base = kv.blocks[block_tables[t][pos / bs]];
        auto* kb = reinterpret_cast<std::uint16_t*>(base + kv.k_offset);
        auto* vb = reinterpret_cast<std::uint16_t*>(base + kv.v_offset);
        const std::size_t j = pos % bs;
        for (std::size_t h = 0; h < kv.n_kv_heads; ++h)
          for (std::size_t d = 0; d < hd; ++d) {
            kb[h * per + (d / 2) * bs * 2 + j * 2 + d % 2] = f32_to_bf16(k[t * ld + h * hd + d]);
            vb[h * per + (j / 2) * hd * 2 + d * 2 + j % 2] = f32_to_bf16(v[t * ld + h * hd + d]);
          }
      }
    });
    return;
  }
  split(pool, n_tokens, [&](std::size_t t0, std::size_t t1) {
    for (std::size_t t = t0; t < t1; ++t) {
      const auto pos = static_cast<std::size_t>(positions[t]);
      float* base = kv.blocks[block_tables[t][pos / bs]];
      const std::size_t j = pos % bs;
      float* kt = base + kv.k_offset + j;  // keys transposed: [n_kv_heads * head_dim, block_size]
      const float* kr = k + t * ld;
      for (std::size_t i = 0; i < row; ++i) kt[i * bs] = kr[i];
      for (std::size_t h = 0; h < kv.n_kv_heads; ++h)  // values: [n_kv_heads, block_size, head_dim]
        std::memcpy(base + kv.v_offset + (h * bs + j) * kv.head_dim, v + t * ld + h * kv.head_dim,
                    kv.head_dim * sizeof(float));
    }
  });
}

void attention(const float* q, std::size_t ldq, float* out, std::size_t ldo, std::size_t n_tokens,
               std::size_t n_heads, const std::int32_t* positions, const std::int32_t* const* block_tables,
               const KvLayerView& kv, float scale, ThreadPool* pool) {
  static const detail::AttentionRangeFn exact_kernel = [] {
    const CpuFeatures f = detect_cpu_features();
    return f.avx512 ? &detail::attention_range_avx512
           : f.avx2 ? &detail::attention_range_avx2
                    : &detail::attention_range_generic;
  }();
  if (n_tokens == 0) return;
  // Runs of consecutive tokens of one sequence share each K/V read; a run holds at most 16 query
  // vectors (tokens x GQA group), which bounds the score rows kept per work item.
  const std::size_t group = n_heads / kv.n_kv_heads, max_run = std::max<std::size_t>(1, 16 / group);
  std::vector<std::size_t> runs{0};
  for (std::size_t t = 1; t < n_tokens; ++t)
    if (block_tables[t] != block_tables[t - 1] || t - runs.back() >= max_run) runs.push_back(t);
  runs.push_back(n_tokens);
  const std::size_t n_runs = runs.size() - 1;
  if (kv.bf16 && !kv_bf16_supported(n_heads, kv.n_kv_heads, kv.head_dim, kv.block_size))
    throw std::invalid_argument("attention: a bf16 KV cache of this shape is not supported here");
#if defined(__x86_64__)
  const detail::AttentionRangeFn kernel = kv.bf16 ? &detail::attention_range_amx : exact_kernel;
#else
  const detail::AttentionRangeFn kernel = exact_kernel;
#endif
  const detail::AttentionArgs args{q, ldq, out, ldo, n_heads, positions, block_tables, &kv, scale, runs.data()};
  split(pool, n_runs * kv.n_kv_heads, [&](std::size_t w0, std::size_t w1) { kernel(args, w0, w1); });
}

bool kv_bf16_supported(std::size_t n_heads, std::size_t n_kv_heads, std::size_t head_dim, std::size_t block_size) {
  // The bf16 KV cache is read on the AMX tiles (attention_amx_avx512.cpp).
  return gemm_kernel_available(GemmKernel::amx) && (head_dim == 64 || head_dim == 128) && block_size == 16 && n_kv_heads > 0 &&
         n_heads % n_kv_heads == 0 && n_heads / n_kv_heads <= 16;
}

namespace {

/// e^x for x in [-87, 88] (clamped outside): x = k ln2 + r with |r| <= ln2 / 2 (Cody & Waite), e^r by
/// its degree-6 Taylor polynomial (relative error below 2e-7), times 2^k assembled in the exponent bits.
/// Branch-free and in plain arithmetic so that the loop below vectorises.
inline float exp_poly(float x) {
  x = std::min(std::max(x, -87.f), 88.f);
  const float k = (x * 1.44269504088896341f + 12582912.f) - 12582912.f;  // round to nearest
  const float r = (x - k * 0.693359375f) - k * -2.12194440e-4f;
  float p = 1.f / 720.f;
  p = p * r + 1.f / 120.f;
  p = p * r + 1.f / 24.f;
  p = p * r + 1.f / 6.f;
  p = p * r + 0.5f;
  p = p * r + 1.f;
  p = p * r + 1.f;
  const std::int32_t e = (static_cast<std::int32_t>(k) + 127) << 23;
  float scale;
  std::memcpy(&scale, &e, 4);
  return p * scale;
}

// Compiled for AVX-512, AVX2 and the baseline (function multi-versioning, picked at load time).
__attribute__((target_clones("avx512f", "avx2", "default"))) void silu_mul_rows(
    const float* gate, std::size_t ldg, const float* up, std::size_t ldu, float* out, std::size_t ldo,
    std::size_t r0, std::size_t r1, std::size_t n) {
  for (std::size_t r = r0; r < r1; ++r) {
    const float* g = gate + r * ldg;
    const float* u = up + r * ldu;
    float* o = out + r * ldo;
    for (std::size_t i = 0; i < n; ++i) o[i] = g[i] / (1.f + exp_poly(-g[i])) * u[i];
  }
}

}  // namespace

void silu_mul(const float* gate, std::size_t ldg, const float* up, std::size_t ldu, float* out, std::size_t ldo,
              std::size_t rows, std::size_t n, ThreadPool* pool) {
  split(pool, rows, [&](std::size_t r0, std::size_t r1) { silu_mul_rows(gate, ldg, up, ldu, out, ldo, r0, r1, n); });
}

void add_inplace(float* x, const float* y, std::size_t n, ThreadPool* pool) {
  split(pool, n, [&](std::size_t i0, std::size_t i1) {
    for (std::size_t i = i0; i < i1; ++i) x[i] += y[i];
  });
}

std::int32_t argmax(const float* logits, std::size_t n, const std::uint32_t* mask) {
  std::int64_t best = -1;
  float best_v = 0.f;
  for (std::size_t i = 0; i < n; ++i) {
    if (mask && !((mask[i / 32] >> (i % 32)) & 1u)) continue;
    const float v = logits[i];
    if (!std::isnan(v) && (best < 0 || v > best_v)) {
      best = static_cast<std::int64_t>(i);
      best_v = v;
    }
  }
  return best >= 0 ? static_cast<std::int32_t>(best) : (mask ? -1 : 0);
}

std::int32_t sample_row(const float* logits, std::size_t n, const std::uint32_t* mask, const RowSampling& p) {
  if (p.temperature == 0.f) return argmax(logits, n, mask);
  const float inv_t = 1.f / p.temperature;
  struct Cand {
    std::uint64_t key;
    float v;
    std::uint32_t id;
  };
  std::vector<Cand> c;
  for (std::size_t i = 0; i < n; ++i) {
    if ((mask && !((mask[i / 32] >> (i % 32)) & 1u)) || std::isnan(logits[i])) continue;
    const float v = logits[i] * inv_t;
    const auto id = static_cast<std::uint32_t>(i);
    c.push_back({sampling::order_key(v, id), v, id});
  }
  if (c.empty()) return -1;
  std::sort(c.begin(), c.end(), [](const Cand& a, const Cand& b) { return a.key > b.key; });
  const float mx = c[0].v;
  if (!std::isfinite(mx)) return static_cast<std::int32_t>(c[0].id);
  std::size_t keep = c.size();
  if (p.top_k > 0 && p.top_k < keep) keep = p.top_k;
  if (p.top_p < 1.f) {
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < keep; ++i) total += sampling::mass_at(c[i].v, mx);
    const std::uint64_t target = sampling::top_p_target(p.top_p, total);
    std::uint64_t cum = 0;
    std::size_t m = 0;
    while (m < keep && cum < target) cum += sampling::mass_at(c[m++].v, mx);
    keep = std::max<std::size_t>(m, 1);
  }
  if (p.min_p > 0.f) {
    std::size_t m = 1;
    while (m < keep && sampling::weight(c[m].v, mx) >= p.min_p) ++m;
    keep = m;
  }
  std::size_t best = 0;
  float best_score = -std::numeric_limits<float>::infinity();
  for (std::size_t i = 0; i < keep; ++i) {  // in key order: a tie keeps the earlier, the smaller id
    const float score = c[i].v + sampling::gumbel(p.key, c[i].id);
    if (score > best_score || (score == best_score && c[i].id < c[best].id)) {
      best = i;
      best_score = score;
    }
  }
  return static_cast<std::int32_t>(c[best].id);
}

}  // namespace quarry::engine::cpu
