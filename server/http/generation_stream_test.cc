#include "server/http/generation_stream.h"

#include <atomic>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/byte_tokenizer_for_test.h"

namespace quill::server::http {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

// Counts wakes; the test pulls by hand, as the connection would.
class FakeChannel final : public ResponseChannel {
 public:
  void Start(std::shared_ptr<ResponseSource> source) override { source_ = std::move(source); }
  void Wake() override { ++wakes; }
  std::shared_ptr<ResponseSource> source_;
  int wakes = 0;
};

engine::TokenChunk Chunk(std::string text, int tokens) {
  engine::TokenChunk chunk;
  chunk.text = std::move(text);
  for (int i = 0; i < tokens; ++i) chunk.tokens.push_back({/*id=*/7 + i, -0.5f, {}});
  return chunk;
}

engine::FinishInfo Finished(engine::FinishReason reason, int prompt, int completion) {
  engine::FinishInfo info;
  info.reason = reason;
  info.prompt_tokens = prompt;
  info.completion_tokens = completion;
  return info;
}

ResponseFormat Format(Endpoint endpoint) {
  ResponseFormat f;
  f.endpoint = endpoint;
  f.id = "cmpl-1";
  f.model = "m";
  f.created = 100;
  f.prompt_tokens = 4;
  return f;
}

// The data payloads of the SSE events in `body`.
std::vector<json> Events(const std::string& body, bool* done) {
  std::vector<json> out;
  size_t at = 0;
  *done = false;
  while (at < body.size()) {
    const size_t end = body.find("\n\n", at);
    EXPECT_NE(end, std::string::npos);
    const std::string event = body.substr(at, end - at);
    EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
    const std::string data = event.substr(6);
    if (data == "[DONE]") {
      *done = true;
    } else {
      out.push_back(json::parse(data));
    }
    at = end + 2;
  }
  return out;
}

TEST(GenerationStreamTest, OutputCoalescesUntilPulledAndTheStreamEndsWithDone) {
  auto channel = std::make_shared<FakeChannel>();
  ResponseFormat format = Format(Endpoint::kCompletions);
  format.include_usage = true;
  int cancels = 0;
  GenerationStream stream(format, /*stream=*/true, channel, [&] { ++cancels; });
  EXPECT_TRUE(stream.Next().empty());  // nothing yet: no head either
  EXPECT_TRUE(stream.OnChunk(0, Chunk(" And", 1)));
  EXPECT_TRUE(stream.OnChunk(0, Chunk(" God", 1)));
  EXPECT_EQ(channel->wakes, 2);
  HttpOutput first = stream.Next();
  ASSERT_NE(first.head, nullptr);
  EXPECT_EQ(first.head->status, 200);
  EXPECT_EQ(first.head->content_type, "text/event-stream");
  EXPECT_FALSE(first.last);
  bool done = false;
  std::vector<json> events = Events(first.body, &done);
  ASSERT_EQ(events.size(), 1u);  // two chunks, one event
  EXPECT_EQ(events[0]["choices"][0]["text"], " And God");
  EXPECT_TRUE(events[0]["usage"].is_null());
  EXPECT_TRUE(stream.Next().empty());

  EXPECT_TRUE(stream.OnChunk(0, Chunk(" said", 1)));
  stream.OnFinish(0, Finished(engine::FinishReason::kLength, 4, 3));
  HttpOutput last = stream.Next();
  EXPECT_EQ(last.head, nullptr);
  EXPECT_TRUE(last.last);
  events = Events(last.body, &done);
  EXPECT_TRUE(done);
  ASSERT_EQ(events.size(), 3u);  // " said", the finish chunk, the usage chunk
  EXPECT_EQ(events[0]["choices"][0]["text"], " said");
  EXPECT_EQ(events[1]["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(events[2]["choices"].empty());
  EXPECT_EQ(events[2]["usage"]["total_tokens"], 7);
  EXPECT_TRUE(stream.Next().empty());
  EXPECT_EQ(cancels, 0);
}

TEST(GenerationStreamTest, AStreamReadyAllAtOnceIsStillAStream) {
  auto channel = std::make_shared<FakeChannel>();
  GenerationStream stream(Format(Endpoint::kCompletions), true, channel, [] {});
  stream.OnChunk(0, Chunk("x", 1));
  stream.OnFinish(0, Finished(engine::FinishReason::kLength, 4, 1));
  HttpOutput out = stream.Next();
  ASSERT_NE(out.head, nullptr);
  EXPECT_TRUE(out.head->stream);  // chunked, not one Content-Length body
  EXPECT_TRUE(out.last);
  bool done = false;
  EXPECT_EQ(Events(out.body, &done).size(), 2u);
  EXPECT_TRUE(done);
}

TEST(GenerationStreamTest, ChatStreamStartsWithTheRoleAndEndsWithAnEmptyDelta) {
  auto channel = std::make_shared<FakeChannel>();
  ResponseFormat format = Format(Endpoint::kChatCompletions);
  format.continuous_usage = true;
  GenerationStream stream(format, true, channel, [] {});
  stream.OnChunk(0, Chunk("Hi", 1));
  stream.OnFinish(0, Finished(engine::FinishReason::kEos, 4, 1));
  HttpOutput out = stream.Next();
  bool done = false;
  std::vector<json> events = Events(out.body, &done);
  EXPECT_TRUE(done);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(events[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(events[0]["choices"][0]["delta"]["content"], "Hi");
  EXPECT_EQ(events[0]["usage"]["completion_tokens"], 1);  // continuous usage
  EXPECT_EQ(events[1]["choices"][0]["delta"], json::object());
  EXPECT_EQ(events[1]["choices"][0]["finish_reason"], "stop");  // EOS reads as stop
}

TEST(GenerationStreamTest, BodyWaitsForTheEnd) {
  auto channel = std::make_shared<FakeChannel>();
  GenerationStream stream(Format(Endpoint::kChatCompletions), false, channel, [] {});
  stream.OnChunk(0, Chunk("Hello", 1));
  EXPECT_TRUE(stream.Next().empty());
  stream.OnChunk(0, Chunk(" world", 1));
  stream.OnFinish(0, Finished(engine::FinishReason::kStop, 4, 2));
  HttpOutput out = stream.Next();
  ASSERT_NE(out.head, nullptr);
  EXPECT_EQ(out.head->content_type, "application/json");
  EXPECT_TRUE(out.last);
  const json body = json::parse(out.body);
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["choices"][0]["message"]["content"], "Hello world");
  EXPECT_EQ(body["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(body["usage"]["completion_tokens"], 2);
}

// A forced tool call's answer goes out whole as tool_calls, in a body and in a stream
// (nothing before it is complete); one cut by max_tokens stays text.
TEST(GenerationStreamTest, AForcedToolCallIsSentAsToolCalls) {
  auto channel = std::make_shared<FakeChannel>();
  ResponseFormat format = Format(Endpoint::kChatCompletions);
  format.id = "chatcmpl-abc";
  format.tool_calls.syntax = engine::chat::ToolCallSyntax::kJsonObject;
  format.tool_calls.names = {"get_weather"};
  const json expected_call = {
      {"id", "call_abc_0"},
      {"type", "function"},
      {"function", {{"name", "get_weather"}, {"arguments", R"({"city":"Paris"})"}}}};

  GenerationStream body(format, false, channel, [] {});
  body.OnChunk(0, Chunk(R"({"name": "get_weather", )", 3));
  body.OnChunk(0, Chunk(R"("arguments": {"city": "Paris"}})", 4));
  body.OnFinish(0, Finished(engine::FinishReason::kEos, 4, 7));
  const json message = json::parse(body.Next().body)["choices"][0];
  EXPECT_EQ(message["finish_reason"], "tool_calls");
  EXPECT_EQ(message["message"]["content"], nullptr);
  EXPECT_EQ(message["message"]["tool_calls"], json::array({expected_call}));

  GenerationStream stream(format, true, channel, [] {});
  stream.OnChunk(0, Chunk(R"({"name": "get_weather", )", 3));
  EXPECT_TRUE(stream.Next().empty());  // a part of a call is not sent
  stream.OnChunk(0, Chunk(R"("arguments": {"city": "Paris"}})", 4));
  stream.OnFinish(0, Finished(engine::FinishReason::kEos, 4, 7));
  bool done = false;
  std::vector<json> events = Events(stream.Next().body, &done);
  EXPECT_TRUE(done);
  ASSERT_EQ(events.size(), 2u);
  json streamed_call = expected_call;
  streamed_call["index"] = 0;
  EXPECT_EQ(events[0]["choices"][0]["delta"], json({{"role", "assistant"},
                                                    {"content", nullptr},
                                                    {"tool_calls", json::array({streamed_call})}}));
  EXPECT_EQ(events[1]["choices"][0]["finish_reason"], "tool_calls");

  GenerationStream cut(format, false, channel, [] {});
  cut.OnChunk(0, Chunk(R"({"name": "get_weather", "argu)", 5));
  cut.OnFinish(0, Finished(engine::FinishReason::kLength, 4, 5));
  const json cut_choice = json::parse(cut.Next().body)["choices"][0];
  EXPECT_EQ(cut_choice["finish_reason"], "length");
  EXPECT_EQ(cut_choice["message"]["content"], R"({"name": "get_weather", "argu)");
}

// tool_choice "auto" in the Hermes syntax: text streams as it comes; from what may be a
// <tool_call> on, the answer is held (the engine never paused for it) and goes at the end
// as tool_calls, with the text beside the calls as content.
TEST(GenerationStreamTest, AnAutoToolCallIsHeldAndSentWhole) {
  auto channel = std::make_shared<FakeChannel>();
  ResponseFormat format = Format(Endpoint::kChatCompletions);
  format.id = "chatcmpl-abc";
  format.tool_calls.syntax = engine::chat::ToolCallSyntax::kHermes;
  format.tool_calls.names = {"get_weather", "search"};
  const std::vector<std::string> pieces = {
      "Let me check", " the weather. <tool",
      "_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
      "\n<tool_call>\n{\"name\": \"search\", \"arguments\": {}}\n</tool_call>"};
  const json calls =
      json::array({{{"index", 0},
                    {"id", "call_abc_0"},
                    {"type", "function"},
                    {"function", {{"name", "get_weather"}, {"arguments", R"({"city":"Paris"})"}}}},
                   {{"index", 1},
                    {"id", "call_abc_0_1"},
                    {"type", "function"},
                    {"function", {{"name", "search"}, {"arguments", "{}"}}}}});

  GenerationStream stream(format, true, channel, [] {});
  stream.OnChunk(0, Chunk(pieces[0], 2));
  bool done = false;
  std::vector<json> events = Events(stream.Next().body, &done);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["choices"][0]["delta"],
            json({{"role", "assistant"}, {"content", "Let me check"}}));
  for (size_t i = 1; i < pieces.size(); ++i) {
    stream.OnChunk(0, Chunk(pieces[i], 1));
    EXPECT_TRUE(stream.Next().empty()) << i;
  }
  for (int i = 0; i < kMaxUnsentChunks; ++i) stream.OnChunk(0, Chunk("", 1));
  EXPECT_FALSE(stream.WouldBlock(0));
  stream.OnFinish(0, Finished(engine::FinishReason::kEos, 4, 9));
  events = Events(stream.Next().body, &done);
  EXPECT_TRUE(done);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0]["choices"][0]["delta"],
            json({{"content", " the weather. \n"}, {"tool_calls", calls}}));
  EXPECT_EQ(events[1]["choices"][0]["finish_reason"], "tool_calls");

  GenerationStream body(format, false, channel, [] {});
  for (const std::string& piece : pieces) body.OnChunk(0, Chunk(piece, 1));
  body.OnFinish(0, Finished(engine::FinishReason::kEos, 4, 4));
  const json choice = json::parse(body.Next().body)["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_EQ(choice["message"]["content"], "Let me check the weather. \n");
  json unindexed = calls;
  for (json& call : unindexed) call.erase("index");
  EXPECT_EQ(choice["message"]["tool_calls"], unindexed);
}

// What only looked like the start of a call is released as soon as it is not one; a call
// that does not read (here an unknown tool) is sent as the text it is.
TEST(GenerationStreamTest, TextThatIsNoAutoToolCallIsSentAsText) {
  auto channel = std::make_shared<FakeChannel>();
  ResponseFormat format = Format(Endpoint::kChatCompletions);
  format.tool_calls.syntax = engine::chat::ToolCallSyntax::kHermes;
  format.tool_calls.names = {"search"};
  GenerationStream stream(format, true, channel, [] {});
  stream.OnChunk(0, Chunk("Use <to", 2));
  EXPECT_TRUE(stream.Next().empty());
  stream.OnChunk(0, Chunk("ols wisely. ", 2));
  bool done = false;
  std::vector<json> events = Events(stream.Next().body, &done);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["choices"][0]["delta"]["content"], "Use <tools wisely. ");
  const std::string bad = "<tool_call>{\"name\": \"unknown\", \"arguments\": {}}</tool_call>";
  stream.OnChunk(0, Chunk(bad, 3));
  EXPECT_TRUE(stream.Next().empty());
  stream.OnFinish(0, Finished(engine::FinishReason::kStop, 4, 7));
  events = Events(stream.Next().body, &done);
  EXPECT_TRUE(done);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0]["choices"][0]["delta"], json({{"content", bad}}));
  EXPECT_EQ(events[1]["choices"][0]["finish_reason"], "stop");
}

// A reasoning model's thought streams as reasoning_content as it comes, apart from the
// content; a tag split over chunks is held only until it is whole. A body carries both.
TEST(GenerationStreamTest, AThoughtGoesOutAsReasoningContent) {
  auto channel = std::make_shared<FakeChannel>();
  ResponseFormat format = Format(Endpoint::kChatCompletions);
  format.reasoning.split = true;
  GenerationStream stream(format, true, channel, [] {});
  const std::vector<std::string> pieces = {"<think>\nLet me", " see.</th", "ink>\n\n", "It is 4."};
  stream.OnChunk(0, Chunk(pieces[0], 2));
  bool done = false;
  std::vector<json> events = Events(stream.Next().body, &done);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["choices"][0]["delta"],
            json({{"role", "assistant"}, {"reasoning_content", "\nLet me"}}));
  stream.OnChunk(0, Chunk(pieces[1], 2));
  events = Events(stream.Next().body, &done);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["choices"][0]["delta"], json({{"reasoning_content", " see."}}));
  stream.OnChunk(0, Chunk(pieces[2], 2));  // the tag's end and the gap: nothing to show
  events = Events(stream.Next().body, &done);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["choices"][0]["delta"], json({{"content", ""}}));
  stream.OnChunk(0, Chunk(pieces[3], 2));
  stream.OnFinish(0, Finished(engine::FinishReason::kEos, 4, 8));
  events = Events(stream.Next().body, &done);
  EXPECT_TRUE(done);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0]["choices"][0]["delta"], json({{"content", "It is 4."}}));
  EXPECT_EQ(events[1]["choices"][0]["finish_reason"], "stop");

  // The prompt opened the thought (DeepSeek R1), and the answer ends inside it.
  format.reasoning.thought_open = true;
  GenerationStream body(format, false, channel, [] {});
  body.OnChunk(0, Chunk("Hmm, </t", 3));
  body.OnFinish(0, Finished(engine::FinishReason::kLength, 4, 3));
  const json message = json::parse(body.Next().body)["choices"][0]["message"];
  EXPECT_EQ(message["reasoning_content"], "Hmm, </t");
  EXPECT_EQ(message["content"], "");
}

