// The engine's acceptance rule for a draft token under sampling (EmitTokens): draw the
// row's token with the sequence's sampler exactly as without speculation, and accept the
// draft iff the draw equals it; a rejected draw is the emitted token. For a point-mass
// draft this is the standard speculative rule: accept t with probability p(t) (p = the
// processed distribution: penalties, temperature, top-k/p, min-p), else emit a sample of p
// with t removed and renormalized. Checked here statistically on toy distributions.

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/sampler/sampler.h"
#include "gtest/gtest.h"

namespace quill::engine {
namespace {

// softmax(logits / temperature) over the top_k largest (all if 0).
std::vector<double> Processed(const std::vector<float>& logits, float temperature, int top_k) {
  std::vector<float> sorted = logits;
  std::sort(sorted.rbegin(), sorted.rend());
  const float cutoff = top_k > 0 ? sorted[top_k - 1] : -INFINITY;
  std::vector<double> p(logits.size(), 0.0);
  double total = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] < cutoff) continue;
    p[i] = std::exp((logits[i] - sorted[0]) / temperature);
    total += p[i];
  }
  for (double& x : p) x /= total;
  return p;
}

struct Case {
  float temperature;
  int top_k;
  TokenId draft;
};

TEST(SpeculativeSamplingTest, AcceptsWithTargetProbabilityAndRejectsToTheRenormalizedRest) {
  const std::vector<float> logits = {2.0f, 1.0f, 0.5f, 0.0f, -1.0f};
  const std::vector<TokenId> history = {1, 2};
  // 200k draws: a frequency's standard error is at most 0.5 / sqrt(n) ~ 0.0011 (less for
  // the conditional ones, n >= ~60k rejections), so 0.008 is > 5 sigma; the seed is fixed,
  // so the test is deterministic anyway.
  constexpr int kDraws = 200000;
  constexpr double kTolerance = 0.008;
  for (const Case& c : {Case{1.0f, 0, 0}, Case{1.0f, 0, 3}, Case{0.7f, 3, 1}, Case{0.7f, 3, 4}}) {
    SCOPED_TRACE(testing::Message() << "temperature " << c.temperature << " top_k " << c.top_k
                                    << " draft " << c.draft);
    SamplingParams params;
    params.temperature = c.temperature;
    params.top_k = c.top_k;
    params.seed = 1234;
    Sampler sampler(params, static_cast<int>(logits.size()));
    const std::vector<double> p = Processed(logits, c.temperature, c.top_k);
    int accepted = 0;
    std::vector<int> rejected_as(logits.size(), 0);
    for (int i = 0; i < kDraws; ++i) {
      const TokenId token = sampler.Sample(logits, history, {});
      if (token == c.draft) {
        ++accepted;
      } else {
        ++rejected_as[token];
      }
    }
    const double accept_rate = static_cast<double>(accepted) / kDraws;
    EXPECT_NEAR(accept_rate, p[c.draft], kTolerance);
    const int rejections = kDraws - accepted;
    ASSERT_GT(rejections, 0);
    EXPECT_EQ(rejected_as[c.draft], 0);
    for (size_t x = 0; x < logits.size(); ++x) {
      if (static_cast<TokenId>(x) == c.draft) continue;
      const double expected = p[x] / (1.0 - p[c.draft]);
      EXPECT_NEAR(static_cast<double>(rejected_as[x]) / rejections, expected, kTolerance)
          << "token " << x;
    }
  }
}

}  // namespace
}  // namespace quill::engine
