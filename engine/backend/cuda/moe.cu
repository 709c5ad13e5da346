// Mixture-of-experts kernels of the CUDA backend: routing on the device and gather-GEMVs over each token's
// experts for small batches (decode), so that a decode step with sparse layers never waits for the host
// and can be recorded. The grouped path for prefill is the Backend default (tokens grouped by expert, one
// cuBLAS product per expert hit). After vLLM's fused_moe (routing on the device, experts addressed
// through tables) and llama.cpp's mul_mat_id (a GEMV per selected expert for a few tokens).
#include <cfloat>
#include <climits>
#include <cmath>

#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/kernels.cuh"

namespace quarry::engine::cuda {

namespace {

/// One warp per token: softmax over the experts (in shared memory), then k rounds of a warp arg-max
/// (the lower id on a tie), the chosen sorted by id; weights renormalised by their sum (added in the
/// order chosen: descending probability) when asked.
__global__ void moe_route_kernel(const float* logits, int n_experts, int k, bool renormalize, bool shared_expert,
                                 std::int32_t* ids, float* weights) {
  extern __shared__ float p[];
  const int t = blockIdx.x, lane = threadIdx.x;
  const int ld = n_experts + (shared_expert ? 1 : 0), kout = k + (shared_expert ? 1 : 0);
  const float* row = logits + static_cast<std::size_t>(t) * ld;
  float mx = -INFINITY;
  for (int e = lane; e < n_experts; e += 32) {
    p[e] = row[e];
    mx = fmaxf(mx, p[e]);
  }
  mx = warp_max(mx);
  float sum = 0.f;
  for (int e = lane; e < n_experts; e += 32) sum += (p[e] = expf(p[e] - mx));
  sum = warp_sum(sum);
  for (int e = lane; e < n_experts; e += 32) p[e] /= sum;
  __syncwarp();
  int chosen_id[kMaxMoeTopK];
  float chosen_p[kMaxMoeTopK];
  float top = 0.f;
  for (int j = 0; j < k; ++j) {
    float best = -1.f;
    int best_i = INT_MAX;
    for (int e = lane; e < n_experts; e += 32)
      if (p[e] > best) {  // ascending e per lane: the first of equal values stays
        best = p[e];
        best_i = e;
      }
    for (int o = 16; o > 0; o >>= 1) {
      const float ob = __shfl_xor_sync(0xffffffffu, best, o);
      const int oi = __shfl_xor_sync(0xffffffffu, best_i, o);
      if (ob > best || (ob == best && oi < best_i)) {
        best = ob;
        best_i = oi;
      }
    }
    chosen_id[j] = best_i;
    chosen_p[j] = best;
    top += best;
    __syncwarp();
    if (lane == 0) p[best_i] = -2.f;  // taken
    __syncwarp();
  }
  if (lane != 0) return;
  for (int a = 1; a < k; ++a)  // insertion sort by id
    for (int b = a; b > 0 && chosen_id[b - 1] > chosen_id[b]; --b) {
      const int ti = chosen_id[b];
      chosen_id[b] = chosen_id[b - 1];
      chosen_id[b - 1] = ti;
      const float tp = chosen_p[b];
      chosen_p[b] = chosen_p[b - 1];
      chosen_p[b - 1] = tp;
    }
  for (int j = 0; j < k; ++j) {
    ids[static_cast<std::size_t>(t) * kout + j] = chosen_id[j];
    weights[static_cast<std::size_t>(t) * kout + j] = renormalize ? chosen_p[j] / top : chosen_p[j];
  }
  if (shared_expert) {
    ids[static_cast<std::size_t>(t) * kout + k] = n_experts;
    weights[static_cast<std::size_t>(t) * kout + k] = 1.0f / (1.0f + expf(-row[n_experts]));
  }
}

/// 8 activations from x at `at` (16-byte aligned), rounded to bf16 when the weights compute in bf16.
__device__ __forceinline__ void load_x8(const float* x, std::size_t at, bool round_x, float (&v)[8]) {
  const float4 a = __ldg(reinterpret_cast<const float4*>(x + at));
  const float4 b = __ldg(reinterpret_cast<const float4*>(x + at) + 1);
  v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
  if (round_x)
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = round_bf16(v[i]);
}

/// One expert weight as a warp reads it: a float matrix (row j at j * cols) or a quantized one (q).
template <int TYPE>
struct ExpertWeight {
  const void* w;
  QuantArgs q;
  std::size_t cols;
  /// Values k0 .. k0 + 7 of row j (as the dense GEMVs widen or dequantize them).
  __device__ __forceinline__ void load(std::size_t j, std::size_t k0, float (&f)[8]) const {
    if constexpr (TYPE >= kQ8) load8q<TYPE>(q, j, k0, cols, f);
    else load8<TYPE>(w, j * cols + k0, f);
  }
};
/// Expert e of a set's table (float weights: the data pointers; quantized: their QuantArgs).
template <int TYPE>
__device__ __forceinline__ ExpertWeight<TYPE> expert(const void* const* table, const QuantArgs* qtable, int e,
                                                     std::size_t cols) {
  ExpertWeight<TYPE> x{};
  if constexpr (TYPE >= kQ8) x.q = qtable[e];
  else x.w = table[e];
  x.cols = cols;
  return x;
}

/// act[p, j] = silu(h[t] . gate_e[j]) * (h[t] . up_e[j]) for pair p = t k + q routed to expert e =
/// ids[p]: a block of 8 warps per 8 columns j of one pair, a warp per column, both weights streamed
/// once (float: 16-byte loads; quantized: the dense GEMV's load8q), two chunks of each in flight per lane.
template <int TYPE>
__global__ void __launch_bounds__(256) moe_gate_up_kernel(const float* h, std::size_t ldh, const std::int32_t* ids,
                                                          int k, const void* const* gate, const void* const* up,
                                                          const QuantArgs* qgate, const QuantArgs* qup,
                                                          std::size_t hidden, std::size_t inter, bool round_x,
                                                          float* act) {
  const std::size_t pair = blockIdx.y, t = pair / static_cast<std::size_t>(k);
  const std::size_t j = blockIdx.x * 8 + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (j >= inter) return;
  const int e = ids[pair];
  const auto gw = expert<TYPE>(gate, qgate, e, hidden);
  const auto uw = expert<TYPE>(up, qup, e, hidden);
  const float* x = h + t * ldh;
  float g = 0.f, u = 0.f;
  std::size_t k0 = static_cast<std::size_t>(lane) * 8;
  for (; k0 + 256 < hidden; k0 += 512) {
    float wg[2][8], wu[2][8], xv[2][8];
    gw.load(j, k0, wg[0]);
    uw.load(j, k0, wu[0]);
    gw.load(j, k0 + 256, wg[1]);
    uw.load(j, k0 + 256, wu[1]);
    load_x8(x, k0, round_x, xv[0]);
    load_x8(x, k0 + 256, round_x, xv[1]);
#pragma unroll
    for (int c = 0; c < 2; ++c)
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        g = fmaf(xv[c][i], wg[c][i], g);
        u = fmaf(xv[c][i], wu[c][i], u);
      }
  }
  if (k0 < hidden) {
    float wg[8], wu[8], xv[8];
    gw.load(j, k0, wg);
    uw.load(j, k0, wu);
    load_x8(x, k0, round_x, xv);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      g = fmaf(xv[i], wg[i], g);
      u = fmaf(xv[i], wu[i], u);
    }
  }
  g = warp_sum(g);
  u = warp_sum(u);
  if (lane == 0) act[pair * inter + j] = g / (1.f + expf(-g)) * u;
}

