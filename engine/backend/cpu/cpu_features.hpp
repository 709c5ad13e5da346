// Run-time detection of the x86 instruction-set extensions the CPU kernels use.
#pragma once

namespace quarry::engine::cpu {

/// What this CPU *and* the operating system support (an extension counts only when the OS saves its
/// register state: XGETBV/XCR0 for YMM/ZMM/opmask, and for AMX the Linux permission request).
/// Source: Intel SDM vol. 1 ch. 13 (XSAVE-managed state) and vol. 2 (CPUID leaves 1, 7.0, 7.1);
/// Linux Documentation/arch/x86/xstate.rst (ARCH_REQ_XCOMP_PERM for AMX tile data).
struct CpuFeatures {
  bool avx2 = false;      ///< AVX2 with FMA3 and F16C (the "avx2" kernel set needs all three)
  bool avx512 = false;    ///< AVX-512 F, BW, VL, DQ (the "avx512" kernel set)
  bool avx512_bf16 = false;  ///< AVX512_BF16 (vdpbf16ps, vcvtne2ps2bf16)
  bool avx512_fp16 = false;  ///< AVX512_FP16
  bool avx512_vnni = false;  ///< AVX512_VNNI (vpdpbusd: u8 x s8 dot products into int32)
  bool avx512_vbmi = false;  ///< AVX512_VBMI (vpermi2b: 128-entry byte lookups)
  bool amx_bf16 = false;     ///< AMX-BF16 tiles, CPU side only (use amx_tile_permission() before use)
};

/// Detects the features once per call (cpuid is cheap; callers cache the result where it matters).
/// On non-x86 builds every field is false.
CpuFeatures detect_cpu_features();

/// Asks Linux for permission to use AMX tile data (arch_prctl ARCH_REQ_XCOMP_PERM). Returns true
/// when granted (or already granted); false on other systems or when the kernel refuses.
bool amx_tile_permission();

}  // namespace quarry::engine::cpu
