#pragma once

// The global functions a chat template can call: Jinja2's range (with the sandbox's
// 100000-item cap), dict and namespace, and Hugging Face's raise_exception(message) and
// strftime_now(format). Jinja2's lipsum, cycler and joiner exist but fail as unsupported.

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/chat/jinja_runtime.h"
#include "engine/chat/jinja_value.h"

namespace quill::engine::chat::jinja {

using BuiltinFn = absl::StatusOr<Value> (*)(Runtime& rt, CallArgs& args);

class BuiltinObject : public CallableObject {
 public:
  BuiltinObject(absl::string_view function_name, BuiltinFn function)
      : CallableObject(Kind::kBuiltin), fn(function) {
    name = std::string(function_name);
  }
  BuiltinFn fn;
};

// The global function `name` (a static object shared by all renders), or nullptr.
const BuiltinObject* FindGlobal(absl::string_view name);

// Jinja2 sandbox's MAX_RANGE.
inline constexpr int64_t kMaxRange = 100000;

}  // namespace quill::engine::chat::jinja
