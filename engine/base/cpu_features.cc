#include "engine/base/cpu_features.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>

namespace quill::engine {
namespace {

bool EnvIsOne(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && value[0] == '1';
}

// Linux (5.16+) hands out the AMX tile data state (XFEATURE_XTILEDATA, 18) only to a
// process that asks for it; the grant is process-wide, so every thread may use the tiles.
bool RequestAmxTileData() {
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

CpuFeatures Detect() {
  CpuFeatures f;
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return f;
  f.fma = (ecx >> 12) & 1;
  const bool osxsave = (ecx >> 27) & 1;
  if (!osxsave) return f;
  // The OS must save the vector state (XCR0) for the wide registers to be usable.
  unsigned xcr0_lo, xcr0_hi;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  const bool ymm_ok = (xcr0_lo & 0x6) == 0x6;
  const bool zmm_ok = (xcr0_lo & 0xe6) == 0xe6;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return f;
  f.avx2 = ymm_ok && ((ebx >> 5) & 1);
  f.fma = f.fma && ymm_ok;
  f.avx512f = zmm_ok && ((ebx >> 16) & 1);
  f.avx512bw = zmm_ok && ((ebx >> 30) & 1);
  f.avx512vl = zmm_ok && ((ebx >> 31) & 1);
  f.avx512_vnni = zmm_ok && ((ecx >> 11) & 1);
  // AMX-TILE (EDX bit 24) and AMX-BF16 (22), and XCR0's tile config and data (17, 18).
  const bool amx_os = (xcr0_lo & 0x60000) == 0x60000;
  const bool amx_cpu = ((edx >> 24) & 1) && ((edx >> 22) & 1);
  if (__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) {
    f.avx512_bf16 = zmm_ok && ((eax >> 5) & 1);
  }
  // QUILL_DISABLE_AVX512=1 lets tests exercise the portable paths on this machine.
  if (EnvIsOne("QUILL_DISABLE_AVX512")) {
    f.avx512f = f.avx512bw = f.avx512vl = f.avx512_bf16 = f.avx512_vnni = false;
  }
  // Decided last: avx512f already says whether QUILL_DISABLE_AVX512 turned AVX-512 off.
  f.amx_bf16 =
      f.avx512f && amx_cpu && amx_os && !EnvIsOne("QUILL_DISABLE_AMX") && RequestAmxTileData();
  return f;
}

}  // namespace

const CpuFeatures& GetCpuFeatures() {
  static const CpuFeatures features = Detect();
  return features;
}

bool HasAvx512Bf16() {
  const CpuFeatures& f = GetCpuFeatures();
  return f.avx512f && f.avx512bw && f.avx512vl && f.avx512_bf16 && f.avx512_vnni;
}

}  // namespace quill::engine
