#include "server/http/openai_request.h"

#include <limits>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/http/openai_error.h"

namespace quill::server::http {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<OpenAiRequest> Completions(absl::string_view body) {
  return ParseOpenAiRequest(body, Endpoint::kCompletions, /*random_seed=*/77);
}
absl::StatusOr<OpenAiRequest> Chat(absl::string_view body) {
  return ParseOpenAiRequest(body, Endpoint::kChatCompletions, /*random_seed=*/77);
}

TEST(OpenAiRequestTest, CompletionDefaultsAreOpenAis) {
  absl::StatusOr<OpenAiRequest> r = Completions(R"({"model": "m", "prompt": "Hello"})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->generate.prompt(), "Hello");
  EXPECT_EQ(r->generate.max_tokens(), 16);
  EXPECT_FALSE(r->max_tokens_given);
  EXPECT_EQ(r->generate.sampling().temperature(), 1.0f);
  EXPECT_EQ(r->generate.sampling().seed(), 77u);  // no seed given: the random one
  EXPECT_FALSE(r->stream);
  EXPECT_FALSE(r->logprobs);
  EXPECT_EQ(r->generate.logprobs(), 0);
  EXPECT_FALSE(r->generate.disable_speculation());  // speculation is on unless opted out
}

TEST(OpenAiRequestTest, DisableSpeculationIsAQuillExtraOnBothEndpoints) {
  absl::StatusOr<OpenAiRequest> r = Completions(R"({"prompt": "x", "disable_speculation": true})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->generate.disable_speculation());
  r = Chat(R"({"messages": [{"role": "user", "content": "x"}], "disable_speculation": true})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->generate.disable_speculation());
  for (const char* value : {"false", "null"}) {
    r = Completions(absl::StrCat(R"({"prompt": "x", "disable_speculation": )", value, "}"));
    ASSERT_TRUE(r.ok()) << value << ": " << r.status();
    EXPECT_FALSE(r->generate.disable_speculation()) << value;
  }
  // Not a boolean: a 400 whose param is the field.
  for (const char* value : {"\"true\"", "1", "0", "[]", "{}"}) {
    r = Completions(absl::StrCat(R"({"prompt": "x", "disable_speculation": )", value, "}"));
    ASSERT_FALSE(r.ok()) << value;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << value;
    EXPECT_EQ(r.status().message(), "disable_speculation must be a boolean") << value;
    std::string body;
    EXPECT_EQ(OpenAiErrorResponse(r.status(), &body).status, 400);
    EXPECT_THAT(body, HasSubstr(R"("param":"disable_speculation")")) << value;
  }
}

TEST(OpenAiRequestTest, ResponseFormatJsonObjectIsJsonMode) {
  absl::StatusOr<OpenAiRequest> r = Chat(R"({"messages": [{"role": "user", "content": "x"}],
               "response_format": {"type": "json_object"}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->generate.json_object());
  r = Completions(R"({"prompt": "x", "response_format": {"type": "json_object"}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->generate.json_object());
  r = Completions(R"({"prompt": "x", "response_format": {"type": "text"}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->generate.json_object());
}

TEST(OpenAiRequestTest, ResponseFormatJsonSchemaIsStructuredOutput) {
  const nlohmann::json schema = nlohmann::json::parse(R"({"type": "object",
      "properties": {"a": {"type": "integer"}, "b": {"enum": ["x", "y"]}}, "required": ["a"]})");
  for (bool chat : {true, false}) {
    nlohmann::json body = {
        {"response_format",
         {{"type", "json_schema"},
          {"json_schema", {{"name", "ab"}, {"strict", true}, {"schema", schema}}}}}};
    if (chat) {
      body["messages"] = {{{"role", "user"}, {"content", "x"}}};
    } else {
      body["prompt"] = "x";
    }
    absl::StatusOr<OpenAiRequest> r = chat ? Chat(body.dump()) : Completions(body.dump());
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->generate.json_object());
    EXPECT_EQ(nlohmann::json::parse(r->generate.json_schema()), schema);
  }
}

TEST(OpenAiRequestTest, ToolsReachTheTemplateAndToolChoiceForcesACall) {
  const nlohmann::ordered_json weather = nlohmann::ordered_json::parse(R"({"type": "function",
      "function": {"name": "get_weather", "description": "Weather in a city",
                   "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                  "required": ["city"]}}})");
  const nlohmann::ordered_json time =
      nlohmann::ordered_json::parse(R"({"type": "function", "function": {"name": "get_time"}})");
  const auto chat = [&](nlohmann::ordered_json extra) {
    nlohmann::ordered_json body = {{"messages", {{{"role", "user"}, {"content", "x"}}}},
                                   {"tools", {weather, time}},
                                   {"logprobs", true}};
    body.update(extra);
    return Chat(body.dump());
  };
  // Named: the call's name is that function's, its arguments its parameters.
  absl::StatusOr<OpenAiRequest> r =
      chat({{"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}});
  ASSERT_TRUE(r.ok()) << r.status();
  // A forced call is read as the JSON object it is, whatever the template writes.
  EXPECT_EQ(ReadingOf(r->tools, engine::chat::ToolCallSyntax::kHermes).syntax,
            engine::chat::ToolCallSyntax::kJsonObject);
  EXPECT_EQ(r->tools.names, std::vector<std::string>({"get_weather", "get_time"}));
  EXPECT_TRUE(r->generate.json_object());
  EXPECT_EQ(r->template_variables["tools"], nlohmann::ordered_json({weather, time}));
  EXPECT_FALSE(r->logprobs);  // a call has no content to score
  nlohmann::json schema = nlohmann::json::parse(r->generate.json_schema());
  EXPECT_EQ(schema["properties"]["name"], nlohmann::json({{"const", "get_weather"}}));
  EXPECT_EQ(schema["properties"]["arguments"],
            nlohmann::json::parse(weather["function"]["parameters"].dump()));
  EXPECT_EQ(schema["required"], nlohmann::json({"name", "arguments"}));
  // Required among two: one of their names, an object of arguments.
  r = chat({{"tool_choice", "required"}});
  ASSERT_TRUE(r.ok()) << r.status();
  schema = nlohmann::json::parse(r->generate.json_schema());
  EXPECT_EQ(schema["properties"]["name"], nlohmann::json({{"enum", {"get_weather", "get_time"}}}));
  EXPECT_EQ(schema["properties"]["arguments"], nlohmann::json({{"type", "object"}}));
  // None: the tools still reach the template, the answer is text.
  r = chat({{"tool_choice", "none"}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(ReadingOf(r->tools, engine::chat::ToolCallSyntax::kHermes).syntax,
            engine::chat::ToolCallSyntax::kNone);
  EXPECT_FALSE(r->generate.json_object());
  EXPECT_TRUE(r->template_variables.contains("tools"));
  // Auto, said or by default with tools: free text (logprobs kept) that may hold calls to
  // the tools, read in the template's syntax.
  for (const nlohmann::ordered_json& extra :
       {nlohmann::ordered_json({{"tool_choice", "auto"}}), nlohmann::ordered_json::object()}) {
    r = chat(extra);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(ReadingOf(r->tools, engine::chat::ToolCallSyntax::kHermes).syntax,
              engine::chat::ToolCallSyntax::kHermes);
    EXPECT_EQ(r->tools.names, std::vector<std::string>({"get_weather", "get_time"}));
    EXPECT_FALSE(r->generate.json_object());
    EXPECT_TRUE(r->generate.json_schema().empty());
    EXPECT_TRUE(r->logprobs);
    EXPECT_EQ(r->template_variables["tools"], nlohmann::ordered_json({weather, time}));
  }
  // Without tools, nothing changes.
  for (const char* choice : {"none", "auto"}) {
    r = Chat(absl::StrCat(R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": ")",
                          choice, "\"}"));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->template_variables.is_null());
    EXPECT_EQ(ReadingOf(r->tools, engine::chat::ToolCallSyntax::kHermes).syntax,
              engine::chat::ToolCallSyntax::kNone);
  }
}

// parallel_tool_calls false: an answer's first call only (true, the default, all of them);
// anything but a boolean (or null) is refused naming it.
TEST(OpenAiRequestTest, ParallelToolCallsFalseKeepsTheFirstCall) {
  const std::string answer = R"(Two. <tool_call>{"name": "f", "arguments": {}}</tool_call>)"
                             R"(<tool_call>{"name": "g", "arguments": {"x": 1}}</tool_call>)";
  const std::string prefix = R"({"messages": [{"role": "user", "content": "x"}], "tools": )"
                             R"([{"type": "function", "function": {"name": "f"}},)"
                             R"( {"type": "function", "function": {"name": "g"}}])";
  for (const auto& [field, calls] :
       std::vector<std::pair<std::string, size_t>>{{"", 2},
                                                   {R"(, "parallel_tool_calls": null)", 2},
                                                   {R"(, "parallel_tool_calls": true)", 2},
                                                   {R"(, "parallel_tool_calls": false)", 1}}) {
    absl::StatusOr<OpenAiRequest> r = Chat(prefix + field + "}");
    ASSERT_TRUE(r.ok()) << r.status();
    const engine::chat::ParsedAnswer parsed =
        ReadToolCalls(ReadingOf(r->tools, engine::chat::ToolCallSyntax::kHermes), answer);
    ASSERT_EQ(parsed.calls.size(), calls) << field;
    EXPECT_EQ(parsed.calls[0].name, "f");
    EXPECT_EQ(parsed.content, "Two. ");
  }
  absl::StatusOr<OpenAiRequest> bad = Chat(prefix + R"(, "parallel_tool_calls": "no"})");
  ASSERT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), ::testing::HasSubstr("parallel_tool_calls"));
}

// reasoning_effort reaches the chat template as its variable of that name, unless
// chat_template_kwargs sets it; an unknown effort, or one on completions, is refused.
TEST(OpenAiRequestTest, ReasoningEffortIsATemplateVariable) {
  const std::string messages = R"({"messages": [{"role": "user", "content": "x"}], )";
  absl::StatusOr<OpenAiRequest> r = Chat(messages + R"("reasoning_effort": "low"})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->template_variables.value("reasoning_effort", ""), "low");
  r = Chat(messages + R"("reasoning_effort": "high", "chat_template_kwargs": )"
                      R"({"reasoning_effort": "medium"}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->template_variables.value("reasoning_effort", ""), "medium");
  r = Chat(messages + R"("reasoning_effort": null})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->template_variables.is_null());
  for (const std::string& bad :
       {messages + R"("reasoning_effort": "max"})", messages + R"("reasoning_effort": 2})"}) {
    r = Chat(bad);
    ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(r.status().message()), ::testing::HasSubstr("reasoning_effort"));
  }
  r = Completions(R"({"prompt": "x", "reasoning_effort": "low"})");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

// chat_template_kwargs (vLLM's and SGLang's extension) become template variables beside
// the tools; what the request and the model set cannot be overridden.
TEST(OpenAiRequestTest, ChatTemplateKwargsAreMoreTemplateVariables) {
  absl::StatusOr<OpenAiRequest> r = Chat(
      R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": )"
      R"({"enable_thinking": false, "depth": {"a": [1]}},)"
      R"( "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "none"})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->template_variables["enable_thinking"], false);
  EXPECT_EQ(r->template_variables["depth"], nlohmann::ordered_json::parse(R"({"a": [1]})"));
  EXPECT_TRUE(r->template_variables.contains("tools"));
  r = Chat(R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": null})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->template_variables.is_null());
  for (const auto& [body, message] : std::vector<std::pair<std::string, std::string>>{
           {R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": 1})",
            "chat_template_kwargs must be an object"},
           {R"({"messages": [{"role": "user", "content": "x"}],)"
            R"( "chat_template_kwargs": {"add_generation_prompt": false}})",
            "chat_template_kwargs cannot set \"add_generation_prompt\""},
           {R"({"messages": [{"role": "user", "content": "x"}],)"
            R"( "chat_template_kwargs": {"messages": []}})",
            "chat_template_kwargs cannot set \"messages\""}}) {
    r = Chat(body);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << body;
    EXPECT_THAT(r.status().message(), HasSubstr(message)) << body;
  }
  r = Completions(R"({"prompt": "x", "chat_template_kwargs": {"a": 1}})");
  EXPECT_THAT(r.status().message(), HasSubstr("chat_template_kwargs is for /v1/chat/completions"));
}

// OpenAI sends an earlier call's arguments as JSON text; the template gets the object
// (Hugging Face's chat format). Text that is no object is passed on as sent.
TEST(OpenAiRequestTest, EarlierCallArgumentsReachTheTemplateAsObjects) {
  absl::StatusOr<OpenAiRequest> r = Chat(R"({"messages": [
      {"role": "user", "content": "x"},
      {"role": "assistant", "content": null, "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{\"b\": [1]}"}},
        {"id": "b", "type": "function", "function": {"name": "g", "arguments": "not json"}},
        {"id": "c", "type": "function", "function": {"name": "h", "arguments": "[1]"}}]},
      {"role": "tool", "tool_call_id": "a", "content": "ok"}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  const nlohmann::ordered_json& calls = r->messages[1]["tool_calls"];
  EXPECT_EQ(calls[0]["function"]["arguments"], nlohmann::ordered_json({{"b", {1}}}));
  EXPECT_EQ(calls[1]["function"]["arguments"], "not json");
  EXPECT_EQ(calls[2]["function"]["arguments"], "[1]");
  EXPECT_EQ(r->messages[2]["content"], "ok");
}

TEST(OpenAiRequestTest, EveryFieldMapsOntoTheGenerateRequest) {
  absl::StatusOr<OpenAiRequest> r = Completions(R"({
      "prompt": ["Hi"], "max_tokens": 5, "temperature": 0.5, "top_p": 0.9, "top_k": 7,
      "min_p": 0.05, "repetition_penalty": 1.1, "seed": 42, "stop": ["a", "b"],
      "logprobs": 3, "n": 1, "ignore_eos": true, "stop_token_ids": [2, 3], "stream": true,
      "stream_options": {"include_usage": true}, "user": "ignored", "unknown": {"x": 1}})");
  ASSERT_TRUE(r.ok()) << r.status();
  const quill::v1::GenerateRequest& g = r->generate;
  EXPECT_EQ(g.prompt(), "Hi");
  EXPECT_EQ(g.max_tokens(), 5);
  EXPECT_FLOAT_EQ(g.sampling().temperature(), 0.5f);
  EXPECT_FLOAT_EQ(g.sampling().top_p(), 0.9f);
  EXPECT_EQ(g.sampling().top_k(), 7);
  EXPECT_FLOAT_EQ(g.sampling().min_p(), 0.05f);
  EXPECT_FLOAT_EQ(g.sampling().repetition_penalty(), 1.1f);
  EXPECT_EQ(g.sampling().seed(), 42u);
  ASSERT_EQ(g.stop_size(), 2);
  EXPECT_EQ(g.stop(1), "b");
  EXPECT_EQ(g.logprobs(), 3);
  EXPECT_TRUE(r->logprobs);
  EXPECT_EQ(r->top_logprobs, 3);
  EXPECT_TRUE(g.ignore_eos());
  EXPECT_EQ(g.stop_token_ids_size(), 2);
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
}

TEST(OpenAiRequestTest, NChoicesAndBestOfEqualToN) {
  absl::StatusOr<OpenAiRequest> r = Completions(R"({"prompt": "x"})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->n, 1);
  r = Completions(R"({"prompt": "x", "n": 128, "best_of": 128})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->n, 128);
  r = Chat(R"({"messages": [{"role": "user", "content": "x"}], "n": 3, "best_of": null})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->n, 3);
}

TEST(OpenAiRequestTest, APromptBatchIsOnePromptEach) {
  absl::StatusOr<OpenAiRequest> r =
      Completions(R"({"prompt": ["In the", [1, 5, 6], "beginning"], "n": 2, "max_tokens": 3})");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->prompts.size(), 3u);
  EXPECT_EQ(r->prompts[0].prompt(), "In the");
  EXPECT_THAT(r->prompts[1].prompt_token_ids().ids(), ::testing::ElementsAre(1, 5, 6));
  EXPECT_EQ(r->prompts[2].prompt(), "beginning");
  EXPECT_EQ(r->prompts[2].max_tokens(), 0);  // only the prompt: options are in `generate`
  EXPECT_EQ(r->generate.prompt(), "In the");
  EXPECT_EQ(r->generate.max_tokens(), 3);
  // 128 choices in all are the most.
  EXPECT_TRUE(Completions(R"({"prompt": ["a", "b"], "n": 64})").ok());
  std::string many = R"({"prompt": [)";
  for (int i = 0; i <= kMaxChoices; ++i) absl::StrAppend(&many, i > 0 ? "," : "", R"("a")");
  r = Completions(many + "]}");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("prompt has 129 prompts"));
}

TEST(OpenAiRequestTest, EchoWithLogprobsScoresThePrompt) {
  absl::StatusOr<OpenAiRequest> r = Completions(R"({"prompt": "x", "echo": true})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->echo);
  EXPECT_FALSE(r->generate.prompt_logprobs());  // text only
  r = Completions(R"({"prompt": "x", "echo": true, "logprobs": 1, "max_tokens": 1})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->generate.prompt_logprobs());
  r = Completions(R"({"prompt": "x", "logprobs": 1})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->generate.prompt_logprobs());
}

TEST(OpenAiRequestTest, ChoiceSeedsKeepChoiceZeroAndDifferForTheOthers) {
  for (uint64_t seed : {0ull, 1ull, 42ull, ~0ull}) {
    EXPECT_EQ(ChoiceSeed(seed, 0), seed);
    std::set<uint64_t> seen = {seed};
    for (int i = 1; i < kMaxChoices; ++i) {
      EXPECT_EQ(ChoiceSeed(seed, i), ChoiceSeed(seed, i));  // reproducible
      EXPECT_TRUE(seen.insert(ChoiceSeed(seed, i)).second) << seed << " " << i;
    }
  }
  // Neighbouring seeds do not share choices (seed 1's choice 1 is not seed 2's choice 0).
  EXPECT_NE(ChoiceSeed(1, 1), 2u);
  EXPECT_NE(ChoiceSeed(1, 1), ChoiceSeed(2, 1));
}

TEST(OpenAiRequestTest, PenaltiesAndLogitBiasMapOntoTheSamplingParams) {
  absl::StatusOr<OpenAiRequest> r = Completions(R"({"prompt": "x", "frequency_penalty": 0.5,
      "presence_penalty": -1.25, "logit_bias": {"13": -100, "7": 2.5, "0": 100}})");
  ASSERT_TRUE(r.ok()) << r.status();
  const quill::v1::SamplingParams& s = r->generate.sampling();
  EXPECT_EQ(s.frequency_penalty(), 0.5f);
  EXPECT_EQ(s.presence_penalty(), -1.25f);
  EXPECT_THAT(s.logit_bias(), ::testing::UnorderedElementsAre(::testing::Pair(13, -100.0f),
                                                              ::testing::Pair(7, 2.5f),
                                                              ::testing::Pair(0, 100.0f)));
  // Ranges are the gRPC request's (request_codec); out-of-float values arrive as infinite.
  r = Completions(R"({"prompt": "x", "logit_bias": {"3": -1e300}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->generate.sampling().logit_bias().at(3), -std::numeric_limits<float>::infinity());
  // What changes nothing is accepted: zero penalties, an empty suffix, no tools, plain text.
  r = Chat(R"({"messages": [{"role": "user", "content": "x"}], "frequency_penalty": 0,
      "presence_penalty": null, "logit_bias": {}, "suffix": "", "tools": [], "functions": null,
      "response_format": {"type": "text"}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->generate.sampling().frequency_penalty(), 0.0f);
  EXPECT_TRUE(r->generate.sampling().logit_bias().empty());
}

TEST(OpenAiRequestTest, PromptForms) {
  absl::StatusOr<OpenAiRequest> r = Completions(R"({"prompt": [1, 2, 3]})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->generate.prompt_token_ids().ids_size(), 3);
  r = Completions(R"({"prompt": [[4, 5]]})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->generate.prompt_token_ids().ids(1), 5);
  r = Completions(R"({"prompt": "x", "stop": "end"})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->generate.stop(0), "end");
}

TEST(OpenAiRequestTest, ChatMessagesAndLogprobs) {
  absl::StatusOr<OpenAiRequest> r = Chat(R"({"messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]},
      {"role": "assistant", "content": null}],
      "max_completion_tokens": 9, "logprobs": true, "top_logprobs": 0})");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->messages.size(), 3u);
  EXPECT_EQ(r->messages[1]["content"], "Hi there");  // text parts joined
  EXPECT_TRUE(r->messages[2]["content"].is_null());  // left for the template
  EXPECT_EQ(r->generate.max_tokens(), 9);
  EXPECT_EQ(r->max_tokens_field, "max_completion_tokens");
  EXPECT_TRUE(r->logprobs);
  EXPECT_EQ(r->top_logprobs, 0);
  EXPECT_EQ(r->generate.logprobs(), 1);  // the engine needs >= 1 to return the chosen one
  // Chat has no default max_tokens here: the caller fits it to the prompt.
  r = Chat(R"({"messages": [{"role": "user", "content": "x"}]})");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->max_tokens_given);
}

TEST(OpenAiRequestTest, ChatMessagesKeepTheirKeysAndOrder) {
  // Templates see every field, and tojson prints a message's keys in the client's order.
  absl::StatusOr<OpenAiRequest> r = Chat(R"({"messages": [
      {"content": "c", "role": "user", "name": "ann", "zeta": {"b": 1, "a": 2}}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->messages.dump(),
            R"([{"content":"c","role":"user","name":"ann","zeta":{"b":1,"a":2}}])");
}

TEST(OpenAiRequestTest, BadInputNamesTheField) {
  const struct {
    const char* body;
    const char* field;
    bool chat = false;
  } cases[] = {
      {R"({"prompt": "x", "n": 0})", "n"},
      {R"({"prompt": "x", "n": 129})", "n"},
      {R"({"prompt": "x", "n": "1"})", "n"},
      {R"({"prompt": "x", "best_of": 2})", "best_of"},
      {R"({"prompt": "x", "n": 2, "best_of": 3})", "best_of"},
      {R"({"prompt": "x", "echo": "yes"})", "echo"},
      {R"({"prompt": "x", "frequency_penalty": "0.5"})", "frequency_penalty"},
      {R"({"prompt": "x", "presence_penalty": [1]})", "presence_penalty"},
      {R"({"prompt": "x", "logit_bias": [1]})", "logit_bias"},
      {R"({"prompt": "x", "logit_bias": {"abc": 1}})", "logit_bias"},
      {R"({"prompt": "x", "logit_bias": {"1.5": 1}})", "logit_bias"},
      {R"({"prompt": "x", "logit_bias": {"99999999999": 1}})", "logit_bias"},
      {R"({"prompt": "x", "logit_bias": {"7": "1"}})", "logit_bias[7]"},
      {R"({"prompt": "x", "suffix": "tail"})", "suffix"},
      {R"({"prompt": "x", "suffix": 5})", "suffix"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})",
       "tools[0] must be", true},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required",
           "tools": [{"type": "function", "function": {"name": "a b"}}]})",
       "tools[0] function.name", true},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required",
           "tools": [{"type": "function", "function": {"name": "f", "parameters":
           {"type": "object", "properties": {"s": {"type": "string", "maxLength": 3}}}}}]})",
       "tools[0] function.parameters at \"/properties/s\": \"maxLength\"", true},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "function",
           "function": {"name": "g"}}, "tools": [{"type": "function", "function": {"name": "f"}}]})",
       "tool_choice names \"g\"", true},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})",
       "tool_choice \"required\" needs tools", true},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "sometimes",
           "tools": [{"type": "function", "function": {"name": "f"}}]})",
       "tool_choice must be", true},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required",
           "response_format": {"type": "json_object"},
           "tools": [{"type": "function", "function": {"name": "f"}}]})",
       "tool_choice cannot force", true},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required",
           "ignore_eos": true, "tools": [{"type": "function", "function": {"name": "f"}}]})",
       "tool_choice cannot force", true},
      {R"({"prompt": "x", "tools": [{"type": "function", "function": {"name": "f"}}]})",
       "tools is not supported here"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": {}})", "tools", true},
      {R"({"messages": [{"role": "user", "content": "x"}], "echo": true})", "echo", true},
      {R"({"messages": [{"role": "user", "content": "x"}], "functions": [{"name": "f"}]})",
       "functions", true},
      {R"({"messages": [{"role": "user", "content": "x"}],
           "response_format": {"type": "json_schema", "json_schema": {"name": "x"}}})",
       "response_format", true},
      {R"({"messages": [{"role": "user", "content": "x"}], "ignore_eos": true,
           "response_format": {"type": "json_object"}})",
       "response_format", true},
      {R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type":
           "json_schema", "json_schema": {"schema": {"type": "object", "properties":
           {"s": {"type": "string", "pattern": "^a"}}}}}})",
       "response_format json_schema.schema at \"/properties/s\": \"pattern\" is not supported",
       true},
      {R"({"prompt": "x", "response_format": {"type": "json_schema", "json_schema":
           {"schema": {"type": "array"}}}})",
       "response_format json_schema.schema the root must be an object"},
      {R"({"prompt": "x", "ignore_eos": true, "response_format": {"type": "json_schema",
           "json_schema": {"schema": {"type": "object"}}}})",
       "response_format"},
      {R"({"messages": [{"role": "user", "content": "x"}], "response_format": "json"})",
       "response_format", true},
      {R"({"prompt": "x", "temperature": "1"})", "temperature"},
      {R"({"prompt": "x", "top_p": 0})", "top_p"},
      {R"({"prompt": "x", "max_tokens": 1.5})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 1e12})", "max_tokens"},
      {R"({"prompt": "x", "seed": "7"})", "seed"},
      {R"({"prompt": "x", "stop": [1]})", "stop[0]"},
      {R"({"prompt": "x", "stream": 1})", "stream"},
      {R"({"prompt": "x", "disable_speculation": "yes"})", "disable_speculation"},
      {R"({"messages": [{"role": "user", "content": "x"}], "disable_speculation": 1})",
       "disable_speculation", true},
      {R"({"prompt": "x", "stream_options": {"include_usage": "yes"}})",
       "stream_options.include_usage"},
      {R"({"prompt": "x", "model": 5})", "model"},
      {R"({"prompt": ["a", 7]})", "prompt[1]"},
      {R"({"prompt": [["a"], [1]]})", "prompt[0][0]"},
      {R"({"prompt": ["a", "b"], "n": 65})", "n"},
      {R"({"prompt": []})", "prompt"},
      {R"({"prompt": [1, "a"]})", "prompt[1]"},
      {R"({"prompt": 5})", "prompt"},
      {R"({})", "prompt"},
      {R"({})", "messages", true},
      {R"({"messages": []})", "messages", true},
      {R"({"messages": [{"content": "x"}]})", "messages[0].role", true},
      {R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content", true},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
       "messages[0].content[0].type", true},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", "top_logprobs",
       true},
      {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 2})", "logprobs", true},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0})", "max_tokens", true},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": -3})",
       "max_completion_tokens", true},
      {R"({"messages": [{"role": "", "content": "x"}]})", "messages[0].role", true},
      {R"({"messages": ["hi"]})", "messages[0]", true},
  };
  for (const auto& c : cases) {
    absl::StatusOr<OpenAiRequest> r = c.chat ? Chat(c.body) : Completions(c.body);
    ASSERT_FALSE(r.ok()) << c.body;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.body;
    EXPECT_TRUE(absl::StartsWith(r.status().message(), c.field))
        << c.body << " -> " << r.status().message();
  }
}

