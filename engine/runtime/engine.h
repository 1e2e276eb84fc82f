#pragma once

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "engine/model/model.h"
#include "engine/runtime/clock.h"
#include "engine/runtime/engine_observer.h"
#include "engine/runtime/request.h"
#include "engine/runtime/step_model.h"
#include "engine/runtime/token_sink.h"

namespace quill::engine {

struct EngineOptions {
  int max_batch_tokens = 512;      // tokens per step, prefill + decode (<= model's max)
  int prefill_chunk_tokens = 256;  // a prompt is prefilled in chunks of at most this
  int max_running = 64;            // sequences in the running set at once
  // Requests waiting for a run slot or KV blocks; one more -> RESOURCE_EXHAUSTED. A
  // request that finds both free (and nobody waiting) starts at once and does not count.
  int max_queue = 256;
  // Requests one tenant (GenerationRequest::tenant) may have waiting; one more from that
  // tenant -> RESOURCE_EXHAUSTED, while other tenants still get queue space. 0 = no cap of
  // its own (max_queue bounds everyone together).
  int max_queue_per_tenant = 0;
  int64_t kv_cache_bytes = int64_t{256} << 20;
  int block_size_tokens = 16;
  int max_tokens_limit = 0;  // largest max_tokens accepted; 0 = the context length
  // Prefix caching: full KV blocks are kept, content-addressed, after their request ends,
  // and a new request whose prompt starts with the same tokens reuses them and prefills
  // only the rest (at least its last prompt token). Results are unchanged where Forward is
  // batch-invariant (exact precision).
  bool prefix_cache = true;
  // Inter-token-latency target: while requests are decoding, each step's prompt tokens are
  // limited so that the step is predicted (from measured step times) to take at most
  // max(itl_target, 1.5x a decode-only step, drafts included). At least
  // kMinPrefillTokensPerStep prompt tokens run so that prompts always progress, and at least
  // 1.5x the prompt tokens of the requests that finished per step (a 1 s average), so that
  // a steady load does not queue behind that guard. While nobody decodes, a step takes the
  // prompts that end at their prefill (one token to make) and one that will decode, a chunk
  // each, plus whatever else fits in itl_target: prompts started together would finish together
  // and, in a closed loop, come back together. Zero = no limit beyond max_batch_tokens.
  // quill-server sets 100 ms (--itl-target).
  absl::Duration itl_target = absl::ZeroDuration();
  // OpenMP threads the engine thread computes with; 0 = OpenMP's default (OMP_NUM_THREADS
  // or every core). Set on the engine thread itself: omp_set_num_threads() only affects
  // the thread that calls it.
  int num_threads = 0;
  // A request paused because its consumer stopped reading (TokenSink::WouldBlock) for
  // this long ends as kStalled (DEADLINE_EXCEEDED), its KV blocks freed. Infinite = never.
  absl::Duration stall_timeout = absl::InfiniteDuration();
  // Speculative decoding, model-free (n-gram prompt lookup, ngram_drafter.h) unless the
  // engine has a draft model (Engine::Create): a decoding
  // sequence whose last tokens occurred earlier in its prompt or output proposes up to
  // spec_tokens tokens that followed them, and the step verifies them with its own token
  // as one (1 + k)-token entry; the longest agreeing prefix plus the model's own next
  // token are emitted (1..k+1 tokens per step), and the rest of the KV is simply
  // overwritten later. The output is what non-speculative decoding gives from the same
  // logits, greedy or seeded (a draft is accepted exactly when the sampler, drawing as
  // usual, picks it); in exact precision logits are bit-identical, so outputs are too.
  // 0 = off. Requests can opt out (GenerationRequest::disable_speculation).
  int spec_tokens = 0;
  // No drafting in steps where this many sequences or more decode: speculation pays while
  // decode is bandwidth-bound (each step streams all weights for a few rows), and a big
  // batch already amortizes the weights, so extra rows would cost real compute.
  int spec_max_decoders = 8;
};

// The engine: one thread that owns the model, the KV cache and every sequence, and runs
// continuous batching (each step: one decode token per running sequence plus prefill
// chunks of sequences being admitted, within max_batch_tokens). Other threads talk to it
// only through Submit()/Cancel() (a command inbox) and the TokenSink they pass in.
//
// Admission order: waiting requests are admitted weighted-fair across tenants
// (GenerationRequest::tenant, fair_queue.h) and FIFO within a tenant, so one tenant's
// burst delays another tenant's request by about one admission per tenant with queued
// work, not by the whole burst. Order is all that changes: a request's output does not
// depend on what else is in the batch.
//
// KV admission policy: a request is admitted (in that order, no overtaking) only when the
// pool can reserve blocks for prompt + max_tokens in full. So a running request never runs out of
// KV because another one grew, nothing is ever preempted, and memory never exceeds
// kv_cache_bytes; the price is that short answers to long max_tokens hold blocks they may
// not use. A request whose prompt + max_tokens exceeds the whole pool is INVALID_ARGUMENT.
// With prefix_cache, cached blocks no request holds count as free (they are evicted, least
// recently used first, when needed), and a request reusing cached blocks reserves only
// the rest.
//
// Backpressure: a request whose sink reports WouldBlock() after a chunk is paused: it
// keeps its KV blocks but leaves the batch and gives up its run slot (the others' outputs
// do not change, and a waiting request may take the slot), until Resume(request_id) finds
// its sink ready again; it then rejoins as soon as a run slot is free, before any waiting
// request is admitted. Paused longer than stall_timeout (its sink still full), it ends as
// kStalled. With everything paused the engine sleeps until a command or its next timer (a
// deadline, a stall, the drain deadline). Why the slot goes: otherwise max_running clients
// that stop reading would hold every other request in the queue until they stall.
//
// Timings (RequestTimings): queue_wait = submit -> admitted; prefill = admitted -> last
// prompt chunk done; time_to_first_token = submit -> first token sampled (the step that
// completes the prompt); decode = first token -> finish; total = submit -> finish.
class Engine {
 public:
  // Takes the model, sizes the KV pool, and starts the engine thread. `observer` may be
  // null; if not, it must outlive the engine. INVALID_ARGUMENT for inconsistent options
  // (max_batch_tokens above the model's, max_running > max_batch_tokens, non-positive
  // sizes) or a KV budget below one block.
  //
  // With a `draft_model` (same vocabulary; model_drafter.h), speculative drafts come from
  // it instead of n-gram lookup: INVALID_ARGUMENT if the vocabularies differ or
  // spec_tokens is 0. Its KV pool holds as many tokens as the target's.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(
      std::unique_ptr<Model> model, const EngineOptions& options, EngineObserver* observer,
      std::unique_ptr<Model> draft_model = nullptr);
  ~Engine();  // Shutdown(zero) if not done yet.

