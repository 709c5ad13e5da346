// Element-wise, normalisation, RoPE, embedding, matmul and KV kernels of the CUDA backend.
#include <atomic>
#include <cfloat>
#include <cmath>

#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/kernels.cuh"
#include "engine/backend/cuda/one_shot.cuh"

namespace quarry::engine::cuda {

namespace {

constexpr int kThreads = 256;

// ---------------------------------------------------------------------------------------------- basics

/// dst[i] = load(i) for i < n by the block, 8 values of a thread loaded before any is stored (one latency
/// a round, not eight: a 4,096-wide row copied value by value took 9 us on an H100). Source and
/// destination must not overlap.
template <class Load>
__device__ __forceinline__ void block_copy(float* dst, std::size_t n, Load load) {
  std::size_t i = threadIdx.x;
  for (; i + 7 * blockDim.x < n; i += 8 * blockDim.x) {
    float v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = load(i + j * blockDim.x);
#pragma unroll
    for (int j = 0; j < 8; ++j) dst[i + j * blockDim.x] = v[j];
  }
  for (; i < n; i += blockDim.x) dst[i] = load(i);
}

__global__ void embedding_kernel(const std::int32_t* tokens, const void* table, int type, std::size_t cols,
                                 float* out, std::size_t ldo) {
  pdl_enter();
  const std::size_t t = blockIdx.x;
  const std::size_t row = static_cast<std::size_t>(tokens[t]) * cols;
  block_copy(out + t * ldo, cols, [&](std::size_t i) { return load_as_float(table, row + i, type); });
}

/// Threads of an RMSNorm block (one row a block) and the values each keeps in registers: rows up to
/// 8,192 wide are read once.
constexpr int kNormThreads = 1024, kNormPer = 8;

/// A normalised value as the norm kernels store it: f32, or rounded to bf16 (the operand of the bf16 GEMMs,
/// the bits launch_to_bf16 gives the f32 value).
__device__ __forceinline__ void store_norm(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_norm(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

/// grid (rows): y = w * (x * inv_rms(x)) a row, x at stride ld, y at stride ldy (x may be y). The sum of
/// squares in double: each thread's values in order, then the warp's shuffle tree, then the warps in order.
template <typename Y>
__global__ void __launch_bounds__(kNormThreads) rms_norm_kernel(const float* x, Y* y, std::size_t dim, std::size_t ld,
                                                                std::size_t ldy, const float* w, float eps) {
  pdl_enter();
  const float* xr = x + blockIdx.x * ld;
  Y* yr = y + blockIdx.x * ldy;
  float v[kNormPer], g[kNormPer];
  double ss = 0.0;
#pragma unroll
  for (int j = 0; j < kNormPer; ++j) {
    const std::size_t i = threadIdx.x + static_cast<std::size_t>(j) * blockDim.x;
    v[j] = i < dim ? xr[i] : 0.f;
    g[j] = i < dim ? w[i] : 0.f;
  }
#pragma unroll
  for (int j = 0; j < kNormPer; ++j) ss += static_cast<double>(v[j]) * v[j];
  for (std::size_t i = threadIdx.x + kNormPer * blockDim.x; i < dim; i += blockDim.x)  // wider rows
    ss += static_cast<double>(xr[i]) * xr[i];
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  __shared__ double part[kNormThreads / 32];
  __shared__ float inv;
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ss;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int i = 0; i < static_cast<int>(blockDim.x >> 5); ++i) total += part[i];
    inv = 1.0f / sqrtf(static_cast<float>(total / static_cast<double>(dim)) + eps);
  }
  __syncthreads();
  const float s = inv;
#pragma unroll
  for (int j = 0; j < kNormPer; ++j) {
    const std::size_t i = threadIdx.x + static_cast<std::size_t>(j) * blockDim.x;
    if (i < dim) store_norm(yr + i, g[j] * (v[j] * s));
  }
  for (std::size_t i = threadIdx.x + kNormPer * blockDim.x; i < dim; i += blockDim.x)
    store_norm(yr + i, w[i] * (xr[i] * s));
}

/// rms_norm_kernel for narrow rows (dim <= kNarrowNorm: per-head norms, T x heads rows): a warp a row,
/// 8 rows a block, the sum of squares in double (each lane's values in order, then the shuffle tree).
constexpr std::size_t kNarrowNorm = 512;
template <typename Y>
__global__ void __launch_bounds__(256) rms_norm_rows_kernel(const float* x, Y* y, std::size_t rows, std::size_t dim,
                                                            std::size_t ld, std::size_t ldy, const float* w, float eps) {
  pdl_enter();
  const std::size_t row = blockIdx.x * 8 + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const float* xr = x + row * ld;
  Y* yr = y + row * ldy;
  float v[kNarrowNorm / 32];
  double ss = 0.0;
#pragma unroll
  for (int j = 0; j < static_cast<int>(kNarrowNorm / 32); ++j) {
    const std::size_t i = lane + static_cast<std::size_t>(j) * 32;
    v[j] = i < dim ? xr[i] : 0.f;
    ss += static_cast<double>(v[j]) * v[j];
  }
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  const float s = 1.0f / sqrtf(static_cast<float>(ss / static_cast<double>(dim)) + eps);
#pragma unroll
  for (int j = 0; j < static_cast<int>(kNarrowNorm / 32); ++j) {
    const std::size_t i = lane + static_cast<std::size_t>(j) * 32;
    if (i < dim) store_norm(yr + i, w[i] * (v[j] * s));
  }
}

__global__ void rope_angles_kernel(const std::int32_t* positions, std::size_t n, const float* inv_freq, std::size_t half,
                                   float* cos_out, float* sin_out) {
  pdl_enter();
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n * half) return;
  const std::size_t t = i / half, j = i % half;
  const float angle = __fmul_rn(static_cast<float>(positions[t]), inv_freq[j]);  // f32 product, as HF
  cos_out[i] = static_cast<float>(cos(static_cast<double>(angle)));
  sin_out[i] = static_cast<float>(sin(static_cast<double>(angle)));
}

__global__ void rope_kernel(float* x, std::size_t n_heads, std::size_t head_dim, std::size_t ld, std::size_t half,
                            const float* cos_t, const float* sin_t) {
  pdl_enter();
  const std::size_t t = blockIdx.x;
  const float* cs = cos_t + t * half;
  const float* sn = sin_t + t * half;
  for (std::size_t e = threadIdx.x; e < n_heads * half; e += blockDim.x) {
    const std::size_t h = e / half, i = e % half;
    float* v = x + t * ld + h * head_dim;
    const float p = v[i], q = v[i + half];
    v[i] = __fsub_rn(__fmul_rn(p, cs[i]), __fmul_rn(q, sn[i]));
    v[i + half] = __fadd_rn(__fmul_rn(q, cs[i]), __fmul_rn(p, sn[i]));
  }
}

/// The norm and rotation of one head in place (head_norm_rope_kernel's body, 128 threads).
__device__ void norm_rope_head(float* v, std::size_t head_dim, const float* w, float eps, std::size_t half,
                               const float* cs, const float* sn) {
  __shared__ float buf[256];
  __shared__ double part[4];
  double ss = 0.0;
  for (std::size_t i = threadIdx.x; i < head_dim; i += blockDim.x) ss += static_cast<double>(v[i]) * v[i];
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ss;
  __syncthreads();
  const double total = part[0] + part[1] + part[2] + part[3];
  const float inv = 1.0f / sqrtf(static_cast<float>(total / static_cast<double>(head_dim)) + eps);
  for (std::size_t i = threadIdx.x; i < head_dim; i += blockDim.x) buf[i] = w[i] * (v[i] * inv);
  __syncthreads();
  for (std::size_t i = threadIdx.x; i < head_dim; i += blockDim.x) {
    float out = buf[i];
    if (i < half) out = __fsub_rn(__fmul_rn(buf[i], cs[i]), __fmul_rn(buf[i + half], sn[i]));
    else if (i < 2 * half) out = __fadd_rn(__fmul_rn(buf[i], cs[i - half]), __fmul_rn(buf[i - half], sn[i - half]));
    v[i] = out;
  }
}

/// grid (tokens, heads), 128 threads: RMSNorm of one head (sum of squares in double) then its rotation.
__global__ void head_norm_rope_kernel(float* x, std::size_t head_dim, std::size_t ld, const float* w, float eps,
                                      std::size_t half, const float* cos_t, const float* sin_t) {
  pdl_enter();
  const std::size_t t = blockIdx.x, h = blockIdx.y;
  norm_rope_head(x + t * ld + h * head_dim, head_dim, w, eps, half, cos_t + t * half, sin_t + t * half);
}

/// grid (tokens, heads + kv heads), 128 threads: q heads first, then each kv head's k (norm, rotation,
/// store) and v (store).
__global__ void qk_norm_rope_store_kernel(float* q, std::size_t ldq, float* k, const float* v, std::size_t ldkv,
                                          int n_heads, std::size_t head_dim, const float* q_norm, const float* k_norm,
                                          float eps, std::size_t half, const float* cos_t, const float* sin_t,
                                          const std::int32_t* positions, const std::int32_t* seq_index,
                                          const std::int32_t* tables, int max_blocks, KvLayer kv) {
  pdl_enter();
  const std::size_t t = blockIdx.x;
  const int h = static_cast<int>(blockIdx.y);
  const float* cs = cos_t + t * half;
  const float* sn = sin_t + t * half;
  if (h < n_heads) return norm_rope_head(q + t * ldq + h * head_dim, head_dim, q_norm, eps, half, cs, sn);
  const int kh = h - n_heads;
  float* kr = k + t * ldkv + kh * head_dim;
  norm_rope_head(kr, head_dim, k_norm, eps, half, cs, sn);
  __syncthreads();
  const int pos = positions[t];
  const int block = tables[static_cast<std::size_t>(seq_index[t]) * max_blocks + pos / kv.block_size];
  const std::size_t at0 =
      ((static_cast<std::size_t>(block) * kv.n_kv_heads + kh) * kv.block_size + pos % kv.block_size) * kv.head_dim;
  const float* vr = v + t * ldkv + kh * head_dim;
  for (std::size_t d = threadIdx.x; d < head_dim; d += blockDim.x) {
    if (kv.bf16) {
      static_cast<__nv_bfloat16*>(kv.k)[at0 + d] = __float2bfloat16_rn(kr[d]);
      static_cast<__nv_bfloat16*>(kv.v)[at0 + d] = __float2bfloat16_rn(vr[d]);
    } else {
      static_cast<float*>(kv.k)[at0 + d] = kr[d];
      static_cast<float*>(kv.v)[at0 + d] = vr[d];
    }
  }
}

__global__ void silu_mul_kernel(const float* gate, std::size_t ldg, const float* up, std::size_t ldu, float* out,
                                std::size_t ldo, std::size_t n) {
  pdl_enter();
  const std::size_t r = blockIdx.y;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const float g = gate[r * ldg + i];
    out[r * ldo + i] = g / (1.f + expf(-g)) * up[r * ldu + i];
  }
}

