#include "engine/kernels/ops.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <vector>

#include "engine/kernels/kernel_test_util.h"
#include "engine/kernels/reference/reference_kernels.h"
#include "gtest/gtest.h"

namespace quill::engine::kernels {
namespace {

using testing::MaxAbsDiff;
using testing::Path;
using testing::PathName;
using testing::PathTest;
using testing::RandomVector;
using testing::RelativeL2;
using ::testing::Combine;
using ::testing::Values;

constexpr double kFloatEps = 1.1920929e-7;

class OpsTest : public PathTest {};

const auto kPaths = Values(Path::kAvx512, Path::kPortable);
std::string PathParamName(const ::testing::TestParamInfo<Path>& info) {
  return PathName(info.param);
}

// ---- RmsNorm ----

TEST_P(OpsTest, RmsNormMatchesReference) {
  for (int rows : {1, 3, 17}) {
    for (int dim : {8, 33, 128, 2048}) {
      const std::vector<float> x = RandomVector(int64_t{rows} * dim, rows * 100 + dim, -2, 2);
      const std::vector<float> w = RandomVector(dim, dim, 0.5f, 1.5f);
      std::vector<float> got(x.size()), want(x.size());
      RmsNorm(x.data(), w.data(), rows, dim, 1e-5f, got.data());
      reference::RmsNorm(x.data(), w.data(), rows, dim, 1e-5f, want.data());
      EXPECT_LT(RelativeL2(got, want), 4 * kFloatEps * std::log2(2.0 * dim))
          << "rows " << rows << " dim " << dim;
    }
  }
}

TEST_P(OpsTest, RmsNormInPlaceAndEps) {
  const int rows = 3, dim = 33;
  std::vector<float> x = RandomVector(rows * dim, 5, -1e-3f, 1e-3f);  // eps matters here
  const std::vector<float> w = RandomVector(dim, 6, 0.5f, 1.5f);
  std::vector<float> want(x.size());
  reference::RmsNorm(x.data(), w.data(), rows, dim, 1e-2f, want.data());
  RmsNorm(x.data(), w.data(), rows, dim, 1e-2f, x.data());
  EXPECT_LT(RelativeL2(x, want), 1e-6);
}

TEST_P(OpsTest, RmsNormRowsAreBatchInvariant) {
  const int rows = 64, dim = 2048;  // large enough to run in parallel
  const std::vector<float> x = RandomVector(rows * dim, 7, -3, 3);
  const std::vector<float> w = RandomVector(dim, 8, 0.5f, 1.5f);
  std::vector<float> all(x.size()), one(dim);
  RmsNorm(x.data(), w.data(), rows, dim, 1e-6f, all.data());
  for (int r : {0, 17, 63}) {
    RmsNorm(x.data() + r * dim, w.data(), 1, dim, 1e-6f, one.data());
    EXPECT_EQ(std::memcmp(one.data(), all.data() + r * dim, dim * sizeof(float)), 0) << r;
  }
}

// ---- Rope ----

TEST_P(OpsTest, RopeMatchesReference) {
  struct Shape {
    int n_heads, head_dim, rope_dim;
    float base;
  };
  for (const Shape s : {Shape{4, 8, 8, 10000.0f}, Shape{2, 32, 32, 500000.0f},
                        Shape{4, 64, 64, 10000.0f}, Shape{3, 128, 128, 10000.0f},
                        Shape{2, 64, 32, 10000.0f}}) {
    for (int rows : {1, 3, 17}) {
      std::vector<float> got = RandomVector(int64_t{rows} * s.n_heads * s.head_dim, rows, -2, 2);
      std::vector<float> want = got;
      std::vector<int32_t> pos(rows);
      for (int r = 0; r < rows; ++r) pos[r] = (r * 977 + 3) % 4096;
      Rope(got.data(), pos.data(), rows, s.n_heads, s.head_dim, s.rope_dim, s.base);
      reference::Rope(want.data(), pos.data(), rows, s.n_heads, s.head_dim,
                      RopeSpec{s.rope_dim, s.base});
      EXPECT_LT(MaxAbsDiff(got, want), 2e-6) << "head_dim " << s.head_dim << " rows " << rows;
    }
  }
}

// Independent of the reference: hand-derived angles for head_dim 4 (pairs at frequencies
// 1 and base^-1/2), identity at position 0, dims past rope_dim untouched.
TEST_P(OpsTest, RopeKnownRotation) {
  std::vector<float> x = {1.0f, 2.0f, 3.0f, 4.0f,    // pos 0
                          1.0f, 2.0f, 3.0f, 4.0f,    // pos 1
                          0.5f, -1.0f, 7.0f, 9.0f};  // pos 3, rope_dim 2 would leave 7, 9
  const std::vector<int32_t> pos = {0, 1, 3};
  Rope(x.data(), pos.data(), 3, 1, 4, 4, 10000.0f);
  EXPECT_FLOAT_EQ(x[0], 1.0f);
  EXPECT_FLOAT_EQ(x[3], 4.0f);
  const double c1 = std::cos(1.0), s1 = std::sin(1.0);
  const double c2 = std::cos(0.01), s2 = std::sin(0.01);
  EXPECT_NEAR(x[4], 1 * c1 - 2 * s1, 1e-6);
  EXPECT_NEAR(x[5], 1 * s1 + 2 * c1, 1e-6);
  EXPECT_NEAR(x[6], 3 * c2 - 4 * s2, 1e-6);
  EXPECT_NEAR(x[7], 3 * s2 + 4 * c2, 1e-6);
  EXPECT_NEAR(x[8], 0.5 * std::cos(3.0) + 1.0 * std::sin(3.0), 1e-6);

  std::vector<float> partial = {0.5f, -1.0f, 7.0f, 9.0f};
  const int32_t p3 = 3;
  Rope(partial.data(), &p3, 1, 1, 4, 2, 10000.0f);
  EXPECT_NEAR(partial[0], 0.5 * std::cos(3.0) + 1.0 * std::sin(3.0), 1e-6);
  EXPECT_EQ(partial[2], 7.0f);
  EXPECT_EQ(partial[3], 9.0f);
}

TEST_P(OpsTest, RopeRowsAreBatchInvariant) {
  const int rows = 40, heads = 8, hd = 64;
  const std::vector<float> x = RandomVector(rows * heads * hd, 9);
  std::vector<int32_t> pos(rows);
  for (int r = 0; r < rows; ++r) pos[r] = 37 * r;
  std::vector<float> all = x;
  Rope(all.data(), pos.data(), rows, heads, hd, hd, 10000.0f);
  for (int r : {0, 21, 39}) {
    std::vector<float> one(x.begin() + r * heads * hd, x.begin() + (r + 1) * heads * hd);
    Rope(one.data(), &pos[r], 1, heads, hd, hd, 10000.0f);
    EXPECT_EQ(std::memcmp(one.data(), all.data() + r * heads * hd, one.size() * 4), 0) << r;
  }
}

// ---- SwiGlu ----

TEST_P(OpsTest, SwiGluMatchesReference) {
  for (int rows : {1, 3, 17}) {
    for (int ffn : {8, 33, 128, 2048}) {
      std::vector<float> gate_up = RandomVector(int64_t{rows} * 2 * ffn, rows * 7 + ffn, -8, 8);
      // Extremes: exp(-g) overflows or vanishes.
      gate_up[0] = 100.0f;
      gate_up[1 % ffn] = -100.0f;
      gate_up[2 % ffn] = -87.5f;
      std::vector<float> got(int64_t{rows} * ffn), want(got.size());
      SwiGlu(gate_up.data(), rows, ffn, got.data());
      reference::SwiGlu(gate_up.data(), rows, ffn, want.data());
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], 4 * kFloatEps * std::fabs(want[i]) + 1e-30)
            << "rows " << rows << " ffn " << ffn << " at " << i;
      }
    }
  }
}

