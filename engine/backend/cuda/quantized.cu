// Kernels that read quantized weights at the memory's speed on the CUDA backend: the GEMV of decode and
// verify steps (m <= 8 rows of x) and the dequantization of rows (prefill's products, embedding rows).
//
// Decode reads every weight once per step, so its speed is the rate at which the weights stream in. A
// quantized weight moves 2x (8-bit) or 4x (4-bit) fewer bytes than bf16, but only if turning the bytes
// into products costs less than waiting for them: at an H100's 3 TB/s an int4 GEMV must finish 6e12
// values a second, about 3 instructions per value on the whole chip. So:
//  - each warp computes R output rows; a lane loads 16 bytes of each row per step (16 values of 8 bits
//    or 32 of 4 bits) and the activations of those columns once (rounded under bf16 compute) for all R
//    rows;
//  - values become floats by bit placement, not conversion instructions: an 8-bit integer as the f32
//    2^23 + byte (one byte permute, one subtraction); a nibble n as the f32 1 + n / 16 (a shift and one
//    three-input logic op; the sums of x that undo the offset are per load, shared by the R rows); FP8
//    E4M3 pairs by the f16x2 conversion instruction (Ada, Hopper and later), before those as the f32
//    whose sign, exponent and mantissa bits are the byte's, which is the value times 2^-120, subnormals
//    included (f32 subnormals, which the FMA takes at full rate unless the build flushes them: do not
//    build this file with --use_fast_math / -ftz=true);
//  - a 16-byte load lies inside one scale block or group (gemv_quant_supported), so the scale (and GPTQ's
//    zero point) is applied once per load, not per value;
//  - under bf16 compute, integer weights (int8, int4, GPTQ) meet int8 activations: each thread block
//    quantizes the activations once into shared memory (per 16 columns, absmax / 127, as llama.cpp's
//    q8_1 blocks and the CPU's VNNI kernels do per group) and the warps sum with dp4a, about one
//    instruction per weight value; FP8 under bf16 compute goes through the tensor cores (mma.sync with
//    f16 inputs, gemv_fp8_mma_kernel below); exact compute keeps f32 products.
// On devices before Ada (no FP8 conversion instruction) FP8's NaN codes (S.1111.111) read as +-480, where
// the CPU's kernels give NaN: a checkpoint holds no NaN weights.
// The summation order of an output row (the lane's loads in column order, the values of a load in order,
// then the warp's shuffle tree) does not depend on R, m or the mode, so a row's value has the same bits
// in a decode step and in a verify step of several rows (lossless speculative decoding). The technique
// follows the fast dequantizing GEMV kernels of the field (FasterTransformer's and Marlin's bit-placement
// conversions; llama.cpp's per-block scales).
#include <algorithm>
#include <cstdlib>

#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/kernels.cuh"

namespace quarry::engine::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

/// Values per 16-byte load.
template <int QT>
constexpr int kVals = (QT == kQ4 || QT == kG4) ? 32 : 16;

/// Bytes of weight data per value, times 2 (4-bit: 1, 8-bit: 2).
template <int QT>
constexpr int kHalfBytes = (QT == kQ4 || QT == kG4) ? 1 : 2;

template <int QT>
constexpr bool kGptq = QT == kG4 || QT == kG8;

// FP8 E4M3 to f16 pairs in one instruction where the device has it (Ada, Hopper and later); elsewhere the
// bit placement below (the value times 2^-120).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define QUARRY_FP8_CVT 1
#else
#define QUARRY_FP8_CVT 0
#endif
/// The factor by which x is scaled before the products with FP8 values taken as value * 2^-120 (bit
/// placement), and the one restoring the sum (2^64 * 2^56 = 2^120): the products stay clear of f32's
/// subnormal range. 1 where the conversion instruction gives the values themselves.
constexpr float kFp8XScale = QUARRY_FP8_CVT ? 1.f : 0x1p64f, kFp8SumScale = QUARRY_FP8_CVT ? 1.f : 0x1p56f;
/// decode()'s FP8 unit: value * kFp8Unit.
constexpr float kFp8Unit = QUARRY_FP8_CVT ? 1.f : 0x1p-120f;

/// Values h * 16 .. h * 16 + 15 of one 16-byte load (h < kVals<QT> / 16) in the type's own units u (exact;
/// see value()): kQ8: the signed value; kG8: the unsigned one; kFP8: value * kFp8Unit; kQ4 / kG4: 1 + n / 16
/// for the stored nibble n.
template <int QT>
__device__ __forceinline__ void decode(const uint4& raw, int h, float (&u)[16]) {
  const std::uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
  if constexpr (QT == kQ8 || QT == kG8) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      // byte b -> bits 0x4B0000bb = 2^23 + b (for signed values b ^ 0x80 = v + 128)
      const std::uint32_t x = QT == kQ8 ? w[j] ^ 0x80808080u : w[j];
      constexpr float bias = QT == kQ8 ? 8388736.f : 8388608.f;
#pragma unroll
      for (int i = 0; i < 4; ++i) u[4 * j + i] = __uint_as_float(__byte_perm(x, 0x4B000000u, 0x7540u | i)) - bias;
    }
  } else if constexpr (QT == kFP8) {
#if QUARRY_FP8_CVT
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int p = 0; p < 2; ++p) {  // bytes 2p, 2p + 1 -> an f16 pair (exact: E4M3 is inside f16), then f32
        std::uint32_t h2;
        const unsigned short pair = static_cast<unsigned short>(w[j] >> (16 * p));
        asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(pair));
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h2));
        u[4 * j + 2 * p] = f.x;
        u[4 * j + 2 * p + 1] = f.y;
      }
#else
#pragma unroll
    for (int j = 0; j < 4; ++j)
      // byte b at bits 24..31, arithmetic shift by 4: sign at 31 (and 27..30), exponent at 23..26,
      // mantissa at 20..22; the mask keeps sign, exponent and mantissa.
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const std::uint32_t p = i == 3 ? w[j] : __byte_perm(w[j], 0u, 0x0444u | (i << 12));
        u[4 * j + i] = __uint_as_float(static_cast<std::uint32_t>(static_cast<std::int32_t>(p) >> 4) & 0x87F00000u);
      }
