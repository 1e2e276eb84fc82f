#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/node_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "engine/runtime/engine_observer.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace quill::server {

// The front end a request came through: the `api` label of quill_requests_total.
enum class Api { kGrpc = 0, kHttp = 1 };
inline constexpr int kNumApis = 2;
// "grpc", "http" (also the engine::GenerationRequest::frontend value).
absl::string_view ApiName(Api api);

// Every Quill metric (names `quill_*`, base units, `_total` counters), defined in the
// constructor. The engine reports through EngineObserver on its thread (only atomic
// counters/gauges and prometheus-cpp's short per-histogram lock); the RPC layer reports
// refusals; gauges of engine state and process memory are also refreshed at every scrape,
// so they are current even while the engine is idle. Thread-safe.
//
// Per tenant: off by default, so the series count does not grow with the number of
// tenants. With `per_tenant` (--metrics-per-tenant), quill_tenant_requests_total{tenant,
// outcome}, quill_tenant_queue_wait_seconds{tenant} and
// quill_tenant_time_to_first_token_seconds{tenant} are added; the default tenant is
// labelled "_default", and tenants beyond the first kMaxTenantSeries seen share "_other"
// (without API keys the tenant is whatever x-quill-tenant a client sends).
class QuillMetrics final : public engine::EngineObserver {
 public:
  static constexpr int kMaxTenantSeries = 100;

  explicit QuillMetrics(bool per_tenant = false);
  ~QuillMetrics() override;
  QuillMetrics(const QuillMetrics&) = delete;
  QuillMetrics& operator=(const QuillMetrics&) = delete;

  // engine::EngineObserver (engine thread).
  void OnStep(const engine::StepStats& stats, const engine::EngineGauges& gauges) override;
  void OnRequestFinished(const engine::FinishInfo& info) override;
  void OnPreemption() override;
  void OnGauges(const engine::EngineGauges& gauges) override;

  // A generation request refused before the engine accepted it (validation, full queue,
  // draining, loading): quill_requests_total{outcome="rejected",api=...}.
  // With per-tenant metrics and a `tenant`, also quill_tenant_requests_total{tenant,
  // outcome="rejected"} (a refusal before the tenant is known, e.g. a bad API key, has
  // none).
  void RecordRejected(Api api = Api::kGrpc, std::optional<absl::string_view> tenant = std::nullopt);
  // A request refused at submit because its deadline could not be met: counted under
  // outcome="deadline", with those that expired inside the engine.
  void RecordDeadlineRefused(Api api, std::optional<absl::string_view> tenant = std::nullopt);

  bool per_tenant() const { return per_tenant_; }

  void SetModelWeightsBytes(int64_t bytes);
  // quill_kv_cache_info{type, block_size_tokens} = 1: what the KV cache stores (f32, f16 or
  // q8) and its block size, for dashboards that compare servers. Call once, at startup.
  void SetKvCacheInfo(absl::string_view type, int block_size_tokens);
  // Polled at each scrape for running/waiting/KV gauges. Must stay callable until the
  // exposer serving collectable() is destroyed, or be reset with nullptr first.
  void SetGaugeSource(std::function<engine::EngineGauges()> source) ABSL_LOCKS_EXCLUDED(mu_);

  // For prometheus::Exposer::RegisterCollectable: refreshes the scrape-time gauges, then
  // returns every family. The returned object refers to this QuillMetrics: destroy the
  // exposer first.
  std::shared_ptr<prometheus::Collectable> collectable() const { return collectable_; }
  // The exposition in Prometheus text format, as /metrics serves it.
  std::string TextExposition() const;

 private:
  class ScrapeCollectable;
  void RefreshScrapeGauges() const ABSL_LOCKS_EXCLUDED(mu_);
  void SetEngineGauges(const engine::EngineGauges& gauges) const;

  struct TenantSeries {
    prometheus::Counter* outcomes[8];  // by engine::FinishReason, then [7] = rejected
    prometheus::Histogram* queue_wait;
    prometheus::Histogram* time_to_first_token;
  };
  static constexpr int kTenantRejected = 7;
  // The series of `tenant` (created on first use; "_other" past kMaxTenantSeries).
  TenantSeries& SeriesFor(absl::string_view tenant) ABSL_LOCKS_EXCLUDED(tenant_mu_);

  const bool per_tenant_;

  std::shared_ptr<prometheus::Registry> registry_;

  // Per-request latency histograms (seconds).
  prometheus::Histogram* time_to_first_token_;
  prometheus::Histogram* inter_token_latency_;
  prometheus::Histogram* request_duration_;
  prometheus::Histogram* queue_wait_;
  prometheus::Histogram* prefill_duration_;
  prometheus::Histogram* decode_duration_;
  // Per engine step.
  prometheus::Histogram* step_prefill_;
  prometheus::Histogram* step_decode_;
  prometheus::Histogram* step_mixed_;
  prometheus::Histogram* batch_tokens_;
  // Counters. quill_requests_total by api, then by outcome.
  struct OutcomeCounters {
    prometheus::Counter* length;
    prometheus::Counter* stop;
    prometheus::Counter* eos;
    prometheus::Counter* cancelled;
    prometheus::Counter* deadline;
    prometheus::Counter* rejected;
    prometheus::Counter* error;
    prometheus::Counter* shutdown;
    prometheus::Counter* stalled;
  };
  prometheus::Family<prometheus::Counter>* requests_family_;
  OutcomeCounters requests_[kNumApis];
  prometheus::Counter* prompt_tokens_;
  prometheus::Counter* generated_tokens_;
  prometheus::Counter* reasoning_tokens_;
  prometheus::Counter* prefix_cache_query_tokens_;
  prometheus::Counter* prefix_cache_hit_tokens_;
  prometheus::Counter* prefix_cache_waited_requests_;
  prometheus::Counter* spec_draft_tokens_;
  prometheus::Counter* spec_accepted_tokens_;
  // Gauges.
  prometheus::Gauge* requests_running_;
  prometheus::Gauge* requests_waiting_;
  prometheus::Gauge* requests_paused_;
  prometheus::Gauge* kv_capacity_blocks_;
  prometheus::Gauge* kv_blocks_used_;
  prometheus::Gauge* kv_blocks_cached_;
  prometheus::Gauge* kv_bytes_used_;
  prometheus::Gauge* kv_bytes_total_;
  prometheus::Gauge* kv_usage_ratio_;
  prometheus::Gauge* model_weights_bytes_;
  prometheus::Gauge* resident_memory_bytes_;
  prometheus::Family<prometheus::Gauge>* kv_info_family_;  // one series once SetKvCacheInfo

  mutable absl::Mutex mu_;
  std::function<engine::EngineGauges()> gauge_source_ ABSL_GUARDED_BY(mu_);

  // Per tenant (null families unless per_tenant_).
  prometheus::Family<prometheus::Counter>* tenant_requests_family_ = nullptr;
  prometheus::Family<prometheus::Histogram>* tenant_queue_wait_family_ = nullptr;
  prometheus::Family<prometheus::Histogram>* tenant_ttft_family_ = nullptr;
  absl::Mutex tenant_mu_;
  // Node-based: a TenantSeries& stays valid as the map grows.
  absl::node_hash_map<std::string, TenantSeries> tenant_series_ ABSL_GUARDED_BY(tenant_mu_);

  std::shared_ptr<prometheus::Collectable> collectable_;
};

}  // namespace quill::server
