#include "client/bench/load_generator.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "client/bench/http_streamer.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace quill::bench {
namespace {

TEST(HttpStreamerTest, RequestBodyAndTokenCounts) {
  quill::v1::GenerateRequest request;
  for (int id : {1, 50, 60}) request.mutable_prompt_token_ids()->add_ids(id);
  request.set_max_tokens(8);
  request.set_ignore_eos(true);
  request.mutable_sampling()->set_temperature(0.5f);
  request.mutable_sampling()->set_seed(9);
  const std::string body = CompletionBodyFor(request);
  EXPECT_THAT(body, ::testing::HasSubstr(R"("prompt":[1,50,60])"));
  EXPECT_THAT(body, ::testing::HasSubstr(R"("max_tokens":8)"));
  EXPECT_THAT(body, ::testing::HasSubstr(R"("ignore_eos":true)"));
  EXPECT_THAT(body, ::testing::HasSubstr(R"("stream":true)"));
  EXPECT_THAT(body, ::testing::HasSubstr(R"("continuous_usage_stats":true)"));
  EXPECT_THAT(body, ::testing::HasSubstr(R"("seed":9)"));
  EXPECT_THAT(body, ::testing::HasSubstr(R"("disable_speculation":false)"));
  request.set_disable_speculation(true);
  EXPECT_THAT(CompletionBodyFor(request), ::testing::HasSubstr(R"("disable_speculation":true)"));
  EXPECT_EQ(CompletionTokensOf(R"({"usage":{"completion_tokens":12,"prompt_tokens":3}})"), 12);
  EXPECT_EQ(CompletionTokensOf(R"({"usage":null})"), -1);
}

TEST(MakePromptIdsTest, ExactLengthBosFirstNoSpecials) {
  std::mt19937_64 rng(1);
  for (int length : {1, 2, 17, 200}) {
    std::vector<int32_t> ids =
        MakePromptIds(length, /*vocab_size=*/1024, /*bos=*/1, /*eos=*/2, rng);
    ASSERT_EQ(ids.size(), static_cast<size_t>(length));
    EXPECT_EQ(ids[0], 1);
    for (size_t i = 1; i < ids.size(); ++i) {
      EXPECT_GE(ids[i], 3) << "control ids 0..2 must not appear after BOS";
      EXPECT_LT(ids[i], 1024);
    }
  }
}

TEST(MakePromptIdsTest, HighSpecialIdsAreExcludedButLowIdsAllowed) {
  // GPT-2 style: BOS = EOS = 50256, the last id; id 0 is an ordinary token.
  std::mt19937_64 rng(2);
  std::vector<int32_t> ids = MakePromptIds(5000, 50257, 50256, 50256, rng);
  ASSERT_EQ(ids.size(), 5000u);
  EXPECT_EQ(ids[0], 50256);
  std::set<int32_t> rest(ids.begin() + 1, ids.end());
  EXPECT_EQ(rest.count(50256), 0u);
  EXPECT_LT(*rest.begin(), 100) << "low ids should be drawn too";
}

TEST(MakePromptIdsTest, SameSeedSamePrompt) {
  std::mt19937_64 a(7), b(7), c(8);
  EXPECT_EQ(MakePromptIds(32, 1024, 1, 2, a), MakePromptIds(32, 1024, 1, 2, b));
  std::mt19937_64 a2(7);
  EXPECT_NE(MakePromptIds(32, 1024, 1, 2, a2), MakePromptIds(32, 1024, 1, 2, c));
}

TEST(ArrivalScheduleTest, PoissonMeanGapIsOneOverRate) {
  ArrivalSchedule schedule(/*rate=*/50.0, /*seed=*/3);
  absl::Duration previous = absl::ZeroDuration();
  double sum = 0, sum_sq = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    absl::Duration next = schedule.Next();
    const double gap = absl::ToDoubleSeconds(next - previous);
    ASSERT_GT(gap, 0);
    sum += gap;
    sum_sq += gap * gap;
    previous = next;
  }
  const double mean = sum / n;
  const double stddev = std::sqrt(sum_sq / n - mean * mean);
  // Exponential gaps: mean = stddev = 1/rate = 20 ms. With 20000 samples the standard error
  // of the mean is 0.7%, so 5% bounds never fail for a fixed seed unless the code is wrong.
  EXPECT_NEAR(mean, 0.02, 0.001);
  EXPECT_NEAR(stddev, 0.02, 0.001);
}