#endif
  } else {  // nibble i (bits 4i .. 4i + 3) to mantissa bits 19 .. 22 under the exponent of 1.0
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const std::uint32_t word = w[2 * h + j];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const std::uint32_t t = i <= 4 ? word << (19 - 4 * i) : word >> (4 * i - 19);
        u[8 * j + i] = __uint_as_float((t & 0x00780000u) | 0x3F800000u);
      }
    }
  }
}

/// The weight value of u (decode's units) with its scale and zero point, as the CPU dequantizes it: the
/// integer (or FP8 value) exactly, times the scale rounded once.
template <int QT>
__device__ __forceinline__ float value(float u, float scale, float zero) {
  if constexpr (QT == kQ8) return u * scale;
  else if constexpr (QT == kFP8) return (u * (1.f / kFp8Unit)) * scale;
  else if constexpr (QT == kQ4) return fmaf(u, 16.f, -24.f) * scale;
  else if constexpr (QT == kG4) return (fmaf(u, 16.f, -16.f) - zero) * scale;
  else return (u - zero) * scale;
}

/// The load's contribution before its scale, sum x * (value / scale), from d (the sum of x * u over the
/// load, u in decode's units), the sum of x over the load's columns (xs) and the zero point (GPTQ).
template <int QT>
__device__ __forceinline__ float finish(float d, float xs, float zero) {
  if constexpr (QT == kQ8 || QT == kFP8) return d;
  else if constexpr (QT == kQ4) return fmaf(16.f, d, -24.f * xs);  // n - 8 = 16 (1 + n/16) - 24
  else if constexpr (QT == kG4) return fmaf(16.f, d, -(16.f + zero) * xs);  // q - z = 16 (1 + q/16) - 16 - z
  else return fmaf(-zero, xs, d);
}

/// Sum of the products of 4 unsigned bytes (a) and 4 signed bytes (b), plus c (PTX dp4a.u32.s32).
__device__ __forceinline__ int dp4a_us(std::uint32_t a, int b, int c) {
  int d;
  asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

/// The low bytes of four floats, packed in order: the int8 values fmaf(x, inv, 1.5 * 2^23) holds.
__device__ __forceinline__ int pack4(float a, float b, float c, float d) {
  const std::uint32_t lo = __byte_perm(__float_as_uint(a), __float_as_uint(b), 0x0040u);
  const std::uint32_t hi = __byte_perm(__float_as_uint(c), __float_as_uint(d), 0x0040u);
  return static_cast<int>(__byte_perm(lo, hi, 0x5410u));
}

/// 16 activations quantized to int8 (bf16 compute, integer weights): q = round(x * 127 / max|x|), packed
/// four to a word in column order (8-bit weights) or, for 4-bit weights, as each weight word's low and high
/// nibbles take them (word j: columns 8j, 8j+2, 8j+4, 8j+6, then 8j+1, 8j+3, 8j+5, 8j+7); scale = max|x| /
/// 127 and qsum = the sum of q.
template <int QT>
__device__ __forceinline__ void quantize16(const float (&xv)[16], int (&xq)[4], float& scale, int& qsum) {
  float amax = 0.f;
#pragma unroll
  for (int c = 0; c < 16; ++c) amax = fmaxf(amax, fabsf(xv[c]));
  const float inv = amax > 0.f ? 127.f / amax : 0.f;
  scale = amax / 127.f;
  float q[16];
#pragma unroll
  for (int c = 0; c < 16; ++c) q[c] = fmaf(xv[c], inv, 12582912.f);  // 1.5 * 2^23: the integer in the low bits
  if constexpr (kVals<QT> == 32) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      xq[2 * j] = pack4(q[8 * j], q[8 * j + 2], q[8 * j + 4], q[8 * j + 6]);
      xq[2 * j + 1] = pack4(q[8 * j + 1], q[8 * j + 3], q[8 * j + 5], q[8 * j + 7]);
    }
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) xq[j] = pack4(q[4 * j], q[4 * j + 1], q[4 * j + 2], q[4 * j + 3]);
  }
  qsum = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) qsum = __dp4a(xq[j], 0x01010101, qsum);
}

/// sum_c w_c * q_c over 16 columns of one load (h: which 16 of a 4-bit load), the weights' stored integers
/// (kQ8 signed, kG8 unsigned, nibbles unsigned) against quantize16's packing.
template <int QT>
__device__ __forceinline__ int idot16(const uint4& raw, int h, const int (&xq)[4]) {
  const std::uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
  int d = 0;
  if constexpr (kVals<QT> == 32) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const std::uint32_t word = w[2 * h + j];
      d = __dp4a(static_cast<int>(word & 0x0F0F0F0Fu), xq[2 * j], d);
      d = __dp4a(static_cast<int>((word >> 4) & 0x0F0F0F0Fu), xq[2 * j + 1], d);
    }
  } else if constexpr (QT == kQ8) {
#pragma unroll
    for (int j = 0; j < 4; ++j) d = __dp4a(static_cast<int>(w[j]), xq[j], d);
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) d = dp4a_us(w[j], xq[j], d);
  }
  return d;
}

/// Dynamic shared memory of the integer-activation GEMV: for each x row the int8 activations [k], then the
/// scales and sums of each 16 columns [k / 16] each.
constexpr std::size_t iq_smem_bytes(std::size_t m, std::size_t k) { return m * (k + k / 16 * 8); }
/// The widest input the integer-activation GEMV takes on any device: 16,384 columns (its shared memory at
/// m = 8, 192 KB, within an H100's or H200's 227 KB per block).
constexpr std::size_t kIqMaxK = 16384;

