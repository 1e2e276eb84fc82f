// quill.v1.Generator/Chat against an in-process quill-server on 127.0.0.1:0 (kjv-1m, exact
// precision, --chat-template from ../shared/chat_templates), through the real client over
// real gRPC. The expected output never comes from the chat code: the prompt is rendered by
// `quill-run --render-chat` (a separate binary, checked against Jinja2's renders) and
// generated through Generate, which is itself checked against quill-run and the goldens.

#include <unistd.h>

#include <cmath>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/quill_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/server.h"
#include "tests/integration/server_test_util.h"
#include "tests/integration/test_server.h"
#include "tests/testing/test_env.h"

namespace quill::testing {
namespace {

namespace v1 = ::quill::v1;
using ::testing::HasSubstr;
using ::testing::StartsWith;

using Messages = std::vector<std::pair<std::string, std::string>>;

std::string ModelPath() { return SharedModelPath("kjv-1m.gguf"); }
// kjv-1m has no tokenizer.chat_template; Qwen2.5's ChatML uses no bos_token and no text the
// kjv vocabulary has as a special token, so its rendered text tokenizes the same way as a
// raw prompt.
std::string QwenTemplate() { return SharedPath("chat_templates/Qwen-Qwen2.5-7B-Instruct.jinja"); }

server::ServerOptions Options(const std::string& chat_template) {
  server::ServerOptions options = KjvTestServerOptions(8 << 20);
  options.chat_template_path = chat_template;
  options.metrics_port = -1;
  return options;
}

std::string WriteTemp(const std::string& name, const std::string& text) {
  return WriteScratchFile(absl::StrCat("chat_it_", name), text);
}

// The prompt quill-run renders for `messages` with `template_path` (and kjv's BOS/EOS text).
absl::StatusOr<std::string> Render(const Messages& messages, const std::string& template_path) {
  return RenderChat(messages, ModelPath(), template_path);
}

class ChatTest : public SharedServerTest<ChatTest> {
 protected:
  static void SetUpTestSuite() {
    if (!ModelPath().empty() && !QwenTemplate().empty()) StartSharedServer(Options(QwenTemplate()));
  }
  void SetUp() override {
    if (ModelPath().empty() || QwenTemplate().empty()) {
      GTEST_SKIP() << "shared assets not found (QUILL_SHARED_DIR)";
    }
    if (BuildBinaryPath("engine/tools/quill-run").empty()) GTEST_SKIP() << "quill-run not built";
    ASSERT_NE(server_, nullptr);
  }