TEST(GenerationStreamTest, FailureBeforeOutputIsAPlainHttpErrorAfterItAnEvent) {
  auto channel = std::make_shared<FakeChannel>();
  GenerationStream early(Format(Endpoint::kCompletions), true, channel, [] {});
  engine::FinishInfo info = Finished(engine::FinishReason::kShutdown, 4, 0);
  info.status = absl::UnavailableError("server shutting down");
  early.OnFinish(0, info);
  HttpOutput out = early.Next();
  ASSERT_NE(out.head, nullptr);
  EXPECT_EQ(out.head->status, 503);
  EXPECT_TRUE(out.last);
  EXPECT_THAT(out.body, HasSubstr("server shutting down"));

  GenerationStream late(Format(Endpoint::kCompletions), true, channel, [] {});
  late.OnChunk(0, Chunk("x", 1));
  EXPECT_EQ(late.Next().head->status, 200);
  late.OnFinish(0, info);
  out = late.Next();
  EXPECT_TRUE(out.last);
  bool done = false;
  std::vector<json> events = Events(out.body, &done);
  EXPECT_TRUE(done);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["error"]["code"], "server_unavailable");
}

TEST(GenerationStreamTest, ClientGoneCancelsOnceAndRefusesMoreOutput) {
  auto channel = std::make_shared<FakeChannel>();
  int cancels = 0;
  GenerationStream stream(Format(Endpoint::kCompletions), true, channel, [&] { ++cancels; });
  EXPECT_TRUE(stream.OnChunk(0, Chunk("a", 1)));
  stream.OnClientGone();
  stream.OnClientGone();
  EXPECT_EQ(cancels, 1);
  EXPECT_FALSE(stream.OnChunk(0, Chunk("b", 1)));
  // After the end, a vanished client needs no cancel.
  GenerationStream finished(Format(Endpoint::kCompletions), true, channel, [&] { ++cancels; });
  finished.OnFinish(0, Finished(engine::FinishReason::kLength, 1, 0));
  finished.OnClientGone();
  EXPECT_EQ(cancels, 1);
}

