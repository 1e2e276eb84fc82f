#pragma once

#include <optional>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace quill::engine {

// A refusal for load (RESOURCE_EXHAUSTED) carries how long the client should wait before
// retrying, as a status payload, so each front end can say it its own way (gRPC:
// grpc-retry-pushback-ms trailer; HTTP: Retry-After) without the engine knowing either.
inline constexpr char kRetryPushbackPayload[] = "type.quill.dev/retry-pushback-ms";

// Bounds on the advice: below 100 ms a retry is a busy loop; above 30 s a client is
// better off elsewhere, and an estimate that far out is not worth much anyway.
inline constexpr absl::Duration kMinRetryPushback = absl::Milliseconds(100);
inline constexpr absl::Duration kMaxRetryPushback = absl::Seconds(30);

// `status` with the pushback (clamped to the bounds above) attached.
absl::Status WithRetryPushback(absl::Status status, absl::Duration pushback);

// The pushback attached to `status`, if any.
std::optional<absl::Duration> RetryPushbackOf(const absl::Status& status);

}  // namespace quill::engine
