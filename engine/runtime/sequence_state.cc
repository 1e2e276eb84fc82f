#include "engine/runtime/sequence_state.h"

namespace quill::engine {

absl::string_view SequenceStateName(SequenceState state) {
  switch (state) {
    case SequenceState::kWaiting:
      return "waiting";
    case SequenceState::kPrefill:
      return "prefill";
    case SequenceState::kDecode:
      return "decode";
    case SequenceState::kFinished:
      return "finished";
  }
  return "unknown";
}

bool IsValidTransition(SequenceState from, SequenceState to) {
  switch (from) {
    case SequenceState::kWaiting:
      return to == SequenceState::kPrefill || to == SequenceState::kFinished;
    case SequenceState::kPrefill:
      return to == SequenceState::kDecode || to == SequenceState::kFinished;
    case SequenceState::kDecode:
      return to == SequenceState::kFinished;
    case SequenceState::kFinished:
      return false;
  }
  return false;
}

}  // namespace quill::engine