/// Blocks an SM that gemv_quant_kernel<M, QT, MODE, R, ., IQ> asks of ptxas (__launch_bounds__: at most 128
/// registers a thread at 2). Two wherever ptxas -v (CUDA 13.0, sm_90) shows no spills at 128; one (no cap:
/// up to 254 registers) for the f32-product instantiations that spill there: 4-bit weights at m > 1 (the
/// SwiGLU at every m, the plain product at m = 4 .. 7), 8-bit ones with 2 rows a warp at m = 4 and 8, FP8's
/// plain product at m = 8.
constexpr int quant_blocks(int m, int qt, int mode, int r, bool iq) {
  if (m == 1 || iq) return 2;
  if (qt == kQ4 || qt == kG4) return mode == 2 || (m >= 4 && m <= 7) ? 1 : 2;
  return (r == 2 && (m == 4 || m == 8)) || (qt == kFP8 && m == 8 && mode == 0) ? 1 : 2;
}

/// y = x . W^T (or += with a.accumulate-style mode 1; or SwiGLU in mode 2) for M rows of x, R output rows
/// per warp, U loads per row in flight per lane. MODE 0: modes 0 and 1 (accumulate set: mode 1); MODE 2:
/// gate (seg 0) and up (seg 1) of the same R rows, y = silu(gate) * up into seg 0. IQ (bf16 compute with
/// integer weights): the activations, rounded to bf16, are quantized to int8 per 16 columns (quantize16)
/// and the products are integer dot products (dp4a), as the CPU's bf16 compute quantizes them per group.
template <int M, int QT, int MODE, int R, int U, bool IQ>
__global__ void __launch_bounds__(kThreads, quant_blocks(M, QT, MODE, R, IQ)) gemv_quant_kernel(GemvArgs a,
                                                                                                  bool accumulate) {
  constexpr int V = kVals<QT>;
  constexpr int NW = MODE == 2 ? 2 : 1;
  constexpr bool kNeedXs = QT == kQ4 || kGptq<QT>;
  extern __shared__ __align__(16) unsigned char iq_smem[];
  int* xq_all = reinterpret_cast<int*>(iq_smem);                          // [M][k / 4]
  float* xscale_all = reinterpret_cast<float*>(xq_all + M * (a.k / 4));  // [M][k / 16]
  int* qsum_all = reinterpret_cast<int*>(xscale_all + M * (a.k / 16));   // [M][k / 16]
  const int lane = threadIdx.x & 31;
  std::size_t wi = static_cast<std::size_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  int s = 0;
  if constexpr (MODE == 0) {
    while (s + 1 < a.n_seg && wi >= (a.seg[s].n + R - 1) / R) wi -= (a.seg[s++].n + R - 1) / R;
  }
  const std::size_t n = a.seg[s].n, row0 = wi * R, k = a.k;
  const bool active = row0 < n;  // warps past the last row take part in the block's staging only

  const std::uint8_t* rowp[NW][R];
  const float* srow[NW][R];
  const std::int16_t* zrow[NW][R];
  unsigned block[NW];
#pragma unroll
  for (int w = 0; w < NW; ++w) {
    const QuantArgs& q = a.seg[s + w].q;
    const std::size_t row_bytes = kGptq<QT> ? q.words_per_row * 4 : k * kHalfBytes<QT> / 2;
    block[w] = static_cast<unsigned>(kGptq<QT> ? q.group_size : q.block_cols);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const std::size_t row = row0 + r < n ? row0 + r : n - 1;  // the last rows of a short warp: read, not written
      rowp[w][r] = static_cast<const std::uint8_t*>(q.data) + row * row_bytes;
      if constexpr (kGptq<QT>) {
        srow[w][r] = q.scales + row * q.n_groups;
        zrow[w][r] = q.zeros + row * q.n_groups;
      } else {
        srow[w][r] = q.scales + (row / q.block_rows) * q.sc_cols;
        zrow[w][r] = nullptr;
      }
    }
  }

  float acc[NW][R][M];
#pragma unroll
  for (int w = 0; w < NW; ++w)
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int i = 0; i < M; ++i) acc[w][r][i] = 0.f;

  // One load of each row at column kk: scales, then per x row the activations and the R (x NW) dots.
  auto consume = [&](std::size_t kk, const uint4 (&raw)[NW][R]) {
    float sc[NW][R], zp[NW][R];
#pragma unroll
    for (int w = 0; w < NW; ++w) {
      const unsigned b = static_cast<unsigned>(kk) / block[w];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        sc[w][r] = __ldg(srow[w][r] + b);
        if constexpr (QT == kFP8) sc[w][r] *= kFp8SumScale;
        if constexpr (kGptq<QT>) zp[w][r] = static_cast<float>(__ldg(zrow[w][r] + b));
        else zp[w][r] = 0.f;
      }
    }
