// The tool-call syntax each real template writes (expectations read off the templates
// themselves), and answers read back in each syntax.

#include "engine/chat/tool_calls.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/chat/chat_template.h"
#include "gtest/gtest.h"
#include "tests/testing/test_env.h"

namespace quill::engine::chat {
namespace {

using json = nlohmann::ordered_json;

const std::vector<std::string> kNames = {"get_weather", "search"};

TEST(ToolCallSyntaxTest, EachRealTemplateIsProbedForTheFormItWritesCallsIn) {
  const std::string dir = testing::SharedPath("chat_templates");
  if (dir.empty()) GTEST_SKIP() << "shared assets not found (chat_templates)";
  // What each template writes for an earlier turn's call (read in its source): a JSON
  // object inside <tool_call> tags, the bare object as the whole turn, or something else.
  const std::map<std::string, ToolCallSyntax> expected = {
      {"Qwen-Qwen2.5-7B-Instruct", ToolCallSyntax::kHermes},
      {"Qwen-Qwen3-0.6B", ToolCallSyntax::kHermes},
      {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", ToolCallSyntax::kHermes},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", ToolCallSyntax::kHermes},
      {"meta-llama-Llama-3.1-8B-Instruct", ToolCallSyntax::kJsonObject},
      {"meta-llama-Llama-3.2-3B-Instruct", ToolCallSyntax::kJsonObject},
      {"meta-llama-Llama-3.3-70B-Instruct", ToolCallSyntax::kJsonObject},
      // <tool_call> around XML parameters, not JSON.
      {"Qwen3.5-4B", ToolCallSyntax::kNone},
      {"GLM-4.7-Flash", ToolCallSyntax::kNone},
      // [TOOL_CALLS] and a list of calls.
      {"mistralai-Mistral-Nemo-Instruct-2407", ToolCallSyntax::kNone},
      {"fireworks-ai-llama-3-firefunction-v2", ToolCallSyntax::kNone},
      // No tool calls at all.
      {"google-gemma-2-2b-it", ToolCallSyntax::kNone},
      {"microsoft-Phi-3.5-mini-instruct", ToolCallSyntax::kNone},
  };
  for (const auto& [name, want] : expected) {
    absl::StatusOr<ChatTemplate> tmpl =
        ChatTemplate::Parse(testing::ReadWholeFile(absl::StrCat(dir, "/", name, ".jinja")));
    ASSERT_TRUE(tmpl.ok()) << name << ": " << tmpl.status();
    EXPECT_EQ(ToolCallSyntaxName(ProbeToolCallSyntax(*tmpl)), std::string(ToolCallSyntaxName(want)))
        << name;
  }
}

TEST(ToolCallSyntaxTest, ATemplateThatFailsToRenderACallHasNone) {
  absl::StatusOr<ChatTemplate> tmpl = ChatTemplate::Parse(
      "{% for m in messages %}{% if m.tool_calls %}{{ raise_exception('no calls') }}{% endif %}"
      "{{ m.content }}{% endfor %}");
  ASSERT_TRUE(tmpl.ok());
  EXPECT_EQ(ProbeToolCallSyntax(*tmpl), ToolCallSyntax::kNone);
}

TEST(ParseToolCallsTest, HermesCallsWithTextAroundThem) {
  ParsedAnswer a = ParseToolCalls(
      ToolCallSyntax::kHermes,
      "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n</tool_call>\n<tool_call>{\"name\": \"search\", \"arguments\": {\"q\": "
      "\"a } in a string\"}}</tool_call> Done.",
      kNames);
  ASSERT_EQ(a.calls.size(), 2u);
  EXPECT_EQ(a.calls[0].name, "get_weather");
  EXPECT_EQ(a.calls[0].arguments, json({{"city", "Paris"}}));
  EXPECT_EQ(a.calls[1].name, "search");
  EXPECT_EQ(a.calls[1].arguments, json({{"q", "a } in a string"}}));
  EXPECT_EQ(a.content, "Let me look.\n\n Done.");

  // Only calls: no content. The last call may end without its closing tag.
  a = ParseToolCalls(ToolCallSyntax::kHermes,
                     "<tool_call>\n{\"name\": \"search\", \"arguments\": {}}\n", kNames);
  ASSERT_EQ(a.calls.size(), 1u);
  EXPECT_EQ(a.calls[0].arguments, json::object());
  EXPECT_EQ(a.content, "");
}

TEST(ParseToolCallsTest, AnythingMalformedLeavesTheWholeAnswerAsText) {
  const std::vector<std::string> answers = {
      "no call at all",
      "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"cut",   // cut
      "<tool_call>{\"name\": \"unknown\", \"arguments\": {}}</tool_call>",  // no such tool
      "<tool_call>{\"name\": \"search\", \"arguments\": [1]}</tool_call>",  // not an object
      "<tool_call>{\"name\": \"search\"}</tool_call>",                      // no arguments
      "<tool_call>{\"name\": \"search\", \"arguments\": {}}</tool_call>"
      "<tool_call>oops</tool_call>",  // one bad call spoils all
      "<tool_call>{\"name\": 7, \"arguments\": {}}</tool_call>",
  };
  for (const std::string& answer : answers) {
    ParsedAnswer a = ParseToolCalls(ToolCallSyntax::kHermes, answer, kNames);
    EXPECT_TRUE(a.calls.empty()) << answer;
    EXPECT_EQ(a.content, answer);
  }
  // The same text in a syntax that does not read it.
  const std::string call = "{\"name\": \"search\", \"arguments\": {}}";
  EXPECT_TRUE(ParseToolCalls(ToolCallSyntax::kNone, call, kNames).calls.empty());
  EXPECT_TRUE(ParseToolCalls(ToolCallSyntax::kJsonObject, absl::StrCat("Sure: ", call), kNames)
                  .calls.empty());
  EXPECT_TRUE(ParseToolCalls(ToolCallSyntax::kJsonObject, absl::StrCat(call, " and more"), kNames)
                  .calls.empty());
}

TEST(ParseToolCallsTest, JsonObjectAnswers) {
  // Llama 3's "parameters", the forced call's "arguments", and arguments sent as a string.
  for (const char* answer :
       {"\n {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}} ",
        "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}",
        "{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Oslo\\\"}\"}"}) {
    ParsedAnswer a = ParseToolCalls(ToolCallSyntax::kJsonObject, answer, kNames);
    ASSERT_EQ(a.calls.size(), 1u) << answer;
    EXPECT_EQ(a.calls[0].name, "get_weather");
    EXPECT_EQ(a.calls[0].arguments, json({{"city", "Oslo"}}));
    EXPECT_EQ(a.content, "");
  }
  // A JSON answer that is not a call stays text.
  ParsedAnswer a = ParseToolCalls(ToolCallSyntax::kJsonObject, "{\"city\": \"Oslo\"}", kNames);
  EXPECT_TRUE(a.calls.empty());
  EXPECT_EQ(a.content, "{\"city\": \"Oslo\"}");
}

// The hold for `unsent` looked at whole.
ToolCallHold Hold(ToolCallSyntax syntax, absl::string_view unsent, bool at_start) {
  return HoldForToolCall(syntax, unsent, unsent.size(), at_start);
}

TEST(HoldForToolCallTest, HermesHoldsATagOrTheStartOfOne) {
  const ToolCallSyntax s = ToolCallSyntax::kHermes;
  EXPECT_EQ(Hold(s, "", true), ToolCallHold::kNo);
  EXPECT_EQ(Hold(s, "Hello there", true), ToolCallHold::kNo);
  EXPECT_EQ(Hold(s, "a <b>", false), ToolCallHold::kNo);
  for (const char* maybe : {"<", "Hi <", "Hi <t", "<tool_", "<tool_call"}) {
    EXPECT_EQ(Hold(s, maybe, false), ToolCallHold::kMaybe) << maybe;
    EXPECT_EQ(Hold(s, maybe, true), ToolCallHold::kMaybe) << maybe;
  }
  for (const char* call :
       {"<tool_call>", "x <tool_call>{\"name\"", "<tool_call>{} </tool_call> more"}) {
    EXPECT_EQ(Hold(s, call, false), ToolCallHold::kCall) << call;
    EXPECT_EQ(Hold(s, call, true), ToolCallHold::kCall) << call;
  }
  EXPECT_EQ(Hold(s, "<tools are", false), ToolCallHold::kNo);
  EXPECT_EQ(Hold(s, "<tool_call_", false), ToolCallHold::kNo);
}

// A stream asks after each chunk with only the chunk fresh: a tag split over chunks is
// found, and text far before the fresh bytes is not looked at again.
TEST(HoldForToolCallTest, HermesLooksAtTheFreshBytesAndATagBeforeThem) {
  const ToolCallSyntax s = ToolCallSyntax::kHermes;
  EXPECT_EQ(HoldForToolCall(s, "Hi <tool_call>", 3, false), ToolCallHold::kCall);    // "ll>"
  EXPECT_EQ(HoldForToolCall(s, "Hi <tool_call>", 1, false), ToolCallHold::kCall);    // ">"
  EXPECT_EQ(HoldForToolCall(s, "<tool_call> and on", 7, false), ToolCallHold::kNo);  // seen before
  EXPECT_EQ(HoldForToolCall(s, "<tool_call> and on", 8, false), ToolCallHold::kCall);
  EXPECT_EQ(HoldForToolCall(s, "Hi <tool", 2, false), ToolCallHold::kMaybe);
}

TEST(HoldForToolCallTest, JsonObjectHoldsAnAnswerThatStartsAsAnObject) {
  const ToolCallSyntax s = ToolCallSyntax::kJsonObject;
  EXPECT_EQ(Hold(s, "", true), ToolCallHold::kMaybe);
  EXPECT_EQ(Hold(s, " \n", true), ToolCallHold::kMaybe);
  EXPECT_EQ(Hold(s, " {\"na", true), ToolCallHold::kCall);
  EXPECT_EQ(Hold(s, "The {", true), ToolCallHold::kNo);
  EXPECT_EQ(Hold(s, "{", false), ToolCallHold::kNo);  // after sent text, never
  EXPECT_EQ(Hold(ToolCallSyntax::kNone, "{", true), ToolCallHold::kNo);
}

}  // namespace
}  // namespace quill::engine::chat
