#include "engine/chat/jinja_error.h"

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace quill::engine::chat::jinja {
namespace {

// Status payloads: where an error was located, and which errors came from raise_exception.
constexpr char kLocatedUrl[] = "quill.chat.jinja/located";
constexpr char kRaisedUrl[] = "quill.chat.jinja/raised";

absl::string_view KindName(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kSyntax:
      return "TemplateSyntaxError";
    case ErrorKind::kAssertion:
      return "TemplateAssertionError";
    case ErrorKind::kUndefined:
      return "UndefinedError";
    case ErrorKind::kType:
      return "TypeError";
    case ErrorKind::kValue:
      return "ValueError";
    case ErrorKind::kIndex:
      return "IndexError";
    case ErrorKind::kKey:
      return "KeyError";
    case ErrorKind::kZeroDivision:
      return "ZeroDivisionError";
    case ErrorKind::kOverflow:
      return "OverflowError";
    case ErrorKind::kSecurity:
      return "SecurityError";
    case ErrorKind::kRuntime:
      return "TemplateRuntimeError";
    case ErrorKind::kFilterArgument:
      return "FilterArgumentError";
    case ErrorKind::kLimit:
      return "RenderLimitError";
    case ErrorKind::kUnsupported:
      return "Unsupported";
  }
  return "Error";
}

}  // namespace

absl::Status Error(ErrorKind kind, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(KindName(kind), ": ", message));
}

absl::Status RaisedError(absl::string_view message) {
  absl::Status status = absl::InvalidArgumentError(message);
  status.SetPayload(kRaisedUrl, absl::Cord("1"));
  status.SetPayload(kLocatedUrl, absl::Cord("1"));
  return status;
}

bool IsRaisedError(const absl::Status& status) { return status.GetPayload(kRaisedUrl).has_value(); }

absl::Status AtLine(absl::Status status, int line) {
  if (status.ok() || status.GetPayload(kLocatedUrl).has_value()) return status;
  absl::Status located(status.code(), absl::StrCat(status.message(), " (line ", line, ")"));
  located.SetPayload(kLocatedUrl, absl::Cord("1"));
  return located;
}

}  // namespace quill::engine::chat::jinja