#pragma unroll
    for (int i = 0; i < M; ++i) {
      // 16 columns at a time (4-bit loads: two halves), each row's sum one chain in column order
      float d[NW][R], xs = 0.f;
#pragma unroll
      for (int h = 0; h < V / 16; ++h) {
        const std::size_t kh = kk + 16 * h;
        if constexpr (IQ) {
          const std::size_t c = kh / 16, c16 = k / 16;
          const int4 q4 = reinterpret_cast<const int4*>(xq_all + i * (k / 4))[c];
          const int xq[4] = {q4.x, q4.y, q4.z, q4.w};
          const float xscale = xscale_all[i * c16 + c];
          const int qsum = qsum_all[i * c16 + c];
#pragma unroll
          for (int w = 0; w < NW; ++w)
#pragma unroll
            for (int r = 0; r < R; ++r) {
              const int off = QT == kQ4 ? 8 : static_cast<int>(zp[w][r]);  // kQ8: zp is 0
              // rounded as written (no contraction), so that every instantiation sums alike
              const float t = __fmul_rn(static_cast<float>(idot16<QT>(raw[w][r], h, xq) - off * qsum), xscale);
              d[w][r] = h == 0 ? t : __fadd_rn(d[w][r], t);
            }
          continue;
        }
        float xv[16];
        load_x<16>(a, i, kh, xv);
        if constexpr (kNeedXs)
#pragma unroll
          for (int c = 0; c < 16; ++c) xs = __fadd_rn(xs, xv[c]);  // never contracted with another product
        if constexpr (QT == kFP8)
#pragma unroll
          for (int c = 0; c < 16; ++c) xv[c] *= kFp8XScale;
#pragma unroll
        for (int w = 0; w < NW; ++w)
#pragma unroll
          for (int r = 0; r < R; ++r) {
            float u[16];
            decode<QT>(raw[w][r], h, u);
            float dd = h == 0 ? 0.f : d[w][r];
#pragma unroll
            for (int c = 0; c < 16; ++c) dd = fmaf(xv[c], u[c], dd);
            d[w][r] = dd;
          }
      }
#pragma unroll
      for (int w = 0; w < NW; ++w)
#pragma unroll
        for (int r = 0; r < R; ++r)
          acc[w][r][i] = fmaf(IQ ? d[w][r] : finish<QT>(d[w][r], xs, zp[w][r]), sc[w][r], acc[w][r][i]);
    }
  };

  constexpr std::size_t kStep = 32 * V;
  uint4 loaded[U][NW][R];
  auto load = [&](std::size_t k0) {
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (k0 + u * kStep < k)
#pragma unroll
        for (int w = 0; w < NW; ++w)
#pragma unroll
          for (int r = 0; r < R; ++r)
            loaded[u][w][r] = __ldg(reinterpret_cast<const uint4*>(rowp[w][r] + (k0 + u * kStep) * kHalfBytes<QT> / 2));
  };
  // The first weights are in flight while the kernel ahead finishes and the block stages the activations.
  std::size_t k0 = static_cast<std::size_t>(lane) * V;
  if (active) load(k0);
  pdl_enter();  // the weights above are read-only; x and y belong to the kernels around this one
  if constexpr (IQ) {  // the block quantizes the activations once, for all its warps
    const std::size_t c16 = a.k / 16;
    for (std::size_t t = threadIdx.x; t < M * c16; t += blockDim.x) {
      const int i = static_cast<int>(t / c16);
      const std::size_t c = t % c16;
      float xv[16];
      load_x<16>(a, i, c * 16, xv);
      int xq[4], qs;
      float sc;
      quantize16<QT>(xv, xq, sc, qs);
      reinterpret_cast<int4*>(xq_all + i * (a.k / 4))[c] = make_int4(xq[0], xq[1], xq[2], xq[3]);
      xscale_all[i * c16 + c] = sc;
      qsum_all[i * c16 + c] = qs;
    }
    __syncthreads();
  }
  if (!active) return;
  for (; k0 < k; k0 += U * kStep) {
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (k0 + u * kStep < k) consume(k0 + u * kStep, loaded[u]);
    if (k0 + U * kStep < k) load(k0 + U * kStep);
  }

  float* y = a.seg[s].y;
  const std::size_t ldy = a.seg[s].ldy;
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int i = 0; i < M; ++i) {
      const float v = warp_sum(acc[0][r][i]);
      float out = v;
      if constexpr (MODE == 2) out = v / (1.f + expf(-v)) * warp_sum(acc[NW - 1][r][i]);
      if (lane == 0 && row0 + r < n) {
        float& dst = y[i * ldy + row0 + r];
        dst = MODE == 0 && accumulate ? dst + out : out;
      }
    }
}

// ------------------------------------------------------------- FP8 through the tensor cores (bf16 compute)
//
// The f32-product FP8 GEMV above spends about five instructions a weight value (a conversion to f16, one
// to f32, an FMA and its share of the activations' loads), so it runs below the memory's speed where the
// integer types' dp4a kernels do not. Under bf16 compute the products go to the tensor cores instead, as
// Marlin-style mixed-input kernels do (Frantar et al. 2024): a warp takes a tile of 16 weight rows and
// 64-column chunks of its share of the columns; each lane loads 16 bytes of row g = lane / 4 and of row
// g + 8 at columns 16 (lane % 4) .. + 15 of the chunk, turns byte pairs into f16 pairs (one conversion
// instruction a pair), and four mma.sync m16n8k16 (f16 inputs, f32 accumulation) multiply them with up
// to 8 activation rows (the mma's n). The reduction runs over a permutation of the chunk's columns: in
// step s the lane's pairs at columns 16t + 4s + {0, 1} and {2, 3} (t = lane % 4) stand for the mma's k
// = 2t, 2t + 1 and 2t + 8, 2t + 9, and the activations' fragment takes the same columns, so the sum is
// the product's. Activations: each warp stages the columns of its chunks in shared memory as f16, scaled
// per 64 columns by a power of two above their largest magnitude (exact for bf16 values down to 2^-14 of
// that magnitude; smaller ones keep fewer bits); a chunk's sums are scaled back with the weights' block
// scale. Bits: a row's value is a function of its own activation row (the mma's columns do not mix), the
// warps' column shares and their summation order do not depend on m or the mode, so a row has the same
// bits alone and in a verify batch.
constexpr int kMmaChunk = 64;
constexpr int kMmaRows = 16;
/// Halfs of padding after each staged activation row (M rows read in one instruction land in different
/// banks).
constexpr int kMmaPad = 8;
/// 16-row tiles a block takes (launch_fp8_mma); a warp reads twice as many weight tiles in the SwiGLU.
constexpr int kMmaTiles = 2;

#if QUARRY_FP8_CVT
constexpr float kFp8MmaUnit = 1.f;  // the conversion instruction gives the values themselves
#else
constexpr float kFp8MmaUnit = 0x1p-8f;  // bit placement: sign, exponent and mantissa bits under f16's bias
#endif

