#include "engine/runtime/engine.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <deque>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "engine/base/check.h"
#include "engine/base/status_macros.h"
#include "engine/base/utf8.h"
#include "engine/runtime/batch_planner.h"
#include "engine/runtime/ewma_rate.h"
#include "engine/runtime/fair_queue.h"
#include "engine/runtime/inbox.h"
#include "engine/runtime/model_drafter.h"
#include "engine/runtime/sequence.h"
#include "engine/runtime/step_cost_model.h"
#include "spdlog/spdlog.h"

namespace quill::engine {
namespace {

constexpr int kMaxLogprobs = 20;
// The starvation guard of the inter-token-latency budget: prompts progress by at least
// this many tokens per step even when decoding alone fills the target.
constexpr int kMinPrefillTokensPerStep = 32;
// The guard also covers this many times the prompt tokens that finished requests
// prefilled, per step: under a steady load new prompts arrive at that rate, and a guard at
// exactly it never drains a queue. At 64 decoders a closed loop's finished streams send one
// 32-token prompt per step, the guard's share, so a queue of n, once formed, stayed for the
// rest of the run and every request waited n more steps (TinyLlama Q8_0, 64 streams: a
// queue of ~14 through the whole second round, TTFT p99 7.9x p50). A burst of new prompts
// is not in the rate, and is still metered by the target. With 1.5, 6 alternated runs:
// TTFT p99 1.16-2.16x p50 (was 1.22-7.95x), ITL p99 0.82-1.34x as long (median 1.18x),
// throughput unchanged; 2.0 raised ITL p99 to 456-524 ms (mixed steps of two prompts).
// Not enough when many requests start in one step: they finish together, their
// successors arrive together, and the guard follows that wave with steps of 0.5-1 s every
// round (11 runs: TTFT p99 <= 2x p50 in 4 of 5 whose first step started at most 5
// prompts, in 0 of 6 where it started 7-16). So a step with nobody decoding, which once
// took every prompt that fit, starts one that will decode (PrefillTokenLimit).
constexpr double kFinishedPromptHeadroom = 1.5;
// When decoding alone takes more than the inter-token-latency target, a step with prompt
// tokens may take this many times a decode-only step: prompts get a third of such a step.
// Measured at 64 BF16 streams (scripts/bench_serving.sh, 7 alternated rounds), 1.5 against
// 2.0: ITL p99 310-348 ms against 383-454, throughput 0.96-1.14x against 0.94-1.14x of no
// target, TTFT p50 1.8-2.6 s against 0.7-1.5 s (prompts get fewer tokens per step).
constexpr double kDecodeStepFactor = 1.5;
constexpr int kMaxStopStrings = 16;
constexpr size_t kMaxStopBytes = 256;
constexpr int kMaxSpecTokens = 32;

// Sequences that may draft in one step: drafting stops at spec_max_decoders decoders.
int MaxDraftingSequences(const EngineOptions& o) {
  return std::min(o.max_running, o.spec_max_decoders - 1);
}

// Draft tokens one step may verify: every sequence allowed to draft at spec_tokens each.
int MaxDraftTokensPerStep(const EngineOptions& o) {
  return o.spec_tokens * MaxDraftingSequences(o);
}

absl::Status ValidateOptions(const EngineOptions& o, int model_max_batch_tokens) {
  if (o.max_batch_tokens < 1 || o.max_batch_tokens > model_max_batch_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_batch_tokens must be in [1, ", model_max_batch_tokens,
                     "] (the model's scratch size), got ", o.max_batch_tokens));
  }
  if (o.prefill_chunk_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("prefill_chunk_tokens must be >= 1, got ", o.prefill_chunk_tokens));
  }
  if (o.max_running < 1 || o.max_running > o.max_batch_tokens) {
    // Every running sequence decodes one token per step, so they must fit one batch.
    return absl::InvalidArgumentError(absl::StrCat("max_running must be in [1, max_batch_tokens = ",
                                                   o.max_batch_tokens, "], got ", o.max_running));
  }
  if (o.max_queue < 1) {
    return absl::InvalidArgumentError(absl::StrCat("max_queue must be >= 1, got ", o.max_queue));
  }
  if (o.max_queue_per_tenant < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_queue_per_tenant must be >= 0, got ", o.max_queue_per_tenant));
  }
  if (o.kv_cache_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv_cache_bytes must be > 0, got ", o.kv_cache_bytes));
  }
  if (o.block_size_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("block_size_tokens must be >= 1, got ", o.block_size_tokens));
  }
  if (o.itl_target < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("itl_target must be >= 0, got ", absl::FormatDuration(o.itl_target)));
  }
  if (o.stall_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("stall_timeout must be > 0, got ", absl::FormatDuration(o.stall_timeout)));
  }
  if (o.spec_tokens < 0 || o.spec_tokens > kMaxSpecTokens) {
    return absl::InvalidArgumentError(absl::StrCat("spec_tokens must be in [0, ", kMaxSpecTokens,
                                                   "], got ", o.spec_tokens));
  }
  if (o.spec_max_decoders < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec_max_decoders must be >= 1, got ", o.spec_max_decoders));
  }
  if (o.max_tokens_limit < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_tokens_limit must be >= 0, got ", o.max_tokens_limit));
  }
  return absl::OkStatus();
}

}  // namespace

// Everything the engine thread owns lives here; only Submit/Cancel/Shutdown/gauges run on
// other threads, and they touch only the inbox, the atomics and immutable fields.
class Engine::Impl {
 public:
  Impl(std::unique_ptr<StepModel> step_model, const EngineOptions& options,
       EngineObserver* observer, const Clock* clock, std::unique_ptr<KvCache> kv,
       std::unique_ptr<ModelDrafter> drafter)
      : step_model_(std::move(step_model)),
        options_(options),
        observer_(observer),
        clock_(clock),
        kv_(std::move(kv)),
        drafter_(std::move(drafter)),
        inbox_(AdmissionLimits{options.max_queue, options.max_queue_per_tenant, options.max_running,
                               kv_->num_blocks()}),
        vocab_size_(step_model_->vocab_size()),
        context_length_(step_model_->context_length()),
        max_tokens_limit_(options.max_tokens_limit > 0 ? options.max_tokens_limit
                                                       : context_length_),
        kv_block_size_(kv_->block_size()),
        kv_num_blocks_(kv_->num_blocks()) {
    planner_options_.max_batch_tokens = options.max_batch_tokens;
    planner_options_.prefill_chunk_tokens = options.prefill_chunk_tokens;
    planner_options_.max_running = options.max_running;
    planner_options_.max_draft_tokens = MaxDraftTokensPerStep(options);
    planner_options_.max_prompt_logit_rows =
        std::min(kPromptLogitRowsPerStep, options.max_batch_tokens);
    // Every per-step buffer is sized once here, so steps do not allocate.
    const size_t max_entries = options.max_running;
    // One logits row per decoding sequence and per draft token verified, and the rows of
    // prompt logprobs.
    const size_t max_rows = std::min(max_entries + planner_options_.max_draft_tokens,
                                     static_cast<size_t>(options.max_batch_tokens)) +
                            planner_options_.max_prompt_logit_rows;
    running_.reserve(max_entries);
    ended_.reserve(max_entries);
    running_views_.reserve(max_entries);
    proposals_.reserve(max_entries);
    proposal_sequences_.reserve(max_entries);
    waiting_views_.reserve(max_entries);
    waiting_head_.reserve(max_entries);
    fair_head_.reserve(max_entries);
    plan_.entries.reserve(max_entries * 2);
    batch_.reserve(max_entries * 2);
    inter_token_latencies_.reserve(max_rows);
    logits_.assign(max_rows * vocab_size_, 0.0f);
    BuildTokenTable();
    commands_.reserve(64);
    PublishGauges(LiveGauges());
  }