__global__ void add_kernel(float* x, const float* y, std::size_t n) {
  pdl_enter();
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    x[i] += y[i];
}

__global__ void fill_kernel(float* x, std::size_t n, float value) {
  pdl_enter();
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    x[i] = value;
}

__global__ void gather_rows_kernel(float* dst, std::size_t ldd, const float* src, std::size_t lds,
                                   const std::int32_t* rows, std::size_t cols) {
  pdl_enter();
  const std::size_t i = blockIdx.x;
  const float* s = src + static_cast<std::size_t>(rows[i]) * lds;
  block_copy(dst + i * ldd, cols, [&](std::size_t j) { return s[j]; });
}

__global__ void moe_combine_kernel(float* x, std::size_t ldx, const float* y, std::size_t ldy,
                                   const std::int32_t* slots, const float* weights, std::size_t k, std::size_t cols) {
  pdl_enter();
  const std::size_t t = blockIdx.x;
  for (std::size_t c = threadIdx.x; c < cols; c += blockDim.x) {
    float acc = 0.f;
    for (std::size_t j = 0; j < k; ++j)
      acc += weights[t * k + j] * y[static_cast<std::size_t>(slots[t * k + j]) * ldy + c];
    x[t * ldx + c] += acc;
  }
}

/// A logit as a key whose unsigned order is (value, then the lower id): the float's bits made monotonic in
/// the high word, ~id in the low word. 0 stands for "nothing allowed" (no finite or infinite value maps
/// to it: -inf's high word is 0x007fffff).
__device__ __forceinline__ unsigned long long argmax_key(float v, std::size_t i) {
  const std::uint32_t u = __float_as_uint(v);
  const std::uint32_t ordered = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (static_cast<unsigned long long>(ordered) << 32) | (0xffffffffu - static_cast<std::uint32_t>(i));
}

__device__ __forceinline__ unsigned long long block_max_key(unsigned long long key) {
  for (int o = 16; o > 0; o >>= 1) key = max(key, __shfl_xor_sync(0xffffffffu, key, o));
  __shared__ unsigned long long part[kThreads / 32];
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = key;
  __syncthreads();
  if (threadIdx.x == 0)
    for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) key = max(key, part[w]);
  return key;
}

/// First pass of the argmax: grid (chunks of kArgmaxChunk logits, rows); each block writes the largest key
/// of its chunk (NaN and masked-out ids skipped) to partial[row * chunks + chunk]. Each thread keeps all
/// its loads in flight at once (one block scanning a 151,936-id row took 240 us on an H100).
__global__ void __launch_bounds__(kThreads) argmax_partial_kernel(const float* logits, std::size_t n, std::size_t ld,
                                                                 const std::uint32_t* masks, std::size_t mask_words,
                                                                 unsigned long long* partial) {
  pdl_enter();
  const std::size_t row = blockIdx.y;
  const float* r = logits + row * ld;
  const std::uint32_t* mask = masks ? masks + row * mask_words : nullptr;
  constexpr int kPer = kArgmaxChunk / kThreads;
  const std::size_t base = static_cast<std::size_t>(blockIdx.x) * kArgmaxChunk + threadIdx.x;
  float v[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const std::size_t i = base + static_cast<std::size_t>(j) * kThreads;
    v[j] = i < n ? r[i] : __int_as_float(0x7fffffff);
  }
  unsigned long long best = 0;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const std::size_t i = base + static_cast<std::size_t>(j) * kThreads;
    if (isnan(v[j]) || (mask && !((mask[i / 32] >> (i % 32)) & 1u))) continue;
    best = max(best, argmax_key(v[j], i));
  }
  best = block_max_key(best);
  if (threadIdx.x == 0) partial[row * gridDim.x + blockIdx.x] = best;
}

