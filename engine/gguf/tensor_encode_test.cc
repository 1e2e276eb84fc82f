#include "engine/gguf/tensor_encode.h"

#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace quill::engine {
namespace {

float FromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// The F16C instructions (part of x86-64-v3) are the oracle for the scalar conversions.
uint16_t HardwareF16(float f) { return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }

TEST(TensorEncodeTest, F16MatchesHardwareOnEdgeCases) {
  const float cases[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.1f, 65504.0f, 65519.99f, 65520.0f, 1e10f,
                         -1e10f, 6.1035156e-05f /* 2^-14 */, 6.0e-05f, 5.9604645e-08f /* 2^-24 */,
                         2.9802322e-08f /* 2^-25: tie to zero */, 2.9802326e-08f, 1e-30f,
                         std::numeric_limits<float>::infinity(),
                         -std::numeric_limits<float>::infinity(), 1.00048828125f /* tie */,
                         1.00146484375f /* tie, odd */, 3.0517578e-05f};
  for (float f : cases) EXPECT_EQ(FloatToFp16(f), HardwareF16(f)) << f;
  EXPECT_EQ(FloatToFp16(1.0f), 0x3C00);
  EXPECT_EQ(FloatToFp16(65504.0f), 0x7BFF);
  EXPECT_EQ(FloatToFp16(65520.0f), 0x7C00);
  EXPECT_EQ(FloatToFp16(-2.0f), 0xC000);
  const uint16_t nan = FloatToFp16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x03FF, 0);
}

TEST(TensorEncodeTest, F16MatchesHardwareOnRandomBitPatterns) {
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    // Bias towards the half range: exponents 96..144 cover subnormals to overflow.
    uint32_t bits = rng();
    if (i % 2 == 0) bits = (bits & 0x807FFFFF) | ((96u + rng() % 49) << 23);
    const float f = FromBits(bits);
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToFp16(f), HardwareF16(f)) << std::hex << bits;
  }
}

TEST(TensorEncodeTest, F16ToFloatMatchesHardwareForAllValues) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float expected = _cvtsh_ss(static_cast<uint16_t>(h));
    const float got = Fp16ToFloat(static_cast<uint16_t>(h));
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(got)) << h;
    } else {
      ASSERT_EQ(got, expected) << h;
      ASSERT_EQ(std::signbit(got), std::signbit(expected)) << h;
    }
  }
}

TEST(TensorEncodeTest, Bf16RoundsToNearestEven) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBf16(-2.0f), 0xC000);
  EXPECT_EQ(FloatToBf16(FromBits(0x3F808000)), 0x3F80);  // tie, even stays
  EXPECT_EQ(FloatToBf16(FromBits(0x3F818000)), 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(FloatToBf16(FromBits(0x3F808001)), 0x3F81);  // above the tie
  EXPECT_EQ(FloatToBf16(FromBits(0x7F7FFFFF)), 0x7F80);  // max float rounds to inf
  const uint16_t nan = FloatToBf16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(std::isnan(Bf16ToFloat(nan)));
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(FromBits(0x7F800001)))));  // sNaN stays NaN
  EXPECT_EQ(Bf16ToFloat(0x4049), 3.140625f);
}

TEST(TensorEncodeTest, EncodesF32AndF16Bytes) {
  std::vector<uint8_t> out = {0xEE};  // appends
  ASSERT_TRUE(EncodeTensor(std::vector<float>{1.0f, -2.0f}, GgmlType::kF16, &out).ok());
  EXPECT_THAT(out, ::testing::ElementsAre(0xEE, 0x00, 0x3C, 0x00, 0xC0));
  out.clear();
  ASSERT_TRUE(EncodeTensor(std::vector<float>{1.0f}, GgmlType::kF32, &out).ok());
  EXPECT_THAT(out, ::testing::ElementsAre(0x00, 0x00, 0x80, 0x3F));
  out.clear();
  ASSERT_TRUE(EncodeTensor(std::vector<float>{1.0f}, GgmlType::kBF16, &out).ok());
  EXPECT_THAT(out, ::testing::ElementsAre(0x80, 0x3F));
}

