#pragma once

#include <vector>

#include "absl/types/span.h"
#include "engine/runtime/sequence_state.h"

namespace quill::engine {

struct PlannerOptions {
  int max_batch_tokens = 512;      // tokens in one step, decode + prefill
  int prefill_chunk_tokens = 256;  // most prompt tokens of one sequence per step
  int max_running = 64;            // running set size (must be <= max_batch_tokens)
  int max_draft_tokens = 0;        // speculative draft tokens in one step, over all sequences
  // Prompt tokens of one step, over all sequences with prompt_logprobs (each such token
  // takes a logits row).
  int max_prompt_logit_rows = 0;
};

// What the planner needs to know about a running sequence (kPrefill or kDecode).
struct RunningView {
  SequenceState state = SequenceState::kPrefill;
  int prompt_tokens = 0;
  int prefilled_tokens = 0;  // prompt tokens already in the KV cache
  bool paused = false;       // its consumer is behind: it keeps its KV, is not stepped
  int draft_tokens = 0;      // kDecode: draft tokens proposed for verification this step
  bool ends_at_prefill = false;  // one token to make: it never decodes
  bool prompt_logprobs = false;  // every prompt token takes a logits row
};

// A waiting request, in the engine's admission order (fair across tenants).
struct WaitingView {
  int prompt_tokens = 0;
  int kv_blocks_needed = 0;  // reserved in full at admission (prompt + max_tokens)
  int cached_tokens = 0;     // leading prompt tokens already in the KV cache (< prompt)
  bool ends_at_prefill = false;  // one token to make: it never decodes
  bool prompt_logprobs = false;  // every prompt token takes a logits row
  // The next block of its prompt past cached_tokens is being prefilled by a sequence ahead
  // of it (running, or waiting before it): admitted now, it would compute that K/V again;
  // a step or a few later, it takes it from the prefix cache.
  bool awaits_shared_prefix = false;
};

struct PlanInput {
  absl::Span<const RunningView> running;  // in admission order
  absl::Span<const WaitingView> waiting;  // admission order
  int free_kv_blocks = 0;
  // Most prompt tokens this step may take (the engine's inter-token-latency budget), on top
  // of max_batch_tokens; decode tokens are never limited by it.
  int max_prefill_tokens = 1 << 30;
};

// One forward entry. `sequence` indexes running ++ the admitted head of waiting.
struct PlannedEntry {
  int sequence = 0;
  bool decode = false;  // the last token, plus draft_tokens drafts (otherwise a prompt chunk)
  int first_token = 0;  // prompt offset of the chunk (decode: unused)
  int num_tokens = 0;   // decode: 1 + draft_tokens
  int draft_tokens = 0;
  bool want_logits = false;  // decode, or the chunk that completes the prompt
  // A prompt chunk of a prompt_logprobs sequence: logits for every row (the last one of
  // the prompt's last chunk is also the one sampled from).
  bool prompt_logits = false;
};

struct StepPlan {
  int num_admitted = 0;               // the first num_admitted waiting requests join
  std::vector<PlannedEntry> entries;  // decode entries first, then prefill chunks
  int decode_tokens = 0;  // one per decoding sequence
  int draft_tokens = 0;   // drafts verified alongside them
  int prefill_tokens = 0;

  void Clear() {
    num_admitted = 0;
    entries.clear();
    decode_tokens = 0;
    draft_tokens = 0;
    prefill_tokens = 0;
  }
};

// The prompt tokens of the chunks PlanStep would plan first, if nothing limited prompts,
// up to and including the first chunk of a prompt that will decode: sequences still
// prefilling (unpaused), then the waiting ones (whether or not they could be admitted).
// Prompts that end at their prefill never decode and never stop the count. 0 when no
// prompt waits.
int PromptTokensThroughFirstDecoder(const PlanInput& input, const PlannerOptions& options);

// Plans one engine step; a pure function of its inputs (no clock, no model, no cache).
//  0. Paused sequences get nothing, and do not count against max_running (they keep
//     their KV blocks, not their run slot).
//  1. Every kDecode sequence gets its one token (always: max_running <= max_batch_tokens),
//     plus its proposed draft tokens, in order, while max_draft_tokens and the step's
//     token budget last (drafts go before prefill: they are few, and bounded).
//  2. Sequences in kPrefill get chunks of <= prefill_chunk_tokens, in admission order,
//     while the step's token budget (max_batch_tokens, and max_prefill_tokens) lasts;
//     chunks of prompt_logprobs sequences also within max_prompt_logit_rows (others go on
//     when those rows run out).
//  3. Waiting requests are admitted from the head (in the order given) while the running
//     set has room, the KV pool has the blocks they reserve, and the step has tokens left
//     for their first chunk (a prompt_logprobs one: and logit rows). The first request
//     that does not fit, or that awaits a shared prefix, stops admission (no overtaking).
// `plan` is cleared and refilled; its vectors keep their capacity between steps.
void PlanStep(const PlanInput& input, const PlannerOptions& options, StepPlan* plan);

}  // namespace quill::engine
