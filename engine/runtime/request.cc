#include "engine/runtime/request.h"

#include "absl/strings/str_format.h"
#include "engine/runtime/engine_observer.h"

namespace quill::engine {

absl::Status CheckPrintableAscii(absl::string_view field, absl::string_view value) {
  for (size_t i = 0; i < value.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(value[i]);
    if (c < 0x20 || c > 0x7E) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s must be printable ASCII; byte %d is 0x%02X", field, i, static_cast<int>(c)));
    }
  }
  return absl::OkStatus();
}

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
    case FinishReason::kStalled:
      return "stalled";
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
