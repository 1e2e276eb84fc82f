#pragma once

// Splits a template into tokens the way Jinja2's lexer does in Hugging Face's environment
// (trim_blocks and lstrip_blocks on, keep_trailing_newline off): template text becomes
// kData tokens with whitespace control already applied ({%- -%} {{- -}} {#- -#}, {%+ +%}),
// comments disappear, {% raw %} bodies become data, and tag contents become names,
// literals and operators.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace quill::engine::chat::jinja {

enum class TokenType : uint8_t {
  kData,
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,
  kString,    // value: the decoded literal
  kInteger,   // int_value
  kFloat,     // float_value
  kOperator,  // value: "+", "//", "==", "(", ...
  kEof,
};

struct Token {
  TokenType type = TokenType::kEof;
  std::string value;
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;    // 1-based, after newline normalization
  int column = 1;  // 1-based, in bytes
};

struct LexerOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

// INVALID_ARGUMENT "TemplateSyntaxError: line L:C: ..." for an unclosed tag, comment or raw
// block, an unexpected character, unbalanced brackets, a bad escape or an integer that
// does not fit in 64 bits. The last token is kEof.
absl::StatusOr<std::vector<Token>> Lex(absl::string_view source, const LexerOptions& options = {});

// A syntax error at a position: "TemplateSyntaxError: line L:C: message".
absl::Status SyntaxError(int line, int column, absl::string_view message);

}  // namespace quill::engine::chat::jinja
