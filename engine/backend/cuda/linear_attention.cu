// Hybrid models' token mixing on the GPU: Backend::gated_delta_net (the depthwise causal conv1d with its
// per-sequence window, then the gated delta rule with its per-sequence state) and Backend::sigmoid_mul.
//
// gated_delta_net runs as two kernels:
//  1. conv: one thread per (sequence, channel); it walks the batch's tokens of its sequence in order,
//     keeping the K - 1 previous inputs in registers (loaded from and stored back to the state), and
//     writes silu(conv) into the scratch [n_tokens, conv_dim].
//  2. delta rule: one block per (sequence, value head, 32 value columns); its 256 threads hold the state
//     slice S[0:dk, 32 columns] in registers (8 row groups x 32 columns, dk / 8 rows each), walk the
//     sequence's tokens in order (q and k of the token's key head l2-normalised in shared memory), and
//     reduce S^T k and S^T q over the row groups through shared memory. The recurrence is the one of
//     HF transformers' torch_recurrent_gated_delta_rule (fla's fused_recurrent_gated_delta_rule).
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/kernels.cuh"

namespace quarry::engine::cuda {

namespace {

__device__ __forceinline__ float sigmoid_f(float x) { return 1.0f / (1.0f + __expf(-x)); }
__device__ __forceinline__ float softplus_f(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

constexpr int kMaxConvKernel = 8;

__global__ void sigmoid_mul_kernel(const float* __restrict__ gate, std::size_t ldg, int scalar_gate, float* x,
                                   std::size_t ldx, std::size_t rows, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * n) return;
  const std::size_t r = i / n, c = i % n;
  const float g = gate[r * ldg + (scalar_gate ? 0 : c)];
  x[r * ldx + c] *= 1.0f / (1.0f + expf(-g));
}

__global__ void conv_kernel(GatedDeltaArgs a) {
  const std::size_t C = a.conv_dim;
  const int seq = blockIdx.y;
  const std::size_t c = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  const int K = a.conv_kernel;
  float* window = a.state(seq);  // [K - 1, C] first in the state
  float win[kMaxConvKernel];
  for (int j = 0; j + 1 < K; ++j) win[j] = window[j * C + c];
  float w[kMaxConvKernel];
  for (int j = 0; j < K; ++j) w[j] = a.conv_weight[c * K + j];
  for (std::size_t t = 0; t < a.n_tokens; ++t) {
    if (a.seq_index[t] != seq) continue;
    if (a.positions[t] == 0)
      for (int j = 0; j + 1 < K; ++j) win[j] = 0.0f;
    const float xt = a.qkv[t * a.ldqkv + c];
    float acc = w[K - 1] * xt;
    for (int j = 0; j + 1 < K; ++j) acc += w[j] * win[j];
    a.conv_out[t * C + c] = acc * sigmoid_f(acc);
    for (int j = 0; j + 2 < K; ++j) win[j] = win[j + 1];
    if (K > 1) win[K - 2] = xt;
  }
  for (int j = 0; j + 1 < K; ++j) window[j * C + c] = win[j];
}

/// ROWS = dk / 8 state rows per thread.
template <int ROWS>
__global__ void __launch_bounds__(256) delta_kernel(GatedDeltaArgs a) {
  constexpr int kCols = 32, kGroups = 8;
  const int dk = ROWS * kGroups;
  const int seq = blockIdx.z, h = blockIdx.y, col0 = blockIdx.x * kCols;
  const int lane = threadIdx.x % kCols, group = threadIdx.x / kCols;
  const int dv = static_cast<int>(a.v_head_dim), nk = static_cast<int>(a.n_k_heads), nv = static_cast<int>(a.n_v_heads);
  const int kh = h / (nv / nk);
  const int col = col0 + lane;
  const bool live = col < dv;
  float* S = a.state(seq) + a.conv_floats + static_cast<std::size_t>(h) * dk * dv;  // [dk, dv]
  float s[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) s[r] = live ? S[static_cast<std::size_t>(group * ROWS + r) * dv + col] : 0.0f;
  __shared__ float qs[256], ks[256];
  __shared__ float red[2][kGroups][kCols];
  __shared__ float norms[2];
  const float qscale = rsqrtf(static_cast<float>(dk));
  for (std::size_t t = 0; t < a.n_tokens; ++t) {
    if (a.seq_index[t] != seq) continue;
    if (a.positions[t] == 0) {
#pragma unroll
      for (int r = 0; r < ROWS; ++r) s[r] = 0.0f;
    }
    const float* y = a.conv_out + t * a.conv_dim;
    const float* qsrc = y + static_cast<std::size_t>(kh) * dk;
    const float* ksrc = y + static_cast<std::size_t>(nk) * dk + static_cast<std::size_t>(kh) * dk;
    for (int i = threadIdx.x; i < dk; i += blockDim.x) {
      qs[i] = qsrc[i];
      ks[i] = ksrc[i];
    }
    __syncthreads();
    if (threadIdx.x < 64) {  // warp 0: |q|^2, warp 1: |k|^2
      const float* v = threadIdx.x < 32 ? qs : ks;
      float ss = 0.0f;
      for (int i = threadIdx.x % 32; i < dk; i += 32) ss += v[i] * v[i];
      ss = warp_sum(ss);
      if (threadIdx.x % 32 == 0) norms[threadIdx.x / 32] = rsqrtf(ss + 1e-6f);
    }
    __syncthreads();
    const float qn = norms[0] * qscale, kn = norms[1];
    const float beta = sigmoid_f(a.b[t * a.ldab + h]);
    const float g = -expf(a.A_log[h]) * softplus_f(a.a[t * a.ldab + h] + a.dt_bias[h]);
    const float decay = expf(g);
    float kv_part = 0.0f;
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      s[r] *= decay;
      kv_part += s[r] * ks[group * ROWS + r] * kn;
    }
    red[0][group][lane] = kv_part;
    __syncthreads();
    float kv_mem = 0.0f;
#pragma unroll
    for (int gi = 0; gi < kGroups; ++gi) kv_mem += red[0][gi][lane];
    const float vval = live ? y[static_cast<std::size_t>(2 * nk) * dk + static_cast<std::size_t>(h) * dv + col] : 0.0f;
    const float delta = (vval - kv_mem) * beta;
    float o_part = 0.0f;
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      s[r] += ks[group * ROWS + r] * kn * delta;
      o_part += s[r] * qs[group * ROWS + r] * qn;
    }
    red[1][group][lane] = o_part;
    __syncthreads();
    if (group == 0 && live) {
      float o = 0.0f;
#pragma unroll
      for (int gi = 0; gi < kGroups; ++gi) o += red[1][gi][lane];
      a.out[t * a.ldo + static_cast<std::size_t>(h) * dv + col] = o;
    }
    __syncthreads();  // qs / ks / red are rewritten by the next token
  }
  if (live) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) S[static_cast<std::size_t>(group * ROWS + r) * dv + col] = s[r];
  }
}

}  // namespace

