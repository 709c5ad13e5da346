// quant_gemm() dispatcher: blocks of rows dequantized per thread (quant_<isa>.cpp), then the exact f32
// GEMM kernels of gemm.cpp on each block.
#include "engine/backend/cpu/quant.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <atomic>
#include <stdexcept>
#include <string>

#include "engine/backend/cpu/cpu_features.hpp"
#include "engine/backend/cpu/gemm_kernels.hpp"
#include "engine/backend/cpu/thread_pool.hpp"
#include "engine/core/dtype.hpp"

namespace quarry::engine::cpu {

QuantWeight make_quant_weight(const QuantizedMatrix& q) {
  q.validate();
  QuantWeight w;
  detail::QuantView& v = w.view;
  v.layout = q.layout == QuantLayout::gptq ? detail::QuantView::gptq : detail::QuantView::rows;
  v.element = q.element == QuantElement::int4   ? detail::QuantView::int4
              : q.element == QuantElement::int8 ? detail::QuantView::int8
                                                : detail::QuantView::fp8_e4m3;
  v.data = q.data;
  v.n = q.rows;
  v.k = q.cols;
  w.scales.assign(q.scales.begin(), q.scales.end());
  if (q.layout == QuantLayout::gptq) {
    w.zeros.assign(q.zeros.begin(), q.zeros.end());
    w.zeros.push_back(0);  // padding: a gather of the last zero point reads 4 bytes
    w.g_idx.assign(q.g_idx.begin(), q.g_idx.end());
    v.group_size = q.g_idx.empty() ? q.group_size : 0;
    v.n_groups = q.n_groups;
  } else {
    v.block_rows = q.block_rows;
    v.block_cols = q.block_cols ? q.block_cols : q.cols;
    v.scale_cols = (q.cols + v.block_cols - 1) / v.block_cols;
  }
  v.scales = w.scales.data();
  v.zeros = w.zeros.empty() ? nullptr : w.zeros.data();
  v.g_idx = w.g_idx.empty() ? nullptr : w.g_idx.data();
  w.bytes = q.bytes();
  return w;
}

GemmKernel quant_kernel_for(GemmKernel kernel) {
  switch (kernel) {
    case GemmKernel::scalar: return GemmKernel::scalar;
    case GemmKernel::avx2: return GemmKernel::avx2;
    default: return GemmKernel::avx512;
  }
}

void quant_dequant_rows(GemmKernel kernel, const QuantWeight& w, std::size_t j0, std::size_t j1, float* out) {
  const GemmKernel k = quant_kernel_for(kernel);
  if (!gemm_kernel_available(k))
    throw std::invalid_argument(std::string("quantized weights: kernel set ") + gemm_kernel_name(k) +
                                " is not available on this CPU");
  if (j0 > j1 || j1 > w.view.n) throw std::invalid_argument("quantized weights: rows outside the matrix");
  switch (k) {
#if defined(__x86_64__)
    case GemmKernel::avx2: return detail::dequant_rows_avx2(w.view, j0, j1, out);
    case GemmKernel::avx512: return detail::dequant_rows_avx512(w.view, j0, j1, out);
#endif
    default: return detail::dequant_rows_scalar(w.view, j0, j1, out);
  }
}

bool quant_uses_vnni(GemmKernel kernel, const QuantWeight& w, std::size_t m) {
#if defined(__x86_64__)
  static const bool vnni = detect_cpu_features().avx512_vnni;
  const detail::QuantView& v = w.view;
  if (!(w.bf16_compute && vnni && quant_kernel_for(kernel) == GemmKernel::avx512 &&
        gemm_kernel_available(GemmKernel::avx512) && m >= 1 && m <= 8))
    return false;
  if (v.layout == detail::QuantView::gptq)
    return v.element == detail::QuantView::int4 && !v.g_idx && v.group_size % 8 == 0 && v.k % 8 == 0;
  return v.element == detail::QuantView::int8 && v.k % 128 == 0 && v.block_cols % 128 == 0;
#else
  (void)kernel;
  (void)w;
  (void)m;
  return false;
#endif
}

bool quant_uses_bf16(GemmKernel kernel, const QuantWeight& w, std::size_t m) {
#if defined(__x86_64__)
  static const bool bf16 = detect_cpu_features().avx512_bf16;
  const detail::QuantView& v = w.view;
  return w.bf16_compute && bf16 && quant_kernel_for(kernel) == GemmKernel::avx512 &&
         gemm_kernel_available(GemmKernel::avx512) && m >= 1 && m <= 4 && v.layout == detail::QuantView::rows &&
         v.element == detail::QuantView::fp8_e4m3 && v.k % 32 == 0 && v.block_cols % 32 == 0;
#else
  (void)kernel;
  (void)w;
  (void)m;
  return false;
#endif
}

namespace {

/// x rounded to the nearest integer, ties to even, for |x| <= 2^22 (the activations here: |x / s| <= 127):
/// adding and subtracting 1.5 * 2^23 leaves the integer part in the mantissa (round to nearest even, the
/// default mode), what std::nearbyint returns, without its library call on the baseline instruction set
/// (f32 arithmetic on x86-64 rounds each operation: FLT_EVAL_METHOD 0, no reassociation without fast-math).
static_assert(FLT_EVAL_METHOD == 0, "round_even needs every f32 operation rounded to f32");
inline float round_even(float x) {
  constexpr float kShift = 12582912.f;  // 1.5 * 2^23
  const float t = x + kShift;
  return t - kShift;
}

/// One row of activations quantized per weight group for the VNNI kernel: xs[g] = absmax / 127 (1 for an
/// all-zero group), x_q = round(x / xs) (nearest even), xsum[g] = sum of x_q; x4 packs, for every 8
/// columns, the bytes of the even columns then of the odd ones (gptq4_vnni_avx512's order).
void quantize_activations(const float* x, std::size_t k, std::size_t gs, std::int32_t* x4, float* xs,
                          std::int32_t* xsum) {
  const std::size_t G = (k + gs - 1) / gs;
  std::fill(x4, x4 + k / 4, 0);
  std::fill(xs, xs + G, 1.f);
  std::fill(xsum, xsum + G, 0);
  for (std::size_t g = 0; g < G; ++g) {
    const std::size_t k0 = g * gs, k1 = std::min(k, k0 + gs);
    float amax = 0.f;
    for (std::size_t p = k0; p < k1; ++p) amax = std::max(amax, std::fabs(x[p]));
    const float s = amax > 0.f ? amax / 127.f : 1.f;
    xs[g] = s;
    for (std::size_t p = k0; p < k1; ++p) {
      const auto v = static_cast<std::int32_t>(std::clamp(round_even(x[p] / s), -127.f, 127.f));
      xsum[g] += v;
      const std::size_t word = 2 * (p / 8) + (p % 2), byte = (p % 8) / 2;
      x4[word] = static_cast<std::int32_t>(static_cast<std::uint32_t>(x4[word]) |
                                           (static_cast<std::uint32_t>(v & 0xff) << (8 * byte)));
    }
  }
}

/// fn(thread, r0, r1) over rows [0, n) in blocks of `rows`, each block taken by the first of the pool's
/// threads that is free (all on the caller without a pool or with one block).
template <class F>
void over_row_blocks(ThreadPool* pool, std::size_t n, std::size_t rows, F&& fn) {
  const std::size_t nt = pool ? pool->size() : 1, blocks = (n + rows - 1) / rows;
  std::atomic<std::size_t> next{0};
  const auto work = [&](std::size_t t, std::size_t) {
    for (;;) {
      const std::size_t b = next.fetch_add(1, std::memory_order_relaxed);
      if (b >= blocks) return;
      fn(t, b * rows, std::min(n, (b + 1) * rows));
    }
  };
  if (pool && nt > 1 && blocks > 1) pool->run(work);
  else work(0, 1);
}

}  // namespace

void quant_gemm(GemmKernel kernel, const float* x, std::size_t m, std::size_t ldx, const QuantWeight& w, std::size_t n,
                float* y, std::size_t ldy, ThreadPool* pool, QuantScratch& scratch) {
  const std::size_t K = w.view.k;
  if (n > w.view.n)
    throw std::invalid_argument("quant_gemm: " + std::to_string(n) + " rows of a weight with " +
                                std::to_string(w.view.n));
  if (ldx < K || ldy < n) throw std::invalid_argument("quant_gemm: a stride is smaller than its row");
  const GemmKernel k = quant_kernel_for(kernel);
  if (!gemm_kernel_available(k))
    throw std::invalid_argument(std::string("quant_gemm: kernel set ") + gemm_kernel_name(k) +
                                " is not available on this CPU");
  if (m == 0 || n == 0) return;
#if defined(__x86_64__)
  // Verify steps of speculative decoding (up to 8 rows) take the decode kernels in pieces whose rows sum
  // as a lone row does (the VNNI kernels: up to 8 rows; the FP8 kernels: up to 4), so that each row gets
  // the bits it gets alone in a decode step (lossless drafting under bf16 compute); the blocked GEMM below
  // sums in another order.
  const std::size_t piece = quant_uses_bf16(kernel, w, 1) ? 4 : quant_uses_vnni(kernel, w, 1) ? 8 : 0;
  if (piece && m > piece && m <= 8) {
    for (std::size_t i0 = 0; i0 < m; i0 += piece)
      quant_gemm(kernel, x + i0 * ldx, std::min(piece, m - i0), ldx, w, n, y + i0 * ldy, ldy, pool, scratch);
    return;
  }
  if (quant_uses_bf16(kernel, w, m)) {
    // FP8 rows: activations rounded to bf16 (nearest even), rows split over the threads; with VBMI 64
    // values a step, the activations stored in that kernel's interleaved order (quant_kernels.hpp).
    static const bool vbmi = detect_cpu_features().avx512_vbmi;
    const bool wide = vbmi && K % 64 == 0 && w.view.block_cols % 64 == 0;
    const auto position = [wide](std::size_t p) {
      const std::size_t r = p % 64, lane = r / 16, col = r % 16;
      return wide ? p - r + (col < 8 ? 8 * lane + col : 32 + 8 * lane + col - 8) : p;
    };
    scratch.xb.resize(m * K);
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t p = 0; p < K; ++p) scratch.xb[i * K + position(p)] = f32_to_bf16(x[i * ldx + p]);
    over_row_blocks(pool, n, 64, [&](std::size_t, std::size_t j0, std::size_t j1) {
      if (wide) detail::fp8_bf16_vbmi_avx512(w.view, scratch.xb.data(), m, j0, j1, y, ldy);
      else detail::fp8_bf16_avx512(w.view, scratch.xb.data(), m, j0, j1, y, ldy);
    });
    return;
  }
  if (quant_uses_vnni(kernel, w, m) && w.view.layout == detail::QuantView::rows) {
    // int8 rows: activations per 128 columns, then rows split over the threads.
    const std::size_t B = K / 128;
    scratch.xq.resize(m * K);
    scratch.xs.resize(m * B);
    scratch.xsum.resize(m * B);
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t b = 0; b < B; ++b) {
        const float* xb = x + i * ldx + b * 128;
        float amax = 0.f;
        for (std::size_t p = 0; p < 128; ++p) amax = std::max(amax, std::fabs(xb[p]));
        const float s = amax > 0.f ? amax / 127.f : 1.f;
        std::int32_t sum = 0;
        for (std::size_t p = 0; p < 128; ++p) {
          const auto v = static_cast<std::int8_t>(std::clamp(round_even(xb[p] / s), -127.f, 127.f));
          scratch.xq[i * K + b * 128 + p] = v;
          sum += v;
        }
        scratch.xs[i * B + b] = s;
        scratch.xsum[i * B + b] = sum;
      }
    over_row_blocks(pool, n, 64, [&](std::size_t, std::size_t j0, std::size_t j1) {
      detail::rows8_vnni_avx512(w.view, scratch.xq.data(), scratch.xs.data(), scratch.xsum.data(), m, j0, j1, y, ldy);
    });
    return;
  }
  if (quant_uses_vnni(kernel, w, m)) {
    // Each packed row of qweight is streamed kRows * 4 bytes at a time: blocks as large as 2048 rows
    // while every thread still gets about four. The m rows' activations go through the weights once.
    const std::size_t nt = pool ? pool->size() : 1;
    const std::size_t kRows = std::clamp<std::size_t>((n / (4 * nt) + 15) / 16 * 16, 256, 2048);
    const std::size_t G = w.view.n_groups, ld4 = K / 4;
    scratch.x4.resize(m * ld4);
    scratch.xs.resize(m * G);
    scratch.xsum.resize(m * G);
    for (std::size_t i = 0; i < m; ++i)
      quantize_activations(x + i * ldx, K, w.view.group_size, scratch.x4.data() + i * ld4, scratch.xs.data() + i * G,
                           scratch.xsum.data() + i * G);
    over_row_blocks(pool, n, kRows, [&](std::size_t, std::size_t j0, std::size_t j1) {
      detail::gptq4_vnni_avx512(w.view, scratch.x4.data(), ld4, scratch.xs.data(), scratch.xsum.data(), m, j0, j1,
                                y + j0, ldy);
    });
    return;
  }