TEST(AggregateTest, CountsThroughputAndPercentiles) {
  BenchOptions options;
  std::vector<RequestRecord> records(4);
  for (int i = 0; i < 3; ++i) {
    records[i].ttft = 0.010 * (i + 1);  // 10, 20, 30 ms
    records[i].e2e = 0.100 * (i + 1);   // 100, 200, 300 ms
    records[i].itl = {0.001 * (i + 1)};
    records[i].output_tokens = 10;
    records[i].prompt_tokens = 5;
  }
  records[3].code = absl::StatusCode::kUnavailable;
  records[3].message = "queue full";
  BenchReport report = Aggregate(options, records, /*duration_seconds=*/2.0, /*late=*/0);
  EXPECT_EQ(report.completed, 3);
  EXPECT_EQ(report.failed, 1);
  EXPECT_EQ(report.errors.at("UNAVAILABLE"), 1);
  EXPECT_EQ(report.error_examples.at("UNAVAILABLE"), "queue full");
  EXPECT_EQ(report.output_tokens, 30);
  EXPECT_EQ(report.prompt_tokens, 15);
  EXPECT_DOUBLE_EQ(report.request_throughput, 1.5);
  EXPECT_DOUBLE_EQ(report.output_token_throughput, 15.0);
  EXPECT_DOUBLE_EQ(report.total_token_throughput, 22.5);
  EXPECT_NEAR(report.ttft_ms.p50, 20, 1e-9);
  EXPECT_NEAR(report.ttft_ms.p99, 30, 1e-9);
  EXPECT_NEAR(report.e2e_ms.min, 100, 1e-9);
  EXPECT_NEAR(report.itl_ms.max, 3, 1e-9);
  // TPOT of the first request: (100 - 10) ms over 9 later tokens.
  EXPECT_NEAR(report.tpot_ms.min, 10, 1e-9);
  nlohmann::json json = ReportToJson(report);
  EXPECT_EQ(json["completed"], 3);
  EXPECT_EQ(json["errors"]["UNAVAILABLE"]["count"], 1);
  EXPECT_EQ(json["config"]["mode"], "closed-loop");
}

TEST(AggregateTest, WarmupRequestsCountInThroughputNotInLatencies) {
  BenchOptions options;
  options.warmup_requests = 2;
  std::vector<RequestRecord> records(4);
  for (int i = 0; i < 4; ++i) {
    records[i].ttft = 0.010 * (i + 1);  // 10, 20, 30, 40 ms
    records[i].e2e = 0.100 * (i + 1);
    records[i].itl = {0.001 * (i + 1)};
    records[i].output_tokens = 10;
    records[i].warmup = i < 2;
  }
  BenchReport report = Aggregate(options, records, /*duration_seconds=*/2.0, /*late=*/0);
  EXPECT_EQ(report.completed, 4);
  EXPECT_DOUBLE_EQ(report.output_token_throughput, 20.0);
  EXPECT_EQ(report.ttft_ms.count, 2u);
  EXPECT_NEAR(report.ttft_ms.min, 30, 1e-9);
  EXPECT_EQ(report.itl_ms.count, 2u);
  EXPECT_NEAR(report.itl_ms.min, 3, 1e-9);
  EXPECT_EQ(report.e2e_ms.count, 2u);
  EXPECT_EQ(report.tpot_ms.count, 2u);
  EXPECT_EQ(ReportToJson(report)["config"]["warmup_requests"], 2);
  EXPECT_NE(FormatReport(report).find("first 2 (not in the latencies)"), std::string::npos);
}

// Streams max_tokens one-token messages; every third request fails with UNAVAILABLE.
class FakeGenerator final : public quill::v1::Generator::Service {
 public:
  grpc::Status Generate(grpc::ServerContext*, const quill::v1::GenerateRequest* request,
                        grpc::ServerWriter<quill::v1::GenerateResponse>* writer) override {
    if (request->disable_speculation()) ++speculation_disabled_;
    if (++calls_ % 3 == 0) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "inbox full");
    if (request->prompt_token_ids().ids_size() != expected_prompt_tokens_ ||
        !request->ignore_eos()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "unexpected request shape");
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      prompts_.emplace_back(request->prompt_token_ids().ids().begin(),
                            request->prompt_token_ids().ids().end());
    }
    for (int i = 0; i < request->max_tokens(); ++i) {
      quill::v1::GenerateResponse response;
      response.add_token_ids(i);
      writer->Write(response);
    }
    return grpc::Status::OK;
  }
  std::atomic<int> calls_{0};
  std::atomic<int> speculation_disabled_{0};  // requests that opted out
  int expected_prompt_tokens_ = 8;
  std::mutex mu_;
  std::vector<std::vector<int>> prompts_;  // guarded by mu_
};

// A model of 1024 tokens and a 256-token context, BOS 1 and EOS 2.
quill::v1::ModelInfo FakeModelInfo() {
  quill::v1::ModelInfo info;
  info.set_vocab_size(1024);
  info.set_context_length(256);
  info.set_bos_token_id(1);
  info.set_eos_token_id(2);
  return info;
}

// Runs `options` against `service`, served on 127.0.0.1 for the length of the run.
absl::StatusOr<BenchReport> RunAgainst(FakeGenerator& service, const BenchOptions& options,
                                       std::function<void(const BenchProgress&)> progress) {
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) return absl::InternalError("the fake server did not start");
  std::unique_ptr<client::QuillClient> client =
      client::QuillClient::Connect("127.0.0.1:" + std::to_string(port));
  absl::StatusOr<BenchReport> report =
      RunBench(*client, FakeModelInfo(), options, std::move(progress), absl::Milliseconds(1));
  server->Shutdown();
  return report;
}