void launch_sigmoid_mul(const float* gate, std::size_t ldg, std::size_t gate_cols, float* x, std::size_t ldx,
                        std::size_t rows, std::size_t n, cudaStream_t s) {
  const std::size_t total = rows * n;
  if (total == 0) return;
  const unsigned blocks = static_cast<unsigned>((total + 255) / 256);
  sigmoid_mul_kernel<<<blocks, 256, 0, s>>>(gate, ldg, gate_cols == 1 ? 1 : 0, x, ldx, rows, n);
  check_launch("sigmoid_mul");
}

bool gated_delta_supported(std::size_t k_head_dim, std::size_t conv_kernel) {
  return conv_kernel >= 1 && conv_kernel <= kMaxConvKernel &&
         (k_head_dim == 16 || k_head_dim == 32 || k_head_dim == 64 || k_head_dim == 128 || k_head_dim == 256);
}

void launch_gated_delta_net(const GatedDeltaArgs& a, std::size_t n_seqs, cudaStream_t s) {
  if (a.n_tokens == 0 || n_seqs == 0) return;
  const dim3 cgrid(static_cast<unsigned>((a.conv_dim + 127) / 128), static_cast<unsigned>(n_seqs));
  conv_kernel<<<cgrid, 128, 0, s>>>(a);
  check_launch("gated_delta_net conv");
  const dim3 dgrid(static_cast<unsigned>((a.v_head_dim + 31) / 32), static_cast<unsigned>(a.n_v_heads),
                   static_cast<unsigned>(n_seqs));
  switch (a.k_head_dim) {
    case 16: delta_kernel<2><<<dgrid, 256, 0, s>>>(a); break;
    case 32: delta_kernel<4><<<dgrid, 256, 0, s>>>(a); break;
    case 64: delta_kernel<8><<<dgrid, 256, 0, s>>>(a); break;
    case 128: delta_kernel<16><<<dgrid, 256, 0, s>>>(a); break;
    default: delta_kernel<32><<<dgrid, 256, 0, s>>>(a); break;
  }
  check_launch("gated_delta_net delta rule");
}

}  // namespace quarry::engine::cuda
