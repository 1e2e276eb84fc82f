#include "engine/runtime/draft_backoff.h"

#include <algorithm>

namespace quill::engine {

int DraftBackoff::Budget(int max_tokens) {
  if (pause_steps_ > 0) {
    --pause_steps_;
    return 0;
  }
  if (ewma_ >= kFullAbove) return max_tokens;
  return std::max(1, max_tokens / 2);
}

void DraftBackoff::Record(int drafted, int accepted) {
  if (drafted <= 0) return;
  const double fraction = static_cast<double>(accepted) / drafted;
  ewma_ = (1.0 - kWeight) * ewma_ + kWeight * fraction;
  if (ewma_ < kPauseBelow) {
    pause_steps_ = kPauseSteps;
    ewma_ = kFullAbove;  // neutral: one good verification resumes full drafts
  }
}

}  // namespace quill::engine