  ~Impl() { Shutdown(absl::ZeroDuration()); }

  void Start() {
    thread_ = std::thread([this] { Run(); });
  }

  absl::Status Submit(GenerationRequest request, std::shared_ptr<TokenSink> sink);
  void Cancel(absl::string_view request_id) { inbox_.PushCancel(request_id); }
  void Resume(absl::string_view request_id) { inbox_.PushResume(request_id); }
  void Shutdown(absl::Duration drain_timeout);

  const Model& model() const {
    const Model* model = step_model_->model();
    QUILL_CHECK(model != nullptr);
    return *model;
  }
  const EngineOptions& options() const { return options_; }
  EngineGauges gauges() const {
    EngineGauges g;
    g.requests_running = gauge_running_.load(std::memory_order_relaxed);
    g.requests_waiting = gauge_waiting_.load(std::memory_order_relaxed);
    g.requests_paused = gauge_paused_.load(std::memory_order_relaxed);
    g.kv_blocks_total = kv_num_blocks_;
    g.kv_blocks_used = gauge_kv_blocks_used_.load(std::memory_order_relaxed);
    g.kv_blocks_cached = gauge_kv_blocks_cached_.load(std::memory_order_relaxed);
    g.kv_bytes_total = kv_bytes_total_;
    g.kv_bytes_used = g.kv_blocks_used * kv_block_bytes_;
    return g;
  }

 private:
  absl::Status Validate(const GenerationRequest& request) const;

  // Engine thread only, from here on.
  void Run();
  void ApplyCommands();
  void MarkExpired(absl::Time now);
  // When something can next change with no command: the earliest deadline, stall timeout
  // or (if closed) drain deadline.
  absl::Time NextTimer(const Inbox::Drained& drained) const;
  void Pause(Sequence& seq, absl::Time now);
  void Unpause(Sequence& seq);
  // Paused requests whose sinks drained rejoin while run slots are free.
  void ResumeReady();
  void MarkGone(Sequence& seq, const absl::Status& cancelled);
  void MarkAll(FinishReason reason, const absl::Status& status);
  // Returns false when it planned nothing (every running request is paused and nothing
  // can be admitted): only a command or a timer can change that.
  bool Step();
  // Fills token_table_ from the tokenizer (JSON mode's view of the vocabulary).
  void BuildTokenTable();
  // Looks up each admissible waiting request's cached prefix and fills waiting_views_.
  void BuildWaitingViews();
  // Whether the prompt block after `cached_blocks` of waiting_head_[index]'s prompt is
  // one that a sequence ahead of it will write: an unpaused running one still prefilling
  // it, or a waiting one before it (whose cached prefix ends at or before that block).
  bool AwaitsSharedPrefix(size_t index, int cached_blocks) const;
  // How many prompt tokens the next step may take next to `decode_tokens` decoders and
  // the `draft_tokens` drafts they verify.
  int PrefillTokenLimit(const PlanInput& input, int decode_tokens, int draft_tokens) const;
  // The fewest prompt tokens a step takes while decoders run.
  int GuaranteedPrefillTokens() const;
  // `tokens` rounded to a step size that runs the model's kernels in whole blocks.
  int RoundDownToStepMultiple(int tokens) const;
  int RoundUpToStepMultiple(int tokens) const;
  // Moves the planned head of the queue into the running set with its KV reserved.
  void Admit(absl::Time now);
  bool has_waiting() const { return !promised_.empty() || !queued_.empty(); }
  size_t num_waiting() const { return promised_.size() + queued_.size(); }
  // Picks the draft tokens each decoding sequence verifies this step (running_views_).
  void ProposeDrafts();
  // Samples `rows` logits rows in turn and emits each token; row j + 1 is valid (its input
  // was draft j) only if row j picked draft j. Returns the drafts accepted.
  int EmitTokens(Sequence& seq, const float* logits, int rows, absl::Span<const TokenId> draft,
                 bool decode, absl::Time now);
  // A request ends in two halves, in the order a client can rely on: EndMarked takes every
  // sequence marked finished out of the running set and queues, frees its KV blocks and
  // records its metrics (observer); the caller publishes the gauges; then TellEnded tells
  // the sinks. So once a client learns that its request ended, /metrics counts it and
  // shows it neither running nor waiting. EndMarked returns how many ended.
  int EndMarked(absl::Time now);
  void TellEnded();
  // The gauges of the engine's state now, and their publication to gauges() (any thread).
  EngineGauges LiveGauges() const;
  void PublishGauges(const EngineGauges& gauges);
  // Publishes the gauges and tells the observer: for changes no forward step reports
  // (OnStep carries the gauges of the steps that run).
  void ReportGauges();
  // Adds `busy` time (engine work, or a queue waiting on paused requests) to the rate
  // window and publishes the rates once it is long enough to mean something.
  void MeasureRates(absl::Duration busy);

  // Immutable after construction.
  const std::unique_ptr<StepModel> step_model_;
  const EngineOptions options_;
  EngineObserver* const observer_;     // may be null; outlives the engine (caller's promise)
  const Clock* const clock_;           // outlives the engine (Clock::Real() or the caller's)
  const std::unique_ptr<KvCache> kv_;  // engine thread only (const pointer, mutable pool)
  std::unique_ptr<ModelDrafter> drafter_;  // null: n-gram drafting
  Inbox inbox_;
  const int vocab_size_;
  TokenBytesTable token_table_;  // built once; read by JSON-mode sequences
  const int context_length_;
  const int max_tokens_limit_;
  const int kv_block_size_;
  const int kv_num_blocks_;
  const int64_t kv_block_bytes_ = kv_->block_bytes();
  const int64_t kv_bytes_total_ = kv_->total_bytes();
  PlannerOptions planner_options_;

  std::atomic<int64_t> next_kv_id_{1};
  std::atomic<int> gauge_running_{0};
  std::atomic<int> gauge_waiting_{0};
  std::atomic<int> gauge_paused_{0};
  std::atomic<int> gauge_kv_blocks_used_{0};
  std::atomic<int> gauge_kv_blocks_cached_{0};

  absl::Mutex shutdown_mu_;
  bool stopped_ ABSL_GUARDED_BY(shutdown_mu_) = false;
  std::thread thread_;

