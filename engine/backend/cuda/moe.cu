// Mixture-of-experts kernels of the CUDA backend, none of which waits for the host: routing on the device;
// gather-GEMVs over each token's experts for small batches (decode, so that a decode step with sparse
// layers can be recorded); and for prefill, the pairs grouped by expert on the device and two grouped
// tensor-core products over tiles of one expert's pairs. After vLLM's fused_moe (routing on the device,
// experts addressed through tables, moe_align_block_size, tiles of one expert) and llama.cpp's mul_mat_id
// (a GEMV per selected expert for a few tokens).
#include <mma.h>

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

// ------------------------------------------------------------------------------ grouped (prefill)

constexpr int kGroupThreads = 128;  // 4 warps, 2 x 2 over a tile
constexpr int kGroupBN = 64, kGroupBK = 64;
constexpr int kAlignThreads = 1024;

/// The grouping of the pairs by expert, on one block: counts per expert, exclusive scans of the counts
/// (each expert's first slot) and of their tiles of `bm` slots, then each pair's slot, its expert's next
/// free one (by an atomic: the order of the pairs within an expert is arbitrary, and no product of a slot
/// depends on it). count [E] ends as the cursors; offset, tile_start [E + 1]; slot_of_pair, token_of_slot
/// [pairs].
__global__ void __launch_bounds__(kAlignThreads) moe_align_kernel(const std::int32_t* ids, int pairs, int k, int E, int bm,
                                                                  std::int32_t* count, std::int32_t* offset,
                                                                  std::int32_t* tile_start, std::int32_t* slot_of_pair,
                                                                  std::int32_t* token_of_slot) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  for (int e = tid; e < E; e += kAlignThreads) count[e] = 0;
  __syncthreads();
  for (int p = tid; p < pairs; p += kAlignThreads) atomicAdd(&count[ids[p]], 1);
  __syncthreads();
  // Each thread scans a run of experts; the runs' sums are scanned over the block (warp shuffles).
  const int per = (E + kAlignThreads - 1) / kAlignThreads, lo = min(E, tid * per), hi = min(E, lo + per);
  int c = 0, tl = 0;
  for (int e = lo; e < hi; ++e) {
    c += count[e];
    tl += (count[e] + bm - 1) / bm;
  }
  int ic = c, it = tl;  // inclusive within the warp
  for (int o = 1; o < 32; o <<= 1) {
    const int a = __shfl_up_sync(0xffffffffu, ic, o), b = __shfl_up_sync(0xffffffffu, it, o);
    if (lane >= o) {
      ic += a;
      it += b;
    }
  }
  __shared__ int wc[32], wt[32];
  if (lane == 31) {
    wc[warp] = ic;
    wt[warp] = it;
  }
  __syncthreads();
  if (warp == 0) {
    int a = wc[lane], b = wt[lane];
    for (int o = 1; o < 32; o <<= 1) {
      const int ua = __shfl_up_sync(0xffffffffu, a, o), ub = __shfl_up_sync(0xffffffffu, b, o);
      if (lane >= o) {
        a += ua;
        b += ub;
      }
    }
    wc[lane] = a;
    wt[lane] = b;
  }
  __syncthreads();
  int base_c = (warp ? wc[warp - 1] : 0) + ic - c, base_t = (warp ? wt[warp - 1] : 0) + it - tl;
  for (int e = lo; e < hi; ++e) {
    const int n = count[e];
    offset[e] = base_c;
    tile_start[e] = base_t;
    count[e] = base_c;
    base_c += n;
    base_t += (n + bm - 1) / bm;
  }
  if (tid == kAlignThreads - 1) {
    offset[E] = base_c;
    tile_start[E] = base_t;
  }
  __syncthreads();
  for (int p = tid; p < pairs; p += kAlignThreads) {
    const int s = atomicAdd(&count[ids[p]], 1);
    slot_of_pair[p] = s;
    token_of_slot[s] = p / k;
  }
}

/// One grouped product: out[s, :n] = A[s] . W_e^T for every slot s of expert e (with SwiGLU:
/// silu(A[s] . W0_e^T) * (A[s] . W1_e^T), written as bf16 to out_bf16), A [slots, kdim] bf16 by slot.
struct GroupedProduct {
  const __nv_bfloat16* a = nullptr;
  const void* const* w0 = nullptr;
  const void* const* w1 = nullptr;
  const QuantArgs* q0 = nullptr;
  const QuantArgs* q1 = nullptr;
  int n = 0, kdim = 0, n_experts = 0;
  const std::int32_t* offset = nullptr;
  const std::int32_t* tile_start = nullptr;
  float* out = nullptr;
  __nv_bfloat16* out_bf16 = nullptr;
};