/// The FP8 E4M3 bytes 0, 1 of w as an f16 pair (lo; byte 0 in the lower half) and bytes 2, 3 (hi), in
/// units of kFp8MmaUnit (exact).
__device__ __forceinline__ void fp8x4_to_f16x2(std::uint32_t w, std::uint32_t& lo, std::uint32_t& hi) {
#if QUARRY_FP8_CVT
  asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e4m3x2 %0, l;\n cvt.rn.f16x2.e4m3x2 %1, h;\n}"
      : "=r"(lo), "=r"(hi)
      : "r"(w));
#else
  // byte b at bits 8..15 of a half: sign to bit 15, exponent and mantissa (b & 0x7F) to bits 7..13, which
  // is the value times 2^-8 in f16 (E4M3's bias 7 under f16's 15; subnormals included).
  const std::uint32_t p = __byte_perm(w, 0u, 0x1404u), q = __byte_perm(w, 0u, 0x3424u);
  lo = (p & 0x80008000u) | ((p >> 1) & 0x3F803F80u);
  hi = (q & 0x80008000u) | ((q >> 1) & 0x3F803F80u);
#endif
}

/// d += a (16x16 f16, row) . b (16x8 f16, col), f32 accumulation (mma.sync m16n8k16; PTX ISA fragment
/// layouts: a0 (g, 2t..), a1 (g + 8, 2t..), a2 (g, 2t + 8..), a3 (g + 8, 2t + 8..); b0 (2t.., n = g),
/// b1 (2t + 8.., g); d (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1)).
__device__ __forceinline__ void mma_f16_16816(float (&d)[4], std::uint32_t a0, std::uint32_t a1, std::uint32_t a2,
                                              std::uint32_t a3, std::uint32_t b0, std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/// Dynamic shared memory of gemv_fp8_mma_kernel: the f16 activations [m][k + kMmaPad], then the scales of
/// each 64 columns [m][k / 64].
constexpr std::size_t fp8_mma_smem_bytes(std::size_t m, std::size_t k) {
  return m * (k + kMmaPad) * 2 + m * (k / kMmaChunk) * 4;
}

/// y = x . W^T for M <= 8 rows of x and FP8 weights (block scales), bf16 compute. One block of 8 warps
/// takes T tiles of 16 output rows (the tiles of all segments in order; MODE 2: the gate's tiles, each with
/// the up's tile of the same rows, NW = 2); warp w takes the 64-column chunks w, w + 8, ... of every tile;
/// U chunks in flight a lane. Modes as gemv_quant_kernel (0 with `accumulate`: y +=). The block's warps sum
/// their shares in warp order.
template <int M, int MODE, int U, int T>
__global__ void __launch_bounds__(kThreads, 2) gemv_fp8_mma_kernel(GemvArgs a, bool accumulate) {
  constexpr int NW = MODE == 2 ? 2 : 1;
  constexpr int W = NW * T;  // weight tiles a warp reads
  extern __shared__ __align__(16) unsigned char mma_smem[];
  __shared__ float red[kWarps][W][4][32];
  const std::size_t k = a.k, ldh = k + kMmaPad, nchunks = k / kMmaChunk;
  __half* xh = reinterpret_cast<__half*>(mma_smem);              // [M][ldh]
  float* xs = reinterpret_cast<float*>(mma_smem + M * ldh * 2);  // [M][nchunks]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;

  // Tile tt of the block: segment seg[tt] (MODE 2: the gate's), rows row0[tt] .. + 15 of n[tt].
  int seg[T];
  std::size_t row0[T], nrows[T];
#pragma unroll
  for (int tt = 0; tt < T; ++tt) {
    std::size_t tile = static_cast<std::size_t>(blockIdx.x) * T + tt;
    int sg = 0;
    if constexpr (MODE == 0) {
      while (sg + 1 < a.n_seg && tile >= (a.seg[sg].n + kMmaRows - 1) / kMmaRows)
        tile -= (a.seg[sg++].n + kMmaRows - 1) / kMmaRows;
    }
    seg[tt] = sg;
    row0[tt] = tile * kMmaRows;
    nrows[tt] = a.seg[sg].n;
  }
  const std::uint8_t* rowp[W][2];
  const float* srow[W][2];
  unsigned bcols[W];
#pragma unroll
  for (int tt = 0; tt < T; ++tt)
#pragma unroll
    for (int w = 0; w < NW; ++w) {
      const QuantArgs& q = a.seg[seg[tt] + w].q;
      const int wt = tt * NW + w;
      bcols[wt] = static_cast<unsigned>(q.block_cols);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        std::size_t row = row0[tt] + g + 8 * h;
        if (row >= nrows[tt]) row = nrows[tt] > 0 ? nrows[tt] - 1 : 0;  // read, not written (a tile past the end: row 0)
        rowp[wt][h] = static_cast<const std::uint8_t*>(q.data) + row * k + 16 * t;
        srow[wt][h] = q.scales + (row / q.block_rows) * q.sc_cols;
      }
    }
  const int nch = nchunks > static_cast<std::size_t>(warp)
                      ? static_cast<int>((nchunks - warp + kWarps - 1) / kWarps)
                      : 0;  // this warp's chunks: warp + 8 j, j < nch

  uint4 ld[U][W][2];
  auto issue = [&](int slot, int j) {
    if (j < nch) {
      const std::size_t col = static_cast<std::size_t>(warp + kWarps * j) * kMmaChunk;
#pragma unroll
      for (int w = 0; w < W; ++w)
#pragma unroll
        for (int h = 0; h < 2; ++h) ld[slot][w][h] = __ldg(reinterpret_cast<const uint4*>(rowp[w][h] + col));
    }
  };
#pragma unroll
  for (int u = 0; u < U; ++u) issue(u, u);
  pdl_enter();  // the weights above are read-only; x and y belong to the kernels around this one

  // Stage this warp's chunks of the activations: 4 lanes a (row, chunk), 16 columns each.
  const int items = M * nch * 4;
  for (int base = 0; base < items; base += 32) {
    const int it = base + lane;
    const bool ok = it < items;
    const int pair = it >> 2, quarter = it & 3;
    const int i = ok ? pair / nch : 0;
    const std::size_t c = ok ? static_cast<std::size_t>(warp + kWarps * (pair % nch)) : 0;
    float xv[16];
    float amax = 0.f;
    if (ok) {
      load_x<16>(a, i, c * kMmaChunk + 16 * quarter, xv);
#pragma unroll
      for (int e = 0; e < 16; ++e) amax = fmaxf(amax, fabsf(xv[e]));
    }
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
    if (ok) {
      int e2 = 0;
      if (amax > 0.f) frexpf(amax, &e2);  // amax < 2^e2
      const float inv = ldexpf(1.f, -e2);
      std::uint32_t hv[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const __half2 p = __floats2half2_rn(xv[2 * e] * inv, xv[2 * e + 1] * inv);
        hv[e] = *reinterpret_cast<const std::uint32_t*>(&p);
      }
      uint4* dst = reinterpret_cast<uint4*>(xh + i * ldh + c * kMmaChunk + 16 * quarter);
      dst[0] = make_uint4(hv[0], hv[1], hv[2], hv[3]);
      dst[1] = make_uint4(hv[4], hv[5], hv[6], hv[7]);
      if (quarter == 0) xs[i * nchunks + c] = ldexpf(1.f, e2) * (1.f / kFp8MmaUnit);
    }
  }
  __syncwarp();

  float acc[W][4];
#pragma unroll
  for (int w = 0; w < W; ++w)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[w][e] = 0.f;
  auto consume = [&](const uint4 (&raw)[W][2], int j) {
    const std::size_t c = static_cast<std::size_t>(warp + kWarps * j), col = c * kMmaChunk;
    std::uint32_t xb[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (g < M) {
      const uint4* src = reinterpret_cast<const uint4*>(xh + g * ldh + col + 16 * t);
      const uint4 v0 = src[0], v1 = src[1];
      xb[0] = v0.x, xb[1] = v0.y, xb[2] = v0.z, xb[3] = v0.w, xb[4] = v1.x, xb[5] = v1.y, xb[6] = v1.z, xb[7] = v1.w;
    }
    const float xs0 = 2 * t < M ? xs[(2 * t) * nchunks + c] : 0.f;
    const float xs1 = 2 * t + 1 < M ? xs[(2 * t + 1) * nchunks + c] : 0.f;
#pragma unroll
    for (int w = 0; w < W; ++w) {
      const std::uint32_t wg[4] = {raw[w][0].x, raw[w][0].y, raw[w][0].z, raw[w][0].w};
      const std::uint32_t wh[4] = {raw[w][1].x, raw[w][1].y, raw[w][1].z, raw[w][1].w};
      float d[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int st = 0; st < 4; ++st) {
        std::uint32_t glo, ghi, hlo, hhi;
        fp8x4_to_f16x2(wg[st], glo, ghi);
        fp8x4_to_f16x2(wh[st], hlo, hhi);
        mma_f16_16816(d, glo, hlo, ghi, hhi, xb[2 * st], xb[2 * st + 1]);
      }
      const unsigned b = static_cast<unsigned>(col) / bcols[w];
      const float sg = __ldg(srow[w][0] + b), sh = __ldg(srow[w][1] + b);
      acc[w][0] = fmaf(d[0], sg * xs0, acc[w][0]);
      acc[w][1] = fmaf(d[1], sg * xs1, acc[w][1]);
      acc[w][2] = fmaf(d[2], sh * xs0, acc[w][2]);
      acc[w][3] = fmaf(d[3], sh * xs1, acc[w][3]);
    }
  };
  for (int j0 = 0; j0 < nch; j0 += U) {
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (j0 + u < nch) {
        consume(ld[u], j0 + u);
        issue(u, j0 + u + U);
      }
  }

#pragma unroll
  for (int w = 0; w < W; ++w)
#pragma unroll
    for (int e = 0; e < 4; ++e) red[warp][w][e][lane] = acc[w][e];
  __syncthreads();
  // Warp tt writes tile tt.
#pragma unroll
  for (int tt = 0; tt < T; ++tt) {
    if (warp != tt) continue;
    float* y = a.seg[seg[tt]].y;
    const std::size_t ldy = a.seg[seg[tt]].ldy;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = 2 * t + (e & 1);
      const std::size_t row = row0[tt] + g + (e >= 2 ? 8 : 0);
      float v[NW];
#pragma unroll
      for (int w = 0; w < NW; ++w) {
        v[w] = red[0][tt * NW + w][e][lane];
#pragma unroll
        for (int p = 1; p < kWarps; ++p) v[w] += red[p][tt * NW + w][e][lane];
      }
      if (i < M && row < nrows[tt]) {
        float out = v[0];
        if constexpr (MODE == 2) out = v[0] / (1.f + expf(-v[0])) * v[NW - 1];
        float& dst = y[i * ldy + row];
        dst = MODE == 0 && accumulate ? dst + out : out;
      }
    }
  }
}