/// Second pass: one warp per row over its chunks' keys; out[row] = the id, -1 where the mask allows
/// nothing, 0 for an unmasked row of NaN only.
__global__ void argmax_final_kernel(const unsigned long long* partial, int chunks, std::size_t rows, bool masked,
                                    std::int32_t* out) {
  pdl_enter();
  const std::size_t row = static_cast<std::size_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  unsigned long long best = 0;
  for (int c = threadIdx.x & 31; c < chunks; c += 32) best = max(best, partial[row * chunks + c]);
  for (int o = 16; o > 0; o >>= 1) best = max(best, __shfl_xor_sync(0xffffffffu, best, o));
  if ((threadIdx.x & 31) == 0)
    out[row] = best == 0 ? (masked ? -1 : 0) : static_cast<std::int32_t>(0xffffffffu - static_cast<std::uint32_t>(best));
}

__global__ void to_bf16_kernel(const float* x, std::size_t k, std::size_t ldx, __nv_bfloat16* out) {
  pdl_enter();
  const std::size_t r = blockIdx.y;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < k;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    out[r * k + i] = __float2bfloat16_rn(x[r * ldx + i]);
}

__global__ void weights_to_bf16_kernel(const void* in, int type, std::size_t count, __nv_bfloat16* out) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16_rn(load_as_float(in, i, type));
}

unsigned grid_for(std::size_t n) { return static_cast<unsigned>(std::min<std::size_t>(ceil_div(n, kThreads), 65535 * 8)); }

// ---------------------------------------------------------------------------------------------- GEMV

/// The GEMV family (m <= 8 rows of x). MODE 0: y = x.W^T over up to four weights of the same width (q, k,
/// v in one launch); MODE 1: y += x.W^T (the residual); MODE 2: y = silu(x.Wg^T) * (x.Wu^T) (seg[0] gate,
/// seg[1] up, output seg[0].y). Both kernels sum a column alike: a lane its 8 columns of each 256-column step
/// in order, the steps in order (one FMA chain per column and x row), then the warp's shuffle tree, so a row
/// of x gets the same bits alone (decode) as beside others (verify steps, batched decode).
///
/// gemv_kernel: one warp per output column, each lane reading 8 weights per chunk with UNROLL chunks in
/// flight before the FMAs; x is read through the L1 (small, reused by every warp). It runs m = 1 (64
/// registers, 4 blocks an SM) and, at any m, the packed types the quantized GEMV does not take (and, with
/// QUARRY_GEMV_ROWS=0, float weights at m > 1 too: one block an SM there, 150-255 registers).
template <int M, int TYPE, int MODE, int UNROLL>
__global__ void __launch_bounds__(256, M == 1 ? 4 : 1) gemv_kernel(GemvArgs a) {  // m = 1: 64 registers, 4 blocks an SM
  constexpr int NW = MODE == 2 ? 2 : 1;
  const int lane = threadIdx.x & 31;
  std::size_t j = blockIdx.x * 8 + (threadIdx.x >> 5);
  // Mode 3: the block's warps that are through the all-reduce; the last tells the call (one global atomic
  // a block: one a warp, on one address, measured slower than the all-reduce in its own kernel).
  __shared__ unsigned warps_through;
  if constexpr (MODE == 3) {
    if (threadIdx.x == 0) warps_through = 0;
    __syncthreads();
  }
  int s = 0;
  if constexpr (MODE != 2) {
    while (s + 1 < a.n_seg && j >= a.seg[s].n) j -= a.seg[s++].n;
  }
  const bool active = j < a.seg[s].n;
  const std::size_t k = a.k;
  const void* w = a.seg[s].w;
  const void* w2 = MODE == 2 ? a.seg[1].w : nullptr;
  const std::size_t row = j * k;
  float acc[NW][M];
#pragma unroll
  for (int q = 0; q < NW; ++q)
#pragma unroll
    for (int r = 0; r < M; ++r) acc[q][r] = 0.f;
  constexpr std::size_t kStep = 32 * 8;
  auto chunk = [&](std::size_t at, const float (&wv)[NW][8]) {
#pragma unroll
    for (int r = 0; r < M; ++r) {
      float xv[8];
      load_x<8>(a, r, at, xv);
#pragma unroll
      for (int q = 0; q < NW; ++q)
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[q][r] = fmaf(xv[i], wv[q][i], acc[q][r]);
    }
  };
  auto load1 = [&](std::size_t at, float (&wv)[NW][8]) {
    if constexpr (TYPE >= kQ8) load8q<TYPE>(a.seg[s].q, j, at, k, wv[0]);
    else load8<TYPE>(w, row + at, wv[0]);
    if constexpr (MODE == 2) load8<TYPE>(w2, row + at, wv[NW - 1]);
  };
  // UNROLL steps of 256 columns a group, the loads of a group issued together. The first group is in
  // flight while the kernel ahead finishes (programmatic launch); the loop after keeps the plain
  // load-then-sum shape with unconditional loads (the compiler overlaps its iterations: issuing each next
  // load after the sums, or predicating the loads, measured 1.5x slower on the residual products).
  std::size_t k0 = static_cast<std::size_t>(lane) * 8;
  const bool first = k0 + (UNROLL - 1) * kStep < k;
  float wv0[UNROLL][NW][8];
  if (active && first)
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) load1(k0 + u * kStep, wv0[u]);
  pdl_enter();  // the weights above are read-only; x and y belong to the kernels around this one
  if (!active) return;
  if (first) {
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) chunk(k0 + u * kStep, wv0[u]);
    k0 += UNROLL * kStep;
  }
  for (; k0 + (UNROLL - 1) * kStep < k; k0 += UNROLL * kStep) {
    float wv[UNROLL][NW][8];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) load1(k0 + u * kStep, wv[u]);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) chunk(k0 + u * kStep, wv[u]);
  }
  if (k0 < k) {  // fewer than UNROLL steps left: their loads together too
    float wv[UNROLL][NW][8];
#pragma unroll
    for (int u = 0; u < UNROLL - 1; ++u)
      if (k0 + u * kStep < k) load1(k0 + u * kStep, wv[u]);
#pragma unroll
    for (int u = 0; u < UNROLL - 1; ++u)
      if (k0 + u * kStep < k) chunk(k0 + u * kStep, wv[u]);
  }
  float* y = a.seg[s].y;
  const std::size_t ldy = a.seg[s].ldy;
  if constexpr (MODE == 3) {  // m = 1: column j's partial sum to every peer, then the ranks' sum added to y
    static_assert(M == 1, "the all-reduce GEMV takes one row");
    const float v = warp_sum(acc[0][0]);
    if (lane == 0) {
      const LLTarget& t = *a.all_reduce;
      const std::uint32_t epoch = ll_epoch(t);
      for (unsigned q = 0; q < t.ranks; ++q)
        if (q != t.rank) ll_store(ll_slot(t, q, t.rank, epoch) + j, v, epoch);
      float sum = 0.f;
      for (unsigned q = 0; q < t.ranks; ++q) {
        const float p = q == t.rank ? v : ll_load(ll_slot(t, t.rank, q, epoch) + j, epoch, t.abort_flag);
        sum = q == 0 ? p : sum + p;
      }
      y[j] += sum;
      const std::size_t first = static_cast<std::size_t>(blockIdx.x) * 8;
      const unsigned warps = static_cast<unsigned>(a.seg[0].n - first < 8 ? a.seg[0].n - first : 8);
      if (atomicAdd(&warps_through, 1u) == warps - 1) ll_finish(t, epoch, gridDim.x);
    }
  } else {
#pragma unroll
    for (int r = 0; r < M; ++r) {
      const float v = warp_sum(acc[0][r]);
      if constexpr (MODE == 2) {
        const float u = warp_sum(acc[NW - 1][r]);
        if (lane == 0) y[r * ldy + j] = v / (1.f + expf(-v)) * u;
      } else if constexpr (MODE == 1) {
        if (lane == 0) y[r * ldy + j] += v;
      } else {
        if (lane == 0) y[r * ldy + j] = v;
      }
    }
  }
}

