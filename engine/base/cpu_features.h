#pragma once

namespace quill::engine {

// What the CPU we run on supports, read once with cpuid. Kernels that need AVX-512 are
// compiled with per-function target attributes and are only called when these say so.
struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512_bf16 = false;
  bool avx512_vnni = false;
  // AMX tiles with bf16 dot products, usable: the CPU has them, the OS saves their state,
  // and Linux granted this process the tile data permission (arch_prctl). Off with
  // QUILL_DISABLE_AMX=1 (or QUILL_DISABLE_AVX512=1), so the AVX-512 paths can be measured
  // and tested on an AMX machine. (oneDNN makes its own choice: ONEDNN_MAX_CPU_ISA.)
  bool amx_bf16 = false;
};

const CpuFeatures& GetCpuFeatures();

// True when every AVX-512 extension used by Quill's fast kernels is present
// (F, BW, VL, BF16, VNNI).
bool HasAvx512Bf16();

}  // namespace quill::engine
