#include "server/metrics/quill_metrics.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/exposer.h"
#include "server/metrics/process_metrics.h"
#include "tests/testing/http_get.h"
#include "tests/testing/prometheus_text.h"

namespace quill::server {
namespace {

using quill::testing::PromText;

PromText Parse(const QuillMetrics& metrics) {
  absl::StatusOr<PromText> text = PromText::Parse(metrics.TextExposition());
  EXPECT_TRUE(text.ok()) << text.status() << "\n" << metrics.TextExposition();
  return text.ok() ? *text : PromText();
}

TEST(QuillMetricsTest, ExportsEveryFamilyWithTypeAndHelp) {
  QuillMetrics metrics;
  const PromText text = Parse(metrics);
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"quill_time_to_first_token_seconds", "histogram"},
      {"quill_inter_token_latency_seconds", "histogram"},
      {"quill_request_duration_seconds", "histogram"},
      {"quill_queue_wait_seconds", "histogram"},
      {"quill_prefill_duration_seconds", "histogram"},
      {"quill_decode_duration_seconds", "histogram"},
      {"quill_engine_step_duration_seconds", "histogram"},
      {"quill_batch_tokens", "histogram"},
      {"quill_requests_total", "counter"},
      {"quill_prompt_tokens_total", "counter"},
      {"quill_generated_tokens_total", "counter"},
      {"quill_reasoning_tokens_total", "counter"},
      {"quill_prefix_cache_query_tokens_total", "counter"},
      {"quill_prefix_cache_hit_tokens_total", "counter"},
      {"quill_spec_draft_tokens_total", "counter"},
      {"quill_spec_accepted_tokens_total", "counter"},
      {"quill_prefix_cache_blocks", "gauge"},
      {"quill_requests_running", "gauge"},
      {"quill_requests_waiting", "gauge"},
      {"quill_requests_paused", "gauge"},
      {"quill_kv_cache_capacity_blocks", "gauge"},
      {"quill_kv_cache_blocks_used", "gauge"},
      {"quill_kv_cache_bytes_used", "gauge"},
      {"quill_kv_cache_usage_ratio", "gauge"},
      {"quill_model_weights_bytes", "gauge"},
      {"quill_process_resident_memory_bytes", "gauge"},
  };
  for (const auto& [name, type] : expected) {
    const quill::testing::PromFamily* family = text.Family(name);
    ASSERT_NE(family, nullptr) << name;
    EXPECT_EQ(family->type, type) << name;
    EXPECT_GT(family->help.size(), 20u) << name;
  }
  // Every outcome of both front ends exists from the start (at 0), so rates work before
  // the first event.
  for (const char* api : {"grpc", "http"}) {
    for (const char* outcome :
         {"length", "stop", "eos", "cancelled", "deadline", "stalled", "rejected", "error",
          "shutdown"}) {
      EXPECT_EQ(text.Value("quill_requests_total", {{"api", api}, {"outcome", outcome}}), 0.0)
          << api << " " << outcome;
    }
  }
  EXPECT_EQ(text.Family("quill_requests_total")->samples.size(), 18u);
  for (const char* phase : {"prefill", "decode", "mixed"}) {
    EXPECT_EQ(text.HistogramCount("quill_engine_step_duration_seconds", {{"phase", phase}}), 0.0);
  }
}

