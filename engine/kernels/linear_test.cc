#include "engine/kernels/linear.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/base/cpu_features.h"
#include "engine/kernels/linear_internal.h"
#include "engine/kernels/linear_onednn.h"
#include "engine/kernels/linear_qblock.h"
#include "engine/kernels/reference/reference_kernels.h"
#include "engine/quant/block_layout.h"
#include "engine/quant/quantize.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace quill::engine::kernels {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

const char* TypeName(WeightType t) { return linear_internal::WeightTypeName(t); }

// A weight matrix in its GGUF encoding plus a view of it.
struct TestWeight {
  std::vector<uint8_t> bytes;
  WeightView view;
};

TestWeight MakeWeight(WeightType type, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  TestWeight w;
  w.bytes.resize(rows * linear_internal::RowBytes(type, cols));
  uint8_t* p = w.bytes.data();
  auto put16 = [](uint8_t* dst, uint16_t v) {
    dst[0] = v & 0xff;
    dst[1] = v >> 8;
  };
  for (int64_t r = 0; r < rows; ++r) {
    switch (type) {
      case WeightType::kF32:
        for (int64_t c = 0; c < cols; ++c, p += 4) {
          const float v = normal(rng);
          std::memcpy(p, &v, 4);
        }
        break;
      case WeightType::kF16:
        for (int64_t c = 0; c < cols; ++c, p += 2) put16(p, FloatToFp16(normal(rng)));
        break;
      case WeightType::kBF16:
        for (int64_t c = 0; c < cols; ++c, p += 2) put16(p, FloatToBf16(normal(rng)));
        break;
      case WeightType::kQ8_0:
        for (int64_t b = 0; b < cols / 32; ++b) {
          std::uniform_real_distribution<float> scale(0.005f, 0.02f);
          std::uniform_int_distribution<int> q(-127, 127);
          put16(p, FloatToFp16(scale(rng)));
          p += 2;
          for (int j = 0; j < 32; ++j) *p++ = static_cast<uint8_t>(static_cast<int8_t>(q(rng)));
        }
        break;
      default: {
        // Block types: normal values (with a per-row offset, so the mins matter) quantized by
        // the reference quantizer.
        quant::QuantType qt;
        EXPECT_TRUE(linear_internal::ToQuantType(type, &qt));
        std::vector<float> values(cols);
        const float shift = 0.3f * normal(rng);
        for (float& v : values) v = normal(rng) + shift;
        EXPECT_TRUE(quant::Quantize(qt, values.data(), cols / quant::BlockElements(qt), p).ok());
        p += linear_internal::RowBytes(type, cols);
        break;
      }
    }
  }
  w.view = WeightView{type, w.bytes.data(), rows, cols};
  return w;
}

std::vector<float> RandomVector(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = normal(rng);
  return v;
}

// A weight matrix plus its row ranges as separate parts (Q|K|V style) viewing the same
// bytes, so a fused Linear must reproduce the whole matrix's product.
struct TestMatrix {
  TestWeight whole;
  std::vector<WeightView> parts;
};

TestMatrix MakeMatrix(WeightType type, int64_t n, int64_t k, bool fused, uint32_t seed) {
  TestMatrix m{MakeWeight(type, n, k, seed), {}};
  std::vector<int64_t> sizes = {n};
  if (fused && n >= 3) sizes = {n / 2, n / 3, n - n / 2 - n / 3};
  const int64_t row_bytes = linear_internal::RowBytes(type, k);
  int64_t r0 = 0;
  for (int64_t rows : sizes) {
    m.parts.push_back(WeightView{type, m.whole.bytes.data() + r0 * row_bytes, rows, k});
    r0 += rows;
  }
  return m;
}

// ||got - want|| / ||scale||, where want is the double-accumulated reference and scale is
// want itself (exact, f32) or |x| * |W|^T (bf16):
//  exact: f32 rounding of K/16-term lane sums, ~eps*sqrt(K/32) in practice; 1e-6*ln K
//         leaves > 10x margin at every K tested.
//  fast f32: oneDNN's own f32 summation order; same scale, 5x looser.
//  fast bf16: x and w are each rounded to bf16 (relative error <= 2^-9), so every product
//         is off by at most ~2^-8 |x_k w_k| and |y_err| <= 2^-8 sum_k |x_k w_k| + the f32
//         accumulation error: a worst-case bound of ~4e-3 relative to |x| |W|^T, whatever
//         the cancellation in y (measured over this suite: <= 2.4e-3).
//  fast q8_0 (int8 x, VNNI): x is quantized per 32-block to 8 bits; no worst-case
//         bound in this metric, but the suite's random data measures <= 1.8e-3, so the
//         same 5e-3 applies (relative to ||y|| it reaches ~2% on single outputs).
struct Check {
  bool against_abs;  // measure against |x| |W|^T rather than y
  double tolerance;
};

Check ToleranceFor(Precision precision, WeightType type, int64_t k) {
  const double log_k = std::log(std::max<double>(2.0, k));
  if (precision == Precision::kExact) return {false, 1e-6 * log_k};
  const bool bf16 = type != WeightType::kF32 && HasAvx512Bf16();
  if (bf16) return {true, 5e-3};
  return {false, 5e-6 * log_k};
}

// |x| |W|^T.
std::vector<float> AbsProduct(const WeightView& w, const std::vector<float>& x, int m) {
  const int64_t k = w.cols;
  std::vector<float> y(static_cast<size_t>(m) * w.rows), row(k);
  for (int64_t r = 0; r < w.rows; ++r) {
    DequantizeRow(w, r, row.data());
    for (int i = 0; i < m; ++i) {
      double s = 0;
      for (int64_t c = 0; c < k; ++c) s += std::fabs(row[c]) * std::fabs(x[i * k + c]);
      y[i * w.rows + r] = static_cast<float>(s);
    }
  }
  return y;
}

// Reference y and |x| |W|^T (filled on first use), cached: exact/fast and single/fused
// instances share weights.
struct Expected {
  std::vector<float> y, abs;
};
Expected& ExpectedFor(WeightType type, const WeightView& w, const std::vector<float>& x, int m) {
  static auto* cache = new std::map<std::tuple<int, int64_t, int64_t, int>, Expected>();
  const auto key = std::make_tuple(static_cast<int>(type), w.cols, w.rows, m);
  auto it = cache->find(key);
  if (it != cache->end()) return it->second;
  Expected e;
  e.y.resize(static_cast<size_t>(m) * w.rows);
  reference::Linear(w, x.data(), m, e.y.data());
  return cache->emplace(key, std::move(e)).first->second;
}