/// a . (row j of w) summed by one warp (every lane gets the sum): a lane its 8 columns of each 256-column
/// step, two steps in flight.
template <int TYPE>
__device__ __forceinline__ float warp_dot(const ExpertWeight<TYPE>& w, std::size_t j, const float* a,
                                          std::size_t inter, bool round_x, int lane) {
  float acc = 0.f;
  std::size_t k0 = static_cast<std::size_t>(lane) * 8;
  for (; k0 + 256 < inter; k0 += 512) {
    float wv[2][8], av[2][8];
    w.load(j, k0, wv[0]);
    w.load(j, k0 + 256, wv[1]);
    load_x8(a, k0, round_x, av[0]);
    load_x8(a, k0 + 256, round_x, av[1]);
#pragma unroll
    for (int c = 0; c < 2; ++c)
#pragma unroll
      for (int i = 0; i < 8; ++i) acc = fmaf(av[c][i], wv[c][i], acc);
  }
  if (k0 < inter) {
    float wv[8], av[8];
    w.load(j, k0, wv);
    load_x8(a, k0, round_x, av);
#pragma unroll
    for (int i = 0; i < 8; ++i) acc = fmaf(av[i], wv[i], acc);
  }
  return warp_sum(acc);
}

/// x[t, j] += sum over q < k, in q order, of weights[t k + q] * (act[t k + q] . down_{ids[t k + q]}[j]): a
/// warp per output column of one token walking its pairs in order (HF's order of addition: ascending
/// expert id, a shared expert last), the token's sum then added to x.
template <int TYPE>
__global__ void __launch_bounds__(256) moe_down_sum_kernel(const float* act, const std::int32_t* ids, const float* weights,
                                                           int k, const void* const* down, const QuantArgs* qdown,
                                                           std::size_t hidden, std::size_t inter, bool round_x,
                                                           float* x, std::size_t ldx) {
  const std::size_t t = blockIdx.y;
  const std::size_t j = blockIdx.x * 8 + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (j >= hidden) return;
  float total = 0.f;
  for (int q = 0; q < k; ++q) {
    const std::size_t pair = t * static_cast<std::size_t>(k) + q;
    total += weights[pair] * warp_dot<TYPE>(expert<TYPE>(down, qdown, ids[pair], inter), j, act + pair * inter,
                                            inter, round_x, lane);
  }
  if (lane == 0) x[t * ldx + j] += total;
}

