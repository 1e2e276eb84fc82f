// quill-server in process on 127.0.0.1:0 (kjv-1m, exact precision), driven through the
// real client library over real gRPC, with /metrics scraped over HTTP.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "client/quill_client.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "quill/v1/quill.grpc.pb.h"
#include "server/server.h"
#include "tests/integration/server_test_util.h"
#include "tests/integration/test_server.h"
#include "tests/testing/test_env.h"

namespace quill::testing {
namespace {

namespace v1 = ::quill::v1;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr int kEos = 2;  // kjv-1m's EOS id

std::string ModelPath() { return SharedModelPath("kjv-1m.gguf"); }

server::ServerOptions TestOptions() {
  // 1024 KV blocks: plenty, and quick to allocate.
  server::ServerOptions options = KjvTestServerOptions(32 << 20);
  options.http_port = 0;
  options.engine.max_queue = 100;
  options.engine.spec_tokens = 4;  // as quill-server runs by default
  return options;
}

// A kjv-1m golden case: ids and text from an independent implementation (../shared/golden).
struct GoldenGreedyCase {
  std::string prompt;
  int prompt_tokens = 0;
  std::vector<int> greedy_ids;
  std::string greedy_text;
};

// The golden cases with a prompt and a greedy continuation of at least 20 tokens.
std::vector<GoldenGreedyCase> GoldenGreedyCases() {
  std::ifstream in(SharedPath("golden/kjv-1m.json"));
  EXPECT_TRUE(in) << "golden/kjv-1m.json";
  if (!in) return {};
  const nlohmann::json golden = nlohmann::json::parse(in);
  std::vector<GoldenGreedyCase> cases;
  for (const auto& c : golden["cases"]) {
    GoldenGreedyCase g{c["prompt"].get<std::string>(), static_cast<int>(c["prompt_ids"].size()),
                       c["greedy_ids"].get<std::vector<int>>(),
                       c["greedy_text"].get<std::string>()};
    if (g.greedy_ids.size() >= 20 && !g.prompt.empty()) cases.push_back(std::move(g));
  }
  EXPECT_GE(cases.size(), 4u);
  return cases;
}

class ServerTest : public SharedServerTest<ServerTest> {
 protected:
  static void SetUpTestSuite() {
    if (!ModelPath().empty()) StartSharedServer(TestOptions());
  }
  void SetUp() override {
    if (ModelPath().empty()) GTEST_SKIP() << "shared assets not found (QUILL_SHARED_DIR)";
    ASSERT_NE(server_, nullptr);
  }

