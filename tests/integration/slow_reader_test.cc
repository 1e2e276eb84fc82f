// Clients that open Generate streams and never read them (HTTP/2 flow control holds the
// server's writes): the server pauses those requests in the engine after a few unsent
// tokens instead of buffering their whole answers, other clients are served as before,
// and after --stream-stall-timeout the stalled requests end and free their KV blocks.
// quill-server in process on 127.0.0.1:0 (kjv-1m, exact precision).

#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "client/quill_client.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "quill/v1/quill.grpc.pb.h"
#include "server/server.h"
#include "server/stream_limits.h"
#include "tests/integration/server_test_util.h"
#include "tests/integration/test_server.h"
#include "tests/testing/test_env.h"

namespace quill::testing {
namespace {

namespace v1 = ::quill::v1;
using ::testing::HasSubstr;

constexpr int kSlowStreams = 20;
constexpr int kSlowTokens = 240;  // kjv-1m's context is 256
constexpr absl::Duration kStallTimeout = absl::Seconds(3);

TEST(SlowReaderTest, NeverReadingStreamsArePausedThenEndStalledAndOthersAreServed) {
  if (SharedModelPath("kjv-1m.gguf").empty()) GTEST_SKIP() << "shared assets not found";
  server::ServerOptions options = KjvTestServerOptions(32 << 20);
  options.engine.stall_timeout = kStallTimeout;
  absl::StatusOr<std::unique_ptr<server::Server>> server = server::Server::Create(options);
  ASSERT_TRUE(server.ok()) << server.status();
  const int metrics_port = (*server)->metrics_port();
  std::unique_ptr<client::QuillClient> client = client::QuillClient::Connect((*server)->address());

  // A normal request's answer with the server to itself.
  v1::GenerateRequest normal = TextRequest("In the beginning", 60);
  normal.set_ignore_eos(true);
  const Stream solo = Collect(*client, normal);
  ASSERT_TRUE(solo.status.ok()) << solo.status;
  ASSERT_EQ(solo.ids.size(), 60u);
  // The client has the last message a moment before the engine records the step and
  // publishes its gauges: the idle state is waited for, not assumed.
  const PromText before = ScrapeWhenIdle(metrics_port);
  const Labels stalled = {{"api", "grpc"}, {"outcome", "stalled"}};

  // Streams that are never read (NeverRead asks for logprobs, so every message is a few
  // hundred bytes): without backpressure the server would buffer all kSlowTokens of each.
  std::shared_ptr<grpc::Channel> slow_channel = TinyWindowChannel((*server)->address());
  std::unique_ptr<v1::Generator::Stub> stub = v1::Generator::NewStub(slow_channel);
  std::vector<std::unique_ptr<NeverRead>> slow;
  for (int i = 0; i < kSlowStreams; ++i) {
    v1::GenerateRequest r = TextRequest(absl::StrCat("And the LORD said ", i), kSlowTokens);
    r.set_ignore_eos(true);
    slow.push_back(std::make_unique<NeverRead>());
    slow.back()->Start(*stub, r);
  }

  // All of them pause in the engine, short of their answers, and stay put: no engine step
  // runs (so no token is generated, or buffered) while nobody reads. quill_batch_tokens
  // counts every token a step processes, before the step's gauges are published: its count
  // is read once the pause shows.
  absl::StatusOr<PromText> paused = ScrapeUntil(metrics_port, [](const PromText& t) {
    return t.Value("quill_requests_paused") == kSlowStreams;
  });
  ASSERT_TRUE(paused.ok()) << paused.status();
  EXPECT_EQ(Metric(*paused, "quill_requests_running"), kSlowStreams);
  EXPECT_GT(Metric(*paused, "quill_kv_cache_blocks_used"), 0);  // their KV stays
  const auto stepped_tokens = [&before](const PromText& t) {
    return Metric(t, "quill_batch_tokens_sum") - Metric(before, "quill_batch_tokens_sum");
  };
  absl::SleepFor(absl::Milliseconds(300));
  const PromText settled = ScrapeUntil(metrics_port, [](const PromText&) { return true; }).value();
  EXPECT_LT(stepped_tokens(settled), kSlowStreams * kSlowTokens / 4.0);
  absl::SleepFor(absl::Milliseconds(300));
  const PromText still = ScrapeUntil(metrics_port, [](const PromText&) { return true; }).value();
  EXPECT_EQ(stepped_tokens(still), stepped_tokens(settled));
  EXPECT_EQ(Metric(still, "quill_requests_paused"), kSlowStreams);

  // Meanwhile another client is served at once, with the same answer as alone.
  const absl::Time start = absl::Now();
  const Stream during = Collect(*client, normal);
  ASSERT_TRUE(during.status.ok()) << during.status;
  EXPECT_EQ(during.ids, solo.ids);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));

