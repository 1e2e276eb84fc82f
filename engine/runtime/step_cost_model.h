#pragma once

#include "absl/time/time.h"

namespace quill::engine {

// Predicts how long a forward step takes from the tokens in it, t = fixed + per_token * n,
// fitted online by exponentially weighted least squares over recent steps. The fixed part
// is reading every weight once (what a decode-only step mostly costs); the per-token part is
// the compute. The engine uses it to size each step's prefill so that the step stays within
// the inter-token-latency target. Not thread-safe (the engine thread owns it).
class StepCostModel {
 public:
  // Each new step's weight is 1; earlier ones fade by `decay` per step.
  explicit StepCostModel(double decay = 0.97) : decay_(decay) {}

  void Add(int tokens, absl::Duration elapsed);

  // False until a step with time and tokens was observed.
  bool ready() const { return sum_weight_ > 0 && sum_tokens_ > 0 && sum_seconds_ > 0; }

  // The predicted duration of a step of `tokens` (zero until ready()).
  absl::Duration Predict(int tokens) const;

  // The most tokens a step can hold and be predicted to take at most `budget`: 0 when even
  // an empty step would not fit, and `kUnbounded` before any step was seen. Never more than
  // kTrustedGrowth x the largest recent step: a line fitted on steps of one narrow range of
  // sizes may say nearly anything about steps ten times larger, but a step of at most
  // twice the tokens of one seen takes at most about twice as long.
  static constexpr int kUnbounded = 1 << 30;
  static constexpr double kTrustedGrowth = 2.0;
  int TokensWithin(absl::Duration budget) const;

 private:
  struct Line {
    double fixed_seconds = 0;
    double seconds_per_token = 0;
  };
  // The least-squares line; when the steps seen so far are too alike in size to separate
  // the two parts (or the fit says tokens are free), all the time is charged to the tokens,
  // which overestimates steps larger than those seen: the safe side when sizing a step that
  // adds prompt tokens to the decode steps seen so far.
  Line Fit() const;

  const double decay_;
  double sum_weight_ = 0;
  double sum_tokens_ = 0;
  double sum_seconds_ = 0;
  double sum_tokens_squared_ = 0;
  double sum_tokens_seconds_ = 0;
  // The largest step seen, fading by `decay` per step like the fit's weights.
  double recent_largest_tokens_ = 0;
};

}  // namespace quill::engine