  // Engine thread state: touched only by Run() and what it calls (checked in debug builds).
  std::thread::id engine_thread_;
  std::vector<Command> commands_;
  // Waiting requests, admitted in this order: promised_ (they were promised their slot and
  // KV at submit, see Inbox; FIFO), then queued_ (weighted-fair across tenants).
  std::deque<std::unique_ptr<Sequence>> promised_;
  FairQueue<std::unique_ptr<Sequence>> queued_;
  std::vector<Sequence*> waiting_head_;                // the first admissible, in admission order
  std::vector<std::unique_ptr<Sequence>*> fair_head_;  // scratch for queued_.Head()
  std::vector<std::unique_ptr<Sequence>> running_;  // admission order
  // Between EndMarked and TellEnded: the sequences that ended, with what their sinks hear.
  struct Ended {
    std::unique_ptr<Sequence> seq;
    FinishInfo info;
  };
  std::vector<Ended> ended_;
  int num_paused_ = 0;                              // of running_
  absl::flat_hash_map<std::string, Sequence*> by_id_;
  std::vector<RunningView> running_views_;
  std::vector<WaitingView> waiting_views_;
  StepPlan plan_;
  std::vector<BatchEntry> batch_;
  std::vector<float> logits_;  // max_rows rows of vocab_size
  NgramDraftOptions ngram_options_;
  std::vector<ModelDrafter::Proposal> proposals_;  // this step's, for drafter_
  std::vector<size_t> proposal_sequences_;         // their indices in running_
  std::vector<absl::Duration> inter_token_latencies_;
  int step_prefix_query_tokens_ = 0;  // over this step's admissions
  int step_prefix_hit_tokens_ = 0;
  int step_prefix_waited_requests_ = 0;
  // Requests finished per second of busy time: engine work, and time a queue waited while
  // every running request was paused (idle time is left out).
  EwmaRate finished_rate_{absl::Seconds(5)};
  // Batch tokens per second of forward time in steps that prefill.
  EwmaRate prefill_rate_{absl::Seconds(5)};
  // Prompt tokens that finished requests prefilled, per second of busy time: under a
  // steady load, the rate at which new prompt tokens arrive (a burst of arrivals is not in
  // it). 1 s: a standing queue has to drain within a few steps of forming.
  EwmaRate finished_prompt_token_rate_{absl::Seconds(1)};
  int finished_prompt_tokens_in_window_ = 0;
  absl::Duration last_step_duration_ = absl::ZeroDuration();
  StepCostModel step_cost_;  // step duration by tokens, for the inter-token-latency budget
  int finished_in_window_ = 0;
  absl::Duration window_busy_ = absl::ZeroDuration();
};

absl::Status Engine::Impl::Validate(const GenerationRequest& r) const {
  if (r.request_id.empty()) return absl::InvalidArgumentError("request_id must not be empty");
  QUILL_RETURN_IF_ERROR(CheckPrintableAscii("request_id", r.request_id));
  QUILL_RETURN_IF_ERROR(CheckPrintableAscii("tenant", r.tenant));
  if (r.tenant.size() > kMaxTenantBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("tenant is longer than ", kMaxTenantBytes, " bytes"));
  }
  if (r.tenant_weight < 1 || r.tenant_weight > kMaxTenantWeight) {
    return absl::InvalidArgumentError(absl::StrCat("tenant_weight must be in [1, ",
                                                   kMaxTenantWeight, "], got ", r.tenant_weight));
  }
  if (r.prompt_ids.empty()) return absl::InvalidArgumentError("prompt must not be empty");
  for (size_t i = 0; i < r.prompt_ids.size(); ++i) {
    if (r.prompt_ids[i] < 0 || r.prompt_ids[i] >= vocab_size_) {
      return absl::InvalidArgumentError(
          absl::StrCat("prompt_token_ids[", i, "] = ", r.prompt_ids[i],
                       " is outside the vocabulary [0, ", vocab_size_, ")"));
    }
  }
  const int64_t prompt = static_cast<int64_t>(r.prompt_ids.size());
  if (prompt >= context_length_) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt has ", prompt, " tokens; the context length is ", context_length_,
                     " and at least one position must be left for output"));
  }
  if (r.max_tokens < 1 || r.max_tokens > max_tokens_limit_) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_tokens must be in [1, ", max_tokens_limit_, "], got ", r.max_tokens));
  }
  if (prompt + r.max_tokens > context_length_) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_tokens: prompt (", prompt, " tokens) + max_tokens (", r.max_tokens,
                     ") exceeds the context length ", context_length_));
  }
  QUILL_RETURN_IF_ERROR(ValidateSamplingParams(r.sampling));
  if (r.json_schema != nullptr && !r.json_object) {
    return absl::InvalidArgumentError("json_schema needs json_object (the schema's object)");
  }
  if (r.thought.has_value()) {
    const ThoughtTokens& t = *r.thought;
    const auto valid = [&](TokenId id) { return id >= 0 && id < vocab_size_; };
    if (!valid(t.close) || (!t.opened && !valid(t.open))) {
      return absl::InvalidArgumentError("thought needs its tags' token ids in the vocabulary");
    }
  }
  if (r.json_object && r.ignore_eos) {
    return absl::InvalidArgumentError(
        "json_object cannot be combined with ignore_eos: the object's end ends the answer");
  }
  if (r.json_object && step_model_->tokenizer().end_of_generation_ids().empty()) {
    return absl::InvalidArgumentError(
        "json_object: the vocabulary has no end-of-generation token to end the object with");
  }
  if (r.logprobs < 0 || r.logprobs > kMaxLogprobs) {
    return absl::InvalidArgumentError(
        absl::StrCat("logprobs must be in [0, ", kMaxLogprobs, "], got ", r.logprobs));
  }
  if (r.stop.size() > kMaxStopStrings) {
    return absl::InvalidArgumentError(
        absl::StrCat("stop: at most ", kMaxStopStrings, " stop strings, got ", r.stop.size()));
  }
  for (size_t i = 0; i < r.stop.size(); ++i) {
    if (r.stop[i].size() > kMaxStopBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("stop[", i, "] is longer than ", kMaxStopBytes, " bytes"));
    }
    if (!IsValidUtf8(r.stop[i])) {
      return absl::InvalidArgumentError(absl::StrCat("stop[", i, "] is not valid UTF-8"));
    }
  }
  for (size_t i = 0; i < r.stop_token_ids.size(); ++i) {
    if (r.stop_token_ids[i] < 0 || r.stop_token_ids[i] >= vocab_size_) {
      return absl::InvalidArgumentError(
          absl::StrCat("stop_token_ids[", i, "] = ", r.stop_token_ids[i],
                       " is outside the vocabulary [0, ", vocab_size_, ")"));
    }
  }
  // Admission reserves prompt + max_tokens positions, so both must fit the whole pool.
  const auto blocks = [this](int64_t tokens) {
    return (tokens + kv_block_size_ - 1) / kv_block_size_;
  };
  if (blocks(prompt) > kv_num_blocks_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt: ", prompt, " tokens need ", blocks(prompt), " KV blocks but the whole pool has ",
        kv_num_blocks_, " (kv_cache_bytes too small)"));
  }
  if (blocks(prompt + r.max_tokens) > kv_num_blocks_) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_tokens: prompt + max_tokens = ", prompt + r.max_tokens, " tokens need ",
                     blocks(prompt + r.max_tokens), " KV blocks but the whole pool has ",
                     kv_num_blocks_, " (kv_cache_bytes too small)"));
  }
  return absl::OkStatus();
}