#ifndef QUARRY_GEMV_UNROLL
#define QUARRY_GEMV_UNROLL 4
#endif
/// 16-byte weight loads each lane keeps in flight in the one-weight GEMVs (q/k/v, o, down) at m = 1.
constexpr int kGemvUnroll = QUARRY_GEMV_UNROLL;

/// 8 float weights of a row as their 16-byte load gives them (two loads for f32).
template <int TYPE>
struct Packed8 {
  uint4 u;
};
template <>
struct Packed8<kF32> {
  float4 lo, hi;
};

/// Weights off .. off + 7 of w (off a multiple of 8).
template <int TYPE>
__device__ __forceinline__ void load_packed(const void* w, std::size_t off, Packed8<TYPE>& p) {
  if constexpr (TYPE == kF32) {
    const float4* f = reinterpret_cast<const float4*>(static_cast<const float*>(w) + off);
    p.lo = __ldg(f);
    p.hi = __ldg(f + 1);
  } else {
    p.u = __ldg(reinterpret_cast<const uint4*>(static_cast<const std::uint16_t*>(w) + off));
  }
}

/// Values 4h .. 4h + 3 of p as f32 (as load8 widens them).
template <int TYPE>
__device__ __forceinline__ void unpack4(const Packed8<TYPE>& p, int h, float (&f)[4]) {
  if constexpr (TYPE == kF32) {
    const float4 v = h ? p.hi : p.lo;
    f[0] = v.x;
    f[1] = v.y;
    f[2] = v.z;
    f[3] = v.w;
  } else {
    const std::uint32_t words[2] = {h ? p.u.z : p.u.x, h ? p.u.w : p.u.y};
#pragma unroll
    for (int i = 0; i < 2; ++i) widen_pair<TYPE>(words[i], f[2 * i], f[2 * i + 1]);
  }
}

/// A point that ptxas moves no instruction across: a branch it cannot resolve (the calling lane is always in
/// __activemask(), so the trap never runs; a vote, a compare and a branch). Within one basic block ptxas
/// issues every x load of a step ahead of the sums, which at 5 or more x rows takes more registers than 2
/// blocks an SM leave (spills); a fence every few rows bounds it.
__device__ __forceinline__ void schedule_fence() {
  if (__activemask() == 0u) __trap();
}

/// Warps of a GEMV over n output columns, R a warp.
template <int R>
__host__ __device__ __forceinline__ std::size_t gemv_warps(std::size_t n) {
  return (n + R - 1) / R;
}

/// gemv_rows_kernel (float weights, m > 1): a warp takes R consecutive output columns of one segment and
/// reads each x value once for its NW x R column sums: at one column a warp the L1 serves 2 m bytes of x
/// per weight byte (each float4 load of x using half of every 32-byte sector it touches), about all it can
/// at m = 4 while the weights stream at the memory's speed. A lane keeps the 16-byte weight
/// loads of UNROLL steps packed (4 registers each) and widens them half a step at a time against a float4
/// of each x row, with a schedule_fence before every FENCE-th row (0: none), so that BLOCKS blocks fit an
/// SM without spills (gemv_plan). Loads and sums in groups as gemv_kernel's (the first group before
/// pdl_enter, the loop, the short last group).
template <int M, int TYPE, int MODE, int R, int UNROLL, int BLOCKS, int FENCE>
__global__ void __launch_bounds__(256, BLOCKS) gemv_rows_kernel(GemvArgs a) {
  constexpr int NW = MODE == 2 ? 2 : 1;
  using Group = Packed8<TYPE>[NW][R];
  std::size_t j = blockIdx.x * 8 + (threadIdx.x >> 5);  // the warp, then its first column in segment s
  int s = 0;
  if constexpr (MODE != 2) {
    while (s + 1 < a.n_seg && j >= gemv_warps<R>(a.seg[s].n)) j -= gemv_warps<R>(a.seg[s++].n);
  }
  j *= R;
  const std::size_t n = a.seg[s].n, k = a.k;
  const bool active = j < n;
  const void* w[NW];
#pragma unroll
  for (int q = 0; q < NW; ++q) w[q] = a.seg[s + q].w;  // MODE 2: s = 0, gate and up
  std::size_t row[R];  // each column's first weight (a column past n reads the last one, not written)
#pragma unroll
  for (int c = 0; c < R; ++c) row[c] = (j + c < n ? j + c : n - 1) * k;
  float acc[NW][R][M];
#pragma unroll
  for (int q = 0; q < NW; ++q)
#pragma unroll
    for (int c = 0; c < R; ++c)
#pragma unroll
      for (int r = 0; r < M; ++r) acc[q][c][r] = 0.f;
  auto load = [&](std::size_t at, Group& p) {
#pragma unroll
    for (int q = 0; q < NW; ++q)
#pragma unroll
      for (int c = 0; c < R; ++c) load_packed<TYPE>(w[q], row[c] + at, p[q][c]);
  };
  auto sum = [&](std::size_t at, const Group& p) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float wf[NW][R][4];
#pragma unroll
      for (int q = 0; q < NW; ++q)
#pragma unroll
        for (int c = 0; c < R; ++c) unpack4<TYPE>(p[q][c], h, wf[q][c]);
#pragma unroll
      for (int r = 0; r < M; ++r) {
        if constexpr (FENCE > 0) {
          if (r > 0 && r % FENCE == 0) schedule_fence();
        }
        float xv[4];
        load_x<4>(a, r, at + 4 * h, xv);
#pragma unroll
        for (int q = 0; q < NW; ++q)
#pragma unroll
          for (int c = 0; c < R; ++c)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[q][c][r] = fmaf(xv[i], wf[q][c][i], acc[q][c][r]);
      }
    }
  };
  constexpr std::size_t kStep = 32 * 8;
  std::size_t k0 = static_cast<std::size_t>(threadIdx.x & 31) * 8;
  const bool first = k0 + (UNROLL - 1) * kStep < k;
  Group g0[UNROLL];
  if (active && first)
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) load(k0 + u * kStep, g0[u]);
  pdl_enter();  // the weights above are read-only; x and y belong to the kernels around this one
  if (!active) return;
  if (first) {
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) sum(k0 + u * kStep, g0[u]);
    k0 += UNROLL * kStep;
  }
  for (; k0 + (UNROLL - 1) * kStep < k; k0 += UNROLL * kStep) {
    Group g[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) load(k0 + u * kStep, g[u]);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) sum(k0 + u * kStep, g[u]);
  }
  if (k0 < k) {
    Group g[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL - 1; ++u)
      if (k0 + u * kStep < k) load(k0 + u * kStep, g[u]);
#pragma unroll
    for (int u = 0; u < UNROLL - 1; ++u)
      if (k0 + u * kStep < k) sum(k0 + u * kStep, g[u]);
  }
  float* y = a.seg[s].y + j;
  const std::size_t ldy = a.seg[s].ldy;
  const bool lane0 = (threadIdx.x & 31) == 0;
