// gemm() dispatcher: argument checks, choice of kernel set (cpuid, once), the split of the columns of y
// between threads, and packing of x for the blocked path. The kernels live in gemm_<isa>.cpp.
#include "engine/backend/cpu/gemm.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_features.hpp"
#include "engine/backend/cpu/gemm_kernels.hpp"
#include "engine/backend/cpu/thread_pool.hpp"

namespace quarry::engine::cpu {
namespace detail {

void pack_x_panels(const float* x, std::size_t m, std::size_t k, std::size_t ldx, std::size_t mr,
                   std::size_t q0, std::size_t q1, float* xp) {
  for (std::size_t q = q0; q < q1; ++q) {
    float* panel = xp + q * k * mr;
    const std::size_t r0 = q * mr, rows = std::min(mr, m - r0);
    for (std::size_t r = 0; r < rows; ++r) {
      const float* src = x + (r0 + r) * ldx;
      for (std::size_t p = 0; p < k; ++p) panel[p * mr + r] = src[p];
    }
    for (std::size_t r = rows; r < mr; ++r)
      for (std::size_t p = 0; p < k; ++p) panel[p * mr + r] = 0.f;
  }
}

}  // namespace detail

namespace {

struct AlignedFree {
  void operator()(float* p) const { ::operator delete[](p, std::align_val_t(64)); }
};
using AlignedBuffer = std::unique_ptr<float[], AlignedFree>;

AlignedBuffer aligned_floats(std::size_t count) {
  return AlignedBuffer(static_cast<float*>(::operator new[](count * sizeof(float), std::align_val_t(64))));
}

const detail::GemmKernels* kernels_for(GemmKernel kernel) {
  switch (kernel) {
    case GemmKernel::scalar: return &detail::kernels_scalar();
#if defined(__x86_64__)
    case GemmKernel::avx2: return &detail::kernels_avx2();
    case GemmKernel::avx512: return &detail::kernels_avx512();
    case GemmKernel::amx: return &detail::kernels_amx();
    case GemmKernel::bf16: return &detail::kernels_bf16();
#else
    default: return nullptr;
#endif
  }
  return nullptr;
}

GemmKernel detect_default() {
  // QUARRY_CPU_KERNELS=scalar|avx2|avx512|amx|bf16 picks a set (to test a path on a wider CPU, or to
  // compute in bf16); a set the CPU cannot run is ignored.
  if (const char* want = std::getenv("QUARRY_CPU_KERNELS")) {
    for (GemmKernel k : {GemmKernel::scalar, GemmKernel::avx2, GemmKernel::avx512, GemmKernel::amx, GemmKernel::bf16})
      if (std::strcmp(want, gemm_kernel_name(k)) == 0 && gemm_kernel_available(k)) return k;
  }
  for (GemmKernel k : {GemmKernel::avx512, GemmKernel::avx2})
    if (gemm_kernel_available(k)) return k;
  return GemmKernel::scalar;
}

// Columns are handed out in chunks claimed through an atomic counter, about kChunksPerThread per
// thread (each a multiple of `align` and at least `min_cols`): a thread that is descheduled
// mid-call (a machine with other load) delays only its current chunk, the others take the rest.
constexpr std::size_t kChunksPerThread = 4;

std::size_t chunk_columns(std::size_t n, std::size_t nt, std::size_t align, std::size_t min_cols) {
  const std::size_t want = (n + nt * kChunksPerThread - 1) / (nt * kChunksPerThread);
  const std::size_t cols = std::max(want, min_cols);
  return (cols + align - 1) / align * align;
}

template <class F>
void for_each_chunk(std::atomic<std::size_t>& next, std::size_t n, std::size_t chunk, const F& f) {
  for (;;) {
    const std::size_t j0 = next.fetch_add(1, std::memory_order_relaxed) * chunk;
    if (j0 >= n) return;
    f(j0, std::min(n, j0 + chunk));
  }
}

void run_gemm(const detail::GemmKernels& kern, const float* x, std::size_t m, std::size_t k, std::size_t ldx,
              const void* w, WeightType wtype, std::size_t n, float* y, std::size_t ldy, ThreadPool* pool,
              bool accumulate) {
  if (ldx < k) throw std::invalid_argument("gemm: ldx (" + std::to_string(ldx) + ") < k (" + std::to_string(k) + ")");
  if (ldy < n) throw std::invalid_argument("gemm: ldy (" + std::to_string(ldy) + ") < n (" + std::to_string(n) + ")");
  if (m == 0 || n == 0) return;
  if (!y) throw std::invalid_argument("gemm: y is null");
  if (k == 0) {
    if (!accumulate)
      for (std::size_t i = 0; i < m; ++i) std::fill(y + i * ldy, y + i * ldy + n, 0.f);
    return;
  }
  if (!x || !w) throw std::invalid_argument("gemm: x or w is null");
  const std::size_t nt = pool ? pool->size() : 1;

  if (m <= kern.small_m_max || !kern.gemm_block) {
    if (nt == 1) {
      kern.gemv(x, m, k, ldx, w, wtype, 0, n, y, ldy, accumulate);
      return;
    }
    const std::size_t chunk = chunk_columns(n, nt, kern.n_align, 64);
    std::atomic<std::size_t> next{0};
    pool->run([&](std::size_t, std::size_t) {
      for_each_chunk(next, n, chunk, [&](std::size_t j0, std::size_t j1) {
        kern.gemv(x, m, k, ldx, w, wtype, j0, j1, y, ldy, accumulate);
      });
    });
    return;
  }

  const std::size_t panels = (m + kern.mr - 1) / kern.mr;
  AlignedBuffer xp = aligned_floats(panels * kern.mr * (k + 32));
  auto pack = [&](std::size_t t, std::size_t tn) {
    const std::size_t q0 = panels * t / tn, q1 = panels * (t + 1) / tn;
    if (kern.pack_x) kern.pack_x(x, m, k, ldx, q0, q1, xp.get());
    else detail::pack_x_panels(x, m, k, ldx, kern.mr, q0, q1, xp.get());
  };
  const std::size_t chunk = nt == 1 ? n : chunk_columns(n, nt, kern.nr, 128);
  std::atomic<std::size_t> next{0};
  auto part = [&](std::size_t, std::size_t) {
    AlignedBuffer scratch;
    for_each_chunk(next, n, chunk, [&](std::size_t j0, std::size_t j1) {
      if (!scratch) scratch = aligned_floats(kern.scratch_floats + kern.scratch_floats_per_k * k);
      kern.gemm_block(xp.get(), m, k, w, wtype, j0, j1, y, ldy, accumulate, scratch.get());
    });
  };
  if (nt > 1) {
    pool->run(pack);
    pool->run(part);
  } else {
    pack(0, 1);
    part(0, 1);
  }
}

}  // namespace

const char* gemm_kernel_name(GemmKernel kernel) {
  switch (kernel) {
    case GemmKernel::scalar: return "scalar";
    case GemmKernel::avx2: return "avx2";
    case GemmKernel::avx512: return "avx512";
    case GemmKernel::amx: return "amx";
    case GemmKernel::bf16: return "bf16";
  }
  return "unknown";
}

namespace {

struct Availability {
  bool avx2 = false, avx512 = false, amx = false, bf16 = false;
  bool avx512_bf16 = false;  ///< VDPBF16PS: the packed bf16 products without AMX
};

Availability detect_availability() {
  Availability a;
#if defined(__x86_64__)
  const CpuFeatures f = detect_cpu_features();
  a.avx2 = f.avx2;
  a.avx512 = f.avx512;
  a.amx = f.avx512 && f.avx512_bf16 && f.amx_bf16 && amx_tile_permission();
  a.bf16 = a.amx;
  a.avx512_bf16 = f.avx512 && f.avx512_bf16;
#endif
  return a;
}

const Availability& availability() {
  static const Availability a = detect_availability();  // cpuid (a VM exit) and arch_prctl once
  return a;
}

}  // namespace

bool gemm_kernel_available(GemmKernel kernel) {
  const Availability& a = availability();
  switch (kernel) {
    case GemmKernel::scalar: return true;
    case GemmKernel::avx2: return a.avx2;
    case GemmKernel::avx512: return a.avx512;
    case GemmKernel::amx: return a.amx;
    case GemmKernel::bf16: return a.bf16;
  }
  return false;
}

GemmKernel gemm_default_kernel() {
  static const GemmKernel kernel = detect_default();  // immutable after the first call
  return kernel;
}

const char* gemm_kernel_name() { return gemm_kernel_name(gemm_default_kernel()); }

void gemm(GemmKernel kernel, const float* x, std::size_t m, std::size_t k, std::size_t ldx, const void* w,
          WeightType wtype, std::size_t n, float* y, std::size_t ldy, ThreadPool* pool, bool accumulate) {
  if (!gemm_kernel_available(kernel))
    throw std::invalid_argument(std::string("gemm: kernel set ") + gemm_kernel_name(kernel) +
                                " is not available on this CPU or build");
  run_gemm(*kernels_for(kernel), x, m, k, ldx, w, wtype, n, y, ldy, pool, accumulate);
}

void gemm(const float* x, std::size_t m, std::size_t k, std::size_t ldx, const void* w, WeightType wtype,
          std::size_t n, float* y, std::size_t ldy, ThreadPool* pool, bool accumulate) {
  run_gemm(*kernels_for(gemm_default_kernel()), x, m, k, ldx, w, wtype, n, y, ldy, pool, accumulate);
}

namespace {

constexpr std::size_t kGroupsPerChunk = 4;  // column groups of 16 handed out together (one AMX block)

/// Groups of 16 columns, in chunks of kGroupsPerChunk, about kChunksPerThread chunks per thread.
template <class F>
void for_each_group_range(std::size_t groups, ThreadPool* pool, const F& f) {
  const std::size_t nt = pool ? pool->size() : 1;
  if (nt == 1 || groups <= kGroupsPerChunk) {
    f(std::size_t{0}, groups);
    return;
  }
  const std::size_t chunk = chunk_columns(groups, nt, kGroupsPerChunk, kGroupsPerChunk);
  std::atomic<std::size_t> next{0};
  pool->run([&](std::size_t, std::size_t) { for_each_chunk(next, groups, chunk, f); });
}

}  // namespace

bool packed_bf16_available() { return availability().amx || availability().avx512_bf16; }

const char* packed_bf16_kernel_name() {
  return availability().amx ? "amx" : availability().avx512_bf16 ? "avx512_bf16" : "none";
}

PackedBf16 pack_bf16(const void* w, WeightType wtype, std::size_t n, std::size_t k, ThreadPool* pool) {
  if (!packed_bf16_available())
    throw std::invalid_argument("pack_bf16: this CPU (or build) has neither AMX-BF16 nor AVX512_BF16");
  if (!w && n * k > 0) throw std::invalid_argument("pack_bf16: w is null");
  PackedBf16 p;
  p.n = n;
  p.k = k;
  const std::size_t groups = (n + 15) / 16, chunks = (k + 31) / 32;
  p.data.assign(groups * chunks * 512, 0);
#if defined(__x86_64__)
  for_each_group_range(groups, pool, [&](std::size_t g0, std::size_t g1) {
    detail::amx_pack_b(w, wtype, n, k, g0, g1, p.data.data());
  });
#endif
  return p;
}

namespace {

// The checks of the packed products (`what` names the caller; ldx = w.k where x comes rounded): throws
// std::invalid_argument on n > w.n, ldx < w.k, ldy < n, null x or y with m, n > 0, or no packed kernel
// here; false when m or n is 0 (nothing to run).
bool packed_args_ok(const char* what, const void* x, std::size_t m, std::size_t ldx, const PackedBf16& w,
                    std::size_t n, const float* y, std::size_t ldy) {
  const std::size_t k = w.k;
  const std::string name(what);
  if (n > w.n) throw std::invalid_argument(name + ": n (" + std::to_string(n) + ") > packed rows (" + std::to_string(w.n) + ")");
  if (ldx < k) throw std::invalid_argument(name + ": ldx (" + std::to_string(ldx) + ") < k (" + std::to_string(k) + ")");
  if (ldy < n) throw std::invalid_argument(name + ": ldy (" + std::to_string(ldy) + ") < n (" + std::to_string(n) + ")");
  if (m == 0 || n == 0) return false;
  if (!x || !y) throw std::invalid_argument(name + ": x or y is null");
  if (!packed_bf16_available())
    throw std::invalid_argument(name + ": this CPU (or build) has neither AMX-BF16 nor AVX512_BF16");
  return true;
}

// packed_args_ok, then run(xb) with x rounded to bf16 (amx_round_x): on the stack for decode-sized
// products, else on the heap (never zeroed: amx_round_x writes every element). Nothing runs when m or n
// is 0.
template <class F>
void with_rounded_x(const char* what, const float* x, std::size_t m, std::size_t ldx, const PackedBf16& w,
                    std::size_t n, const float* y, std::size_t ldy, const F& run) {
  if (!packed_args_ok(what, x, m, ldx, w, n, y, ldy)) return;
  const std::size_t k = w.k;
#if defined(__x86_64__)
  const std::size_t elems = packed_x_elements(m, k);
  constexpr std::size_t kStackElems = 16 * 1024;
  alignas(64) std::uint16_t stack_xb[kStackElems];
  std::unique_ptr<std::uint16_t[]> heap_xb;
  std::uint16_t* xb = stack_xb;
  if (elems > kStackElems) {
    heap_xb.reset(new std::uint16_t[elems]);
    xb = heap_xb.get();
  }
  detail::amx_round_x(x, m, k, ldx, xb);
  run(static_cast<const std::uint16_t*>(xb));
#else
  (void)run;
#endif
}

/// The packed product's columns over `pool` from x rounded to bf16 (xb, rows of k rounded up to 32).
void packed_product(const std::uint16_t* xb, std::size_t m, const PackedBf16& w, std::size_t n, float* y,
                    std::size_t ldy, ThreadPool* pool, bool accumulate) {
#if defined(__x86_64__)
  const auto kernel = availability().amx ? &detail::amx_packed_gemm : &detail::dpbf16_packed_gemm;
  for_each_group_range((n + 15) / 16, pool, [&](std::size_t g0, std::size_t g1) {
    kernel(xb, m, w.k, w.data.data(), n, g0, g1, y, ldy, accumulate);
  });
#else
  (void)xb, (void)m, (void)w, (void)n, (void)y, (void)ldy, (void)pool, (void)accumulate;
#endif
}
}  // namespace

void gemm_packed(const float* x, std::size_t m, std::size_t ldx, const PackedBf16& w, std::size_t n, float* y,
                 std::size_t ldy, ThreadPool* pool, bool accumulate) {
  with_rounded_x("gemm_packed", x, m, ldx, w, n, y, ldy, [&](const std::uint16_t* xb) {
    packed_product(xb, m, w, n, y, ldy, pool, accumulate);
  });
}

std::size_t packed_x_elements(std::size_t m, std::size_t k) { return m * ((k + 31) / 32 * 32); }

void round_x_packed(const float* x, std::size_t m, std::size_t k, std::size_t ldx, std::uint16_t* xb) {
  if (!packed_bf16_available())
    throw std::invalid_argument("round_x_packed: this CPU (or build) has neither AMX-BF16 nor AVX512_BF16");
  if (m == 0 || k == 0) return;
  if (!x || !xb) throw std::invalid_argument("round_x_packed: x or xb is null");
  if (ldx < k) throw std::invalid_argument("round_x_packed: ldx (" + std::to_string(ldx) + ") < k (" + std::to_string(k) + ")");
#if defined(__x86_64__)
  detail::amx_round_x(x, m, k, ldx, xb);
#endif
}

void gemm_packed_rounded(const std::uint16_t* xb, std::size_t m, const PackedBf16& w, std::size_t n, float* y,
                         std::size_t ldy, ThreadPool* pool, bool accumulate) {
  if (packed_args_ok("gemm_packed_rounded", xb, m, w.k, w, n, y, ldy)) packed_product(xb, m, w, n, y, ldy, pool, accumulate);
}

void gemm_packed_groups(const float* x, std::size_t m, std::size_t ldx, const PackedBf16& w, std::size_t n,
                        std::span<const std::uint32_t> groups, float* y, std::size_t ldy, ThreadPool* pool) {
  const std::size_t n_groups = (n + 15) / 16;
  for (std::size_t i = 0; i < groups.size(); ++i)
    if (groups[i] >= n_groups || (i > 0 && groups[i] <= groups[i - 1]))
      throw std::invalid_argument("gemm_packed_groups: group " + std::to_string(groups[i]) +
                                  " out of range or out of order (" + std::to_string(n_groups) + " groups)");
  if (groups.empty()) return;
  with_rounded_x("gemm_packed_groups", x, m, ldx, w, n, y, ldy, [&](const std::uint16_t* xb) {
#if defined(__x86_64__)
    // Runs of consecutive groups, handed out over the pool by position in the list.
    const auto kernel = availability().amx ? &detail::amx_packed_gemm : &detail::dpbf16_packed_gemm;
    auto run = [&](std::size_t i0, std::size_t i1) {
      for (std::size_t i = i0; i < i1;) {
        std::size_t j = i + 1;
        while (j < i1 && groups[j] == groups[j - 1] + 1) ++j;
        kernel(xb, m, w.k, w.data.data(), n, groups[i], groups[j - 1] + 1, y, ldy, false);
        i = j;
      }
    };
    const std::size_t nt = pool ? pool->size() : 1;
    if (nt == 1 || groups.size() <= kGroupsPerChunk) {
      run(0, groups.size());
    } else {
      std::atomic<std::size_t> next{0};
      pool->run([&](std::size_t, std::size_t) { for_each_chunk(next, groups.size(), kGroupsPerChunk, run); });
    }
#else
    (void)xb, (void)pool;
#endif
  });
}

}  // namespace quarry::engine::cpu
