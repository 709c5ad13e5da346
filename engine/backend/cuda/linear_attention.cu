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

#include <algorithm>
#include <cstdint>
#include <stdexcept>

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

// ------------------------------------------------------------------------------------- chunked form

constexpr int kC = kDeltaChunk;
constexpr int kLdA = kC + 1;  // the chunk's square matrices in shared memory

/// Floats of one (chunk, value head) record of the work buffer: G [64], the causal q k^T block [64][64],
/// U [64][dv], W [64][dk].
__host__ __device__ inline std::size_t chunk_record(std::size_t dk, std::size_t dv) {
  return kC + static_cast<std::size_t>(kC) * kC + kC * dv + kC * dk;
}

/// rows x n floats of rows at stride src_ld (16-byte aligned, n a multiple of 4) into dst at stride ld,
/// row i times scale(i): float4 loads of a 256-thread block, four of a thread's in flight at once.
template <class F>
__device__ __forceinline__ void load_rows(float* dst, int ld, const float* src, std::size_t src_ld, int rows, int n,
                                          F scale) {
  const int per_row = n / 4, total = rows * per_row;
  for (int base = threadIdx.x; base < total; base += 4 * 256) {
    float4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int idx = base + u * 256;
      if (idx < total)
        v[u] = __ldg(reinterpret_cast<const float4*>(src + static_cast<std::size_t>(idx / per_row) * src_ld) + idx % per_row);
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int idx = base + u * 256;
      if (idx < total) {
        const int i = idx / per_row, c = (idx % per_row) * 4;
        const float f = scale(i);
        float* o = dst + i * ld + c;
        o[0] = v[u].x * f;
        o[1] = v[u].y * f;
        o[2] = v[u].z * f;
        o[3] = v[u].w * f;
      }
    }
  }
}

/// The conv for a batch of runs: a thread per (token, channel), the previous K - 1 inputs from the batch
/// (the token's own run) or from the sequence's window (zeros after a restart at position 0). The same
/// products in the same order as conv_kernel.
__global__ void conv_tokens_kernel(GatedDeltaArgs a, DeltaChunks ch) {
  const std::size_t C = a.conv_dim;
  const std::size_t c = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  const int t = blockIdx.y;
  if (c >= C) return;
  const int seq = a.seq_index[t], t0 = ch.seq_runs[2 * seq];
  const int K = a.conv_kernel, d = t - t0;
  const bool restart = a.positions[t0] == 0;
  const float* window = a.state(seq);
  const float xt = a.qkv[static_cast<std::size_t>(t) * a.ldqkv + c];
  float acc = a.conv_weight[c * K + K - 1] * xt;
  for (int jj = 0; jj + 1 < K; ++jj) {
    const int j = K - 1 - jj;  // inputs back
    float in;
    if (j <= d) in = a.qkv[static_cast<std::size_t>(t - j) * a.ldqkv + c];
    else in = restart ? 0.0f : window[static_cast<std::size_t>(K - 1 - (j - d)) * C + c];
    acc += a.conv_weight[c * K + jj] * in;
  }
  a.conv_out[static_cast<std::size_t>(t) * C + c] = acc * sigmoid_f(acc);
}

/// Each sequence's conv window after its run: the last K - 1 inputs (from the run, or the old window where
/// the run is shorter). After conv_tokens_kernel, which reads the old window.
__global__ void conv_window_kernel(GatedDeltaArgs a, DeltaChunks ch) {
  const std::size_t C = a.conv_dim;
  const std::size_t c = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  const int seq = blockIdx.y;
  const int t0 = ch.seq_runs[2 * seq], len = ch.seq_runs[2 * seq + 1];
  if (c >= C || len == 0) return;
  const int K = a.conv_kernel;
  const bool restart = a.positions[t0] == 0;
  float* window = a.state(seq);
  float win[kMaxConvKernel];
  for (int jj = 0; jj + 1 < K; ++jj) {
    const int r = len - (K - 1) + jj;  // relative to the run's first token
    if (r >= 0) win[jj] = a.qkv[static_cast<std::size_t>(t0 + r) * a.ldqkv + c];
    else win[jj] = restart ? 0.0f : window[static_cast<std::size_t>(K - 1 + r) * C + c];
  }
  for (int jj = 0; jj + 1 < K; ++jj) window[static_cast<std::size_t>(jj) * C + c] = win[jj];
}