#pragma unroll
  for (int c = 0; c < R; ++c) {
    const bool store = lane0 && j + c < n;
#pragma unroll
    for (int r = 0; r < M; ++r) {
      const float v = warp_sum(acc[0][c][r]);
      if constexpr (MODE == 2) {
        const float u = warp_sum(acc[NW - 1][c][r]);
        if (store) y[r * ldy + c] = v / (1.f + expf(-v)) * u;
      } else if constexpr (MODE == 1) {
        if (store) y[r * ldy + c] += v;
      } else {
        if (store) y[r * ldy + c] = v;
      }
    }
  }
}

// m > 1 with float weights: gemv_rows_kernel (1), or gemv_kernel as before it (0, for A/B runs); the most
// columns a warp of gemv_rows_kernel takes (1, 2 or 4); and whether its 4-column warps keep two steps in
// flight at m >= 4 (1: 8 loads a lane, 64 KB an SM, fences from m = 6) or one (0: 32 KB, no fences).
#ifndef QUARRY_GEMV_ROWS
#define QUARRY_GEMV_ROWS 1
#endif
#ifndef QUARRY_GEMV_COLS
#define QUARRY_GEMV_COLS 4
#endif
#ifndef QUARRY_GEMV_DEEP
#define QUARRY_GEMV_DEEP 1
#endif

/// gemv_rows_kernel's UNROLL, BLOCKS and FENCE.
struct GemvPlan {
  int unroll, blocks, fence;
};

/// The plans by m = 2 .. 8. The widest warps (4 columns, SwiGLU 2), which run the weights tall enough to fill
/// the SMs: about 64 KB of weight loads in flight an SM (as m = 1 has: 4 blocks of 4 loads a lane), then the
/// most blocks whose registers fit without spills (the __launch_bounds__ minimum: ptxas keeps a thread to 64
/// registers at 4 blocks, 80 at 3, 128 at 2), then the fewest fences that keep them (none, then 4, 2, 1 rows
/// apart). The narrower ones run weights that give an SM 1.5 blocks at most: 2 blocks, the fewest fences.
/// From ptxas -v (CUDA 13.0, sm_90) over every combination; f32 weights (two loads of 8) have their own.
constexpr GemvPlan kGemvPlans[2][6][7] = {
    {
        // bf16, f16
        {{1, 4, 0}, {1, 3, 0}, {2, 2, 0}, {2, 2, 0}, {2, 2, 4}, {2, 2, 2}, {2, 2, 2}},  // 4 columns
        {{1, 4, 0}, {1, 3, 0}, {1, 2, 0}, {1, 2, 0}, {1, 2, 0}, {1, 2, 0}, {1, 2, 2}},  // 4, QUARRY_GEMV_DEEP=0
        {{2, 2, 0}, {2, 2, 0}, {2, 2, 0}, {2, 2, 0}, {2, 2, 0}, {2, 2, 4}, {2, 2, 4}},  // 2 columns
        {{4, 2, 0}, {4, 2, 0}, {4, 2, 2}, {4, 2, 4}, {4, 2, 4}, {4, 2, 4}, {4, 2, 4}},  // 1 column
        {{1, 4, 0}, {1, 4, 0}, {1, 4, 1}, {2, 2, 4}, {2, 2, 0}, {2, 2, 4}, {2, 2, 2}},  // SwiGLU, 2 columns
        {{2, 2, 0}, {2, 2, 0}, {2, 2, 0}, {2, 2, 0}, {2, 2, 0}, {2, 2, 0}, {2, 2, 4}},  // SwiGLU, 1 column
    },
    {
        // f32
        {{1, 3, 0}, {1, 3, 1}, {2, 2, 0}, {2, 2, 4}, {2, 2, 4}, {2, 2, 1}, {2, 2, 2}},
        {{1, 3, 0}, {1, 3, 1}, {1, 2, 0}, {1, 2, 0}, {1, 2, 0}, {1, 2, 4}, {1, 2, 2}},
        {{2, 2, 0}, {2, 2, 0}, {2, 2, 0}, {2, 2, 4}, {2, 2, 0}, {2, 2, 4}, {2, 2, 4}},
        {{4, 2, 0}, {4, 2, 2}, {4, 2, 2}, {4, 2, 4}, {4, 2, 4}, {4, 2, 4}, {4, 2, 4}},
        {{1, 4, 0}, {1, 4, 1}, {1, 3, 1}, {2, 2, 4}, {2, 2, 4}, {2, 2, 4}, {2, 2, 2}},
        {{2, 2, 0}, {2, 2, 0}, {2, 2, 0}, {2, 2, 0}, {2, 2, 4}, {2, 2, 4}, {2, 2, 4}},
    },
};

/// The plan of gemv_rows_kernel<m, type, mode, r> (m = 2 .. 8, r = 4, 2 or 1; r = 4 not in mode 2).
constexpr GemvPlan gemv_plan(int m, int type, int mode, int r) {
  const int i = mode == 2 ? (r == 2 ? 4 : 5) : r == 4 ? (QUARRY_GEMV_DEEP ? 0 : 1) : r == 2 ? 2 : 3;
  return kGemvPlans[type == kF32 ? 1 : 0][i][m - 2];
}

