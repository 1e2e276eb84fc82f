#pragma once

// The Python object protocol of template values under Jinja2's ImmutableSandboxedEnvironment:
// attribute and item lookup (`x.a` tries the Python attribute first, then x['a'];
// `x['a']` the other way round; misses are Undefined), slicing, iteration, len(), `in`,
// and the methods of str, dict, list/tuple and the loop object. Methods that mutate a
// list or dict (append, update, ...) are unsafe in the sandbox: using them raises
// SecurityError, as in Hugging Face's environment. list.pop is allowed, as there.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/chat/jinja_runtime.h"
#include "engine/chat/jinja_value.h"

namespace quill::engine::chat::jinja {

// A method bound to its value (`s.upper` without a call).
class MethodObject : public CallableObject {
 public:
  MethodObject(absl::string_view method, Value self_value)
      : CallableObject(Kind::kMethod), self(std::move(self_value)) {
    name = std::string(method);
  }
  Value self;
};

// obj.name. UndefinedError if obj is undefined.
absl::StatusOr<Value> GetAttr(Runtime& rt, const Value& obj, absl::string_view name);
// Python's getattr(obj, name) alone (no item fallback; what the |attr filter does):
// Undefined if obj has no such attribute. UndefinedError if obj is undefined.
absl::StatusOr<Value> GetAttrOnly(Runtime& rt, const Value& obj, absl::string_view name);
// obj[key]. UndefinedError if obj is undefined.
absl::StatusOr<Value> GetItem(Runtime& rt, const Value& obj, const Value& key);
// obj[start:stop:step] for str, list and tuple (null or None bounds take the default);
// other values give Undefined as Jinja2's sandbox does.
absl::StatusOr<Value> GetSlice(Runtime& rt, const Value& obj, const Value* start, const Value* stop,
                               const Value* step);
// Whether self.name is a method that CallMethod can call directly (a safe, supported
// method of a str, dict, list, tuple or loop).
bool HasCallableMethod(const Value& self, absl::string_view name);
// self.name(*args): calls a method without creating a MethodObject.
absl::StatusOr<Value> CallMethod(Runtime& rt, const Value& self, absl::string_view name,
                                 CallArgs& args);

// The items `for x in v` visits: list items, dict keys, a string's characters; nothing for
// undefined. Iterating a generator consumes it. TypeError for non-iterables.
absl::StatusOr<std::vector<Value>> Iterate(Runtime& rt, const Value& v);
// len(v); undefined has length 0. TypeError for values without a length.
absl::StatusOr<int64_t> Length(const Value& v);
// `item in container`.
absl::StatusOr<bool> Contains(Runtime& rt, const Value& container, const Value& item);

// Python's int(v) for an integer-like value (int or bool); TypeError otherwise.
absl::StatusOr<int64_t> ToIndex(const Value& v, absl::string_view what);

}  // namespace quill::engine::chat::jinja
