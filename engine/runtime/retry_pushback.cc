#include "engine/runtime/retry_pushback.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace quill::engine {

absl::Status WithRetryPushback(absl::Status status, absl::Duration pushback) {
  pushback = std::clamp(pushback, kMinRetryPushback, kMaxRetryPushback);
  status.SetPayload(kRetryPushbackPayload,
                    absl::Cord(absl::StrCat(absl::ToInt64Milliseconds(pushback))));
  return status;
}

std::optional<absl::Duration> RetryPushbackOf(const absl::Status& status) {
  const auto payload = status.GetPayload(kRetryPushbackPayload);  // absl::optional here
  if (!payload.has_value()) return std::nullopt;
  int64_t ms = 0;
  if (!absl::SimpleAtoi(std::string(*payload), &ms) || ms < 0) return std::nullopt;
  return absl::Milliseconds(ms);
}

}  // namespace quill::engine
