#include "engine/runtime/request.h"

#include "engine/runtime/engine_observer.h"

namespace quill::engine {

absl::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kEos:
      return "eos";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kDeadline:
      return "deadline";
    case FinishReason::kError:
      return "error";
    case FinishReason::kShutdown:
      return "shutdown";
  }
  return "unknown";
}

absl::string_view StepPhaseName(StepPhase phase) {
  switch (phase) {
    case StepPhase::kPrefill:
      return "prefill";
    case StepPhase::kDecode:
      return "decode";
    case StepPhase::kMixed:
      return "mixed";
  }
  return "unknown";
}

}  // namespace quill::engine
