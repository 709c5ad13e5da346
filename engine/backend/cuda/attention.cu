// Paged causal attention of the CUDA backend, two kernels:
//  * decode-shaped tokens (alone or in short runs: decode rows, verify steps) and every token of an f32
//    KV cache: one block of 4 warps per (token, query head, split of the context); each warp walks its
//    share of the split's positions with an online softmax (Milakov & Gimelshein 2018), lanes over head
//    dims; the warps' states are merged in shared memory and the splits by a second kernel
//    (flash-decoding: Dao et al., "Flash-Decoding for long-context inference");
//  * prefill-shaped runs (>= kFlashMinRun consecutive tokens of one sequence) over a bf16 cache: a
//    flash-attention tile (Dao et al. 2022, FlashAttention-2's loop order) of up to 64 queries x one
//    head per block, Q.K^T and P.V on the tensor cores (WMMA bf16, f32 accumulation), K/V tiles of 64
//    positions gathered through the block table into shared memory, the online softmax in f32.
#include <mma.h>

#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstdint>

#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/kernels.cuh"

namespace quarry::engine::cuda {

namespace {

constexpr int kWarps = 4;

// ---------------------------------------------------------------------------------------------- SIMT

/// Lane `lane`'s dims of a head of D values: contiguous (lane * DPL + i) when D == 32 * DPL (vector
/// loads), strided (i * 32 + lane) otherwise.
template <int DPL, bool CONTIG>
__device__ __forceinline__ int dim_of(int lane, int i) {
  return CONTIG ? lane * DPL + i : i * 32 + lane;
}

template <int DPL, bool BF16, bool CONTIG>
__device__ __forceinline__ void load_dims(const void* base, std::size_t off, int lane, int D, float (&out)[DPL]) {
  if constexpr (BF16) {
    const __nv_bfloat16* p = static_cast<const __nv_bfloat16*>(base) + off;
#pragma unroll
    for (int i = 0; i < DPL; ++i) {
      const int d = dim_of<DPL, CONTIG>(lane, i);
      out[i] = CONTIG || d < D ? __bfloat162float(p[d]) : 0.f;
    }
  } else {
    const float* p = static_cast<const float*>(base) + off;
    if constexpr (CONTIG && DPL % 4 == 0) {
#pragma unroll
      for (int i = 0; i < DPL; i += 4) {
        const float4 v = *reinterpret_cast<const float4*>(p + lane * DPL + i);
        out[i] = v.x;
        out[i + 1] = v.y;
        out[i + 2] = v.z;
        out[i + 3] = v.w;
      }
    } else {
#pragma unroll
      for (int i = 0; i < DPL; ++i) {
        const int d = dim_of<DPL, CONTIG>(lane, i);
        out[i] = CONTIG || d < D ? p[d] : 0.f;
      }
    }
  }
}

/// grid (n tokens of the list, n_heads, n_splits). With n_splits == 1 the output is written directly;
/// otherwise each split writes its unnormalised accumulator and (max, sum) for attention_combine_kernel.
template <int DPL, bool BF16, bool CONTIG>
__global__ void __launch_bounds__(kWarps * 32) attention_kernel(const float* __restrict__ q, std::size_t ldq,
                                                                float* __restrict__ out, std::size_t ldo, int n_heads,
                                                                AttnBatch b, KvLayer kv, float scale,
                                                                float* __restrict__ part) {
  const int D = kv.head_dim;
  const int item = blockIdx.x, h = blockIdx.y, split = blockIdx.z, n_splits = gridDim.z;
  const int t = b.simt_tokens ? b.simt_tokens[item] : item;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = h / (n_heads / kv.n_kv_heads);
  const int ctx = b.positions[t] + 1;
  const int begin = split * kAttentionSplit, end = min(ctx, begin + kAttentionSplit);
  const std::int32_t* table = b.block_tables + static_cast<std::size_t>(b.seq_index[t]) * b.max_blocks;

  float qv[DPL];
  {
    const float* qp = q + static_cast<std::size_t>(t) * ldq + static_cast<std::size_t>(h) * D;
#pragma unroll
    for (int i = 0; i < DPL; ++i) {
      const int d = dim_of<DPL, CONTIG>(lane, i);
      qv[i] = CONTIG || d < D ? qp[d] : 0.f;
    }
  }
  float m = -INFINITY, l = 0.f, acc[DPL];
#pragma unroll
  for (int i = 0; i < DPL; ++i) acc[i] = 0.f;
  const std::size_t head_stride = static_cast<std::size_t>(kv.block_size) * D;
  for (int p = begin + warp; p < end; p += kWarps) {
    const int block = table[p / kv.block_size], slot = p % kv.block_size;
    const std::size_t off = (static_cast<std::size_t>(block) * kv.n_kv_heads + g) * head_stride +
                            static_cast<std::size_t>(slot) * D;
    float kvv[DPL];
    load_dims<DPL, BF16, CONTIG>(kv.k, off, lane, D, kvv);
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < DPL; ++i) s = fmaf(qv[i], kvv[i], s);
    s = warp_sum(s) * scale;
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new), w = expf(s - m_new);
    l = l * corr + w;
    load_dims<DPL, BF16, CONTIG>(kv.v, off, lane, D, kvv);
#pragma unroll
    for (int i = 0; i < DPL; ++i) acc[i] = acc[i] * corr + w * kvv[i];
    m = m_new;
  }

