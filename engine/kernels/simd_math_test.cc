#include "engine/kernels/simd_math.h"

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

}  // namespace
}  // namespace quill::engine::kernels::internal
