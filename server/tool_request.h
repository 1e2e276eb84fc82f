#pragma once

// Tool calling, in OpenAI's shapes (HTTP takes them as sent; gRPC's Chat maps its fields
// onto them). The tools reach the chat template (as its `tools` variable, which
// templates render into the prompt). When the answer must be a call (tool_choice
// "required", or a named function) it is constrained by a JSON schema to `{"name": <the
// function>, "arguments": <its parameters>}`. With tool_choice "auto" (the default with
// tools) the model decides, and its calls are read out of its answer in the syntax its
// chat template writes calls in (engine/chat/tool_calls.h). Either way they are returned
// as the message's tool_calls.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/chat/tool_calls.h"
#include "nlohmann/json.hpp"

namespace quill::server {

struct ToolRequest {
  // The chat template's `tools` variable: the request's tools as sent; null without any.
  nlohmann::ordered_json tools;
  // The JSON schema (text) a forced call's answer follows; "" when the answer is free
  // text (no tools, tool_choice "none" or "auto").
  std::string call_schema;
  // tool_choice "auto" with tools: the answer is free text that may hold calls.
  bool auto_calls = false;
  // The tools' function names: what a call may name.
  std::vector<std::string> names;
  // parallel_tool_calls (default true): false keeps an answer's first call only.
  bool parallel_calls = true;
};

// tools and tool_choice of a chat body. INVALID_ARGUMENT naming the field: a tool that is
// not {"type": "function", "function": {"name": ...}} (names of 1-64 letters, digits, '_'
// or '-'; parameters an object schema Quill can keep), a tool_choice naming no tool, or a
// forced call beside response_format, or a parallel_tool_calls that is not a boolean.
absl::StatusOr<ToolRequest> ParseTools(const nlohmann::ordered_json& body);

// OK unless `tools` lets the model decide (auto_calls) and the chat template writes calls
// in no syntax Quill reads back (`syntax` kNone): then INVALID_ARGUMENT naming tool_choice.
absl::Status CheckCallsReadable(const ToolRequest& tools, engine::chat::ToolCallSyntax syntax);

// How a chat answer's tool calls are read (syntax kNone: not at all), and what they may
// name.
struct ToolCallReading {
  engine::chat::ToolCallSyntax syntax = engine::chat::ToolCallSyntax::kNone;
  std::vector<std::string> names;
  bool first_call_only = false;  // parallel_tool_calls false
};

// The reading for accepted `tools`: a forced call's answer is the call's JSON object; with
// "auto", the chat template's `template_syntax`; otherwise none.
ToolCallReading ReadingOf(const ToolRequest& tools, engine::chat::ToolCallSyntax template_syntax);

// The calls in a chat answer, read as `reading` says (engine::chat::ParseToolCalls; with
// syntax kNone, none: the answer is content). With first_call_only, an answer's calls past
// its first are dropped, as OpenAI's parallel_tool_calls false allows one.
engine::chat::ParsedAnswer ReadToolCalls(const ToolCallReading& reading, absl::string_view answer);

}  // namespace quill::server