TEST_P(OpsTest, SwiGluKnownValues) {
  // gate | up for ffn = 2: silu(0) = 0, silu(1) = 1 / (1 + e^-1).
  const std::vector<float> gate_up = {0.0f, 1.0f, 5.0f, 2.0f};
  std::vector<float> out(2);
  SwiGlu(gate_up.data(), 1, 2, out.data());
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_NEAR(out[1], 2.0 / (1.0 + std::exp(-1.0)), 1e-6);
}

// ---- LayerNorm ----

TEST_P(OpsTest, LayerNormMatchesReference) {
  for (int rows : {1, 3, 17}) {
    for (int dim : {8, 33, 64, 129, 2048}) {
      // An offset far from zero: the mean must really be subtracted.
      const std::vector<float> x = RandomVector(int64_t{rows} * dim, rows * 31 + dim, 3, 7);
      const std::vector<float> w = RandomVector(dim, dim + 1, 0.5f, 1.5f);
      const std::vector<float> b = RandomVector(dim, dim + 2, -1, 1);
      for (const float* bias : {b.data(), static_cast<const float*>(nullptr)}) {
        std::vector<float> got(x.size()), want(x.size());
        LayerNorm(x.data(), w.data(), bias, rows, dim, 1e-5f, got.data());
        reference::LayerNorm(x.data(), w.data(), bias, rows, dim, 1e-5f, want.data());
        EXPECT_LT(MaxAbsDiff(got, want), 2e-5) << "rows " << rows << " dim " << dim;
      }
    }
  }
}

