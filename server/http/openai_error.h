#pragma once

// absl::Status -> HTTP status + OpenAI's error body: the only place an HTTP error response
// is built from a Status (server/status_codec.cc is gRPC's).
//
//   {"error": {"message": "...", "type": "invalid_request_error", "param": "temperature",
//              "code": null}}

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "server/http/http_exchange.h"

namespace quill::server::http {

// INVALID_ARGUMENT / FAILED_PRECONDITION / OUT_OF_RANGE 400, NOT_FOUND 404,
// RESOURCE_EXHAUSTED 429 (with Retry-After), UNAVAILABLE 503 (with Retry-After),
// DEADLINE_EXCEEDED 504, UNIMPLEMENTED 501, UNAUTHENTICATED 401, PERMISSION_DENIED 403,
// CANCELLED 499, anything else 500.
int HttpStatusOf(absl::StatusCode code);

// The OpenAI error object for `status` (not OK), as JSON text. `param` is the request field
// at fault, taken from the message when it starts with one ("temperature must be ...").
std::string OpenAiErrorJson(const absl::Status& status);

// The whole error response: head (status, Retry-After where it applies) and body.
HttpResponseHead OpenAiErrorResponse(const absl::Status& status, std::string* body);

// An HTTP-level error (unknown path 404, wrong method 405, body too large 413, malformed
// request 400) in the same shape.
HttpResponseHead OpenAiHttpError(int http_status, absl::string_view message, std::string* body);

// Seconds a client should wait before retrying a 429/503.
inline constexpr int kRetryAfterSeconds = 1;

}  // namespace quill::server::http
