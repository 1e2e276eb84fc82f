#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tests/testing/prometheus_text.h"

namespace quill::testing {

// $QUILL_SHARED_DIR/<relative> if it exists, else "" (tests then GTEST_SKIP). Without the
// variable, the shared directory configured at build time is used.
std::string SharedPath(absl::string_view relative);
// SharedPath("models/<file>").
std::string SharedModelPath(absl::string_view file);
// $QUILL_BINARY_DIR/<relative> (default: this build tree) if it exists and is executable,
// else "".
std::string BuildBinaryPath(absl::string_view relative);

// A path in the temporary directory ($TEST_TMPDIR, else /tmp) unique to this process
// ("quill-test-<pid>-<name>"), removed with whatever it holds (file or directory tree) when
// the process exits normally, so that test runs do not pile files up in /tmp.
std::string ScratchPath(absl::string_view name);
// Writes `content` to ScratchPath(name) (binary) and returns the path ("" if it cannot).
std::string WriteScratchFile(absl::string_view name, absl::string_view content);
// The bytes of the file at `path` ("" if it cannot be read).
std::string ReadWholeFile(const std::string& path);

// GET http://127.0.0.1:<port>/metrics, checked (200, text/plain) and parsed.
absl::StatusOr<PromText> ScrapeMetrics(int port);

}  // namespace quill::testing