double ErrorNorm(const std::vector<float>& got, const std::vector<float>& want,
                 const std::vector<float>& scale) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(scale[i]) * scale[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// ---------------------------------------------------------------------------------------
// Matches the reference over shapes, types, precisions, fused parts.

using LinearParam = std::tuple<WeightType, Precision, bool /*fused*/, int64_t /*k*/, int64_t /*n*/>;
std::string ParamName(const testing::TestParamInfo<LinearParam>& info) {
  const auto [type, precision, fused, k, n] = info.param;
  return std::string(TypeName(type)) + (precision == Precision::kExact ? "_exact" : "_fast") +
         (fused ? "_fused" : "_single") + "_k" + std::to_string(k) + "_n" + std::to_string(n);
}

class LinearMatchesReference : public ::testing::TestWithParam<LinearParam> {};

TEST_P(LinearMatchesReference, AllBatchSizes) {
  const auto [type, precision, fused, k, n] = GetParam();
  const TestMatrix w = MakeMatrix(type, n, k, fused, /*seed=*/7);
  constexpr int kMaxTokens = 130;
  auto linear = Linear::Create(w.parts, precision, kMaxTokens);
  ASSERT_TRUE(linear.ok()) << linear.status();
  EXPECT_EQ((*linear)->in_features(), k);
  EXPECT_EQ((*linear)->out_features(), n);
  EXPECT_GT((*linear)->packed_bytes(), 0);
  // Big shapes get fewer batch sizes to keep the reference cheap.
  // 100 = a 96-row oneDNN bucket and 4 rows of the small-m kernel; 130 = 128 + 2; 63 the
  // most rows the bf16 GEMV takes without AMX (eleven register tiles).
  std::vector<int> ms = {1, 2, 3, 7, 16, 33, 63, 100, 130};
  if (k * n > 2048 * 100) {
    ms = {1, 33};
  } else if (k * n > 2048 * 5) {
    ms = {1, 3, 7, 33};
  }
  for (int m : ms) {
    SCOPED_TRACE(testing::Message() << "m=" << m << " kernel=" << (*linear)->kernel_name());
    const std::vector<float> x = RandomVector(static_cast<size_t>(m) * k, 1000 + m);
    std::vector<float> y(static_cast<size_t>(m) * n, std::nanf(""));
    (*linear)->Run(x.data(), m, y.data());
    Expected& want = ExpectedFor(type, w.whole.view, x, m);
    const Check check = ToleranceFor(precision, type, k);
    if (check.against_abs && want.abs.empty()) want.abs = AbsProduct(w.whole.view, x, m);
    const double error = ErrorNorm(y, want.y, check.against_abs ? want.abs : want.y);
    EXPECT_LE(error, check.tolerance);
  }
}

// oneDNN's static-M buckets are 32 rows apart, so a step of a multiple of 32 rows runs in
// whole buckets; the exact and int8 kernels take every m alike.
TEST(LinearRowMultiple, IsTheOnednnBucketStep) {
  const TestWeight w = MakeWeight(WeightType::kF32, 64, 64, 5);
  auto fast = Linear::Create({w.view}, Precision::kFast, 128);
  auto exact = Linear::Create({w.view}, Precision::kExact, 128);
  ASSERT_TRUE(fast.ok() && exact.ok());
  EXPECT_EQ((*fast)->row_multiple(), 32) << (*fast)->kernel_name();
  EXPECT_EQ((*exact)->row_multiple(), 1) << (*exact)->kernel_name();
  // Fewer rows run in a GEMV, whose cost grows row by row (or in one padded bucket, whose
  // cost is its whole size: rounding up to it is free).
  EXPECT_EQ((*fast)->blocked_from_rows(), GetCpuFeatures().avx512f ? 32 : 1);
  if (HasAvx512Bf16()) {
    // The bf16 GEMV runs every m below 64 (linear_fast.cc, SmallBelowRows), on AMX tiles
    // where we have them; below 32 only when oneDNN has AMX and we do not.
    const TestWeight b = MakeWeight(WeightType::kBF16, 64, 64, 7);
    auto bf16 = Linear::Create({b.view}, Precision::kFast, 128);
    ASSERT_TRUE(bf16.ok());
    EXPECT_EQ((*bf16)->row_multiple(), 32) << (*bf16)->kernel_name();
    const bool onednn_alone_on_amx =
        linear_internal::OnednnUsesAmx() && !linear_internal::GemvBf16AmxAvailable();
    EXPECT_EQ((*bf16)->blocked_from_rows(), onednn_alone_on_amx ? 32 : 64)
        << (*bf16)->kernel_name();
  }
  if (linear_internal::QBlockKernelAvailable()) {
    const TestWeight q = MakeWeight(WeightType::kQ4_0, 64, 64, 6);
    auto int8 = Linear::Create({q.view}, Precision::kFast, 128);
    ASSERT_TRUE(int8.ok());
    EXPECT_EQ((*int8)->row_multiple(), 1) << (*int8)->kernel_name();
    EXPECT_EQ((*int8)->blocked_from_rows(), 1) << (*int8)->kernel_name();
  }
}

constexpr WeightType kBlockTypes[] = {WeightType::kQ4_0, WeightType::kQ4_1, WeightType::kQ5_0,
                                      WeightType::kQ5_1, WeightType::kQ4_K, WeightType::kQ5_K,
                                      WeightType::kQ6_K};

// Every type x precision x single/fused x K x N (block types where K is whole blocks).
std::vector<LinearParam> AllShapes() {
  std::vector<LinearParam> params;
  for (WeightType type : {WeightType::kF32, WeightType::kF16, WeightType::kBF16, WeightType::kQ8_0})
    for (Precision precision : {Precision::kExact, Precision::kFast})
      for (bool fused : {false, true})
        for (int64_t k : {5, 32, 64, 96, 129, 2048})
          for (int64_t n : {1, 5, 33, 100, 1000})
            if (type != WeightType::kQ8_0 || k % 32 == 0)
              params.emplace_back(type, precision, fused, k, n);
  for (WeightType type : kBlockTypes)
    for (Precision precision : {Precision::kExact, Precision::kFast})
      for (bool fused : {false, true})
        for (int64_t k : {96, 256, 768, 2048})
          for (int64_t n : {1, 5, 33, 100})
            if (k % linear_internal::BlockElements(type) == 0)
              params.emplace_back(type, precision, fused, k, n);
  return params;
}

INSTANTIATE_TEST_SUITE_P(Shapes, LinearMatchesReference, testing::ValuesIn(AllShapes()), ParamName);

// ---------------------------------------------------------------------------------------
// Exact mode: batch invariance, determinism, thread-count invariance, and the documented
// summation order.

// Scalar model of the documented exact order (linear_internal.h).
float CanonicalDot(const float* x, const float* w, int64_t k) {
  float lane[16] = {};
  for (int64_t k0 = 0; k0 < linear_internal::RoundUp(k, 16); k0 += 16)
    for (int l = 0; l < 16; ++l) {
      const float xv = k0 + l < k ? x[k0 + l] : 0.0f;
      const float wv = k0 + l < k ? w[k0 + l] : 0.0f;
      lane[l] = std::fma(xv, wv, lane[l]);
    }
  for (int width = 8; width >= 1; width /= 2)
    for (int l = 0; l < width; ++l) lane[l] = lane[l] + lane[l + width];
  return lane[0];
}

class ExactInvariance : public ::testing::TestWithParam<std::tuple<WeightType, int64_t>> {};

TEST_P(ExactInvariance, BatchThreadsAndRunsGiveSameBits) {
  const auto [type, k] = GetParam();
  constexpr int64_t kN = 100;
  constexpr int kM = 33;
  const TestMatrix w = MakeMatrix(type, kN, k, /*fused=*/true, 3);
  auto linear = Linear::Create(w.parts, Precision::kExact, kM);
  ASSERT_TRUE(linear.ok()) << linear.status();
  const std::vector<float> x = RandomVector(kM * k, 5);
  std::vector<float> batch(kM * kN), again(kM * kN), single(kN);
  (*linear)->Run(x.data(), kM, batch.data());
  (*linear)->Run(x.data(), kM, again.data());
  EXPECT_EQ(std::memcmp(batch.data(), again.data(), batch.size() * 4), 0) << "not deterministic";

  for (int i = 0; i < kM; ++i) {
    (*linear)->Run(x.data() + i * k, 1, single.data());
    EXPECT_EQ(std::memcmp(single.data(), batch.data() + i * kN, kN * 4), 0) << "row " << i;
  }
  // Rows 5..11 as a batch of 7 (a different tiling of m).
  std::vector<float> seven(7 * kN);
  (*linear)->Run(x.data() + 5 * k, 7, seven.data());
  EXPECT_EQ(std::memcmp(seven.data(), batch.data() + 5 * kN, seven.size() * 4), 0);

  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  std::vector<float> one_thread(kM * kN);
  (*linear)->Run(x.data(), kM, one_thread.data());
  omp_set_num_threads(threads);
  EXPECT_EQ(std::memcmp(one_thread.data(), batch.data(), batch.size() * 4), 0) << "thread count";

  // Bit-exact against the scalar model of the fixed order.
  std::vector<float> w_row(k);
  for (int64_t r = 0; r < kN; ++r) {
    DequantizeRow(w.whole.view, r, w_row.data());
    for (int i = 0; i < kM; i += 8) {
      const float want = CanonicalDot(x.data() + i * k, w_row.data(), k);
      EXPECT_EQ(Bits(batch[i * kN + r]), Bits(want)) << "i=" << i << " n=" << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, ExactInvariance,
                         testing::Values(std::make_tuple(WeightType::kF32, int64_t{5}),
                                         std::make_tuple(WeightType::kF32, int64_t{129}),
                                         std::make_tuple(WeightType::kF16, int64_t{96}),
                                         std::make_tuple(WeightType::kF16, int64_t{2048}),
                                         std::make_tuple(WeightType::kBF16, int64_t{129}),
                                         std::make_tuple(WeightType::kBF16, int64_t{2048}),
                                         std::make_tuple(WeightType::kQ8_0, int64_t{96}),
                                         std::make_tuple(WeightType::kQ8_0, int64_t{2048})),
                         [](const auto& info) {
                           return std::string(TypeName(std::get<0>(info.param))) + "_k" +
                                  std::to_string(std::get<1>(info.param));
                         });

// Both ISA variants of the exact kernel follow the same order, so they agree bit for bit
// (a model computed on an AVX2-only machine matches one computed with AVX-512).
TEST(ExactKernel, Avx512AndAvx2GiveSameBits) {
  using linear_internal::ExactIsa;
  for (int64_t k : {1, 15, 16, 17, 100, 1000}) {
    const int m = 9, n = 11;
    const int64_t kp = linear_internal::RoundUp(k, 16);
    const std::vector<float> x = RandomVector(m * k, 11);
    std::vector<float> w = RandomVector(n * kp, 12);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = k; c < kp; ++c) w[r * kp + c] = 0.0f;
    std::vector<float> y2(m * n), y512(m * n);
    linear_internal::ExactGemmTile(ExactIsa::kAvx2, x.data(), k, m, w.data(), k, n, y2.data(), n);
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j)
        ASSERT_EQ(Bits(y2[i * n + j]), Bits(CanonicalDot(x.data() + i * k, w.data() + j * kp, k)))
            << "avx2 k=" << k << " i=" << i << " j=" << j;
    if (!GetCpuFeatures().avx512f) continue;
    linear_internal::ExactGemmTile(ExactIsa::kAvx512, x.data(), k, m, w.data(), k, n, y512.data(),
                                   n);
    EXPECT_EQ(std::memcmp(y2.data(), y512.data(), y2.size() * 4), 0) << "k=" << k;
  }
}

TEST(LinearNames, SayWhichPathRuns) {
  const TestWeight w = MakeWeight(WeightType::kBF16, 64, 64, 1);
  auto exact = Linear::Create({w.view}, Precision::kExact, 4);
  ASSERT_TRUE(exact.ok());
  EXPECT_THAT((*exact)->kernel_name(), HasSubstr("exact-f32"));
  auto fast = Linear::Create({w.view}, Precision::kFast, 64);
  ASSERT_TRUE(fast.ok());
  EXPECT_THAT((*fast)->kernel_name(), HasSubstr(HasAvx512Bf16() ? "bf16" : "f32"));
  EXPECT_THAT((*fast)->kernel_name(), HasSubstr("onednn"));
  // Q8_0 runs through the int8 VNNI kernel where the CPU has it.
  const TestWeight q = MakeWeight(WeightType::kQ8_0, 64, 64, 2);
  auto q8 = Linear::Create({q.view}, Precision::kFast, 8);
  ASSERT_TRUE(q8.ok());
  if (HasAvx512Bf16()) {
    EXPECT_THAT((*q8)->kernel_name(), HasSubstr("int8-vnni"));
  } else {
    EXPECT_THAT((*q8)->kernel_name(), HasSubstr("f32"));
  }
  // The block types too (AVX512-VNNI), else a widened oneDNN copy.
  const TestWeight k4 = MakeWeight(WeightType::kQ4_K, 64, 256, 2);
  auto q4k = Linear::Create({k4.view}, Precision::kFast, 8);
  ASSERT_TRUE(q4k.ok());
  if (linear_internal::QBlockKernelAvailable()) {
    EXPECT_EQ((*q4k)->kernel_name(), "int8-vnni-q4_k");
  } else {
    EXPECT_THAT((*q4k)->kernel_name(), HasSubstr("onednn"));
  }
}

// Runs random x rows one at a time, then `max_rows` rows as steps of each of `row_counts`
// rows: every output of a step must have the bits its row got alone.
void ExpectEachRowGetsItsBitsAlone(Linear& linear, int max_rows, const std::vector<int>& row_counts,
                                   uint32_t seed) {
  const int64_t k = linear.in_features(), n = linear.out_features();
  const std::vector<float> x = RandomVector(static_cast<size_t>(max_rows) * k, seed);
  std::vector<float> alone(static_cast<size_t>(max_rows) * n);
  for (int i = 0; i < max_rows; ++i) linear.Run(x.data() + i * k, 1, alone.data() + i * n);
  for (int m : row_counts) {
    std::vector<float> batch(static_cast<size_t>(m) * n, std::nanf(""));
    linear.Run(x.data(), m, batch.data());
    for (int64_t i = 0; i < m * n; ++i) {
      ASSERT_EQ(Bits(batch[i]), Bits(alone[i]))
          << "m=" << m << " row " << i / n << " col " << i % n;
    }
  }
}

// The int8 Q8_0 kernel sweeps a step's rows in three ways by their count (whole column
// blocks below 8 rows, tiles taking turns group by group below 13, 32-group chunks above):
// each applies every group's scales in the same order, so a row gets the same bits in a
// step of any size as alone.
TEST(Q8Kernel, EveryRowCountGivesEachRowItsBitsAlone) {
  if (!HasAvx512Bf16()) GTEST_SKIP() << "no AVX512-VNNI/BF16: Q8_0 runs the f32 path";
  constexpr int64_t kK = 2048, kN = 100;  // 4 column blocks, the last one partial
  constexpr int kMaxRows = 40;
  const TestWeight w = MakeWeight(WeightType::kQ8_0, kN, kK, 9);
  auto linear = Linear::Create({w.view}, Precision::kFast, kMaxRows);
  ASSERT_TRUE(linear.ok()) << linear.status();
  ASSERT_THAT((*linear)->kernel_name(), HasSubstr("int8-vnni"));
  std::vector<int> row_counts;
  for (int m = 2; m <= kMaxRows; ++m) row_counts.push_back(m);
  ExpectEachRowGetsItsBitsAlone(**linear, kMaxRows, row_counts, 31);
}

// On AMX tiles each row's sums depend on that row alone: below oneDNN's 64-row buckets a
// BF16 (or F16) row gets the same bits in a step of any size as alone.
TEST(GemvBf16, AmxGivesEachRowItsBitsAloneBelow64Rows) {
  if (!linear_internal::GemvBf16AmxAvailable() || !HasAvx512Bf16()) {
    GTEST_SKIP() << "no AMX-BF16 on this CPU (or QUILL_DISABLE_AMX=1)";
  }
  constexpr int64_t kK = 2048, kN = 100;  // 2 column blocks, the last one partial
  constexpr int kMaxRows = 63;
  for (WeightType type : {WeightType::kBF16, WeightType::kF16}) {
    SCOPED_TRACE(TypeName(type));
    const TestWeight w = MakeWeight(type, kN, kK, 13);
    auto linear = Linear::Create({w.view}, Precision::kFast, kMaxRows);
    ASSERT_TRUE(linear.ok()) << linear.status();
    ASSERT_THAT((*linear)->kernel_name(), HasSubstr("gemv-bf16-amx"));
    ExpectEachRowGetsItsBitsAlone(**linear, kMaxRows, {2, 3, 15, 16, 17, 32, 47, 63}, 14);
  }
}

// The AMX-BF16 tiles and the AVX512-BF16 GEMV compute the same bf16 products over the
// same BA16a64b2a layout: against a double sum of those products, both stay within f32
// rounding (1e-5 of the sum of |products|; a misplaced pair or column is off by ~1).
TEST(GemvBf16, AmxTilesAndAvx512MatchTheExactProductSum) {
  if (!linear_internal::GemvBf16AmxAvailable() || !HasAvx512Bf16()) {
    GTEST_SKIP() << "no AMX-BF16 on this CPU (or QUILL_DISABLE_AMX=1)";
  }
  constexpr int kMaxRows = 40;
  for (const auto& [k, n] : {std::pair<int64_t, int64_t>{32, 5}, {96, 70}, {2048, 130}}) {
    SCOPED_TRACE(absl::StrCat("k=", k, " n=", n));
    const int64_t blocks = (n + 63) / 64;
    std::vector<uint16_t> w(static_cast<size_t>(blocks * 64 * k), 0);  // [block][pair][64][2]
    std::vector<float> w_value(static_cast<size_t>(n * k));
    const std::vector<float> w_random = RandomVector(w_value.size(), 21);
    for (int64_t c = 0; c < n; ++c)
      for (int64_t j = 0; j < k; ++j) {
        const uint16_t b = FloatToBf16(w_random[c * k + j]);
        w_value[c * k + j] = Bf16ToFloat(b);
        w[((c / 64) * (k / 2) + j / 2) * 128 + (c % 64) * 2 + j % 2] = b;
      }
    const std::vector<float> x_random = RandomVector(static_cast<size_t>(kMaxRows * k), 22);
    std::vector<uint16_t> x(x_random.size());
    for (size_t i = 0; i < x.size(); ++i) x[i] = FloatToBf16(x_random[i]);
    for (int m : {1, 2, 7, 16, 17, 33, 40}) {
      std::vector<float> amx(static_cast<size_t>(m * n), std::nanf(""));
      std::vector<float> avx(static_cast<size_t>(m * n), std::nanf(""));
      linear_internal::GemvBf16Amx(w.data(), k, n, x.data(), k, m, amx.data(), n);
      linear_internal::GemvBf16Blocked(w.data(), k, n, x.data(), k, m, avx.data(), n);
      for (int i = 0; i < m; ++i)
        for (int64_t c = 0; c < n; ++c) {
          double sum = 0, magnitude = 0;
          for (int64_t j = 0; j < k; ++j) {
            const double product = double{Bf16ToFloat(x[i * k + j])} * w_value[c * k + j];
            sum += product;
            magnitude += std::fabs(product);
          }
          const double bound = 1e-5 * magnitude;
          ASSERT_NEAR(amx[i * n + c], sum, bound) << "amx m=" << m << " row " << i << " col " << c;
          ASSERT_NEAR(avx[i * n + c], sum, bound) << "avx m=" << m << " row " << i << " col " << c;
        }
    }
  }
}

// One packed copy serves oneDNN's matmuls and the bf16 GEMV, for any k (oneDNN's brgemm
// sees k rounded up to 32; an odd k would otherwise push it to a slow gemm and a 2nd copy).
TEST(LinearFastBf16, KeepsOnePackedCopy) {
  if (!HasAvx512Bf16()) GTEST_SKIP() << "no AVX512-BF16";
  for (int64_t k : {5, 129, 2048}) {
    const TestWeight w = MakeWeight(WeightType::kBF16, 100, k, 1);
    auto linear = Linear::Create({w.view}, Precision::kFast, 64);
    ASSERT_TRUE(linear.ok()) << linear.status();
    EXPECT_THAT((*linear)->kernel_name(), HasSubstr("brg:"));
    EXPECT_THAT((*linear)->kernel_name(), Not(HasSubstr("2nd copy")));
    EXPECT_EQ((*linear)->packed_bytes(), linear_internal::RoundUp(k, 32) * 128 * 2) << "k=" << k;
  }
}

// ---------------------------------------------------------------------------------------
// LinearScratch: Linears that share one give the same bits as Linears on their own, run in
// any order, and identical shapes need no more scratch than one of them.

TEST(LinearScratch, SharedScratchGivesTheSameBitsAsOwnScratch) {
  constexpr int kMaxTokens = 96;
  constexpr int64_t kN = 80;
  for (WeightType type : {WeightType::kF32, WeightType::kBF16, WeightType::kF16, WeightType::kQ8_0,
                          WeightType::kQ4_K, WeightType::kQ6_K}) {
    SCOPED_TRACE(TypeName(type));
    // Two shapes (different k: the larger one sizes every buffer), fast precision.
    const TestWeight a = MakeWeight(type, kN, 256, 3);
    const TestWeight b = MakeWeight(type, kN, 768, 4);
    auto shared = std::make_shared<LinearScratch>();
    auto shared_a = Linear::Create({a.view}, Precision::kFast, kMaxTokens, shared);
    auto shared_b = Linear::Create({b.view}, Precision::kFast, kMaxTokens, shared);
    auto own_a_scratch = std::make_shared<LinearScratch>();
    auto own_b_scratch = std::make_shared<LinearScratch>();
    auto own_a = Linear::Create({a.view}, Precision::kFast, kMaxTokens, own_a_scratch);
    auto own_b = Linear::Create({b.view}, Precision::kFast, kMaxTokens, own_b_scratch);
    ASSERT_TRUE(shared_a.ok() && shared_b.ok() && own_a.ok() && own_b.ok());
    EXPECT_GE(shared->bytes(), std::max(own_a_scratch->bytes(), own_b_scratch->bytes()));
    EXPECT_LE(shared->bytes(), own_a_scratch->bytes() + own_b_scratch->bytes());
    // Interleaved, with row counts for every path (small-m kernels, oneDNN buckets, both).
    for (int m : {1, 40, 3, 96, 17, 64, 2}) {
      SCOPED_TRACE(testing::Message() << "m=" << m);
      for (auto [lin, own, k] : {std::tuple{shared_a->get(), own_a->get(), int64_t{256}},
                                 std::tuple{shared_b->get(), own_b->get(), int64_t{768}}}) {
        const std::vector<float> x = RandomVector(static_cast<size_t>(m) * k, 70 + m);
        std::vector<float> got(static_cast<size_t>(m) * kN), want(got.size());
        lin->Run(x.data(), m, got.data());
        own->Run(x.data(), m, want.data());
        for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(Bits(got[i]), Bits(want[i])) << i;
      }
    }
    // Many Linears of one shape (a model's layers) share one Linear's worth.
    auto one = std::make_shared<LinearScratch>();
    std::vector<std::unique_ptr<Linear>> layers;
    for (int i = 0; i < 4; ++i) {
      auto l = Linear::Create({b.view}, Precision::kFast, kMaxTokens, one);
      ASSERT_TRUE(l.ok());
      layers.push_back(*std::move(l));
    }
    EXPECT_EQ(one->bytes(), own_b_scratch->bytes());
  }
}

// ---------------------------------------------------------------------------------------
// Block types: the int8 VNNI kernel against its scalar twin (bit for bit), mixed-type
// fusions, the packed size, and Create() not keeping the caller's bytes.

using QBlockParam = std::tuple<WeightType, int64_t /*k*/, int64_t /*n*/>;

class QBlockKernel : public ::testing::TestWithParam<QBlockParam> {};

uint64_t CountBitMismatches(const std::vector<float>& a, const std::vector<float>& b) {
  uint64_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i) bad += Bits(a[i]) != Bits(b[i]);
  return bad;
}

