#include "engine/runtime/batch_planner.h"

#include <algorithm>

namespace quill::engine {
namespace {

// Appends a prefill chunk for a sequence with `remaining` prompt tokens starting at
// `first`; returns the tokens used. A prompt_logprobs chunk also fits in `logit_rows`,
// which it decrements.
int AddPrefillChunk(int sequence, int first, int remaining, bool prompt_logprobs, int budget,
                    int* logit_rows, const PlannerOptions& options, StepPlan* plan) {
  int n = std::min({remaining, options.prefill_chunk_tokens, budget});
  if (prompt_logprobs) n = std::min(n, *logit_rows);
  if (n <= 0) return 0;
  PlannedEntry entry;
  entry.sequence = sequence;
  entry.decode = false;
  entry.first_token = first;
  entry.num_tokens = n;
  entry.want_logits = (n == remaining);
  entry.prompt_logits = prompt_logprobs;
  if (prompt_logprobs) *logit_rows -= n;
  plan->entries.push_back(entry);
  plan->prefill_tokens += n;
  return n;
}

}  // namespace

int PromptTokensThroughFirstDecoder(const PlanInput& input, const PlannerOptions& options) {
  int tokens = 0;
  for (const RunningView& seq : input.running) {
    if (seq.state != SequenceState::kPrefill || seq.paused) continue;
    tokens += std::min(seq.prompt_tokens - seq.prefilled_tokens, options.prefill_chunk_tokens);
    if (!seq.ends_at_prefill) return tokens;
  }
  for (const WaitingView& seq : input.waiting) {
    tokens += std::min(seq.prompt_tokens - seq.cached_tokens, options.prefill_chunk_tokens);
    if (!seq.ends_at_prefill) return tokens;
  }
  return tokens;
}

void PlanStep(const PlanInput& input, const PlannerOptions& options, StepPlan* plan) {
  plan->Clear();
  const int num_running = static_cast<int>(input.running.size());

  for (int i = 0; i < num_running; ++i) {
    if (input.running[i].state != SequenceState::kDecode || input.running[i].paused) continue;
    PlannedEntry entry;
    entry.sequence = i;
    entry.decode = true;
    entry.num_tokens = 1;
    entry.want_logits = true;
    plan->entries.push_back(entry);
    ++plan->decode_tokens;
  }
  int budget = options.max_batch_tokens - plan->decode_tokens;
  int draft_budget = std::min(budget, options.max_draft_tokens);
  for (PlannedEntry& entry : plan->entries) {
    const int drafts = std::min(input.running[entry.sequence].draft_tokens, draft_budget);
    if (drafts <= 0) continue;
    entry.draft_tokens = drafts;
    entry.num_tokens += drafts;
    draft_budget -= drafts;
    plan->draft_tokens += drafts;
  }
  budget = std::min(budget - plan->draft_tokens, input.max_prefill_tokens);
  int logit_rows = options.max_prompt_logit_rows;

  for (int i = 0; i < num_running && budget > 0; ++i) {
    const RunningView& seq = input.running[i];
    if (seq.state != SequenceState::kPrefill || seq.paused) continue;
    budget -= AddPrefillChunk(i, seq.prefilled_tokens, seq.prompt_tokens - seq.prefilled_tokens,
                              seq.prompt_logprobs, budget, &logit_rows, options, plan);
  }

  // Paused sequences do not count against max_running: they are not in the batch.
  int active = 0;
  for (const RunningView& seq : input.running) active += seq.paused ? 0 : 1;
  int free_blocks = input.free_kv_blocks;
  for (const WaitingView& waiting : input.waiting) {
    if (budget <= 0) break;
    if (active + plan->num_admitted >= options.max_running) break;
    if (waiting.kv_blocks_needed > free_blocks) break;
    if (waiting.prompt_logprobs && logit_rows <= 0) break;
    if (waiting.awaits_shared_prefix) break;
    free_blocks -= waiting.kv_blocks_needed;
    const int index = num_running + plan->num_admitted;
    ++plan->num_admitted;
    budget -=
        AddPrefillChunk(index, waiting.cached_tokens, waiting.prompt_tokens - waiting.cached_tokens,
                        waiting.prompt_logprobs, budget, &logit_rows, options, plan);
  }
}

}  // namespace quill::engine