TEST(QuillMetricsTest, RequestsCountByOutcomeWithTokensAndLatencies) {
  QuillMetrics metrics;
  engine::FinishInfo done;
  done.reason = engine::FinishReason::kLength;
  done.prompt_tokens = 7;
  done.completion_tokens = 5;
  done.timings.queue_wait = absl::Milliseconds(2);
  done.timings.prefill = absl::Milliseconds(3);
  done.timings.time_to_first_token = absl::Milliseconds(6);
  done.timings.decode = absl::Milliseconds(40);
  done.timings.total = absl::Milliseconds(46);
  metrics.OnRequestFinished(done);
  done.reason = engine::FinishReason::kEos;
  done.reasoning_tokens = 3;  // a reasoning model's chat: 3 of its 5 tokens thought
  metrics.OnRequestFinished(done);
  done.reasoning_tokens.reset();

  // Cancelled while still queued: no admission, no first token.
  engine::FinishInfo queued;
  queued.reason = engine::FinishReason::kCancelled;
  queued.status = absl::CancelledError("cancelled");
  queued.prompt_tokens = 4;
  queued.timings.queue_wait = absl::Milliseconds(9);
  queued.timings.total = absl::Milliseconds(9);
  metrics.OnRequestFinished(queued);
  metrics.RecordRejected();
  metrics.RecordRejected();
  // One over HTTP: the engine hands back the request's frontend label.
  done.reason = engine::FinishReason::kStop;
  done.frontend = "http";
  metrics.OnRequestFinished(done);
  metrics.RecordRejected(Api::kHttp);

  const PromText text = Parse(metrics);
  const auto grpc = [](const char* outcome) {
    return quill::testing::Labels{{"api", "grpc"}, {"outcome", outcome}};
  };
  const auto http = [](const char* outcome) {
    return quill::testing::Labels{{"api", "http"}, {"outcome", outcome}};
  };
  EXPECT_EQ(text.Value("quill_requests_total", grpc("length")), 1.0);
  EXPECT_EQ(text.Value("quill_requests_total", grpc("eos")), 1.0);
  EXPECT_EQ(text.Value("quill_requests_total", grpc("cancelled")), 1.0);
  EXPECT_EQ(text.Value("quill_requests_total", grpc("rejected")), 2.0);
  EXPECT_EQ(text.Value("quill_requests_total", grpc("stop")), 0.0);
  EXPECT_EQ(text.Value("quill_requests_total", http("stop")), 1.0);
  EXPECT_EQ(text.Value("quill_requests_total", http("rejected")), 1.0);
  EXPECT_EQ(text.Value("quill_requests_total", http("length")), 0.0);
  EXPECT_EQ(text.Value("quill_prompt_tokens_total"), 25.0);
  EXPECT_EQ(text.Value("quill_generated_tokens_total"), 15.0);
  EXPECT_EQ(text.Value("quill_reasoning_tokens_total"), 3.0);
  EXPECT_EQ(text.HistogramCount("quill_request_duration_seconds"), 4.0);
  EXPECT_EQ(text.HistogramCount("quill_time_to_first_token_seconds"), 3.0);
  EXPECT_EQ(text.HistogramCount("quill_queue_wait_seconds"), 3.0);
  EXPECT_EQ(text.HistogramCount("quill_prefill_duration_seconds"), 3.0);
  EXPECT_EQ(text.HistogramCount("quill_decode_duration_seconds"), 3.0);
  EXPECT_NEAR(*text.HistogramSum("quill_time_to_first_token_seconds"), 0.018, 1e-9);
  EXPECT_NEAR(*text.HistogramSum("quill_request_duration_seconds"), 0.147, 1e-9);
  // 6 ms falls in the (5 ms, 10 ms] TTFT bucket.
  EXPECT_EQ(text.Value("quill_time_to_first_token_seconds_bucket", {{"le", "0.005"}}), 0.0);
  EXPECT_EQ(text.Value("quill_time_to_first_token_seconds_bucket", {{"le", "0.01"}}), 3.0);
}