TEST_P(QBlockKernel, MatchesScalarTwinBitForBit) {
  if (!linear_internal::QBlockKernelAvailable()) GTEST_SKIP() << "no AVX512-VNNI";
  const auto [type, k, n] = GetParam();
  const TestWeight w = MakeWeight(type, n, k, 11);
  constexpr int kMaxRows = 130;
  linear_internal::QBlockGemm gemm({w.view}, kMaxRows);
  // Row counts around the 4-row register tile and the 64-row pass.
  for (int m : {1, 2, 3, 4, 5, 7, 64, 65, 130}) {
    SCOPED_TRACE(testing::Message() << "m=" << m);
    const std::vector<float> x = RandomVector(static_cast<size_t>(m) * k, 50 + m);
    std::vector<float> got(static_cast<size_t>(m) * n, std::nanf("")), want(got.size());
    gemm.Run(x.data(), m, got.data(), n);
    reference::QBlockLinear(w.view, x.data(), m, want.data());
    EXPECT_EQ(CountBitMismatches(got, want), 0u);
  }
}

// Both kernels behind Run() on their own, for every row count the decode kernel takes
// (1..kQBlockDecodeMaxRows: full and partial 4-row tiles) and a few around the tiled
// kernel's 4-row tile: each equals the twin bit for bit, so Run()'s choice is invisible.
TEST_P(QBlockKernel, DecodeAndTiledKernelsMatchScalarTwin) {
  if (!linear_internal::QBlockKernelAvailable()) GTEST_SKIP() << "no AVX512-VNNI";
  const auto [type, k, n] = GetParam();
  const TestWeight w = MakeWeight(type, n, k, 12);
  constexpr int kMaxRows = linear_internal::kQBlockDecodeMaxRows;
  linear_internal::QBlockGemm gemm({w.view}, kMaxRows);
  for (int m = 1; m <= kMaxRows; ++m) {
    SCOPED_TRACE(testing::Message() << "m=" << m);
    const std::vector<float> x = RandomVector(static_cast<size_t>(m) * k, 80 + m);
    std::vector<float> want(static_cast<size_t>(m) * n);
    reference::QBlockLinear(w.view, x.data(), m, want.data());
    // A row stride wider than n: the decode kernel's masked stores stay inside each row.
    const int64_t stride = n + 3;
    for (int kernel = 0; kernel < 2; ++kernel) {
      std::vector<float> got(static_cast<size_t>(m) * stride, std::nanf(""));
      if (kernel == 0) {
        gemm.RunDecode(x.data(), m, got.data(), stride);
      } else {
        gemm.RunTiled(x.data(), m, got.data(), stride);
      }
      std::vector<float> packed(static_cast<size_t>(m) * n);
      for (int i = 0; i < m; ++i) {
        for (int64_t c = 0; c < n; ++c) packed[i * n + c] = got[i * stride + c];
        for (int64_t c = n; c < stride; ++c) EXPECT_TRUE(std::isnan(got[i * stride + c]));
      }
      EXPECT_EQ(CountBitMismatches(packed, want), 0u) << (kernel == 0 ? "decode" : "tiled");
    }
  }
}

