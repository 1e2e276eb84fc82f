#include "engine/kernels/kv_element.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "engine/base/cpu_features.h"
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
  EXPECT_EQ(KvElementBytes(KvElement::kQ8), 1);
  EXPECT_STREQ(KvElementName(KvElement::kQ8), "q8");
  EXPECT_EQ(KvRowBytes(KvElement::kF32, 64), 256);
  EXPECT_EQ(KvRowBytes(KvElement::kF16, 64), 128);
  EXPECT_EQ(KvRowBytes(KvElement::kQ8, 64), 68);  // 64 codes and an f32 scale
  EXPECT_EQ(KvElementBytes(KvElement::kBf16), 2);
  EXPECT_STREQ(KvElementName(KvElement::kBf16), "bf16");
  EXPECT_EQ(KvRowBytes(KvElement::kBf16, 64), 128);
  for (const char* name : {"f32", "f16", "q8", "bf16"}) {
    KvElement e;
    ASSERT_TRUE(KvElementFromName(name, &e)) << name;
    EXPECT_STREQ(KvElementName(e), name);
  }
  KvElement e;
  EXPECT_FALSE(KvElementFromName("bf8", &e));
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

// A q8 row: scale = max|x| / 127 (x clamped to +-65504 first), codes round(x / scale) in
// [-127, 127] with the largest magnitude at +-127, each value within half a step of
// code * scale; rows of every length (the vector path masks its tail).
TEST_P(KvElementTest, Q8RowsTakeTheNearestCodeOfTheirScale) {
  for (int n : {1, 4, 15, 16, 17, 64, 100, 256}) {
    for (float range : {1.0f, 300.0f, 1e-3f}) {
      const std::vector<float> x = RandomVector(n, n * 7 + 1, -range, range);
      std::vector<int8_t> codes(n + 1, 99);
      const float scale = QuantizeRowQ8(x.data(), n, codes.data());
      float max_abs = 0.0f;
      for (float v : x) max_abs = std::fmax(max_abs, std::fabs(v));
      ASSERT_EQ(scale, max_abs / 127.0f) << "n " << n;
      bool at_limit = false;
      for (int i = 0; i < n; ++i) {
        ASSERT_GE(codes[i], -127);
        ASSERT_LE(codes[i], 127);
        ASSERT_LE(std::fabs(codes[i] * scale - x[i]), scale * 0.5f * 1.0001f)
            << "n " << n << " value " << x[i] << " code " << int{codes[i]};
        at_limit |= codes[i] == 127 || codes[i] == -127;
      }
      EXPECT_TRUE(at_limit);
      EXPECT_EQ(codes[n], 99) << "wrote past the row";
    }
  }
}

TEST_P(KvElementTest, Q8ZerosNaNAndInfinities) {
  std::vector<int8_t> codes(17, 5);
  const std::vector<float> zeros(17, 0.0f);
  EXPECT_EQ(QuantizeRowQ8(zeros.data(), 17, codes.data()), 0.0f);
  for (int8_t c : codes) EXPECT_EQ(c, 0);

  // So tiny that 127 / max|x| overflows (subnormals among them): zeros, not garbage codes.
  std::vector<float> tiny = RandomVector(17, 8, -1e-38f, 1e-38f);
  tiny[2] = 1.4e-45f;
  codes.assign(17, 5);
  EXPECT_EQ(QuantizeRowQ8(tiny.data(), 17, codes.data()), 0.0f);
  for (int8_t c : codes) EXPECT_EQ(c, 0);
  std::vector<float> small = RandomVector(17, 8, -1e-20f, 1e-20f);
  EXPECT_GT(QuantizeRowQ8(small.data(), 17, codes.data()), 0.0f);  // still quantized

  std::vector<float> with_nan = RandomVector(17, 9);
  with_nan[16] = std::nanf("");
  EXPECT_TRUE(std::isnan(QuantizeRowQ8(with_nan.data(), 17, codes.data())));

  // Infinities saturate as f16 does: the scale stays finite.
  std::vector<float> with_inf = RandomVector(17, 10);
  with_inf[3] = std::numeric_limits<float>::infinity();
  with_inf[5] = -std::numeric_limits<float>::infinity();
  const float scale = QuantizeRowQ8(with_inf.data(), 17, codes.data());
  EXPECT_EQ(scale, 65504.0f / 127.0f);
  EXPECT_EQ(codes[3], 127);
  EXPECT_EQ(codes[5], -127);
}