absl::Status Engine::Impl::Submit(GenerationRequest request, std::shared_ptr<TokenSink> sink) {
  if (sink == nullptr) return absl::InvalidArgumentError("sink must not be null");
  QUILL_RETURN_IF_ERROR(Validate(request));
  // Cheap early answer; PushSubmit checks again under the lock.
  if (inbox_.closed()) return absl::UnavailableError("server shutting down");
  // A JSON-mode request's tokens depend on a mask drafts are not checked against.
  if (request.json_object) request.disable_speculation = true;
  const int max_drafts = request.disable_speculation ? 0 : options_.spec_tokens;
  auto sequence = std::make_unique<Sequence>(
      next_kv_id_.fetch_add(1, std::memory_order_relaxed), std::move(request), std::move(sink),
      step_model_->tokenizer(), vocab_size_, clock_->Now(),
      options_.prefix_cache ? kv_block_size_ : 0, max_drafts, &token_table_);
  // The inbox's capacity count takes the whole reservation, cache hits or not: it may
  // queue a request the cache would have let in, never the reverse.
  sequence->kv_blocks =
      static_cast<int>((sequence->kv_tokens_reserved() + kv_block_size_ - 1) / kv_block_size_);
  return inbox_.PushSubmit(std::move(sequence));
}

void Engine::Impl::Shutdown(absl::Duration drain_timeout) {
  absl::MutexLock lock(&shutdown_mu_);
  if (stopped_) return;
  drain_timeout = std::max(drain_timeout, absl::ZeroDuration());
  inbox_.Close(clock_->Now() + drain_timeout);
  if (thread_.joinable()) thread_.join();
  stopped_ = true;
}

void Engine::Impl::Run() {
  engine_thread_ = std::this_thread::get_id();
  if (options_.num_threads > 0) omp_set_num_threads(options_.num_threads);
  absl::Time last_iteration_end = clock_->Now();
  bool stalled = false;  // the last step planned nothing
  Inbox::Drained drained;
  while (true) {
    const bool idle = running_.empty() && !has_waiting();
    // Stalled while requests wait (paused ones hold the KV blocks they need): nothing
    // finishes, and a deadline's queue-wait estimate must see that.
    const bool queue_stalled = stalled && has_waiting();
    commands_.clear();
    // An idle engine sleeps here until a command or shutdown arrives; one whose requests
    // are all paused, until a command or its next timer. Neither polls.
    absl::Duration timeout = absl::ZeroDuration();
    if (idle && !drained.closed) {
      timeout = absl::InfiniteDuration();
    } else if (stalled) {
      timeout = std::max(absl::ZeroDuration(), NextTimer(drained) - clock_->Now());
    }
    drained = inbox_.WaitAndDrain(timeout, &commands_);
    ApplyCommands();
    const absl::Time now = clock_->Now();
    // Time asleep is not engine work when idle, or when stalled with no one waiting on it.
    const absl::Time busy_from = idle || (stalled && !queue_stalled) ? now : last_iteration_end;
    MarkExpired(now);
    if (drained.closed && now >= drained.drain_deadline) {
      MarkAll(FinishReason::kShutdown, absl::UnavailableError("server shutting down"));
    }
    const int finished = EndMarked(now);
    // Ends are reported at once, not after the next step (which may take a while).
    if (finished > 0 || (running_.empty() && !has_waiting())) ReportGauges();
    TellEnded();
    if (running_.empty() && !has_waiting()) {
      if (drained.closed) break;  // nothing left to drain
      stalled = false;
      continue;
    }
    stalled = !Step();
    last_iteration_end = clock_->Now();
    if (!stalled || queue_stalled) MeasureRates(last_iteration_end - busy_from);
  }
}

void Engine::Impl::MeasureRates(absl::Duration busy) {
  window_busy_ += busy;
  // ~100 ms windows: long enough to hold whole requests, short enough to follow load.
  if (window_busy_ < absl::Milliseconds(100)) return;
  finished_rate_.Add(finished_in_window_, window_busy_);
  finished_in_window_ = 0;
  finished_prompt_token_rate_.Add(finished_prompt_tokens_in_window_, window_busy_);
  finished_prompt_tokens_in_window_ = 0;
  window_busy_ = absl::ZeroDuration();
  MeasuredRates rates;
  rates.requests_finished_per_second = finished_rate_.per_second();
  rates.prefill_tokens_per_second = prefill_rate_.per_second();
  inbox_.SetRates(rates);
}

void Engine::Impl::ApplyCommands() {
  for (Command& command : commands_) {
    if (command.kind == Command::Kind::kSubmit) {
      Sequence* seq = command.sequence.get();
      by_id_[seq->id()] = seq;
      if (seq->holds_capacity) {
        promised_.push_back(std::move(command.sequence));
      } else {
        const GenerationRequest& r = seq->request();
        queued_.Push(r.tenant, r.tenant_weight, std::move(command.sequence));
      }
    } else {
      auto it = by_id_.find(command.request_id);
      if (it == by_id_.end()) continue;  // unknown or already finished
      Sequence& seq = *it->second;
      if (command.kind == Command::Kind::kCancel) {
        MarkGone(seq, absl::CancelledError("request cancelled"));
      } else if (seq.paused() && !seq.sink().WouldBlock()) {
        seq.resume_ready = true;  // rejoins in Step() once a run slot is free
      }
    }
  }
  commands_.clear();
}

void Engine::Impl::MarkExpired(absl::Time now) {
  auto expire = [now](Sequence& seq) {
    if (now >= seq.request().deadline) {
      seq.MarkFinished(FinishReason::kDeadline, absl::DeadlineExceededError("deadline exceeded"));
    }
  };
  for (auto& seq : running_) expire(*seq);
  for (auto& seq : promised_) expire(*seq);
  queued_.ForEach([&](std::unique_ptr<Sequence>& seq) { expire(*seq); });
  if (num_paused_ == 0) return;
  for (auto& seq : running_) {
    // DEADLINE_EXCEEDED: a timeout, named in the message, that the client can act on (read
    // sooner); CANCELLED would read as its own cancel, RESOURCE_EXHAUSTED as a quota.
    if (seq->paused() && !seq->resume_ready && !seq->finish_pending() &&
        now - seq->paused_since >= options_.stall_timeout) {
      seq->MarkFinished(FinishReason::kStalled, absl::DeadlineExceededError(absl::StrCat(
                                                    "stream stalled: the client read nothing for ",
                                                    absl::FormatDuration(options_.stall_timeout),
                                                    " (the server's --stream-stall-timeout)")));
    }
  }
}

absl::Time Engine::Impl::NextTimer(const Inbox::Drained& drained) const {
  absl::Time next = drained.closed ? drained.drain_deadline : absl::InfiniteFuture();
  for (const auto& seq : running_) {
    next = std::min(next, seq->request().deadline);
    if (seq->paused() && !seq->resume_ready) {
      next = std::min(next, seq->paused_since + options_.stall_timeout);
    }
  }
  for (const auto& seq : promised_) next = std::min(next, seq->request().deadline);
  queued_.ForEach([&](const std::unique_ptr<Sequence>& seq) {
    next = std::min(next, seq->request().deadline);
  });
  return next;
}