template <int M, int TYPE, int MODE, int R>
void gemv_rows_launch(const GemvArgs& a, cudaStream_t s) {
  constexpr GemvPlan p = gemv_plan(M, TYPE, MODE, R);
  std::size_t warps = 0;
  if (MODE == 2) warps = gemv_warps<R>(a.seg[0].n);
  else
    for (int i = 0; i < a.n_seg; ++i) warps += gemv_warps<R>(a.seg[i].n);
  launch_kernel("gemv", gemv_rows_kernel<M, TYPE, MODE, R, p.unroll, p.blocks, p.fence>, ceil_div(warps, 8), 256, 0, s,
                a);
}

template <int M, int TYPE, int MODE>
void gemv_mode(const GemvArgs& a, cudaStream_t s) {
  if constexpr (M > 1 && TYPE < kQ8 && QUARRY_GEMV_ROWS) {
    // The most columns a warp (4, SwiGLU 2) that still give about every SM a block (4 columns on a
    // 4,096-row weight of an H100: 128 blocks).
    constexpr int kMax = MODE == 2 ? 2 : 4, kCols = kMax < QUARRY_GEMV_COLS ? kMax : QUARRY_GEMV_COLS;
    const std::size_t rows = gemv_output_rows(a, MODE), fill = static_cast<std::size_t>(sm_count()) * 8 * 3 / 4;
    if constexpr (kCols >= 4)
      if (rows >= 4 * fill) return gemv_rows_launch<M, TYPE, MODE, 4>(a, s);
    if constexpr (kCols >= 2)
      if (rows >= 2 * fill) return gemv_rows_launch<M, TYPE, MODE, 2>(a, s);
    gemv_rows_launch<M, TYPE, MODE, 1>(a, s);
  } else {
    const unsigned grid = ceil_div(gemv_output_rows(a, MODE), 8);
    launch_kernel("gemv", gemv_kernel<M, TYPE, MODE, MODE == 2 ? 2 : kGemvUnroll>, grid, 256, 0, s, a);
  }
}

template <int M, int TYPE>
void gemv_launch(const GemvArgs& a, int mode, cudaStream_t s) {
  switch (mode) {
    case 0: return gemv_mode<M, TYPE, 0>(a, s);
    case 1: return gemv_mode<M, TYPE, 1>(a, s);
    case 3:
      if constexpr (M == 1 && TYPE < kQ8) return gemv_mode<M, TYPE, 3>(a, s);
      else throw std::invalid_argument("gemv: the all-reduce GEMV takes one row of float weights");
    default:  // SwiGLU: float weights only (swiglu_args keeps packed ones on the plain products)
      if constexpr (TYPE < kQ8) return gemv_mode<M, TYPE, 2>(a, s);
      else throw std::invalid_argument("gemv: the fused SwiGLU takes float weights only");
  }
}

template <int M>
void gemv_typed(const GemvArgs& a, int type, int mode, cudaStream_t s) {
  switch (type) {
    case kF32: return gemv_launch<M, kF32>(a, mode, s);
    case kF16: return gemv_launch<M, kF16>(a, mode, s);
    case kQ8: return gemv_launch<M, kQ8>(a, mode, s);
    case kFP8: return gemv_launch<M, kFP8>(a, mode, s);
    case kQ4: return gemv_launch<M, kQ4>(a, mode, s);
    case kG8: return gemv_launch<M, kG8>(a, mode, s);
    case kG4: return gemv_launch<M, kG4>(a, mode, s);
    default: return gemv_launch<M, kBF16>(a, mode, s);
  }
}

template <int TYPE>
int gemv_all_reduce_blocks_per_sm() {
  static const int n = [] {
    int b = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, gemv_kernel<1, TYPE, 3, kGemvUnroll>, 256, 0) != cudaSuccess) b = 0;
    return b;
  }();
  return n;
}

// ---------------------------------------------------------------------------------------------- f32 GEMM

constexpr int kTile = 64, kTileK = 16;

/// y[m, n] = x[m, k] . W[n, k]^T in f32: a 64x64 output tile per block of 256 threads, 4x4 per thread,
/// k in steps of 16 through shared memory (x and W transposed into [k][row] so the inner loop reads
/// rows of 4 consecutive values).
__global__ void __launch_bounds__(256) gemm_f32_kernel(const float* __restrict__ x, std::size_t m, std::size_t ldx,
                                                       const void* __restrict__ w, int type, std::size_t n,
                                                       std::size_t k, float* __restrict__ y, std::size_t ldy,
                                                       bool accumulate) {
  __shared__ float xs[kTileK][kTile + 4];
  __shared__ float ws[kTileK][kTile + 4];
  const std::size_t row0 = static_cast<std::size_t>(blockIdx.y) * kTile, col0 = static_cast<std::size_t>(blockIdx.x) * kTile;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  float acc[4][4] = {};
  for (std::size_t kk = 0; kk < k; kk += kTileK) {
    for (int e = threadIdx.x; e < kTile * kTileK; e += 256) {
      const int r = e / kTileK, c = e % kTileK;
      const std::size_t gr = row0 + r, gc = kk + c;
      xs[c][r] = gr < m && gc < k ? x[gr * ldx + gc] : 0.f;
      const std::size_t wr = col0 + r;
      ws[c][r] = wr < n && gc < k ? load_as_float(w, wr * k + gc, type) : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int c = 0; c < kTileK; ++c) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        a[i] = xs[c][ty * 4 + i];
        b[i] = ws[c][tx * 4 + i];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) acc[i][jj] = fmaf(a[i], b[jj], acc[i][jj]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const std::size_t r = row0 + ty * 4 + i;
    if (r >= m) continue;
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
      const std::size_t c = col0 + tx * 4 + jj;
      if (c < n) y[r * ldy + c] = accumulate ? y[r * ldy + c] + acc[i][jj] : acc[i][jj];
    }
  }
}

__global__ void matmul_ids_kernel(const float* x, std::size_t ldx, const void* w, int type, std::size_t k,
                                  const std::int32_t* row_of, const std::int32_t* ids, std::size_t n_pairs, float* y,
                                  std::size_t ldy) {
  pdl_enter();
  const std::size_t p = blockIdx.x * 8 + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (p >= n_pairs) return;
  const std::size_t r = static_cast<std::size_t>(row_of[p]), id = static_cast<std::size_t>(ids[p]);
  float acc = 0.f;
  for (std::size_t i = lane; i < k; i += 32) acc = fmaf(x[r * ldx + i], load_as_float(w, id * k + i, type), acc);
  acc = warp_sum(acc);
  if (lane == 0) y[r * ldy + id] = acc;
}

// ---------------------------------------------------------------------------------------------- KV store

