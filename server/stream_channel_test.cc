// StreamChannel's state machine, driven directly (no gRPC): the test plays the engine
// thread (OnChunk/OnFinish) and gRPC (OnWriteDone/OnCancel/Detach) and checks the calls
// the channel makes on its writer.

#include <atomic>
#include <deque>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/generate_reactor.h"
#include "server/request_codec.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"

namespace quill::server {
namespace {

namespace v1 = ::quill::v1;
using ::testing::ElementsAre;

struct Call {
  enum Kind { kMessage, kLast, kStatus } kind;
  v1::GenerateResponse message;  // kMessage / kLast
  grpc::StatusCode code = grpc::StatusCode::OK;
};

v1::GenerateResponse Decode(const grpc::ByteBuffer* buffer) {
  v1::GenerateResponse r;
  EXPECT_TRUE(ParseRequest(*buffer, &r).ok());
  return r;
}

class RecordingWriter final : public StreamWriter {
 public:
  void SendMessage(const grpc::ByteBuffer* message) override {
    absl::MutexLock lock(&mu_);
    EXPECT_FALSE(write_in_flight_) << "two writes in flight";
    EXPECT_FALSE(finished_) << "write after finish";
    write_in_flight_ = true;
    calls_.push_back({Call::kMessage, Decode(message)});
  }
  void SendLastMessage(const grpc::ByteBuffer* message, grpc::Status status) override {
    absl::MutexLock lock(&mu_);
    EXPECT_FALSE(write_in_flight_) << "finish while a write is in flight";
    EXPECT_FALSE(finished_) << "second finish";
    finished_ = true;
    calls_.push_back({Call::kLast, Decode(message), status.error_code()});
  }
  void SendStatus(grpc::Status status) override {
    absl::MutexLock lock(&mu_);
    EXPECT_FALSE(write_in_flight_) << "finish while a write is in flight";
    EXPECT_FALSE(finished_) << "second finish";
    finished_ = true;
    calls_.push_back({Call::kStatus, {}, status.error_code()});
  }
  // gRPC completing the write in flight.
  void CompleteWrite() {
    absl::MutexLock lock(&mu_);
    EXPECT_TRUE(write_in_flight_);
    write_in_flight_ = false;
  }
  std::vector<Call> calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  bool write_in_flight() {
    absl::MutexLock lock(&mu_);
    return write_in_flight_;
  }
  bool finished() {
    absl::MutexLock lock(&mu_);
    return finished_;
  }

 private:
  absl::Mutex mu_;
  std::vector<Call> calls_;
  bool write_in_flight_ = false;
  bool finished_ = false;
};

engine::TokenChunk Chunk(std::vector<int> ids, std::string text) {
  engine::TokenChunk chunk;
  for (int id : ids) {
    engine::GeneratedToken t;
    t.id = id;
    t.logprob = -0.5f;
    chunk.tokens.push_back(t);
  }
  chunk.text = std::move(text);
  return chunk;
}

engine::FinishInfo Finish(engine::FinishReason reason, absl::Status status = absl::OkStatus()) {
  engine::FinishInfo info;
  info.reason = reason;
  info.status = std::move(status);
  info.prompt_tokens = 4;
  info.completion_tokens = 3;
  return info;
}

class StreamChannelTest : public ::testing::Test {
 protected:
  RecordingWriter writer_;
  StreamChannel channel_{"req-1", /*with_logprobs=*/false, absl::InfiniteFuture(), &writer_};