TEST(OpenAiRequestTest, TokenizeAndDetokenizeBodies) {
  absl::StatusOr<quill::v1::TokenizeRequest> t = ParseTokenizeRequest(R"({"prompt": "Hi"})");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->text(), "Hi");
  EXPECT_TRUE(t->add_special_tokens());  // as a completion's text prompt is encoded
  t = ParseTokenizeRequest(R"({"model": "m", "prompt": "", "add_special_tokens": false})");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(t->add_special_tokens());
  absl::StatusOr<std::vector<int32_t>> ids = ParseDetokenizeRequest(R"({"tokens": [1, 2, 3]})");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_THAT(*ids, ::testing::ElementsAre(1, 2, 3));
  for (const auto& [body, field] : std::vector<std::pair<std::string, std::string>>{
           {R"({})", "prompt"},
           {R"({"prompt": ["a"]})", "prompt"},
           {R"({"prompt": "a", "add_special_tokens": 1})", "add_special_tokens"},
           {"[1]", "The request body"}}) {
    t = ParseTokenizeRequest(body);
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << body;
    EXPECT_TRUE(absl::StartsWith(t.status().message(), field)) << body << " -> " << t.status();
  }
  for (const auto& [body, field] :
       std::vector<std::pair<std::string, std::string>>{{R"({})", "tokens"},
                                                        {R"({"tokens": "1"})", "tokens"},
                                                        {R"({"tokens": [1, 2.5]})", "tokens[1]"},
                                                        {R"({"tokens": [1e12]})", "tokens[0]"},
                                                        {"{bad", "The request body"}}) {
    ids = ParseDetokenizeRequest(body);
    EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument) << body;
    EXPECT_TRUE(absl::StartsWith(ids.status().message(), field)) << body << " -> " << ids.status();
  }
}