void Engine::Impl::Pause(Sequence& seq, absl::Time now) {
  seq.paused_since = now;
  seq.resume_ready = false;
  ++num_paused_;
  inbox_.SlotReleased();
}

void Engine::Impl::Unpause(Sequence& seq) {
  seq.paused_since = absl::InfinitePast();
  seq.resume_ready = false;
  --num_paused_;
  inbox_.SlotRetaken();
}

void Engine::Impl::ResumeReady() {
  if (num_paused_ == 0) return;
  for (auto& seq : running_) {  // admission order
    if (static_cast<int>(running_.size()) - num_paused_ >= options_.max_running) return;
    if (seq->paused() && seq->resume_ready) Unpause(*seq);
  }
}

void Engine::Impl::MarkGone(Sequence& seq, const absl::Status& cancelled) {
  // A client's own deadline timer cancels its call a little before the deadline reaches
  // here (the server's copy is later by the request's transit time), and gRPC's server-side
  // timer may fire before this engine's step sees it: both still end as "deadline".
  constexpr absl::Duration kDeadlineSkew = absl::Milliseconds(250);
  if (clock_->Now() + kDeadlineSkew >= seq.request().deadline) {
    seq.MarkFinished(FinishReason::kDeadline, absl::DeadlineExceededError("deadline exceeded"));
  } else {
    seq.MarkFinished(FinishReason::kCancelled, cancelled);
  }
}

void Engine::Impl::MarkAll(FinishReason reason, const absl::Status& status) {
  for (auto& seq : running_) seq->MarkFinished(reason, status);
  for (auto& seq : promised_) seq->MarkFinished(reason, status);
  queued_.ForEach([&](std::unique_ptr<Sequence>& seq) { seq->MarkFinished(reason, status); });
}

bool Engine::Impl::Step() {
  QUILL_DCHECK(std::this_thread::get_id() == engine_thread_);
  const absl::Time start = clock_->Now();

  ResumeReady();
  running_views_.clear();
  int decoders = 0;
  for (const auto& seq : running_) {
    running_views_.push_back({seq->state(), seq->prompt_tokens(), seq->prefilled_tokens(),
                              seq->paused(), /*draft_tokens=*/0, seq->ends_at_prefill(),
                              seq->request().prompt_logprobs});
    if (seq->state() == SequenceState::kDecode && !seq->paused()) ++decoders;
  }
  ProposeDrafts();
  int drafts = 0;
  for (const RunningView& view : running_views_) drafts += view.paused ? 0 : view.draft_tokens;
  drafts = std::min(drafts, planner_options_.max_draft_tokens);
  BuildWaitingViews();
  PlanInput input;
  input.running = running_views_;
  input.waiting = waiting_views_;
  input.free_kv_blocks = kv_->num_free_blocks();
  input.max_prefill_tokens = PrefillTokenLimit(input, decoders, drafts);
  PlanStep(input, planner_options_, &plan_);
  Admit(start);
  if (plan_.entries.empty()) {
    // Nothing to run (every running request is paused), but arrivals and admissions still
    // change the gauges: without this, a request waiting behind paused ones went unseen.
    ReportGauges();
    return plan_.num_admitted > 0;
  }
  // Admissions show at once, not only after the step: a request admitted and finished in
  // this step would otherwise never take the gauges off idle, and a scrape that saw the
  // engine idle after its reply could still miss this step's OnStep.
  if (plan_.num_admitted > 0) PublishGauges(LiveGauges());

  batch_.clear();
  for (const PlannedEntry& e : plan_.entries) {
    const Sequence& seq = *running_[e.sequence];
    const absl::Span<const TokenId> tokens = seq.tokens();
    BatchEntry entry;
    entry.seq = seq.kv_id();
    if (e.decode) {
      entry.first_pos = static_cast<int32_t>(tokens.size() - 1);
      entry.tokens = e.draft_tokens > 0 ? seq.VerifyInput(e.draft_tokens)
                                        : tokens.subspan(tokens.size() - 1, 1);
      entry.num_logits = 1 + e.draft_tokens;
    } else {
      entry.first_pos = e.first_token;
      entry.tokens = tokens.subspan(e.first_token, e.num_tokens);
      if (e.prompt_logits) entry.num_logits = e.num_tokens;
    }
    entry.want_logits = e.want_logits || e.prompt_logits;
    batch_.push_back(entry);
  }

  const absl::Status forward = step_model_->Forward(batch_, *kv_, logits_.data());
  const absl::Time after = clock_->Now();
  inter_token_latencies_.clear();
  int accepted_draft_tokens = 0;
  if (!forward.ok()) {
    spdlog::error("engine: forward step over {} entries failed: {}", batch_.size(),
                  forward.ToString());
    for (const PlannedEntry& e : plan_.entries) {
      running_[e.sequence]->MarkFinished(
          FinishReason::kError,
          absl::InternalError(absl::StrCat("forward step failed: ", forward.message())));
    }
  } else {
    const int step_tokens = plan_.prefill_tokens + plan_.decode_tokens + plan_.draft_tokens;
    if (spdlog::should_log(spdlog::level::trace)) {
      // Before Add: how well the cost model sized this step (tune --itl-target with it).
      spdlog::trace(
          "engine step: decode={} drafts={} prefill={} running={} paused={} waiting={} "
          "predicted_ms={:.1f} ms={:.1f}",
          plan_.decode_tokens, plan_.draft_tokens, plan_.prefill_tokens, running_.size(),
          num_paused_, num_waiting(), absl::ToDoubleMilliseconds(step_cost_.Predict(step_tokens)),
          absl::ToDoubleMilliseconds(after - start));
    }
    // Drafts cost what any token costs: leaving them out would make the model predict
    // steps without drafts too long and steps with them too short.
    step_cost_.Add(step_tokens, after - start);
    last_step_duration_ = after - start;
    // A prompt shares its steps with decoders, so a step's whole batch is what it costs.
    if (plan_.prefill_tokens > 0) {
      prefill_rate_.Add(step_tokens, after - start);
    }
    size_t row = 0;
    for (const PlannedEntry& e : plan_.entries) {
      Sequence& seq = *running_[e.sequence];
      // K/V positions holding final content after this step: every token so far (not the
      // one sampled below), plus the accepted drafts. Rejected drafts' K/V lies beyond and
      // is overwritten by later steps; it never reaches the prefix cache, which only takes
      // blocks below kv_written.
      int kv_final = e.decode ? static_cast<int>(seq.tokens().size())
                              : e.first_token + e.num_tokens;
      if (!e.decode) seq.AddPrefilled(e.num_tokens);
      if (e.prompt_logits) {
        // Every row but the prompt's last scores the prompt token after it.
        const int scored = e.want_logits ? e.num_tokens - 1 : e.num_tokens;
        seq.AddPromptLogprobs(logits_.data() + row * vocab_size_, e.first_token, scored);
        row += scored;
      }
      if (e.want_logits) {
        const int rows = e.decode ? 1 + e.draft_tokens : 1;
        const float* logits = logits_.data() + row * vocab_size_;
        row += rows;
        if (!e.decode) {
          seq.prefill_done_time = after;
          seq.SetState(SequenceState::kDecode);
        }
        const absl::Span<const TokenId> draft =
            e.draft_tokens > 0 ? seq.draft().subspan(0, e.draft_tokens)
                               : absl::Span<const TokenId>();
        const int accepted = EmitTokens(seq, logits, rows, draft, e.decode, after);
        kv_final += accepted;
        if (e.draft_tokens > 0) {
          seq.draft_backoff().Record(e.draft_tokens, accepted);
          accepted_draft_tokens += accepted;
        }
      }
      if (options_.prefix_cache) {
        // Blocks the step filled become shareable.
        seq.SetKvWritten(kv_final);
        kv_->CacheFullBlocks(seq.kv_id(),
                             seq.block_hashes().subspan(0, seq.kv_written() / kv_block_size_),
                             seq.tokens());
      }
    }
  }
  EndMarked(after);
  // The step is recorded before its gauges are published: once gauges() (and so /metrics)
  // shows the engine idle, every metric of the steps and requests before is in.
  const EngineGauges gauges = LiveGauges();
  if (observer_ != nullptr) {
    StepStats stats;
    stats.prefill_tokens = plan_.prefill_tokens;
    stats.decode_tokens = plan_.decode_tokens;
    stats.draft_tokens = plan_.draft_tokens;
    stats.accepted_draft_tokens = accepted_draft_tokens;
    stats.num_sequences = static_cast<int>(plan_.entries.size());
    stats.prefix_query_tokens = step_prefix_query_tokens_;
    stats.prefix_hit_tokens = step_prefix_hit_tokens_;
    stats.prefix_waited_requests = step_prefix_waited_requests_;
    stats.phase = plan_.prefill_tokens == 0  ? StepPhase::kDecode
                  : plan_.decode_tokens == 0 ? StepPhase::kPrefill
                                             : StepPhase::kMixed;
    stats.duration = clock_->Now() - start;
    stats.inter_token_latencies = inter_token_latencies_;
    observer_->OnStep(stats, gauges);
  }
  PublishGauges(gauges);
  TellEnded();
  return true;
}