  // Chat(messages) and Generate(the rendered prompt) with the same options must agree.
  static void ExpectChatEqualsGenerate(const Messages& messages,
                                       const v1::GenerateRequest& options) {
    absl::StatusOr<std::string> rendered = Render(messages, QwenTemplate());
    ASSERT_TRUE(rendered.ok()) << rendered.status();
    v1::GenerateRequest generate = options;
    generate.set_prompt(*rendered);
    const Stream want = Collect(*client_, generate);
    ASSERT_TRUE(want.status.ok()) << want.status;

    v1::ChatRequest chat = ChatRequestOf(messages, options.max_tokens());
    if (options.has_sampling()) *chat.mutable_sampling() = options.sampling();
    chat.set_logprobs(options.logprobs());
    const Stream got = CollectChat(*client_, chat);
    ASSERT_TRUE(got.status.ok()) << got.status;

    EXPECT_EQ(got.ids, want.ids);
    EXPECT_EQ(got.text, want.text);
    EXPECT_EQ(got.last.finish_reason(), want.last.finish_reason());
    EXPECT_EQ(got.last.usage().prompt_tokens(), want.last.usage().prompt_tokens());
    EXPECT_EQ(got.last.usage().completion_tokens(), want.last.usage().completion_tokens());
    ASSERT_EQ(got.logprobs.size(), want.logprobs.size());
    for (size_t i = 0; i < got.logprobs.size(); ++i) {
      EXPECT_EQ(got.logprobs[i].token_id(), want.logprobs[i].token_id());
      EXPECT_EQ(got.logprobs[i].logprob(), want.logprobs[i].logprob());
    }
  }
};

const Messages kConversation = {{"system", "You are a preacher."},
                                {"user", "Who made the heaven and the earth?"}};
const Messages kMultiTurn = {{"user", "In the beginning"},
                             {"assistant", "God created the heaven and the earth."},
                             {"user", "And then?"}};

TEST_F(ChatTest, GreedyChatEqualsGenerateOnTheRenderedPrompt) {
  for (const Messages& messages : {kConversation, kMultiTurn}) {
    v1::GenerateRequest options = TextRequest("", 40);
    options.set_logprobs(2);
    ExpectChatEqualsGenerate(messages, options);
  }
}

TEST_F(ChatTest, SeededChatEqualsSeededGenerate) {
  for (uint64_t seed : {42u, 7u}) {
    v1::GenerateRequest options = TextRequest("", 48);
    SetSampling(&options, 0.8f, 0.9f, seed);
    ExpectChatEqualsGenerate(kMultiTurn, options);
  }
}

TEST_F(ChatTest, ThePromptIsTheRenderedTextTokenized) {
  absl::StatusOr<std::string> rendered = Render(kConversation, QwenTemplate());
  ASSERT_TRUE(rendered.ok()) << rendered.status();
  EXPECT_THAT(*rendered, StartsWith("<|im_start|>system\nYou are a preacher.<|im_end|>\n"));
  absl::StatusOr<v1::TokenizeResponse> ids = client_->Tokenize(*rendered, true);
  ASSERT_TRUE(ids.ok()) << ids.status();
  const Stream s = CollectChat(*client_, ChatRequestOf(kConversation, 1));
  ASSERT_TRUE(s.status.ok()) << s.status;
  EXPECT_EQ(s.last.usage().prompt_tokens(), ids->token_ids_size());
}

TEST_F(ChatTest, MaxTokensZeroFillsTheContext) {
  absl::StatusOr<v1::ModelInfo> info = client_->GetModelInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->tool_call_syntax(), "hermes");  // Qwen2.5's template
  EXPECT_FALSE(info->chat_thinks());              // which is no reasoning model's
  v1::ChatRequest request = ChatRequestOf(kConversation, 0);
  request.set_ignore_eos(true);
  const Stream s = CollectChat(*client_, request, absl::Seconds(120));
  ASSERT_TRUE(s.status.ok()) << s.status;
  EXPECT_EQ(s.last.finish_reason(), v1::LENGTH);
  const int64_t room = info->context_length() - s.last.usage().prompt_tokens();
  EXPECT_EQ(s.last.usage().completion_tokens(),
            std::min<int64_t>(room, info->limits().max_tokens()));
}

TEST_F(ChatTest, StopStringsApplyToTheAnswer) {
  const Stream free = CollectChat(*client_, ChatRequestOf(kConversation, 40));
  ASSERT_TRUE(free.status.ok()) << free.status;
  ASSERT_GE(free.text.size(), 6u);
  const std::string stop = free.text.substr(3, 3);
  v1::ChatRequest request = ChatRequestOf(kConversation, 40);
  request.add_stop(stop);
  const Stream s = CollectChat(*client_, request);
  ASSERT_TRUE(s.status.ok()) << s.status;
  EXPECT_EQ(s.last.finish_reason(), v1::STOP);
  EXPECT_EQ(s.text, free.text.substr(0, free.text.find(stop)));
}

struct BadChat {
  const char* name;
  std::function<void(v1::ChatRequest*)> mutate;
  const char* field;
};

TEST_F(ChatTest, InvalidChatRequestsAreInvalidArgumentNamingTheField) {
  const std::vector<BadChat> cases = {
      {"no messages", [](auto* r) { r->clear_messages(); }, "messages"},
      {"empty role", [](auto* r) { r->mutable_messages(1)->set_role(""); }, "messages[1].role"},
      {"role not UTF-8", [](auto* r) { r->mutable_messages(0)->set_role("us\xFF"); },
       "messages[0].role"},
      {"content not UTF-8", [](auto* r) { r->mutable_messages(1)->set_content("a\xC3\x28"); },
       "messages[1].content"},
      {"max_tokens above the limit", [](auto* r) { r->set_max_tokens(100000); }, "max_tokens"},
      {"max_tokens negative", [](auto* r) { r->set_max_tokens(-1); }, "max_tokens"},
      {"prompt + max_tokens beyond the context", [](auto* r) { r->set_max_tokens(250); },
       "max_tokens"},
      {"temperature NaN", [](auto* r) { r->mutable_sampling()->set_temperature(std::nanf("")); },
       "sampling.temperature"},
      {"logprobs 21", [](auto* r) { r->set_logprobs(21); }, "logprobs"},
      {"empty stop string", [](auto* r) { r->add_stop(""); }, "stop[0]"},
      {"stop_token_id out of vocab", [](auto* r) { r->add_stop_token_ids(99999); },
       "stop_token_ids[0]"},
      {"request_id with a newline", [](auto* r) { r->set_request_id("a\nb"); }, "request_id"},
      {"conversation beyond the context",
       [](auto* r) {
         std::string long_text;
         for (int i = 0; i < 300; ++i) long_text += "and ";
         r->mutable_messages(1)->set_content(long_text);
         r->set_max_tokens(0);
       },
       "messages"},
  };
  for (const BadChat& c : cases) {
    v1::ChatRequest request = ChatRequestOf(kConversation, 8);
    c.mutate(&request);
    const Stream s = CollectChat(*client_, request);
    EXPECT_EQ(s.status.code(), absl::StatusCode::kInvalidArgument) << c.name << ": " << s.status;
    EXPECT_THAT(std::string(s.status.message()), StartsWith(c.field)) << c.name;
    EXPECT_EQ(s.messages, 0) << c.name;
  }
}

// ---------------------------------------------------------------------------------------
// Servers configured otherwise

TEST(ChatServerTest, TemplateThatRefusesTheConversationIsInvalidArgument) {
  const std::string gemma = SharedPath("chat_templates/google-gemma-2-2b-it.jinja");
  if (ModelPath().empty() || gemma.empty()) GTEST_SKIP() << "shared assets not found";
  absl::StatusOr<std::unique_ptr<server::Server>> server = server::Server::Create(Options(gemma));
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<client::QuillClient> client = client::QuillClient::Connect((*server)->address());
  absl::StatusOr<v1::ModelInfo> info = client->GetModelInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->tool_call_syntax(), "none");  // Gemma 2's template has no tool calls
  // Gemma 2's template raise_exception()s on a system message.
  const Stream s = CollectChat(*client, ChatRequestOf(kConversation, 8));
  EXPECT_EQ(s.status.code(), absl::StatusCode::kInvalidArgument) << s.status;
  EXPECT_THAT(std::string(s.status.message()), StartsWith("messages"));
  EXPECT_THAT(std::string(s.status.message()), HasSubstr("System role not supported"));
  // A conversation it accepts is answered.
  const Stream ok = CollectChat(*client, ChatRequestOf({{"user", "In the beginning"}}, 8));
  EXPECT_TRUE(ok.status.ok()) << ok.status;
  EXPECT_GT(ok.last.usage().prompt_tokens(), 0);
}