/// 8 bf16 (round to nearest even) of 8 floats, packed low first.
__device__ __forceinline__ uint4 pack_bf16x8(const float (&f)[8]) {
  std::uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __nv_bfloat162 p = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    w[i] = *reinterpret_cast<const std::uint32_t*>(&p);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

/// xa[s, :] = bf16(h[token_of_slot[s], :]): the pairs' inputs by slot, rounded once (as every bf16 product
/// rounds x). A block a slot, 8 values a thread a step.
__global__ void moe_gather_bf16_kernel(const float* h, std::size_t ldh, const std::int32_t* token_of_slot,
                                       std::size_t hidden, __nv_bfloat16* xa) {
  const std::size_t slot = blockIdx.x;
  const float* src = h + static_cast<std::size_t>(token_of_slot[slot]) * ldh;
  for (std::size_t k = threadIdx.x * 8; k < hidden; k += blockDim.x * 8) {
    const float4 x0 = __ldg(reinterpret_cast<const float4*>(src + k));
    const float4 x1 = __ldg(reinterpret_cast<const float4*>(src + k) + 1);
    const float f[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
    *reinterpret_cast<uint4*>(xa + slot * hidden + k) = pack_bf16x8(f);
  }
}

/// The tile of block (blockIdx.x, blockIdx.y): its expert (through tile_start), first slot and slot
/// count; false for a block past the last tile.
struct GroupedTile {
  int e, m0, rows;
};
__device__ __forceinline__ bool find_tile(const GroupedProduct& g, int bm, GroupedTile& t) {
  const int tile = blockIdx.y;
  if (tile >= g.tile_start[g.n_experts]) return false;
  int lo = 0, hi = g.n_experts;  // tile_start[lo] <= tile < tile_start[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (g.tile_start[mid] <= tile) lo = mid;
    else hi = mid;
  }
  t.e = lo;
  t.m0 = g.offset[lo] + (tile - g.tile_start[lo]) * bm;
  t.rows = min(bm, g.offset[lo + 1] - t.m0);
  return true;
}

/// The epilogue of a tile: the warps' accumulators through shared memory (Cs [BM][BN + 4]; with SwiGLU
/// silu(acc0) * acc1, element by element of one fragment type), then only the expert's rows written.
template <int BM, int BN, int FM, int FN, bool SWIGLU, class Acc>
__device__ __forceinline__ void grouped_epilogue(const GroupedProduct& g, const GroupedTile& t, int n0, Acc& acc,
                                                 float* Cs) {
  namespace wmma = nvcuda::wmma;
  constexpr int LDC = BN + 4, WM = BM / 2, WN = BN / 2;
  const int warp = threadIdx.x >> 5, wm = warp >> 1, wn = warp & 1;
#pragma unroll
  for (int i = 0; i < FM; ++i)
#pragma unroll
    for (int j = 0; j < FN; ++j) {
      if constexpr (SWIGLU) {
#pragma unroll
        for (int x = 0; x < acc[0][i][j].num_elements; ++x) {
          const float gv = acc[0][i][j].x[x];
          acc[0][i][j].x[x] = gv / (1.f + expf(-gv)) * acc[1][i][j].x[x];
        }
      }
      wmma::store_matrix_sync(Cs + (wm * WM + i * 16) * LDC + wn * WN + j * 16, acc[0][i][j], LDC, wmma::mem_row_major);
    }
  __syncthreads();
  for (int idx = threadIdx.x; idx < BM * (BN / 4); idx += kGroupThreads) {
    const int r = idx / (BN / 4), c = (idx % (BN / 4)) * 4;
    if (r >= t.rows || n0 + c >= g.n) continue;
    const float4 v = *reinterpret_cast<const float4*>(Cs + r * LDC + c);
    const std::size_t at = static_cast<std::size_t>(t.m0 + r) * g.n + n0 + c;
    if constexpr (SWIGLU) {
      const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
      uint2 u;
      u.x = *reinterpret_cast<const std::uint32_t*>(&lo);
      u.y = *reinterpret_cast<const std::uint32_t*>(&hi);
      *reinterpret_cast<uint2*>(g.out_bf16 + at) = u;
    } else {
      *reinterpret_cast<float4*>(g.out + at) = v;
    }
  }
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool pred) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int bytes = pred ? 16 : 0;  // 0: the 16 bytes are zero-filled
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/// Every accumulator of a tile's products set to 0.
template <class Acc>
__device__ __forceinline__ void zero_fragments(Acc& acc) {
  for (auto& per_product : acc)
    for (auto& row : per_product)
      for (auto& f : row) nvcuda::wmma::fill_fragment(f, 0.0f);
}

/// One step of BK along the reduction from shared memory (A [BM][LD], then the NB weights [BN][LD] each):
/// each warp's WM x WN quarter of every product gains A . B^T (WMMA 16x16x16 bf16, f32 accumulators).
template <int BK, int LD, int BN, int WM, int WN, int FM, int FN, int NB, class Acc>
__device__ __forceinline__ void mma_step(Acc& acc, const __nv_bfloat16* As, const __nv_bfloat16* Bs, int wm, int wn) {
  namespace wmma = nvcuda::wmma;
#pragma unroll
  for (int kk = 0; kk < BK; kk += 16) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa[FM];
#pragma unroll
    for (int i = 0; i < FM; ++i) wmma::load_matrix_sync(fa[i], As + (wm * WM + i * 16) * LD + kk, LD);
#pragma unroll
    for (int b = 0; b < NB; ++b)
#pragma unroll
      for (int j = 0; j < FN; ++j) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb;
        wmma::load_matrix_sync(fb, Bs + (b * BN + wn * WN + j * 16) * LD + kk, LD);
#pragma unroll
        for (int i = 0; i < FM; ++i) wmma::mma_sync(acc[b][i][j], fa[i], fb, acc[b][i][j]);
      }
  }
}