// Odd column counts (the last column block is partial) and rows of one and of several
// GGUF blocks, including k that crosses the kernel's 1024-value scale pass. For the 32-value
// types, whose packed super-blocks gather 8 blocks, k of 1, 3 and 5 blocks is a short
// super-block alone, 480 a full one and a short one of 7, 1056 four full ones and one of 1.
std::vector<QBlockParam> QBlockShapes() {
  std::vector<QBlockParam> params;
  for (WeightType type : kBlockTypes) {
    const int64_t sb = linear_internal::BlockElements(type);
    for (const auto& [k, n] :
         std::vector<std::pair<int64_t, int64_t>>{{sb, 1},
                                                  {3 * sb, 5},
                                                  {5 * sb, 33},
                                                  {2048, 100},
                                                  {sb == 32 ? 1056 : 1280, 31},
                                                  {sb == 32 ? 480 : 2 * sb, 17}})
      params.emplace_back(type, k, n);
  }
  return params;
}

INSTANTIATE_TEST_SUITE_P(Types, QBlockKernel, testing::ValuesIn(QBlockShapes()),
                         [](const auto& info) {
                           return std::string(TypeName(std::get<0>(info.param))) + "_k" +
                                  std::to_string(std::get<1>(info.param)) + "_n" +
                                  std::to_string(std::get<2>(info.param));
                         });

