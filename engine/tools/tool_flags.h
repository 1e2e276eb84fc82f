#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace quill::engine::tools {

// Rewrites a command line for absl::ParseCommandLine: short aliases ("-m X" -> "--model=X")
// and dashes in long flag names ("--top-k" -> "--top_k"). Arguments after "--" are left
// alone. Returns the new argument list (argv[0] first).
std::vector<std::string> NormalizeArgs(
    int argc, char** argv, const std::vector<std::pair<std::string, std::string>>& aliases);

// Returns the first "--name" in `args` that is not a registered absl flag (or its "no"
// form for booleans), or "" if all are known. Lets a tool report a usage error with its
// own exit code instead of absl's.
std::string FirstUnknownFlag(const std::vector<std::string>& args);

// Makes --help list the flags defined in engine/tools/ sources.
void ShowToolFlagsInHelp();

// Parses "1,2, 3" into ints; false on any malformed or out-of-range item.
bool ParseIdList(absl::string_view text, std::vector<int>* out);

}  // namespace quill::engine::tools