constexpr int kBf16Stages = 4, kBf16BK = 32;
template <int BM, bool SWIGLU>
constexpr std::size_t bf16_grouped_smem() {
  constexpr std::size_t in = static_cast<std::size_t>(kBf16Stages) * (BM + (SWIGLU ? 2 : 1) * kGroupBN) * (kBf16BK + 8) * 2;
  constexpr std::size_t out = static_cast<std::size_t>(BM) * (kGroupBN + 4) * 4;
  return in > out ? in : out;
}

/// The grouped product over bf16 experts: A and weight tiles stream into shared memory through a
/// 4-stage cp.async pipeline (steps of 32 along the reduction; CUTLASS's multistage mainloop), the warps
/// multiply with WMMA 16x16x16 bf16, f32 accumulators, each warp a (BM / 2) x 32 quarter of the tile.
template <int BM, bool SWIGLU>
__global__ void __launch_bounds__(kGroupThreads) moe_grouped_bf16_kernel(GroupedProduct g) {
  namespace wmma = nvcuda::wmma;
  constexpr int BN = kGroupBN, BK = kBf16BK, LD = BK + 8, NB = SWIGLU ? 2 : 1, ST = kBf16Stages;
  constexpr int WM = BM / 2, WN = BN / 2, FM = WM / 16, FN = WN / 16;
  constexpr int kChunks = BK / 8;                            // 16-byte chunks a row of a step
  constexpr int kStage = (BM + NB * BN) * LD;                // bf16 a stage
  extern __shared__ __align__(128) unsigned char smem_raw[];
  auto* sm = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  GroupedTile t;
  if (!find_tile(g, BM, t)) return;
  const int n0 = blockIdx.x * BN, tid = threadIdx.x;
  const auto* w0 = static_cast<const __nv_bfloat16*>(g.w0[t.e]);
  const auto* w1 = static_cast<const __nv_bfloat16*>(SWIGLU ? g.w1[t.e] : g.w0[t.e]);
  const int nk = (g.kdim + BK - 1) / BK;
  auto load_stage = [&](int stage, int k0) {
    __nv_bfloat16* As = sm + stage * kStage;
    __nv_bfloat16* Bs = As + BM * LD;
#pragma unroll
    for (int c = tid; c < BM * kChunks; c += kGroupThreads) {
      const int r = c / kChunks, k = k0 + (c % kChunks) * 8;
      const bool in = r < t.rows && k < g.kdim;
      cp_async16(As + r * LD + (c % kChunks) * 8, in ? g.a + static_cast<std::size_t>(t.m0 + r) * g.kdim + k : g.a, in);
    }
#pragma unroll
    for (int b = 0; b < NB; ++b) {
      const __nv_bfloat16* w = b == 0 ? w0 : w1;
#pragma unroll
      for (int c = tid; c < BN * kChunks; c += kGroupThreads) {
        const int j = n0 + c / kChunks, k = k0 + (c % kChunks) * 8;
        const bool in = j < g.n && k < g.kdim;
        cp_async16(Bs + (b * BN + c / kChunks) * LD + (c % kChunks) * 8,
                   in ? w + static_cast<std::size_t>(j) * g.kdim + k : w, in);
      }
    }
  };
  const int warp = tid >> 5, wm = warp >> 1, wn = warp & 1;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[NB][FM][FN];
  zero_fragments(acc);
#pragma unroll
  for (int st = 0; st < ST - 1; ++st) {
    if (st < nk) load_stage(st, st * BK);
    cp_async_commit();
  }
  for (int kt = 0; kt < nk; ++kt) {
    cp_async_wait<ST - 2>();
    __syncthreads();  // stage kt is in; every warp is done with the stage about to be refilled
    if (kt + ST - 1 < nk) load_stage((kt + ST - 1) % ST, (kt + ST - 1) * BK);
    cp_async_commit();
    const __nv_bfloat16* As = sm + (kt % ST) * kStage;
    const __nv_bfloat16* Bs = As + BM * LD;
    mma_step<BK, LD, BN, WM, WN, FM, FN, NB>(acc, As, Bs, wm, wn);
  }
  cp_async_wait<0>();
  __syncthreads();  // the tiles' shared memory becomes the epilogue's
  grouped_epilogue<BM, BN, FM, FN, SWIGLU>(g, t, n0, acc, reinterpret_cast<float*>(smem_raw));
}