__global__ void kv_store_kernel(const float* k, const float* v, std::size_t ld, const std::int32_t* positions,
                                const std::int32_t* seq_index, const std::int32_t* tables, int max_blocks, KvLayer kv) {
  pdl_enter();
  const std::size_t t = blockIdx.x;
  const int pos = positions[t];
  const int block = tables[static_cast<std::size_t>(seq_index[t]) * max_blocks + pos / kv.block_size];
  const int slot = pos % kv.block_size;
  const std::size_t row = static_cast<std::size_t>(kv.n_kv_heads) * kv.head_dim;
  for (std::size_t e = threadIdx.x; e < row; e += blockDim.x) {
    const std::size_t h = e / kv.head_dim, d = e % kv.head_dim;
    const std::size_t at = ((static_cast<std::size_t>(block) * kv.n_kv_heads + h) * kv.block_size + slot) * kv.head_dim + d;
    if (kv.bf16) {
      static_cast<__nv_bfloat16*>(kv.k)[at] = __float2bfloat16_rn(k[t * ld + e]);
      static_cast<__nv_bfloat16*>(kv.v)[at] = __float2bfloat16_rn(v[t * ld + e]);
    } else {
      static_cast<float*>(kv.k)[at] = k[t * ld + e];
      static_cast<float*>(kv.v)[at] = v[t * ld + e];
    }
  }
}

/// grid (n, ceil(cols / 8 / 128)): 128 threads, 8 values each.
template <int TYPE>
__global__ void dequantize_rows_kernel(QuantArgs q, const std::int32_t* rows, std::size_t cols, float* out,
                                       __nv_bfloat16* out_bf16, std::size_t ldo) {
  pdl_enter();
  const std::size_t i = blockIdx.x;
  const std::size_t k0 = (static_cast<std::size_t>(blockIdx.y) * blockDim.x + threadIdx.x) * 8;
  if (k0 >= cols) return;
  const std::size_t n = rows ? static_cast<std::size_t>(rows[i]) : i;
  float f[8];
  load8q<TYPE>(q, n, k0, cols, f);
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    if (out) out[i * ldo + k0 + e] = f[e];
    else out_bf16[i * ldo + k0 + e] = __float2bfloat16_rn(f[e]);
  }
}

__global__ void copy_pairs_kernel(const float* src, std::size_t lds, const std::int32_t* row_of, const std::int32_t* ids,
                                  std::size_t n_pairs, float* y, std::size_t ldy) {
  pdl_enter();
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n_pairs) return;
  const std::size_t r = static_cast<std::size_t>(row_of[i]), id = static_cast<std::size_t>(ids[i]);
  y[r * ldy + id] = src[r * lds + id];
}

}  // namespace

void launch_dequantize_rows(const QuantArgs& q, int type, const std::int32_t* rows, std::size_t n, std::size_t cols,
                            float* out, __nv_bfloat16* out_bf16, std::size_t ldo, cudaStream_t s) {
  if (n == 0 || launch_dequantize_quant(q, type, rows, n, cols, out, out_bf16, ldo, s)) return;
  const dim3 grid(static_cast<unsigned>(n), ceil_div(cols / 8, 128));
  with_quant_type(type, "dequantize", [&](auto qt) {
    launch_kernel("dequantize_rows", dequantize_rows_kernel<decltype(qt)::value>, grid, 128, 0, s, q, rows, cols, out,
                  out_bf16, ldo);
  });
}

void launch_copy_pairs(const float* src, std::size_t lds, const std::int32_t* row_of, const std::int32_t* ids,
                       std::size_t n_pairs, float* y, std::size_t ldy, cudaStream_t s) {
  if (n_pairs == 0) return;
  launch_kernel("copy_pairs", copy_pairs_kernel, ceil_div(n_pairs, 256), 256, 0, s, src, lds, row_of, ids, n_pairs, y,
                ldy);
}

void launch_embedding(const std::int32_t* tokens, std::size_t n, const void* table, int type, std::size_t cols,
                      float* out, std::size_t ldo, cudaStream_t s) {
  if (n == 0) return;
  launch_kernel("embedding", embedding_kernel, static_cast<unsigned>(n), kThreads, 0, s, tokens, table, type, cols, out,
                ldo);
}

template <typename Y>
void rms_norm_launch(const float* x, Y* y, std::size_t rows, std::size_t dim, std::size_t ld, std::size_t ldy,
                     const float* w, float eps, cudaStream_t s) {
  if (rows == 0) return;
  if (dim <= kNarrowNorm)
    return launch_kernel("rms_norm", rms_norm_rows_kernel<Y>, ceil_div(rows, 8), 256, 0, s, x, y, rows, dim, ld, ldy, w,
                         eps);
  launch_kernel("rms_norm", rms_norm_kernel<Y>, static_cast<unsigned>(rows), kNormThreads, 0, s, x, y, dim, ld, ldy, w,
                eps);
}

void launch_rms_norm(const float* x, float* y, std::size_t rows, std::size_t dim, std::size_t ld, const float* w,
                     float eps, cudaStream_t s) {
  rms_norm_launch(x, y, rows, dim, ld, ld, w, eps, s);
}

void launch_rms_norm_bf16(const float* x, std::size_t rows, std::size_t dim, std::size_t ld, const float* w, float eps,
                          __nv_bfloat16* out, cudaStream_t s) {
  rms_norm_launch(x, out, rows, dim, ld, dim, w, eps, s);
}

void launch_rope_angles(const std::int32_t* positions, std::size_t n, const float* inv_freq, std::size_t half,
                        float* cos, float* sin, cudaStream_t s) {
  if (n * half == 0) return;
  launch_kernel("rope_angles", rope_angles_kernel, ceil_div(n * half, kThreads), kThreads, 0, s, positions, n, inv_freq,
                half, cos, sin);
}

void launch_rope(float* x, std::size_t n_tokens, std::size_t n_heads, std::size_t head_dim, std::size_t ld,
                 std::size_t half, const float* cos, const float* sin, cudaStream_t s) {
  if (n_tokens == 0 || half == 0) return;
  launch_kernel("rope", rope_kernel, static_cast<unsigned>(n_tokens), 128, 0, s, x, n_heads, head_dim, ld, half, cos,
                sin);
}

void launch_silu_mul(const float* gate, std::size_t ldg, const float* up, std::size_t ldu, float* out, std::size_t ldo,
                     std::size_t rows, std::size_t n, cudaStream_t s) {
  if (rows == 0 || n == 0) return;
  const dim3 grid(std::min<unsigned>(ceil_div(n, kThreads), 64), static_cast<unsigned>(rows));
  launch_kernel("silu_mul", silu_mul_kernel, grid, kThreads, 0, s, gate, ldg, up, ldu, out, ldo, n);
}

void launch_add(float* x, const float* y, std::size_t n, cudaStream_t s) {
  if (n == 0) return;
  launch_kernel("add", add_kernel, grid_for(n), kThreads, 0, s, x, y, n);
}

void launch_fill(float* x, std::size_t n, float value, cudaStream_t s) {
  if (n == 0) return;
  launch_kernel("fill", fill_kernel, grid_for(n), kThreads, 0, s, x, n, value);
}

void launch_gather_rows(float* dst, std::size_t ldd, const float* src, std::size_t lds, const std::int32_t* rows,
                        std::size_t n, std::size_t cols, cudaStream_t s) {
  if (n == 0) return;
  launch_kernel("gather_rows", gather_rows_kernel, static_cast<unsigned>(n), kThreads, 0, s, dst, ldd, src, lds, rows,
                cols);
}