/// The widest input gemv_fp8_mma_kernel takes on this device (its shared memory at m = 8 within the
/// opt-in limit per block, so that a weight takes the same path at every m). Read once.
std::size_t fp8_mma_max_k() {
  static const std::size_t v = [] {
    const int optin = device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, 48 * 1024);
    const std::size_t fixed = sizeof(float) * kWarps * (2 * kMmaTiles) * 4 * 32 + 1024;  // red[] (SwiGLU) and spare
    std::size_t k = kMmaChunk;
    while (fp8_mma_smem_bytes(8, k + kMmaChunk) + fixed <= static_cast<std::size_t>(optin)) k += kMmaChunk;
    return fp8_mma_smem_bytes(8, k) + fixed <= static_cast<std::size_t>(optin) ? k : 0;
  }();
  return v;
}

/// Whether the FP8 GEMV of `a` goes through the tensor cores: bf16 compute on a device with mma.sync f16
/// (compute capability 8.0 on), every width a multiple of 64 within fp8_mma_max_k(), every weight's scale
/// blocks whole 64-column chunks. QUARRY_FP8_MMA=0 keeps the f32 products.
bool fp8_mma_takes(const GemvArgs& a) {
  static const bool on = [] {
    const char* e = std::getenv("QUARRY_FP8_MMA");
    return !(e && e[0] == '0') && device_attribute(cudaDevAttrComputeCapabilityMajor, 0) >= 8;
  }();
  if (!on || !a.round_x || a.k % kMmaChunk != 0 || a.k > fp8_mma_max_k()) return false;
  for (int i = 0; i < a.n_seg; ++i)
    if (a.seg[i].q.block_cols % kMmaChunk != 0) return false;
  return true;
}