  void WriteDone(bool ok = true) {
    writer_.CompleteWrite();
    channel_.OnWriteDone(ok);
  }
};

TEST_F(StreamChannelTest, ChunksArrivingDuringAWriteAreCoalescedIntoTheNextMessage) {
  EXPECT_TRUE(channel_.OnChunk(Chunk({10}, "In")));
  EXPECT_TRUE(channel_.OnChunk(Chunk({11}, " the")));
  EXPECT_TRUE(channel_.OnChunk(Chunk({12}, " beginning")));
  ASSERT_EQ(writer_.calls().size(), 1u);  // only one write in flight
  WriteDone();
  const std::vector<Call> calls = writer_.calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_THAT(calls[0].message.token_ids(), ElementsAre(10));
  EXPECT_EQ(calls[0].message.text(), "In");
  EXPECT_THAT(calls[1].message.token_ids(), ElementsAre(11, 12));
  EXPECT_EQ(calls[1].message.text(), " the beginning");
  EXPECT_EQ(calls[1].message.request_id(), "req-1");
  EXPECT_EQ(calls[1].message.logprobs_size(), 0);
  EXPECT_EQ(calls[1].message.finish_reason(), v1::FINISH_REASON_UNSPECIFIED);
}

TEST(StreamChannelBackpressureTest, WouldBlockAtTheBoundBehindAStuckWriteAndWakesOnDrain) {
  RecordingWriter writer;
  int drained = 0;
  StreamChannel channel("req-1", /*with_logprobs=*/false, absl::InfiniteFuture(), &writer,
                        [&drained] { ++drained; });
  ASSERT_TRUE(channel.OnChunk(Chunk({1}, "a")));  // goes out at once: the write in flight
  EXPECT_FALSE(channel.WouldBlock());
  for (int i = 0; i < kMaxUnsentChunks; ++i) {
    EXPECT_FALSE(channel.WouldBlock()) << i;  // the client never completes the write
    ASSERT_TRUE(channel.OnChunk(Chunk({2 + i}, "b")));
  }
  EXPECT_TRUE(channel.WouldBlock());
  EXPECT_EQ(drained, 0);
  // The client reads: the write completes, the backlog becomes the next write, and the
  // engine is woken once.
  writer.CompleteWrite();
  channel.OnWriteDone(true);
  EXPECT_EQ(drained, 1);
  EXPECT_FALSE(channel.WouldBlock());
  const std::vector<Call> calls = writer.calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[1].message.token_ids_size(), kMaxUnsentChunks);
  // A write that completes without a WouldBlock() == true before it wakes nobody.
  ASSERT_TRUE(channel.OnChunk(Chunk({50}, "c")));
  writer.CompleteWrite();
  channel.OnWriteDone(true);
  EXPECT_EQ(drained, 1);
  // A client that is gone is never waited for.
  for (int i = 0; i < kMaxUnsentChunks; ++i) ASSERT_TRUE(channel.OnChunk(Chunk({60}, "d")));
  EXPECT_TRUE(channel.WouldBlock());
  channel.OnCancel();
  EXPECT_FALSE(channel.WouldBlock());
  writer.CompleteWrite();
  channel.OnWriteDone(false);
  EXPECT_EQ(drained, 1);
  channel.Detach();
}

TEST_F(StreamChannelTest, SuccessfulEndRidesOnTheLastMessageAfterTheWriteInFlight) {
  channel_.OnChunk(Chunk({10}, "a"));
  channel_.OnChunk(Chunk({11}, "b"));
  channel_.OnFinish(Finish(engine::FinishReason::kStop));
  ASSERT_EQ(writer_.calls().size(), 1u);  // no Finish while the write is outstanding
  WriteDone();
  const std::vector<Call> calls = writer_.calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[1].kind, Call::kLast);
  EXPECT_EQ(calls[1].code, grpc::StatusCode::OK);
  EXPECT_THAT(calls[1].message.token_ids(), ElementsAre(11));
  EXPECT_EQ(calls[1].message.finish_reason(), v1::STOP);
  EXPECT_EQ(calls[1].message.usage().prompt_tokens(), 4);
  EXPECT_EQ(calls[1].message.usage().completion_tokens(), 3);
  EXPECT_TRUE(calls[1].message.has_timings());
  channel_.Detach();
  EXPECT_EQ(writer_.calls().size(), 2u);
}

