#include "engine/kernels/kv_element.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "engine/base/float16.h"
#include "engine/kernels/kernel_test_util.h"
#include "gtest/gtest.h"

namespace quill::engine::kernels {
namespace {

using testing::Path;
using testing::PathName;
using testing::PathTest;
using testing::RandomVector;

class KvElementTest : public PathTest {};

TEST(KvElementBytesTest, SizesAndNames) {
  EXPECT_EQ(KvElementBytes(KvElement::kF32), 4);
  EXPECT_EQ(KvElementBytes(KvElement::kF16), 2);
  EXPECT_STREQ(KvElementName(KvElement::kF32), "f32");
  EXPECT_STREQ(KvElementName(KvElement::kF16), "f16");
}

// Values the f16 encoding treats differently: a tie (1 + 2^-11 rounds to even), the largest
// finite value and beyond it (saturated, not infinite), infinities, subnormals, signed zero.
std::vector<float> EdgeValues() {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  return {0.0f,      -0.0f, 1.0f,  -1.0f, 1.0f + 1.0f / 2048, 65504.0f, 65519.0f, 65520.0f,
          -70000.0f, 1e30f, -kInf, kInf,  5.96e-8f,           1e-9f,    -3.0e-5f, 6.1e-5f,
          1.0f / 3};
}

// f16 stores round to nearest even and saturate at +-65504, at every length and offset
// (the vector path masks the tail).
TEST_P(KvElementTest, F16RoundsToNearestEvenAndSaturates) {
  std::vector<float> values = EdgeValues();
  const std::vector<float> random = RandomVector(100, 3, -300.0f, 300.0f);
  values.insert(values.end(), random.begin(), random.end());
  for (int64_t n : {int64_t{1}, int64_t{15}, int64_t{16}, int64_t{17}, int64_t{117}}) {
    for (int64_t offset : {int64_t{0}, int64_t{3}}) {
      std::vector<uint16_t> arena(offset + n + 1, 0xABCD);
      StoreKvRow(values.data(), n, KvElement::kF16, arena.data(), offset);
      for (int64_t i = 0; i < n; ++i) {
        const float clamped = std::fmin(std::fmax(values[i], -65504.0f), 65504.0f);
        ASSERT_EQ(arena[offset + i], FloatToFp16(clamped)) << "n " << n << " value " << values[i];
        ASSERT_TRUE(std::isfinite(Fp16ToFloat(arena[offset + i]))) << values[i];
      }
      EXPECT_EQ(arena[offset + n], 0xABCD) << "wrote past the row";
      if (offset > 0) {
        EXPECT_EQ(arena[offset - 1], 0xABCD) << "wrote before the row";
      }
    }
  }
}

TEST_P(KvElementTest, F16KeepsNaN) {
  const std::vector<float> row(17, std::nanf(""));
  std::vector<uint16_t> arena(17);
  StoreKvRow(row.data(), 17, KvElement::kF16, arena.data(), 0);
  for (uint16_t h : arena) EXPECT_TRUE(std::isnan(Fp16ToFloat(h)));
}

TEST_P(KvElementTest, F32IsACopy) {
  std::vector<float> values = EdgeValues();
  values.push_back(std::nanf(""));
  std::vector<float> arena(values.size() + 5, 7.0f);
  StoreKvRow(values.data(), static_cast<int64_t>(values.size()), KvElement::kF32, arena.data(), 5);
  EXPECT_EQ(std::memcmp(arena.data() + 5, values.data(), values.size() * 4), 0);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(arena[i], 7.0f);
}

// A strided store (a key's column in a transposed block) writes the values a row store
// writes, `stride` elements apart, and nothing in between, for both elements.
TEST_P(KvElementTest, StridedStoreWritesTheRowsValuesApart) {
  std::vector<float> values = EdgeValues();
  const std::vector<float> random = RandomVector(100, 4, -300.0f, 300.0f);
  values.insert(values.end(), random.begin(), random.end());
  values.push_back(std::nanf(""));
  for (int64_t n : {int64_t{1}, int64_t{16}, int64_t{17}, int64_t{118}}) {
    for (int64_t stride : {int64_t{1}, int64_t{8}, int64_t{16}}) {
      const int64_t offset = 3;
      std::vector<uint16_t> row16(n), arena16(offset + n * stride + 1, 0xABCD);
      StoreKvRow(values.data(), n, KvElement::kF16, row16.data(), 0);
      StoreKvStrided(values.data(), n, KvElement::kF16, arena16.data(), offset, stride);
      std::vector<float> arena32(offset + n * stride + 1, 7.0f);
      StoreKvStrided(values.data(), n, KvElement::kF32, arena32.data(), offset, stride);
      for (int64_t e = 0; e < static_cast<int64_t>(arena16.size()); ++e) {
        const int64_t i = (e - offset) / stride;
        if (e >= offset && (e - offset) % stride == 0 && i < n) {
          ASSERT_EQ(arena16[e], row16[i]) << "n " << n << " stride " << stride << " i " << i;
          ASSERT_EQ(std::memcmp(&arena32[e], &values[i], 4), 0) << values[i];
        } else {
          ASSERT_EQ(arena16[e], 0xABCD) << "n " << n << " stride " << stride << " element " << e;
          ASSERT_EQ(arena32[e], 7.0f) << "n " << n << " stride " << stride << " element " << e;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, KvElementTest, ::testing::Values(Path::kAvx512, Path::kPortable),
                         [](const ::testing::TestParamInfo<Path>& info) {
                           return std::string(PathName(info.param));
                         });

}  // namespace
}  // namespace quill::engine::kernels