  static PromText Scrape() {
    absl::StatusOr<PromText> text = ScrapeMetrics(server_->metrics_port());
    EXPECT_TRUE(text.ok()) << text.status();
    return text.ok() ? *text : PromText();
  }
};

// ---------------------------------------------------------------------------------------
// Outputs

TEST_F(ServerTest, GreedyStreamEqualsTheGoldenReference) {
  for (const GoldenGreedyCase& c : GoldenGreedyCases()) {
    const int n = static_cast<int>(c.greedy_ids.size());
    const Stream s = Collect(*client_, TextRequest(c.prompt, n));
    ASSERT_TRUE(s.status.ok()) << s.status;
    EXPECT_EQ(s.ids, c.greedy_ids) << c.prompt;
    EXPECT_EQ(s.text, c.greedy_text) << c.prompt;
    EXPECT_EQ(s.last.finish_reason(), v1::LENGTH);
    EXPECT_EQ(s.last.usage().prompt_tokens(), c.prompt_tokens);
    EXPECT_EQ(s.last.usage().completion_tokens(), n);
  }
}

// quill-run's ids end with EOS when it stopped there; the server never sends EOS.
void ExpectSameAsQuillRun(const Stream& s, std::vector<int> run, int max_tokens) {
  ASSERT_TRUE(s.status.ok()) << s.status;
  if (!run.empty() && run.back() == kEos) {
    run.pop_back();
    EXPECT_EQ(s.last.finish_reason(), v1::EOS);
  } else {
    EXPECT_EQ(s.last.finish_reason(), v1::LENGTH);
    EXPECT_EQ(static_cast<int>(run.size()), max_tokens);
  }
  EXPECT_EQ(s.ids, run);
}

TEST_F(ServerTest, GreedyStreamEqualsQuillRun) {
  if (BuildBinaryPath("engine/tools/quill-run").empty()) GTEST_SKIP() << "quill-run not built";
  for (const std::string prompt : {"In the beginning", "And Jesus answered and said",
                                   "The LORD is my shepherd; I shall not want."}) {
    absl::StatusOr<std::vector<int>> run =
        QuillRunIds({"-m", ModelPath(), "-p", prompt, "-n", "48", "--temp", "0", "--exact"});
    ASSERT_TRUE(run.ok()) << run.status();
    ExpectSameAsQuillRun(Collect(*client_, TextRequest(prompt, 48)), *run, 48);
  }
}

TEST_F(ServerTest, SeededSamplingEqualsQuillRun) {
  if (BuildBinaryPath("engine/tools/quill-run").empty()) GTEST_SKIP() << "quill-run not built";
  const std::vector<int> ids = {1, 300, 261, 345, 394, 325, 692, 967};  // "And the LORD said unto Moses,"
  for (const char* prompt : {"ids", "For God so loved"}) {
    // quill-run's top-k/min-p defaults are turned off: the request leaves them unset.
    std::vector<std::string> args = {"-m", ModelPath(), "-n", "64", "--temp", "0.8",
                                     "--top-p", "0.9", "--seed", "42", "--top-k", "0",
                                     "--min-p", "0", "--exact"};
    v1::GenerateRequest request;
    if (std::string(prompt) == "ids") {
      args.insert(args.end(), {"--prompt-ids", "1,300,261,345,394,325,692,967"});
      request = IdsRequest(ids, 64);
    } else {
      args.insert(args.end(), {"-p", prompt});
      request = TextRequest(prompt, 64);
    }
    SetSampling(&request, 0.8f, 0.9f, 42);
    absl::StatusOr<std::vector<int>> run = QuillRunIds(args);
    ASSERT_TRUE(run.ok()) << run.status();
    ExpectSameAsQuillRun(Collect(*client_, request), *run, 64);
  }
}

TEST_F(ServerTest, ConcurrentStreamsEqualTheirSoloRuns) {
  const std::vector<std::string> phrases = {
      "In the beginning", "And God said", "Blessed are the", "The LORD is my shepherd",
      "And it came to pass", "Thus saith the LORD", "Hear, O Israel", "For unto us a child",
  };
  std::vector<v1::GenerateRequest> requests;
  for (int i = 0; i < 32; ++i) {
    v1::GenerateRequest r = TextRequest(absl::StrCat(phrases[i % phrases.size()],
                                                     std::string(i / 8, ',')),
                                        8 + (i * 7) % 57);
    if (i % 2 == 1) SetSampling(&r, 0.9f, 0.95f, 1000 + i);
    r.set_ignore_eos(i % 3 == 0);
    requests.push_back(r);
  }
  std::vector<Stream> solo;
  for (const v1::GenerateRequest& r : requests) {
    solo.push_back(Collect(*client_, r));
    ASSERT_TRUE(solo.back().status.ok()) << solo.back().status;
  }
  std::vector<Stream> together(requests.size());
  absl::Notification go;
  std::vector<std::thread> threads;
  for (size_t i = 0; i < requests.size(); ++i) {
    threads.emplace_back([&, i] {
      go.WaitForNotification();
      together[i] = Collect(*client_, requests[i]);
    });
  }
  go.Notify();
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < requests.size(); ++i) {
    ASSERT_TRUE(together[i].status.ok()) << i << ": " << together[i].status;
    EXPECT_EQ(together[i].ids, solo[i].ids) << "request " << i;
    EXPECT_EQ(together[i].text, solo[i].text) << "request " << i;
    EXPECT_EQ(together[i].last.finish_reason(), solo[i].last.finish_reason()) << i;
  }
}

TEST_F(ServerTest, StopStringCutsTheTextBeforeIt) {
  const Stream full = Collect(*client_, TextRequest("In the beginning", 24));
  ASSERT_TRUE(full.status.ok());
  // Starts inside the text (after " of the LORD, and "), spanning token boundaries.
  const size_t at = full.text.find("the clouds");
  ASSERT_NE(at, std::string::npos) << full.text;
  v1::GenerateRequest r = TextRequest("In the beginning", 24);
  r.add_stop("the clouds");
  const Stream s = Collect(*client_, r);
  ASSERT_TRUE(s.status.ok()) << s.status;
  EXPECT_EQ(s.text, full.text.substr(0, at));
  EXPECT_EQ(s.last.finish_reason(), v1::STOP);
}

TEST_F(ServerTest, LogprobsWhenAsked) {
  v1::GenerateRequest r = TextRequest("In the beginning", 6);
  r.set_logprobs(3);
  const Stream s = Collect(*client_, r);
  ASSERT_TRUE(s.status.ok()) << s.status;
  ASSERT_EQ(s.logprobs.size(), s.ids.size());
  for (size_t i = 0; i < s.ids.size(); ++i) {
    const v1::TokenLogprobs& lp = s.logprobs[i];
    EXPECT_EQ(lp.token_id(), s.ids[i]);
    EXPECT_LE(lp.logprob(), 0.0f);
    ASSERT_EQ(lp.top_size(), 3);
    // Greedy: the chosen token is the most likely one.
    EXPECT_EQ(lp.top(0).token_id(), s.ids[i]);
    EXPECT_FLOAT_EQ(lp.top(0).logprob(), lp.logprob());
    EXPECT_GE(lp.top(0).logprob(), lp.top(1).logprob());
  }
  // Without the request, no logprobs.
  EXPECT_TRUE(Collect(*client_, TextRequest("In the beginning", 6)).logprobs.empty());
}

// ---------------------------------------------------------------------------------------
// Cancellation, deadlines, queueing

TEST_F(ServerTest, CancellingStreamsReleasesTheirKvBlocksAndOthersFinish) {
  const PromText before = ScrapeWhenIdle(server_->metrics_port());
  const double cancelled_before =
      Metric(before, "quill_requests_total", {{"api", "grpc"}, {"outcome", "cancelled"}});
  constexpr int kStreams = 30, kCancel = 20, kTokens = 200;
  std::vector<Stream> streams(kStreams);
  std::vector<std::unique_ptr<client::GenerateCall>> calls;
  for (int i = 0; i < kStreams; ++i) calls.push_back(std::make_unique<client::GenerateCall>());
  std::vector<std::thread> threads;
  for (int i = 0; i < kStreams; ++i) {
    threads.emplace_back([&, i] {
      v1::GenerateRequest r = TextRequest(absl::StrCat("And the LORD said ", i), kTokens);
      r.set_ignore_eos(true);
      streams[i] = Collect(*client_, r, absl::Seconds(60), calls[i].get(),
                           [&, i](const Stream& s) {
                             // Cancel mid-generation, once tokens are flowing.
                             if (i < kCancel && s.messages == 1) calls[i]->Cancel();
                           });
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kStreams; ++i) {
    if (i < kCancel) {
      EXPECT_EQ(streams[i].status.code(), absl::StatusCode::kCancelled) << i;
      EXPECT_LT(streams[i].ids.size(), static_cast<size_t>(kTokens)) << i;
    } else {
      ASSERT_TRUE(streams[i].status.ok()) << i << ": " << streams[i].status;
      EXPECT_EQ(streams[i].ids.size(), static_cast<size_t>(kTokens)) << i;
      EXPECT_EQ(streams[i].last.finish_reason(), v1::LENGTH) << i;
    }
  }
  // The engine learns of each cancel within a step and releases the blocks.
  absl::StatusOr<PromText> after = ScrapeUntil(server_->metrics_port(), [&](const PromText& t) {
    return t.Value("quill_kv_cache_blocks_used") == 0.0 &&
           t.Value("quill_requests_total", {{"api", "grpc"}, {"outcome", "cancelled"}}) ==
               cancelled_before + kCancel;
  });
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(Metric(*after, "quill_kv_cache_blocks_used"), 0.0);
  EXPECT_EQ(Metric(*after, "quill_kv_cache_bytes_used"), 0.0);
  EXPECT_EQ(Metric(*after, "quill_requests_running"), 0.0);
  EXPECT_EQ(Metric(*after, "quill_requests_total", {{"api", "grpc"}, {"outcome", "cancelled"}}),
            cancelled_before + kCancel);
  EXPECT_EQ(server_->engine().gauges().kv_blocks_used, 0);
}

TEST_F(ServerTest, DeadlineExceeded) {
  v1::GenerateRequest r = TextRequest("In the beginning", 240);
  r.set_ignore_eos(true);
  // Alone, speculation would make the measured run several times faster than a stream
  // among 16 (too many decoders to draft), and the deadline too short for first tokens.
  r.set_disable_speculation(true);
  // The deadline is half of what one stream of 240 tokens takes alone, measured here so
  // that the test holds on a slow (sanitized, loaded) machine: 16 streams together need at
  // least as many steps, so none finishes, and half a run leaves time for first tokens.
  const absl::Time solo_start = absl::Now();
  ASSERT_TRUE(Collect(*client_, r).status.ok());
  const absl::Duration deadline = (absl::Now() - solo_start) / 2;
  // Idle means the solo run is counted in full (the gauges are published last), so that it
  // is not taken for one of the 16.
  const PromText before = ScrapeWhenIdle(server_->metrics_port());
  constexpr int kStreams = 16;
  std::vector<Stream> streams(kStreams);
  std::vector<std::thread> threads;
  for (int i = 0; i < kStreams; ++i) {
    threads.emplace_back([&, i] { streams[i] = Collect(*client_, r, deadline); });
  }
  for (std::thread& t : threads) t.join();
  int with_tokens = 0;
  for (const Stream& s : streams) {
    EXPECT_EQ(s.status.code(), absl::StatusCode::kDeadlineExceeded) << s.status;
    EXPECT_LT(s.ids.size(), 240u);
    if (!s.ids.empty()) ++with_tokens;
  }
  EXPECT_GT(with_tokens, 0);
  // Every request the engine accepted ends as "deadline" (not "cancelled"), and the blocks
  // come back. (Under heavy load gRPC may expire a call before it reaches the handler, so
  // the count is compared with the engine's own count of finished requests.)
  auto finished = [&](const PromText& t) {
    return t.HistogramCount("quill_request_duration_seconds").value_or(0) -
           before.HistogramCount("quill_request_duration_seconds").value_or(0);
  };
  auto outcome = [&](const PromText& t, const char* name) {
    return Metric(t, "quill_requests_total", {{"api", "grpc"}, {"outcome", name}}) -
           Metric(before, "quill_requests_total", {{"api", "grpc"}, {"outcome", name}});
  };
  const PromText after = ScrapeWhenIdle(server_->metrics_port());
  EXPECT_GE(finished(after), with_tokens);
  // A request whose deadline cannot cover the expected wait is refused at submission, as
  // "deadline" too but without a duration: at least every finished request, at most all.
  EXPECT_GE(outcome(after, "deadline"), finished(after));
  EXPECT_LE(outcome(after, "deadline"), kStreams);
  EXPECT_EQ(outcome(after, "cancelled"), 0);
  EXPECT_EQ(outcome(after, "length"), 0);
  EXPECT_EQ(Metric(after, "quill_kv_cache_blocks_used"), 0.0);
}

// --draft-model: the served model drafting for itself (same file, same precision), so
// every greedy draft should be accepted; the streams must still be the independent golden
// references, and /metrics must show the drafts.
TEST(ServerDraftModelTest, GreedyStreamsEqualTheGoldenReferenceAndDraftsAreCounted) {
  if (ModelPath().empty()) GTEST_SKIP() << "shared assets not found (QUILL_SHARED_DIR)";
  server::ServerOptions options = TestOptions();
  options.draft_model_path = ModelPath();
  absl::StatusOr<std::unique_ptr<server::Server>> server = server::Server::Create(options);
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<client::QuillClient> client = client::QuillClient::Connect((*server)->address());
  for (const GoldenGreedyCase& c : GoldenGreedyCases()) {
    const Stream s = Collect(*client, TextRequest(c.prompt, static_cast<int>(c.greedy_ids.size())));
    ASSERT_TRUE(s.status.ok()) << s.status;
    EXPECT_EQ(s.ids, c.greedy_ids) << c.prompt;
  }
  // The engine counts a step's drafts after the step's tokens are sent: a later one-token
  // request (it ends at its prefill, drafting nothing) shows that every earlier step is.
  ASSERT_TRUE(Collect(*client, TextRequest("Amen", 1)).status.ok());
  absl::StatusOr<PromText> text = ScrapeMetrics((*server)->metrics_port());
  ASSERT_TRUE(text.ok()) << text.status();
  const double drafted = Metric(*text, "quill_spec_draft_tokens_total");
  const double accepted = Metric(*text, "quill_spec_accepted_tokens_total");
  EXPECT_GT(drafted, 40);
  EXPECT_EQ(accepted, drafted);
}

TEST(ServerQueueTest, FullQueueIsResourceExhaustedAtOnce) {
  if (ModelPath().empty()) GTEST_SKIP() << "shared assets not found (QUILL_SHARED_DIR)";
  server::ServerOptions options = TestOptions();
  options.engine.kv_cache_bytes = kOneLongRequestOfKv;
  options.engine.max_queue = 2;
  absl::StatusOr<std::unique_ptr<server::Server>> server = server::Server::Create(options);
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<client::QuillClient> client = client::QuillClient::Connect((*server)->address());

  v1::GenerateRequest long_request = LongRequest();
  std::vector<client::GenerateCall> calls(2);
  std::vector<std::thread> threads;
  {
    const KvHog hog((*server)->address());
    EXPECT_TRUE(GaugeReaches((*server)->metrics_port(), "quill_requests_paused", 1));
    for (int i = 0; i < 2; ++i) {
      threads.emplace_back([&, i] { Collect(*client, long_request, absl::Seconds(60), &calls[i]); });
    }
    // Both wait for KV blocks (the queue is now full), and /metrics says so although the
    // engine has nothing to run...
    EXPECT_TRUE(GaugeReaches((*server)->metrics_port(), "quill_requests_waiting", 2));
    // ...so one more is refused immediately.
    const absl::Time start = absl::Now();
    const Stream refused = Collect(*client, TextRequest("Hear, O Israel", 4));
    EXPECT_EQ(refused.status.code(), absl::StatusCode::kResourceExhausted) << refused.status;
    EXPECT_LT(absl::Now() - start, absl::Seconds(5));
    EXPECT_EQ(refused.messages, 0);
    for (client::GenerateCall& call : calls) call.Cancel();
  }
  for (std::thread& t : threads) t.join();
  absl::StatusOr<PromText> text = ScrapeMetrics((*server)->metrics_port());
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(Metric(*text, "quill_requests_total", {{"api", "grpc"}, {"outcome", "rejected"}}), 1.0);
}

// Issue 10: a burst of 500 with 8 running rejected 470 while only 38 of 64 run slots were
// used, because every request that arrived during a step counted against max_queue. Now a
// request that finds a free slot and its KV blocks starts at once, and only requests that
// truly wait count: a burst of max_running + max_queue is always admitted in full.
TEST(ServerAdmissionTest, BurstOfRunSlotsPlusQueueIsAllAdmitted) {
  if (ModelPath().empty()) GTEST_SKIP() << "shared assets not found (QUILL_SHARED_DIR)";
  server::ServerOptions options = TestOptions();
  options.engine.max_running = 8;
  options.engine.max_queue = 2;
  absl::StatusOr<std::unique_ptr<server::Server>> server = server::Server::Create(options);
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<client::QuillClient> client = client::QuillClient::Connect((*server)->address());
  ASSERT_TRUE(client->WaitForConnected(absl::Seconds(10)).ok());
  constexpr int kBurst = 8 + 2;
  v1::GenerateRequest request = TextRequest("In the beginning", 48);
  request.set_ignore_eos(true);
  std::vector<Stream> streams(kBurst);
  absl::Notification go;
  std::vector<std::thread> threads;
  for (int i = 0; i < kBurst; ++i) {
    threads.emplace_back([&, i] {
      go.WaitForNotification();
      streams[i] = Collect(*client, request);
    });
  }
  go.Notify();
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kBurst; ++i) {
    EXPECT_TRUE(streams[i].status.ok()) << i << ": " << streams[i].status;
    EXPECT_EQ(streams[i].ids.size(), 48u) << i;
  }
  // Every outcome is counted before its client has the last message (or the refusal).
  absl::StatusOr<PromText> text = ScrapeMetrics((*server)->metrics_port());
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(Metric(*text, "quill_requests_total", {{"api", "grpc"}, {"outcome", "length"}}),
            kBurst);
  EXPECT_EQ(Metric(*text, "quill_requests_total", {{"api", "grpc"}, {"outcome", "rejected"}}), 0.0);
}

// A refusal for load tells the client when to come back: grpc-retry-pushback-ms, from the
// measured rate at which requests finish, within [100 ms, 30 s].
TEST(ServerAdmissionTest, FullQueueRefusalCarriesRetryPushback) {
  if (ModelPath().empty()) GTEST_SKIP() << "shared assets not found (QUILL_SHARED_DIR)";
  server::ServerOptions options = TestOptions();
  options.engine.kv_cache_bytes = kOneLongRequestOfKv;
  options.engine.max_running = 1;
  options.engine.max_queue = 1;
  absl::StatusOr<std::unique_ptr<server::Server>> server = server::Server::Create(options);
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<client::QuillClient> client = client::QuillClient::Connect((*server)->address());
  // Some finished requests first, so that there is a drain rate to speak of.
  v1::GenerateRequest warm = TextRequest("In the beginning", 100);
  warm.set_ignore_eos(true);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(Collect(*client, warm).status.ok());

  v1::GenerateRequest long_request = LongRequest();
  client::GenerateCall queued_call;
  std::thread queued;
  {
    const KvHog hog((*server)->address());
    EXPECT_TRUE(GaugeReaches((*server)->metrics_port(), "quill_requests_paused", 1));
    queued = std::thread([&] { Collect(*client, long_request, absl::Seconds(60), &queued_call); });
    EXPECT_TRUE(GaugeReaches((*server)->metrics_port(), "quill_requests_waiting", 1));

    // The KV cache held, one request queued: the next is refused, with a pushback trailer.
    std::unique_ptr<v1::Generator::Stub> stub = v1::Generator::NewStub(client->channel());
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
        stub->Generate(&context, TextRequest("Hear, O Israel", 4));
    v1::GenerateResponse response;
    EXPECT_FALSE(reader->Read(&response));
    const grpc::Status status = reader->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr("retry in about"));
    const auto& trailers = context.GetServerTrailingMetadata();
    auto it = trailers.find("grpc-retry-pushback-ms");
    int64_t ms = -1;
    if (it != trailers.end()) {
      EXPECT_TRUE(absl::SimpleAtoi(absl::string_view(it->second.data(), it->second.size()), &ms));
    } else {
      ADD_FAILURE() << "no grpc-retry-pushback-ms trailer";
    }
    EXPECT_GE(ms, 100);
    EXPECT_LE(ms, 30000);
    queued_call.Cancel();
  }
  queued.join();
}

// Issue 10, item 5: with the measured rates, a request whose deadline cannot cover its
// expected queue wait plus prefill is refused at once with DEADLINE_EXCEEDED (not queued
// to fail later) and counted under outcome="deadline".
TEST(ServerAdmissionTest, DeadlineThatCannotCoverTheQueueWaitIsRefusedAtOnce) {
  if (ModelPath().empty()) GTEST_SKIP() << "shared assets not found (QUILL_SHARED_DIR)";
  server::ServerOptions options = TestOptions();
  options.engine.max_running = 1;
  // And KV for one long request (16 blocks of 16 f32 tokens, 2 KiB each): a running request
  // whose client reads slowly is paused and gives up its run slot, but keeps its KV, so
  // the queue stays. Without it kjv-1m (~10k tokens/s) outran its clients on a fast host,
  // every request was admitted and paused in turn, and none queued.
  options.engine.kv_cache_bytes = 24 * 16 * 2048;
  options.engine.max_queue = 64;
  absl::StatusOr<std::unique_ptr<server::Server>> server = server::Server::Create(options);
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<client::QuillClient> client = client::QuillClient::Connect((*server)->address());
  v1::GenerateRequest long_request = LongRequest();
  // Speculation would run these 240 tokens in a few tens of ms, too fast for a queue to
  // last while the test looks at it.
  long_request.set_disable_speculation(true);
  // Solo runs: the engine measures about 1/solo requests per second, in windows of 100 ms
  // of engine work. Until one has closed it has no rate and refuses nothing, and three runs
  // of ~31 ms on a fast host did not always fill one (5 of 10 runs failed so). So at least
  // three runs and 400 ms.
  absl::Duration solo = absl::ZeroDuration();
  const absl::Time solo_runs_start = absl::Now();
  for (int i = 0; i < 3 || absl::Now() - solo_runs_start < absl::Milliseconds(400); ++i) {
    const absl::Time start = absl::Now();
    ASSERT_TRUE(Collect(*client, long_request).status.ok());
    solo = absl::Now() - start;
  }
  // Two solo runs of deadline (at least 300 ms, so the answer can come back in time).
  const absl::Duration deadline = std::max(2 * solo, absl::Milliseconds(300));
  // A newcomer expects to wait about a solo run for each request ahead of it, or less: the
  // engine's rate leaves out time stalled on slow clients. Queue enough for 3x the deadline:
  // on a fast machine (a 37 ms solo run) the 300 ms floor takes 25, where six used to do,
  // and a newcomer behind six was served in time.
  const double deadline_runs = absl::FDivDuration(deadline, solo);
  const int to_queue = std::min(60, std::max(6, static_cast<int>(std::ceil(3 * deadline_runs))));
  const int enough = std::max(3, static_cast<int>(std::ceil(2 * deadline_runs)));
  std::vector<client::GenerateCall> calls(1 + to_queue);
  absl::Notification first_token;
  std::vector<std::thread> threads;
  threads.emplace_back([&] {
    Collect(*client, long_request, absl::Seconds(60), &calls[0], [&](const Stream& s) {
      if (s.messages == 1) first_token.Notify();
    });
  });
  first_token.WaitForNotification();
  for (int i = 1; i <= to_queue; ++i) {
    threads.emplace_back([&, i] { Collect(*client, long_request, absl::Seconds(60), &calls[i]); });
  }
  // On a loaded machine the running request can finish (or pause, its client reading
  // slowly, and give up its slot) before all are queued; `enough` still puts 2x the
  // deadline between a newcomer and a slot. So the wait ends at all of them, or at `enough`
  // once the queue has stopped growing for 20 ms: waiting longer would let it drain.
  const absl::Time wait_until = absl::Now() + absl::Seconds(10);
  int queued = 0;
  int longest = 0;
  absl::Time grew = absl::Now();
  while ((queued = (*server)->engine().gauges().requests_waiting) < to_queue &&
         absl::Now() < wait_until) {
    if (queued > longest) {
      longest = queued;
      grew = absl::Now();
    }
    if (queued >= enough && absl::Now() - grew > absl::Milliseconds(20)) break;
    absl::SleepFor(absl::Milliseconds(1));
  }
  if (queued < enough) {
    ADD_FAILURE() << "only " << queued << " of " << to_queue << " requests queued (solo run "
                  << solo << ")";
    for (client::GenerateCall& call : calls) call.Cancel();
    for (std::thread& t : threads) t.join();
    return;
  }
  const PromText before = *ScrapeMetrics((*server)->metrics_port());

  const absl::Time start = absl::Now();
  const Stream late = Collect(*client, TextRequest("Hear, O Israel", 4), deadline);
  const absl::Duration answered = absl::Now() - start;
  EXPECT_EQ(late.status.code(), absl::StatusCode::kDeadlineExceeded) << late.status;
  EXPECT_THAT(std::string(late.status.message()), HasSubstr("cannot cover the expected queue wait"))
      << "solo run " << solo;
  EXPECT_LT(answered, deadline);
  EXPECT_EQ(late.messages, 0);
  for (client::GenerateCall& call : calls) call.Cancel();
  for (std::thread& t : threads) t.join();

  absl::StatusOr<PromText> after = ScrapeUntil((*server)->metrics_port(), [](const PromText& t) {
    return t.Value("quill_requests_running") == 0.0 && t.Value("quill_requests_waiting") == 0.0;
  });
  ASSERT_TRUE(after.ok()) << after.status();
  const Labels deadline_outcome = {{"api", "grpc"}, {"outcome", "deadline"}};
  EXPECT_EQ(Metric(*after, "quill_requests_total", deadline_outcome) -
                Metric(before, "quill_requests_total", deadline_outcome),
            1.0);
  EXPECT_EQ(Metric(*after, "quill_requests_total", {{"api", "grpc"}, {"outcome", "rejected"}}),
            0.0);
}

// ---------------------------------------------------------------------------------------
// Validation

struct BadRequest {
  const char* name;
  std::function<void(v1::GenerateRequest*)> mutate;
  const char* field;
};

TEST_F(ServerTest, InvalidRequestsAreInvalidArgumentNamingTheField) {
  const float nan = std::nanf("");
  const float inf = INFINITY;
  const std::vector<BadRequest> cases = {
      {"no prompt", [](auto* r) { r->clear_input(); }, "prompt"},
      {"empty prompt", [](auto* r) { r->set_prompt(""); }, "prompt"},
      {"id out of vocab", [](auto* r) { r->mutable_prompt_token_ids()->add_ids(1024); },
       "prompt_token_ids[0]"},
      {"negative id", [](auto* r) { r->mutable_prompt_token_ids()->add_ids(-5); },
       "prompt_token_ids[0]"},
      {"prompt beyond the context",
       [](auto* r) {
         std::string p;
         for (int i = 0; i < 300; ++i) p += "and ";
         r->set_prompt(p);
       },
       "prompt"},
      {"prompt + max_tokens beyond the context",
       [](auto* r) {
         r->set_prompt("In the beginning");  // 8 tokens
         r->set_max_tokens(250);
       },
       "max_tokens"},
      {"max_tokens 0", [](auto* r) { r->set_max_tokens(0); }, "max_tokens"},
      {"max_tokens above the limit", [](auto* r) { r->set_max_tokens(256); }, "max_tokens"},
      {"temperature NaN", [=](auto* r) { r->mutable_sampling()->set_temperature(nan); },
       "sampling.temperature"},
      {"temperature Inf", [=](auto* r) { r->mutable_sampling()->set_temperature(inf); },
       "sampling.temperature"},
      {"temperature negative", [](auto* r) { r->mutable_sampling()->set_temperature(-1); },
       "sampling.temperature"},
      {"top_p above 1", [](auto* r) { r->mutable_sampling()->set_top_p(1.5f); },
       "sampling.top_p"},
      {"top_p negative", [](auto* r) { r->mutable_sampling()->set_top_p(-0.1f); },
       "sampling.top_p"},
      {"top_k negative", [](auto* r) { r->mutable_sampling()->set_top_k(-2); },
       "sampling.top_k"},
      {"min_p above 1", [](auto* r) { r->mutable_sampling()->set_min_p(2); }, "sampling.min_p"},
      {"repetition_penalty negative",
       [](auto* r) { r->mutable_sampling()->set_repetition_penalty(-1); },
       "sampling.repetition_penalty"},
      {"logprobs 21", [](auto* r) { r->set_logprobs(21); }, "logprobs"},
      {"logprobs negative", [](auto* r) { r->set_logprobs(-1); }, "logprobs"},
      // Sent as raw bytes: protobuf logs an error when serializing, then sends them anyway.
      {"prompt not UTF-8", [](auto* r) { r->set_prompt("In the \xFF beginning"); }, "prompt"},
      {"stop not UTF-8",
       [](auto* r) {
         r->add_stop("ok");
         r->add_stop("\xC3\x28");
       },
       "stop[1]"},
      {"17 stop strings",
       [](auto* r) {
         for (int i = 0; i < 17; ++i) r->add_stop(absl::StrCat("s", i));
       },
       "stop"},
      {"stop of 257 bytes", [](auto* r) { r->add_stop(std::string(257, 'x')); }, "stop[0]"},
      {"stop_token_id out of vocab", [](auto* r) { r->add_stop_token_ids(99999); },
       "stop_token_ids[0]"},
      {"request_id forging a log line",
       [](auto* r) { r->set_request_id("x\nfinished request_id=forged reason=stop"); },
       "request_id"},
  };
  const double rejected_before =
      Metric(Scrape(), "quill_requests_total", {{"api", "grpc"}, {"outcome", "rejected"}});
  for (const BadRequest& c : cases) {
    v1::GenerateRequest request = TextRequest("In the beginning", 8);
    c.mutate(&request);
    const Stream s = Collect(*client_, request);
    EXPECT_EQ(s.status.code(), absl::StatusCode::kInvalidArgument) << c.name << ": " << s.status;
    EXPECT_THAT(std::string(s.status.message()), StartsWith(c.field)) << c.name;
    EXPECT_EQ(s.messages, 0) << c.name;
  }
  const PromText after = Scrape();
  EXPECT_EQ(Metric(after, "quill_requests_total", {{"api", "grpc"}, {"outcome", "rejected"}}),
            rejected_before + cases.size());
  EXPECT_EQ(Metric(after, "quill_kv_cache_blocks_used"), 0.0);
}

// Issue 10: a 3.9 MB prompt was tokenized whole (1.5 M tokens) before being refused, and
// Tokenize had no cap. Both are now refused by their size, before any tokenizing.
TEST_F(ServerTest, OversizedTextIsRefusedByItsSize) {
  const std::string text(3900000, 'a');
  const Stream s = Collect(*client_, TextRequest(text, 8));
  EXPECT_EQ(s.status.code(), absl::StatusCode::kInvalidArgument) << s.status;
  EXPECT_THAT(std::string(s.status.message()), StartsWith("request is 39000")) << s.status;
  absl::StatusOr<v1::TokenizeResponse> t = client_->Tokenize(text, true);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << t.status();
  EXPECT_THAT(std::string(t.status().message()), StartsWith("request is 39000"));
  // Text within the byte cap that encodes to more than the context is refused too.
  std::string long_text;
  for (int i = 0; i < 300; ++i) long_text += "and ";
  t = client_->Tokenize(long_text, true);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << t.status();
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("tokens; Tokenize returns at most 256"));
}

