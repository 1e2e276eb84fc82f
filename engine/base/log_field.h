#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace quill {

// A value for a `key=value` log field. A plain token (printable ASCII without space, quote,
// backslash or '=') is returned as is; anything else is quoted with C escapes (\n, \t, \",
// \\, \xNN), so text that came from a client can neither start a new log line nor forge
// another field.
std::string LogField(absl::string_view value);

}  // namespace quill
