#pragma once

// Executes a parsed template. Scoping follows Jinja2's compiler: `if` shares its scope;
// every for-loop iteration, macro call, {% set %} block, {% filter %}, {% with %} and
// {% generation %} body gets a scope of its own whose sets do not leak out (namespace
// attributes are how state crosses scopes); macros see the scope they were defined in,
// as it is when they are called.

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/chat/jinja_ast.h"
#include "engine/chat/jinja_runtime.h"
#include "engine/chat/jinja_value.h"

namespace quill::engine::chat::jinja {

// Renders `tmpl` with the given top-level variables (values on rt's heap). Returns the
// text and the byte ranges of it that came from untrusted strings. Errors are
// INVALID_ARGUMENT: raise_exception's message verbatim, anything else prefixed with the
// Jinja2 error name and suffixed with the template line.
absl::StatusOr<StrPtr> Render(const Template& tmpl, Runtime& rt,
                              const std::vector<std::pair<std::string, Value>>& variables);

}  // namespace quill::engine::chat::jinja
