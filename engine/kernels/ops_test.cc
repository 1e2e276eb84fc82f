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
      reference::Rope(want.data(), pos.data(), rows, s.n_heads, s.head_dim, s.rope_dim, s.base);
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

}  // namespace
}  // namespace quill::engine::kernels