// Q4_K_M files fuse Q4_K q/k with a Q6_K v: one Linear of mixed parts, each part's columns
// equal to its own product.
TEST(QBlockKernel, MixedTypePartsMatchEachPart) {
  constexpr int64_t kK = 512;
  const std::vector<std::pair<WeightType, int64_t>> spec = {{WeightType::kQ4_K, 40},
                                                            {WeightType::kQ6_K, 17},
                                                            {WeightType::kQ4_K, 9},
                                                            {WeightType::kQ4_0, 3}};
  std::vector<TestWeight> weights;
  std::vector<WeightView> parts;
  int64_t n = 0;
  for (size_t i = 0; i < spec.size(); ++i) {
    weights.push_back(MakeWeight(spec[i].first, spec[i].second, kK, 20 + i));
    n += spec[i].second;
  }
  for (const TestWeight& w : weights) parts.push_back(w.view);
  constexpr int kM = 6;
  const std::vector<float> x = RandomVector(kM * kK, 9);
  // Per part: the twin and the exact reference, scattered into the fused columns.
  std::vector<float> twin(kM * n), exact(kM * n), absprod(kM * n);
  int64_t col = 0;
  for (const WeightView& p : parts) {
    std::vector<float> t(kM * p.rows), e(kM * p.rows);
    reference::QBlockLinear(p, x.data(), kM, t.data());
    reference::Linear(p, x.data(), kM, e.data());
    const std::vector<float> a = AbsProduct(p, x, kM);
    for (int i = 0; i < kM; ++i)
      for (int64_t c = 0; c < p.rows; ++c) {
        twin[i * n + col + c] = t[i * p.rows + c];
        exact[i * n + col + c] = e[i * p.rows + c];
        absprod[i * n + col + c] = a[i * p.rows + c];
      }
    col += p.rows;
  }
  if (linear_internal::QBlockKernelAvailable()) {
    linear_internal::QBlockGemm gemm(parts, kM);
    EXPECT_EQ(gemm.name(), "int8-vnni-q4_k+q6_k+q4_0");
    std::vector<float> got(kM * n);
    gemm.Run(x.data(), kM, got.data(), n);
    EXPECT_EQ(CountBitMismatches(got, twin), 0u);
  }
  for (Precision precision : {Precision::kExact, Precision::kFast}) {
    auto linear = Linear::Create(parts, precision, kM);
    ASSERT_TRUE(linear.ok()) << linear.status();
    std::vector<float> got(kM * n);
    (*linear)->Run(x.data(), kM, got.data());
    const Check check = ToleranceFor(precision, WeightType::kQ4_K, kK);
    EXPECT_LE(ErrorNorm(got, exact, check.against_abs ? absprod : exact), check.tolerance)
        << (*linear)->kernel_name();
  }
}

