// cpuid / xgetbv feature detection (Intel SDM vol. 2, CPUID; vol. 1 ch. 13, XCR0 bits).
#include "engine/backend/cpu/cpu_features.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#endif

namespace quarry::engine::cpu {

#if defined(__x86_64__) || defined(__i386__)
namespace {

unsigned long long read_xcr0() {
  unsigned int lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<unsigned long long>(hi) << 32) | lo;
}

}  // namespace

CpuFeatures detect_cpu_features() {
  CpuFeatures f;
  unsigned int a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28), f16c = c & (1u << 29);
  if (!osxsave || !avx) return f;
  const unsigned long long xcr0 = read_xcr0();
  const bool os_ymm = (xcr0 & 0x6) == 0x6;             // SSE + AVX state
  const bool os_zmm = (xcr0 & 0xe6) == 0xe6;           // + opmask, ZMM_Hi256, Hi16_ZMM
  const bool os_amx = (xcr0 & 0x60000) == 0x60000;     // XTILECFG + XTILEDATA
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  const bool avx2 = b & (1u << 5), avx512f = b & (1u << 16), avx512dq = b & (1u << 17),
             avx512bw = b & (1u << 30), avx512vl = b & (1u << 31);
  const bool avx512fp16 = d & (1u << 23), amx_bf16 = d & (1u << 22), amx_tile = d & (1u << 24);
  const unsigned int max_sub = a;
  f.avx2 = os_ymm && avx2 && fma && f16c;
  f.avx512 = f.avx2 && os_zmm && avx512f && avx512dq && avx512bw && avx512vl;
  f.avx512_fp16 = f.avx512 && avx512fp16;
  f.avx512_vnni = f.avx512 && (c & (1u << 11));
  f.avx512_vbmi = f.avx512 && (c & (1u << 1));
  if (max_sub >= 1) {
    __cpuid_count(7, 1, a, b, c, d);
    f.avx512_bf16 = f.avx512 && (a & (1u << 5));
  }
  f.amx_bf16 = os_amx && amx_bf16 && amx_tile;
  return f;
}

bool amx_tile_permission() {
#if defined(__linux__) && defined(__x86_64__)
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

#else
CpuFeatures detect_cpu_features() { return {}; }
bool amx_tile_permission() { return false; }
#endif

}  // namespace quarry::engine::cpu