#endif
  // bf16 compute, prefill-sized m: blocks of rows dequantized, rounded to bf16 and packed for
  // gemm_packed (AMX tiles or VDPBF16PS), as a bf16 checkpoint computes; vLLM's GPTQ / FP8 GEMMs likewise
  // dequantize to 16-bit in their prologue.
  if (w.bf16_compute && m > 16 && packed_bf16_available() && quant_kernel_for(kernel) == GemmKernel::avx512) {
#if defined(__x86_64__)
    constexpr std::size_t kRows = 128;
    const std::size_t nt = pool ? pool->size() : 1;
    if (scratch.per_thread.size() < nt) scratch.per_thread.resize(nt);
    if (scratch.packed.size() < nt) scratch.packed.resize(nt);
    // x rounded once for every block (not once a block: at m = 64 that was half as much work as the
    // block's dequantization).
    if (const std::size_t e = packed_x_elements(m, K); scratch.xpacked.size() < e) scratch.xpacked.resize(e);
    round_x_packed(x, m, K, ldx, scratch.xpacked.data());
    over_row_blocks(pool, n, kRows, [&](std::size_t t, std::size_t j0, std::size_t j1) {
      PackedBf16& pk = scratch.packed[t];
      const std::size_t rows = j1 - j0, chunks = (K + 31) / 32, whole = rows / 16 * 16;
      pk.n = rows;
      pk.k = K;
      pk.data.resize((rows + 15) / 16 * chunks * 512);  // every element is written below
      // Whole groups of 16 rows straight into the tiles where the layout allows (no f32 rows: at 4,096 x
      // 4,096 on one AVX-512 core 0.8-2.1 ms against 3.0-10.2 through them); the rest 16 rows at a time
      // through an f32 buffer that stays in the L2 beside the packed block.
      const std::size_t done = detail::dequant_pack_bf16_avx512(w.view, j0, j0 + whole, pk.data.data()) ? whole : 0;
      if (done < rows) {
        std::vector<float>& buf = scratch.per_thread[t];
        if (buf.size() < 16 * K) buf.resize(16 * K);
        for (std::size_t r0 = done; r0 < rows; r0 += 16) {
          const std::size_t r1 = std::min(rows, r0 + 16);
          quant_dequant_rows(k, w, j0 + r0, j0 + r1, buf.data());
          detail::amx_pack_b(buf.data(), WeightType::f32, r1 - r0, K, 0, 1, pk.data.data() + r0 / 16 * chunks * 512);
        }
      }
      gemm_packed_rounded(scratch.xpacked.data(), m, pk, rows, y + j0, ldy, nullptr);
    });
    return;
#endif
  }
  // Decode-sized m: 16 rows (16 x k f32, 256 KB at k = 4096) per block, read back from L2 by the GEMV
  // kernel; prefill: 128 rows, so the packing of x is amortised over more columns.
  const std::size_t rows = m <= 16 ? 16 : 128;
  const std::size_t nt = pool ? pool->size() : 1;
  if (scratch.per_thread.size() < nt) scratch.per_thread.resize(nt);
  over_row_blocks(pool, n, rows, [&](std::size_t t, std::size_t j0, std::size_t j1) {
#if defined(__x86_64__)
    if (k == GemmKernel::avx512 && detail::gemv_avx512(w.view, x, m, ldx, j0, j1, y, ldy)) return;
    if (k == GemmKernel::avx2 && detail::gemv_avx2(w.view, x, m, ldx, j0, j1, y, ldy)) return;
#endif
    std::vector<float>& buf = scratch.per_thread[t];
    if (buf.size() < rows * K) buf.resize(rows * K);
    quant_dequant_rows(k, w, j0, j1, buf.data());
    gemm(k, x, m, K, ldx, buf.data(), WeightType::f32, j1 - j0, y + j0, ldy, nullptr);
  });
}

void quant_gemm(const float* x, std::size_t m, std::size_t ldx, const QuantWeight& w, std::size_t n, float* y,
                std::size_t ldy, ThreadPool* pool, QuantScratch& scratch) {
  quant_gemm(gemm_default_kernel(), x, m, ldx, w, n, y, ldy, pool, scratch);
}

}  // namespace quarry::engine::cpu