/// Per (chunk, value head), 256 threads: q and k of the head's key head l2-normalised (q also scaled by
/// dk^-1/2; written to qn / kn [n_tokens, nk, dk] by the first value head of each key head), G the
/// cumulative log decays, A = -(beta k k^T * exp(G_i - G_j)) strictly below the diagonal, solved by
/// forward substitution in place (HF's loop over rows), then U = (A + I) (beta v), W = (A + I)
/// (beta exp(G) k) and the causal block (q k^T * exp(G_i - G_j)) on and below the diagonal, written to the
/// chunk's record. Products of the chunk's 64 x 64 matrices in 4 x 4 tiles a thread.
__global__ void __launch_bounds__(256) delta_chunk_prep_kernel(GatedDeltaArgs a, DeltaChunks ch, float* work,
                                                              float* qn, float* kn) {
  extern __shared__ float sm[];
  const int dk = static_cast<int>(a.k_head_dim), dv = static_cast<int>(a.v_head_dim);
  const int nk = static_cast<int>(a.n_k_heads), nv = static_cast<int>(a.n_v_heads);
  const int ci = blockIdx.x, h = blockIdx.y, kh = h / (nv / nk);
  const int t0 = ch.chunks[3 * ci + 1], L = ch.chunks[3 * ci + 2];
  const int ldk = dk + 1, ldx = max(dk, dv) + 1;
  float* ks = sm;               // [64][ldk]: k, then beta exp(G) k
  float* xs = ks + kC * ldk;    // [64][ldx]: q, then beta v
  float* A = xs + kC * ldx;     // [64][kLdA]
  float* Q = A + kC * kLdA;     // [64][kLdA]
  float* G = Q + kC * kLdA;     // [64]
  float* beta = G + kC;         // [64]
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const std::size_t C = a.conv_dim;
  const float* rows0 = a.conv_out + static_cast<std::size_t>(t0) * C;
  load_rows(xs, ldk, rows0 + static_cast<std::size_t>(kh) * dk, C, L, dk, [](int) { return 1.0f; });
  load_rows(ks, ldk, rows0 + static_cast<std::size_t>(nk + kh) * dk, C, L, dk, [](int) { return 1.0f; });
  for (int idx = L * dk + tid; idx < kC * dk; idx += 256) {  // rows past the chunk's end
    xs[(idx / dk) * ldk + idx % dk] = 0.0f;
    ks[(idx / dk) * ldk + idx % dk] = 0.0f;
  }
  if (tid < kC) {
    float bt = 0.0f, gl = 0.0f;
    if (tid < L) {
      const std::size_t t = static_cast<std::size_t>(t0 + tid);
      bt = sigmoid_f(a.b[t * a.ldab + h]);
      gl = -expf(a.A_log[h]) * softplus_f(a.a[t * a.ldab + h] + a.dt_bias[h]);
    }
    beta[tid] = bt;
    G[tid] = gl;
  }
  __syncthreads();
  for (int i = warp; i < L; i += 8) {
    float sq = 0.0f, sk = 0.0f;
    for (int d = lane; d < dk; d += 32) {
      sq += xs[i * ldk + d] * xs[i * ldk + d];
      sk += ks[i * ldk + d] * ks[i * ldk + d];
    }
    sq = warp_sum(sq);
    sk = warp_sum(sk);
    const float fq = rsqrtf(sq + 1e-6f) * rsqrtf(static_cast<float>(dk)), fk = rsqrtf(sk + 1e-6f);
    for (int d = lane; d < dk; d += 32) {
      xs[i * ldk + d] *= fq;
      ks[i * ldk + d] *= fk;
    }
  }
  if (tid == 0) {  // the cumulative sum in order, as torch's cumsum on the chunk (padding adds 0)
    float acc = 0.0f;
    for (int i = 0; i < kC; ++i) G[i] = (acc += G[i]);
  }
  __syncthreads();
  if (h % (nv / nk) == 0)
    for (int idx = tid; idx < L * dk; idx += 256) {
      const int i = idx / dk, d = idx % dk;
      const std::size_t at = (static_cast<std::size_t>(t0 + i) * nk + kh) * dk + d;
      qn[at] = xs[i * ldk + d];
      kn[at] = ks[i * ldk + d];
    }
  const int ty = tid / 16, tx = tid % 16;
  {
    float kk[4][4] = {}, qk[4][4] = {};
    for (int d = 0; d < dk; ++d) {
      float ki[4], qi[4], kj[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        ki[r] = ks[(ty + 16 * r) * ldk + d];
        qi[r] = xs[(ty + 16 * r) * ldk + d];
        kj[r] = ks[(tx + 16 * r) * ldk + d];
      }
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          kk[r][q] = fmaf(ki[r], kj[q], kk[r][q]);
          qk[r][q] = fmaf(qi[r], kj[q], qk[r][q]);
        }
    }
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int i = ty + 16 * r, j = tx + 16 * q;
        const bool in = i < L && j < L;
        const float decay = in && j <= i ? expf(G[i] - G[j]) : 0.0f;
        A[i * kLdA + j] = in && j < i ? -beta[i] * kk[r][q] * decay : 0.0f;
        Q[i * kLdA + j] = in && j <= i ? qk[r][q] * decay : 0.0f;
      }
  }
  __syncthreads();
  // Forward substitution, a row at a time: row i (its original values) plus its combination of the
  // rows above (already final).
  for (int i = 1; i < L; ++i) {
    float v = 0.0f;
    if (tid < i) {
      v = A[i * kLdA + tid];
      for (int m = tid + 1; m < i; ++m) v = fmaf(A[i * kLdA + m], A[m * kLdA + tid], v);
    }
    __syncthreads();
    if (tid < i) A[i * kLdA + tid] = v;
    __syncthreads();
  }
  // beta v into xs (q is done), beta exp(G) k in place.
  load_rows(xs, ldx, rows0 + static_cast<std::size_t>(2 * nk) * dk + static_cast<std::size_t>(h) * dv, C, L, dv,
            [&](int i) { return beta[i]; });
  for (int idx = L * dv + tid; idx < kC * dv; idx += 256) xs[(idx / dv) * ldx + idx % dv] = 0.0f;
  for (int idx = tid; idx < kC * dk; idx += 256) {
    const int i = idx / dk, d = idx % dk;
    ks[i * ldk + d] *= beta[i] * expf(G[i]);
  }
  __syncthreads();
  float* rec = work + (static_cast<std::size_t>(ci) * nv + h) * chunk_record(dk, dv);
  float* Qw = rec + kC;
  float* Uw = Qw + kC * kC;
  float* Ww = Uw + kC * dv;
  if (tid < kC) rec[tid] = G[tid];
  for (int idx = tid; idx < kC * kC; idx += 256) Qw[idx] = Q[(idx / kC) * kLdA + idx % kC];
  // (A + I) X for X = beta v (n = dv, ld ldx) and X = beta exp(G) k (n = dk, ld ldk): 4 rows x up to 8
  // columns a thread.
  auto solve_apply = [&](const float* X, int ld, int n, float* out) {
    for (int c0 = 0; c0 < n; c0 += 128) {
      float acc[4][8];
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int q = 0; q < 8; ++q) {
          const int i = ty + 16 * r, c = c0 + tx + 16 * q;
          acc[r][q] = c < n ? X[i * ld + c] : 0.0f;
        }
      for (int m = 0; m < L; ++m) {
        float am[4], xm[8];
#pragma unroll
        for (int r = 0; r < 4; ++r) am[r] = A[(ty + 16 * r) * kLdA + m];
#pragma unroll
        for (int q = 0; q < 8; ++q) {
          const int c = c0 + tx + 16 * q;
          xm[q] = c < n ? X[m * ld + c] : 0.0f;
        }
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
          for (int q = 0; q < 8; ++q) acc[r][q] = fmaf(am[r], xm[q], acc[r][q]);
      }
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int q = 0; q < 8; ++q) {
          const int i = ty + 16 * r, c = c0 + tx + 16 * q;
          if (i < L && c < n) out[i * n + c] = acc[r][q];
        }
    }
  };
  solve_apply(xs, ldx, dv, Uw);
  solve_apply(ks, ldk, dk, Ww);
}