TEST(QuillMetricsTest, StepsFeedPhaseHistogramsBatchTokensItlAndGauges) {
  QuillMetrics metrics;
  const std::vector<absl::Duration> gaps = {absl::Milliseconds(3), absl::Milliseconds(4)};
  engine::StepStats step;
  step.phase = engine::StepPhase::kMixed;
  step.prefill_tokens = 30;
  step.decode_tokens = 2;
  step.num_sequences = 3;
  step.duration = absl::Milliseconds(8);
  step.inter_token_latencies = gaps;
  engine::EngineGauges gauges;
  gauges.requests_running = 3;
  gauges.requests_waiting = 1;
  gauges.requests_paused = 2;
  gauges.kv_blocks_total = 100;
  gauges.kv_blocks_used = 12;
  gauges.kv_bytes_used = 12 * 32768;
  gauges.kv_bytes_total = 100 * 32768;
  metrics.OnStep(step, gauges);
  step.phase = engine::StepPhase::kDecode;
  step.prefill_tokens = 0;
  step.inter_token_latencies = {};
  metrics.OnStep(step, gauges);
  metrics.SetModelWeightsBytes(4198912);
  metrics.SetKvCacheInfo("q8", 32);

  PromText text = Parse(metrics);
  EXPECT_EQ(text.Family("quill_kv_cache_info")->type, "gauge");
  ASSERT_EQ(text.Family("quill_kv_cache_info")->samples.size(), 1u);
  EXPECT_EQ(text.Value("quill_kv_cache_info", {{"type", "q8"}, {"block_size_tokens", "32"}}), 1.0);
  EXPECT_EQ(text.HistogramCount("quill_engine_step_duration_seconds", {{"phase", "mixed"}}), 1.0);
  EXPECT_EQ(text.HistogramCount("quill_engine_step_duration_seconds", {{"phase", "decode"}}), 1.0);
  EXPECT_EQ(text.HistogramCount("quill_engine_step_duration_seconds", {{"phase", "prefill"}}), 0.0);
  EXPECT_EQ(text.HistogramCount("quill_batch_tokens"), 2.0);
  EXPECT_EQ(text.HistogramSum("quill_batch_tokens"), 34.0);
  EXPECT_EQ(text.HistogramCount("quill_inter_token_latency_seconds"), 2.0);
  EXPECT_EQ(text.Value("quill_requests_running"), 3.0);
  EXPECT_EQ(text.Value("quill_requests_waiting"), 1.0);
  EXPECT_EQ(text.Value("quill_requests_paused"), 2.0);
  EXPECT_EQ(text.Value("quill_kv_cache_capacity_blocks"), 100.0);
  EXPECT_EQ(text.Value("quill_kv_cache_blocks_used"), 12.0);
  EXPECT_EQ(text.Value("quill_kv_cache_bytes_used"), 12.0 * 32768);
  EXPECT_DOUBLE_EQ(*text.Value("quill_kv_cache_usage_ratio"), 0.12);
  EXPECT_EQ(text.Value("quill_model_weights_bytes"), 4198912.0);
  EXPECT_GT(*text.Value("quill_process_resident_memory_bytes"), 1e6);

  // Gauges reported without a step (requests cancelled while nothing ran).
  engine::EngineGauges after_cancel = gauges;
  after_cancel.requests_running = 1;
  after_cancel.kv_blocks_used = 4;
  metrics.OnGauges(after_cancel);
  text = Parse(metrics);
  EXPECT_EQ(text.Value("quill_requests_running"), 1.0);
  EXPECT_EQ(text.Value("quill_kv_cache_blocks_used"), 4.0);

  // At scrape time the gauge source wins: the engine may have gone idle since its last step.
  gauges.requests_running = 0;
  gauges.requests_waiting = 0;
  gauges.kv_blocks_used = 0;
  gauges.kv_bytes_used = 0;
  metrics.SetGaugeSource([gauges] { return gauges; });
  text = Parse(metrics);
  EXPECT_EQ(text.Value("quill_requests_running"), 0.0);
  EXPECT_EQ(text.Value("quill_kv_cache_blocks_used"), 0.0);
  EXPECT_EQ(text.Value("quill_kv_cache_usage_ratio"), 0.0);
  EXPECT_EQ(text.Value("quill_kv_cache_capacity_blocks"), 100.0);
}

TEST(QuillMetricsTest, PrefixCacheCountersAndGauge) {
  QuillMetrics metrics;
  engine::StepStats step;
  step.prefill_tokens = 40;
  step.prefix_query_tokens = 136;
  step.prefix_hit_tokens = 96;
  step.prefix_waited_requests = 2;
  engine::EngineGauges gauges;
  gauges.kv_blocks_total = 100;
  gauges.kv_blocks_cached = 7;
  metrics.OnStep(step, gauges);
  step.prefix_query_tokens = 10;
  step.prefix_hit_tokens = 0;
  step.prefix_waited_requests = 1;
  metrics.OnStep(step, gauges);
  step.prefix_query_tokens = 0;  // a step that admitted nothing
  step.prefix_waited_requests = 0;
  metrics.OnStep(step, gauges);
  const PromText text = Parse(metrics);
  EXPECT_EQ(text.Value("quill_prefix_cache_query_tokens_total"), 146.0);
  EXPECT_EQ(text.Value("quill_prefix_cache_hit_tokens_total"), 96.0);
  EXPECT_EQ(text.Value("quill_prefix_cache_waited_requests_total"), 3.0);
  EXPECT_EQ(text.Value("quill_prefix_cache_blocks"), 7.0);
}

TEST(QuillMetricsTest, SpeculativeDecodingCounters) {
  QuillMetrics metrics;
  engine::StepStats step;
  step.decode_tokens = 2;
  step.draft_tokens = 8;
  step.accepted_draft_tokens = 5;
  engine::EngineGauges gauges;
  metrics.OnStep(step, gauges);
  step.draft_tokens = 4;
  step.accepted_draft_tokens = 0;
  metrics.OnStep(step, gauges);
  step.draft_tokens = 0;  // no speculation this step
  metrics.OnStep(step, gauges);
  const PromText text = Parse(metrics);
  EXPECT_EQ(text.Value("quill_spec_draft_tokens_total"), 12.0);
  EXPECT_EQ(text.Value("quill_spec_accepted_tokens_total"), 5.0);
}