// The packed copy has the GGUF bit width: bytes per column equal the GGUF row bytes, also
// where a 32-value type's last packed super-block is short (k = 480).
TEST(QBlockKernel, PackedBytesEqualTheFileBytes) {
  if (!linear_internal::QBlockKernelAvailable()) GTEST_SKIP() << "no AVX512-VNNI";
  for (WeightType type : kBlockTypes) {
    for (int64_t k : {512, 480}) {
      if (k % linear_internal::BlockElements(type) != 0) continue;
      const TestWeight w = MakeWeight(type, 64, k, 3);
      auto linear = Linear::Create({w.view}, Precision::kFast, 16);
      ASSERT_TRUE(linear.ok()) << linear.status();
      EXPECT_EQ((*linear)->packed_bytes(), static_cast<int64_t>(w.bytes.size()))
          << TypeName(type) << " k=" << k;
    }
  }
}

// Create() copies what it needs, so callers may drop the pages the weights came from.
TEST(LinearCreate, DoesNotReadThePartsAfterReturning) {
  std::vector<WeightType> types = {WeightType::kF32, WeightType::kF16, WeightType::kBF16,
                                   WeightType::kQ8_0};
  types.insert(types.end(), std::begin(kBlockTypes), std::end(kBlockTypes));
  for (WeightType type : types) {
    for (Precision precision : {Precision::kExact, Precision::kFast}) {
      SCOPED_TRACE(testing::Message()
                   << TypeName(type) << (precision == Precision::kExact ? " exact" : " fast"));
      TestWeight w = MakeWeight(type, 40, 256, 4);
      auto linear = Linear::Create({w.view}, precision, 40);
      ASSERT_TRUE(linear.ok()) << linear.status();
      for (int m : {1, 40}) {
        const std::vector<float> x = RandomVector(m * 256, 8);
        std::vector<float> before(m * 40), after(m * 40);
        (*linear)->Run(x.data(), m, before.data());
        std::fill(w.bytes.begin(), w.bytes.end(), 0x7F);
        (*linear)->Run(x.data(), m, after.data());
        EXPECT_EQ(CountBitMismatches(before, after), 0u) << "m=" << m;
      }
    }
  }
}

