// libFuzzer target: the chat template engine (engine/chat) on untrusted input, both ways
// it meets it. Byte 0 picks the mode:
//   even: the rest is a template's source (a model file's tokenizer.chat_template): parsed,
//         then rendered over a fixed conversation;
//   odd:  byte 1 picks one of the real templates in ../shared/chat_templates (or a small
//         built-in one without it), and the rest is a request's messages JSON.
// Renders run under small RenderLimits so that every input finishes quickly. Checked:
// errors are INVALID_ARGUMENT; the output is valid UTF-8 when the inputs are; the content
// ranges are sorted, disjoint and inside the text. A parsed template is also probed for
// its tool-call syntax (as at load), and the odd mode's bytes are read as a model's
// answer in each syntax: no calls leaves the whole answer as content, calls name a
// known tool and carry an object of arguments; and split into thought and content, in
// pieces as a stream brings them, which must give what the whole answer gives. Parsed
// templates are probed for thinking too.

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "engine/base/check.h"
#include "engine/base/utf8.h"
#include "engine/chat/chat_template.h"
#include "engine/chat/reasoning.h"
#include "engine/chat/tool_calls.h"
#include "engine/tokenizer/tokenizer.h"
#include "fuzz/chat_templates.h"

namespace {

namespace chat = quill::engine::chat;

chat::ChatRenderOptions Options() {
  chat::ChatRenderOptions options;
  options.date = absl::CivilDay(2025, 1, 2);
  options.limits.max_output_bytes = 1 << 20;
  options.limits.max_allocated_bytes = 16 << 20;
  options.limits.max_operations = 200'000;
  options.limits.max_depth = 100;
  return options;
}

void Check(const absl::StatusOr<chat::RenderedChat>& rendered, bool inputs_utf8) {
  if (!rendered.ok()) {
    QUILL_CHECK(rendered.status().code() == absl::StatusCode::kInvalidArgument);
    return;
  }
  const size_t size = rendered->text.size();
  size_t previous_end = 0;
  for (const chat::ByteRange& r : rendered->content_ranges) {
    QUILL_CHECK(r.begin < r.end && r.end <= size);
    QUILL_CHECK(r.begin >= previous_end);
    previous_end = r.end;
  }
  if (inputs_utf8) QUILL_CHECK(quill::engine::IsValidUtf8(rendered->text));
}

// Thought and content of `answer` in pieces of 3 bytes are those of it whole, and
// together they are the answer less the tags and blanks around them.
void CheckReasoningSplit(absl::string_view answer) {
  for (const bool thought_open : {false, true}) {
    chat::ReasoningSplitter whole(thought_open);
    chat::ReasoningSplitter::Parts expected = whole.Add(answer);
    chat::ReasoningSplitter::Parts rest = whole.Finish();
    expected.reasoning += rest.reasoning;
    expected.content += rest.content;
    QUILL_CHECK(expected.reasoning.size() + expected.content.size() <= answer.size());
    chat::ReasoningSplitter pieces(thought_open);
    chat::ReasoningSplitter::Parts got;
    for (size_t at = 0; at < answer.size(); at += 3) {
      chat::ReasoningSplitter::Parts p = pieces.Add(answer.substr(at, 3));
      got.reasoning += p.reasoning;
      got.content += p.content;
    }
    rest = pieces.Finish();
    got.reasoning += rest.reasoning;
    got.content += rest.content;
    QUILL_CHECK(got.reasoning == expected.reasoning && got.content == expected.content);
  }
}

void CheckToolCalls(absl::string_view answer) {
  static const std::vector<std::string>* names = new std::vector<std::string>({"f", "get_weather"});
  for (chat::ToolCallSyntax syntax :
       {chat::ToolCallSyntax::kNone, chat::ToolCallSyntax::kJsonObject,
        chat::ToolCallSyntax::kHermes}) {
    const chat::ParsedAnswer parsed = chat::ParseToolCalls(syntax, answer, *names);
    if (parsed.calls.empty()) QUILL_CHECK(parsed.content == answer);
    QUILL_CHECK(parsed.content.size() <= answer.size());
    for (const chat::ToolCall& call : parsed.calls) {
      QUILL_CHECK(call.name == "f" || call.name == "get_weather");
      QUILL_CHECK(call.arguments.is_object());
    }
    // A stream's checks chunk by chunk (two bytes fresh at a time, stopping at kCall) end
    // where one look at the whole answer does.
    for (const bool at_start : {true, false}) {
      chat::ToolCallHold streamed = chat::ToolCallHold::kNo;
      for (size_t seen = 0;;) {
        const size_t end = std::min(answer.size(), seen + 2);
        streamed = chat::HoldForToolCall(syntax, answer.substr(0, end), end - seen, at_start);
        if (streamed == chat::ToolCallHold::kCall || end == answer.size()) break;
        seen = end;
      }
      QUILL_CHECK(streamed == chat::HoldForToolCall(syntax, answer, answer.size(), at_start));
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const chat::ChatRenderOptions options = Options();
  if ((data[0] & 1) == 0) {
    const absl::string_view source(reinterpret_cast<const char*>(data + 1), size - 1);
    auto parsed = chat::ChatTemplate::Parse(source);
    if (!parsed.ok()) {
      QUILL_CHECK(parsed.status().code() == absl::StatusCode::kInvalidArgument);
      return 0;
    }
    static const nlohmann::ordered_json* conversation = new nlohmann::ordered_json(
        nlohmann::ordered_json::parse(R"([{"role": "system", "content": "Be brief."},
                                          {"role": "user", "content": "Hi <|im_start|> \u00e9"},
                                          {"role": "assistant", "content": "Hello."},
                                          {"role": "user", "content": "Bye"}])"));
    Check(parsed->Render(*conversation, options), quill::engine::IsValidUtf8(source));
    chat::ProbeToolCallSyntax(*parsed, options.limits);
    chat::ProbeThinks(*parsed, options.limits);
    return 0;
  }
  const auto& templates = quill::fuzz::ChatTemplates();
  const chat::ChatTemplate& tmpl = templates[data[1] % templates.size()];
  const absl::string_view json(reinterpret_cast<const char*>(data + 2), size - 2);
  CheckToolCalls(json);
  CheckReasoningSplit(json);
  auto messages = chat::ParseMessagesJson(json);
  if (!messages.ok()) return 0;
  Check(tmpl.Render(*messages, options), quill::engine::IsValidUtf8(json));
  return 0;
}
