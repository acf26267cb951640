#include "tensor/simd_targets.h"

#include "hwy/targets.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace shoal {

bool cpu_has_avx_vnni() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  // CPUID leaf 7, sub-leaf 1: EAX bit 4 is AVX-VNNI.
  if (!__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) return false;
  return (eax >> 4) & 1u;
#else
  return false;
#endif
}

bool drop_unusable_simd_targets() {
#if HWY_ARCH_X86
  static const bool done = [] {
    if (!cpu_has_avx_vnni()) hwy::DisableTargets(HWY_AVX3_DL);
    return true;
  }();
  return done;
#else
  return true;
#endif
}

}  // namespace shoal