TEST(OpenAiRequestTest, MalformedBodies) {
  for (const std::string& body :
       {std::string("{bad"), std::string("[]"), std::string("\"text\""), std::string(""),
        std::string(100000, '['), std::string("{\"prompt\": \"\xff\"}")}) {
    absl::StatusOr<OpenAiRequest> r = Completions(body);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << body.substr(0, 20);
  }
}

TEST(OpenAiErrorTest, StatusCodesAndShape) {
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kFailedPrecondition), 400);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kNotFound), 404);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kResourceExhausted), 429);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kUnavailable), 503);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kDeadlineExceeded), 504);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kInternal), 500);

  std::string body;
  HttpResponseHead head =
      OpenAiErrorResponse(absl::ResourceExhaustedError("the queue is full"), &body);
  EXPECT_EQ(head.status, 429);
  ASSERT_EQ(head.headers.size(), 1u);
  EXPECT_EQ(head.headers[0].first, "Retry-After");
  EXPECT_EQ(body, R"({"error":{"code":"rate_limit_exceeded","message":"the queue is full",)"
                  R"("param":null,"type":"rate_limit_error"}})");
  head = OpenAiErrorResponse(absl::InvalidArgumentError("sampling.top_p must be in (0, 1], got 2"),
                             &body);
  EXPECT_EQ(head.status, 400);
  EXPECT_TRUE(head.headers.empty());
  EXPECT_THAT(body, HasSubstr(R"("param":"top_p")"));
  EXPECT_THAT(body, HasSubstr(R"("type":"invalid_request_error")"));
  // A message that does not start with a request field names none.
  OpenAiErrorResponse(absl::FailedPreconditionError("this model has no chat template"), &body);
  EXPECT_THAT(body, HasSubstr(R"("param":null)"));
  // Invalid UTF-8 in a message is replaced, never thrown.
  OpenAiErrorResponse(absl::InvalidArgumentError("prompt \xff"), &body);
  EXPECT_THAT(body, HasSubstr("\xEF\xBF\xBD"));
}

}  // namespace
}  // namespace quill::server::http