// Hand-derived: [1, 2, 3, 4] has mean 2.5 and variance 1.25.
TEST_P(OpsTest, LayerNormKnownValues) {
  std::vector<float> x = {1, 2, 3, 4};
  const std::vector<float> w = {1, 1, 2, 1}, b = {0, 0, 0, 10};
  LayerNorm(x.data(), w.data(), b.data(), 1, 4, 0.0f, x.data());  // in place
  const double s = 1.0 / std::sqrt(1.25);
  EXPECT_NEAR(x[0], -1.5 * s, 1e-6);
  EXPECT_NEAR(x[1], -0.5 * s, 1e-6);
  EXPECT_NEAR(x[2], 2 * 0.5 * s, 1e-6);
  EXPECT_NEAR(x[3], 1.5 * s + 10, 1e-5);
}

TEST_P(OpsTest, LayerNormRowsAreBatchInvariant) {
  const int rows = 64, dim = 2048;
  const std::vector<float> x = RandomVector(rows * dim, 17, -3, 3);
  const std::vector<float> w = RandomVector(dim, 18, 0.5f, 1.5f);
  const std::vector<float> b = RandomVector(dim, 19);
  std::vector<float> all(x.size()), one(dim);
  LayerNorm(x.data(), w.data(), b.data(), rows, dim, 1e-5f, all.data());
  for (int r : {0, 17, 63}) {
    LayerNorm(x.data() + r * dim, w.data(), b.data(), 1, dim, 1e-5f, one.data());
    EXPECT_EQ(std::memcmp(one.data(), all.data() + r * dim, dim * sizeof(float)), 0) << r;
  }
}

// ---- Rope: NEOX layout and frequency factors ----

TEST_P(OpsTest, RopeNeoxAndFactorsMatchReference) {
  struct Shape {
    int n_heads, head_dim, rope_dim;
  };
  const std::vector<float> factors = RandomVector(512, 3, 1.0f, 8.0f);
  for (const Shape s :
       {Shape{4, 8, 8}, Shape{2, 32, 32}, Shape{3, 96, 96}, Shape{2, 64, 32}, Shape{5, 18, 14}}) {
    for (RopeLayout layout : {RopeLayout::kNormal, RopeLayout::kNeox}) {
      for (const float* ff : {static_cast<const float*>(nullptr), factors.data()}) {
        const RopeSpec spec{s.rope_dim, 500000.0f, layout, ff};
        for (int rows : {1, 3, 17}) {
          std::vector<float> got =
              RandomVector(int64_t{rows} * s.n_heads * s.head_dim, rows + 5, -2, 2);
          std::vector<float> want = got;
          std::vector<int32_t> pos(rows);
          for (int r = 0; r < rows; ++r) pos[r] = (r * 613 + 1) % 8192;
          Rope(got.data(), pos.data(), rows, s.n_heads, s.head_dim, spec);
          reference::Rope(want.data(), pos.data(), rows, s.n_heads, s.head_dim, spec);
          EXPECT_LT(MaxAbsDiff(got, want), 2e-6)
              << "head_dim " << s.head_dim << " neox " << (layout == RopeLayout::kNeox)
              << " factors " << (ff != nullptr) << " rows " << rows;
        }
      }
    }
  }
}

