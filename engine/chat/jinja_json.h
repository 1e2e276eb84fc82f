#pragma once

// JSON in and out of template values. Request data (messages, tools) comes in through
// FromJson with every string marked untrusted; |tojson writes what Python's json.dumps
// writes (Hugging Face's tojson filter calls it with ensure_ascii=False).

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "engine/chat/jinja_value.h"
#include "nlohmann/json.hpp"

namespace quill::engine::chat::jinja {

// Converts JSON to values allocated on `heap`. Objects keep their key order (an
// nlohmann::json object iterates in sorted key order; pass ordered_json to keep the
// request's order, as Python's json.loads does). Strings, keys included, are untrusted
// when `untrusted` is set. INVALID_ARGUMENT for nesting deeper than kMaxValueDepth or
// binary values.
absl::StatusOr<Value> FromJson(const nlohmann::ordered_json& json, Heap& heap, bool untrusted);
absl::StatusOr<Value> FromJson(const nlohmann::json& json, Heap& heap, bool untrusted);

struct JsonDumpOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;          // json.dumps(indent=...) as a string of spaces
  std::optional<std::string> item_separator;  // default ", " ("," with an indent)
  std::optional<std::string> key_separator;   // default ": "
  bool sort_keys = false;
};

// json.dumps(value, ...). TypeError for values JSON cannot hold ("Object of type
// Undefined is not JSON serializable"). The result is untrusted as a whole if any string
// inside `value` was.
absl::StatusOr<StrPtr> DumpJson(const Value& value, const JsonDumpOptions& options);

}  // namespace quill::engine::chat::jinja