TEST(ChatServerTest, UnreadableOrBrokenTemplateFailsStartup) {
  if (ModelPath().empty()) GTEST_SKIP() << "shared assets not found";
  absl::StatusOr<std::unique_ptr<server::Server>> missing =
      server::Server::Create(Options("/nonexistent/chat.jinja"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound) << missing.status();
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("/nonexistent/chat.jinja"));

  const std::string broken = WriteTemp("broken.jinja", "hello\n{% for m in messages %}{{ m }}");
  absl::StatusOr<std::unique_ptr<server::Server>> bad = server::Server::Create(Options(broken));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr(broken));
}

// Tools over gRPC, on a server with kHermesToolsTemplate (server_test_util.h). The
// expected output is Generate on the prompt the template renders, written out here.
TEST(ChatServerTest, ToolCallsForcedAndAutoAndEarlierCalls) {
  if (ModelPath().empty()) GTEST_SKIP() << "shared assets not found";
  absl::StatusOr<std::unique_ptr<server::Server>> server =
      server::Server::Create(Options(WriteTemp("hermes_tools.jinja", kHermesToolsTemplate)));
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<client::QuillClient> client = client::QuillClient::Connect((*server)->address());
  absl::StatusOr<v1::ModelInfo> info = client->GetModelInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->tool_call_syntax(), "hermes");
  const std::string parameters =
      R"({"type": "object", "properties": {"book": {"enum": ["Genesis", "Exodus"]}},)"
      R"( "required": ["book"], "additionalProperties": false})";
  const std::string prompt = "<tools>get_verse,get_time</tools><user>Find the verse<assistant>";
  auto chat = [&](const std::string& tool_choice, uint64_t seed, int max_tokens) {
    v1::ChatRequest request = ChatRequestOf({{"user", "Find the verse"}}, max_tokens);
    request.mutable_sampling()->set_temperature(0.8f);
    request.mutable_sampling()->set_seed(seed);
    v1::Tool* verse = request.add_tools();
    verse->set_name("get_verse");
    verse->set_parameters_json(parameters);
    request.add_tools()->set_name("get_time");
    request.set_tool_choice(tool_choice);
    return request;
  };

  // A forced call: Generate with the call's schema, its object read back as the call.
  v1::GenerateRequest forced = TextRequest(prompt, 200);
  SetSampling(&forced, 0.8f, 1.0f, 8);
  forced.set_json_schema(absl::StrCat(
      R"({"type": "object", "properties": {"name": {"const": "get_verse"}, )", R"("arguments": )",
      parameters, R"(}, "required": ["name", "arguments"], "additionalProperties": false})"));
  const Stream want = Collect(*client, forced);
  ASSERT_TRUE(want.status.ok()) << want.status;
  ASSERT_EQ(want.last.finish_reason(), v1::EOS) << want.text;
  const Stream got = CollectChat(*client, chat("get_verse", 8, 200));
  ASSERT_TRUE(got.status.ok()) << got.status;
  EXPECT_EQ(got.text, want.text);  // the streamed text is the answer as written
  EXPECT_EQ(got.ids, want.ids);
  EXPECT_EQ(got.last.finish_reason(), v1::TOOL_CALLS);
  ASSERT_EQ(got.last.tool_calls_size(), 1);
  const v1::ToolCall& call = got.last.tool_calls(0);
  EXPECT_EQ(call.id(), absl::StrCat("call_", got.last.request_id()));
  EXPECT_EQ(call.name(), "get_verse");
  EXPECT_EQ(nlohmann::json::parse(call.arguments_json()),
            nlohmann::json::parse(want.text)["arguments"]);
  EXPECT_EQ(got.last.usage().prompt_tokens(), want.last.usage().prompt_tokens());

  // "auto" (said, or by default): kjv-1m answers in text, exactly Generate's.
  for (const char* choice : {"", "auto"}) {
    v1::GenerateRequest free_text = TextRequest(prompt, 40);
    SetSampling(&free_text, 0.8f, 1.0f, 3);
    const Stream text_want = Collect(*client, free_text);
    ASSERT_TRUE(text_want.status.ok()) << text_want.status;
    const Stream text_got = CollectChat(*client, chat(choice, 3, 40));
    ASSERT_TRUE(text_got.status.ok()) << text_got.status;
    EXPECT_EQ(text_got.text, text_want.text);
    EXPECT_EQ(text_got.last.finish_reason(), text_want.last.finish_reason());
    EXPECT_EQ(text_got.last.tool_calls_size(), 0);
  }

  // The call and its result in the next turn render in the model's syntax.
  v1::ChatRequest next = chat("none", 1, 4);
  v1::ChatMessage* assistant = next.add_messages();
  assistant->set_role("assistant");
  *assistant->add_tool_calls() = call;
  v1::ChatMessage* result = next.add_messages();
  result->set_role("tool");
  result->set_tool_call_id(call.id());
  result->set_content("Amen");
  const Stream next_got = CollectChat(*client, next);
  ASSERT_TRUE(next_got.status.ok()) << next_got.status;
  const std::string book = nlohmann::json::parse(call.arguments_json())["book"].get<std::string>();
  v1::GenerateRequest next_want_request =
      TextRequest(absl::StrCat(prompt, R"(<tool_call>{"name": "get_verse", "arguments": )",
                               R"({"book": ")", book, R"("}}</tool_call><tool>Amen<assistant>)"),
                  4);
  SetSampling(&next_want_request, 0.8f, 1.0f, 1);
  const Stream next_want = Collect(*client, next_want_request);
  ASSERT_TRUE(next_want.status.ok()) << next_want.status;
  EXPECT_EQ(next_got.last.usage().prompt_tokens(), next_want.last.usage().prompt_tokens());
  EXPECT_EQ(next_got.text, next_want.text);

  // A tool_choice naming no tool is INVALID_ARGUMENT naming the field.
  const Stream bad = CollectChat(*client, chat("get_psalm", 1, 4));
  EXPECT_EQ(bad.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status.message()), StartsWith("tool_choice"));
}

}  // namespace
}  // namespace quill::testing