/// Per (sequence, value head, 32 value columns), 256 threads (a column a lane, warp w over rows w, w + 8,
/// ...): the state S [dk, 32 columns] in shared memory carried over the sequence's chunks in order (zero
/// after a restart at position 0), then written back. Each thread keeps 8 (16 for S) independent sums.
__global__ void __launch_bounds__(256) delta_chunk_state_kernel(GatedDeltaArgs a, DeltaChunks ch, const float* work,
                                                               const float* qn, const float* kn) {
  extern __shared__ float sm[];
  constexpr int kRows = kC / 8;  // rows of a chunk a warp takes
  const int dk = static_cast<int>(a.k_head_dim), dv = static_cast<int>(a.v_head_dim);
  const int nk = static_cast<int>(a.n_k_heads), nv = static_cast<int>(a.n_v_heads);
  const int seq = blockIdx.z, h = blockIdx.y, kh = h / (nv / nk);
  const int t0 = ch.seq_runs[2 * seq], len = ch.seq_runs[2 * seq + 1];
  if (len == 0) return;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int col = blockIdx.x * 32 + lane;
  const bool live = col < dv;
  const int ldk = dk + 1, nd = dk / 8;
  float* S = sm;                 // [dk][32]
  float* buf = S + dk * 32;      // [64][ldk]: W, then exp(G) q, then exp(G_last - G) k
  float* vn = buf + kC * ldk;    // [64][32]
  float* Qm = vn + kC * 32;      // [64][kLdA]
  float* G = Qm + kC * kLdA;     // [64]
  float* Sg = a.state(seq) + a.conv_floats + static_cast<std::size_t>(h) * dk * dv;
  const bool restart = a.positions[t0] == 0;
  for (int d = warp; d < dk; d += 8) S[d * 32 + lane] = live && !restart ? Sg[static_cast<std::size_t>(d) * dv + col] : 0.0f;
  const std::size_t rec_floats = chunk_record(dk, dv);
  const std::size_t qk_ld = static_cast<std::size_t>(nk) * dk;
  for (int ci = ch.seq_first_chunk[seq]; ci < ch.seq_first_chunk[seq + 1]; ++ci) {
    const int tc = ch.chunks[3 * ci + 1], L = ch.chunks[3 * ci + 2];
    const float* rec = work + (static_cast<std::size_t>(ci) * nv + h) * rec_floats;
    const float* Qw = rec + kC;
    const float* Uw = Qw + kC * kC;
    const float* Ww = Uw + kC * dv;
    __syncthreads();  // the previous chunk's last readers of buf, Qm, G
    load_rows(buf, ldk, Ww, dk, L, dk, [](int) { return 1.0f; });
    load_rows(Qm, kLdA, Qw, kC, L, kC, [](int) { return 1.0f; });
    if (threadIdx.x < kC) G[threadIdx.x] = rec[threadIdx.x];
    float acc[16];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int i = warp + 8 * r;
      acc[r] = i < L && live ? Uw[static_cast<std::size_t>(i) * dv + col] : 0.0f;
    }
    __syncthreads();
    // v_new = U - W S
    for (int d = 0; d < dk; ++d) {
      const float sd = S[d * 32 + lane];
#pragma unroll
      for (int r = 0; r < kRows; ++r) acc[r] = fmaf(-buf[(warp + 8 * r) * ldk + d], sd, acc[r]);
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) vn[(warp + 8 * r) * 32 + lane] = warp + 8 * r < L ? acc[r] : 0.0f;
    __syncthreads();
    load_rows(buf, ldk, qn + static_cast<std::size_t>(tc) * qk_ld + static_cast<std::size_t>(kh) * dk, qk_ld, L, dk,
              [&](int i) { return expf(G[i]); });
    __syncthreads();
    // out = exp(G) q S + (q k^T) v_new (the block is zero above the diagonal)
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;
    for (int d = 0; d < dk; ++d) {
      const float sd = S[d * 32 + lane];
#pragma unroll
      for (int r = 0; r < kRows; ++r) acc[r] = fmaf(buf[(warp + 8 * r) * ldk + d], sd, acc[r]);
    }
    for (int j = 0; j < L; ++j) {
      const float vj = vn[j * 32 + lane];
#pragma unroll
      for (int r = 0; r < kRows; ++r) acc[r] = fmaf(Qm[(warp + 8 * r) * kLdA + j], vj, acc[r]);
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int i = warp + 8 * r;
      if (i < L && live) a.out[static_cast<std::size_t>(tc + i) * a.ldo + static_cast<std::size_t>(h) * dv + col] = acc[r];
    }
    __syncthreads();
    const float g_last = G[L - 1];
    load_rows(buf, ldk, kn + static_cast<std::size_t>(tc) * qk_ld + static_cast<std::size_t>(kh) * dk, qk_ld, L, dk,
              [&](int i) { return expf(g_last - G[i]); });
    __syncthreads();
    // S = exp(G_last) S + (exp(G_last - G) k)^T v_new
    const float decay = expf(g_last);
#pragma unroll
    for (int q = 0; q < 16; ++q)
      if (q < nd) acc[q] = S[(warp + 8 * q) * 32 + lane] * decay;
    for (int i = 0; i < L; ++i) {
      const float vi = vn[i * 32 + lane];
#pragma unroll
      for (int q = 0; q < 16; ++q)
        if (q < nd) acc[q] = fmaf(buf[i * ldk + warp + 8 * q], vi, acc[q]);
    }
#pragma unroll
    for (int q = 0; q < 16; ++q)
      if (q < nd) S[(warp + 8 * q) * 32 + lane] = acc[q];
  }
  __syncthreads();
  if (live)
    for (int d = warp; d < dk; d += 8) Sg[static_cast<std::size_t>(d) * dv + col] = S[d * 32 + lane];
}

