#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace quill::testing {

struct HttpResponse {
  int status = 0;            // e.g. 200
  std::string content_type;  // the Content-Type header, if any
  std::string body;
};

// A minimal HTTP GET over a TCP socket: sends an HTTP/1.0 request and reads the body up
// to Content-Length or the connection's close (no redirects, no chunked encoding). UNAVAILABLE if the connection fails,
// DEADLINE_EXCEEDED after `timeout`, INTERNAL for a malformed response.
absl::StatusOr<HttpResponse> HttpGet(absl::string_view host, int port, absl::string_view path,
                                     absl::Duration timeout = absl::Seconds(10));

}  // namespace quill::testing
