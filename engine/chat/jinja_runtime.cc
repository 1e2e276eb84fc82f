#include "engine/chat/jinja_runtime.h"

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/chat/jinja_error.h"
#include "engine/chat/py_string.h"

namespace quill::engine::chat::jinja {

absl::StatusOr<std::vector<std::optional<Value>>> BindArgs(
    absl::string_view function, const CallArgs& args,
    std::initializer_list<absl::string_view> params, size_t required) {
  std::vector<std::optional<Value>> out(params.size());
  if (args.positional.size() > params.size()) {
    return Error(ErrorKind::kType, absl::StrCat(function, "() takes at most ", params.size(),
                                                " argument", params.size() == 1 ? "" : "s", " (",
                                                args.positional.size(), " given)"));
  }
  for (size_t i = 0; i < args.positional.size(); ++i) out[i] = args.positional[i];
  for (const auto& [name, value] : args.keywords) {
    size_t i = 0;
    for (absl::string_view p : params) {
      if (p == name) break;
      ++i;
    }
    if (i == params.size()) {
      return Error(
          ErrorKind::kType,
          absl::StrCat(function, "() got an unexpected keyword argument ", py::Repr(name)));
    }
    if (out[i].has_value()) {
      return Error(ErrorKind::kType,
                   absl::StrCat(function, "() got multiple values for argument ", py::Repr(name)));
    }
    out[i] = value;
  }
  size_t i = 0;
  for (absl::string_view p : params) {
    if (i < required && !out[i].has_value()) {
      return Error(ErrorKind::kType,
                   absl::StrCat(function, "() missing required argument ", py::Repr(p)));
    }
    ++i;
  }
  return out;
}

absl::StatusOr<Value> Runtime::NewString(StrPtr s) {
  QUILL_RETURN_IF_ERROR(Charge(static_cast<int64_t>(s->text.size())));
  return Value::String(std::move(s));
}

absl::StatusOr<Value> Runtime::NewList(ListKind kind, std::vector<Value> items) {
  QUILL_RETURN_IF_ERROR(Charge(static_cast<int64_t>(items.size() * sizeof(Value))));
  return Value::List(heap_.New<ListObject>(kind, std::move(items)));
}

absl::StatusOr<Value> Runtime::NewDict(std::vector<std::pair<Value, Value>> entries) {
  QUILL_RETURN_IF_ERROR(Charge(static_cast<int64_t>(entries.size() * 2 * sizeof(Value))));
  DictObject* dict = heap_.New<DictObject>();
  dict->entries.reserve(entries.size());
  // Later duplicates replace earlier values and keep the first key, as in Python.
  for (auto& [key, value] : entries) dict->Set(std::move(key), std::move(value));
  return Value::Dict(dict);
}

Value Runtime::Undefined(std::string message, bool security) {
  UndefinedInfo* info = heap_.New<UndefinedInfo>();
  info->message = std::move(message);
  info->security = security;
  return Value::Undefined(info);
}

Value Runtime::UndefinedName(absl::string_view name) {
  return Undefined(absl::StrCat(py::Repr(name), " is undefined"));
}

Value Runtime::UndefinedAttribute(const Value& owner, absl::string_view name) {
  return Undefined(
      absl::StrCat(py::Repr(ObjectTypeRepr(owner)), " has no attribute ", py::Repr(name)));
}

Value Runtime::UndefinedItem(const Value& owner, const Value& key) {
  if (key.is_string()) return UndefinedAttribute(owner, key.text());
  absl::StatusOr<std::string> key_repr = Repr(key);
  return Undefined(
      absl::StrCat(ObjectTypeRepr(owner), " has no element ", key_repr.ok() ? *key_repr : "?"));
}

absl::Status Runtime::UndefinedError(const Value& v) const {
  const UndefinedInfo* info = v.undefined_info();
  if (info == nullptr) return Error(ErrorKind::kUndefined, "value is undefined");
  return Error(info->security ? ErrorKind::kSecurity : ErrorKind::kUndefined, info->message);
}

absl::Status Runtime::OperationsExceeded() const {
  return Error(ErrorKind::kLimit,
               absl::StrCat("the template ran more than ", limits_.max_operations,
                            " operations (loop iterations, calls, "
                            "evaluations); is it looping without end?"));
}

absl::Status Runtime::AllocationExceeded(int64_t bytes) const {
  if (bytes > limits_.max_output_bytes) {
    return Error(ErrorKind::kLimit, absl::StrCat("a value of ", bytes, " bytes exceeds the ",
                                                 limits_.max_output_bytes, "-byte limit"));
  }
  return Error(ErrorKind::kLimit,
               absl::StrCat("the template built more than ", limits_.max_allocated_bytes,
                            " bytes of values in one render"));
}

absl::Status Runtime::DepthExceeded() const {
  return Error(ErrorKind::kLimit, absl::StrCat("evaluation nested deeper than ", limits_.max_depth,
                                               " levels (runaway macro recursion?)"));
}

}  // namespace quill::engine::chat::jinja
