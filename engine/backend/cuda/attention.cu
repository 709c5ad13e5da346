// Paged causal attention of the CUDA backend, two kernels:
//  * decode-shaped tokens (alone or in short runs: decode rows, verify steps) and every token of an f32
//    KV cache: one block of 16 warps per (token, query head, split of the context); each warp walks its
//    share of the split's positions with an online softmax (Milakov & Gimelshein 2018), lanes over head
//    dims; the warps' states are merged in shared memory and the splits by a second kernel
//    (flash-decoding: Dao et al., "Flash-Decoding for long-context inference");
//  * prefill-shaped runs (>= kFlashMinRun consecutive tokens of one sequence) over a bf16 cache:
//    FlashAttention-2 (Dao 2023) tiles of up to 64 queries x one head per block, Q.K^T and P.V on the
//    tensor cores (mma.sync bf16, f32 accumulators in registers), K/V tiles of 64 positions gathered
//    through the block table by cp.async one tile ahead, the online softmax in f32.
#include <algorithm>
#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstdint>

#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/kernels.cuh"

namespace quarry::engine::cuda {

namespace {

/// Warps of a decode attention block, which share its split of the context (kAttentionSplit positions,
/// kPositions a warp step). 16 rather than 4: a decode step's few blocks (one a query head and split)
/// walk the split in 8 steps instead of 32. Two H200s, Qwen3-8B at 512-640 positions (`bench_engine
/// --device cuda --tp 1,2 --preset qwen3-8b --tg 128 --pp 512 --runs 3`): batch-1 decode 222 -> 229 tok/s
/// on one GPU, 351 -> 368 on two; 8 warps gave 228 / 365.
constexpr int kWarps = 16;
/// Positions a warp of the decode kernel takes in one step (their loads in flight together).
constexpr int kPositions = 4;

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
  pdl_enter();
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
  // kPositions consecutive positions a warp step: their table entries, keys and values are loaded
  // together (one latency for the step, not three a position), then scored and folded in at once.
  for (int p0 = begin + warp * kPositions; p0 < end; p0 += kWarps * kPositions) {
    float kk[kPositions][DPL], vv[kPositions][DPL];
#pragma unroll
    for (int u = 0; u < kPositions; ++u) {
      const int p = min(p0 + u, end - 1);  // past the end: a position read again, weighted 0 below
      const int block = table[p / kv.block_size], slot = p % kv.block_size;
      const std::size_t off = (static_cast<std::size_t>(block) * kv.n_kv_heads + g) * head_stride +
                              static_cast<std::size_t>(slot) * D;
      load_dims<DPL, BF16, CONTIG>(kv.k, off, lane, D, kk[u]);
      load_dims<DPL, BF16, CONTIG>(kv.v, off, lane, D, vv[u]);
    }
    float s[kPositions];
    float m_new = m;
#pragma unroll
    for (int u = 0; u < kPositions; ++u) {
      float d = 0.f;
#pragma unroll
      for (int i = 0; i < DPL; ++i) d = fmaf(qv[i], kk[u][i], d);
      s[u] = warp_sum(d) * scale;
      if (p0 + u < end) m_new = fmaxf(m_new, s[u]);
    }
    const float corr = expf(m - m_new);
    l *= corr;
#pragma unroll
    for (int i = 0; i < DPL; ++i) acc[i] *= corr;
#pragma unroll
    for (int u = 0; u < kPositions; ++u) {
      const float w = p0 + u < end ? expf(s[u] - m_new) : 0.f;
      l += w;
#pragma unroll
      for (int i = 0; i < DPL; ++i) acc[i] = fmaf(w, vv[u][i], acc[i]);
    }
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
  pdl_enter();
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
    launch_kernel("attention", attention_kernel<DPL, true, CONTIG>, grid, kWarps * 32, 0, s, q, ldq, out, ldo, n_heads,
                  b, kv, scale, part);
  else
    launch_kernel("attention", attention_kernel<DPL, false, CONTIG>, grid, kWarps * 32, 0, s, q, ldq, out, ldo, n_heads,
                  b, kv, scale, part);
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

// ---------------------------------------------------------------------------------------------- flash (mma.sync)

constexpr int kTileQ = 64, kFlashWarps = 4;  // a warp owns 16 query rows of the tile

/// Per head dim: K/V positions of a tile, and whether a warp keeps its Q fragments in registers (for
/// D = 256 neither 64 keys nor Q fit beside the 128 f32 accumulators a thread holds of O).
template <int D>
struct FlashShape {
  static constexpr int kKeys = D <= 128 ? 64 : 32;
  static constexpr bool kQInRegisters = D <= 128;
};

/// Shared memory of the flash kernel for head dim D: the Q tile and two stages each of K and V (bf16).
template <int D>
constexpr std::size_t flash_smem_bytes() {
  return static_cast<std::size_t>(kTileQ + 4 * FlashShape<D>::kKeys) * D * sizeof(__nv_bfloat16);
}

__device__ __forceinline__ std::uint32_t smem_addr(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

/// Tiles in shared memory are rows of D bf16 (D / 8 chunks of 16 bytes); chunk c of row r is stored at
/// chunk c ^ (r & 7), so that the 8 rows an ldmatrix reads at one column fall in 8 different bank groups.
template <int D>
__device__ __forceinline__ std::uint32_t tile_offset(int row, int chunk) {
  return static_cast<std::uint32_t>((row * (D / 8) + (chunk ^ (row & 7))) * 16);
}

/// 16 bytes global -> shared, asynchronously (cp.async, sm_80+); src_bytes 0 fills zeros.
__device__ __forceinline__ void cp_async16(std::uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/// Four 8x8 bf16 matrices from shared memory (lane l gives the address of row l % 8 of matrix l / 8);
/// .trans transposes each.
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], std::uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], std::uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

/// d += a (16x16, row) . b (16x8, col), bf16 inputs, f32 accumulation (mma.sync m16n8k16).
__device__ __forceinline__ void mma_16816(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                          std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ std::uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x = lo (the lower address)
  return *reinterpret_cast<const std::uint32_t*>(&v);
}

/// grid (n_heads, tiles of this launch), 128 threads: FlashAttention-2 (Dao 2023) over the paged cache.
/// Tile i = tokens fa_tiles[i].x .. + fa_tiles[i].y - 1 (consecutive positions p0 .. of one sequence),
/// taken in reverse order from tile_base on, so that the longest contexts start first. Warp w owns query
/// rows 16 w .. 16 w + 15; Q (scaled by `scale` and log2(e), rounded to bf16) stays in registers
/// (D <= 128) or shared memory; K/V tiles of TK = FlashShape<D>::kKeys positions at multiples of TK are
/// gathered through the block table by cp.async, the next tile while this one is used; S = Q K^T and
/// O += P V on the tensor cores (mma.sync m16n8k16, f32 accumulation), the online softmax in f32 on S's
/// accumulator registers, P rounded to bf16 in place as the A operand of P V. A query row's result
/// depends on its own position only (the K/V tiles do not move with the query tile).
template <int D>
__global__ void __launch_bounds__(kFlashWarps * 32, 2)
    flash_attention_kernel(const float* __restrict__ q, std::size_t ldq, float* __restrict__ out, std::size_t ldo,
                           int n_heads, AttnBatch b, KvLayer kv, float scale, int tile_base) {
  pdl_enter();
  static_assert(D % 64 == 0, "head dim: a multiple of 64 (8 chunks of 16 bytes for the swizzle)");
  constexpr int kChunks = D / 8;       // 16-byte chunks of a row
  constexpr int kKSteps = D / 16;      // k-steps of S = Q K^T
  constexpr int kDTiles = D / 8;       // n-tiles of O
  constexpr int kTileK = FlashShape<D>::kKeys;
  constexpr bool kQRegs = FlashShape<D>::kQInRegisters;
  constexpr int kSTiles = kTileK / 8;  // n-tiles of S
  extern __shared__ __align__(128) unsigned char smem[];
  const std::uint32_t q_s = smem_addr(smem);
  const std::uint32_t k_s = q_s + kTileQ * D * 2;  // 2 stages
  const std::uint32_t v_s = k_s + 2 * kTileK * D * 2;
  constexpr std::uint32_t kStage = kTileK * D * 2;

  const int h = blockIdx.x, tile = b.n_fa_tiles - 1 - (tile_base + static_cast<int>(blockIdx.y));
  const int t0 = b.fa_tiles[2 * tile], n_q = b.fa_tiles[2 * tile + 1];
  const int g = h / (n_heads / kv.n_kv_heads);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int p0 = b.positions[t0];  // the tile's positions p0 .. p0 + n_q - 1
  const int last = p0 + n_q - 1;
  const std::int32_t* table = b.block_tables + static_cast<std::size_t>(b.seq_index[t0]) * b.max_blocks;
  const auto* kc = static_cast<const __nv_bfloat16*>(kv.k);
  const auto* vc = static_cast<const __nv_bfloat16*>(kv.v);

  // K/V tile `k0` into stage `st`: kTileK rows x kChunks chunks, zeros past `last`.
  auto load_kv = [&](int k0, int st) {
#pragma unroll
    for (int i = 0; i < kTileK * kChunks / (kFlashWarps * 32); ++i) {
      const int e = static_cast<int>(threadIdx.x) + i * kFlashWarps * 32;
      const int r = e / kChunks, c = e % kChunks;
      const int p = k0 + r;
      const __nv_bfloat16* ksrc = kc;
      const __nv_bfloat16* vsrc = vc;
      int bytes = 0;
      if (p <= last) {
        const int block = table[p / kv.block_size], slot = p % kv.block_size;
        const std::size_t off =
            ((static_cast<std::size_t>(block) * kv.n_kv_heads + g) * kv.block_size + slot) * D + c * 8;
        ksrc += off;
        vsrc += off;
        bytes = 16;
      }
      const std::uint32_t o = st * kStage + tile_offset<D>(r, c);
      cp_async16(k_s + o, ksrc, bytes);
      cp_async16(v_s + o, vsrc, bytes);
    }
  };
  load_kv(0, 0);
  cp_async_commit();

  // Q * scale * log2(e) -> bf16 (zeros for the padding rows).
  const float qscale = scale * 1.4426950408889634f;
  for (int e = threadIdx.x; e < kTileQ * kChunks; e += kFlashWarps * 32) {
    const int r = e / kChunks, c = e % kChunks;
    float v[8] = {};
    if (r < n_q) {
      const float* src = q + static_cast<std::size_t>(t0 + r) * ldq + static_cast<std::size_t>(h) * D + c * 8;
#pragma unroll
      for (int j = 0; j < 8; ++j) v[j] = src[j] * qscale;
    }
    uint4 pk;
    pk.x = pack_bf16(v[0], v[1]);
    pk.y = pack_bf16(v[2], v[3]);
    pk.z = pack_bf16(v[4], v[5]);
    pk.w = pack_bf16(v[6], v[7]);
    *reinterpret_cast<uint4*>(smem + tile_offset<D>(r, c)) = pk;
  }
  __syncthreads();
  // The warp's Q rows as A fragments of k-step ks: lane l reads row l % 16, chunk 2 ks + l / 16.
  auto q_fragment = [&](int ks, std::uint32_t(&a)[4]) {
    ldmatrix_x4(a, q_s + tile_offset<D>(warp * 16 + (lane & 15), 2 * ks + (lane >> 4)));
  };
  std::uint32_t qf[kQRegs ? kKSteps : 1][4];
  if constexpr (kQRegs) {
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) q_fragment(ks, qf[ks]);
  }

  float o[kDTiles][4];
#pragma unroll
  for (int j = 0; j < kDTiles; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
  // This thread's rows: r0 = lane / 4 and r0 + 8 of the warp's 16; running max (log2 units) and its
  // share of the running sum.
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
  const int pq0 = p0 + warp * 16 + (lane >> 2), pq1 = pq0 + 8;

  const int n_k = last / kTileK + 1;
  for (int it = 0; it < n_k; ++it) {
    const int k0 = it * kTileK, st = it & 1;
    if (it + 1 < n_k) {
      load_kv(k0 + kTileK, st ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();

    // S = Q K^T: 16 rows x 64 keys. B fragments of n-tiles j, j + 1 in one ldmatrix.x4: matrix m is
    // keys 8 (j + m / 2) .., dims of chunk 2 ks + m % 2.
    float s[kSTiles][4];
#pragma unroll
    for (int j = 0; j < kSTiles; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      std::uint32_t qa[4];
      if constexpr (kQRegs) {
#pragma unroll
        for (int i = 0; i < 4; ++i) qa[i] = qf[ks][i];
      } else {
        q_fragment(ks, qa);
      }
#pragma unroll
      for (int j = 0; j < kSTiles; j += 2) {
        const int m = lane >> 3;
        std::uint32_t kb[4];
        ldmatrix_x4(kb, k_s + st * kStage + tile_offset<D>((j + (m >> 1)) * 8 + (lane & 7), 2 * ks + (m & 1)));
        mma_16816(s[j], qa, kb[0], kb[1]);
        mma_16816(s[j + 1], qa, kb[2], kb[3]);
      }
    }
    // Causal mask where the tile reaches past the warp's first query position.
    if (k0 + kTileK - 1 > p0 + warp * 16) {
#pragma unroll
      for (int j = 0; j < kSTiles; ++j) {
        const int pk = k0 + j * 8 + 2 * (lane & 3);
        if (pk > pq0) s[j][0] = -INFINITY;
        if (pk + 1 > pq0) s[j][1] = -INFINITY;
        if (pk > pq1) s[j][2] = -INFINITY;
        if (pk + 1 > pq1) s[j][3] = -INFINITY;
      }
    }
    // Online softmax (Milakov & Gimelshein 2018) of the two rows: max over the quad's 64 columns.
    float mx0 = m0, mx1 = m1;
#pragma unroll
    for (int j = 0; j < kSTiles; ++j) {
      mx0 = fmaxf(mx0, fmaxf(s[j][0], s[j][1]));
      mx1 = fmaxf(mx1, fmaxf(s[j][2], s[j][3]));
    }
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    const float base0 = mx0 == -INFINITY ? 0.f : mx0, base1 = mx1 == -INFINITY ? 0.f : mx1;
    const float c0 = exp2f(m0 - base0), c1 = exp2f(m1 - base1);  // 0 while the old max is -inf
    m0 = mx0;
    m1 = mx1;
    l0 *= c0;
    l1 *= c1;
#pragma unroll
    for (int j = 0; j < kDTiles; ++j) {
      o[j][0] *= c0;
      o[j][1] *= c0;
      o[j][2] *= c1;
      o[j][3] *= c1;
    }
    // P = exp2(S - max) into A fragments of P V: k-step kk takes n-tiles 2 kk and 2 kk + 1 of S.
    std::uint32_t pf[kTileK / 16][4];
#pragma unroll
    for (int j = 0; j < kSTiles; ++j) {
      const float e0 = exp2f(s[j][0] - base0), e1 = exp2f(s[j][1] - base0);
      const float e2 = exp2f(s[j][2] - base1), e3 = exp2f(s[j][3] - base1);
      l0 += e0 + e1;
      l1 += e2 + e3;
      pf[j >> 1][(j & 1) * 2] = pack_bf16(e0, e1);
      pf[j >> 1][(j & 1) * 2 + 1] = pack_bf16(e2, e3);
    }
    // O += P V. B fragments of dim n-tiles dt, dt + 1 in one ldmatrix.x4.trans: matrix m is keys
    // 16 kk + 8 (m % 2) .., dims of chunk dt + m / 2.
#pragma unroll
    for (int kk = 0; kk < kTileK / 16; ++kk) {
#pragma unroll
      for (int dt = 0; dt < kDTiles; dt += 2) {
        const int m = lane >> 3;
        std::uint32_t vb[4];
        ldmatrix_x4_trans(vb, v_s + st * kStage + tile_offset<D>(16 * kk + 8 * (m & 1) + (lane & 7), dt + (m >> 1)));
        mma_16816(o[dt], pf[kk], vb[0], vb[1]);
        mma_16816(o[dt + 1], pf[kk], vb[2], vb[3]);
      }
    }
    __syncthreads();  // this stage is loaded again two tiles on
  }

  // The rows' sums over the quad, then O / l.
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  const int r0 = warp * 16 + (lane >> 2), r1 = r0 + 8;
  const float inv0 = 1.f / l0, inv1 = 1.f / l1;
#pragma unroll
  for (int j = 0; j < kDTiles; ++j) {
    const int d = j * 8 + 2 * (lane & 3);
    if (r0 < n_q) {
      float* dst = out + static_cast<std::size_t>(t0 + r0) * ldo + static_cast<std::size_t>(h) * D + d;
      dst[0] = o[j][0] * inv0;
      dst[1] = o[j][1] * inv0;
    }
    if (r1 < n_q) {
      float* dst = out + static_cast<std::size_t>(t0 + r1) * ldo + static_cast<std::size_t>(h) * D + d;
      dst[0] = o[j][2] * inv1;
      dst[1] = o[j][3] * inv1;
    }
  }
}

template <int D>
void flash_launch(const float* q, std::size_t ldq, float* out, std::size_t ldo, int n_heads, const AttnBatch& b,
                  const KvLayer& kv, float scale, cudaStream_t s) {
  constexpr std::size_t bytes = flash_smem_bytes<D>();
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
  // At most 65,535 tiles (grid.y) a launch: 4M tokens; longer batches in several launches.
  for (int base = 0; base < b.n_fa_tiles; base += 65535) {
    const dim3 grid(static_cast<unsigned>(n_heads), static_cast<unsigned>(std::min(65535, b.n_fa_tiles - base)));
    launch_kernel("attention (flash)", flash_attention_kernel<D>, grid, kFlashWarps * 32, bytes, s, q, ldq, out, ldo,
                  n_heads, b, kv, scale, base);
  }
}

int splits_for(int max_position) { return (max_position + 1 + kAttentionSplit - 1) / kAttentionSplit; }

}  // namespace

bool flash_attention_supported(const KvLayer& kv) {
  return kv.bf16 && (kv.head_dim == 64 || kv.head_dim == 128 || kv.head_dim == 256);
}

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
    else if (kv.head_dim == 128) flash_launch<128>(q, ldq, out, ldo, n_heads, b, kv, scale, s);
    else flash_launch<256>(q, ldq, out, ldo, n_heads, b, kv, scale, s);
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
  if (n_splits > 1) {
    const dim3 grid(static_cast<unsigned>(n_items), static_cast<unsigned>(n_heads));
    launch_kernel("attention_combine", attention_combine_kernel, grid, 128, 0, s, workspace, n_splits, kv.head_dim, out,
                  ldo, n_heads, simt.simt_tokens);
  }
}

}  // namespace quarry::engine::cuda
