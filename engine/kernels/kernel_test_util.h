#pragma once

// Helpers shared by the ops and attention tests.

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "engine/kernels/simd_math.h"
#include "gtest/gtest.h"

namespace quill::engine::kernels::testing {

inline std::vector<float> RandomVector(int64_t n, uint64_t seed, float lo = -1.0f,
                                       float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// ||got - want|| / ||want|| (absolute when want is zero).
inline double RelativeL2(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0.0;
  double norm = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    norm += static_cast<double>(want[i]) * want[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

// The largest |got - want|; infinite where exactly one of the two is NaN (std::max would
// skip a NaN difference, and a NaN that leaked into an output would pass any bound).
inline double MaxAbsDiff(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(got[i]) != std::isnan(want[i])) return std::numeric_limits<double>::infinity();
    if (std::isnan(got[i])) continue;
    worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]));
  }
  return worst;
}

// Which implementation a parameterized test runs.
enum class Path { kAvx512, kPortable };

inline const char* PathName(Path p) { return p == Path::kAvx512 ? "Avx512" : "Portable"; }

// Selects the path for the test's lifetime; skips the AVX-512 one on CPUs without it.
class PathTest : public ::testing::TestWithParam<Path> {
 protected:
  void SetUp() override {
    if (GetParam() == Path::kAvx512 && !HasAvx512Bf16()) {
      GTEST_SKIP() << "CPU lacks AVX-512 (or QUILL_DISABLE_AVX512=1)";
    }
    internal::force_portable_for_testing = GetParam() == Path::kPortable;
  }
  void TearDown() override { internal::force_portable_for_testing = false; }
};

}  // namespace quill::engine::kernels::testing