// Hand-derived, independent of the reference: head_dim 4, base 10000, so pair 0 turns at
// frequency 1 and pair 1 at 10000^-1/2 = 0.01. NEOX pairs are (0, 2) and (1, 3); a factor
// of 4 on pair 0 divides its frequency.
TEST_P(OpsTest, RopeNeoxKnownRotation) {
  std::vector<float> x = {1.0f, 2.0f, 3.0f, 4.0f};
  const int32_t pos = 2;
  const float factors[2] = {4.0f, 1.0f};
  Rope(x.data(), &pos, 1, 1, 4, RopeSpec{4, 10000.0f, RopeLayout::kNeox, factors});
  const double a0 = 2.0 / 4.0, a1 = 2.0 * 0.01;
  EXPECT_NEAR(x[0], 1 * std::cos(a0) - 3 * std::sin(a0), 1e-6);
  EXPECT_NEAR(x[2], 1 * std::sin(a0) + 3 * std::cos(a0), 1e-6);
  EXPECT_NEAR(x[1], 2 * std::cos(a1) - 4 * std::sin(a1), 1e-6);
  EXPECT_NEAR(x[3], 2 * std::sin(a1) + 4 * std::cos(a1), 1e-6);

  // Partial NEOX rotation (rope_dim 2 of head_dim 4): pair (0, 1) only.
  std::vector<float> partial = {1.0f, 2.0f, 3.0f, 4.0f};
  Rope(partial.data(), &pos, 1, 1, 4, RopeSpec{2, 10000.0f, RopeLayout::kNeox});
  EXPECT_NEAR(partial[0], 1 * std::cos(2.0) - 2 * std::sin(2.0), 1e-6);
  EXPECT_NEAR(partial[1], 1 * std::sin(2.0) + 2 * std::cos(2.0), 1e-6);
  EXPECT_EQ(partial[2], 3.0f);
  EXPECT_EQ(partial[3], 4.0f);
}

// ---- GeGlu, Gelu, SoftCap ----

// A few ulp of the value, times the growth of exp's argument (|u| ~ 1.6 |x| + 0.07 |x|^3):
// its float32 rounding is amplified by exp, whatever the formula (tanh or sigmoid form).
// Plus 1e-15 absolute: for x < -8 the reference's 1 + tanh(u) underflows to 0 even in long
// double while the true value is ~1e-20.
double GeluTolerance(double x, double want) {
  const double u = std::fabs(x) * (1.6 + 0.072 * x * x);
  return 8 * kFloatEps * (1 + u) * std::fabs(want) + 1e-15;
}

TEST_P(OpsTest, GeGluMatchesReference) {
  for (int rows : {1, 3, 17}) {
    for (int ffn : {8, 33, 256, 2047}) {
      std::vector<float> gate_up = RandomVector(int64_t{rows} * 2 * ffn, rows * 5 + ffn, -8, 8);
      gate_up[0] = 60.0f;  // exp overflows / vanishes
      gate_up[1 % ffn] = -60.0f;
      gate_up[2 % ffn] = 0.0f;
      std::vector<float> got(int64_t{rows} * ffn), want(got.size());
      GeGlu(gate_up.data(), rows, ffn, got.data());
      reference::GeGlu(gate_up.data(), rows, ffn, want.data());
      for (int r = 0; r < rows; ++r) {
        for (int j = 0; j < ffn; ++j) {
          const int64_t i = int64_t{r} * ffn + j;
          ASSERT_NEAR(got[i], want[i], GeluTolerance(gate_up[int64_t{r} * 2 * ffn + j], want[i]))
              << "rows " << rows << " ffn " << ffn << " at " << i;
        }
      }
    }
  }
}

TEST_P(OpsTest, GeluMatchesReference) {
  for (int64_t n : {int64_t{1}, int64_t{15}, int64_t{17}, int64_t{1000}, int64_t{100003}}) {
    std::vector<float> x = RandomVector(n, n, -10, 10);
    x[0] = -30.0f;
    std::vector<float> got(n), want(n);
    Gelu(x.data(), n, got.data());
    reference::Gelu(x.data(), n, want.data());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_NEAR(got[i], want[i], GeluTolerance(x[i], want[i])) << n << " at " << i;
    }
    Gelu(x.data(), n, x.data());  // in place
    EXPECT_EQ(x, got);
  }
}

// Hand-derived from the tanh formula: gelu(0) = 0, gelu(1) and gelu(-1) differ by exactly 1
// (gelu(x) - gelu(-x) = x), and gelu(x) -> x for large x.
TEST_P(OpsTest, GeluKnownValues) {
  const std::vector<float> x = {0.0f, 1.0f, -1.0f, 20.0f};
  std::vector<float> y(x.size());
  Gelu(x.data(), 4, y.data());
  const double g1 = 0.5 * (1 + std::tanh(std::sqrt(2 / M_PI) * (1 + 0.044715)));
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_NEAR(y[1], g1, 1e-6);
  EXPECT_NEAR(y[1] - y[2], 1.0, 1e-6);
  EXPECT_EQ(y[3], 20.0f);
}