  // Thread-safe; never blocks on the engine thread. Returns:
  //   INVALID_ARGUMENT   the request can never be served (names the field: empty prompt,
  //                      ids out of vocab, prompt + max_tokens beyond the context, bad
  //                      max_tokens or sampling, prompt larger than the whole KV pool;
  //                      also an empty request_id, logprobs outside [0, 20], more than
  //                      16 stop strings or one over 256 bytes or not UTF-8,
  //                      stop_token_ids out of vocab, a request_id or tenant that is
  //                      not printable ASCII, a tenant over 64 bytes, a tenant_weight
  //                      outside [1, 1000]);
  //   RESOURCE_EXHAUSTED no free run slot or KV blocks and max_queue requests already
  //                      wait (or max_queue_per_tenant of this tenant's); carries a
  //                      retry pushback (retry_pushback.h) from the measured rate at
  //                      which requests finish;
  //   DEADLINE_EXCEEDED  the deadline has passed, or cannot cover the expected queue
  //                      wait plus prefill at the measured rates (refused at once
  //                      rather than queued to fail later);
  //   ALREADY_EXISTS     a live request has the same id;
  //   UNAVAILABLE        the engine is draining or stopped.
  // On OK the engine owns the request and `sink` gets chunks and exactly one OnFinish.
  // On error `sink` is never called.
  absl::Status Submit(GenerationRequest request, std::shared_ptr<TokenSink> sink);

  // Thread-safe, never blocks; the request ends (kCancelled) within one step. No-op for
  // unknown or finished ids.
  void Cancel(absl::string_view request_id);

  // Thread-safe, never blocks: the sink of `request_id` drained (see TokenSink::WouldBlock);
  // if the request is paused and its sink no longer would block, it rejoins the batch on
  // the next step. No-op otherwise.
  void Resume(absl::string_view request_id);

  // Stops admitting (Submit -> UNAVAILABLE), lets accepted requests finish until
  // `drain_timeout`, ends the rest with kShutdown (UNAVAILABLE), then joins the thread.
  // Blocking; idempotent; never call it from a TokenSink.
  void Shutdown(absl::Duration drain_timeout);

  // Immutable parts (config, tokenizer) are safe to read from any thread.
  const Model& model() const;
  const EngineOptions& options() const;
  EngineGauges gauges() const;  // thread-safe snapshot

  // Like Create(), over any StepModel (tests use a scripted fake) and with an injected
  // clock (null = real time; it must outlive the engine). The engine sleeps in real time,
  // so a test that moves its clock past a timer wakes the engine with any command (e.g.
  // a Cancel of an unknown id). model() may only be called
  // when `step_model` wraps a Model.
  static absl::StatusOr<std::unique_ptr<Engine>> CreateWithStepModel(
      std::unique_ptr<StepModel> step_model, const EngineOptions& options, EngineObserver* observer,
      const Clock* clock = nullptr, std::unique_ptr<StepModel> draft_model = nullptr);

  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

 private:
  class Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace quill::engine