std::size_t prep_smem(std::size_t dk, std::size_t dv) {
  return (kC * (dk + 1) + kC * (std::max(dk, dv) + 1) + 2 * kC * kLdA + 2 * kC) * sizeof(float);
}
std::size_t state_smem(std::size_t dk) {
  return (dk * 32 + kC * (dk + 1) + kC * 32 + kC * kLdA + kC) * sizeof(float);
}

}  // namespace

bool gated_delta_chunked_supported(std::size_t k_head_dim, std::size_t v_head_dim) {
  return k_head_dim >= 16 && k_head_dim <= 128 && k_head_dim % 16 == 0 && v_head_dim >= 16 && v_head_dim <= 128 &&
         v_head_dim % 16 == 0;
}

std::size_t gated_delta_chunked_work_floats(const GatedDeltaArgs& a, std::size_t n_chunks) {
  return n_chunks * a.n_v_heads * chunk_record(a.k_head_dim, a.v_head_dim) +
         2 * a.n_tokens * a.n_k_heads * a.k_head_dim;
}

void launch_gated_delta_net_chunked(const GatedDeltaArgs& a, const DeltaChunks& c, std::size_t n_seqs, float* work,
                                    cudaStream_t s) {
  if (a.n_tokens == 0 || n_seqs == 0) return;
  if (!gated_delta_chunked_supported(a.k_head_dim, a.v_head_dim) || a.conv_kernel < 1 || a.conv_kernel > kMaxConvKernel)
    throw std::invalid_argument("gated_delta_net (chunked): unsupported head or kernel size");
  const dim3 tgrid(static_cast<unsigned>((a.conv_dim + 127) / 128), static_cast<unsigned>(a.n_tokens));
  conv_tokens_kernel<<<tgrid, 128, 0, s>>>(a, c);
  check_launch("gated_delta_net conv (tokens)");
  const dim3 wgrid(static_cast<unsigned>((a.conv_dim + 127) / 128), static_cast<unsigned>(n_seqs));
  conv_window_kernel<<<wgrid, 128, 0, s>>>(a, c);
  check_launch("gated_delta_net conv window");
  float* qn = work + c.n_chunks * a.n_v_heads * chunk_record(a.k_head_dim, a.v_head_dim);
  float* kn = qn + a.n_tokens * a.n_k_heads * a.k_head_dim;
  const std::size_t ps = prep_smem(a.k_head_dim, a.v_head_dim), ss = state_smem(a.k_head_dim);
  // Beyond the default 48 KB of dynamic shared memory (an attribute of the current device's function).
  check(cudaFuncSetAttribute(delta_chunk_prep_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(ps)),
        "gated_delta_net chunk prep: shared memory");
  check(cudaFuncSetAttribute(delta_chunk_state_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(ss)),
        "gated_delta_net chunk state: shared memory");
  delta_chunk_prep_kernel<<<dim3(static_cast<unsigned>(c.n_chunks), static_cast<unsigned>(a.n_v_heads)), 256, ps, s>>>(
      a, c, work, qn, kn);
  check_launch("gated_delta_net chunk prep");
  const dim3 sgrid(static_cast<unsigned>((a.v_head_dim + 31) / 32), static_cast<unsigned>(a.n_v_heads),
                   static_cast<unsigned>(n_seqs));
  delta_chunk_state_kernel<<<sgrid, 256, ss, s>>>(a, c, work, qn, kn);
  check_launch("gated_delta_net chunk state");
}

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
