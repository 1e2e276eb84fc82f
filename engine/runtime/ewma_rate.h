#pragma once

#include "absl/time/time.h"

namespace quill::engine {

// An exponentially weighted rate (events per second) over busy time. Each Add(n, dt)
// says n events happened in dt; older samples fade with `time_constant`, so the estimate
// follows load changes within a few time constants without jumping on one odd step.
// Idle time is simply not reported, so a server that was quiet does not look slow.
// Not thread-safe (the engine thread owns it).
class EwmaRate {
 public:
  explicit EwmaRate(absl::Duration time_constant) : time_constant_(time_constant) {}

  void Add(double events, absl::Duration elapsed);

  // 0 until some time has been observed.
  double per_second() const { return rate_; }
  absl::Duration observed() const { return observed_; }

 private:
  const absl::Duration time_constant_;
  double rate_ = 0.0;
  absl::Duration observed_ = absl::ZeroDuration();
};

}  // namespace quill::engine
