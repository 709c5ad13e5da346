// The streaming-read probe of the CPU backend (Backend::probe_bandwidth_gb_s) and the kernel benchmarks: the memory-bandwidth ceiling against which
// decode (which reads every weight once per step) is reported.
#pragma once

#include "engine/backend/cpu/intrinsics.hpp"

#include <cstdint>
#include <cstring>

#include "engine/backend/cpu/cpu_features.hpp"

namespace quarry::engine::cpu {

// Streaming read at the best rate one thread can reach: four sequential streams interleaved (one per
// quarter of the slice) with software prefetch 1 KB ahead; this beat a single stream by ~20% here,
// and a baseline that a kernel could beat would overstate how close the kernel is to the limit.
inline __attribute__((target("avx512f"))) std::uint64_t read_avx512(const std::uint8_t* p, std::size_t bytes) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  const std::size_t sub = bytes / 4 / 256 * 256;
  for (std::size_t i = 0; i < sub; i += 256) {
    for (int s = 0; s < 4; ++s) {
      const std::uint8_t* q = p + s * sub + i;
      for (int b = 0; b < 256; b += 64) _mm_prefetch(reinterpret_cast<const char*>(q) + 1024 + b, _MM_HINT_T0);
      a0 = _mm512_xor_si512(a0, _mm512_load_si512(q));
      a1 = _mm512_xor_si512(a1, _mm512_load_si512(q + 64));
      a2 = _mm512_xor_si512(a2, _mm512_load_si512(q + 128));
      a3 = _mm512_xor_si512(a3, _mm512_load_si512(q + 192));
    }
  }
  const __m512i a = _mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3));
  alignas(64) std::uint64_t lanes[8];
  _mm512_store_si512(lanes, a);
  std::uint64_t s = 0;
  for (auto v : lanes) s ^= v;
  return s;
}

inline __attribute__((target("avx2"))) std::uint64_t read_avx2(const std::uint8_t* p, std::size_t bytes) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  const std::size_t sub = bytes / 4 / 128 * 128;
  for (std::size_t i = 0; i < sub; i += 128) {
    for (int s = 0; s < 4; ++s) {
      const std::uint8_t* q = p + s * sub + i;
      for (int b = 0; b < 128; b += 64) _mm_prefetch(reinterpret_cast<const char*>(q) + 1024 + b, _MM_HINT_T0);
      a0 = _mm256_xor_si256(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(q)));
      a1 = _mm256_xor_si256(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(q + 32)));
      a2 = _mm256_xor_si256(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(q + 64)));
      a3 = _mm256_xor_si256(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(q + 96)));
    }
  }
  const __m256i a = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
  alignas(32) std::uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), a);
  return lanes[0] ^ lanes[1] ^ lanes[2] ^ lanes[3];
}

inline std::uint64_t read_scalar(const std::uint8_t* p, std::size_t bytes) {
  std::uint64_t a = 0, b = 0;
  for (std::size_t i = 0; i + 16 <= bytes; i += 16) {
    std::uint64_t u, v;
    std::memcpy(&u, p + i, 8);
    std::memcpy(&v, p + i + 8, 8);
    a ^= u;
    b ^= v;
  }
  return a ^ b;
}

/// Reads [p, p + bytes) (p 64-byte aligned) once with the widest probe this CPU has; returns a value that depends on every
/// byte (so the loads cannot be optimised away).
inline std::uint64_t stream_read(const CpuFeatures& feat, const std::uint8_t* p, std::size_t bytes) {
  return feat.avx512 ? read_avx512(p, bytes) : feat.avx2 ? read_avx2(p, bytes) : read_scalar(p, bytes);
}

}  // namespace quarry::engine::cpu