int Engine::Impl::PrefillTokenLimit(const PlanInput& input, int decode_tokens,
                                    int draft_tokens) const {
  // No target: prompts take what max_batch_tokens leaves.
  if (options_.itl_target == absl::ZeroDuration()) return PlanInput().max_prefill_tokens;
  if (decode_tokens == 0) {
    // Nobody waits for a next token, but prompts that start together decode together and
    // finish together: in a closed loop their successors come back as one wave, round
    // after round, and each wave stretches the steps it lands in. So one prompt that will
    // decode starts whole (with those that end at their prefill, which never decode), and
    // more only within the target; the steps after are metered beside its decoding.
    const int through_first_decoder = PromptTokensThroughFirstDecoder(input, planner_options_);
    if (!step_cost_.ready()) return through_first_decoder;
    return std::max(through_first_decoder,
                    RoundDownToStepMultiple(step_cost_.TokensWithin(options_.itl_target)));
  }
  if (!step_cost_.ready()) return PlanInput().max_prefill_tokens;
  // When decoding alone takes more than the target, the step may take kDecodeStepFactor x
  // as long as decoding alone (drafts included: they cost what any token costs).
  const absl::Duration step_budget = std::max(
      options_.itl_target, kDecodeStepFactor * step_cost_.Predict(decode_tokens + draft_tokens));
  // Once a step was timed, never kUnbounded: at most twice the largest recent step.
  const int tokens = step_cost_.TokensWithin(step_budget);
  // The budget rounds down, the prompts' guaranteed tokens round up.
  const int running = decode_tokens + draft_tokens;
  const int within_budget = RoundDownToStepMultiple(tokens);
  const int guaranteed = RoundUpToStepMultiple(running + GuaranteedPrefillTokens());
  return std::max(within_budget, guaranteed) - running;
}

// A step of 96 tokens runs as one oneDNN bucket and takes less time than one of 90 (a
// 64-row bucket and a 26-row pass over the weights). Below the buckets, rounding only adds
// tokens: 13 BF16 decoders and a 32-token prompt (45 rows of GEMV) took 230 ms, rounded to
// 64 rows 300 ms, and the rounding started two prompts a step where one was guaranteed.
int Engine::Impl::RoundDownToStepMultiple(int tokens) const {
  const int multiple = std::max(1, step_model_->step_token_multiple(tokens));
  return tokens / multiple * multiple;
}

int Engine::Impl::RoundUpToStepMultiple(int tokens) const {
  const int multiple = std::max(1, step_model_->step_token_multiple(tokens));
  return (tokens + multiple - 1) / multiple * multiple;
}

int Engine::Impl::GuaranteedPrefillTokens() const {
  // Per step: the last step's length (the guard makes steps longer than the budget, and
  // the budget would understate what finishes in one).
  const double finished_per_step =
      finished_prompt_token_rate_.per_second() * absl::ToDoubleSeconds(last_step_duration_);
  return std::max(kMinPrefillTokensPerStep,
                  static_cast<int>(std::ceil(kFinishedPromptHeadroom * finished_per_step)));
}

void Engine::Impl::BuildTokenTable() {
  const Tokenizer& tokenizer = step_model_->tokenizer();
  std::vector<std::string> bytes(vocab_size_);
  std::vector<uint8_t> ends_generation(vocab_size_, 0);
  // Model rows past the tokenizer's vocabulary (padding) have no bytes: never allowed.
  for (int id = 0; id < std::min(vocab_size_, tokenizer.vocab_size()); ++id) {
    if (!tokenizer.IsControl(id)) bytes[id] = tokenizer.TokenBytes(id);
  }
  for (TokenId id : tokenizer.end_of_generation_ids()) {
    if (id >= 0 && id < vocab_size_) ends_generation[id] = 1;
  }
  token_table_ = TokenBytesTable::Make(std::move(bytes), std::move(ends_generation));
}

void Engine::Impl::BuildWaitingViews() {
  waiting_views_.clear();
  // Paused requests hold no run slot.
  const size_t admissible = options_.max_running - (running_.size() - num_paused_);
  // The admission order: promised requests first, then the fair queue's head.
  waiting_head_.clear();
  for (size_t i = 0; i < promised_.size() && waiting_head_.size() < admissible; ++i) {
    waiting_head_.push_back(promised_[i].get());
  }
  if (waiting_head_.size() < admissible) {
    queued_.Head(admissible - waiting_head_.size(), &fair_head_);
    for (std::unique_ptr<Sequence>* seq : fair_head_) waiting_head_.push_back(seq->get());
  }
  for (size_t i = 0; i < waiting_head_.size(); ++i) {
    Sequence& seq = *waiting_head_[i];
    WaitingView view;
    view.prompt_tokens = seq.prompt_tokens();
    view.ends_at_prefill = seq.ends_at_prefill();
    view.prompt_logprobs = seq.request().prompt_logprobs;
    view.kv_blocks_needed = kv_->BlocksForTokens(seq.kv_tokens_reserved());
    if (options_.prefix_cache) {
      const KvCache::PrefixMatch match = kv_->MatchPrefix(seq.prompt_lookup_hashes(), seq.tokens());
      // Held cached blocks cost nothing; unheld ones leave the free count when taken.
      view.kv_blocks_needed += match.evictable_blocks - match.blocks;
      view.cached_tokens = match.blocks * kv_block_size_;
      view.awaits_shared_prefix = AwaitsSharedPrefix(i, match.blocks);
      seq.awaited_shared_prefix |= view.awaits_shared_prefix;
    }
    waiting_views_.push_back(view);
  }
}

