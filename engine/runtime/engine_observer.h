#pragma once

#include <string>

#include "absl/time/time.h"
#include "absl/types/span.h"
#include "engine/runtime/request.h"

namespace quill::engine {

enum class StepPhase { kPrefill, kDecode, kMixed };
absl::string_view StepPhaseName(StepPhase phase);  // "prefill", "decode", "mixed"

struct StepStats {
  StepPhase phase = StepPhase::kDecode;
  int prefill_tokens = 0;  // prompt tokens processed this step
  int decode_tokens = 0;   // sequences that decoded one token this step
  // Speculative decoding: draft tokens verified this step (fed besides decode_tokens), and
  // those the model agreed with (each one an extra token emitted).
  int draft_tokens = 0;
  int accepted_draft_tokens = 0;
  int num_sequences = 0;
  // Prefix cache, over the requests admitted this step (both 0 when it is off): prompt
  // tokens looked up, and those found cached (not prefilled).
  int prefix_query_tokens = 0;
  int prefix_hit_tokens = 0;
  // Of those requests, the ones whose admission waited for prompt blocks that a request
  // ahead of them was prefilling (to reuse them instead of computing them again).
  int prefix_waited_requests = 0;
  absl::Duration duration;  // whole step: plan + forward + sample + emit
  // Gaps between each emitted token and the previous token of the same request
  // (inter-token latency), one per decode token emitted this step.
  absl::Span<const absl::Duration> inter_token_latencies;
};

struct EngineGauges {
  int requests_running = 0;
  int requests_waiting = 0;
  int requests_paused = 0;  // running (and counted there) but backpressured, not stepped
  int kv_blocks_total = 0;
  int kv_blocks_used = 0;    // held by a request
  int kv_blocks_cached = 0;  // in the prefix cache, held or not
  int64_t kv_bytes_used = 0;
  int64_t kv_bytes_total = 0;
};

// Engine -> metrics. Called on the engine thread; implementations only do cheap atomic
// updates. Every method has a no-op default so tests can pass a bare observer.
class EngineObserver {
 public:
  virtual ~EngineObserver() = default;
  virtual void OnStep(const StepStats& /*stats*/, const EngineGauges& /*gauges*/) {}
  // Once per request that was accepted by Submit(), when it ends (any reason).
  virtual void OnRequestFinished(const FinishInfo& /*info*/) {}
  virtual void OnPreemption() {}
  // The gauges changed without a forward step (e.g. requests cancelled or expired while
  // nothing else ran), so OnStep will not report them. Same rules as OnStep.
  virtual void OnGauges(const EngineGauges& /*gauges*/) {}
};

}  // namespace quill::engine
