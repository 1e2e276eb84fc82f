#include "server/metrics/quill_metrics.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "prometheus/text_serializer.h"
#include "server/metrics/process_metrics.h"

namespace quill::server {
namespace {

using prometheus::Histogram;

// Bucket bounds sized for LLM serving on a CPU: from a few milliseconds (a tiny model's
// step) up to minutes (a long generation of a big model).
const Histogram::BucketBoundaries& TtftBuckets() {
  static const auto* b = new Histogram::BucketBoundaries{
      0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60};
  return *b;
}
// Inter-token latency and step durations get finer bounds from 0.1 to 1 s, where a CPU
// serving a 1B model under load sits and where --itl-target is set: a p99 estimated from
// 0.25 / 0.5 / 1 alone could be off by 100 ms.
const Histogram::BucketBoundaries& ItlBuckets() {
  static const auto* b = new Histogram::BucketBoundaries{
      0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,
      0.25,  0.3,    0.4,   0.5,  0.75,  1,    2.5,   5};
  return *b;
}
const Histogram::BucketBoundaries& RequestBuckets() {
  static const auto* b = new Histogram::BucketBoundaries{
      0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600};
  return *b;
}
const Histogram::BucketBoundaries& QueueBuckets() {
  static const auto* b = new Histogram::BucketBoundaries{
      0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
  return *b;
}
const Histogram::BucketBoundaries& PrefillBuckets() {
  static const auto* b = new Histogram::BucketBoundaries{
      0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
  return *b;
}
const Histogram::BucketBoundaries& StepBuckets() {
  static const auto* b = new Histogram::BucketBoundaries{
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2,
      0.25,   0.3,   0.4,    0.5,   0.75, 1,     2.5,  5};
  return *b;
}
const Histogram::BucketBoundaries& BatchTokenBuckets() {
  static const auto* b = new Histogram::BucketBoundaries{
      1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192};
  return *b;
}

}  // namespace

absl::string_view ApiName(Api api) { return api == Api::kHttp ? "http" : "grpc"; }

class QuillMetrics::ScrapeCollectable final : public prometheus::Collectable {
 public:
  explicit ScrapeCollectable(const QuillMetrics* metrics) : metrics_(metrics) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    metrics_->RefreshScrapeGauges();
    return metrics_->registry_->Collect();
  }

 private:
  const QuillMetrics* metrics_;  // owns this object
};

QuillMetrics::QuillMetrics(bool per_tenant)
    : per_tenant_(per_tenant), registry_(std::make_shared<prometheus::Registry>()) {
  prometheus::Registry& r = *registry_;
  auto histogram = [&r](const std::string& name, const std::string& help,
                        const Histogram::BucketBoundaries& buckets) {
    return &prometheus::BuildHistogram().Name(name).Help(help).Register(r).Add({}, buckets);
  };
  auto counter = [&r](const std::string& name, const std::string& help) {
    return &prometheus::BuildCounter().Name(name).Help(help).Register(r).Add({});
  };
  auto gauge = [&r](const std::string& name, const std::string& help) {
    return &prometheus::BuildGauge().Name(name).Help(help).Register(r).Add({});
  };

  time_to_first_token_ = histogram(
      "quill_time_to_first_token_seconds",
      "Time from a request's arrival at the engine to its first generated token (queue wait "
      "plus prefill), for requests that produced at least one token.",
      TtftBuckets());
  inter_token_latency_ = histogram(
      "quill_inter_token_latency_seconds",
      "Gap between consecutive generated tokens of the same request (one observation per "
      "decoded token after the first).",
      ItlBuckets());
  request_duration_ = histogram(
      "quill_request_duration_seconds",
      "Time from a request's acceptance by the engine to its end, whatever the outcome.",
      RequestBuckets());
  queue_wait_ = histogram(
      "quill_queue_wait_seconds",
      "Time a request waited for admission (KV blocks and a running slot), for requests "
      "that were admitted.",
      QueueBuckets());
  prefill_duration_ = histogram(
      "quill_prefill_duration_seconds",
      "Per request: time from admission until its whole prompt was processed.",
      PrefillBuckets());
  decode_duration_ = histogram(
      "quill_decode_duration_seconds",
      "Per request: time from its first generated token to its end.", RequestBuckets());

  auto& steps = prometheus::BuildHistogram()
                    .Name("quill_engine_step_duration_seconds")
                    .Help("Duration of one engine step (plan, forward pass, sampling and "
                          "emission), by phase: prefill only, decode only, or mixed.")
                    .Register(r);
  step_prefill_ = &steps.Add({{"phase", "prefill"}}, StepBuckets());
  step_decode_ = &steps.Add({{"phase", "decode"}}, StepBuckets());
  step_mixed_ = &steps.Add({{"phase", "mixed"}}, StepBuckets());
  batch_tokens_ = histogram(
      "quill_batch_tokens",
      "Tokens processed by one engine step (prompt tokens being prefilled plus one per "
      "decoding sequence).",
      BatchTokenBuckets());

  requests_family_ =
      &prometheus::BuildCounter()
           .Name("quill_requests_total")
           .Help(
               "Generation requests by front end (api: grpc or http) and outcome: length, "
               "stop, eos (finished normally), cancelled (client cancel or disconnect), "
               "deadline (deadline exceeded), stalled (the client read nothing for "
               "--stream-stall-timeout), shutdown (ended by the server's drain "
               "timeout), error (internal failure), rejected (refused before reaching the "
               "engine: invalid, queue full, draining or loading).")
           .Register(r);
  for (int a = 0; a < kNumApis; ++a) {
    const std::string api(ApiName(static_cast<Api>(a)));
    auto outcome = [this, &api](const std::string& value) {
      return &requests_family_->Add({{"api", api}, {"outcome", value}});
    };
    OutcomeCounters& c = requests_[a];
    c.length = outcome("length");
    c.stop = outcome("stop");
    c.eos = outcome("eos");
    c.cancelled = outcome("cancelled");
    c.deadline = outcome("deadline");
    c.rejected = outcome("rejected");
    c.error = outcome("error");
    c.shutdown = outcome("shutdown");
    c.stalled = outcome("stalled");
  }
  prompt_tokens_ = counter("quill_prompt_tokens_total",
                           "Prompt tokens of requests the engine finished (any outcome).");
  generated_tokens_ = counter("quill_generated_tokens_total",
                              "Tokens generated and sent to clients (EOS is not counted).");
  reasoning_tokens_ = counter("quill_reasoning_tokens_total",
                              "Of the generated tokens, those of a reasoning model's thought "
                              "(chats whose template's thought tags are single tokens).");
  prefix_cache_query_tokens_ =
      counter("quill_prefix_cache_query_tokens_total",
              "Prompt tokens of admitted requests looked up in the prefix cache.");
  prefix_cache_hit_tokens_ =
      counter("quill_prefix_cache_hit_tokens_total",
              "Prompt tokens found in the prefix cache (their K/V reused, not prefilled).");
  prefix_cache_waited_requests_ =
      counter("quill_prefix_cache_waited_requests_total",
              "Admitted requests that first waited for prompt blocks a request ahead of them was "
              "prefilling, to reuse them from the prefix cache instead of computing them again.");
  spec_draft_tokens_ = counter("quill_spec_draft_tokens_total",
                               "Speculative draft tokens (n-gram lookup) verified by the model.");
  spec_accepted_tokens_ =
      counter("quill_spec_accepted_tokens_total",
              "Draft tokens the model agreed with: tokens gained without a step of their own.");

  requests_running_ = gauge("quill_requests_running",
                            "Requests in the running set (prefilling or decoding).");
  requests_waiting_ =
      gauge("quill_requests_waiting", "Requests accepted and waiting for admission.");
  requests_paused_ =
      gauge("quill_requests_paused",
            "Running requests paused because their client stopped reading (backpressure): "
            "they keep their KV blocks and run slot but leave the batch until it reads.");
  kv_capacity_blocks_ = gauge("quill_kv_cache_capacity_blocks",
                              "Blocks in the paged KV cache pool (fixed at startup).");
  kv_blocks_used_ =
      gauge("quill_kv_cache_blocks_used", "KV cache blocks currently held by requests.");
  kv_blocks_cached_ = gauge("quill_prefix_cache_blocks",
                            "KV cache blocks in the prefix cache, held by requests or not (the "
                            "unheld ones are free and evicted when needed).");
  kv_bytes_used_ =
      gauge("quill_kv_cache_bytes_used", "Bytes of the KV cache pool currently held by requests.");
  kv_bytes_total_ = gauge("quill_kv_cache_bytes_capacity",
                          "Bytes of the whole KV cache pool (allocated at startup).");
  kv_usage_ratio_ = gauge("quill_kv_cache_usage_ratio",
                          "Fraction of the KV cache pool's blocks held by requests (0-1): what "
                          "load-aware gateways route on.");
  model_weights_bytes_ =
      gauge("quill_model_weights_bytes", "Bytes of model weights held in memory (as packed).");
  resident_memory_bytes_ = gauge("quill_process_resident_memory_bytes",
                                 "Resident set size of the server process, read at scrape time.");
  kv_info_family_ = &prometheus::BuildGauge()
                         .Name("quill_kv_cache_info")
                         .Help(
                             "Always 1: the KV cache's element type (type: f32, f16, bf16 or q8) "
                             "and its block size in tokens, as labels.")
                         .Register(r);

  if (per_tenant_) {
    tenant_requests_family_ =
        &prometheus::BuildCounter()
             .Name("quill_tenant_requests_total")
             .Help(
                 "Generation requests by tenant (API key name, or x-quill-tenant without "
                 "keys; \"_default\" for none, \"_other\" past the first 100 tenants) and "
                 "outcome, as in quill_requests_total; rejected counts only refusals after "
                 "the tenant was known. Only with --metrics-per-tenant.")
             .Register(r);
    tenant_queue_wait_family_ =
        &prometheus::BuildHistogram()
             .Name("quill_tenant_queue_wait_seconds")
             .Help("quill_queue_wait_seconds by tenant. Only with --metrics-per-tenant.")
             .Register(r);
    tenant_ttft_family_ = &prometheus::BuildHistogram()
                               .Name("quill_tenant_time_to_first_token_seconds")
                               .Help(
                                   "quill_time_to_first_token_seconds by tenant. Only with "
                                   "--metrics-per-tenant.")
                               .Register(r);
  }

  collectable_ = std::make_shared<ScrapeCollectable>(this);
}

QuillMetrics::TenantSeries& QuillMetrics::SeriesFor(absl::string_view tenant) {
  absl::MutexLock lock(&tenant_mu_);
  std::string label = tenant.empty() ? "_default" : std::string(tenant);
  auto it = tenant_series_.find(label);
  if (it != tenant_series_.end()) return it->second;
  if (tenant_series_.size() >= kMaxTenantSeries) {
    label = "_other";
    it = tenant_series_.find(label);
    if (it != tenant_series_.end()) return it->second;
  }
  TenantSeries& series = tenant_series_[label];
  static constexpr const char* kOutcomes[8] = {"length",   "stop",  "eos",      "cancelled",
                                               "deadline", "error", "shutdown", "rejected"};
  for (int i = 0; i < 8; ++i) {
    series.outcomes[i] =
        &tenant_requests_family_->Add({{"tenant", label}, {"outcome", kOutcomes[i]}});
  }
  series.queue_wait = &tenant_queue_wait_family_->Add({{"tenant", label}}, QueueBuckets());
  series.time_to_first_token = &tenant_ttft_family_->Add({{"tenant", label}}, TtftBuckets());
  return series;
}

QuillMetrics::~QuillMetrics() = default;

void QuillMetrics::OnStep(const engine::StepStats& stats, const engine::EngineGauges& gauges) {
  const double seconds = absl::ToDoubleSeconds(stats.duration);
  switch (stats.phase) {
    case engine::StepPhase::kPrefill: step_prefill_->Observe(seconds); break;
    case engine::StepPhase::kDecode: step_decode_->Observe(seconds); break;
    case engine::StepPhase::kMixed: step_mixed_->Observe(seconds); break;
  }
  batch_tokens_->Observe(stats.prefill_tokens + stats.decode_tokens + stats.draft_tokens);
  if (stats.draft_tokens > 0) {
    spec_draft_tokens_->Increment(stats.draft_tokens);
    spec_accepted_tokens_->Increment(stats.accepted_draft_tokens);
  }
  if (stats.prefix_query_tokens > 0) {
    prefix_cache_query_tokens_->Increment(stats.prefix_query_tokens);
    prefix_cache_hit_tokens_->Increment(stats.prefix_hit_tokens);
    prefix_cache_waited_requests_->Increment(stats.prefix_waited_requests);
  }
  for (absl::Duration gap : stats.inter_token_latencies) {
    inter_token_latency_->Observe(absl::ToDoubleSeconds(gap));
  }
  SetEngineGauges(gauges);
}

void QuillMetrics::OnRequestFinished(const engine::FinishInfo& info) {
  const OutcomeCounters& c =
      requests_[static_cast<int>(info.frontend == ApiName(Api::kHttp) ? Api::kHttp : Api::kGrpc)];
  switch (info.reason) {
    case engine::FinishReason::kLength:
      c.length->Increment();
      break;
    case engine::FinishReason::kStop:
      c.stop->Increment();
      break;
    case engine::FinishReason::kEos:
      c.eos->Increment();
      break;
    case engine::FinishReason::kCancelled:
      c.cancelled->Increment();
      break;
    case engine::FinishReason::kDeadline:
      c.deadline->Increment();
      break;
    case engine::FinishReason::kError:
      c.error->Increment();
      break;
    case engine::FinishReason::kShutdown:
      c.shutdown->Increment();
      break;
    case engine::FinishReason::kStalled:
      c.stalled->Increment();
      break;
  }
  prompt_tokens_->Increment(info.prompt_tokens);
  generated_tokens_->Increment(info.completion_tokens);
  reasoning_tokens_->Increment(info.reasoning_tokens.value_or(0));
  request_duration_->Observe(absl::ToDoubleSeconds(info.timings.total));
  // A request that ended while still queued has no admission, prefill or first token.
  const bool admitted = info.completion_tokens > 0 || info.timings.prefill > absl::ZeroDuration();
  if (admitted) {
    queue_wait_->Observe(absl::ToDoubleSeconds(info.timings.queue_wait));
    prefill_duration_->Observe(absl::ToDoubleSeconds(info.timings.prefill));
  }
  if (info.completion_tokens > 0) {
    time_to_first_token_->Observe(absl::ToDoubleSeconds(info.timings.time_to_first_token));
    decode_duration_->Observe(absl::ToDoubleSeconds(info.timings.decode));
  }
  if (per_tenant_) {
    TenantSeries& series = SeriesFor(info.tenant);
    static_assert(static_cast<int>(engine::FinishReason::kShutdown) == 6,
                  "TenantSeries::outcomes follows FinishReason's order");
    series.outcomes[static_cast<int>(info.reason)]->Increment();
    if (admitted) series.queue_wait->Observe(absl::ToDoubleSeconds(info.timings.queue_wait));
    if (info.completion_tokens > 0) {
      series.time_to_first_token->Observe(absl::ToDoubleSeconds(info.timings.time_to_first_token));
    }
  }
}

// The engine reserves a request's KV blocks at admission and never preempts, so there is
// no quill_preemptions_total; add it here if that changes.
void QuillMetrics::OnPreemption() {}

void QuillMetrics::OnGauges(const engine::EngineGauges& gauges) { SetEngineGauges(gauges); }

void QuillMetrics::RecordRejected(Api api, std::optional<absl::string_view> tenant) {
  requests_[static_cast<int>(api)].rejected->Increment();
  if (per_tenant_ && tenant.has_value()) SeriesFor(*tenant).outcomes[kTenantRejected]->Increment();
}

void QuillMetrics::RecordDeadlineRefused(Api api, std::optional<absl::string_view> tenant) {
  requests_[static_cast<int>(api)].deadline->Increment();
  if (per_tenant_ && tenant.has_value()) {
    SeriesFor(*tenant).outcomes[static_cast<int>(engine::FinishReason::kDeadline)]->Increment();
  }
}

void QuillMetrics::SetModelWeightsBytes(int64_t bytes) {
  model_weights_bytes_->Set(static_cast<double>(bytes));
}

void QuillMetrics::SetKvCacheInfo(absl::string_view type, int block_size_tokens) {
  kv_info_family_
      ->Add({{"type", std::string(type)}, {"block_size_tokens", absl::StrCat(block_size_tokens)}})
      .Set(1);
}

void QuillMetrics::SetGaugeSource(std::function<engine::EngineGauges()> source) {
  absl::MutexLock lock(&mu_);
  gauge_source_ = std::move(source);
}

void QuillMetrics::SetEngineGauges(const engine::EngineGauges& gauges) const {
  requests_running_->Set(gauges.requests_running);
  requests_waiting_->Set(gauges.requests_waiting);
  requests_paused_->Set(gauges.requests_paused);
  kv_capacity_blocks_->Set(gauges.kv_blocks_total);
  kv_blocks_used_->Set(gauges.kv_blocks_used);
  kv_blocks_cached_->Set(gauges.kv_blocks_cached);
  kv_bytes_used_->Set(static_cast<double>(gauges.kv_bytes_used));
  kv_bytes_total_->Set(static_cast<double>(gauges.kv_bytes_total));
  kv_usage_ratio_->Set(gauges.kv_blocks_total > 0
                           ? static_cast<double>(gauges.kv_blocks_used) / gauges.kv_blocks_total
                           : 0.0);
}

void QuillMetrics::RefreshScrapeGauges() const {
  {
    absl::MutexLock lock(&mu_);
    if (gauge_source_) SetEngineGauges(gauge_source_());
  }
  if (absl::StatusOr<int64_t> rss = ReadResidentMemoryBytes(); rss.ok()) {
    resident_memory_bytes_->Set(static_cast<double>(*rss));
  }
}

std::string QuillMetrics::TextExposition() const {
  return prometheus::TextSerializer().Serialize(collectable_->Collect());
}

}  // namespace quill::server