TEST(QuillMetricsTest, ServedOverHttpOnAFreePort) {
  QuillMetrics metrics;
  metrics.RecordRejected();
  prometheus::Exposer exposer("127.0.0.1:0");
  exposer.RegisterCollectable(metrics.collectable());
  ASSERT_FALSE(exposer.GetListeningPorts().empty());
  const int port = exposer.GetListeningPorts().front();
  ASSERT_GT(port, 0);
  absl::StatusOr<quill::testing::HttpResponse> response =
      quill::testing::HttpGet("127.0.0.1", port, "/metrics");
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 200);
  absl::StatusOr<PromText> text = PromText::Parse(response->body);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->Value("quill_requests_total", {{"api", "grpc"}, {"outcome", "rejected"}}), 1.0);
}

TEST(ProcessMetricsTest, ParsesStatm) {
  EXPECT_EQ(*ParseStatmResidentBytes("2000 150 30 1 0 100 0\n", 4096), 150 * 4096);
  EXPECT_EQ(ParseStatmResidentBytes("2000", 4096).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseStatmResidentBytes("a b c", 4096).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<int64_t> rss = ReadResidentMemoryBytes();
  ASSERT_TRUE(rss.ok()) << rss.status();
  EXPECT_GT(*rss, 0);
}

TEST(QuillMetricsTest, NoTenantSeriesByDefault) {
  QuillMetrics metrics;
  engine::FinishInfo done;
  done.tenant = "team-a";
  done.completion_tokens = 1;
  metrics.OnRequestFinished(done);
  metrics.RecordRejected(Api::kHttp, "team-a");
  const PromText text = Parse(metrics);
  for (const auto& [name, family] : text.families()) {
    EXPECT_THAT(name, ::testing::Not(::testing::HasSubstr("tenant")));
  }
}

TEST(QuillMetricsTest, PerTenantSeriesAreCappedAndNameTheDefaultTenant) {
  QuillMetrics metrics(/*per_tenant=*/true);
  engine::FinishInfo done;
  done.reason = engine::FinishReason::kLength;
  done.completion_tokens = 3;
  done.timings.queue_wait = absl::Milliseconds(20);
  done.timings.time_to_first_token = absl::Milliseconds(50);
  done.tenant = "team-a";
  metrics.OnRequestFinished(done);
  metrics.OnRequestFinished(done);
  done.tenant = "";
  metrics.OnRequestFinished(done);
  metrics.RecordRejected(Api::kGrpc, "team-a");
  metrics.RecordDeadlineRefused(Api::kGrpc, "team-a");
  metrics.RecordRejected(Api::kGrpc);  // tenant unknown: only the unlabelled count
  for (int i = 0; i < QuillMetrics::kMaxTenantSeries + 10; ++i) {
    done.tenant = "t" + std::to_string(i);
    metrics.OnRequestFinished(done);
  }
  const PromText text = Parse(metrics);
  ASSERT_NE(text.Family("quill_tenant_requests_total"), nullptr);
  EXPECT_EQ(text.Family("quill_tenant_requests_total")->type, "counter");
  using L = quill::testing::Labels;
  EXPECT_EQ(
      text.Value("quill_tenant_requests_total", L{{"tenant", "team-a"}, {"outcome", "length"}}),
      2.0);
  EXPECT_EQ(
      text.Value("quill_tenant_requests_total", L{{"tenant", "team-a"}, {"outcome", "rejected"}}),
      1.0);
  EXPECT_EQ(
      text.Value("quill_tenant_requests_total", L{{"tenant", "team-a"}, {"outcome", "deadline"}}),
      1.0);
  EXPECT_EQ(
      text.Value("quill_tenant_requests_total", L{{"tenant", "_default"}, {"outcome", "length"}}),
      1.0);
  EXPECT_EQ(text.HistogramCount("quill_tenant_queue_wait_seconds", L{{"tenant", "team-a"}}), 2.0);
  EXPECT_EQ(
      text.HistogramCount("quill_tenant_time_to_first_token_seconds", L{{"tenant", "team-a"}}),
      2.0);
  // team-a and _default took two of the 100; t98.. share "_other".
  EXPECT_EQ(text.Value("quill_tenant_requests_total", L{{"tenant", "t97"}, {"outcome", "length"}}),
            1.0);
  EXPECT_FALSE(
      text.Value("quill_tenant_requests_total", L{{"tenant", "t98"}, {"outcome", "length"}}));
  EXPECT_EQ(
      text.Value("quill_tenant_requests_total", L{{"tenant", "_other"}, {"outcome", "length"}}),
      12.0);
  EXPECT_EQ(text.Family("quill_tenant_requests_total")->samples.size(),
            (QuillMetrics::kMaxTenantSeries + 1) * 8u);
}

}  // namespace
}  // namespace quill::server
