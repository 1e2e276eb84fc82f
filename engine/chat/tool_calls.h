#pragma once

// Tool calls written in a model's own syntax and read back out of its answer (OpenAI's
// tool_choice "auto": the model decides whether to call). Which syntax a model writes is
// found once, at load, by asking its chat template how it renders a call of an earlier
// turn: that is the form the model was trained to produce, whatever the model's name.

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/chat/chat_template.h"
#include "nlohmann/json.hpp"

namespace quill::engine::chat {

enum class ToolCallSyntax {
  kNone,  // the template renders no call Quill can read back
  // The whole answer is one {"name": ..., "arguments" (or "parameters"): {...}} (Llama
  // 3.x; also what a forced call's schema makes every answer).
  kJsonObject,
  // <tool_call>{"name": ..., "arguments": {...}}</tool_call>, once or more, possibly after
  // some text (Qwen2.5 and 3, Hermes 2 and 3, Granite).
  kHermes,
};

// "none", "json_object" or "hermes" (stable: ModelInfo and the log show them).
const char* ToolCallSyntaxName(ToolCallSyntax syntax);

// Renders a probe conversation, a user turn and then an assistant turn that calls one
// tool, and recognizes how the answer came out after the prompt (the render of the user
// turn with the generation prompt): kNone when in neither form (Mistral's [TOOL_CALLS]
// list, XML parameters, a "function call" turn of its own, ...) or when a render fails.
ToolCallSyntax ProbeToolCallSyntax(const ChatTemplate& tmpl, const RenderLimits& limits = {});

struct ToolCall {
  std::string name;
  nlohmann::ordered_json arguments;  // an object
};

struct ParsedAnswer {
  // The answer's text outside its calls; all of it when there are no calls.
  std::string content;
  std::vector<ToolCall> calls;
};

// Reads `answer` in `syntax`. All or nothing: calls only when every one in it is well
// formed (a JSON object naming one of `names`, with an object of arguments); otherwise
// no calls and `content` is the whole answer, so nothing the model wrote is lost.
ParsedAnswer ParseToolCalls(ToolCallSyntax syntax, absl::string_view answer,
                            absl::Span<const std::string> names);

// For a stream: whether `unsent`, the answer's text not yet sent as content (`at_start`:
// none of the answer was sent), may be or become a call and so must be held back.
//   kCall: it holds a call's opening ("<tool_call>"; kJsonObject: at the start, '{' first),
//     so it is held to the end of the answer whatever comes next.
//   kMaybe: its end may still become one (kHermes: it ends with a proper prefix of
//     "<tool_call>"; kJsonObject: at the start, it is only whitespace).
//   kNo: it can be sent.
// A stream asks after each chunk, `fresh` being the chunk's bytes at the end of `unsent`,
// and stops asking once told kCall; kHermes looks only at the fresh bytes and a tag's
// length before them (an earlier tag was kCall already), so a stream's checks take time
// linear in its answer. `fresh` = unsent.size() looks at all of it.
enum class ToolCallHold { kNo, kMaybe, kCall };
ToolCallHold HoldForToolCall(ToolCallSyntax syntax, absl::string_view unsent, size_t fresh,
                             bool at_start);

}  // namespace quill::engine::chat
