#pragma once

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace quill::engine {

// Where the engine reads the time (request timings, deadlines, drain). Tests inject a
// manual clock to make deadline behaviour deterministic.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;

  // The process-wide real clock (absl::Now()); never destroyed.
  static const Clock* Real();
};

}  // namespace quill::engine
