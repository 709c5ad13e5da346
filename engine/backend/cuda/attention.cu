// Paged causal attention of the CUDA backend: one block of 4 warps per (token, query head, split of the
// context); each warp walks its share of the split's positions with an online softmax (Milakov &
// Gimelshein 2018), lanes over head dims; the warps' states are merged in shared memory, and the
// splits by a second kernel (flash-decoding: Dao et al., "Flash-Decoding for long-context inference").
#include <cfloat>
#include <cmath>

#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/kernels.cuh"

namespace quarry::engine::cuda {

namespace {

constexpr int kWarps = 4;

template <int DPL, bool BF16>
__device__ __forceinline__ void load_dims(const void* base, std::size_t off, float (&out)[DPL]) {
  if constexpr (BF16) {
    const __nv_bfloat16* p = static_cast<const __nv_bfloat16*>(base) + off;
#pragma unroll
    for (int i = 0; i < DPL; ++i) out[i] = __bfloat162float(p[i]);
  } else {
    const float* p = static_cast<const float*>(base) + off;
    if constexpr (DPL % 4 == 0) {
#pragma unroll
      for (int i = 0; i < DPL; i += 4) {
        const float4 v = *reinterpret_cast<const float4*>(p + i);
        out[i] = v.x;
        out[i + 1] = v.y;
        out[i + 2] = v.z;
        out[i + 3] = v.w;
      }
    } else {
#pragma unroll
      for (int i = 0; i < DPL; ++i) out[i] = p[i];
    }
  }
}

/// grid (n_tokens, n_heads, n_splits). With n_splits == 1 the output is written directly; otherwise each
/// split writes its unnormalised accumulator and (max, sum) for attention_combine_kernel.
template <int DPL, bool BF16>
__global__ void __launch_bounds__(kWarps * 32) attention_kernel(const float* __restrict__ q, std::size_t ldq,
                                                                float* __restrict__ out, std::size_t ldo, int n_heads,
                                                                AttnBatch b, KvLayer kv, float scale,
                                                                float* __restrict__ part) {
  constexpr int D = DPL * 32;
  const int t = blockIdx.x, h = blockIdx.y, split = blockIdx.z, n_splits = gridDim.z;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = h / (n_heads / kv.n_kv_heads);
  const int ctx = b.positions[t] + 1;
  const int begin = split * kAttentionSplit, end = min(ctx, begin + kAttentionSplit);
  const std::int32_t* table = b.block_tables + static_cast<std::size_t>(b.seq_index[t]) * b.max_blocks;

  float qv[DPL];
  const float* qp = q + static_cast<std::size_t>(t) * ldq + static_cast<std::size_t>(h) * D + lane * DPL;
#pragma unroll
  for (int i = 0; i < DPL; ++i) qv[i] = qp[i];

  float m = -INFINITY, l = 0.f, acc[DPL];
#pragma unroll
  for (int i = 0; i < DPL; ++i) acc[i] = 0.f;
  const std::size_t head_stride = static_cast<std::size_t>(kv.block_size) * D;
  for (int p = begin + warp; p < end; p += kWarps) {
    const int block = table[p / kv.block_size], slot = p % kv.block_size;
    const std::size_t off = (static_cast<std::size_t>(block) * kv.n_kv_heads + g) * head_stride +
                            static_cast<std::size_t>(slot) * D + lane * DPL;
    float kvv[DPL];
    load_dims<DPL, BF16>(kv.k, off, kvv);
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < DPL; ++i) s = fmaf(qv[i], kvv[i], s);
    s = warp_sum(s) * scale;
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new), w = expf(s - m_new);
    l = l * corr + w;
    load_dims<DPL, BF16>(kv.v, off, kvv);
#pragma unroll
    for (int i = 0; i < DPL; ++i) acc[i] = acc[i] * corr + w * kvv[i];
    m = m_new;
  }

  // Merge the warps' states.
  __shared__ float sm[kWarps], sl[kWarps];
  __shared__ float sacc[kWarps][D];
  if (lane == 0) {
    sm[warp] = m;
    sl[warp] = l;
  }
#pragma unroll
  for (int i = 0; i < DPL; ++i) sacc[warp][lane * DPL + i] = acc[i];
  __syncthreads();
  float mm = -INFINITY;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) mm = fmaxf(mm, sm[w]);
  float ll = 0.f;
  float f[kWarps];
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    f[w] = sl[w] > 0.f ? expf(sm[w] - mm) : 0.f;
    ll += sl[w] * f[w];
  }
  const std::size_t pair = static_cast<std::size_t>(t) * n_heads + h;
  for (int d = threadIdx.x; d < D; d += kWarps * 32) {
    float a = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) a += sacc[w][d] * f[w];
    if (n_splits == 1) out[static_cast<std::size_t>(t) * ldo + static_cast<std::size_t>(h) * D + d] = a / ll;
    else part[(pair * n_splits + split) * (D + 2) + d] = a;
  }
  if (n_splits > 1 && threadIdx.x == 0) {
    part[(pair * n_splits + split) * (D + 2) + D] = ll > 0.f ? mm : -INFINITY;
    part[(pair * n_splits + split) * (D + 2) + D + 1] = ll;
  }
}