bool Engine::Impl::AwaitsSharedPrefix(size_t index, int cached_blocks) const {
  const absl::Span<const uint64_t> lookup = waiting_head_[index]->prompt_lookup_hashes();
  if (static_cast<size_t>(cached_blocks) >= lookup.size()) return false;
  // Chained hashes: one equal hash means the whole prefix up to it is equal (a collision
  // only makes the request wait for nothing, as long as the writer prefills).
  const uint64_t next = lookup[cached_blocks];
  const int block_end = (cached_blocks + 1) * kv_block_size_;
  const auto writes_block = [&](const Sequence& seq, int written_tokens) {
    const absl::Span<const uint64_t> hashes = seq.block_hashes();
    return !seq.finish_pending() && static_cast<size_t>(cached_blocks) < hashes.size() &&
           hashes[cached_blocks] == next && written_tokens < block_end &&
           block_end <= seq.prompt_tokens();
  };
  for (const auto& seq : running_) {
    if (seq->state() == SequenceState::kPrefill && !seq->paused() &&
        writes_block(*seq, seq->prefilled_tokens())) {
      return true;
    }
  }
  for (size_t j = 0; j < index; ++j) {
    if (writes_block(*waiting_head_[j], waiting_views_[j].cached_tokens)) return true;
  }
  return false;
}

void Engine::Impl::Admit(absl::Time now) {
  step_prefix_query_tokens_ = 0;
  step_prefix_hit_tokens_ = 0;
  step_prefix_waited_requests_ = 0;
  // Two passes: every admitted request first takes its cached prefix, and only then are
  // new blocks allocated. An allocation may evict an unheld cached block, and must not
  // evict one that a request admitted in this same step was planned to reuse.
  for (int i = 0; i < plan_.num_admitted; ++i) {
    Sequence& seq = *waiting_head_[i];
    if (!options_.prefix_cache) continue;
    const int blocks = kv_->AttachPrefix(seq.kv_id(), seq.prompt_lookup_hashes(), seq.tokens());
    QUILL_CHECK(blocks * kv_block_size_ == waiting_views_[i].cached_tokens);  // nothing changed
    seq.SetCachedPromptTokens(blocks * kv_block_size_);
    step_prefix_query_tokens_ += seq.prompt_tokens();
    step_prefix_hit_tokens_ += seq.cached_prompt_tokens();
    step_prefix_waited_requests_ += seq.awaited_shared_prefix ? 1 : 0;
  }
  // The whole reservation up front, so a running request never runs out.
  for (int i = 0; i < plan_.num_admitted; ++i) {
    std::unique_ptr<Sequence> seq;
    if (!promised_.empty()) {
      seq = std::move(promised_.front());
      promised_.pop_front();
    } else {
      seq = queued_.PopFront();
    }
    QUILL_CHECK(seq.get() == waiting_head_[i]);  // popped in the order planned
    const absl::Status reserved = kv_->Reserve(seq->kv_id(), seq->kv_tokens_reserved());
    QUILL_CHECK(reserved.ok());  // the planner only admits what fits
    if (!seq->holds_capacity) {
      inbox_.Admitted(seq->request().tenant, seq->kv_blocks);
      seq->holds_capacity = true;
    }
    seq->SetState(SequenceState::kPrefill);
    seq->admit_time = now;
    running_.push_back(std::move(seq));
  }
}

void Engine::Impl::ProposeDrafts() {
  proposals_.clear();
  proposal_sequences_.clear();
  if (options_.spec_tokens == 0) return;
  int decoding = 0;
  for (const RunningView& view : running_views_) decoding += view.state == SequenceState::kDecode;
  if (decoding >= options_.spec_max_decoders) return;
  for (size_t i = 0; i < running_.size(); ++i) {
    Sequence& seq = *running_[i];
    if (seq.state() != SequenceState::kDecode || seq.request().disable_speculation) continue;
    // A step emits at most 1 + drafts tokens, so drafts past the last one are wasted (and
    // would write K/V past the reservation).
    const int useful = seq.request().max_tokens - seq.completion_tokens() - 1;
    if (useful <= 0) continue;
    const int budget = seq.draft_backoff().Budget(std::min(options_.spec_tokens, useful));
    if (budget <= 0) continue;
    if (drafter_ == nullptr) {
      running_views_[i].draft_tokens = seq.ProposeDraft(ngram_options_, budget);
      continue;
    }
    ModelDrafter::Proposal proposal;
    proposal.seq = seq.kv_id();
    proposal.history = seq.tokens();
    proposal.reserve_tokens = seq.kv_tokens_reserved();
    proposal.draft = seq.DraftBuffer(budget);
    proposals_.push_back(proposal);
    proposal_sequences_.push_back(i);
  }
  if (proposals_.empty()) return;
  drafter_->Propose(absl::MakeSpan(proposals_));
  for (size_t j = 0; j < proposals_.size(); ++j) {
    const size_t i = proposal_sequences_[j];
    running_[i]->SetDrafted(proposals_[j].drafted);
    running_views_[i].draft_tokens = proposals_[j].drafted;
  }
}

int Engine::Impl::EmitTokens(Sequence& seq, const float* logits, int rows,
                             absl::Span<const TokenId> draft, bool decode, absl::Time now) {
  if (seq.finish_pending()) return 0;  // e.g. cancelled: no more output
  TokenChunk chunk;
  chunk.tokens.reserve(rows);  // one allocation however many drafts are accepted
  chunk.prompt_logprobs = seq.TakePromptLogprobs();
  bool finish = false;
  FinishReason reason = FinishReason::kLength;
  int accepted = 0;
  const GenerationRequest& request = seq.request();
  for (int j = 0; j < rows; ++j) {
    GeneratedToken token =
        seq.SampleNext(absl::MakeConstSpan(logits + static_cast<size_t>(j) * vocab_size_,
                                           vocab_size_));
    if (seq.first_token_time == absl::InfinitePast()) seq.first_token_time = now;
    const TokenId id = token.id;
    if (!request.ignore_eos && step_model_->tokenizer().IsEndOfGeneration(id)) {
      finish = true;  // EOS is neither emitted nor counted
      reason = FinishReason::kEos;
      break;
    }
    if (seq.IsStopToken(id)) {
      finish = true;  // a stop token is neither emitted nor counted
      reason = FinishReason::kStop;
      break;
    }
    // Tokens after the first in one step arrive with it: their gap is zero.
    if (decode && seq.last_token_time != absl::InfinitePast()) {
      inter_token_latencies_.push_back(now - seq.last_token_time);
    }
    seq.last_token_time = now;
    const bool stopped = seq.AcceptToken(id, &chunk.text);
    chunk.tokens.push_back(std::move(token));
    if (stopped) {
      finish = true;
      reason = FinishReason::kStop;
      break;
    }
    if (seq.completion_tokens() >= request.max_tokens) {
      finish = true;
      reason = FinishReason::kLength;
      break;
    }
    // The standard rule for a deterministic draft (accept with probability p(draft), else
    // sample from p without it, renormalized) is exactly this coupling: sample from p as
    // usual and accept iff the sample is the draft; a rejection's sample is the output.
    if (j >= static_cast<int>(draft.size()) || id != draft[j]) break;
    ++accepted;
  }
  // On the way out, release the held UTF-8 bytes and stop-string lookahead.
  if (finish && seq.FlushText(&chunk.text)) reason = FinishReason::kStop;

  if (!chunk.tokens.empty() || !chunk.text.empty() || !chunk.prompt_logprobs.empty()) {
    if (!seq.sink().OnChunk(std::move(chunk)) && !finish) {
      MarkGone(seq, absl::CancelledError("the consumer went away"));
      return accepted;
    }
    if (!finish && seq.sink().WouldBlock()) Pause(seq, now);
  }
  if (finish) seq.MarkFinished(reason, absl::OkStatus());
  return accepted;
}