TEST(GenerationStreamTest, AStreamWouldBlockAtTheBoundAndResumesWhenTheConnectionPulls) {
  auto channel = std::make_shared<FakeChannel>();
  int resumes = 0;
  GenerationStream stream(
      Format(Endpoint::kCompletions), true, channel, [] {}, 1 << 20,
      [&resumes](int) { ++resumes; });
  for (int i = 0; i < kMaxUnsentChunks; ++i) {
    EXPECT_FALSE(stream.WouldBlock(0)) << i;  // the connection is busy writing: no Next()
    ASSERT_TRUE(stream.OnChunk(0, Chunk("a", 1)));
  }
  EXPECT_TRUE(stream.WouldBlock(0));
  EXPECT_EQ(resumes, 0);
  HttpOutput out = stream.Next();  // the previous write completed
  EXPECT_NE(out.body.find("aaaaaaaa"), std::string::npos) << out.body;
  EXPECT_EQ(resumes, 1);
  EXPECT_FALSE(stream.WouldBlock(0));
  ASSERT_TRUE(stream.OnChunk(0, Chunk("b", 1)));
  stream.Next();
  EXPECT_EQ(resumes, 1);  // nobody was paused
  // A body is the whole answer by design: it never blocks.
  GenerationStream body(Format(Endpoint::kCompletions), false, channel, [] {});
  for (int i = 0; i < 2 * kMaxUnsentChunks; ++i) ASSERT_TRUE(body.OnChunk(0, Chunk("a", 1)));
  EXPECT_FALSE(body.WouldBlock(0));
}