TEST_P(OpsTest, SoftCapMatchesReference) {
  for (float cap : {10.0f, 30.0f, 50.0f}) {
    for (int64_t n : {int64_t{1}, int64_t{17}, int64_t{32000}, int64_t{100001}}) {
      std::vector<float> got = RandomVector(n, n + 1, -5 * cap, 5 * cap);
      got[0] = 1e-4f;  // the small-|x| branch
      if (n > 1) got[1] = -0.2f * cap;
      std::vector<float> want = got;
      SoftCap(got.data(), n, cap);
      reference::SoftCap(want.data(), n, cap);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_NEAR(got[i], want[i], 8 * kFloatEps * std::fabs(want[i])) << cap << " at " << i;
      }
    }
  }
}

// Hand-derived: cap * tanh(x / cap) is odd, ~x near 0, saturates at +-cap.
TEST_P(OpsTest, SoftCapKnownValues) {
  std::vector<float> x = {0.0f, 10.0f, -10.0f, 1e6f, -1e6f, 0.001f};
  SoftCap(x.data(), 6, 10.0f);
  EXPECT_EQ(x[0], 0.0f);
  EXPECT_NEAR(x[1], 10 * std::tanh(1.0), 1e-5);
  EXPECT_EQ(x[2], -x[1]);
  EXPECT_EQ(x[3], 10.0f);
  EXPECT_EQ(x[4], -10.0f);
  EXPECT_NEAR(x[5], 0.001f, 4e-10);
}

INSTANTIATE_TEST_SUITE_P(Paths, OpsTest, kPaths, PathParamName);

// ---- AddInPlace ----

TEST(AddInPlaceTest, AddsElementwise) {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{17}, int64_t{300001}}) {
    std::vector<float> out = RandomVector(n, 1);
    const std::vector<float> x = RandomVector(n, 2);
    std::vector<float> want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = out[i] + x[i];
    AddInPlace(out.data(), x.data(), n);
    EXPECT_EQ(out, want) << n;
  }
}

// ---- AddBias, Scale, AddTableRows ----

TEST(AddBiasTest, MatchesReference) {
  for (int rows : {1, 3, 64}) {
    for (int cols : {1, 17, 3000}) {
      std::vector<float> got = RandomVector(int64_t{rows} * cols, rows + cols);
      const std::vector<float> bias = RandomVector(cols, cols);
      std::vector<float> want = got;
      AddBias(got.data(), bias.data(), rows, cols);
      reference::AddBias(want.data(), bias.data(), rows, cols);
      EXPECT_EQ(got, want) << rows << " x " << cols;
    }
  }
}

TEST(ScaleTest, MatchesReference) {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{17}, int64_t{300001}}) {
    std::vector<float> got = RandomVector(n, 3);
    std::vector<float> want = got;
    Scale(got.data(), n, 9.797959f);
    reference::Scale(want.data(), n, 9.797959f);
    EXPECT_EQ(got, want) << n;
  }
}

TEST(AddTableRowsTest, MatchesReference) {
  const int dim = 67, table_rows = 128;
  const std::vector<float> table = RandomVector(int64_t{table_rows} * dim, 4);
  for (int rows : {1, 5, 200}) {
    std::vector<int32_t> index(rows);
    for (int r = 0; r < rows; ++r) index[r] = (r * 37 + 11) % table_rows;
    const std::vector<float> before = RandomVector(int64_t{rows} * dim, rows);
    std::vector<float> got = before;
    std::vector<float> want = before;
    AddTableRows(got.data(), table.data(), index.data(), rows, dim);
    reference::AddTableRows(want.data(), table.data(), index.data(), rows, dim);
    EXPECT_EQ(got, want) << rows;
    // The last row really got table row index[rows - 1].
    const int64_t last = int64_t{rows - 1} * dim;
    EXPECT_EQ(got[last + 3], before[last + 3] + table[int64_t{index[rows - 1]} * dim + 3]);
  }
}

}  // namespace
}  // namespace quill::engine::kernels