TEST(TensorEncodeTest, Q8_0Block) {
  // Values -16..15: max |x| = 16, scale 16/127, q = round(x * 127 / 16).
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(i - 16);
  std::vector<uint8_t> out;
  ASSERT_TRUE(EncodeTensor(x, GgmlType::kQ8_0, &out).ok());
  ASSERT_EQ(out.size(), 34u);
  uint16_t scale_bits;
  std::memcpy(&scale_bits, out.data(), 2);
  EXPECT_EQ(scale_bits, HardwareF16(16.0f / 127.0f));
  const int8_t* q = reinterpret_cast<const int8_t*>(out.data() + 2);
  EXPECT_EQ(q[0], -127);  // -16
  EXPECT_EQ(q[16], 0);    // 0
  EXPECT_EQ(q[17], 8);    // 1 * 7.9375 = 7.94
  EXPECT_EQ(q[18], 16);   // 15.875 -> 16
  EXPECT_EQ(q[19], 24);   // 23.81 -> 24
  EXPECT_EQ(q[20], 32);   // 31.75 -> 32
  EXPECT_EQ(q[31], 119);  // 15 * 7.9375 = 119.06
  EXPECT_EQ(q[1], -119);  // -15
}

TEST(TensorEncodeTest, Q8_0ZeroBlockAndReconstruction) {
  std::vector<float> x(64, 0.0f);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (int i = 32; i < 64; ++i) x[i] = normal(rng);
  std::vector<uint8_t> out;
  ASSERT_TRUE(EncodeTensor(x, GgmlType::kQ8_0, &out).ok());
  ASSERT_EQ(out.size(), 68u);
  for (int i = 0; i < 34; ++i) EXPECT_EQ(out[i], 0) << i;  // zero scale, zero values
  uint16_t scale_bits;
  std::memcpy(&scale_bits, out.data() + 34, 2);
  const float scale = Fp16ToFloat(scale_bits);
  float amax = 0;
  for (int i = 32; i < 64; ++i) amax = std::max(amax, std::fabs(x[i]));
  EXPECT_NEAR(scale, amax / 127.0f, amax / 127.0f * 1e-3f);
  for (int i = 32; i < 64; ++i) {
    const float back = scale * static_cast<int8_t>(out[36 + (i - 32)]);
    EXPECT_NEAR(back, x[i], scale * 0.5f + amax * 1e-3f) << i;
  }
}

TEST(TensorEncodeTest, Errors) {
  std::vector<uint8_t> out;
  EXPECT_EQ(EncodeTensor(std::vector<float>(31), GgmlType::kQ8_0, &out).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeTensor(std::vector<float>(32), GgmlType::kQ4_K, &out).code(),
            absl::StatusCode::kInvalidArgument);  // a Q4_K block holds 256 values
  EXPECT_EQ(EncodeTensor(std::vector<float>(256), GgmlType::kQ2_K, &out).code(),
            absl::StatusCode::kInvalidArgument);  // not written by Quill
  std::vector<float> nan(32, 0.0f);
  nan[7] = std::nanf("");
  EXPECT_EQ(EncodeTensor(nan, GgmlType::kQ4_0, &out).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(out.empty());
}

// Each block type appends whole blocks of its size (the contents are quant_test's job).
TEST(TensorEncodeTest, BlockTypesAppendTheirBlockSizes) {
  const struct {
    GgmlType type;
    size_t bytes_per_256;
  } cases[] = {{GgmlType::kQ4_0, 8 * 18}, {GgmlType::kQ4_1, 8 * 20}, {GgmlType::kQ5_0, 8 * 22},
               {GgmlType::kQ5_1, 8 * 24}, {GgmlType::kQ8_0, 8 * 34}, {GgmlType::kQ4_K, 144},
               {GgmlType::kQ5_K, 176},    {GgmlType::kQ6_K, 210}};
  std::vector<float> x(512);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.1f * i);
  for (const auto& c : cases) {
    std::vector<uint8_t> out = {1, 2, 3};
    ASSERT_TRUE(EncodeTensor(x, c.type, &out).ok()) << GgmlTypeName(c.type);
    EXPECT_EQ(out.size(), 3 + 2 * c.bytes_per_256) << GgmlTypeName(c.type);
    EXPECT_EQ(out[0], 1);
  }
}

}  // namespace
}  // namespace quill::engine