/// Values k0 .. k0 + 7 of row j of a packed expert weight as bf16 (dequantized as the GEMVs do, then
/// rounded, as the dense prefill's dequantization into bf16 rounds them).
template <int TYPE>
__device__ __forceinline__ uint4 load_bf16x8(const ExpertWeight<TYPE>& w, std::size_t j, std::size_t k0) {
  float f[8];
  w.load(j, k0, f);
  return pack_bf16x8(f);
}

/// The grouped product over packed experts: a tile of BM slots by 64 output columns over the reduction
/// in steps of 64; the next step's A rows and weight rows (dequantized to bf16) are loaded into
/// registers while the warps multiply the current ones from shared memory (WMMA 16x16x16 bf16, f32
/// accumulators, each warp a (BM / 2) x 32 quarter).
template <int TYPE, int BM, bool SWIGLU>
__global__ void __launch_bounds__(kGroupThreads) moe_grouped_kernel(GroupedProduct g) {
  namespace wmma = nvcuda::wmma;
  constexpr int BN = kGroupBN, BK = kGroupBK, LD = BK + 8, LDC = BN + 4, NB = SWIGLU ? 2 : 1;
  constexpr int WM = BM / 2, WN = BN / 2, FM = WM / 16, FN = WN / 16;
  constexpr int kChunks = BK / 8;                              // 8 values each, a row of a step
  constexpr int kAPer = BM * kChunks / kGroupThreads, kBPer = BN * kChunks / kGroupThreads;
  constexpr int kInBytes = (BM + NB * BN) * LD * 2, kOutBytes = BM * LDC * 4;
  __shared__ __align__(128) unsigned char smem[kInBytes > kOutBytes ? kInBytes : kOutBytes];
  auto* As = reinterpret_cast<__nv_bfloat16*>(smem);  // [BM][LD]
  auto* Bs = As + BM * LD;                             // [NB][BN][LD]
  GroupedTile t;
  if (!find_tile(g, BM, t)) return;
  const int n0 = blockIdx.x * BN;
  const auto w0 = expert<TYPE>(g.w0, g.q0, t.e, static_cast<std::size_t>(g.kdim));
  const auto w1 = expert<TYPE>(SWIGLU ? g.w1 : g.w0, SWIGLU ? g.q1 : g.q0, t.e, static_cast<std::size_t>(g.kdim));

  const int tid = threadIdx.x;
  uint4 ra[kAPer], rb[NB][kBPer];
  auto load_step = [&](int k0) {
#pragma unroll
    for (int i = 0; i < kAPer; ++i) {
      const int c = tid + i * kGroupThreads, r = c / kChunks, k = k0 + (c % kChunks) * 8;
      ra[i] = r < t.rows && k < g.kdim
                  ? __ldg(reinterpret_cast<const uint4*>(g.a + static_cast<std::size_t>(t.m0 + r) * g.kdim + k))
                  : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int i = 0; i < kBPer; ++i) {
      const int c = tid + i * kGroupThreads, j = n0 + c / kChunks, k = k0 + (c % kChunks) * 8;
      const bool in = j < g.n && k < g.kdim;
      rb[0][i] = in ? load_bf16x8<TYPE>(w0, j, k) : make_uint4(0, 0, 0, 0);
      if constexpr (SWIGLU) rb[1][i] = in ? load_bf16x8<TYPE>(w1, j, k) : make_uint4(0, 0, 0, 0);
    }
  };
  auto store_step = [&]() {
#pragma unroll
    for (int i = 0; i < kAPer; ++i) {
      const int c = tid + i * kGroupThreads;
      *reinterpret_cast<uint4*>(As + (c / kChunks) * LD + (c % kChunks) * 8) = ra[i];
    }
#pragma unroll
    for (int b = 0; b < NB; ++b)
#pragma unroll
      for (int i = 0; i < kBPer; ++i) {
        const int c = tid + i * kGroupThreads;
        *reinterpret_cast<uint4*>(Bs + (b * BN + c / kChunks) * LD + (c % kChunks) * 8) = rb[b][i];
      }
  };

  const int warp = tid >> 5, wm = warp >> 1, wn = warp & 1;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[NB][FM][FN];
  zero_fragments(acc);

  load_step(0);
  store_step();
  __syncthreads();
  for (int k0 = 0; k0 < g.kdim; k0 += BK) {
    const bool more = k0 + BK < g.kdim;
    if (more) load_step(k0 + BK);
    mma_step<BK, LD, BN, WM, WN, FM, FN, NB>(acc, As, Bs, wm, wn);
    __syncthreads();
    if (more) {
      store_step();
      __syncthreads();
    }
  }
  grouped_epilogue<BM, BN, FM, FN, SWIGLU>(g, t, n0, acc, reinterpret_cast<float*>(smem));
}

