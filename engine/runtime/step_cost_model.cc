#include "engine/runtime/step_cost_model.h"

#include <algorithm>
#include <cmath>

namespace quill::engine {

void StepCostModel::Add(int tokens, absl::Duration elapsed) {
  const double n = tokens;
  const double t = absl::ToDoubleSeconds(elapsed);
  if (n <= 0 || t < 0) return;
  sum_weight_ = sum_weight_ * decay_ + 1;
  sum_tokens_ = sum_tokens_ * decay_ + n;
  sum_seconds_ = sum_seconds_ * decay_ + t;
  sum_tokens_squared_ = sum_tokens_squared_ * decay_ + n * n;
  sum_tokens_seconds_ = sum_tokens_seconds_ * decay_ + n * t;
  recent_largest_tokens_ = std::max(n, recent_largest_tokens_ * decay_);
}

StepCostModel::Line StepCostModel::Fit() const {
  Line line;
  if (!ready()) return line;
  const double mean_n = sum_tokens_ / sum_weight_;
  const double mean_t = sum_seconds_ / sum_weight_;
  const double var_n = sum_tokens_squared_ / sum_weight_ - mean_n * mean_n;
  const double cov_nt = sum_tokens_seconds_ / sum_weight_ - mean_n * mean_t;
  // Sizes that vary by less than a token cannot tell the fixed part from the per-token one.
  if (var_n >= 1.0) {
    line.seconds_per_token = cov_nt / var_n;
    // A negative fixed part (cost growing faster than the tokens) is clamped to zero,
    // which keeps the line above the steps it was fitted on.
    line.fixed_seconds = std::max(0.0, mean_t - line.seconds_per_token * mean_n);
    if (line.seconds_per_token > 0) return line;
  }
  line.fixed_seconds = 0;
  line.seconds_per_token = mean_t / mean_n;
  return line;
}

absl::Duration StepCostModel::Predict(int tokens) const {
  const Line line = Fit();
  return absl::Seconds(line.fixed_seconds + line.seconds_per_token * std::max(tokens, 0));
}

int StepCostModel::TokensWithin(absl::Duration budget) const {
  const Line line = Fit();
  if (line.seconds_per_token <= 0) return kUnbounded;
  const double tokens =
      (absl::ToDoubleSeconds(budget) - line.fixed_seconds) / line.seconds_per_token;
  if (tokens <= 0) return 0;
  const double trusted = kTrustedGrowth * recent_largest_tokens_;
  return static_cast<int>(std::floor(std::min(tokens, trusted)));
}

}  // namespace quill::engine