// A chat with tools: the text streams as the model writes it, and the calls it holds go
// out parsed on the last message, whichever messages the text came in.
TEST(StreamChannelToolsTest, TheAnswersCallsRideOnTheLastMessage) {
  RecordingWriter writer;
  ChatReading tools;
  tools.tools.syntax = engine::chat::ToolCallSyntax::kHermes;
  tools.tools.names = {"get_weather"};
  StreamChannel channel("req-7", /*with_logprobs=*/false, absl::InfiniteFuture(), &writer, nullptr,
                        tools);
  const std::vector<std::string> pieces = {
      "Checking. <tool_",
      "call>{\"name\": \"get_weather\", \"arguments\": ", "{\"city\": \"Oslo\"}}</tool_call>"};
  channel.OnChunk(Chunk({1}, pieces[0]));
  channel.OnChunk(Chunk({2}, pieces[1]));  // behind the write in flight
  writer.CompleteWrite();
  channel.OnWriteDone(true);
  channel.OnChunk(Chunk({3}, pieces[2]));
  channel.OnFinish(Finish(engine::FinishReason::kEos));
  writer.CompleteWrite();
  channel.OnWriteDone(true);
  const std::vector<Call> calls = writer.calls();
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[0].message.text() + calls[1].message.text() + calls[2].message.text(),
            pieces[0] + pieces[1] + pieces[2]);
  EXPECT_EQ(calls[1].message.tool_calls_size(), 0);
  ASSERT_EQ(calls[2].kind, Call::kLast);
  EXPECT_EQ(calls[2].message.finish_reason(), v1::TOOL_CALLS);
  ASSERT_EQ(calls[2].message.tool_calls_size(), 1);
  EXPECT_EQ(calls[2].message.tool_calls(0).id(), "call_req-7");
  EXPECT_EQ(calls[2].message.tool_calls(0).name(), "get_weather");
  EXPECT_EQ(calls[2].message.tool_calls(0).arguments_json(), R"({"city":"Oslo"})");
  channel.Detach();

  // The same text without tools to read is text; so is a call to a tool not given.
  for (const std::vector<std::string>& names :
       {std::vector<std::string>{}, std::vector<std::string>{"search"}}) {
    RecordingWriter plain_writer;
    ChatReading reading = tools;
    reading.tools.names = names;
    if (names.empty()) reading.tools.syntax = engine::chat::ToolCallSyntax::kNone;
    StreamChannel plain("req-8", false, absl::InfiniteFuture(), &plain_writer, nullptr, reading);
    plain.OnChunk(Chunk({1, 2, 3}, pieces[0] + pieces[1] + pieces[2]));
    plain.OnFinish(Finish(engine::FinishReason::kEos));
    plain_writer.CompleteWrite();
    plain.OnWriteDone(true);
    const std::vector<Call> plain_calls = plain_writer.calls();
    ASSERT_EQ(plain_calls.size(), 2u);
    EXPECT_EQ(plain_calls[1].message.finish_reason(), v1::EOS);
    EXPECT_EQ(plain_calls[1].message.tool_calls_size(), 0);
    plain.Detach();
  }
}

// A reasoning model's chat: each message carries the thought that came in `reasoning` and
// the rest in `text`, whichever chunks split the tags; the tokens go out as they came. The
// calls are read in the content only: a call written inside the thought is no call.
TEST(StreamChannelReasoningTest, TheThoughtGoesOutApartFromTheText) {
  const std::string call =
      "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}"
      "</tool_call>";
  struct Case {
    bool thought_open;
    std::string answer;
    std::string reasoning;
    std::string text;
    int calls;
  };
  const std::vector<Case> cases = {
      {false, "<think>Rain?" + call + "</think>\n\nIt rains.", "Rain?" + call, "It rains.", 0},
      {true, "\nLook it up.</think>" + call, "\nLook it up.", call, 1},
      {false, "No thought. <think>x</think>", "", "No thought. <think>x</think>", 0},
      {true, "Cut short <", "Cut short <", "", 0},
  };
  for (const Case& c : cases) {
    for (size_t cut = 1; cut < c.answer.size(); cut += 3) {
      SCOPED_TRACE(c.answer + " cut at " + std::to_string(cut));
      RecordingWriter writer;
      ChatReading reading;
      reading.tools.syntax = engine::chat::ToolCallSyntax::kHermes;
      reading.tools.names = {"get_weather"};
      reading.reasoning = {/*split=*/true, c.thought_open};
      StreamChannel channel("req-9", false, absl::InfiniteFuture(), &writer, nullptr, reading);
      channel.OnChunk(Chunk({1}, c.answer.substr(0, cut)));
      channel.OnChunk(Chunk({2}, c.answer.substr(cut)));  // behind the write in flight
      channel.OnFinish(Finish(engine::FinishReason::kEos));
      writer.CompleteWrite();
      channel.OnWriteDone(true);
      const std::vector<Call> calls = writer.calls();
      ASSERT_EQ(calls.size(), 2u);
      EXPECT_EQ(calls[0].message.reasoning() + calls[1].message.reasoning(), c.reasoning);
      EXPECT_EQ(calls[0].message.text() + calls[1].message.text(), c.text);
      EXPECT_THAT(calls[0].message.token_ids(), ElementsAre(1));
      EXPECT_THAT(calls[1].message.token_ids(), ElementsAre(2));
      EXPECT_EQ(calls[1].message.tool_calls_size(), c.calls);
      channel.Detach();
    }
  }
}

