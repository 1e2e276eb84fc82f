#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace quill::server {

// Resident set size of this process in bytes, from /proc/self/statm (pages * page size).
// UNAVAILABLE where /proc is missing.
absl::StatusOr<int64_t> ReadResidentMemoryBytes();

// Parses the text of a statm file ("size resident shared ..." in pages).
absl::StatusOr<int64_t> ParseStatmResidentBytes(absl::string_view statm, int64_t page_size);

}  // namespace quill::server
