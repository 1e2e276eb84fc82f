#pragma once

namespace quill::engine {

// Per-sequence back-off for speculative drafting. Verifying a rejected draft costs a
// forward row for nothing, so a sequence whose drafts keep failing (text that does not
// repeat) stops drafting for a while: an EWMA of the accepted fraction below
// kPauseBelow pauses drafting for kPauseSteps steps, after which it tries again from a
// neutral estimate. Between kPauseBelow and kFullAbove it drafts half as many tokens.
// Not thread-safe (the engine thread owns it).
class DraftBackoff {
 public:
  static constexpr double kPauseBelow = 0.3;
  static constexpr double kFullAbove = 0.5;
  static constexpr int kPauseSteps = 16;

  // Draft tokens to propose this step, out of `max_tokens`; counts a paused step.
  int Budget(int max_tokens);
  // After a verification: `accepted` of `drafted` (> 0) draft tokens matched.
  void Record(int drafted, int accepted);

  double acceptance() const { return ewma_; }
  bool paused() const { return pause_steps_ > 0; }

 private:
  static constexpr double kWeight = 0.3;  // of the newest verification
  double ewma_ = 1.0;  // optimistic start: the first drafts are tried in full
  int pause_steps_ = 0;
};

}  // namespace quill::engine
