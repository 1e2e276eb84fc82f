#include "engine/sampler/sampler.h"

#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/heap_allocations.h"

namespace quill::engine {
namespace {

using ::testing::HasSubstr;

std::vector<float> RandomLogits(int n, uint64_t seed, float spread = 3.0f) {
  std::mt19937_64 rng(seed);
  std::vector<float> x(n);
  for (float& v : x) v = spread * (static_cast<double>(rng() >> 11) / 9007199254740992.0 * 2 - 1);
  return x;
}

int ArgmaxOf(const std::vector<float>& x) {
  int best = 0;
  for (int i = 1; i < static_cast<int>(x.size()); ++i) {
    if (x[i] > x[best]) best = i;
  }
  return best;
}

SamplingParams Params(float temperature, uint64_t seed = 1) {
  SamplingParams p;
  p.temperature = temperature;
  p.seed = seed;
  return p;
}

TEST(SamplerTest, GreedyIsArgmax) {
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const std::vector<float> logits = RandomLogits(1000, seed);
    Sampler sampler(Params(0.0f, seed), 1000);
    EXPECT_EQ(sampler.Sample(logits, {}, {}), ArgmaxOf(logits));
  }
}

TEST(SamplerTest, GreedyTiesGoToLowestId) {
  const std::vector<float> logits = {0.0f, 2.0f, -1.0f, 2.0f, 2.0f};
  Sampler sampler(Params(0.0f), 5);
  EXPECT_EQ(sampler.Sample(logits, {}, {}), 1);
}

TEST(SamplerTest, GreedyIgnoresNan) {
  const std::vector<float> logits = {std::nanf(""), 1.0f, 3.0f, std::nanf("")};
  Sampler greedy(Params(0.0f), 4);
  EXPECT_EQ(greedy.Sample(logits, {}, {}), 2);
  Sampler random(Params(1.0f), 4);
  for (int i = 0; i < 50; ++i) {
    const TokenId t = random.Sample(logits, {}, {});
    EXPECT_TRUE(t == 1 || t == 2) << t;
  }
}

std::vector<TokenId> Draw(const SamplingParams& params, const std::vector<float>& logits,
                          int count) {
  Sampler sampler(params, static_cast<int>(logits.size()));
  std::vector<TokenId> out;
  for (int i = 0; i < count; ++i) out.push_back(sampler.Sample(logits, {}, {}));
  return out;
}

TEST(SamplerTest, SameSeedSameSequenceDifferentSeedsDiffer) {
  const std::vector<float> logits = RandomLogits(500, 7, 1.0f);
  SamplingParams p = Params(1.0f, 42);
  p.top_p = 0.95f;
  const std::vector<TokenId> a = Draw(p, logits, 64);
  const std::vector<TokenId> b = Draw(p, logits, 64);
  EXPECT_EQ(a, b);
  p.seed = 43;
  const std::vector<TokenId> c = Draw(p, logits, 64);
  EXPECT_NE(a, c);
  // Not all the same token: the draws really are random.
  EXPECT_GT(std::set<TokenId>(a.begin(), a.end()).size(), 10u);
}

// The draw is defined by mt19937_64 bits alone (no std distributions), so a seed pins the
// tokens on every platform. The expected ids follow from the first mt19937_64 outputs for
// seed 5 and the cumulative weights of a uniform 4-token distribution.
TEST(SamplerTest, UniformDrawUsesTop53Bits) {
  std::mt19937_64 rng(5);
  std::vector<TokenId> want;
  for (int i = 0; i < 32; ++i) {
    const double u = static_cast<double>(rng() >> 11) / 9007199254740992.0;
    want.push_back(static_cast<TokenId>(u * 4.0));
  }
  const std::vector<float> logits(4, 0.5f);
  EXPECT_EQ(Draw(Params(1.0f, 5), logits, 32), want);
}

TEST(SamplerTest, TopKOneIsGreedy) {
  for (uint64_t seed = 0; seed < 10; ++seed) {
    const std::vector<float> logits = RandomLogits(300, 100 + seed, 0.5f);
    SamplingParams p = Params(1.5f, seed);
    p.top_k = 1;
    for (TokenId t : Draw(p, logits, 20)) EXPECT_EQ(t, ArgmaxOf(logits));
  }
}

TEST(SamplerTest, TinyTopPIsGreedy) {
  for (uint64_t seed = 0; seed < 10; ++seed) {
    const std::vector<float> logits = RandomLogits(300, 200 + seed, 0.5f);
    SamplingParams p = Params(1.0f, seed);
    p.top_p = 1e-6f;
    for (TokenId t : Draw(p, logits, 20)) EXPECT_EQ(t, ArgmaxOf(logits));
  }
}

TEST(SamplerTest, TopKRestrictsToTheKBest) {
  const std::vector<float> logits = {0.1f, 2.0f, 0.3f, 1.9f, 1.8f, 0.2f, 0.0f};
  SamplingParams p = Params(1.0f, 3);
  p.top_k = 3;
  std::set<TokenId> got;
  for (TokenId t : Draw(p, logits, 500)) got.insert(t);
  EXPECT_EQ(got, (std::set<TokenId>{1, 3, 4}));
}

TEST(SamplerTest, TopPKeepsSmallestNucleus) {
  // Probabilities 0.5, 0.3, 0.15, 0.05 (as logs).
  const std::vector<float> logits = {std::log(0.15f), std::log(0.5f), std::log(0.05f),
                                     std::log(0.3f)};
  SamplingParams p = Params(1.0f, 9);
  p.top_p = 0.75f;  // 0.5 < 0.75 <= 0.8: tokens 1 and 3
  std::set<TokenId> got;
  for (TokenId t : Draw(p, logits, 500)) got.insert(t);
  EXPECT_EQ(got, (std::set<TokenId>{1, 3}));
  p.top_p = 0.9f;  // 0.8 < 0.9 <= 0.95: adds token 0
  got.clear();
  for (TokenId t : Draw(p, logits, 500)) got.insert(t);
  EXPECT_EQ(got, (std::set<TokenId>{0, 1, 3}));
}

TEST(SamplerTest, TopPOnLargeVocabularyStaysInNucleus) {
  // 5000 tokens; the nucleus must grow past the first sorted prefix.
  const std::vector<float> logits = RandomLogits(5000, 77, 0.2f);
  SamplingParams p = Params(1.0f, 4);
  p.top_p = 0.5f;
  std::vector<int> order(logits.size());
  for (int i = 0; i < static_cast<int>(order.size()); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  double z = 0;
  for (float l : logits) z += std::exp(static_cast<double>(l));
  std::set<TokenId> nucleus;
  double cumulative = 0;
  for (int id : order) {
    nucleus.insert(id);
    cumulative += std::exp(static_cast<double>(logits[id])) / z;
    if (cumulative >= 0.5) break;
  }
  ASSERT_GT(nucleus.size(), 64u);
  for (TokenId t : Draw(p, logits, 300)) EXPECT_TRUE(nucleus.count(t)) << t;
}

TEST(SamplerTest, MinPDropsUnlikelyTokens) {
  // Relative to the top token: 1, 0.5, 0.2, 0.05.
  const std::vector<float> logits = {std::log(0.2f), std::log(1.0f), std::log(0.05f),
                                     std::log(0.5f)};
  SamplingParams p = Params(1.0f, 11);
  p.min_p = 0.1f;
  std::set<TokenId> got;
  for (TokenId t : Draw(p, logits, 1000)) got.insert(t);
  EXPECT_EQ(got, (std::set<TokenId>{0, 1, 3}));
  p.min_p = 0.3f;
  got.clear();
  for (TokenId t : Draw(p, logits, 1000)) got.insert(t);
  EXPECT_EQ(got, (std::set<TokenId>{1, 3}));
  p.min_p = 1.0f;
  for (TokenId t : Draw(p, logits, 100)) EXPECT_EQ(t, 1);
}

TEST(SamplerTest, RepetitionPenaltyChangesArgmax) {
  const std::vector<float> logits = {2.0f, 1.9f, -0.5f, -0.4f};
  SamplingParams p = Params(0.0f);
  p.repetition_penalty = 1.5f;
  Sampler sampler(p, 4);
  EXPECT_EQ(sampler.Sample(logits, {}, {}), 0);
  // Positive logit divided: 2.0 / 1.5 = 1.33 < 1.9.
  EXPECT_EQ(sampler.Sample(logits, std::vector<TokenId>{0}, {}), 1);
  // A repeated token is penalized once, not per occurrence: 2.0/1.5 > 1.9/1.5^0 is false,
  // but 2.0/1.5 = 1.33 > 1.9/1.5 = 1.27 when both are penalized.
  EXPECT_EQ(sampler.Sample(logits, std::vector<TokenId>{0, 1, 0, 0, 1}, {}), 0);
  // Negative logits are multiplied: -0.4 * 1.5 = -0.6 < -0.5.
  const std::vector<float> negative = {-0.5f, -0.4f};
  Sampler neg(p, 2);
  EXPECT_EQ(neg.Sample(negative, {}, {}), 1);
  EXPECT_EQ(neg.Sample(negative, std::vector<TokenId>{1}, {}), 0);
  // Out-of-range history ids are ignored.
  EXPECT_EQ(neg.Sample(negative, std::vector<TokenId>{-3, 7}, {}), 1);
}

TEST(SamplerTest, RepetitionPenaltyOnceAcrossCalls) {
  // The penalty must not leak from one call to the next.
  const std::vector<float> logits = {2.0f, 1.9f};
  SamplingParams p = Params(0.0f);
  p.repetition_penalty = 1.5f;
  Sampler sampler(p, 2);
  EXPECT_EQ(sampler.Sample(logits, std::vector<TokenId>{0}, {}), 1);
  EXPECT_EQ(sampler.Sample(logits, {}, {}), 0);
}

TEST(SamplerTest, LogitBiasIsAddedBeforeTheChoice) {
  const std::vector<float> logits = {2.0f, 1.9f, 0.0f};
  SamplingParams p = Params(0.0f);
  p.logit_bias = {{1, 0.2f}};
  EXPECT_EQ(Sampler(p, 3).Sample(logits, {}, {}), 1);  // 1.9 + 0.2 > 2.0
  p.logit_bias = {{1, 0.06f}};
  EXPECT_EQ(Sampler(p, 3).Sample(logits, {}, {}), 0);  // 1.96 < 2.0
  p.logit_bias = {{1, 0.06f}, {1, 0.06f}};             // the same id twice adds up
  EXPECT_EQ(Sampler(p, 3).Sample(logits, {}, {}), 1);
  p.logit_bias = {{7, 100.0f}, {-1, 100.0f}};  // outside the vocabulary: skipped
  EXPECT_EQ(Sampler(p, 3).Sample(logits, {}, {}), 0);

  // Sampled: -100 bans a token and +100 forces one, whatever the draw.
  SamplingParams sampled = Params(1.0f, 77);
  sampled.logit_bias = {{0, -100.0f}};
  for (TokenId t : Draw(sampled, logits, 2000)) EXPECT_NE(t, 0);
  sampled.logit_bias = {{2, 100.0f}};
  for (TokenId t : Draw(sampled, logits, 2000)) EXPECT_EQ(t, 2);
}

// OpenAI's rule, mu[j] - c[j] * frequency - (c[j] > 0) * presence with c[j] the times token
// j was generated: the sampled frequencies follow the softmax of the penalized logits,
// computed here from that formula (chi-square as in FrequenciesFollowSoftmax below).
TEST(SamplerTest, FrequencyAndPresencePenaltiesFollowOpenAisRule) {
  const std::vector<float> logits = {1.0f, 0.5f, 1.5f, 0.0f, -0.5f};
  const std::vector<TokenId> prompt = {3, 3, 3, 4};  // the prompt does not count
  const std::vector<TokenId> output = {0, 2, 0, 0, 1};
  const std::vector<int> count = {3, 1, 1, 0, 0};
  for (const auto& [frequency, presence] : std::vector<std::pair<float, float>>{
           {0.4f, 0.0f}, {0.0f, 0.8f}, {0.3f, -0.5f}, {-0.2f, 0.6f}}) {
    SCOPED_TRACE(::testing::Message() << "frequency " << frequency << " presence " << presence);
    SamplingParams p = Params(1.0f, 99);
    p.frequency_penalty = frequency;
    p.presence_penalty = presence;
    std::vector<double> prob(5);
    double z = 0;
    for (int i = 0; i < 5; ++i) {
      const double penalized =
          logits[i] - count[i] * double{frequency} - (count[i] > 0 ? double{presence} : 0.0);
      z += prob[i] = std::exp(penalized);
    }
    Sampler sampler(p, 5);
    constexpr int kDraws = 20000;
    std::vector<int> drawn(5, 0);
    for (int i = 0; i < kDraws; ++i) ++drawn[sampler.Sample(logits, prompt, output)];
    double chi2 = 0;
    for (int i = 0; i < 5; ++i) {
      const double expected = kDraws * prob[i] / z;
      chi2 += (drawn[i] - expected) * (drawn[i] - expected) / expected;
    }
    EXPECT_LT(chi2, 30.0);
  }
}

TEST(SamplerTest, OutputPenaltiesCountOnlyTheOutputAndDoNotLeak) {
  const std::vector<float> logits = {2.0f, 1.5f};
  SamplingParams p = Params(0.0f);
  p.frequency_penalty = 0.2f;
  Sampler sampler(p, 2);
  const std::vector<TokenId> zeros = {0, 0, 0};
  EXPECT_EQ(sampler.Sample(logits, zeros, {}), 0);   // in the prompt: no penalty
  EXPECT_EQ(sampler.Sample(logits, {}, zeros), 1);   // 2.0 - 3 * 0.2 = 1.4 < 1.5
  EXPECT_EQ(sampler.Sample(logits, {}, {0, 0}), 0);  // 2.0 - 0.4 = 1.6 > 1.5
  EXPECT_EQ(sampler.Sample(logits, {}, {}), 0);      // counts start from zero each call
  p.frequency_penalty = 0.0f;
  p.presence_penalty = 0.6f;  // once, however often
  Sampler presence(p, 2);
  EXPECT_EQ(presence.Sample(logits, {}, {0}), 1);           // 1.4 < 1.5
  EXPECT_EQ(presence.Sample(logits, {}, {0, 1, 1, 1}), 0);  // 1.4 > 0.9
  p.presence_penalty = -0.6f;                               // negative: encourages repeats
  Sampler encourage(p, 2);
  EXPECT_EQ(encourage.Sample(logits, {}, {1, -4, 9}), 1);  // 2.1 > 2.0; bad ids skipped
}

// Frequencies over 20000 draws follow softmax(logits / T) (chi-square, 4 degrees of
// freedom; 30 is far in the tail for a correct sampler, p < 1e-5).
TEST(SamplerTest, FrequenciesFollowSoftmax) {
  const std::vector<float> logits = {1.0f, 0.0f, 2.0f, -1.0f, 0.5f};
  for (float temperature : {1.0f, 0.7f}) {
    SamplingParams p = Params(temperature, 2024);
    std::vector<double> prob(5);
    double z = 0;
    for (int i = 0; i < 5; ++i) z += prob[i] = std::exp(logits[i] / temperature);
    constexpr int kDraws = 20000;
    std::vector<int> count(5, 0);
    for (TokenId t : Draw(p, logits, kDraws)) ++count[t];
    double chi2 = 0;
    for (int i = 0; i < 5; ++i) {
      const double expected = kDraws * prob[i] / z;
      chi2 += (count[i] - expected) * (count[i] - expected) / expected;
    }
    EXPECT_LT(chi2, 30.0) << "temperature " << temperature;
  }
}

TEST(SamplerTest, SampleDoesNotAllocate) {
  const std::vector<float> logits = RandomLogits(4000, 5);
  std::vector<TokenId> history = {1, 2, 3, 2, 1, 3999};
  SamplingParams p = Params(0.8f, 3);
  p.top_k = 50;
  p.top_p = 0.9f;
  p.min_p = 0.05f;
  p.repetition_penalty = 1.1f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  p.logit_bias = {{7, -100.0f}, {3998, 2.5f}};
  Sampler a(p, 4000);
  p.top_k = 0;
  Sampler b(p, 4000);
  const int64_t before = quill::testing::HeapAllocations();
  for (int i = 0; i < 20; ++i) {
    a.Sample(logits, history, history);
    b.Sample(logits, history, history);
  }
  EXPECT_EQ(quill::testing::HeapAllocations(), before);
}

TEST(SamplerTest, ValidationNamesTheField) {
  EXPECT_TRUE(ValidateSamplingParams(SamplingParams{}).ok());
  struct Case {
    SamplingParams params;
    std::string field;
  };
  auto with = [](auto mutate) {
    SamplingParams p;
    mutate(p);
    return p;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<Case> cases = {
      {with([&](SamplingParams& p) { p.temperature = nan; }), "sampling.temperature"},
      {with([&](SamplingParams& p) { p.temperature = inf; }), "sampling.temperature"},
      {with([&](SamplingParams& p) { p.temperature = -0.5f; }), "sampling.temperature"},
      {with([&](SamplingParams& p) { p.top_p = 0.0f; }), "sampling.top_p"},
      {with([&](SamplingParams& p) { p.top_p = 1.5f; }), "sampling.top_p"},
      {with([&](SamplingParams& p) { p.top_p = nan; }), "sampling.top_p"},
      {with([&](SamplingParams& p) { p.top_k = -1; }), "sampling.top_k"},
      {with([&](SamplingParams& p) { p.min_p = 1.01f; }), "sampling.min_p"},
      {with([&](SamplingParams& p) { p.min_p = -0.1f; }), "sampling.min_p"},
      {with([&](SamplingParams& p) { p.repetition_penalty = 0.0f; }),
       "sampling.repetition_penalty"},
      {with([&](SamplingParams& p) { p.repetition_penalty = -1.0f; }),
       "sampling.repetition_penalty"},
      {with([&](SamplingParams& p) { p.repetition_penalty = inf; }), "sampling.repetition_penalty"},
      {with([&](SamplingParams& p) { p.frequency_penalty = 2.5f; }), "sampling.frequency_penalty"},
      {with([&](SamplingParams& p) { p.frequency_penalty = nan; }), "sampling.frequency_penalty"},
      {with([&](SamplingParams& p) { p.presence_penalty = -2.01f; }), "sampling.presence_penalty"},
      {with([&](SamplingParams& p) { p.presence_penalty = inf; }), "sampling.presence_penalty"},
      {with([&](SamplingParams& p) {
         p.logit_bias = {{1, 100.5f}};
       }),
       "sampling.logit_bias"},
      {with([&](SamplingParams& p) {
         p.logit_bias = {{1, nan}};
       }),
       "sampling.logit_bias"},
      {with([&](SamplingParams& p) {
         p.logit_bias = {{-1, 1.0f}};
       }),
       "sampling.logit_bias"},
  };
  for (const Case& c : cases) {
    const absl::Status s = ValidateSamplingParams(c.params);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.field));
  }
  SamplingParams p;
  p.top_p = 1.5f;
  EXPECT_EQ(ValidateSamplingParams(p).message(), "sampling.top_p must be in (0, 1], got 1.5");
  // Boundaries that are allowed.
  p = SamplingParams{};
  p.temperature = 0.0f;
  p.top_p = 1.0f;
  p.min_p = 1.0f;
  p.top_k = 0;
  p.frequency_penalty = -2.0f;
  p.presence_penalty = 2.0f;
  p.logit_bias = {{0, -100.0f}, {5, 100.0f}};
  EXPECT_TRUE(ValidateSamplingParams(p).ok());
}

TEST(LogprobsTest, MatchesLogSoftmax) {
  const std::vector<float> logits = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f};
  double z = 0;
  for (float l : logits) z += std::exp(static_cast<double>(l));
  std::vector<TokenLogprob> top;
  const float chosen = ComputeLogprobs(logits, 4, 3, &top);
  EXPECT_NEAR(chosen, 0.5 - std::log(z), 1e-6);
  ASSERT_EQ(top.size(), 3u);
  // Descending, ties by id.
  EXPECT_EQ(top[0].id, 1);
  EXPECT_EQ(top[1].id, 3);
  EXPECT_EQ(top[2].id, 0);
  EXPECT_NEAR(top[0].logprob, 3.0 - std::log(z), 1e-6);
  EXPECT_EQ(top[0].logprob, top[1].logprob);
  EXPECT_NEAR(top[2].logprob, 1.0 - std::log(z), 1e-6);
}

TEST(LogprobsTest, TopNEdges) {
  const std::vector<float> logits = {0.0f, 1.0f};
  std::vector<TokenLogprob> top(7);
  ComputeLogprobs(logits, 0, 0, &top);
  EXPECT_TRUE(top.empty());
  ComputeLogprobs(logits, 0, 5, &top);  // more than the vocabulary: all of it
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].id, 1);
  EXPECT_NEAR(std::exp(top[0].logprob) + std::exp(top[1].logprob), 1.0, 1e-6);
  EXPECT_EQ(ComputeLogprobs(logits, 2, 0, nullptr), -std::numeric_limits<float>::infinity());
}

TEST(LogprobsTest, LargeLogitsAreStable) {
  const std::vector<float> logits = {1000.0f, 999.0f};
  const float lp = ComputeLogprobs(logits, 0, 0, nullptr);
  EXPECT_NEAR(lp, -std::log(1 + std::exp(-1.0)), 1e-6);
}

}  // namespace
}  // namespace quill::engine