TEST(GenerationStreamTest, AClientThatFallsTooFarBehindIsDropped) {
  auto channel = std::make_shared<FakeChannel>();
  GenerationStream stream(
      Format(Endpoint::kCompletions), true, channel, [] {},
      /*max_pending_bytes=*/10);
  EXPECT_TRUE(stream.OnChunk(0, Chunk("0123456789", 1)));
  EXPECT_FALSE(stream.OnChunk(0, Chunk("x", 1)));  // 11 bytes unsent: the engine cancels
  HttpOutput out = stream.Next();
  EXPECT_TRUE(out.last);
  EXPECT_TRUE(out.close);
  // A body is the whole answer by design: no such limit.
  GenerationStream body(
      Format(Endpoint::kCompletions), false, channel, [] {}, 10);
  EXPECT_TRUE(body.OnChunk(0, Chunk("0123456789", 1)));
  EXPECT_TRUE(body.OnChunk(0, Chunk("x", 1)));
}

TEST(GenerationStreamTest, ChoicesStreamUnderTheirIndexAndUsageCountsThePromptOnce) {
  auto channel = std::make_shared<FakeChannel>();
  ResponseFormat format = Format(Endpoint::kChatCompletions);
  format.choices = 3;
  format.n = 3;
  format.include_usage = true;
  GenerationStream stream(format, true, channel, [] {});
  EXPECT_TRUE(stream.OnChunk(1, Chunk("b", 1)));
  EXPECT_TRUE(stream.OnChunk(0, Chunk("a", 1)));
  engine::FinishInfo one = Finished(engine::FinishReason::kLength, 4, 1);
  one.cached_prompt_tokens = 4;
  stream.OnFinish(1, one);
  HttpOutput out = stream.Next();
  ASSERT_NE(out.head, nullptr);
  EXPECT_FALSE(out.last);  // choices 0 and 2 still run
  bool done = false;
  std::vector<json> events = Events(out.body, &done);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0]["choices"][0]["index"], 0);
  EXPECT_EQ(events[0]["choices"][0]["delta"]["content"], "a");
  EXPECT_EQ(events[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(events[1]["choices"][0]["index"], 1);
  EXPECT_EQ(events[1]["choices"][0]["delta"]["content"], "b");
  EXPECT_EQ(events[1]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(events[2]["choices"][0]["index"], 1);
  EXPECT_EQ(events[2]["choices"][0]["finish_reason"], "length");

  EXPECT_TRUE(stream.OnChunk(0, Chunk("c", 2)));
  stream.OnFinish(0, Finished(engine::FinishReason::kStop, 4, 3));
  // Choice 2 ends without output: its first event still carries the role.
  engine::FinishInfo none = Finished(engine::FinishReason::kEos, 4, 0);
  none.cached_prompt_tokens = 2;
  stream.OnFinish(2, none);
  out = stream.Next();
  EXPECT_EQ(out.head, nullptr);
  EXPECT_TRUE(out.last);
  events = Events(out.body, &done);
  EXPECT_TRUE(done);
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[0]["choices"][0]["delta"], json({{"content", "c"}}));  // no role again
  EXPECT_EQ(events[1]["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(events[2]["choices"][0]["index"], 2);
  EXPECT_EQ(events[2]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(events[3]["choices"][0]["index"], 2);
  EXPECT_EQ(events[3]["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(events[4]["choices"].empty());
  EXPECT_EQ(events[4]["usage"]["prompt_tokens"], 4);
  EXPECT_EQ(events[4]["usage"]["completion_tokens"], 4);
  EXPECT_EQ(events[4]["usage"]["total_tokens"], 8);
  EXPECT_EQ(events[4]["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
}

TEST(GenerationStreamTest, ABodyWaitsForEveryChoice) {
  auto channel = std::make_shared<FakeChannel>();
  ResponseFormat format = Format(Endpoint::kCompletions);
  format.choices = 2;
  format.n = 2;
  GenerationStream stream(format, false, channel, [] {});
  stream.OnChunk(1, Chunk("second", 2));
  engine::FinishInfo info = Finished(engine::FinishReason::kStop, 4, 2);
  info.cached_prompt_tokens = 3;
  stream.OnFinish(1, info);
  EXPECT_TRUE(stream.Next().empty());
  stream.OnChunk(0, Chunk("first", 1));
  info.completion_tokens = 1;
  info.reason = engine::FinishReason::kLength;
  stream.OnFinish(0, info);
  HttpOutput out = stream.Next();
  ASSERT_NE(out.head, nullptr);
  EXPECT_TRUE(out.last);
  const json body = json::parse(out.body);
  ASSERT_EQ(body["choices"].size(), 2u);
  EXPECT_EQ(body["choices"][0]["index"], 0);
  EXPECT_EQ(body["choices"][0]["text"], "first");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["choices"][1]["index"], 1);
  EXPECT_EQ(body["choices"][1]["text"], "second");
  EXPECT_EQ(body["choices"][1]["finish_reason"], "stop");
  EXPECT_EQ(body["usage"]["prompt_tokens"], 4);
  EXPECT_EQ(body["usage"]["completion_tokens"], 3);
  EXPECT_EQ(body["usage"]["prompt_tokens_details"]["cached_tokens"], 3);
}

TEST(GenerationStreamTest, OneFailedChoiceCancelsTheOthersAndFailsTheResponse) {
  auto channel = std::make_shared<FakeChannel>();
  ResponseFormat format = Format(Endpoint::kCompletions);
  format.choices = 3;
  format.n = 3;
  int cancels = 0;
  GenerationStream stream(format, true, channel, [&] { ++cancels; });
  EXPECT_TRUE(stream.OnChunk(0, Chunk("a", 1)));
  EXPECT_EQ(stream.Next().head->status, 200);
  engine::FinishInfo failed = Finished(engine::FinishReason::kDeadline, 4, 0);
  failed.status = absl::DeadlineExceededError("deadline exceeded");
  stream.OnFinish(2, failed);
  EXPECT_EQ(cancels, 1);
  EXPECT_FALSE(stream.OnChunk(1, Chunk("late", 1)));  // the engine drops what still runs
  // The cancelled choices end CANCELLED; the response reports the first failure.
  engine::FinishInfo cancelled = Finished(engine::FinishReason::kCancelled, 4, 1);
  cancelled.status = absl::CancelledError("cancelled");
  stream.OnFinish(0, cancelled);
  stream.OnFinish(1, cancelled);
  HttpOutput out = stream.Next();
  EXPECT_TRUE(out.last);
  bool done = false;
  std::vector<json> events = Events(out.body, &done);
  EXPECT_TRUE(done);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_THAT(events[0]["error"]["message"].get<std::string>(), HasSubstr("deadline"));
  stream.OnClientGone();
  EXPECT_EQ(cancels, 1);

  // Before any output, a body or a stream answers the failure as a plain HTTP error.
  GenerationStream body(format, false, channel, [&] { ++cancels; });
  body.OnChunk(0, Chunk("a", 1));
  body.OnFinish(1, failed);
  EXPECT_EQ(cancels, 2);
  out = body.Next();
  ASSERT_NE(out.head, nullptr);
  EXPECT_EQ(out.head->status, 504);
  EXPECT_TRUE(out.last);
}

TEST(GenerationStreamTest, EachChoiceBlocksAndResumesOnItsOwn) {
  auto channel = std::make_shared<FakeChannel>();
  ResponseFormat format = Format(Endpoint::kCompletions);
  format.choices = 2;
  format.n = 2;
  std::vector<int> resumed;
  GenerationStream stream(
      format, true, channel, [] {}, 1 << 20, [&resumed](int index) { resumed.push_back(index); });
  for (int i = 0; i < kMaxUnsentChunks; ++i) ASSERT_TRUE(stream.OnChunk(1, Chunk("b", 1)));
  EXPECT_TRUE(stream.WouldBlock(1));
  EXPECT_FALSE(stream.WouldBlock(0));
  ASSERT_TRUE(stream.OnChunk(0, Chunk("a", 1)));
  EXPECT_FALSE(stream.WouldBlock(0));
  stream.Next();
  EXPECT_EQ(resumed, std::vector<int>({1}));
}

TEST(GenerationStreamTest, EchoPutsThePromptAndItsScoredTokensFirst) {
  auto channel = std::make_shared<FakeChannel>();
  ResponseFormat format = Format(Endpoint::kCompletions);
  format.echo = {{"Hi", /*first_token=*/1}};
  format.logprobs = true;
  format.top_logprobs = 1;
  testing::ByteTokenizer tokenizer;
  format.tokenizer = &tokenizer;
  GenerationStream stream(format, true, channel, [] {});
  engine::TokenChunk chunk = Chunk("!", 1);
  // The byte tokenizer's ids are byte + 3.
  chunk.prompt_logprobs.push_back({'H' + 3, -2.0f, {{'H' + 3, -2.0f}}});
  chunk.prompt_logprobs.push_back({'i' + 3, -1.0f, {{'o' + 3, -0.5f}}});
  EXPECT_TRUE(stream.OnChunk(0, std::move(chunk)));
  stream.OnFinish(0, Finished(engine::FinishReason::kLength, 3, 1));
  bool done = false;
  const std::vector<json> events = Events(stream.Next().body, &done);
  ASSERT_EQ(events.size(), 2u);
  const json& choice = events[0]["choices"][0];
  EXPECT_EQ(choice["text"], "Hi!");
  EXPECT_EQ(choice["logprobs"]["token_logprobs"], json::parse("[null, -2.0, -1.0, -0.5]"));
  EXPECT_TRUE(choice["logprobs"]["top_logprobs"][0].is_null());
  EXPECT_EQ(choice["logprobs"]["top_logprobs"][2], json({{"o", -0.5}}));
  EXPECT_EQ(choice["logprobs"]["tokens"][1], "H");

  // A prompt of BOS alone echoes no text but its token, even when nothing is generated.
  ResponseFormat bos_only = format;
  bos_only.echo = {{"", 1}};
  GenerationStream empty(bos_only, true, channel, [] {});
  empty.OnFinish(0, Finished(engine::FinishReason::kEos, 1, 0));
  const std::vector<json> bos_events = Events(empty.Next().body, &done);
  ASSERT_EQ(bos_events.size(), 2u);
  EXPECT_EQ(bos_events[0]["choices"][0]["logprobs"]["token_logprobs"], json::parse("[null]"));

  // An answer without output still echoes (text only, without logprobs).
  ResponseFormat text_only = Format(Endpoint::kCompletions);
  text_only.echo = {{"Hi", 1}};
  GenerationStream body(text_only, false, channel, [] {});
  body.OnFinish(0, Finished(engine::FinishReason::kEos, 3, 0));
  EXPECT_EQ(json::parse(body.Next().body)["choices"][0]["text"], "Hi");
}

}  // namespace
}  // namespace quill::server::http
