#pragma once

#include "absl/strings/string_view.h"

namespace quill::engine {

// Life of a request inside the engine:
//   kWaiting -> kPrefill   admitted (KV blocks reserved)
//   kPrefill -> kDecode    last prompt chunk processed, first token sampled
//   any live -> kFinished  length/stop/eos, cancel, deadline, error, shutdown
enum class SequenceState { kWaiting, kPrefill, kDecode, kFinished };

absl::string_view SequenceStateName(SequenceState state);

// The only legal moves; everything else is a bug.
bool IsValidTransition(SequenceState from, SequenceState to);

}  // namespace quill::engine
