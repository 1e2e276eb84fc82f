#pragma once

// Errors of the template engine. Every error is an INVALID_ARGUMENT status whose message
// starts with the Jinja2/Python exception name it stands for ("UndefinedError: 'x' is
// undefined"), so a reader can compare it with what Jinja2 reports. raise_exception(msg)
// is the exception: its status message is `msg` verbatim.

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace quill::engine::chat::jinja {

enum class ErrorKind {
  kSyntax,          // TemplateSyntaxError (parse time)
  kAssertion,       // TemplateAssertionError (e.g. unknown filter outside an if)
  kUndefined,       // UndefinedError
  kType,            // TypeError
  kValue,           // ValueError
  kIndex,           // IndexError
  kKey,             // KeyError
  kZeroDivision,    // ZeroDivisionError
  kOverflow,        // OverflowError (ranges, integer overflow)
  kSecurity,        // SecurityError (sandbox)
  kRuntime,         // TemplateRuntimeError
  kFilterArgument,  // FilterArgumentError
  kLimit,           // a Quill render limit (output size, operations, depth)
  kUnsupported,     // a Jinja2 feature this engine does not implement
};

absl::Status Error(ErrorKind kind, absl::string_view message);
// What raise_exception(message) raises: the message verbatim.
absl::Status RaisedError(absl::string_view message);
bool IsRaisedError(const absl::Status& status);

// Appends " (line N)" to an error that has no location yet; raise_exception messages stay
// verbatim. Returns `status` unchanged when OK.
absl::Status AtLine(absl::Status status, int line);

}  // namespace quill::engine::chat::jinja