TEST_F(ServerTest, ChatWithoutATemplateIsFailedPreconditionAndPromptsStillWork) {
  // kjv-1m has no tokenizer.chat_template and this server has no --chat-template.
  const Stream chat = CollectChat(*client_, ChatRequestOf({{"user", "In the beginning"}}, 8));
  EXPECT_EQ(chat.status.code(), absl::StatusCode::kFailedPrecondition) << chat.status;
  EXPECT_THAT(std::string(chat.status.message()), HasSubstr("chat template"));
  EXPECT_EQ(chat.messages, 0);
  const Stream raw = Collect(*client_, TextRequest("In the beginning", 8));
  EXPECT_TRUE(raw.status.ok()) << raw.status;
  EXPECT_EQ(raw.ids.size(), 8u);
}

TEST_F(ServerTest, OversizeMessageIsRefusedByTheTransport) {
  // Above the 4 MiB receive limit: gRPC refuses it before any handler runs.
  const Stream s = Collect(*client_, TextRequest(std::string(5 << 20, 'a'), 8));
  EXPECT_EQ(s.status.code(), absl::StatusCode::kResourceExhausted) << s.status;
}

// ---------------------------------------------------------------------------------------
// Metrics

TEST_F(ServerTest, MetricsAgreeWithTheTrafficSent) {
  const PromText before = ScrapeWhenIdle(server_->metrics_port());
  auto delta = [&](const PromText& after, const std::string& name, const Labels& labels = {}) {
    return Metric(after, name, labels) - Metric(before, name, labels);
  };
  auto hist_delta = [&](const PromText& after, const std::string& name,
                        const Labels& labels = {}) {
    return after.HistogramCount(name, labels).value_or(-1) -
           before.HistogramCount(name, labels).value_or(-1);
  };

  std::vector<Stream> done;
  for (int n : {5, 6, 7}) {
    v1::GenerateRequest r = TextRequest("Blessed are the", n);
    r.set_ignore_eos(true);
    done.push_back(Collect(*client_, r));
    ASSERT_TRUE(done.back().status.ok());
    ASSERT_EQ(done.back().last.finish_reason(), v1::LENGTH);
  }
  v1::GenerateRequest stop = TextRequest("In the beginning", 24);
  stop.add_stop("clouds");
  done.push_back(Collect(*client_, stop));
  ASSERT_TRUE(done.back().status.ok());
  ASSERT_EQ(done.back().last.finish_reason(), v1::STOP);
  EXPECT_EQ(Collect(*client_, TextRequest("", 4)).status.code(),
            absl::StatusCode::kInvalidArgument);

  int prompt_tokens = 0, completion_tokens = 0, streamed = 0, gaps = 0, cached = 0;
  for (const Stream& s : done) {
    prompt_tokens += s.last.usage().prompt_tokens();
    cached += s.last.usage().cached_prompt_tokens();
    completion_tokens += s.last.usage().completion_tokens();
    streamed += static_cast<int>(s.ids.size());
    gaps += static_cast<int>(s.ids.size()) - 1;
  }
  EXPECT_EQ(streamed, completion_tokens);

  // Idle means the last request and its last step are recorded in full (the gauges are
  // published last).
  const PromText after = ScrapeWhenIdle(server_->metrics_port());
  EXPECT_EQ(delta(after, "quill_requests_total", {{"api", "grpc"}, {"outcome", "length"}}), 3);
  EXPECT_EQ(delta(after, "quill_requests_total", {{"api", "grpc"}, {"outcome", "stop"}}), 1);
  EXPECT_EQ(delta(after, "quill_requests_total", {{"api", "grpc"}, {"outcome", "rejected"}}), 1);
  EXPECT_EQ(delta(after, "quill_requests_total", {{"api", "grpc"}, {"outcome", "eos"}}), 0);
  EXPECT_EQ(delta(after, "quill_requests_total", {{"api", "grpc"}, {"outcome", "error"}}), 0);
  EXPECT_EQ(delta(after, "quill_prompt_tokens_total"), prompt_tokens);
  EXPECT_EQ(delta(after, "quill_generated_tokens_total"), completion_tokens);
  EXPECT_EQ(hist_delta(after, "quill_request_duration_seconds"), 4);
  EXPECT_EQ(hist_delta(after, "quill_time_to_first_token_seconds"), 4);
  EXPECT_EQ(hist_delta(after, "quill_queue_wait_seconds"), 4);
  EXPECT_EQ(hist_delta(after, "quill_prefill_duration_seconds"), 4);
  EXPECT_EQ(hist_delta(after, "quill_decode_duration_seconds"), 4);
  // One inter-token gap per streamed token after each request's first.
  EXPECT_EQ(hist_delta(after, "quill_inter_token_latency_seconds"), gaps);
  // Sequential requests: each step is one prefill or one decode; every token passes
  // through exactly one step, where a decode step also feeds its draft tokens and each
  // accepted draft is a token that needed no step of its own.
  const double steps =
      hist_delta(after, "quill_engine_step_duration_seconds", {{"phase", "prefill"}}) +
      hist_delta(after, "quill_engine_step_duration_seconds", {{"phase", "decode"}}) +
      hist_delta(after, "quill_engine_step_duration_seconds", {{"phase", "mixed"}});
  EXPECT_EQ(hist_delta(after, "quill_batch_tokens"), steps);
  EXPECT_EQ(after.HistogramSum("quill_batch_tokens").value_or(0) -
                before.HistogramSum("quill_batch_tokens").value_or(0),
            prompt_tokens - cached + gaps - delta(after, "quill_spec_accepted_tokens_total") +
                delta(after, "quill_spec_draft_tokens_total"));  // cached: not prefilled
  EXPECT_EQ(Metric(after, "quill_requests_running"), 0);
  EXPECT_EQ(Metric(after, "quill_requests_waiting"), 0);
  EXPECT_EQ(Metric(after, "quill_kv_cache_blocks_used"), 0);
  EXPECT_EQ(Metric(after, "quill_kv_cache_capacity_blocks"),
            server_->engine().gauges().kv_blocks_total);
  EXPECT_GT(Metric(after, "quill_process_resident_memory_bytes"), 1e6);
  absl::StatusOr<v1::ModelInfo> info = client_->GetModelInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(Metric(after, "quill_model_weights_bytes"), info->weights_bytes());
}