template <int TYPE>
void moe_experts_typed(const MoeGemvArgs& a, cudaStream_t s) {
  const unsigned pairs = static_cast<unsigned>(a.n_tokens * a.k);
  moe_gate_up_kernel<TYPE><<<dim3(ceil_div(a.inter, 8), pairs), 256, 0, s>>>(
      a.h, a.ldh, a.ids, static_cast<int>(a.k), a.gate, a.up, a.qgate, a.qup, a.hidden, a.inter, a.round_x, a.act);
  check_launch("moe_gate_up");
  moe_down_sum_kernel<TYPE><<<dim3(ceil_div(a.hidden, 8), static_cast<unsigned>(a.n_tokens)), 256, 0, s>>>(
      a.act, a.ids, a.weights, static_cast<int>(a.k), a.down, a.qdown, a.hidden, a.inter, a.round_x, a.x, a.ldx);
  check_launch("moe_down_sum");
}

}  // namespace

void launch_moe_route(const float* logits, std::size_t n_tokens, std::size_t n_experts, std::size_t k, bool renormalize,
                      bool shared_expert, std::int32_t* ids, float* weights, cudaStream_t s) {
  if (n_tokens == 0) return;
  moe_route_kernel<<<static_cast<unsigned>(n_tokens), 32, n_experts * sizeof(float), s>>>(
      logits, static_cast<int>(n_experts), static_cast<int>(k), renormalize, shared_expert, ids, weights);
  check_launch("moe_route");
}

void launch_moe_experts(const MoeGemvArgs& a, int type, cudaStream_t s) {
  if (a.n_tokens == 0) return;
  switch (type) {
    case kF32: return moe_experts_typed<kF32>(a, s);
    case kF16: return moe_experts_typed<kF16>(a, s);
    case kBF16: return moe_experts_typed<kBF16>(a, s);
    default: with_quant_type(type, "moe_experts", [&](auto qt) { moe_experts_typed<decltype(qt)::value>(a, s); });
  }
}

}  // namespace quarry::engine::cuda