// Both paths give the same codes and scale bits: a cache written on one machine reads the
// same on another, and the AVX-512 and portable attention quantize queries alike.
TEST(KvElementQ8Test, PathsAgreeBitForBit) {
  if (!HasAvx512Bf16()) GTEST_SKIP() << "CPU lacks AVX-512 (or QUILL_DISABLE_AVX512=1)";
  for (int n : {3, 16, 64, 129}) {
    // Values on ties of the rounding too (multiples of half a step).
    std::vector<float> x = RandomVector(n, n, -5.0f, 5.0f);
    for (int i = 0; i < n; i += 3) x[i] = (i % 7 - 3) * 0.5f * (5.0f / 127.0f);
    x[0] = 5.0f;
    std::vector<int8_t> fast(n), portable(n);
    const float fast_scale = QuantizeRowQ8(x.data(), n, fast.data());
    internal::force_portable_for_testing = true;
    const float portable_scale = QuantizeRowQ8(x.data(), n, portable.data());
    internal::force_portable_for_testing = false;
    EXPECT_EQ(std::memcmp(&fast_scale, &portable_scale, 4), 0) << "n " << n;
    EXPECT_EQ(fast, portable) << "n " << n;
  }
}

constexpr int64_t kBlock = 2;  // the block the layout tests walk

// Walks block kBlock of `layout`'s K (keys) or V: every index of KV head kv's dimension d in
// the block's slot i lies in that head's part of the block (its head_dim x block_size
// values), and check(kv, i, d, at) looks at it. Returns how many indices landed on each
// element of the block.
std::vector<int> WalkBlock(const KvLayout& layout, bool keys,
                           const std::function<void(int kv, int i, int d, int64_t at)>& check) {
  const int bs = layout.block_size;
  const int64_t block_begin = kBlock * bs * layout.row();
  std::vector<int> seen(bs * layout.row(), 0);
  for (int kv = 0; kv < layout.num_kv_heads; ++kv) {
    const int64_t part = block_begin + kv * layout.head_stride();
    for (int i = 0; i < bs; ++i) {
      const int64_t slot = kBlock * bs + i;
      for (int d = 0; d < layout.head_dim; ++d) {
        const int64_t at = keys ? layout.KeyIndex(slot, kv, d) : layout.ValueIndex(slot, kv, d);
        EXPECT_GE(at, part);
        EXPECT_LT(at, part + int64_t{bs} * layout.head_dim);
        if (at < block_begin || at >= block_begin + static_cast<int64_t>(seen.size())) continue;
        ++seen[at - block_begin];
        check(kv, i, d, at);
      }
    }
  }
  return seen;
}

bool EachOnce(const std::vector<int>& seen) {
  return std::count(seen.begin(), seen.end(), 1) == static_cast<int64_t>(seen.size());
}

// The q8 layout: in each KV head's part of a block, keys are [head_dim / 4][block_size][4]
// (a slot's 4 dimensions side by side, consecutive slots 4 bytes apart), values
// [block_size][head_dim], then the part's block_size f32 scales; together they fill the
// part exactly once.
TEST(KvLayoutQ8Test, EachKvHeadsPartHoldsItsCodesThenItsScales) {
  for (const KvLayout& layout :
       {KvLayout{16, 4, 64, KvElement::kQ8}, KvLayout{32, 2, 8, KvElement::kQ8},
        KvLayout{16, 1, 4, KvElement::kQ8}}) {
    const int bs = layout.block_size, hd = layout.head_dim;
    ASSERT_EQ(layout.head_stride(), int64_t{bs} * (hd + 4));
    for (bool keys : {true, false}) {
      SCOPED_TRACE(std::string(keys ? "K" : "V") + " block_size " + std::to_string(bs));
      std::vector<int> seen = WalkBlock(layout, keys, [&](int kv, int i, int d, int64_t at) {
        const int64_t slot = kBlock * bs + i;
        if (keys && d % 4 > 0) {
          EXPECT_EQ(at - layout.KeyIndex(slot, kv, d - 1), 1);
        }
        if (keys && i > 0) {
          EXPECT_EQ(at - layout.KeyIndex(slot - 1, kv, d), 4);
        }
      });
      for (int kv = 0; kv < layout.num_kv_heads; ++kv) {
        const int64_t part = kBlock * bs * layout.row() + kv * layout.head_stride();
        for (int i = 0; i < bs; ++i) {
          const int64_t scale = layout.ScaleIndex(kBlock * bs + i, kv);
          EXPECT_EQ(scale, part + int64_t{bs} * hd + 4 * i);
          for (int b = 0; b < 4; ++b) ++seen[scale + b - kBlock * bs * layout.row()];
        }
      }
      EXPECT_TRUE(EachOnce(seen));
    }
  }
}

