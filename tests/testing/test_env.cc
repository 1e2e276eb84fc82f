#include "tests/testing/test_env.h"

#include <unistd.h>

#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/testing/http_get.h"

namespace quill::testing {

std::string SharedModelPath(absl::string_view file) {
  const char* dir = std::getenv("QUILL_SHARED_DIR");
  if (dir == nullptr) return "";
  const std::string path = absl::StrCat(dir, "/models/", file);
  return access(path.c_str(), R_OK) == 0 ? path : "";
}

std::string BuildBinaryPath(absl::string_view relative) {
  const char* dir = std::getenv("QUILL_BINARY_DIR");
  if (dir == nullptr) return "";
  const std::string path = absl::StrCat(dir, "/", relative);
  return access(path.c_str(), X_OK) == 0 ? path : "";
}

absl::StatusOr<PromText> ScrapeMetrics(int port) {
  absl::StatusOr<HttpResponse> response = HttpGet("127.0.0.1", port, "/metrics");
  if (!response.ok()) return response.status();
  if (response->status != 200) {
    return absl::InternalError(absl::StrCat("GET /metrics: HTTP ", response->status));
  }
  if (!absl::StartsWith(response->content_type, "text/plain")) {
    return absl::InternalError(absl::StrCat("GET /metrics: content type '",
                                            response->content_type, "'"));
  }
  return PromText::Parse(response->body);
}

}  // namespace quill::testing
