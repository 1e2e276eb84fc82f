#include "engine/runtime/ewma_rate.h"

#include <cmath>

namespace quill::engine {

void EwmaRate::Add(double events, absl::Duration elapsed) {
  if (elapsed <= absl::ZeroDuration()) return;
  const double seconds = absl::ToDoubleSeconds(elapsed);
  const double sample = events / seconds;
  if (observed_ == absl::ZeroDuration()) {
    rate_ = sample;  // the first sample is the best guess there is
  } else {
    // Weight by elapsed time, so many short steps count as much as one long one.
    const double alpha = 1.0 - std::exp(-seconds / absl::ToDoubleSeconds(time_constant_));
    rate_ += alpha * (sample - rate_);
  }
  observed_ += elapsed;
}

}  // namespace quill::engine