/// Both products of an expert set over the grouped slots: gate and up with the SwiGLU into act (bf16)
/// from xa, then down into ys.
template <int TYPE, int BM>
void moe_grouped_typed(const MoeGemvArgs& a, std::size_t n_experts, const __nv_bfloat16* xa, __nv_bfloat16* act,
                       float* ys, const std::int32_t* offset, const std::int32_t* tile_start, unsigned max_tiles,
                       cudaStream_t s) {
  GroupedProduct g;
  g.a = xa;
  g.w0 = a.gate;
  g.w1 = a.up;
  g.q0 = a.qgate;
  g.q1 = a.qup;
  g.n = static_cast<int>(a.inter);
  g.kdim = static_cast<int>(a.hidden);
  g.n_experts = static_cast<int>(n_experts);
  g.offset = offset;
  g.tile_start = tile_start;
  g.out_bf16 = act;
  const dim3 up_grid(ceil_div(a.inter, kGroupBN), max_tiles), down_grid(ceil_div(a.hidden, kGroupBN), max_tiles);
  if constexpr (TYPE == kBF16) {
    constexpr std::size_t up_smem = bf16_grouped_smem<BM, true>(), down_smem = bf16_grouped_smem<BM, false>();
    check(cudaFuncSetAttribute(moe_grouped_bf16_kernel<BM, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(up_smem)),
          "moe_grouped: shared memory");
    check(cudaFuncSetAttribute(moe_grouped_bf16_kernel<BM, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(down_smem)),
          "moe_grouped: shared memory");
    moe_grouped_bf16_kernel<BM, true><<<up_grid, kGroupThreads, up_smem, s>>>(g);
    check_launch("moe_grouped gate_up");
    g.a = act;
    g.w0 = g.w1 = a.down;
    g.n = static_cast<int>(a.hidden);
    g.kdim = static_cast<int>(a.inter);
    g.out = ys;
    moe_grouped_bf16_kernel<BM, false><<<down_grid, kGroupThreads, down_smem, s>>>(g);
    check_launch("moe_grouped down");
  } else {
    moe_grouped_kernel<TYPE, BM, true><<<up_grid, kGroupThreads, 0, s>>>(g);
    check_launch("moe_grouped gate_up");
    g.a = act;
    g.w0 = g.w1 = a.down;
    g.q0 = g.q1 = a.qdown;
    g.n = static_cast<int>(a.hidden);
    g.kdim = static_cast<int>(a.inter);
    g.out = ys;
    moe_grouped_kernel<TYPE, BM, false><<<down_grid, kGroupThreads, 0, s>>>(g);
    check_launch("moe_grouped down");
  }
}