TEST_F(StreamChannelTest, EndWithNothingPendingSendsAFinalMessageWithoutTokens) {
  channel_.OnChunk(Chunk({10}, "a"));
  WriteDone();
  channel_.OnFinish(Finish(engine::FinishReason::kEos));
  const std::vector<Call> calls = writer_.calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[1].kind, Call::kLast);
  EXPECT_EQ(calls[1].message.token_ids_size(), 0);
  EXPECT_EQ(calls[1].message.finish_reason(), v1::EOS);
}

TEST_F(StreamChannelTest, FailureAfterTokensSendsTheTokensThenTheStatus) {
  channel_.OnChunk(Chunk({10}, "a"));
  channel_.OnChunk(Chunk({11}, "b"));
  channel_.OnFinish(Finish(engine::FinishReason::kShutdown,
                           absl::UnavailableError("server shutting down")));
  WriteDone();  // sends the pending token
  WriteDone();  // then the status
  const std::vector<Call> calls = writer_.calls();
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[1].kind, Call::kMessage);
  EXPECT_THAT(calls[1].message.token_ids(), ElementsAre(11));
  EXPECT_EQ(calls[2].kind, Call::kStatus);
  EXPECT_EQ(calls[2].code, grpc::StatusCode::UNAVAILABLE);
}

TEST_F(StreamChannelTest, FailureWhileIdleFinishesAtOnceWithTheMappedCode) {
  channel_.OnFinish(Finish(engine::FinishReason::kDeadline,
                           absl::DeadlineExceededError("deadline exceeded")));
  const std::vector<Call> calls = writer_.calls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].kind, Call::kStatus);
  EXPECT_EQ(calls[0].code, grpc::StatusCode::DEADLINE_EXCEEDED);
}

TEST_F(StreamChannelTest, CancelWhileIdleFinishesAndRefusesLaterChunks) {
  channel_.OnChunk(Chunk({10}, "a"));
  WriteDone();
  channel_.OnCancel();
  ASSERT_EQ(writer_.calls().size(), 2u);
  EXPECT_EQ(writer_.calls()[1].kind, Call::kStatus);
  EXPECT_EQ(writer_.calls()[1].code, grpc::StatusCode::CANCELLED);
  EXPECT_FALSE(channel_.OnChunk(Chunk({11}, "b")));  // the engine cancels on false
  channel_.OnFinish(Finish(engine::FinishReason::kCancelled, absl::CancelledError("x")));
  channel_.Detach();
  EXPECT_EQ(writer_.calls().size(), 2u);  // nothing after Finish
}

TEST_F(StreamChannelTest, CancelDuringAWriteFinishesWhenTheWriteCompletes) {
  channel_.OnChunk(Chunk({10}, "a"));
  channel_.OnCancel();
  EXPECT_EQ(writer_.calls().size(), 1u);  // never Finish with a write outstanding
  writer_.CompleteWrite();
  EXPECT_TRUE(channel_.OnWriteDone(false));  // client gone: caller cancels in the engine
  ASSERT_EQ(writer_.calls().size(), 2u);
  EXPECT_EQ(writer_.calls()[1].code, grpc::StatusCode::CANCELLED);
}

TEST_F(StreamChannelTest, FailedWriteMeansTheClientIsGone) {
  channel_.OnChunk(Chunk({10}, "a"));
  channel_.OnChunk(Chunk({11}, "b"));
  writer_.CompleteWrite();
  EXPECT_TRUE(channel_.OnWriteDone(false));
  ASSERT_EQ(writer_.calls().size(), 2u);
  EXPECT_EQ(writer_.calls()[1].kind, Call::kStatus);
  EXPECT_FALSE(channel_.OnChunk(Chunk({12}, "c")));
  EXPECT_TRUE(channel_.client_gone());
}

TEST(StreamChannelDeadlineTest, AfterTheDeadlineChunksAreNotRefused) {
  // The engine knows the deadline and ends the request as kDeadline itself; refusing the
  // chunk would turn it into a cancellation.
  RecordingWriter writer;
  StreamChannel channel("r", false, absl::Now() - absl::Seconds(1), &writer);
  channel.OnCancel();  // gRPC cancels the call when its deadline passes
  EXPECT_TRUE(channel.OnChunk(Chunk({1}, "x")));
}