TEST(RunBenchTest, ClosedLoopAgainstFakeServer) {
  FakeGenerator service;
  BenchOptions options;
  options.concurrency = 3;
  options.requests = 9;
  options.prompt_tokens = 8;
  options.max_tokens = 5;
  std::atomic<int> progress_calls{0};
  absl::StatusOr<BenchReport> report =
      RunAgainst(service, options, [&](const BenchProgress&) { ++progress_calls; });
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(service.calls_.load(), 9);
  EXPECT_EQ(service.speculation_disabled_.load(), 0);
  EXPECT_EQ(report->completed, 6);
  EXPECT_EQ(report->failed, 3);
  EXPECT_EQ(report->errors.at("UNAVAILABLE"), 3);
  EXPECT_EQ(report->output_tokens, 30);
  EXPECT_EQ(report->prompt_tokens, 48);
  EXPECT_EQ(report->ttft_ms.count, 6u);
  EXPECT_EQ(report->itl_ms.count, 24u);  // 4 gaps per successful request
  EXPECT_LE(report->e2e_ms.p50, report->e2e_ms.p90);
  EXPECT_LE(report->e2e_ms.p90, report->e2e_ms.p99);
  EXPECT_GT(report->request_throughput, 0);
}

TEST(RunBenchTest, WarmupLeavesTheFirstRequestsOutOfTheLatencies) {
  FakeGenerator service;
  BenchOptions options;
  options.concurrency = 1;  // one worker: requests start in index order
  options.requests = 6;
  options.warmup_requests = 4;
  options.prompt_tokens = 8;
  options.max_tokens = 3;
  absl::StatusOr<BenchReport> report = RunAgainst(service, options, nullptr);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(service.calls_.load(), 6);
  // Calls 3 and 6 fail; of the 4 successes, requests 5 (index 4) alone is measured.
  EXPECT_EQ(report->completed, 4);
  EXPECT_EQ(report->output_tokens, 12);
  EXPECT_EQ(report->ttft_ms.count, 1u);
  EXPECT_EQ(report->itl_ms.count, 2u);
}

TEST(RunBenchTest, WarmupMustLeaveRequestsToMeasure) {
  FakeGenerator service;
  BenchOptions options;
  options.requests = 4;
  options.warmup_requests = 4;
  absl::StatusOr<BenchReport> report = RunAgainst(service, options, nullptr);
  EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(report.status().message().find("--warmup (4) must be below --requests (4)"),
            std::string::npos);
  EXPECT_EQ(service.calls_.load(), 0);
}

TEST(RunBenchTest, DisableSpeculationReachesEveryRequest) {
  FakeGenerator service;
  BenchOptions options;
  options.concurrency = 2;
  options.requests = 4;
  options.prompt_tokens = 8;
  options.max_tokens = 2;
  options.disable_speculation = true;
  absl::StatusOr<BenchReport> report = RunAgainst(service, options, nullptr);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(service.calls_.load(), 4);
  EXPECT_EQ(service.speculation_disabled_.load(), 4);
  EXPECT_EQ(ReportToJson(*report)["config"]["disable_speculation"], true);
}

TEST(RunBenchTest, SharedPrefixStartsEveryPromptThenOwnIds) {
  FakeGenerator service;
  service.expected_prompt_tokens_ = 20 + 8;
  BenchOptions options;
  options.concurrency = 2;
  options.requests = 4;
  options.shared_prefix_tokens = 20;
  options.prompt_tokens = 8;
  options.max_tokens = 2;
  absl::StatusOr<BenchReport> report = RunAgainst(service, options, nullptr);
  ASSERT_TRUE(report.ok()) << report.status();
  std::lock_guard<std::mutex> lock(service.mu_);
  ASSERT_EQ(service.prompts_.size(), 3u);  // the third call fails by design
  const std::vector<int>& first = service.prompts_[0];
  EXPECT_EQ(first[0], 1);  // BOS once, at the start
  for (const std::vector<int>& p : service.prompts_) {
    EXPECT_TRUE(std::equal(first.begin(), first.begin() + 20, p.begin()));
    EXPECT_EQ(std::count(p.begin(), p.end(), 1), 1);
  }
  // The prompts' own parts differ.
  EXPECT_FALSE(std::equal(first.begin() + 20, first.end(), service.prompts_[1].begin() + 20));
}

TEST(RunBenchTest, RejectsPromptsLongerThanTheContext) {
  std::unique_ptr<client::QuillClient> client = client::QuillClient::Connect("127.0.0.1:1");
  quill::v1::ModelInfo info;
  info.set_vocab_size(1024);
  info.set_context_length(64);
  BenchOptions options;
  options.prompt_tokens = 60;
  options.max_tokens = 8;
  EXPECT_EQ(RunBench(*client, info, options).status().code(), absl::StatusCode::kInvalidArgument);
  options.prompt_tokens = 20;
  options.shared_prefix_tokens = 40;  // 40 + 20 + 8 > 64
  EXPECT_EQ(RunBench(*client, info, options).status().code(), absl::StatusCode::kInvalidArgument);
  options.shared_prefix_tokens = 0;
  options.prompt_tokens = 8;
  options.requests = 0;  // and no duration: would never end
  EXPECT_EQ(RunBench(*client, info, options).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace quill::bench
