#pragma once

// Parses a template into a syntax tree with Jinja2's grammar and precedence (including
// its quirks: `~` binds tighter than `+`, `**` is left-associative, `-x|f` filters -x).
//
// Statements: if/elif/else, for (tuple targets, `if` filter, else), set (incl. namespace
// attributes and block set with filters), macro (defaults, varargs/kwargs/caller), call,
// filter, with, break/continue, raw, and Hugging Face's {% generation %}. Tags Jinja2
// knows but a lone chat template cannot use (extends, block, include, import, from) and
// recursive loops are rejected with a clear message.

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/chat/jinja_ast.h"

namespace quill::engine::chat::jinja {

// Deepest nesting of blocks and expressions accepted (bounds the parser's and the
// interpreter's recursion on hostile input).
inline constexpr int kMaxParseDepth = 100;
// Largest template source accepted.
inline constexpr size_t kMaxTemplateBytes = size_t{4} << 20;

// INVALID_ARGUMENT "TemplateSyntaxError: line L:C: ..." (or TemplateAssertionError for an
// unknown filter or test outside an if, as Jinja2 reports at compile time).
absl::StatusOr<std::unique_ptr<const Template>> ParseTemplate(absl::string_view source);

}  // namespace quill::engine::chat::jinja