// ---------------------------------------------------------------------------------------
// Other RPCs

TEST_F(ServerTest, HealthIsServing) {
  absl::StatusOr<client::HealthStatus> all = client_->Health("");
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(*all, client::HealthStatus::kServing);
  absl::StatusOr<client::HealthStatus> generator = client_->Health("quill.v1.Generator");
  ASSERT_TRUE(generator.ok()) << generator.status();
  EXPECT_EQ(*generator, client::HealthStatus::kServing);
  EXPECT_EQ(client_->Health("no.such.Service").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ServerTest, ModelInfoDescribesKjv) {
  absl::StatusOr<v1::ModelInfo> info = client_->GetModelInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  // Figures from ../shared/models/README.md.
  EXPECT_EQ(info->architecture(), "llama");
  EXPECT_EQ(info->vocab_size(), 1024);
  EXPECT_EQ(info->context_length(), 256);
  EXPECT_EQ(info->embedding_length(), 128);
  EXPECT_EQ(info->block_count(), 4);
  EXPECT_EQ(info->head_count(), 4);
  EXPECT_EQ(info->head_count_kv(), 2);
  EXPECT_EQ(info->feed_forward_length(), 384);
  EXPECT_EQ(info->parameter_count(), 1049728);
  EXPECT_EQ(info->kv_bytes_per_token(), 2 * 4 * 2 * 32 * 4);  // f32 K and V
  EXPECT_EQ(info->kv_cache_type(), "f32");
  EXPECT_EQ(info->weight_type(), "F32");
  EXPECT_EQ(info->precision(), "exact");
  EXPECT_EQ(info->bos_token_id(), 1);
  EXPECT_EQ(info->eos_token_id(), 2);
  EXPECT_EQ(info->path(), "kjv-1m.gguf");  // the file name, not where the server keeps it
  // Packed weights: at most 4 bytes per parameter (F32), and most of the model.
  EXPECT_GT(info->weights_bytes(), 2 * 1049728);
  EXPECT_LE(info->weights_bytes(), 4 * 1049728);
  // What the engine holds, as it reports it; the F32 embedding (1024 x 128) stays mapped.
  EXPECT_EQ(info->weights_bytes(), server_->engine().model().weight_bytes());
  EXPECT_EQ(info->mapped_weights_bytes(), server_->engine().model().mapped_weight_bytes());
  EXPECT_EQ(info->mapped_weights_bytes(), 1024 * 128 * 4);
  EXPECT_GT(info->resident_memory_bytes(), 0);  // this test process's, read per request
  const engine::EngineOptions& options = TestOptions().engine;
  EXPECT_EQ(info->limits().max_tokens(), 255);
  EXPECT_EQ(info->limits().max_prompt_tokens(), 255);
  EXPECT_EQ(info->limits().max_batch_tokens(), options.max_batch_tokens);
  EXPECT_EQ(info->limits().prefill_chunk_tokens(), options.prefill_chunk_tokens);
  EXPECT_EQ(info->limits().max_running(), options.max_running);
  EXPECT_EQ(info->limits().max_queue(), 100);
  EXPECT_EQ(info->limits().kv_block_size_tokens(), 16);
  EXPECT_EQ(info->limits().kv_cache_blocks(), (32 << 20) / (2048 * 16));  // 2 KiB per token
  EXPECT_EQ(info->limits().kv_cache_bytes(), 32 << 20);
}

TEST_F(ServerTest, TokenizeMatchesTheGoldenIds) {
  absl::StatusOr<v1::TokenizeResponse> t = client_->Tokenize("In the beginning", true);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(t->token_ids(), ::testing::ElementsAre(1, 299, 958, 261, 811, 267, 958, 294));
  EXPECT_EQ(t->pieces_size(), t->token_ids_size());
  EXPECT_EQ(t->text(), "In the beginning");
  absl::StatusOr<v1::TokenizeResponse> raw = client_->Tokenize("In the beginning", false);
  ASSERT_TRUE(raw.ok()) << raw.status();
  EXPECT_EQ(raw->token_ids_size(), 7);  // no BOS
  v1::TokenizeRequest bad;
  bad.set_text("caf\xC3");
  EXPECT_EQ(client_->Tokenize(bad).status().code(), absl::StatusCode::kInvalidArgument);
}

// grpc.reflection.v1alpha over a generic stub (no reflection client library in Debian):
// ServerReflectionRequest{list_services: ""} is the two bytes 0x3a 0x00.
TEST_F(ServerTest, ReflectionListsTheServices) {
  grpc::GenericStub stub(client_->channel());
  grpc::CompletionQueue cq;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call = stub.PrepareCall(
      &context, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  void* tag;
  bool ok;
  auto step = [&](intptr_t want) {
    ASSERT_TRUE(cq.Next(&tag, &ok));
    ASSERT_EQ(reinterpret_cast<intptr_t>(tag), want);
    ASSERT_TRUE(ok);
  };
  call->StartCall(reinterpret_cast<void*>(1));
  step(1);
  const std::string request("\x3a\x00", 2);
  grpc::Slice slice(request);
  grpc::ByteBuffer out(&slice, 1);
  call->Write(out, reinterpret_cast<void*>(2));
  step(2);
  grpc::ByteBuffer in;
  call->Read(&in, reinterpret_cast<void*>(3));
  step(3);
  call->WritesDone(reinterpret_cast<void*>(4));
  step(4);
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  step(5);
  EXPECT_TRUE(status.ok()) << status.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(in.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  EXPECT_THAT(bytes, HasSubstr("quill.v1.Generator"));
  EXPECT_THAT(bytes, HasSubstr("grpc.health.v1.Health"));
}

}  // namespace
}  // namespace quill::testing

namespace quill::testing {
namespace {

// A prompt of several full KV blocks (16 tokens each), made unique per test so that no
// other test has cached it.
std::string LongPrompt(const std::string& tag) {
  return absl::StrCat(tag,
                      " And God said, Let there be light: and there was light. And God saw "
                      "the light, that it was good: and God divided the light from the "
                      "darkness. And God called the light Day, and the darkness he called "
                      "Night.");
}

TEST_F(ServerTest, SharedPrefixIsReportedInUsageAndCountedInMetrics) {
  const PromText before = ScrapeWhenIdle(server_->metrics_port());
  const std::string prefix = LongPrompt("Prefix cache gRPC.");
  v1::GenerateRequest first = TextRequest(prefix, 8);
  first.set_ignore_eos(true);
  const Stream a = Collect(*client_, first);
  ASSERT_TRUE(a.status.ok()) << a.status;
  const int prompt = a.last.usage().prompt_tokens();
  ASSERT_GE(prompt, 40);
  EXPECT_EQ(a.last.usage().cached_prompt_tokens(), 0);  // nothing like it ran before

  // The same prompt again: every full block but the one holding the last prompt token
  // comes from the cache, and the output is the same (exact precision).
  const Stream b = Collect(*client_, first);
  ASSERT_TRUE(b.status.ok()) << b.status;
  EXPECT_EQ(b.last.usage().cached_prompt_tokens(), (prompt - 1) / 16 * 16);
  EXPECT_EQ(b.ids, a.ids);

  // A different ending after the shared prefix reuses the prefix's full blocks.
  v1::GenerateRequest other = TextRequest(prefix + " And the evening and the morning", 8);
  other.set_ignore_eos(true);
  const Stream c = Collect(*client_, other);
  ASSERT_TRUE(c.status.ok()) << c.status;
  EXPECT_GE(c.last.usage().cached_prompt_tokens(), 32);
  EXPECT_EQ(c.last.usage().cached_prompt_tokens() % 16, 0);
  EXPECT_LT(c.last.usage().cached_prompt_tokens(), c.last.usage().prompt_tokens());

  const double hits = b.last.usage().cached_prompt_tokens() + c.last.usage().cached_prompt_tokens();
  const double queried = 2 * prompt + c.last.usage().prompt_tokens();
  // The prefix counters are recorded with each step, which the client may see end first:
  // idle, every step of the three requests is in.
  const PromText after = ScrapeWhenIdle(server_->metrics_port());
  EXPECT_EQ(Metric(after, "quill_prefix_cache_hit_tokens_total") -
                Metric(before, "quill_prefix_cache_hit_tokens_total"),
            hits);
  EXPECT_EQ(Metric(after, "quill_prefix_cache_query_tokens_total") -
                Metric(before, "quill_prefix_cache_query_tokens_total"),
            queried);
  // Cached, yet free: ScrapeWhenIdle saw no block in use.
  EXPECT_GE(Metric(after, "quill_prefix_cache_blocks"), 2);
}

}  // namespace
}  // namespace quill::testing
