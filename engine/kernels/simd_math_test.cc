#include "engine/kernels/simd_math.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

#include "gtest/gtest.h"

namespace quill::engine::kernels::internal {
namespace {

// Attention asks for min(keys left, 8) lanes past the end of a tile, which is negative
// when a tile's key count mod 16 is 1..7 (every GQA model): that must be no lanes, not a
// shift by a negative amount (undefined; UBSan aborts on it).
TEST(TailMaskTest, CountsAtOrBelowZeroSelectNoLanes) {
  for (int n = -40; n <= 0; ++n) EXPECT_EQ(TailMask(n), 0) << n;
}

TEST(TailMaskTest, SelectsTheFirstNLanesUpToSixteen) {
  for (int n = 1; n < 16; ++n) EXPECT_EQ(TailMask(n), (1u << n) - 1) << n;
  for (int n = 16; n <= 64; ++n) EXPECT_EQ(TailMask(n), 0xffff) << n;
}

// Eight vectors of varied magnitudes and signs (sums whose rounding depends on the order),
// with infinities in some lanes of some rounds.
void FillVectors(std::mt19937& rng, bool with_infinities, float (&values)[8][16]) {
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-20, 20);
  for (auto& vector : values) {
    for (float& v : vector) v = std::ldexp(mantissa(rng), exponent(rng));
  }
  if (with_infinities) {
    std::uniform_int_distribution<int> vector(0, 7), lane(0, 15);
    const float inf = std::numeric_limits<float>::infinity();
    values[vector(rng)][lane(rng)] = -inf;
    values[vector(rng)][lane(rng)] = inf;
  }
}

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof(b));
  return b;
}

// Softmax's sums must keep their bits whether its heads are reduced one at a time or eight
// together (attention results may not depend on how heads are grouped).
QUILL_AVX512_TARGET void ExpectEightReductionsMatchOneAtATime(bool with_infinities) {
  std::mt19937 rng(with_infinities ? 7 : 11);
  for (int round = 0; round < 2000; ++round) {
    alignas(64) float values[8][16];
    FillVectors(rng, with_infinities, values);
    __m512 v[8];
    for (int j = 0; j < 8; ++j) v[j] = _mm512_load_ps(values[j]);
    float sums[8], maxes[8];
    ReduceAdd512x8(v, sums);
    ReduceMax512x8(v, maxes);
    for (int j = 0; j < 8; ++j) {
      const float sum = ReduceAdd512(v[j]);
      ASSERT_EQ(Bits(sums[j]), Bits(sum))
          << "round " << round << " vector " << j << ": " << sums[j] << " against " << sum;
      float max = values[j][0];
      for (float x : values[j]) max = std::max(max, x);
      ASSERT_EQ(maxes[j], max) << "round " << round << " vector " << j;
    }
  }
}

TEST(Reduce512x8Test, GivesEachVectorTheBitsOfReducingItAlone) {
  if (!UseAvx512()) GTEST_SKIP() << "no AVX-512";
  ExpectEightReductionsMatchOneAtATime(/*with_infinities=*/false);
  ExpectEightReductionsMatchOneAtATime(/*with_infinities=*/true);
}

}  // namespace
}  // namespace quill::engine::kernels::internal