void launch_moe_combine(float* x, std::size_t ldx, const float* y, std::size_t ldy, const std::int32_t* slots,
                        const float* weights, std::size_t n_tokens, std::size_t k, std::size_t cols, cudaStream_t s) {
  if (n_tokens == 0 || cols == 0) return;
  launch_kernel("moe_combine", moe_combine_kernel, static_cast<unsigned>(n_tokens), kThreads, 0, s, x, ldx, y, ldy,
                slots, weights, k, cols);
}

std::size_t argmax_workspace(std::size_t rows, std::size_t n) { return rows * ceil_div(n, kArgmaxChunk); }

void launch_argmax_rows(const float* logits, std::size_t rows, std::size_t n, std::size_t ld,
                        const std::uint32_t* masks, std::size_t mask_words, unsigned long long* workspace,
                        std::int32_t* out, cudaStream_t s) {
  if (rows == 0) return;
  if (n > 0xffffffffu) throw std::invalid_argument("argmax_rows: more than 2^32 - 1 ids a row");
  const unsigned chunks = std::max(1u, ceil_div(n, kArgmaxChunk));
  launch_kernel("argmax_rows", argmax_partial_kernel, dim3(chunks, static_cast<unsigned>(rows)), kThreads, 0, s, logits,
                n, ld, masks, mask_words, workspace);
  launch_kernel("argmax_rows", argmax_final_kernel, ceil_div(rows, 8), 256, 0, s,
                static_cast<const unsigned long long*>(workspace), static_cast<int>(chunks), rows, masks != nullptr,
                out);
}

void launch_to_bf16(const float* x, std::size_t m, std::size_t k, std::size_t ldx, __nv_bfloat16* out, cudaStream_t s) {
  if (m == 0 || k == 0) return;
  const dim3 grid(std::min<unsigned>(ceil_div(k, kThreads), 64), static_cast<unsigned>(m));
  launch_kernel("to_bf16", to_bf16_kernel, grid, kThreads, 0, s, x, k, ldx, out);
}

void launch_weights_to_bf16(const void* in, int type, std::size_t count, __nv_bfloat16* out, cudaStream_t s) {
  if (count == 0) return;
  weights_to_bf16_kernel<<<grid_for(count), kThreads, 0, s>>>(in, type, count, out);
  check_launch("weights_to_bf16");
}

bool gemv_supported(const float* x, std::size_t ldx, const void* w, std::size_t k) {
  return k % 8 == 0 && ldx % 4 == 0 && reinterpret_cast<std::uintptr_t>(x) % 16 == 0 &&
         reinterpret_cast<std::uintptr_t>(w) % 16 == 0;
}

namespace {
std::atomic<bool> programmatic{false};
}  // namespace

bool programmatic_launch() { return programmatic.load(std::memory_order_relaxed); }
void set_programmatic_launch(bool on) { programmatic.store(on, std::memory_order_relaxed); }

bool gemv_all_reduce_fits(std::size_t n, int type) {
  int per_sm = 0;
  switch (type) {
    case kF32: per_sm = gemv_all_reduce_blocks_per_sm<kF32>(); break;
    case kF16: per_sm = gemv_all_reduce_blocks_per_sm<kF16>(); break;
    case kBF16: per_sm = gemv_all_reduce_blocks_per_sm<kBF16>(); break;
    default: return false;
  }
  return ceil_div(n, 8) <= static_cast<std::size_t>(per_sm) * static_cast<std::size_t>(sm_count());
}

void launch_gemv(const GemvArgs& a, std::size_t m, int type, int mode, cudaStream_t s) {
  if (m == 0) return;
  if (quantized_type(type)) {
    bool fast = true;
    for (int i = 0; i < a.n_seg; ++i) fast = fast && gemv_quant_supported(a.seg[i].q, type, a.k);
    if (fast) return launch_gemv_quant(a, m, type, mode, s);
    if (mode == 2 || a.n_seg != 1)
      throw std::invalid_argument("gemv: this quantized layout takes one plain product per launch");
  }
  with_gemv_rows(m, "gemv", [&](auto rows) { gemv_typed<decltype(rows)::value>(a, type, mode, s); });
}

void launch_gemm_f32(const float* x, std::size_t m, std::size_t ldx, const void* w, int type, std::size_t n,
                     std::size_t k, float* y, std::size_t ldy, bool accumulate, cudaStream_t s) {
  if (m == 0 || n == 0) return;
  const dim3 grid(ceil_div(n, kTile), ceil_div(m, kTile));
  gemm_f32_kernel<<<grid, 256, 0, s>>>(x, m, ldx, w, type, n, k, y, ldy, accumulate);
  check_launch("gemm_f32");
}

void launch_head_norm_rope(float* x, std::size_t n_tokens, std::size_t n_heads, std::size_t head_dim, std::size_t ld,
                           const float* w, float eps, std::size_t half, const float* cos, const float* sin,
                           cudaStream_t s) {
  if (n_tokens == 0 || n_heads == 0) return;
  const dim3 grid(static_cast<unsigned>(n_tokens), static_cast<unsigned>(n_heads));
  launch_kernel("head_norm_rope", head_norm_rope_kernel, grid, 128, 0, s, x, head_dim, ld, w, eps, half, cos, sin);
}

void launch_qk_norm_rope_store(float* q, std::size_t ldq, float* k, const float* v, std::size_t ldkv,
                               std::size_t n_heads, std::size_t n_kv_heads, std::size_t head_dim, const float* q_norm,
                               const float* k_norm, float eps, std::size_t half, const float* cos, const float* sin,
                               const AttnBatch& b, const KvLayer& kv, cudaStream_t s) {
  if (b.n_tokens == 0) return;
  const dim3 grid(static_cast<unsigned>(b.n_tokens), static_cast<unsigned>(n_heads + n_kv_heads));
  launch_kernel("qk_norm_rope_store", qk_norm_rope_store_kernel, grid, 128, 0, s, q, ldq, k, v, ldkv,
                static_cast<int>(n_heads), head_dim, q_norm, k_norm, eps, half, cos, sin, b.positions, b.seq_index,
                b.block_tables, b.max_blocks, kv);
}

void launch_matmul_ids(const float* x, std::size_t ldx, const void* w, int type, std::size_t k,
                       const std::int32_t* row_of, const std::int32_t* ids, std::size_t n_pairs, float* y,
                       std::size_t ldy, cudaStream_t s) {
  if (n_pairs == 0) return;
  launch_kernel("matmul_ids", matmul_ids_kernel, ceil_div(n_pairs, 8), 256, 0, s, x, ldx, w, type, k, row_of, ids,
                n_pairs, y, ldy);
}

void launch_kv_store(const float* k, const float* v, std::size_t ld, const AttnBatch& b, const KvLayer& kv,
                     cudaStream_t s) {
  if (b.n_tokens == 0) return;
  launch_kernel("kv_store", kv_store_kernel, static_cast<unsigned>(b.n_tokens), 128, 0, s, k, v, ld, b.positions,
                b.seq_index, b.block_tables, b.max_blocks, kv);
}

}  // namespace quarry::engine::cuda