TEST(LinearCreate, RefusesNonFiniteBlockScales) {
  // Every block type, its scale d and (where it has one) its min: NaN, signalling NaN, +-inf.
  const uint16_t kBad[] = {0x7E00, 0x7C01, 0x7C00, 0xFC00};
  int checked = 0;
  for (WeightType type :
       {WeightType::kQ8_0, WeightType::kQ4_0, WeightType::kQ4_1, WeightType::kQ5_0,
        WeightType::kQ5_1, WeightType::kQ4_K, WeightType::kQ5_K, WeightType::kQ6_K}) {
    const TestWeight clean = MakeWeight(type, 4, 512, 6);
    quant::QuantType qt;
    ASSERT_TRUE(linear_internal::ToQuantType(type, &qt));
    const quant::BlockFields f = quant::FieldsOf(qt);
    const int block_bytes = quant::BlockBytes(qt);
    const int64_t blocks_per_row = 512 / quant::BlockElements(qt);
    for (int field : {f.d, f.m}) {
      if (field < 0) continue;
      for (uint16_t bits : kBad) {
        TestWeight w = clean;
        w.view.data = w.bytes.data();
        // Row 2, its second block.
        quant::StoreU16(w.bytes.data() + (2 * blocks_per_row + 1) * block_bytes + field, bits);
        for (Precision p : {Precision::kExact, Precision::kFast}) {
          auto linear = Linear::Create({w.view}, p, 4);
          EXPECT_EQ(linear.status().code(), absl::StatusCode::kDataLoss) << TypeName(type);
          EXPECT_THAT(linear.status().message(), HasSubstr("row 2 block 1")) << TypeName(type);
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, (8 + 4) * 4 * 2);  // Q4_1, Q5_1, Q4_K and Q5_K also have a min
}

TEST(DequantizeRow, BlockTypesPickTheirRow) {
  // Two Q4_0 rows of 64 values: row 1, block 1 has d = 2 and every q = 9 (value 2).
  std::vector<uint8_t> data(2 * 2 * 18, 0);
  uint8_t* b = data.data() + 3 * 18;
  quant::StoreU16(b, 0x4000);
  std::fill(b + 2, b + 18, 0x99);
  std::vector<float> out(64);
  DequantizeRow(WeightView{WeightType::kQ4_0, data.data(), 2, 64}, 1, out.data());
  for (int j = 0; j < 32; ++j) EXPECT_EQ(out[j], 0.0f) << j;  // d = 0
  for (int j = 32; j < 64; ++j) EXPECT_EQ(out[j], 2.0f) << j;
}

// ---------------------------------------------------------------------------------------
// Conversions against known bit patterns.

TEST(Fp16ToFloat, KnownValues) {
  EXPECT_EQ(Fp16ToFloat(0x3c00), 1.0f);
  EXPECT_EQ(Fp16ToFloat(0xc000), -2.0f);
  EXPECT_EQ(Fp16ToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(Fp16ToFloat(0x3555), 0.333251953125f);
  EXPECT_EQ(Fp16ToFloat(0x0001), std::ldexp(1.0f, -24));     // smallest subnormal
  EXPECT_EQ(Fp16ToFloat(0x03ff), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(Fp16ToFloat(0x0400), std::ldexp(1.0f, -14));     // smallest normal
  EXPECT_EQ(Bits(Fp16ToFloat(0x8000)), 0x80000000u);         // -0
  EXPECT_EQ(Fp16ToFloat(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(Fp16ToFloat(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(Fp16ToFloat(0x7e00)));
  EXPECT_TRUE(std::isnan(Fp16ToFloat(0x7c01)));  // signalling pattern stays nan
}

TEST(FloatToFp16, KnownValuesAndTies) {
  EXPECT_EQ(FloatToFp16(1.0f), 0x3c00);
  EXPECT_EQ(FloatToFp16(-2.0f), 0xc000);
  EXPECT_EQ(FloatToFp16(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToFp16(65519.996f), 0x7bff);  // just below the tie
  EXPECT_EQ(FloatToFp16(65520.0f), 0x7c00);    // tie rounds to even = inf
  EXPECT_EQ(FloatToFp16(1e6f), 0x7c00);
  EXPECT_EQ(FloatToFp16(-1e6f), 0xfc00);
  EXPECT_EQ(FloatToFp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie -> even (down)
  EXPECT_EQ(FloatToFp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie -> even (up)
  EXPECT_EQ(FloatToFp16(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3c01);
  EXPECT_EQ(FloatToFp16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(FloatToFp16(std::ldexp(1.0f, -25)), 0x0000);  // subnormal tie -> 0
  EXPECT_EQ(FloatToFp16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(FloatToFp16(std::ldexp(3.0f, -25)), 0x0002);     // 1.5 units: tie -> 2
  EXPECT_EQ(FloatToFp16(std::ldexp(2047.0f, -25)), 0x0400);  // rounds up to a normal
  EXPECT_EQ(FloatToFp16(std::ldexp(1.0f, -30)), 0x0000);
  EXPECT_EQ(FloatToFp16(FromBits(0x00000001)), 0x0000);  // f32 subnormal
  EXPECT_EQ(FloatToFp16(-0.0f), 0x8000);
  EXPECT_EQ(FloatToFp16(std::numeric_limits<float>::infinity()), 0x7c00);
  const uint16_t nan = FloatToFp16(std::nanf(""));
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
  const uint16_t low_payload_nan = FloatToFp16(FromBits(0x7f800001));  // payload below fp16's
  EXPECT_NE(low_payload_nan & 0x03ff, 0) << "nan must not become inf";
}

// The CPU's F16C instructions (round to nearest even) are an independent oracle.
TEST(Fp16Conversions, MatchF16cHardware) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float hw = _cvtsh_ss(static_cast<uint16_t>(h));
    const float sw = Fp16ToFloat(static_cast<uint16_t>(h));
    if (std::isnan(hw)) {
      EXPECT_TRUE(std::isnan(sw)) << h;
      continue;
    }
    ASSERT_EQ(Bits(sw), Bits(hw)) << "h=" << h;
    ASSERT_EQ(FloatToFp16(sw), h) << "round trip h=" << h;
  }
  std::mt19937 rng(42);
  for (int i = 0; i < 1000000; ++i) {
    // Bias exponents towards fp16's range so subnormal/overflow rounding is exercised.
    uint32_t bits = rng();
    bits = (bits & 0x807fffffu) | ((100 + (bits >> 23) % 50) << 23);
    const float f = FromBits(bits);
    const uint16_t hw = _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
    ASSERT_EQ(FloatToFp16(f), hw) << "bits=" << std::hex << bits;
  }
}

TEST(Bf16Conversions, KnownValuesTiesAndSpecials) {
  EXPECT_EQ(Bf16ToFloat(0x3f80), 1.0f);
  EXPECT_EQ(Bf16ToFloat(0xc040), -3.0f);
  EXPECT_EQ(Bits(Bf16ToFloat(0x0001)), 0x00010000u);  // subnormal
  EXPECT_EQ(Bf16ToFloat(0x7f80), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(Bf16ToFloat(0x7fc0)));
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBf16(FromBits(0x3f808000)), 0x3f80);  // tie -> even (down)
  EXPECT_EQ(FloatToBf16(FromBits(0x3f818000)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(FloatToBf16(FromBits(0x3f808001)), 0x3f81);  // above the tie
  EXPECT_EQ(FloatToBf16(FromBits(0x3f807fff)), 0x3f80);  // below the tie
  EXPECT_EQ(FloatToBf16(FromBits(0x00008000)), 0x0000);  // subnormal tie -> 0
  EXPECT_EQ(FloatToBf16(FromBits(0x00018000)), 0x0002);  // subnormal tie -> even
  EXPECT_EQ(FloatToBf16(FromBits(0x7f7fffff)), 0x7f80);  // max float rounds to inf
  EXPECT_EQ(FloatToBf16(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_EQ(FloatToBf16(-0.0f), 0x8000);
  const uint16_t nan = FloatToBf16(FromBits(0x7f800001));  // payload only in the low bits
  EXPECT_EQ(nan & 0x7f80, 0x7f80);
  EXPECT_NE(nan & 0x007f, 0) << "nan must not become inf";
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = Bf16ToFloat(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToBf16(f), b);
  }
}

// ---------------------------------------------------------------------------------------
// DequantizeRow.

TEST(DequantizeRow, Q8_0HandMadeBlocks) {
  // Two rows of 64 columns: two blocks per row.
  std::vector<uint8_t> data(2 * 2 * 34, 0);
  auto block = [&](int row, int b) { return data.data() + (row * 2 + b) * 34; };
  // Row 1 block 0: d = 0.5 (0x3800), q = j - 16. Row 1 block 1: d = -2 (0xc000), q = 3,
  // except q[31] = -128.
  uint8_t* b0 = block(1, 0);
  b0[0] = 0x00;
  b0[1] = 0x38;
  for (int j = 0; j < 32; ++j) b0[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j - 16));
  uint8_t* b1 = block(1, 1);
  b1[0] = 0x00;
  b1[1] = 0xc0;
  for (int j = 0; j < 32; ++j) b1[2 + j] = 3;
  b1[2 + 31] = 0x80;
  const WeightView w{WeightType::kQ8_0, data.data(), 2, 64};
  std::vector<float> out(64);
  DequantizeRow(w, 1, out.data());
  for (int j = 0; j < 32; ++j) EXPECT_EQ(out[j], 0.5f * (j - 16)) << j;
  for (int j = 32; j < 63; ++j) EXPECT_EQ(out[j], -6.0f) << j;
  EXPECT_EQ(out[63], 256.0f);
  DequantizeRow(w, 0, out.data());  // all-zero row
  for (float v : out) EXPECT_EQ(v, 0.0f);
}

TEST(DequantizeRow, F16Bf16F32Rows) {
  const uint16_t f16[2][3] = {{0x3c00, 0xc000, 0x0001}, {0x7bff, 0x3555, 0x8000}};
  const uint16_t bf16[2][3] = {{0x3f80, 0xc040, 0x4049}, {0x0001, 0x7f80, 0xbf00}};
  const float f32[2][3] = {{1.5f, -2.25f, 3.0f}, {4.0f, 5.5f, -6.0f}};
  float out[3];
  DequantizeRow(WeightView{WeightType::kF16, f16, 2, 3}, 1, out);
  EXPECT_EQ(out[0], 65504.0f);
  EXPECT_EQ(out[1], 0.333251953125f);
  EXPECT_EQ(Bits(out[2]), 0x80000000u);
  DequantizeRow(WeightView{WeightType::kBF16, bf16, 2, 3}, 0, out);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -3.0f);
  EXPECT_EQ(out[2], 3.140625f);
  DequantizeRow(WeightView{WeightType::kBF16, bf16, 2, 3}, 1, out);
  EXPECT_EQ(out[2], -0.5f);
  DequantizeRow(WeightView{WeightType::kF32, f32, 2, 3}, 1, out);
  EXPECT_EQ(out[0], 4.0f);
  EXPECT_EQ(out[2], -6.0f);
}

// ---------------------------------------------------------------------------------------
// Errors.

TEST(LinearCreate, RejectsBadInput) {
  const TestWeight a = MakeWeight(WeightType::kF16, 8, 64, 1);
  const TestWeight b = MakeWeight(WeightType::kF16, 8, 32, 2);
  const TestWeight c = MakeWeight(WeightType::kBF16, 8, 64, 3);
  const TestWeight q = MakeWeight(WeightType::kQ8_0, 2, 64, 4);
  const TestWeight k4 = MakeWeight(WeightType::kQ4_K, 2, 512, 5);
  for (Precision p : {Precision::kExact, Precision::kFast}) {
    auto code = [&](std::vector<WeightView> parts, int max_tokens = 8) {
      return Linear::Create(parts, p, max_tokens).status().code();
    };
    const auto kInvalid = absl::StatusCode::kInvalidArgument;
    EXPECT_EQ(code({}), kInvalid) << "no parts";
    EXPECT_EQ(code({a.view, b.view}), kInvalid) << "cols mismatch";
    EXPECT_TRUE(Linear::Create({a.view, c.view}, p, 8).ok()) << "types may differ";
    EXPECT_EQ(code({a.view}, 0), kInvalid) << "max_tokens 0";
    WeightView bad = a.view;
    bad.rows = 0;
    EXPECT_EQ(code({bad}), kInvalid) << "zero rows";
    bad = a.view;
    bad.cols = -4;
    EXPECT_EQ(code({bad}), kInvalid) << "negative cols";
    bad = a.view;
    bad.data = nullptr;
    EXPECT_EQ(code({bad}), kInvalid) << "null data";
    bad = q.view;
    bad.cols = 48;
    EXPECT_EQ(code({bad}), kInvalid) << "q8_0 cols % 32";
    bad = k4.view;
    bad.cols = 288;
    EXPECT_EQ(code({bad}), kInvalid) << "q4_k cols % 256";
    bad = a.view;
    bad.type = static_cast<WeightType>(42);
    EXPECT_EQ(code({bad}), kInvalid) << "unknown type";
    EXPECT_TRUE(Linear::Create({a.view, a.view}, p, 8).ok());
  }
  EXPECT_EQ(Linear::Create({a.view}, static_cast<Precision>(7), 8).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace quill::engine::kernels
