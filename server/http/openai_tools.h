#pragma once

// OpenAI tool calling, the part Quill keeps exactly: the tools reach the chat template (as
// its `tools` variable, which templates render into the prompt), and when the answer must
// be a call (tool_choice "required", or a named function) the answer is constrained by a
// JSON schema to `{"name": <the function>, "arguments": <its parameters>}` and returned
// as the message's tool_calls. tool_choice "auto" (the model decides) would need each
// model family's call syntax parsed out of free text, which Quill does not do: refused.

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace quill::server::http {

struct ToolRequest {
  // The chat template's `tools` variable: the request's tools as sent; null without any.
  nlohmann::ordered_json tools;
  // The JSON schema (text) a forced call's answer follows; "" when the answer is free
  // text (no tools, or tool_choice "none").
  std::string call_schema;
};

// tools and tool_choice of a chat body. INVALID_ARGUMENT naming the field: a tool that is
// not {"type": "function", "function": {"name": ...}} (names of 1-64 letters, digits, '_'
// or '-'; parameters an object schema Quill can keep), a tool_choice naming no tool,
// "auto" while tools are given, or a forced call beside response_format.
absl::StatusOr<ToolRequest> ParseTools(const nlohmann::ordered_json& body);

// A forced call's answer as OpenAI's tool_calls entry: {"id": id, "type": "function",
// "function": {"name": ..., "arguments": "<the arguments as JSON text>"}}; nullopt when
// the answer is not such an object (cut by max_tokens).
std::optional<nlohmann::json> ToolCallOf(const std::string& answer, const std::string& id);

}  // namespace quill::server::http