TEST(StreamChannelRejectTest, RejectFinishesOnceWithTheCode) {
  RecordingWriter writer;
  StreamChannel channel("r", false, absl::InfiniteFuture(), &writer);
  channel.Reject(absl::ResourceExhaustedError("queue full"));
  channel.Reject(absl::ResourceExhaustedError("queue full"));
  ASSERT_EQ(writer.calls().size(), 1u);
  EXPECT_EQ(writer.calls()[0].code, grpc::StatusCode::RESOURCE_EXHAUSTED);
}

TEST(StreamChannelLogprobsTest, LogprobsOnlyWhenAsked) {
  RecordingWriter writer;
  StreamChannel channel("r", /*with_logprobs=*/true, absl::InfiniteFuture(), &writer);
  channel.OnChunk(Chunk({7, 8}, "xy"));
  ASSERT_EQ(writer.calls().size(), 1u);
  ASSERT_EQ(writer.calls()[0].message.logprobs_size(), 2);
  EXPECT_EQ(writer.calls()[0].message.logprobs(1).token_id(), 8);
  EXPECT_EQ(writer.calls()[0].message.logprobs(1).logprob(), -0.5f);
}

// An "engine" thread pushes chunks while a "gRPC" thread completes writes at random
// moments: every token arrives once, in order, with at most one write in flight and
// exactly one end.
TEST(StreamChannelStressTest, ConcurrentEngineAndGrpcThreads) {
  RecordingWriter writer;
  StreamChannel channel("r", false, absl::InfiniteFuture(), &writer);
  constexpr int kTokens = 2000;
  std::atomic<bool> engine_done{false};
  std::thread engine_thread([&] {
    for (int i = 0; i < kTokens; ++i) {
      ASSERT_TRUE(channel.OnChunk(Chunk({i}, "t")));
      if (i % 7 == 0) std::this_thread::yield();
    }
    channel.OnFinish(Finish(engine::FinishReason::kLength));
    engine_done = true;
  });
  std::thread grpc_thread([&] {
    while (!writer.finished()) {
      if (writer.write_in_flight()) {
        writer.CompleteWrite();
        channel.OnWriteDone(true);
      } else {
        std::this_thread::yield();
      }
    }
  });
  engine_thread.join();
  grpc_thread.join();
  channel.Detach();
  std::vector<int> ids;
  std::string text;
  const std::vector<Call> calls = writer.calls();
  for (const Call& call : calls) {
    ids.insert(ids.end(), call.message.token_ids().begin(), call.message.token_ids().end());
    text += call.message.text();
  }
  ASSERT_EQ(ids.size(), static_cast<size_t>(kTokens));
  for (int i = 0; i < kTokens; ++i) ASSERT_EQ(ids[i], i);
  EXPECT_EQ(text, std::string(kTokens, 't'));
  EXPECT_EQ(calls.back().kind, Call::kLast);
  EXPECT_EQ(calls.back().message.finish_reason(), v1::LENGTH);
}

// The finished-request line quotes and escapes what a client controls, so no input can add
// a line to the server log or a field to this one.
TEST(LogFinishedRequestTest, ClientTextCannotForgeLinesOrFields) {
  std::ostringstream out;
  auto logger = std::make_shared<spdlog::logger>(
      "capture", std::make_shared<spdlog::sinks::ostream_sink_st>(out));
  logger->set_pattern("%v");
  const std::shared_ptr<spdlog::logger> previous = spdlog::default_logger();
  spdlog::set_default_logger(logger);
  LogFinishedRequest("ok-id", Finish(engine::FinishReason::kLength));
  LogFinishedRequest(
      "bad id", Finish(engine::FinishReason::kError,
                       absl::InvalidArgumentError("stop[0] \"x\nfinished request_id=forged\"")));
  spdlog::set_default_logger(previous);
  const std::vector<std::string> lines = absl::StrSplit(out.str(), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 2u) << out.str();
  EXPECT_THAT(lines[0], ::testing::StartsWith("finished request_id=ok-id reason=length "));
  EXPECT_THAT(lines[1], ::testing::StartsWith("finished request_id=\"bad id\" reason=error "));
  EXPECT_THAT(lines[1], ::testing::HasSubstr(
                            "status=\"INVALID_ARGUMENT: stop[0] \\\"x\\nfinished request_id=forged\\\"\""));
}

}  // namespace
}  // namespace quill::server
