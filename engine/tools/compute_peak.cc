#include "engine/tools/compute_peak.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "engine/base/cpu_features.h"

// GCC 12's AVX-512 reduce intrinsics start from _mm512_undefined_*() and trip
// -Wuninitialized (GCC bug 105593); the values are fully defined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace quill::engine::tools {
namespace {

// Independent accumulators per thread: enough to cover the instruction's latency on both
// of a core's vector pipes (latency 4-6 cycles x 2 pipes).
constexpr int kChains = 12;
constexpr int64_t kIterationsPerCheck = 1 << 16;
// Read with every result so that the chains cannot be optimized away.
volatile float g_peak_sink = 0;

#define QUILL_PEAK_TARGET __attribute__((target("avx512f,avx512bw,avx512vnni,avx512bf16")))

// Runs kIterationsPerCheck x kChains instructions of `kind`; returns a value of the results.
template <DotKind kind>
QUILL_PEAK_TARGET float RunChains() {
  __m512 f[kChains];
  __m512i q[kChains];
  for (int i = 0; i < kChains; ++i) {
    f[i] = _mm512_set1_ps(static_cast<float>(i));
    q[i] = _mm512_set1_epi32(i);
  }
  __m512i a = _mm512_set1_epi32(0x3f803f80);  // bf16 pairs of 1.0, or u8/s8 quads
  __m512i b = _mm512_set1_epi32(0x00010001);
  // The FMA's own operands: as f32, b above is a denormal, which Intel cores take through a
  // microcode assist (~50x slower; AMD's do not), and a = 1.0019 grows the chains to
  // infinity. f = 0.5 f + 1 stays normal: it converges to 2.
  __m512 fa = _mm512_set1_ps(0.5f);
  __m512 fb = _mm512_set1_ps(1.0f);
  for (int64_t it = 0; it < kIterationsPerCheck; ++it) {
    asm volatile("" : "+v"(a), "+v"(b), "+v"(fa), "+v"(fb));  // not hoisted or folded
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) {
      if constexpr (kind == DotKind::kF32Fma) {
        f[i] = _mm512_fmadd_ps(f[i], fa, fb);
      } else if constexpr (kind == DotKind::kBf16Dot) {
        f[i] = _mm512_dpbf16_ps(f[i], reinterpret_cast<__m512bh>(a), reinterpret_cast<__m512bh>(b));
      } else {
        q[i] = _mm512_dpbusd_epi32(q[i], a, b);
      }
    }
  }
  float sum = 0;
  for (int i = 0; i < kChains; ++i) {
    sum += _mm512_reduce_add_ps(f[i]) + static_cast<float>(_mm512_reduce_add_epi32(q[i]));
  }
  return sum;
}

// Per kind, in DotKind's order: its name, and the operations of one zmm instruction (16 f32
// FMAs; 16 lanes x 2 bf16 products; 16 lanes x 4 u8 x s8 products; a multiply-add counts 2).
struct DotKindInfo {
  const char* name;
  double ops_per_instruction;
};
constexpr DotKindInfo kDotKinds[] = {{"f32 FMA", 32}, {"bf16 dot", 64}, {"int8 dot", 128}};

const DotKindInfo& InfoOf(DotKind kind) { return kDotKinds[static_cast<int>(kind)]; }

}  // namespace

const char* DotKindName(DotKind kind) { return InfoOf(kind).name; }

double MeasureComputePeak(DotKind kind, int reps, int millis) {
  const CpuFeatures& cpu = GetCpuFeatures();
  const bool supported =
      cpu.avx512f && cpu.avx512bw &&
      (kind == DotKind::kF32Fma || (kind == DotKind::kBf16Dot && cpu.avx512_bf16) ||
       (kind == DotKind::kInt8Dot && cpu.avx512_vnni));
  if (!supported || reps < 1 || millis < 1) return 0;
  const auto budget = std::chrono::milliseconds(millis);
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    int64_t instructions = 0;
    float sink = 0;
    const auto start = std::chrono::steady_clock::now();
    // Every thread runs until the budget has passed; the slowest one ends the run.
#pragma omp parallel reduction(+ : instructions, sink)
    {
      while (std::chrono::steady_clock::now() - start < budget) {
        sink += kind == DotKind::kF32Fma    ? RunChains<DotKind::kF32Fma>()
                : kind == DotKind::kBf16Dot ? RunChains<DotKind::kBf16Dot>()
                                            : RunChains<DotKind::kInt8Dot>();
        instructions += kIterationsPerCheck * kChains;
      }
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    g_peak_sink = sink;
    best = std::max(best, instructions * InfoOf(kind).ops_per_instruction / seconds);
  }
  return best;
}

}  // namespace quill::engine::tools
