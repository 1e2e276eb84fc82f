#include "engine/tools/compute_peak.h"

#include <omp.h>

#include "engine/base/cpu_features.h"
#include "gtest/gtest.h"

namespace quill::engine::tools {
namespace {

// The test's own statement of which kinds run and how many operations an instruction does,
// not the library's: a miscount there must show here.
bool Supported(DotKind kind) {
  const CpuFeatures& cpu = GetCpuFeatures();
  if (!cpu.avx512f || !cpu.avx512bw) return false;
  return kind == DotKind::kF32Fma || (kind == DotKind::kBf16Dot && cpu.avx512_bf16) ||
         (kind == DotKind::kInt8Dot && cpu.avx512_vnni);
}

double OpsPerInstruction(DotKind kind) {
  return kind == DotKind::kF32Fma ? 32 : kind == DotKind::kBf16Dot ? 64 : 128;
}

TEST(ComputePeak, NothingToMeasureGivesZero) {
  EXPECT_EQ(MeasureComputePeak(DotKind::kF32Fma, /*reps=*/0), 0);
  EXPECT_EQ(MeasureComputePeak(DotKind::kF32Fma, /*reps=*/1, /*millis=*/0), 0);
}

// Between 0.05 and 20 zmm instructions per nanosecond per thread: no core issues more than
// 4 vector instructions a cycle at 5 GHz (more would mean the chains were folded away or
// the operations miscounted), and even a sanitizer build on a shared host runs
// register-only chains far above the floor.
TEST(ComputePeak, EverySupportedKindRunsAtAPlausibleRate) {
  const int threads = omp_get_max_threads();
  for (DotKind kind : {DotKind::kF32Fma, DotKind::kBf16Dot, DotKind::kInt8Dot}) {
    SCOPED_TRACE(DotKindName(kind));
    const double peak = MeasureComputePeak(kind, /*reps=*/2, /*millis=*/10);
    if (!Supported(kind)) {
      EXPECT_EQ(peak, 0);
      continue;
    }
    const double instructions_per_ns = peak / OpsPerInstruction(kind) / threads / 1e9;
    EXPECT_GT(instructions_per_ns, 0.05);
    EXPECT_LT(instructions_per_ns, 20.0);
  }
}

// An int8 dot instruction does 4x the multiply-adds of an f32 FMA; no CPU with VNNI runs
// it at a quarter of the FMA's rate, so its peak in operations must be the higher.
TEST(ComputePeak, Int8DotOutrunsF32FmaInOperations) {
  if (!Supported(DotKind::kInt8Dot)) GTEST_SKIP() << "no AVX512-VNNI on this CPU";
  EXPECT_GT(MeasureComputePeak(DotKind::kInt8Dot, 3, 10),
            MeasureComputePeak(DotKind::kF32Fma, 3, 10));
}

}  // namespace
}  // namespace quill::engine::tools
