#pragma once

// Jinja2's filters (`x|trim`) and tests (`x is defined`), with Jinja2 3.1's semantics and
// Hugging Face's tojson (json.dumps, no ASCII or HTML escaping by default).
//
// Every name Jinja2 knows is listed: the parser rejects unknown names as Jinja2 does, and
// the few Jinja2 filters this engine does not implement (urlize, wordwrap, ...) fail with
// a clear "not supported" error when a render reaches them.

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/chat/jinja_runtime.h"
#include "engine/chat/jinja_value.h"

namespace quill::engine::chat::jinja {

using FilterFn = absl::StatusOr<Value> (*)(Runtime& rt, const Value& value, CallArgs& args);
using TestFn = absl::StatusOr<bool> (*)(Runtime& rt, const Value& value, CallArgs& args);

struct FilterDef {
  absl::string_view name;
  FilterFn fn;  // nullptr: a Jinja2 filter this engine does not implement
};

struct TestDef {
  absl::string_view name;
  TestFn fn;
};

// nullptr if Jinja2 has no filter / test of that name.
const FilterDef* FindFilter(absl::string_view name);
const TestDef* FindTest(absl::string_view name);

// Applies a filter or test found above (map('upper') and select('odd') call these by name).
absl::StatusOr<Value> ApplyFilter(Runtime& rt, const FilterDef& filter, const Value& value,
                                  CallArgs& args);
absl::StatusOr<bool> ApplyTest(Runtime& rt, const TestDef& test, const Value& value,
                               CallArgs& args);

// markupsafe.escape: & < > ' " as HTML entities (used by |escape and by `+` on Markup).
std::string HtmlEscape(absl::string_view text);

}  // namespace quill::engine::chat::jinja
