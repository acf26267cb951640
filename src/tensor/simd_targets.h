#pragma once
// Which of Highway's compiled targets this CPU may really run.
//
// Highway 1.0.3 (Debian 12) compiles its AVX3_DL target with GCC's
// "avxvnni" feature, so GCC encodes the 128/256-bit VNNI instructions in
// their VEX form (AVX-VNNI), while Highway's run-time check only asks for
// AVX512-VNNI. A CPU with AVX512-VNNI but no AVX-VNNI (AMD Zen 4, Intel Ice
// Lake) would pick AVX3_DL and stop on an illegal instruction in the first
// K-quant dot product. Such a CPU runs the AVX3 target instead; every target
// gives the same bits, so only speed changes.

namespace shoal {

// Whether the CPU runs VEX-encoded VNNI (CPUID leaf 7.1, EAX bit 4).
bool cpu_has_avx_vnni();

// Takes AVX3_DL off Highway's supported targets where the CPU lacks AVX-VNNI.
// Idempotent; every file that dispatches calls it from a static initializer,
// so it has run before the first dispatch. Returns true.
bool drop_unusable_simd_targets();

}  // namespace shoal