/// grid (n_tokens, n_heads): merges the splits' (acc, max, sum).
__global__ void attention_combine_kernel(const float* __restrict__ part, int n_splits, int D, float* __restrict__ out,
                                         std::size_t ldo, int n_heads) {
  const int t = blockIdx.x, h = blockIdx.y;
  const std::size_t pair = static_cast<std::size_t>(t) * n_heads + h;
  const float* pp = part + pair * n_splits * (D + 2);
  float mm = -INFINITY;
  for (int s = 0; s < n_splits; ++s) mm = fmaxf(mm, pp[s * (D + 2) + D]);
  float ll = 0.f;
  for (int s = 0; s < n_splits; ++s) {
    const float l = pp[s * (D + 2) + D + 1];
    if (l > 0.f) ll += l * expf(pp[s * (D + 2) + D] - mm);
  }
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float a = 0.f;
    for (int s = 0; s < n_splits; ++s) {
      const float l = pp[s * (D + 2) + D + 1];
      if (l > 0.f) a += pp[s * (D + 2) + d] * expf(pp[s * (D + 2) + D] - mm);
    }
    out[static_cast<std::size_t>(t) * ldo + static_cast<std::size_t>(h) * D + d] = a / ll;
  }
}

template <int DPL>
void attention_launch(const float* q, std::size_t ldq, float* out, std::size_t ldo, int n_heads, const AttnBatch& b,
                      const KvLayer& kv, float scale, float* part, int n_splits, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>(b.n_tokens), static_cast<unsigned>(n_heads), static_cast<unsigned>(n_splits));
  if (kv.bf16) attention_kernel<DPL, true><<<grid, kWarps * 32, 0, s>>>(q, ldq, out, ldo, n_heads, b, kv, scale, part);
  else attention_kernel<DPL, false><<<grid, kWarps * 32, 0, s>>>(q, ldq, out, ldo, n_heads, b, kv, scale, part);
}

int splits_of(const AttnBatch& b) { return (b.max_position + 1 + kAttentionSplit - 1) / kAttentionSplit; }

}  // namespace

std::size_t attention_workspace_floats(const AttnBatch& b, int n_heads, int head_dim) {
  const int n_splits = splits_of(b);
  if (n_splits <= 1) return 0;
  return static_cast<std::size_t>(b.n_tokens) * n_heads * n_splits * (head_dim + 2);
}

void launch_attention(const float* q, std::size_t ldq, float* out, std::size_t ldo, int n_heads, const AttnBatch& b,
                      const KvLayer& kv, float scale, float* workspace, cudaStream_t s) {
  if (b.n_tokens == 0) return;
  if (kv.head_dim % 32 != 0 || kv.head_dim > 256 || kv.head_dim == 0)
    throw std::invalid_argument("attention: head_dim " + std::to_string(kv.head_dim) +
                                " is not supported by the CUDA backend (a multiple of 32 up to 256)");
  if (n_heads % kv.n_kv_heads != 0) throw std::invalid_argument("attention: heads not divisible by kv heads");
  const int n_splits = splits_of(b);
  switch (kv.head_dim / 32) {
    case 1: attention_launch<1>(q, ldq, out, ldo, n_heads, b, kv, scale, workspace, n_splits, s); break;
    case 2: attention_launch<2>(q, ldq, out, ldo, n_heads, b, kv, scale, workspace, n_splits, s); break;
    case 3: attention_launch<3>(q, ldq, out, ldo, n_heads, b, kv, scale, workspace, n_splits, s); break;
    case 4: attention_launch<4>(q, ldq, out, ldo, n_heads, b, kv, scale, workspace, n_splits, s); break;
    case 5: attention_launch<5>(q, ldq, out, ldo, n_heads, b, kv, scale, workspace, n_splits, s); break;
    case 6: attention_launch<6>(q, ldq, out, ldo, n_heads, b, kv, scale, workspace, n_splits, s); break;
    case 7: attention_launch<7>(q, ldq, out, ldo, n_heads, b, kv, scale, workspace, n_splits, s); break;
    default: attention_launch<8>(q, ldq, out, ldo, n_heads, b, kv, scale, workspace, n_splits, s); break;
  }
  check_launch("attention");
  if (n_splits > 1) {
    const dim3 grid(static_cast<unsigned>(b.n_tokens), static_cast<unsigned>(n_heads));
    attention_combine_kernel<<<grid, 128, 0, s>>>(workspace, n_splits, kv.head_dim, out, ldo, n_heads);
    check_launch("attention_combine");
  }
}

}  // namespace quarry::engine::cuda
