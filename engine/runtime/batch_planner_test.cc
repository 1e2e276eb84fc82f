#include "engine/runtime/batch_planner.h"

#include <vector>

#include "gtest/gtest.h"

namespace quill::engine {
namespace {

RunningView Decoding() { return {SequenceState::kDecode, 10, 10}; }
RunningView Prefilling(int prompt, int done) { return {SequenceState::kPrefill, prompt, done}; }

struct Planner {
  PlannerOptions options;
  std::vector<RunningView> running;
  std::vector<WaitingView> waiting;
  int free_blocks = 1000;
  int max_prefill_tokens = 1 << 30;
  StepPlan plan;

  const StepPlan& Plan() {
    PlanInput input;
    input.running = running;
    input.waiting = waiting;
    input.free_kv_blocks = free_blocks;
    input.max_prefill_tokens = max_prefill_tokens;
    PlanStep(input, options, &plan);
    return plan;
  }
};

int ThroughFirstDecoder(const Planner& p) {
  PlanInput input;
  input.running = p.running;
  input.waiting = p.waiting;
  return PromptTokensThroughFirstDecoder(input, p.options);
}

TEST(BatchPlannerTest, PromptLogprobChunksShareTheLogitRowsOthersGoOn) {
  Planner p;
  p.options.max_batch_tokens = 512;
  p.options.prefill_chunk_tokens = 48;
  p.options.max_prompt_logit_rows = 64;
  RunningView scored = Prefilling(100, 0), second = Prefilling(30, 10);
  scored.prompt_logprobs = true;
  second.prompt_logprobs = true;
  WaitingView waiting_scored{20, 1, 0, false, /*prompt_logprobs=*/true};
  p.running = {scored, second, Prefilling(100, 0)};
  p.waiting = {WaitingView{20, 1, 0}, waiting_scored, WaitingView{20, 1, 0}};
  const StepPlan& plan = p.Plan();
  // 48 + 16 rows: the second scored prompt gets what the first left; the plain prompt
  // goes on; admission takes the plain waiting request and stops at the scored one.
  ASSERT_EQ(plan.entries.size(), 4u);
  EXPECT_EQ(plan.entries[0].num_tokens, 48);
  EXPECT_TRUE(plan.entries[0].prompt_logits);
  EXPECT_FALSE(plan.entries[0].want_logits);
  EXPECT_EQ(plan.entries[1].num_tokens, 16);
  EXPECT_TRUE(plan.entries[1].prompt_logits);
  EXPECT_EQ(plan.entries[2].num_tokens, 48);
  EXPECT_FALSE(plan.entries[2].prompt_logits);
  EXPECT_EQ(plan.entries[3].sequence, 3);
  EXPECT_EQ(plan.num_admitted, 1);
  // Its last chunk is both: every row scored, the last also sampled.
  p.running = {Prefilling(100, 96)};
  p.running[0].prompt_logprobs = true;
  p.waiting.clear();
  const StepPlan& last = p.Plan();
  ASSERT_EQ(last.entries.size(), 1u);
  EXPECT_EQ(last.entries[0].num_tokens, 4);
  EXPECT_TRUE(last.entries[0].prompt_logits);
  EXPECT_TRUE(last.entries[0].want_logits);
}

TEST(BatchPlannerTest, DraftsJoinTheirDecodeEntryWithinBothBudgets) {
  Planner p;
  p.options.max_batch_tokens = 12;
  p.options.prefill_chunk_tokens = 100;
  p.options.max_draft_tokens = 6;
  RunningView a = Decoding(), b = Decoding(), c = Decoding();
  a.draft_tokens = 4;
  b.draft_tokens = 4;  // only 2 left of max_draft_tokens
  c.draft_tokens = 4;  // none left
  p.running = {a, Prefilling(50, 0), b, c};
  const StepPlan& plan = p.Plan();
  ASSERT_EQ(plan.entries.size(), 4u);
  EXPECT_EQ(plan.decode_tokens, 3);
  EXPECT_EQ(plan.draft_tokens, 6);
  EXPECT_EQ(plan.entries[0].num_tokens, 5);
  EXPECT_EQ(plan.entries[0].draft_tokens, 4);
  EXPECT_EQ(plan.entries[1].num_tokens, 3);
  EXPECT_EQ(plan.entries[1].draft_tokens, 2);
  EXPECT_EQ(plan.entries[2].num_tokens, 1);
  EXPECT_EQ(plan.entries[2].draft_tokens, 0);
  // The prefill gets the rest: 12 - 3 - 6.
  EXPECT_EQ(plan.entries[3].num_tokens, 3);

  p.options.max_batch_tokens = 5;  // 3 decode tokens leave room for 2 drafts
  const StepPlan& tight = p.Plan();
  EXPECT_EQ(tight.draft_tokens, 2);
  EXPECT_EQ(tight.entries[0].num_tokens, 3);
  EXPECT_EQ(tight.prefill_tokens, 0);
}

TEST(BatchPlannerTest, EmptyInputPlansNothing) {
  Planner p;
  const StepPlan& plan = p.Plan();
  EXPECT_EQ(plan.num_admitted, 0);
  EXPECT_TRUE(plan.entries.empty());
}

TEST(BatchPlannerTest, EveryDecodeSequenceGetsOneTokenFirst) {
  Planner p;
  p.options.max_batch_tokens = 8;
  p.options.prefill_chunk_tokens = 100;
  p.running = {Decoding(), Prefilling(50, 0), Decoding(), Decoding()};
  const StepPlan& plan = p.Plan();
  ASSERT_EQ(plan.entries.size(), 4u);
  EXPECT_EQ(plan.decode_tokens, 3);
  const int decode_ids[] = {0, 2, 3};
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(plan.entries[i].decode);
    EXPECT_EQ(plan.entries[i].sequence, decode_ids[i]);
    EXPECT_EQ(plan.entries[i].num_tokens, 1);
    EXPECT_TRUE(plan.entries[i].want_logits);
  }
  // The prefill gets what the decoders leave: 8 - 3 = 5 tokens, not its last chunk.
  EXPECT_FALSE(plan.entries[3].decode);
  EXPECT_EQ(plan.entries[3].sequence, 1);
  EXPECT_EQ(plan.entries[3].first_token, 0);
  EXPECT_EQ(plan.entries[3].num_tokens, 5);
  EXPECT_FALSE(plan.entries[3].want_logits);
  EXPECT_EQ(plan.prefill_tokens, 5);
}

TEST(BatchPlannerTest, DecodeTokensIncludedEvenWhenTheyFillTheBudget) {
  Planner p;
  p.options.max_batch_tokens = 4;
  p.options.max_running = 4;
  p.running = {Decoding(), Decoding(), Decoding(), Decoding()};
  p.waiting = {{5, 1}};
  const StepPlan& plan = p.Plan();
  EXPECT_EQ(plan.decode_tokens, 4);
  EXPECT_EQ(plan.prefill_tokens, 0);
  EXPECT_EQ(plan.num_admitted, 0);
}

TEST(BatchPlannerTest, PrefillIsChunked) {
  Planner p;
  p.options.prefill_chunk_tokens = 16;
  p.options.max_batch_tokens = 512;
  p.running = {Prefilling(40, 32)};
  const StepPlan& plan = p.Plan();
  ASSERT_EQ(plan.entries.size(), 1u);
  EXPECT_EQ(plan.entries[0].first_token, 32);
  EXPECT_EQ(plan.entries[0].num_tokens, 8);  // the remainder, and the last chunk
  EXPECT_TRUE(plan.entries[0].want_logits);

  p.running = {Prefilling(40, 0)};
  const StepPlan& plan2 = p.Plan();
  ASSERT_EQ(plan2.entries.size(), 1u);
  EXPECT_EQ(plan2.entries[0].num_tokens, 16);
  EXPECT_FALSE(plan2.entries[0].want_logits);
}

TEST(BatchPlannerTest, MaxBatchTokensRespectedAcrossPrefills) {
  Planner p;
  p.options.prefill_chunk_tokens = 16;
  p.options.max_batch_tokens = 40;
  p.running = {Decoding(), Prefilling(100, 0), Prefilling(100, 0), Prefilling(100, 0)};
  p.waiting = {{10, 1}};
  const StepPlan& plan = p.Plan();
  int total = 0;
  for (const PlannedEntry& e : plan.entries) total += e.num_tokens;
  EXPECT_EQ(total, 40);
  // 1 decode + 16 + 16 + 7; nothing left for the waiting one, so it is not admitted.
  ASSERT_EQ(plan.entries.size(), 4u);
  EXPECT_EQ(plan.entries[1].num_tokens, 16);
  EXPECT_EQ(plan.entries[2].num_tokens, 16);
  EXPECT_EQ(plan.entries[3].num_tokens, 7);
  EXPECT_EQ(plan.entries[3].sequence, 3);
  EXPECT_EQ(plan.num_admitted, 0);
}

TEST(BatchPlannerTest, PrefillLimitCapsPromptTokensButNeverDecode) {
  Planner p;
  p.options.prefill_chunk_tokens = 16;
  p.options.max_batch_tokens = 512;
  p.running = {Decoding(), Prefilling(100, 0), Decoding(), Prefilling(100, 0)};
  p.waiting = {{10, 1}};
  p.max_prefill_tokens = 20;
  const StepPlan& plan = p.Plan();
  EXPECT_EQ(plan.decode_tokens, 2);
  EXPECT_EQ(plan.prefill_tokens, 20);  // 16 + 4, and no room to admit the waiting one
  EXPECT_EQ(plan.num_admitted, 0);

  p.max_prefill_tokens = 0;  // decoders still run
  const StepPlan& decode_only = p.Plan();
  EXPECT_EQ(decode_only.decode_tokens, 2);
  EXPECT_EQ(decode_only.prefill_tokens, 0);
  EXPECT_EQ(decode_only.entries.size(), 2u);
}

TEST(BatchPlannerTest, AdmitsFifoWhileKvBlocksLast) {
  Planner p;
  p.free_blocks = 10;
  p.waiting = {{4, 4}, {4, 5}, {4, 2}, {4, 1}};
  const StepPlan& plan = p.Plan();
  // 4 + 5 fit; the third needs 2 of the 1 left: admission stops there, even though
  // the fourth (1 block) would fit: no overtaking.
  EXPECT_EQ(plan.num_admitted, 2);
  ASSERT_EQ(plan.entries.size(), 2u);
  EXPECT_EQ(plan.entries[0].sequence, 0);
  EXPECT_EQ(plan.entries[1].sequence, 1);
  EXPECT_EQ(plan.entries[0].num_tokens, 4);
  EXPECT_TRUE(plan.entries[0].want_logits);
}

TEST(BatchPlannerTest, HeadThatDoesNotFitBlocksEveryone) {
  Planner p;
  p.free_blocks = 3;
  p.waiting = {{4, 4}, {4, 1}};
  EXPECT_EQ(p.Plan().num_admitted, 0);
}

TEST(BatchPlannerTest, AdmittedIndicesFollowTheRunningSet) {
  Planner p;
  p.running = {Decoding(), Decoding()};
  p.waiting = {{3, 1}};
  const StepPlan& plan = p.Plan();
  EXPECT_EQ(plan.num_admitted, 1);
  ASSERT_EQ(plan.entries.size(), 3u);
  EXPECT_EQ(plan.entries[2].sequence, 2);
  EXPECT_FALSE(plan.entries[2].decode);
}

TEST(BatchPlannerTest, MaxRunningRespected) {
  Planner p;
  p.options.max_running = 3;
  p.running = {Decoding()};
  p.waiting = {{2, 1}, {2, 1}, {2, 1}, {2, 1}};
  EXPECT_EQ(p.Plan().num_admitted, 2);

  p.running = {Decoding(), Decoding(), Decoding()};
  EXPECT_EQ(p.Plan().num_admitted, 0);
}

TEST(BatchPlannerTest, PausedSequencesAreSkippedAndLeaveTheirRunSlot) {
  Planner p;
  p.options.max_running = 3;
  RunningView paused = Decoding();
  paused.paused = true;
  p.running = {Decoding(), paused, Decoding()};
  p.waiting = {{2, 1}};
  const StepPlan& plan = p.Plan();
  ASSERT_EQ(plan.entries.size(), 3u);
  EXPECT_EQ(plan.entries[0].sequence, 0);
  EXPECT_EQ(plan.entries[1].sequence, 2);
  EXPECT_EQ(plan.decode_tokens, 2);
  EXPECT_EQ(plan.num_admitted, 1);  // into the paused one's run slot
  EXPECT_FALSE(plan.entries[2].decode);
  EXPECT_EQ(plan.entries[2].sequence, 3);

  p.running = {paused};
  p.waiting = {};
  EXPECT_TRUE(p.Plan().entries.empty());
}

TEST(BatchPlannerTest, PrefillsInAdmissionOrderBeforeNewcomers) {
  Planner p;
  p.options.prefill_chunk_tokens = 8;
  p.options.max_batch_tokens = 12;
  p.running = {Prefilling(20, 8)};
  p.waiting = {{20, 2}};
  const StepPlan& plan = p.Plan();
  ASSERT_EQ(plan.entries.size(), 2u);
  EXPECT_EQ(plan.entries[0].sequence, 0);
  EXPECT_EQ(plan.entries[0].first_token, 8);
  EXPECT_EQ(plan.entries[0].num_tokens, 8);
  EXPECT_EQ(plan.entries[1].sequence, 1);
  EXPECT_EQ(plan.entries[1].num_tokens, 4);
  EXPECT_EQ(plan.num_admitted, 1);
}

TEST(BatchPlannerTest, PlanIsReusedWithoutStaleEntries) {
  Planner p;
  p.running = {Decoding(), Decoding()};
  EXPECT_EQ(p.Plan().entries.size(), 2u);
  p.running = {Decoding()};
  EXPECT_EQ(p.Plan().entries.size(), 1u);
  EXPECT_EQ(p.plan.decode_tokens, 1);
}

TEST(BatchPlannerTest, AdmittedRequestWithACachedPrefixPrefillsOnlyTheRest) {
  Planner p;
  p.options.max_batch_tokens = 64;
  p.options.prefill_chunk_tokens = 64;
  // 100-token prompt, 96 cached: its first and last chunk is tokens [96, 100).
  p.waiting = {{100, 3, 96}, {40, 5, 0}};
  p.free_blocks = 8;
  const StepPlan& plan = p.Plan();
  EXPECT_EQ(plan.num_admitted, 2);
  ASSERT_EQ(plan.entries.size(), 2u);
  EXPECT_EQ(plan.entries[0].first_token, 96);
  EXPECT_EQ(plan.entries[0].num_tokens, 4);
  EXPECT_TRUE(plan.entries[0].want_logits);
  EXPECT_EQ(plan.entries[1].first_token, 0);
  EXPECT_EQ(plan.entries[1].num_tokens, 40);
  EXPECT_EQ(plan.prefill_tokens, 44);
}

TEST(BatchPlannerTest, ARequestAwaitingASharedPrefixStopsAdmission) {
  Planner p;
  p.free_blocks = 20;
  p.waiting = {{40, 3}, {40, 3}, {8, 1}};
  p.waiting[1].awaits_shared_prefix = true;
  const StepPlan& plan = p.Plan();
  // The second would fit, but waits for the first to write its prompt's K/V; the third
  // does not overtake it.
  EXPECT_EQ(plan.num_admitted, 1);
  ASSERT_EQ(plan.entries.size(), 1u);
  EXPECT_EQ(plan.entries[0].num_tokens, 40);
}

TEST(BatchPlannerTest, PromptTokensThroughFirstDecoderCountChunksInPlanningOrder) {
  Planner p;
  p.options.prefill_chunk_tokens = 64;
  EXPECT_EQ(ThroughFirstDecoder(p), 0);  // nothing to prefill
  p.running = {Decoding()};
  p.waiting = {{100, 7, 96}, {40, 3, 0}};
  EXPECT_EQ(ThroughFirstDecoder(p), 4);  // the head's uncached rest
  p.waiting = {{200, 13, 0}, {40, 3, 0}};
  EXPECT_EQ(ThroughFirstDecoder(p), 64);  // at most one chunk of it
  // Prompts that end at their prefill never decode: they and the next one count.
  p.waiting = {{30, 2, 0, true}, {200, 13, 0, true}, {40, 3, 0}, {20, 2, 0}};
  EXPECT_EQ(ThroughFirstDecoder(p), 30 + 64 + 40);
  p.waiting = {{30, 2, 0, true}};
  EXPECT_EQ(ThroughFirstDecoder(p), 30);
  // A running sequence still prefilling goes first, unless it is paused.
  RunningView paused = Prefilling(30, 0);
  paused.paused = true;
  p.running = {Decoding(), paused, Prefilling(100, 90)};
  p.waiting = {{40, 3, 0}};
  EXPECT_EQ(ThroughFirstDecoder(p), 10);
  // And the planner plans that chunk first.
  ASSERT_EQ(p.Plan().entries.size(), 3u);
  EXPECT_EQ(p.plan.entries[1].sequence, 2);
  EXPECT_EQ(p.plan.entries[1].num_tokens, 10);
}

}  // namespace
}  // namespace quill::engine