/// Slots a tile takes: 32 while the pairs are few per expert (the weights are read once a tile either
/// way; a smaller tile multiplies fewer padding rows), 64 beyond.
std::size_t grouped_bm(std::size_t pairs, std::size_t n_experts) { return pairs <= 32 * n_experts ? 32 : 64; }

std::size_t grouped_max_tiles(std::size_t pairs, std::size_t n_experts) {
  return (pairs + grouped_bm(pairs, n_experts) - 1) / grouped_bm(pairs, n_experts) + std::min(pairs, n_experts);
}

}  // namespace

std::size_t moe_grouped_meta_ints(std::size_t pairs, std::size_t n_experts) { return 3 * n_experts + 2 + 2 * pairs; }

bool moe_grouped_supported(int type, std::size_t pairs, std::size_t n_experts) {
  return (type == kBF16 || quantized_type(type)) && pairs > 0 && pairs < (std::size_t{1} << 30) &&
         n_experts > 0 && n_experts <= kMaxMoeExperts && grouped_max_tiles(pairs, n_experts) <= 65535;
}

void launch_moe_grouped(const MoeGemvArgs& a, std::size_t n_experts, void* work, std::int32_t* meta, int type,
                        cudaStream_t s) {
  const std::size_t pairs = a.n_tokens * a.k;
  if (pairs == 0) return;
  if (!moe_grouped_supported(type, pairs, n_experts) || a.hidden % 8 != 0 || a.inter % 8 != 0)
    throw std::invalid_argument("moe_grouped: these experts or this many pairs are not supported");
  const std::size_t E = n_experts, bm = grouped_bm(pairs, E);
  std::int32_t* count = meta;
  std::int32_t* offset = count + E;
  std::int32_t* tile_start = offset + E + 1;
  std::int32_t* slot_of_pair = tile_start + E + 1;
  std::int32_t* token_of_slot = slot_of_pair + pairs;
  auto* xa = static_cast<__nv_bfloat16*>(work);   // [pairs, hidden]
  __nv_bfloat16* act = xa + pairs * a.hidden;      // [pairs, inter]
  auto* ys = reinterpret_cast<float*>(act + pairs * a.inter);  // [pairs, hidden]
  moe_align_kernel<<<1, kAlignThreads, 0, s>>>(a.ids, static_cast<int>(pairs), static_cast<int>(a.k),
                                               static_cast<int>(E), static_cast<int>(bm), count, offset, tile_start,
                                               slot_of_pair, token_of_slot);
  check_launch("moe_align");
  moe_gather_bf16_kernel<<<static_cast<unsigned>(pairs), 128, 0, s>>>(a.h, a.ldh, token_of_slot, a.hidden, xa);
  check_launch("moe_gather_bf16");
  const auto tiles = static_cast<unsigned>(grouped_max_tiles(pairs, E));
  auto run = [&](auto t) {
    constexpr int T = decltype(t)::value;
    if (bm == 32) moe_grouped_typed<T, 32>(a, E, xa, act, ys, offset, tile_start, tiles, s);
    else moe_grouped_typed<T, 64>(a, E, xa, act, ys, offset, tile_start, tiles, s);
  };
  if (type == kBF16) run(std::integral_constant<int, kBF16>{});
  else with_quant_type(type, "moe_grouped", run);
  launch_moe_combine(a.x, a.ldx, ys, a.hidden, slot_of_pair, a.weights, a.n_tokens, a.k, a.hidden, s);
}

std::size_t moe_grouped_work_floats(std::size_t pairs, std::size_t hidden, std::size_t inter) {
  return pairs * (hidden + inter) / 2 + pairs * hidden;
}

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
