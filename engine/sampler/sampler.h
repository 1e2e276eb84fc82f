#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace quill::engine {

using TokenId = int32_t;

// OpenAI's ranges: frequency and presence penalties in [-2, 2], logit biases in [-100, 100].
inline constexpr float kMaxOutputPenalty = 2.0f;
inline constexpr float kMaxLogitBias = 100.0f;

// A bias added to one token's logit before anything else (OpenAI's logit_bias): -100 in
// practice bans the token, +100 forces it.
struct LogitBias {
  TokenId id = 0;
  float bias = 0.0f;
};

struct SamplingParams {
  float temperature = 1.0f;        // 0 = greedy; must be finite and >= 0
  int top_k = 0;                   // 0 = off; must be >= 0
  float top_p = 1.0f;              // in (0, 1]
  float min_p = 0.0f;              // in [0, 1]
  float repetition_penalty = 1.0f; // > 0; 1 = off (llama.cpp rule over prompt + output)
  // OpenAI's penalties over the output so far (not the prompt), in [-2, 2]; 0 = off: a
  // token's logit loses frequency_penalty * (times it was generated) + presence_penalty
  // (if it was generated at all).
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  // Ids outside the vocabulary are skipped (the server refuses them); biases in
  // [-100, 100]; entries for the same id add up.
  std::vector<LogitBias> logit_bias;
  uint64_t seed = 0;
};

// INVALID_ARGUMENT naming the field ("sampling.temperature must be ...") for any value
// outside the ranges above, NaN or Inf.
absl::Status ValidateSamplingParams(const SamplingParams& params);

struct TokenLogprob {
  TokenId id = 0;
  float logprob = 0.0f;
};

// Per-sequence sampler: logit bias -> penalties -> temperature -> top-k -> top-p -> min-p ->
// draw, with
// its own std::mt19937_64 seeded from params.seed, so the same seed and request give the
// same tokens whatever else is in the batch. Scratch is allocated at construction.
class Sampler {
 public:
  Sampler(const SamplingParams& params, int vocab_size);

  // `logits` is not modified. `prompt` and `output` (the tokens generated so far) feed the
  // penalties: the repetition penalty reads both, the frequency and presence penalties only
  // the output. Greedy ties go to the lowest id.
  TokenId Sample(absl::Span<const float> logits, absl::Span<const TokenId> prompt,
                 absl::Span<const TokenId> output);

  const SamplingParams& params() const { return params_; }

 private:
  // The chain's steps work on scratch_ (x: logits, then weights) and candidates_ (cand).
  void ApplyLogitBias(float* x, int n) const;
  void ApplyRepetitionPenalty(absl::Span<const TokenId> prompt, absl::Span<const TokenId> output,
                              float* x, int n);
  void ApplyOutputPenalties(absl::Span<const TokenId> output, float* x, int n);
  // Top-p over the whole vocabulary (weights x[0, n)): writes the nucleus to cand in a
  // canonical order and returns its size.
  int TopPOverVocabulary(const float* x, int n, TokenId* cand);
  // Puts cand[0, kept) in ascending id order.
  void SortIds(TokenId* cand, int kept, int n);
  // Uniform double in [0, 1) from the top 53 bits of one rng_() draw: the same on every
  // standard library (std::uniform_real_distribution is not).
  double NextUniform();

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<float> scratch_;       // penalized, tempered logits, then exp(x - max)
  std::vector<TokenId> candidates_;  // kept token ids, in canonical order
  std::vector<uint8_t> seen_;        // per-token flags; all zero between calls
  std::vector<int32_t> counts_;      // per-token output counts (penalties on); zero between calls
  std::vector<double> bucket_mass_;  // top-p histograms of the weights' float bits
};

// log-softmax of the raw logits: the chosen token's logprob, and the `top_n` most likely
// tokens (descending, ties by id) in `top`. `top` is resized to top_n.
float ComputeLogprobs(absl::Span<const float> logits, TokenId chosen, int top_n,
                      std::vector<TokenLogprob>* top);

}  // namespace quill::engine