int Engine::Impl::EndMarked(absl::Time now) {
  QUILL_DCHECK(std::this_thread::get_id() == engine_thread_);
  QUILL_DCHECK(ended_.empty());
  // Every container is compacted first; only then are the ended sequences' resources freed.
  auto take_marked = [&](std::unique_ptr<Sequence>& seq) {
    if (!seq->finish_pending()) return false;
    ended_.push_back(Ended{std::move(seq), FinishInfo()});
    return true;
  };
  auto compact = [&](auto& sequences) {
    auto kept = sequences.begin();
    for (auto& seq : sequences) {
      if (!take_marked(seq)) *kept++ = std::move(seq);
    }
    sequences.erase(kept, sequences.end());
  };
  compact(running_);
  compact(promised_);
  queued_.EraseIf(take_marked);
  for (Ended& e : ended_) {
    Sequence& seq = *e.seq;
    seq.SetState(SequenceState::kFinished);
    if (seq.paused()) Unpause(seq);
    kv_->Release(seq.kv_id());
    if (drafter_ != nullptr) drafter_->Release(seq.kv_id());
    if (seq.holds_capacity) {
      inbox_.Released(seq.kv_blocks);
    } else {
      inbox_.LeftQueue(seq.request().tenant);
    }
    ++finished_in_window_;
    // What its prompt cost to prefill: a prefix-cache hit is not work a new prompt brings.
    finished_prompt_tokens_in_window_ += seq.prompt_tokens() - seq.cached_prompt_tokens();
    by_id_.erase(seq.id());
    inbox_.Forget(seq.id());  // before the sink hears, so the id can be reused at once

    FinishInfo& info = e.info;
    info.reason = seq.finish_reason();
    info.status = seq.finish_status();
    info.prompt_tokens = seq.prompt_tokens();
    info.completion_tokens = seq.completion_tokens();
    info.cached_prompt_tokens = seq.cached_prompt_tokens();
    if (seq.request().thought.has_value()) info.reasoning_tokens = seq.reasoning_tokens();
    info.timings = seq.Timings(now);
    info.frontend = seq.request().frontend;
    info.tenant = seq.request().tenant;
    if (observer_ != nullptr) observer_->OnRequestFinished(info);
  }
  return static_cast<int>(ended_.size());
}

void Engine::Impl::TellEnded() {
  for (Ended& e : ended_) e.seq->sink().OnFinish(e.info);
  ended_.clear();
}

EngineGauges Engine::Impl::LiveGauges() const {
  EngineGauges g;
  g.requests_running = static_cast<int>(running_.size());
  g.requests_waiting = static_cast<int>(num_waiting());
  g.requests_paused = num_paused_;
  g.kv_blocks_total = kv_num_blocks_;
  g.kv_blocks_used = kv_->num_used_blocks();
  g.kv_blocks_cached = kv_->num_cached_blocks();
  g.kv_bytes_total = kv_bytes_total_;
  g.kv_bytes_used = g.kv_blocks_used * kv_block_bytes_;
  return g;
}

void Engine::Impl::PublishGauges(const EngineGauges& gauges) {
  gauge_running_.store(gauges.requests_running, std::memory_order_relaxed);
  gauge_waiting_.store(gauges.requests_waiting, std::memory_order_relaxed);
  gauge_paused_.store(gauges.requests_paused, std::memory_order_relaxed);
  gauge_kv_blocks_used_.store(gauges.kv_blocks_used, std::memory_order_relaxed);
  gauge_kv_blocks_cached_.store(gauges.kv_blocks_cached, std::memory_order_relaxed);
}

void Engine::Impl::ReportGauges() {
  const EngineGauges gauges = LiveGauges();
  PublishGauges(gauges);
  if (observer_ != nullptr) observer_->OnGauges(gauges);
}

// ---------------------------------------------------------------------------------------

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Engine::~Engine() {
  if (impl_ != nullptr) impl_->Shutdown(absl::ZeroDuration());
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::CreateWithStepModel(
    std::unique_ptr<StepModel> step_model, const EngineOptions& options, EngineObserver* observer,
    const Clock* clock, std::unique_ptr<StepModel> draft_model) {
  if (step_model == nullptr) return absl::InvalidArgumentError("model must not be null");
  QUILL_RETURN_IF_ERROR(ValidateOptions(options, step_model->max_batch_tokens()));
  QUILL_ASSIGN_OR_RETURN(std::unique_ptr<KvCache> kv,
                         KvCache::Create(step_model->MakeKvCacheOptions(
                             options.kv_cache_bytes, options.block_size_tokens)));
  std::unique_ptr<ModelDrafter> drafter;
  if (draft_model != nullptr) {
    if (options.spec_tokens == 0) {
      return absl::InvalidArgumentError("a draft model needs spec_tokens > 0");
    }
    absl::StatusOr<std::unique_ptr<ModelDrafter>> created =
        ModelDrafter::Create(std::move(draft_model), *step_model,
                             static_cast<int64_t>(kv->num_blocks()) * kv->block_size(),
                             kv->block_size(), MaxDraftingSequences(options), options.spec_tokens);
    if (!created.ok()) {
      return absl::Status(created.status().code(),
                          absl::StrCat("draft model: ", created.status().message()));
    }
    drafter = *std::move(created);
  }
  auto impl = std::make_unique<Impl>(std::move(step_model), options, observer,
                                     clock != nullptr ? clock : Clock::Real(), std::move(kv),
                                     std::move(drafter));
  impl->Start();
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

absl::Status Engine::Submit(GenerationRequest request, std::shared_ptr<TokenSink> sink) {
  return impl_->Submit(std::move(request), std::move(sink));
}

void Engine::Cancel(absl::string_view request_id) { impl_->Cancel(request_id); }

void Engine::Resume(absl::string_view request_id) { impl_->Resume(request_id); }

void Engine::Shutdown(absl::Duration drain_timeout) { impl_->Shutdown(drain_timeout); }

const Model& Engine::model() const { return impl_->model(); }

const EngineOptions& Engine::options() const { return impl_->options(); }

EngineGauges Engine::gauges() const { return impl_->gauges(); }

}  // namespace quill::engine