  // Merge the warps' states.
  __shared__ float sm[kWarps], sl[kWarps];
  __shared__ float sacc[kWarps][DPL * 32];
  if (lane == 0) {
    sm[warp] = m;
    sl[warp] = l;
  }
#pragma unroll
  for (int i = 0; i < DPL; ++i) sacc[warp][dim_of<DPL, CONTIG>(lane, i)] = acc[i];
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

/// grid (n tokens of the list, n_heads): merges the splits' (acc, max, sum).
__global__ void attention_combine_kernel(const float* __restrict__ part, int n_splits, int D, float* __restrict__ out,
                                         std::size_t ldo, int n_heads, const std::int32_t* simt_tokens) {
  const int t = simt_tokens ? simt_tokens[blockIdx.x] : static_cast<int>(blockIdx.x), h = blockIdx.y;
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

template <int DPL, bool CONTIG>
void simt_launch(const float* q, std::size_t ldq, float* out, std::size_t ldo, int n_heads, const AttnBatch& b,
                 const KvLayer& kv, float scale, float* part, int n_items, int n_splits, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>(n_items), static_cast<unsigned>(n_heads), static_cast<unsigned>(n_splits));
  if (kv.bf16)
    attention_kernel<DPL, true, CONTIG><<<grid, kWarps * 32, 0, s>>>(q, ldq, out, ldo, n_heads, b, kv, scale, part);
  else
    attention_kernel<DPL, false, CONTIG><<<grid, kWarps * 32, 0, s>>>(q, ldq, out, ldo, n_heads, b, kv, scale, part);
}

template <bool CONTIG>
void simt_dispatch(int dpl, const float* q, std::size_t ldq, float* out, std::size_t ldo, int n_heads,
                   const AttnBatch& b, const KvLayer& kv, float scale, float* part, int n_items, int n_splits,
                   cudaStream_t s) {
  switch (dpl) {
    case 1: return simt_launch<1, CONTIG>(q, ldq, out, ldo, n_heads, b, kv, scale, part, n_items, n_splits, s);
    case 2: return simt_launch<2, CONTIG>(q, ldq, out, ldo, n_heads, b, kv, scale, part, n_items, n_splits, s);
    case 3: return simt_launch<3, CONTIG>(q, ldq, out, ldo, n_heads, b, kv, scale, part, n_items, n_splits, s);
    case 4: return simt_launch<4, CONTIG>(q, ldq, out, ldo, n_heads, b, kv, scale, part, n_items, n_splits, s);
    case 5: return simt_launch<5, CONTIG>(q, ldq, out, ldo, n_heads, b, kv, scale, part, n_items, n_splits, s);
    case 6: return simt_launch<6, CONTIG>(q, ldq, out, ldo, n_heads, b, kv, scale, part, n_items, n_splits, s);
    case 7: return simt_launch<7, CONTIG>(q, ldq, out, ldo, n_heads, b, kv, scale, part, n_items, n_splits, s);
    default: return simt_launch<8, CONTIG>(q, ldq, out, ldo, n_heads, b, kv, scale, part, n_items, n_splits, s);
  }
}

// ---------------------------------------------------------------------------------------------- flash (WMMA)

namespace wmma = nvcuda::wmma;
constexpr int kTileQ = 64, kTileK = 64, kFlashWarps = 4;

/// Shared memory of the flash kernel for head dim D: Q, K, V tiles (bf16), S (f32), P (bf16), O (f32),
/// the rows' running max / sum / correction.
constexpr std::size_t flash_smem_bytes(int D) {
  return static_cast<std::size_t>(kTileQ) * D * 2 + 2 * static_cast<std::size_t>(kTileK) * D * 2 +
         static_cast<std::size_t>(kTileQ) * kTileK * 4 + static_cast<std::size_t>(kTileQ) * kTileK * 2 +
         static_cast<std::size_t>(kTileQ) * D * 4 + 3 * kTileQ * 4;
}

/// grid (n_fa_tiles, n_heads), 128 threads; tile i = tokens fa_tiles[i].x .. +fa_tiles[i].y - 1, consecutive
/// positions of one sequence. Warp w owns query rows 16 w .. 16 w + 15 of the tile.
template <int D>
__global__ void __launch_bounds__(kFlashWarps * 32) flash_attention_kernel(const float* __restrict__ q, std::size_t ldq,
                                                                           float* __restrict__ out, std::size_t ldo,
                                                                           int n_heads, AttnBatch b, KvLayer kv,
                                                                           float scale) {
  extern __shared__ __align__(128) unsigned char smem[];
  __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(smem);               // [64][D]
  __nv_bfloat16* ks = qs + kTileQ * D;                                       // [64][D]
  __nv_bfloat16* vs = ks + kTileK * D;                                       // [64][D]
  float* ss = reinterpret_cast<float*>(vs + kTileK * D);                     // [64][64]
  __nv_bfloat16* ps = reinterpret_cast<__nv_bfloat16*>(ss + kTileQ * kTileK);  // [64][64]
  float* os = reinterpret_cast<float*>(ps + kTileQ * kTileK);                // [64][D]
  float* row_m = os + kTileQ * D;
  float* row_l = row_m + kTileQ;
  float* row_c = row_l + kTileQ;

  const int tile = blockIdx.x, h = blockIdx.y;
  const int t0 = b.fa_tiles[2 * tile], n_q = b.fa_tiles[2 * tile + 1];
  const int g = h / (n_heads / kv.n_kv_heads);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int p0 = b.positions[t0];           // positions p0 .. p0 + n_q - 1
  const int last = p0 + n_q - 1;
  const std::int32_t* table = b.block_tables + static_cast<std::size_t>(b.seq_index[t0]) * b.max_blocks;
  const auto* kc = static_cast<const __nv_bfloat16*>(kv.k);
  const auto* vc = static_cast<const __nv_bfloat16*>(kv.v);

  // Q (scaled) -> bf16; O, max, sum cleared.
  for (int e = threadIdx.x; e < kTileQ * D; e += blockDim.x) {
    const int r = e / D, d = e % D;
    const float v = r < n_q ? q[static_cast<std::size_t>(t0 + r) * ldq + static_cast<std::size_t>(h) * D + d] * scale : 0.f;
    qs[e] = __float2bfloat16_rn(v);
    os[e] = 0.f;
  }
  for (int r = threadIdx.x; r < kTileQ; r += blockDim.x) {
    row_m[r] = -INFINITY;
    row_l[r] = 0.f;
  }
  __syncthreads();

  for (int k0 = 0; k0 <= last; k0 += kTileK) {
    // K, V tile: positions k0 .. k0 + 63 through the block table (zeros past the last position).
    for (int e = threadIdx.x; e < kTileK * D / 8; e += blockDim.x) {
      const int r = e / (D / 8), c = (e % (D / 8)) * 8;
      const int p = k0 + r;
      uint4 kv4 = make_uint4(0, 0, 0, 0), vv4 = make_uint4(0, 0, 0, 0);
      if (p <= last) {
        const int block = table[p / kv.block_size], slot = p % kv.block_size;
        const std::size_t off = ((static_cast<std::size_t>(block) * kv.n_kv_heads + g) * kv.block_size + slot) * D + c;
        kv4 = *reinterpret_cast<const uint4*>(kc + off);
        vv4 = *reinterpret_cast<const uint4*>(vc + off);
      }
      *reinterpret_cast<uint4*>(ks + r * D + c) = kv4;
      *reinterpret_cast<uint4*>(vs + r * D + c) = vv4;
    }
    __syncthreads();
    // S = Q K^T for this warp's 16 rows x 64 keys.
    {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> sacc[kTileK / 16];
#pragma unroll
      for (int j = 0; j < kTileK / 16; ++j) wmma::fill_fragment(sacc[j], 0.f);
#pragma unroll
      for (int kk = 0; kk < D; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
        wmma::load_matrix_sync(a, qs + warp * 16 * D + kk, D);
#pragma unroll
        for (int j = 0; j < kTileK / 16; ++j) {
          wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> bk;
          wmma::load_matrix_sync(bk, ks + j * 16 * D + kk, D);
          wmma::mma_sync(sacc[j], a, bk, sacc[j]);
        }
      }
#pragma unroll
      for (int j = 0; j < kTileK / 16; ++j)
        wmma::store_matrix_sync(ss + warp * 16 * kTileK + j * 16, sacc[j], kTileK, wmma::mem_row_major);
    }
    __syncwarp();
    // Online softmax of the warp's rows: two lanes per row, 32 columns each.
    {
      const int r = warp * 16 + lane / 2, half = lane % 2;
      const int pq = p0 + r;  // this query's position (rows past n_q are padding)
      float* srow = ss + r * kTileK + half * 32;
      float mx = -INFINITY;
#pragma unroll 8
      for (int j = 0; j < 32; ++j) {
        const int pk = k0 + half * 32 + j;
        const float v = (r < n_q && pk <= pq) ? srow[j] : -INFINITY;
        srow[j] = v;
        mx = fmaxf(mx, v);
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      const float m_old = row_m[r];
      const float m_new = fmaxf(m_old, mx);
      float sum = 0.f;
      __nv_bfloat16* prow = ps + r * kTileK + half * 32;
#pragma unroll 8
      for (int j = 0; j < 32; ++j) {
        const float pv = m_new == -INFINITY ? 0.f : expf(srow[j] - m_new);
        sum += pv;
        prow[j] = __float2bfloat16_rn(pv);
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      if (half == 0) {
        const float corr = m_old == -INFINITY ? 0.f : expf(m_old - m_new);
        row_c[r] = corr;
        row_l[r] = row_l[r] * corr + sum;
        row_m[r] = m_new;
      }
    }
    __syncwarp();
    // O = O * corr + P V for the warp's rows.
    for (int e = lane; e < 16 * D; e += 32) {
      const int r = warp * 16 + e / D;
      os[r * D + e % D] *= row_c[r];
    }
    __syncwarp();
#pragma unroll
    for (int dd = 0; dd < D; dd += 16) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> oacc;
      wmma::load_matrix_sync(oacc, os + warp * 16 * D + dd, D, wmma::mem_row_major);
#pragma unroll
      for (int kk = 0; kk < kTileK; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> bv;
        wmma::load_matrix_sync(a, ps + warp * 16 * kTileK + kk, kTileK);
        wmma::load_matrix_sync(bv, vs + kk * D + dd, D);
        wmma::mma_sync(oacc, a, bv, oacc);
      }
      wmma::store_matrix_sync(os + warp * 16 * D + dd, oacc, D, wmma::mem_row_major);
    }
    __syncthreads();  // K/V tiles are overwritten next
  }
  for (int e = threadIdx.x; e < n_q * D; e += blockDim.x) {
    const int r = e / D, d = e % D;
    out[static_cast<std::size_t>(t0 + r) * ldo + static_cast<std::size_t>(h) * D + d] = os[r * D + d] / row_l[r];
  }
}

template <int D>
void flash_launch(const float* q, std::size_t ldq, float* out, std::size_t ldo, int n_heads, const AttnBatch& b,
                  const KvLayer& kv, float scale, cudaStream_t s) {
  constexpr std::size_t bytes = flash_smem_bytes(D);
  // The shared-memory limit is a per-device attribute of the kernel: set once on each device used.
  static std::atomic<std::uint64_t> configured{0};
  int device = 0;
  check(cudaGetDevice(&device), "attention (device)");
  const std::uint64_t bit = std::uint64_t{1} << (device & 63);
  if (!(configured.load(std::memory_order_acquire) & bit)) {
    check(cudaFuncSetAttribute(flash_attention_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(bytes)),
          "attention (shared memory)");
    configured.fetch_or(bit, std::memory_order_acq_rel);
  }
  const dim3 grid(static_cast<unsigned>(b.n_fa_tiles), static_cast<unsigned>(n_heads));
  flash_attention_kernel<D><<<grid, kFlashWarps * 32, bytes, s>>>(q, ldq, out, ldo, n_heads, b, kv, scale);
}

int splits_for(int max_position) { return (max_position + 1 + kAttentionSplit - 1) / kAttentionSplit; }

}  // namespace

bool flash_attention_supported(const KvLayer& kv) { return kv.bf16 && (kv.head_dim == 64 || kv.head_dim == 128); }

std::size_t attention_workspace_floats(const AttnBatch& b, int n_heads, int head_dim) {
  const int n_splits = splits_for(b.max_position);
  if (n_splits <= 1) return 0;
  return static_cast<std::size_t>(b.n_tokens) * n_heads * n_splits * (head_dim + 2);
}

void launch_attention(const float* q, std::size_t ldq, float* out, std::size_t ldo, int n_heads, const AttnBatch& b,
                      const KvLayer& kv, float scale, float* workspace, cudaStream_t s) {
  if (b.n_tokens == 0) return;
  if (kv.head_dim <= 0 || kv.head_dim > 256)
    throw std::invalid_argument("attention: head_dim " + std::to_string(kv.head_dim) +
                                " is not supported by the CUDA backend (at most 256)");
  if (n_heads % kv.n_kv_heads != 0) throw std::invalid_argument("attention: heads not divisible by kv heads");
  // Prefill runs on the tensor cores where the cache is bf16; the rest (all of it for an f32 cache) on
  // the split kernel.
  AttnBatch simt = b;
  int n_items = b.n_tokens, max_position = b.max_position;
  if (flash_attention_supported(kv) && b.n_fa_tiles > 0) {
    if (kv.head_dim == 64) flash_launch<64>(q, ldq, out, ldo, n_heads, b, kv, scale, s);
    else flash_launch<128>(q, ldq, out, ldo, n_heads, b, kv, scale, s);
    check_launch("attention (flash)");
    n_items = b.n_simt_tokens;
    max_position = b.simt_max_position;
  } else {
    simt.simt_tokens = nullptr;  // every token, in batch order
  }
  if (n_items == 0) return;
  const int n_splits = splits_for(max_position);
  const int dpl = (kv.head_dim + 31) / 32;
  if (kv.head_dim % 32 == 0) simt_dispatch<true>(dpl, q, ldq, out, ldo, n_heads, simt, kv, scale, workspace, n_items, n_splits, s);
  else simt_dispatch<false>(dpl, q, ldq, out, ldo, n_heads, simt, kv, scale, workspace, n_items, n_splits, s);
  check_launch("attention");
  if (n_splits > 1) {
    const dim3 grid(static_cast<unsigned>(n_items), static_cast<unsigned>(n_heads));
    attention_combine_kernel<<<grid, 128, 0, s>>>(workspace, n_splits, kv.head_dim, out, ldo, n_heads,
                                                   simt.simt_tokens);
    check_launch("attention_combine");
  }
}

}  // namespace quarry::engine::cuda
