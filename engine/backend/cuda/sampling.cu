// Backend::sample_rows on the device, two paths:
//  * rows that are greedy or of top-k <= kShortlist (the usual settings): blocks of kShortChunk ids keep
//    their chunk's k first candidates, then a block a row cuts top-p / min-p and draws over those alone
//    (two launches of many blocks);
//  * any other row: one block a row finds the kept set of the host sampler's filters by radix selection
//    over the candidates' order keys (top-k by count, top-p by fixed-point mass) over the whole row.
// Both after the radix top-k of Alabi et al., "Fast k-selection algorithms for graphics processing units"
// (2012), and both draw by the Gumbel-max trick over the kept ids (engine/backend/sampling.hpp): no sort,
// no cumulative sum over the vocabulary, and only the ids come back to the host.
#include "engine/backend/cuda/kernels.cuh"
#include "engine/backend/sampling.hpp"

namespace quarry::engine::cuda {

namespace {

constexpr int kSampleThreads = 1024;
constexpr int kSampleWarps = kSampleThreads / 32;
constexpr int kDigitBits = 8;
constexpr int kBins = 1 << kDigitBits;

/// Logits a thread loads before it uses the first of them: one block's pass over a whole row waited on
/// its loads (a call of temperature 1 over 151,936 ids: 141 -> 117 us on an H200 with 8 in flight).
constexpr int kInFlight = 8;

/// One row as the passes read it: logits at `r`, its bitmask (null: every id), 1 / temperature.
struct Row {
  const float* r;
  const std::uint32_t* mask;
  std::size_t n;
  float inv_t;
  /// Calls f(i, v, ok) for every id i of the row (and for the padding of the last round, with ok false):
  /// ok whether i is a candidate (allowed, not NaN), v its logit times inv_t. Every thread of the block
  /// makes the same number of calls, so f may use warp-wide operations.
  template <class F>
  __device__ __forceinline__ void scan(F&& f) const {
    for (std::size_t base = 0; base < n; base += static_cast<std::size_t>(kSampleThreads) * kInFlight) {
      float l[kInFlight];
      std::uint32_t bits[kInFlight];
#pragma unroll
      for (int j = 0; j < kInFlight; ++j) {
        const std::size_t i = base + static_cast<std::size_t>(j) * kSampleThreads + threadIdx.x;
        l[j] = i < n ? r[i] : __int_as_float(0x7fffffff);
        bits[j] = mask && i < n ? mask[i >> 5] : 0xffffffffu;
      }
#pragma unroll
      for (int j = 0; j < kInFlight; ++j) {
        const std::size_t i = base + static_cast<std::size_t>(j) * kSampleThreads + threadIdx.x;
        const bool ok = !isnan(l[j]) && ((bits[j] >> (i & 31)) & 1u);
        f(i, l[j] * inv_t, ok);
      }
    }
  }
};

/// The selection state every thread reads after a radix pass (shared memory).
struct Select {
  unsigned count[kBins];
  unsigned long long mass[kBins];
  unsigned long long remaining;  ///< what is still to be taken inside the chosen bin (ids or mass)
  unsigned digit;                ///< the chosen bin
  unsigned bin_count;            ///< candidates in the chosen bin
};

/// sampling::order_key as the type of the device's atomics and shuffles.
__device__ __forceinline__ unsigned long long key_of(float v, std::size_t i) {
  return sampling::order_key(v, static_cast<std::uint32_t>(i));
}

/// The id an order key was made for (its low word inverted).
__device__ __forceinline__ std::int32_t id_of(unsigned long long key) {
  return static_cast<std::int32_t>(0xffffffffu - static_cast<std::uint32_t>(key));
}

template <class T, class Op>
__device__ __forceinline__ T warp_reduce(T x, Op op) {
  for (int o = 16; o > 0; o >>= 1) x = op(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

/// The reduction of x over the block, returned to every thread. `scratch` holds kSampleWarps values.
template <class T, class Op>
__device__ __forceinline__ T block_reduce(T x, Op op, T* scratch) {
  x = warp_reduce(x, op);
  __syncthreads();  // the scratch may still be read by the last reduction
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = x;
  __syncthreads();
  return warp_reduce(scratch[threadIdx.x & 31], op);
}

struct MaxF {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct MaxU64 {
  __device__ unsigned long long operator()(unsigned long long a, unsigned long long b) const { return a > b ? a : b; }
};
struct AddU32 {
  __device__ unsigned operator()(unsigned a, unsigned b) const { return a + b; }
};

/// Adds a candidate to bin `bin` of the histogram (count 1, `mass`), the lanes of a warp with the same bin
/// first summed among themselves (one shared atomic a bin a warp: a row's candidates crowd a few bins).
/// Lanes without a candidate pass bin = -1. All 32 lanes of the warp must call it together.
__device__ __forceinline__ void histogram_add(Select& s, int bin, unsigned long long mass, bool by_mass) {
  if (!__any_sync(0xffffffffu, bin >= 0)) return;  // past the first pass most warps hold none
  const unsigned group = __match_any_sync(0xffffffffu, bin);
  if (bin < 0) return;
  const bool lead = static_cast<int>(threadIdx.x & 31) == __ffs(group) - 1;
  if (by_mass) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    // <= 2^40 + 1 each: two halves of 20 bits sum exactly in 32 bits over a warp.
    const unsigned lo = __reduce_add_sync(group, static_cast<unsigned>(mass & 0xfffffu));
    const unsigned hi = __reduce_add_sync(group, static_cast<unsigned>(mass >> 20));
    if (lead) atomicAdd(&s.mass[bin], (static_cast<unsigned long long>(hi) << 20) + lo);
#else
    atomicAdd(&s.mass[bin], mass);
#endif
  }
  if (lead) atomicAdd(&s.count[bin], static_cast<unsigned>(__popc(group)));
}

/// After a histogram pass: warp 0 walks the bins from the largest digit down and picks the one where what
/// was taken reaches s.remaining (counts, or masses when by_mass); s.remaining becomes what is left to
/// take inside it. Lane l holds bins 255 - 8 l .. 248 - 8 l.
/// With top_p < 1 (the first pass of a top-p cut, whose histogram holds every candidate) what it must take
/// is ceil(top_p * the histogram's total mass) instead of s.remaining.
__device__ __forceinline__ void pick_digit(Select& s, bool by_mass, float top_p) {
  if (threadIdx.x >= 32) return;
  const int lane = static_cast<int>(threadIdx.x);
  unsigned long long v[8], sum = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int bin = kBins - 1 - (lane * 8 + j);
    v[j] = by_mass ? s.mass[bin] : s.count[bin];
    sum += v[j];
  }
  unsigned long long incl = sum;  // inclusive scan over lanes
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned long long t = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += t;
  }
  const unsigned long long total = __shfl_sync(0xffffffffu, incl, 31);
  const unsigned long long want = top_p < 1.f ? sampling::top_p_target(top_p, total) : s.remaining;
  const unsigned hit = __ballot_sync(0xffffffffu, incl >= want);
  const int first = hit ? __ffs(hit) - 1 : 31;  // none: rounding cannot cause it; take the last bin
  if (lane != first) return;
  unsigned long long before = incl - sum;
  for (int j = 0; j < 8; ++j) {
    const int bin = kBins - 1 - (lane * 8 + j);
    if (before + v[j] >= want || j == 7) {
      s.digit = static_cast<unsigned>(bin);
      s.remaining = want > before ? want - before : 0;
      s.bin_count = s.count[bin];
      return;
    }
    before += v[j];
  }
}

/// MSB radix selection in digits of 8 bits: the threshold key tau such that the candidates with key >= tau
/// are the `want` first ones in the sampler's order (by count), or, with top_p < 1, the shortest prefix of
/// that order whose masses reach ceil(top_p * their total) (by mass; the total is the first pass's).
/// `histogram(prefix, fixed, shift)` is called by every thread of the block and adds each candidate whose
/// key & fixed == prefix to bin (key >> shift) & 255 through histogram_add. It stops once the chosen bin
/// must be taken whole (by count), or holds one candidate.
template <class Histogram>
__device__ unsigned long long radix_threshold(unsigned long long want, float top_p, Select& s, Histogram&& histogram) {
  const bool by_mass = top_p < 1.f;
  unsigned long long prefix = 0, fixed = 0;
  if (threadIdx.x == 0) s.remaining = want;
  for (int shift = 64 - kDigitBits; shift >= 0; shift -= kDigitBits) {
    for (int b = static_cast<int>(threadIdx.x); b < kBins; b += static_cast<int>(blockDim.x)) {
      s.count[b] = 0;
      s.mass[b] = 0;
    }
    __syncthreads();
    histogram(prefix, fixed, shift);
    __syncthreads();
    pick_digit(s, by_mass, shift == 64 - kDigitBits ? top_p : 1.f);
    __syncthreads();
    prefix |= static_cast<unsigned long long>(s.digit) << shift;
    fixed |= static_cast<unsigned long long>(kBins - 1) << shift;
    const bool whole = by_mass ? s.bin_count <= 1 : s.bin_count <= s.remaining;
    __syncthreads();  // every thread has read s before the next pass clears it
    if (whole) break;
  }
  return prefix;
}

/// radix_threshold over a whole row (one block a row), among the candidates with key >= lower.
__device__ unsigned long long select_threshold(const Row& row, float mx, unsigned long long lower,
                                               unsigned long long want, float top_p, Select& s) {
  const bool by_mass = top_p < 1.f;
  return radix_threshold(want, top_p, s, [&](unsigned long long prefix, unsigned long long fixed, int shift) {
    row.scan([&](std::size_t i, float v, bool ok) {
      int bin = -1;
      unsigned long long m = 0;
      if (ok) {
        const unsigned long long key = key_of(v, i);
        if (key >= lower && (key & fixed) == prefix) {
          bin = static_cast<int>((key >> shift) & (kBins - 1));
          if (by_mass) m = sampling::mass_at(v, mx);
        }
      }
      histogram_add(s, bin, m, by_mass);
    });
  });
}

__global__ void __launch_bounds__(kSampleThreads) sample_rows_kernel(const float* logits, std::size_t n, std::size_t ld,
                                                                     const std::uint32_t* masks, std::size_t mask_words,
                                                                     const RowSampling* params, std::int32_t* out) {
  pdl_enter();
  __shared__ Select s;
  __shared__ unsigned long long scratch_u64[kSampleWarps];
  __shared__ float scratch_f[kSampleWarps];
  __shared__ unsigned scratch_u32[kSampleWarps];
  __shared__ float scratch_best[kSampleWarps];
  const std::size_t r = blockIdx.x;
  const RowSampling p = params[r];
  const Row row{logits + r * ld, masks ? masks + r * mask_words : nullptr, n, p.temperature > 0.f ? 1.f / p.temperature : 1.f};

  if (p.temperature == 0.f) {  // argmax_rows's id
    unsigned long long best = 0;
    row.scan([&](std::size_t i, float v, bool ok) {
      if (ok) best = max(best, key_of(v, i));  // inv_t is 1 here
    });
    best = block_reduce(best, MaxU64{}, scratch_u64);
    if (threadIdx.x == 0)
      out[r] = best == 0 ? (masks ? -1 : 0) : id_of(best);
    return;
  }

  // Pass 1: the largest scaled logit and the number of candidates.
  float mx = -INFINITY;
  unsigned count = 0;
  unsigned long long first = 0;  // the first candidate in order (for a row whose max is infinite)
  row.scan([&](std::size_t i, float v, bool ok) {
    if (!ok) return;
    mx = fmaxf(mx, v);
    ++count;
    first = max(first, key_of(v, i));
  });
  mx = block_reduce(mx, MaxF{}, scratch_f);
  count = block_reduce(count, AddU32{}, scratch_u32);
  first = block_reduce(first, MaxU64{}, scratch_u64);
  if (count == 0 || !isfinite(mx)) {
    if (threadIdx.x == 0) out[r] = count == 0 ? -1 : id_of(first);
    return;
  }

  // top-k: the k first candidates in order are those with key >= tau_k.
  unsigned long long tau = 0;
  if (p.top_k > 0 && p.top_k < count) tau = select_threshold(row, mx, 0, p.top_k, 1.f, s);
  // top-p: the shortest prefix of what top-k kept whose fixed-point masses reach ceil(top_p * total).
  if (p.top_p < 1.f) tau = select_threshold(row, mx, tau, 0, p.top_p, s);
  // The draw: argmax of v + Gumbel noise over the kept candidates (min-p: exp(v - max) >= min_p), ties by
  // the smaller id.
  float best = -INFINITY;
  std::uint32_t best_id = 0xffffffffu;
  row.scan([&](std::size_t i, float v, bool ok) {
    const auto id = static_cast<std::uint32_t>(i);
    if (!ok || v - mx < -sampling::kGumbelReach || key_of(v, id) < tau) return;
    if (p.min_p > 0.f && !(sampling::weight(v, mx) >= p.min_p)) return;
    const float score = v + sampling::gumbel(p.key, id);
    if (score > best || (score == best && id < best_id)) {
      best = score;
      best_id = id;
    }
  });
  for (int o = 16; o > 0; o >>= 1) {
    const float ob = __shfl_xor_sync(0xffffffffu, best, o);
    const std::uint32_t oi = __shfl_xor_sync(0xffffffffu, best_id, o);
    if (ob > best || (ob == best && oi < best_id)) {
      best = ob;
      best_id = oi;
    }
  }
  if ((threadIdx.x & 31) == 0) {
    scratch_best[threadIdx.x >> 5] = best;
    scratch_u32[threadIdx.x >> 5] = best_id;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kSampleWarps; ++w)
      if (scratch_best[w] > best || (scratch_best[w] == best && scratch_u32[w] < best_id)) {
        best = scratch_best[w];
        best_id = scratch_u32[w];
      }
    out[r] = static_cast<std::int32_t>(best_id);
  }
}

// ---- the shortlist path: every row greedy or top-k with k <= kShortlist -------------------------------
//
// The kept set of a top-k row lies within its k first candidates, so the row is cut into chunks of
// kShortChunk ids, each chunk's block keeps its own k first (a radix selection over its keys in shared
// memory), and one block a row then holds at most chunks * k candidates: the top-k, top-p and min-p cuts
// and the draw run over those alone. A greedy row is top-1. Many blocks a row instead of one, two launches.

constexpr int kShortThreads = 256;
constexpr int kShortChunk = 4096;  ///< ids a block of the first pass holds in shared memory

/// The threshold tau such that exactly `want` of the nonzero keys[0, kShortChunk) are >= tau (keys are
/// distinct; want <= their number). Shared memory, digits of 8 bits from the top.
__device__ unsigned long long shared_kth(const unsigned long long* keys, unsigned want, Select& s) {
  return radix_threshold(want, 1.f, s, [&](unsigned long long prefix, unsigned long long fixed, int shift) {
    for (int e = static_cast<int>(threadIdx.x); e < kShortChunk; e += kShortThreads) {  // same trips for all
      const unsigned long long key = keys[e];
      histogram_add(s, key != 0 && (key & fixed) == prefix ? static_cast<int>((key >> shift) & (kBins - 1)) : -1, 0,
                    false);
    }
  });
}

/// The float an order key was made from (sampling::order_key's high word inverted).
__device__ __forceinline__ float value_of(unsigned long long key) {
  const auto o = static_cast<std::uint32_t>(key >> 32);
  return __uint_as_float((o & 0x80000000u) ? (o & 0x7fffffffu) : ~o);
}

/// Copies the min(k, their number) largest of the nonzero keys[0, kShortChunk) (distinct) to out[0, ..),
/// in no order; returns how many, and the number of nonzero keys in `candidates`. `taken`: shared scratch.
__device__ unsigned keep_largest(const unsigned long long* keys, unsigned k, unsigned long long* out,
                                 unsigned& candidates, unsigned& taken, Select& s) {
  unsigned count = 0;
  for (int e = static_cast<int>(threadIdx.x); e < kShortChunk; e += kShortThreads) count += keys[e] != 0 ? 1u : 0u;
  if (threadIdx.x == 0) taken = 0;
  __syncthreads();
  for (int o = 16; o > 0; o >>= 1) count += __shfl_xor_sync(0xffffffffu, count, o);
  if ((threadIdx.x & 31) == 0) atomicAdd(&taken, count);
  __syncthreads();
  candidates = taken;
  __syncthreads();
  if (threadIdx.x == 0) taken = 0;
  const unsigned want = min(k, candidates);
  const unsigned long long tau = want == 0 ? ~0ull : want == candidates ? 1ull : shared_kth(keys, want, s);
  __syncthreads();
  for (int e = static_cast<int>(threadIdx.x); e < kShortChunk; e += kShortThreads)
    if (keys[e] != 0 && keys[e] >= tau) out[atomicAdd(&taken, 1u)] = keys[e];
  __syncthreads();
  return want;
}

/// The k (top-k; 1 for a greedy row) first candidates of chunk blockIdx.x of row blockIdx.y as order keys
/// at shortlist[(row * chunks + chunk) * kShortlist ..], the unused slots 0.
__global__ void __launch_bounds__(kShortThreads) shortlist_kernel(const float* logits, std::size_t n, std::size_t ld,
                                                                  const std::uint32_t* masks, std::size_t mask_words,
                                                                  const RowSampling* params,
                                                                  unsigned long long* shortlist) {
  pdl_enter();
  __shared__ unsigned long long keys[kShortChunk];
  __shared__ Select s;
  __shared__ unsigned taken;
  const std::size_t r = blockIdx.y, chunk = blockIdx.x;
  const RowSampling p = params[r];
  const unsigned k = p.temperature == 0.f ? 1u : p.top_k;
  const float inv_t = p.temperature > 0.f ? 1.f / p.temperature : 1.f;
  const float* row = logits + r * ld;
  const std::uint32_t* mask = masks ? masks + r * mask_words : nullptr;
  for (int e = static_cast<int>(threadIdx.x); e < kShortChunk; e += kShortThreads) {
    const std::size_t i = chunk * kShortChunk + static_cast<std::size_t>(e);
    const float l = i < n ? row[i] : __int_as_float(0x7fffffff);
    const bool ok = !isnan(l) && (!mask || ((mask[i >> 5] >> (i & 31)) & 1u));
    keys[e] = ok ? key_of(l * inv_t, i) : 0;
  }
  __syncthreads();
  unsigned long long* out = shortlist + (r * gridDim.x + chunk) * kShortlist;
  unsigned candidates = 0;
  const unsigned kept = keep_largest(keys, k, out, candidates, taken, s);
  for (unsigned j = kept + threadIdx.x; j < kShortlist; j += kShortThreads) out[j] = 0;
}

/// Row blockIdx.x from its chunks' shortlists: the k first candidates in order, then the top-p and min-p
/// cuts over them and the Gumbel-max draw (the CPU reference's steps over the same values).
__global__ void __launch_bounds__(kShortThreads) shortlist_draw_kernel(const unsigned long long* shortlist,
                                                                       unsigned chunks, bool masked,
                                                                       const RowSampling* params, std::int32_t* out) {
  pdl_enter();
  __shared__ unsigned long long keys[kShortChunk];
  __shared__ unsigned long long top[kShortlist];
  __shared__ unsigned long long sorted[kShortlist];
  __shared__ Select s;
  __shared__ unsigned taken;
  const std::size_t r = blockIdx.x;
  const RowSampling p = params[r];
  const unsigned k = p.temperature == 0.f ? 1u : p.top_k;
  const unsigned long long* in = shortlist + r * chunks * kShortlist;
  for (unsigned e = threadIdx.x; e < static_cast<unsigned>(kShortChunk); e += kShortThreads)
    keys[e] = e < chunks * kShortlist ? in[e] : 0;
  __syncthreads();
  unsigned candidates = 0;
  const unsigned want = keep_largest(keys, k, top, candidates, taken, s);
  if (candidates == 0) {
    if (threadIdx.x == 0) out[r] = p.temperature == 0.f && !masked ? 0 : -1;
    return;
  }
  if (threadIdx.x < want) {  // the order: a candidate's rank is the number of larger keys
    unsigned rank = 0;
    for (unsigned j = 0; j < want; ++j) rank += top[j] > top[threadIdx.x] ? 1u : 0u;
    sorted[rank] = top[threadIdx.x];
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  const float mx = value_of(sorted[0]);
  if (p.temperature == 0.f || !isfinite(mx)) {
    out[r] = id_of(sorted[0]);
    return;
  }
  unsigned keep = want;
  if (p.top_p < 1.f) {
    unsigned long long total = 0, cum = 0;
    for (unsigned j = 0; j < keep; ++j) total += sampling::mass_at(value_of(sorted[j]), mx);
    const unsigned long long target = sampling::top_p_target(p.top_p, total);
    unsigned m = 0;
    while (m < keep && cum < target) cum += sampling::mass_at(value_of(sorted[m++]), mx);
    keep = max(m, 1u);
  }
  if (p.min_p > 0.f) {
    unsigned m = 1;
    while (m < keep && sampling::weight(value_of(sorted[m]), mx) >= p.min_p) ++m;
    keep = m;
  }
  float best = -INFINITY;
  std::int32_t best_id = id_of(sorted[0]);
  for (unsigned j = 0; j < keep; ++j) {
    const std::int32_t id = id_of(sorted[j]);
    const float score = value_of(sorted[j]) + sampling::gumbel(p.key, static_cast<std::uint32_t>(id));
    if (score > best || (score == best && id < best_id)) {
      best = score;
      best_id = id;
    }
  }
  out[r] = best_id;
}

}  // namespace

std::size_t sample_rows_workspace(std::size_t rows, std::size_t n) {
  const std::size_t chunks = std::max<std::size_t>(1, ceil_div(n, kShortChunk));
  return chunks * kShortlist > static_cast<std::size_t>(kShortChunk) ? 0 : rows * chunks * kShortlist;
}

void launch_sample_rows(const float* logits, std::size_t rows, std::size_t n, std::size_t ld,
                        const std::uint32_t* masks, std::size_t mask_words, const RowSampling* params,
                        bool shortlist, unsigned long long* workspace, std::int32_t* out, cudaStream_t s) {
  if (rows == 0) return;
  if (!shortlist) {
    launch_kernel("sample_rows", sample_rows_kernel, static_cast<unsigned>(rows), kSampleThreads, 0, s, logits, n, ld,
                  masks, mask_words, params, out);
    return;
  }
  const unsigned chunks = std::max(1u, ceil_div(n, kShortChunk));
  if (sample_rows_workspace(rows, n) == 0)
    throw std::invalid_argument("sample_rows: a shortlist of " + std::to_string(n) + " ids does not fit one block");
  launch_kernel("sample_rows", shortlist_kernel, dim3(chunks, static_cast<unsigned>(rows)), kShortThreads, 0, s, logits,
                n, ld, masks, mask_words, params, workspace);
  launch_kernel("sample_rows", shortlist_draw_kernel, static_cast<unsigned>(rows), kShortThreads, 0, s,
                static_cast<const unsigned long long*>(workspace), chunks, masks != nullptr, params, out);
}

}  // namespace quarry::engine::cuda