// The bf16 layout: in each KV head's part of a block, keys are [head_dim / 2][block_size][2]
// (a slot's dimensions 2e and 2e+1 side by side, consecutive slots 2 elements apart) and
// values [block_size / 2][head_dim][2] (the values of slots 2j and 2j+1 interleaved,
// dimension by dimension); each fills its part exactly once.
TEST(KvLayoutBf16Test, KeysPairDimensionsAndValuesPairSlots) {
  for (const KvLayout& layout :
       {KvLayout{16, 4, 64, KvElement::kBf16}, KvLayout{32, 2, 8, KvElement::kBf16},
        KvLayout{16, 1, 2, KvElement::kBf16}, KvLayout{16, 3, 24, KvElement::kBf16}}) {
    const int bs = layout.block_size, hd = layout.head_dim;
    ASSERT_EQ(layout.head_stride(), int64_t{bs} * hd);
    for (bool keys : {true, false}) {
      SCOPED_TRACE(std::string(keys ? "K" : "V") + " block_size " + std::to_string(bs) +
                   " head_dim " + std::to_string(hd));
      const std::vector<int> seen = WalkBlock(layout, keys, [&](int kv, int i, int d, int64_t at) {
        const int64_t slot = kBlock * bs + i;
        if (keys) {
          if (d % 2 == 1) {
            EXPECT_EQ(at - layout.KeyIndex(slot, kv, d - 1), 1);
          }
          if (i > 0) {
            EXPECT_EQ(at - layout.KeyIndex(slot - 1, kv, d), 2);
          }
          if (d >= 2) {
            EXPECT_EQ(at - layout.KeyIndex(slot, kv, d - 2), 2 * bs);
          }
        } else {
          if (i % 2 == 1) {
            EXPECT_EQ(at - layout.ValueIndex(slot - 1, kv, d), 1);
          }
          if (d > 0) {
            EXPECT_EQ(at - layout.ValueIndex(slot, kv, d - 1), 2);
          }
          if (i >= 2) {
            EXPECT_EQ(at - layout.ValueIndex(slot - 2, kv, d), 2 * hd);
          }
        }
      });
      EXPECT_TRUE(EachOnce(seen));
    }
  }
}

// StoreKey / StoreValue write a bf16 row where the layout puts it and nothing else, rounded
// to nearest even, NaN kept, and values past bf16's range saturated at its largest finite
// value (an infinite key would make every later softmax over it NaN).
TEST(KvElementBf16Test, StoreRoundsToNearestEvenSaturatesAndWritesOnlyItsSlot) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const float nan = std::nanf("");
  std::vector<float> row = {
      1.0f + 1.0f / 256, 1.0f + 3.0f / 256, -1.0f / 3, 3.4e38f, -kInf, kInf, nan, 0.0f};
  const std::vector<float> random = RandomVector(16, 32, -3.0f, 3.0f);
  row.insert(row.end(), random.begin(), random.end());
  const int hd = static_cast<int>(row.size());
  const KvLayout layout{16, 3, hd, KvElement::kBf16};
  const int64_t elements = 4 * 16 * layout.row();
  for (const int64_t slot : {int64_t{36}, int64_t{37}}) {  // both halves of a value pair
    std::vector<uint16_t> k(elements, 0xABCD), v(elements, 0xABCD);
    StoreKey(row.data(), layout, k.data(), slot, 2);
    StoreValue(row.data(), layout, v.data(), slot, 2);
    std::vector<bool> key_written(elements, false), value_written(elements, false);
    for (int d = 0; d < hd; ++d) {
      SCOPED_TRACE("slot " + std::to_string(slot) + " d " + std::to_string(d));
      const uint16_t got_k = k[layout.KeyIndex(slot, 2, d)];
      const uint16_t got_v = v[layout.ValueIndex(slot, 2, d)];
      EXPECT_EQ(got_k, got_v);
      key_written[layout.KeyIndex(slot, 2, d)] = true;
      value_written[layout.ValueIndex(slot, 2, d)] = true;
      if (std::isnan(row[d])) {
        EXPECT_TRUE(std::isnan(Bf16ToFloat(got_k)));
        continue;
      }
      const float clamped = std::fmin(std::fmax(row[d], -3.38953139e38f), 3.38953139e38f);
      EXPECT_EQ(got_k, FloatToBf16(clamped));
      EXPECT_TRUE(std::isfinite(Bf16ToFloat(got_k)));
    }
    // 1 + 2^-8 is a tie between 1 and 1 + 2^-7: to even (1); 1 + 3 * 2^-8 up to 1 + 2^-6.
    EXPECT_EQ(Bf16ToFloat(k[layout.KeyIndex(slot, 2, 0)]), 1.0f);
    EXPECT_EQ(Bf16ToFloat(k[layout.KeyIndex(slot, 2, 1)]), 1.0f + 1.0f / 64);
    for (int64_t e = 0; e < elements; ++e) {
      if (!key_written[e]) {
        ASSERT_EQ(k[e], 0xABCD) << "K element " << e;
      }
      if (!value_written[e]) {
        ASSERT_EQ(v[e], 0xABCD) << "V element " << e;
      }
    }
  }
}