  // After the stall timeout the stalled requests end and their KV blocks are freed.
  absl::StatusOr<PromText> after = ScrapeUntil(
      metrics_port,
      [&](const PromText& t) {
        return t.Value("quill_requests_total", stalled).value_or(0) -
                       Metric(before, "quill_requests_total", stalled) ==
                   kSlowStreams &&
               t.Value("quill_kv_cache_blocks_used") == 0;
      },
      kStallTimeout + absl::Seconds(20));
  if (!after.ok()) {
    const PromText last = ScrapeUntil(metrics_port, [](const PromText&) { return true; }).value();
    FAIL() << after.status() << ": stalled=" << Metric(last, "quill_requests_total", stalled)
           << " paused=" << Metric(last, "quill_requests_paused")
           << " running=" << Metric(last, "quill_requests_running")
           << " kv_blocks_used=" << Metric(last, "quill_kv_cache_blocks_used");
  }
  EXPECT_EQ(Metric(*after, "quill_requests_paused"), 0);
  EXPECT_EQ(Metric(*after, "quill_requests_running"), 0);

  // A client that reads at last gets the tokens made before the pause, then the status.
  for (const auto& call : slow) {
    int tokens = 0;
    const grpc::Status status = call->Drain(&tokens);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr("the client read nothing for 3s"));
    EXPECT_GT(tokens, 0);
    EXPECT_LT(tokens, kSlowTokens);
  }
  (*server)->Shutdown();
}

// The server tells clients how many streams one connection may open.
TEST(SlowReaderTest, StreamsPerConnectionAreBounded) {
  if (SharedModelPath("kjv-1m.gguf").empty()) GTEST_SKIP() << "shared assets not found";
  server::ServerOptions options = KjvTestServerOptions(32 << 20);
  options.engine.stall_timeout = absl::Seconds(30);
  options.grpc_max_concurrent_streams = 2;
  absl::StatusOr<std::unique_ptr<server::Server>> server = server::Server::Create(options);
  ASSERT_TRUE(server.ok()) << server.status();
  const int metrics_port = (*server)->metrics_port();

  // Three never-read streams on one connection: only two reach the server (the third
  // waits in the client for a free stream, so each is started on a thread of its own).
  std::shared_ptr<grpc::Channel> channel = TinyWindowChannel((*server)->address());
  std::unique_ptr<v1::Generator::Stub> stub = v1::Generator::NewStub(channel);
  std::vector<std::unique_ptr<NeverRead>> calls;
  std::vector<std::thread> starts;
  for (int i = 0; i < 3; ++i) calls.push_back(std::make_unique<NeverRead>());
  for (int i = 0; i < 3; ++i) {
    starts.emplace_back([&, i] {
      v1::GenerateRequest r = TextRequest(absl::StrCat("And God said ", i), kSlowTokens);
      r.set_ignore_eos(true);
      calls[i]->Start(*stub, r);
    });
  }
  // A failed ASSERT below returns with the starts still running: cancel the calls and join
  // them, so the failure is reported instead of ending the process in a joinable
  // std::thread's destructor.
  absl::Cleanup join_starts = [&] {
    for (auto& call : calls) call->context.TryCancel();
    for (std::thread& t : starts) {
      if (t.joinable()) t.join();
    }
  };
  absl::StatusOr<PromText> paused = ScrapeUntil(
      metrics_port, [](const PromText& t) { return t.Value("quill_requests_paused") == 2; });
  ASSERT_TRUE(paused.ok()) << paused.status();
  absl::SleepFor(absl::Milliseconds(300));
  absl::StatusOr<PromText> later = ScrapeUntil(metrics_port, [](const PromText&) { return true; });
  ASSERT_TRUE(later.ok()) << later.status();
  EXPECT_EQ(Metric(*later, "quill_requests_running"), 2);
  EXPECT_EQ(Metric(*later, "quill_requests_waiting"), 0);
  std::move(join_starts).Invoke();  // cancels the calls, joins the starts
  for (auto& call : calls) {
    int tokens = 0;
    call->Drain(&tokens);
  }
  (*server)->Shutdown();
}

}  // namespace
}  // namespace quill::testing
