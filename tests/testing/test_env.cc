#include "tests/testing/test_env.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "tests/testing/http_get.h"

namespace quill::testing {

namespace {

// The environment wins; the build tree's paths (compiled in) are the fallback, because
// ctest does not always pass every variable (and a binary run by hand has none).
const char* DirFromEnv(const char* name, const char* fallback) {
  const char* dir = std::getenv(name);
  if (dir != nullptr && *dir != '\0') return dir;
  return *fallback != '\0' ? fallback : nullptr;
}

// Paths handed out by ScratchPath, removed by the destructor of the one instance (at exit).
class ScratchRegistry {
 public:
  static ScratchRegistry& Get() {
    static ScratchRegistry registry;
    return registry;
  }
  void Add(const std::string& path) {
    absl::MutexLock lock(&mu_);
    paths_.push_back(path);
  }
  ~ScratchRegistry() {
    for (const std::string& path : paths_) {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> paths_;
};

#ifndef QUILL_DEFAULT_SHARED_DIR
#define QUILL_DEFAULT_SHARED_DIR ""
#endif
#ifndef QUILL_DEFAULT_BINARY_DIR
#define QUILL_DEFAULT_BINARY_DIR ""
#endif

}  // namespace

std::string SharedPath(absl::string_view relative) {
  const char* dir = DirFromEnv("QUILL_SHARED_DIR", QUILL_DEFAULT_SHARED_DIR);
  if (dir == nullptr) return "";
  const std::string path = absl::StrCat(dir, "/", relative);
  return access(path.c_str(), R_OK) == 0 ? path : "";
}

std::string SharedModelPath(absl::string_view file) {
  return SharedPath(absl::StrCat("models/", file));
}

std::string BuildBinaryPath(absl::string_view relative) {
  const char* dir = DirFromEnv("QUILL_BINARY_DIR", QUILL_DEFAULT_BINARY_DIR);
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
    return absl::InternalError(
        absl::StrCat("GET /metrics: content type '", response->content_type, "'"));
  }
  return PromText::Parse(response->body);
}

std::string ScratchPath(absl::string_view name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = (tmp != nullptr && *tmp != '\0') ? tmp : "/tmp";
  std::string path = absl::StrCat(dir, "/quill-test-", getpid(), "-", name);
  ScratchRegistry::Get().Add(path);
  return path;
}

std::string WriteScratchFile(absl::string_view name, absl::string_view content) {
  const std::string path = ScratchPath(name);
  std::ofstream out(path, std::ios::binary);
  out.write(content.data(), static_cast<std::streamsize>(content.size()));
  return out ? path : "";
}

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

}  // namespace quill::testing