// StoreKey / StoreValue write a q8 row's codes (keys + 128) and scale where the layout puts
// them and nothing else; for f32 and f16 they write what StoreKvStrided / StoreKvRow write.
TEST_P(KvElementTest, StoreKeyAndValueWriteWhereTheLayoutSays) {
  const std::vector<float> row = RandomVector(8, 31, -3.0f, 3.0f);
  std::vector<int8_t> codes(8);
  const float scale = QuantizeRowQ8(row.data(), 8, codes.data());
  const KvLayout q8{16, 2, 8, KvElement::kQ8};
  const int64_t bytes = 3 * 16 * q8.row();
  std::vector<uint8_t> k(bytes, 0xEE), v(bytes, 0xEE);
  const int64_t slot = 37;
  StoreKey(row.data(), q8, k.data(), slot, 1);
  StoreValue(row.data(), q8, v.data(), slot, 1);
  std::vector<bool> written(bytes, false);
  for (int d = 0; d < 8; ++d) {
    EXPECT_EQ(k[q8.KeyIndex(slot, 1, d)], codes[d] + 128);
    EXPECT_EQ(static_cast<int8_t>(v[q8.ValueIndex(slot, 1, d)]), codes[d]);
    written[q8.KeyIndex(slot, 1, d)] = true;
  }
  float k_scale, v_scale;
  std::memcpy(&k_scale, k.data() + q8.ScaleIndex(slot, 1), 4);
  std::memcpy(&v_scale, v.data() + q8.ScaleIndex(slot, 1), 4);
  EXPECT_EQ(k_scale, scale);
  EXPECT_EQ(v_scale, scale);
  for (int64_t e = 0; e < bytes; ++e) {
    const bool key_byte =
        written[e] || (e >= q8.ScaleIndex(slot, 1) && e < q8.ScaleIndex(slot, 1) + 4);
    if (!key_byte) {
      ASSERT_EQ(k[e], 0xEE) << "K byte " << e;
    }
    const bool value_byte = (e >= q8.ValueIndex(slot, 1, 0) && e < q8.ValueIndex(slot, 1, 8)) ||
                            (e >= q8.ScaleIndex(slot, 1) && e < q8.ScaleIndex(slot, 1) + 4);
    if (!value_byte) {
      ASSERT_EQ(v[e], 0xEE) << "V byte " << e;
    }
  }

  const KvLayout f16{16, 2, 8, KvElement::kF16};
  std::vector<uint16_t> k16(3 * 16 * f16.row(), 0), strided(k16.size(), 0);
  StoreKey(row.data(), f16, k16.data(), slot, 1);
  StoreKvStrided(row.data(), 8, KvElement::kF16, strided.data(), f16.KeyIndex(slot, 1, 0), 16);
  EXPECT_EQ(k16, strided);
  std::vector<uint16_t> v16(k16.size(), 0), plain(k16.size(), 0);
  StoreValue(row.data(), f16, v16.data(), slot, 1);
  StoreKvRow(row.data(), 8, KvElement::kF16, plain.data(), f16.ValueIndex(slot, 1, 0));
  EXPECT_EQ(v16, plain);
}

INSTANTIATE_TEST_SUITE_P(Paths, KvElementTest, ::testing::Values(Path::kAvx512, Path::kPortable),
                         [](const ::testing::TestParamInfo<Path>& info) {
                           return std::string(PathName(info.param));
                         });

}  // namespace
}  // namespace quill::engine::kernels