/// kMmaTiles tiles a block, two chunks in flight a lane (one for the SwiGLU's gate and up: four weight
/// tiles a warp). Measured on an H200 (bench/engine/README.md, 2026-11-30): one tile a block with 4 or 8
/// chunks in flight decoded 6-9% slower at m = 1 than the f32-product kernel; two tiles match it at m = 1
/// and decode 4 sequences 2.6x faster; 4 chunks with two tiles or 4 tiles spill and lose.
template <int M, int MODE>
void launch_fp8_mma(const GemvArgs& a, bool accumulate, cudaStream_t s) {
  constexpr int U = MODE == 2 ? 1 : 2, T = kMmaTiles;
  std::size_t tiles = 0;
  if (MODE == 2) tiles = (a.seg[0].n + kMmaRows - 1) / kMmaRows;
  else
    for (int i = 0; i < a.n_seg; ++i) tiles += (a.seg[i].n + kMmaRows - 1) / kMmaRows;
  const std::size_t smem = fp8_mma_smem_bytes(M, a.k);
  // Opted in once per kernel (its static red[] and the activations together pass the default 48 KB at
  // some widths), to what the widest input takes.
  static const cudaError_t opted = cudaFuncSetAttribute(gemv_fp8_mma_kernel<M, MODE, U, T>,
                                                        cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                        static_cast<int>(fp8_mma_smem_bytes(M, fp8_mma_max_k())));
  check(opted, "gemv_fp8_mma (shared memory)");
  launch_kernel("gemv_fp8_mma", gemv_fp8_mma_kernel<M, MODE, U, T>, ceil_div(tiles, T), kThreads, smem, s, a,
                accumulate);
}

/// Dequantized rows (prefill's products, embedding rows): one 16-byte load per thread, its values through
/// decode() and value(), written with 16-byte stores (f32 or bf16 rounded to nearest even).
template <int QT>
__global__ void __launch_bounds__(256) dequantize_kernel(QuantArgs q, const std::int32_t* rows, std::size_t n,
                                                         std::size_t cols, float* out, __nv_bfloat16* out_bf16,
                                                         std::size_t ldo) {
  constexpr int V = kVals<QT>;
  const std::size_t per_row = cols / V;
  const std::size_t t = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= n * per_row) return;
  const std::size_t i = t / per_row, c = (t % per_row) * V;
  const std::size_t row = rows ? static_cast<std::size_t>(rows[i]) : i;
  const std::size_t row_bytes = kGptq<QT> ? q.words_per_row * 4 : cols * kHalfBytes<QT> / 2;
  const uint4 raw = __ldg(reinterpret_cast<const uint4*>(static_cast<const std::uint8_t*>(q.data) + row * row_bytes +
                                                         c * kHalfBytes<QT> / 2));
  float scale, zero = 0.f;
  if constexpr (kGptq<QT>) {
    const std::size_t g = row * q.n_groups + c / q.group_size;
    scale = __ldg(q.scales + g);
    zero = static_cast<float>(__ldg(q.zeros + g));
  } else {
    scale = __ldg(q.scales + (row / q.block_rows) * q.sc_cols + c / q.block_cols);
  }
  float u[V];
#pragma unroll
  for (int h = 0; h < V / 16; ++h) {
    float part[16];
    decode<QT>(raw, h, part);
#pragma unroll
    for (int e = 0; e < 16; ++e) u[16 * h + e] = value<QT>(part[e], scale, zero);
  }
  if (out) {
    float4* dst = reinterpret_cast<float4*>(out + i * ldo + c);
#pragma unroll
    for (int e = 0; e < V / 4; ++e) dst[e] = make_float4(u[4 * e], u[4 * e + 1], u[4 * e + 2], u[4 * e + 3]);
  } else {
    uint4* dst = reinterpret_cast<uint4*>(out_bf16 + i * ldo + c);
#pragma unroll
    for (int e = 0; e < V / 8; ++e) {
      std::uint32_t h[4];
#pragma unroll
      for (int p = 0; p < 4; ++p) {
        const __nv_bfloat162 b = __floats2bfloat162_rn(u[8 * e + 2 * p], u[8 * e + 2 * p + 1]);
        h[p] = *reinterpret_cast<const std::uint32_t*>(&b);
      }
      dst[e] = make_uint4(h[0], h[1], h[2], h[3]);
    }
  }
}

/// The widest input the integer-activation GEMV takes on this device: its shared memory at m = 8 must fit
/// the device's opt-in limit per block (less than Hopper's on consumer and older cards), so that a weight
/// takes the same path at every m (decode and verify steps agree). Read once.
std::size_t iq_max_k() {
  static const std::size_t v = [] {
    const int optin = device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, 48 * 1024);
    const std::size_t spare = 1024;  // room for the kernel's static shared memory
    const std::size_t per16 = iq_smem_bytes(8, 16);  // 16 columns of 8 activation rows
    std::size_t k = optin > static_cast<int>(spare) ? (static_cast<std::size_t>(optin) - spare) / per16 * 16 : 0;
    k = k / 32 * 32;
    return std::min(k, kIqMaxK);
  }();
  return v;
}

template <int M, int QT, int MODE, int R, bool IQ>
void launch_iq(const GemvArgs& a, bool accumulate, cudaStream_t s) {
  // About 8 loads in flight per lane (4 with 5 or more x rows, whose accumulators take the registers;
  // 16 measured no faster).
  constexpr int loads = (MODE == 2 ? 4 : 8) / (M >= 5 ? 2 : 1);
  constexpr int U = loads / R < 1 ? 1 : loads / R;
  std::size_t warps = 0;
  if (MODE == 2) warps = (a.seg[0].n + R - 1) / R;
  else
    for (int i = 0; i < a.n_seg; ++i) warps += (a.seg[i].n + R - 1) / R;
  const std::size_t smem = IQ ? iq_smem_bytes(M, a.k) : 0;
  if (smem > 48 * 1024) {  // above the default: opt in once per kernel, to what the widest input takes
    static const cudaError_t opted = cudaFuncSetAttribute(gemv_quant_kernel<M, QT, MODE, R, U, IQ>,
                                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                          static_cast<int>(iq_smem_bytes(M, iq_max_k())));
    check(opted, "gemv_quant (shared memory)");
  }
  launch_kernel("gemv", gemv_quant_kernel<M, QT, MODE, R, U, IQ>, ceil_div(warps, kWarps), kThreads, smem, s, a,
                accumulate);
}

/// Integer products under bf16 compute for the integer types; exact compute, and FP8 where the tensor-core
/// GEMV does not take it (fp8_mma_takes), in f32.
template <int M, int QT, int MODE, int R>
void launch_rows(const GemvArgs& a, bool accumulate, cudaStream_t s) {
  if constexpr (QT != kFP8)
    if (a.round_x && a.k <= iq_max_k()) return launch_iq<M, QT, MODE, R, true>(a, accumulate, s);
  launch_iq<M, QT, MODE, R, false>(a, accumulate, s);
}

template <int M, int QT>
void launch_typed(const GemvArgs& a, int mode, cudaStream_t s) {
  if constexpr (QT == kFP8)
    if (fp8_mma_takes(a)) {
      if (mode == 2) return launch_fp8_mma<M, 2>(a, false, s);
      return launch_fp8_mma<M, 0>(a, mode == 1, s);
    }
  // The most rows per warp that still give every multiprocessor a block of warps (fewer rows per warp:
  // more warps streaming, more activation work per weight byte; two blocks each measured slower for
  // FP8, one row per warp everywhere slower for all: int4 1.43x bf16 against 1.85x).
  const std::size_t rows = gemv_output_rows(a, mode);
  // Verify steps (several x rows) keep one row per warp for 4-bit weights and at most two for 8-bit:
  // more would spill the accumulators.
  const std::size_t per_pass = static_cast<std::size_t>(sm_count()) * kWarps;
  constexpr bool k4bit = kVals<QT> == 32;
  if (mode == 2) {
    if constexpr (M == 1)
      if (rows >= 2 * per_pass) return launch_rows<M, QT, 2, 2>(a, false, s);
    return launch_rows<M, QT, 2, 1>(a, false, s);
  }
  const bool acc = mode == 1;
  if constexpr (M == 1)
    if (rows >= 4 * per_pass) return launch_rows<M, QT, 0, 4>(a, acc, s);
  if constexpr (M == 1 || !k4bit)
    if (rows >= 2 * per_pass) return launch_rows<M, QT, 0, 2>(a, acc, s);
  launch_rows<M, QT, 0, 1>(a, acc, s);
}

template <int M>
void launch_m(const GemvArgs& a, int type, int mode, cudaStream_t s) {
  with_quant_type(type, "gemv_quant", [&](auto qt) { launch_typed<M, decltype(qt)::value>(a, mode, s); });
}

}  // namespace

bool gemv_quant_supported(const QuantArgs& q, int type, std::size_t k) {
  if (!quantized_type(type) || reinterpret_cast<std::uintptr_t>(q.data) % 16 != 0) return false;
  const std::size_t v = type == kQ4 || type == kG4 ? 32 : 16;
  if (k % v != 0 || k > 0xFFFFFFFFu) return false;
  if (type == kG4 || type == kG8) return !q.g_idx && q.group_size > 0 && q.group_size % v == 0 && q.words_per_row % 4 == 0;
  return q.block_cols > 0 && q.block_cols % v == 0 && q.block_rows > 0;
}

bool launch_dequantize_quant(const QuantArgs& q, int type, const std::int32_t* rows, std::size_t n, std::size_t cols,
                             float* out, __nv_bfloat16* out_bf16, std::size_t ldo, cudaStream_t s) {
  const std::uintptr_t dst = out ? reinterpret_cast<std::uintptr_t>(out) : reinterpret_cast<std::uintptr_t>(out_bf16);
  if (!gemv_quant_supported(q, type, cols) || dst % 16 != 0 || ldo % (out ? 4 : 8) != 0) return false;
  if (n == 0) return true;
  const std::size_t v = type == kQ4 || type == kG4 ? 32 : 16;
  const unsigned grid = ceil_div(n * (cols / v), 256);
  with_quant_type(type, "dequantize", [&](auto qt) {
    dequantize_kernel<decltype(qt)::value><<<grid, 256, 0, s>>>(q, rows, n, cols, out, out_bf16, ldo);
  });
  check_launch("dequantize");
  return true;
}

void launch_gemv_quant(const GemvArgs& a, std::size_t m, int type, int mode, cudaStream_t s) {
  if (mode == 2 && a.n_seg != 2) throw std::invalid_argument("gemv_quant: SwiGLU takes gate and up");
  if (mode == 2 && a.seg[0].n != a.seg[1].n) throw std::invalid_argument("gemv_quant: gate and up differ in rows");
  with_gemv_rows(m, "gemv_quant", [&](auto rows) { launch_m<decltype(rows)::value>(a, type, mode, s); });
}

}  // namespace quarry::engine::cuda
