// Engine loop tests over a scripted fake model: the next token is a fixed function of the
// last one, so every expected output below is worked out by hand from that rule.

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/recording_sink_for_test.h"
#include "engine/runtime/retry_pushback.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace quill::engine {
namespace {

constexpr int kVocab = 64;
constexpr TokenId kBos = 1;
constexpr TokenId kEos = 2;
constexpr int kContext = 128;

// Ids 3..28 are "A".."Z", 29..54 are "a".."z", 55..63 are "0".."8". EOS ends generation,
// and so does `end_of_turn` if set (like Llama 3's <|eot_id|> next to its EOS).
class FakeTokenizer final : public Tokenizer {
 public:
  explicit FakeTokenizer(TokenId end_of_turn = -1) {
    end_of_generation_ = {kEos};
    if (end_of_turn >= 0) end_of_generation_.push_back(end_of_turn);
    std::sort(end_of_generation_.begin(), end_of_generation_.end());
  }
  absl::StatusOr<std::vector<TokenId>> Encode(absl::string_view text,
                                              bool add_special) const override {
    return absl::UnimplementedError("not needed");
  }
  absl::StatusOr<std::vector<TokenId>> EncodeWithSpecialTokens(
      absl::string_view text, bool add_special,
      absl::Span<const ByteRange> plain_ranges) const override {
    return absl::UnimplementedError("not needed");
  }
  absl::string_view token_text(TokenId id) const override { return ""; }
  std::string TokenBytes(TokenId id) const override {
    if (id < 3 || id >= kVocab) return "";
    if (id < 29) return std::string(1, static_cast<char>('A' + id - 3));
    if (id < 55) return std::string(1, static_cast<char>('a' + id - 29));
    return std::string(1, static_cast<char>('0' + id - 55));
  }
  int vocab_size() const override { return kVocab; }
  TokenId bos_id() const override { return kBos; }
  TokenId eos_id() const override { return kEos; }
  bool add_bos() const override { return true; }
  bool IsEndOfGeneration(TokenId id) const override {
    return std::binary_search(end_of_generation_.begin(), end_of_generation_.end(), id);
  }
  absl::Span<const TokenId> end_of_generation_ids() const override { return end_of_generation_; }
  bool IsControl(TokenId id) const override { return id < 3; }
  std::string model_name() const override { return "fake"; }

 private:
  std::vector<TokenId> end_of_generation_;
};

TokenId Letter(char c) { return c >= 'a' ? 29 + (c - 'a') : 3 + (c - 'A'); }

// The rule: after token t comes t + 1, except that "Z" is followed by EOS and EOS by "A".
TokenId NextToken(TokenId t) {
  if (t == Letter('Z')) return kEos;
  if (t == kEos) return Letter('A');
  return t + 1 < kVocab ? t + 1 : 3;
}

// Applies the rule as logits. Checks the KV capacity and that every sequence's positions
// arrive without gaps (a speculative step may rewind over rejected drafts), records each
// step's shape, and can be paused or made to fail.
class FakeStepModel final : public StepModel {
 public:
  struct Shared {
    absl::Mutex mu;
    bool paused ABSL_GUARDED_BY(mu) = false;
    bool fail_next ABSL_GUARDED_BY(mu) = false;
    int forwards_entered ABSL_GUARDED_BY(mu) = 0;
    std::vector<std::vector<int>> steps ABSL_GUARDED_BY(mu);  // token counts per entry
    std::string error ABSL_GUARDED_BY(mu);                    // first contract violation
    // Read once when the model is made, before the engine thread exists.
    TokenId end_of_turn = -1;
    int step_token_multiple = 1;
    int blocked_from_tokens = 1;  // smaller steps are not rounded to the multiple
    // Set before the engine starts; run at the end of every forward with the step's token
    // count (e.g. to make a manual clock tick, so the engine measures exact rates).
    std::function<void(int tokens)> after_forward;
  };

  explicit FakeStepModel(std::shared_ptr<Shared> shared)
      : tokenizer_(shared->end_of_turn),
        step_token_multiple_(shared->step_token_multiple),
        blocked_from_tokens_(shared->blocked_from_tokens),
        shared_(std::move(shared)) {}

  const Tokenizer& tokenizer() const override { return tokenizer_; }
  int vocab_size() const override { return kVocab; }
  int context_length() const override { return kContext; }
  int max_batch_tokens() const override { return 512; }
  int step_token_multiple(int tokens) const override {
    return tokens >= blocked_from_tokens_ ? step_token_multiple_ : 1;
  }
  KvCacheOptions MakeKvCacheOptions(int64_t budget_bytes, int block_size) const override {
    KvCacheOptions o;
    o.num_layers = 1;
    o.num_kv_heads = 1;
    o.head_dim = 4;  // 32 bytes per token
    o.block_size_tokens = block_size;
    o.budget_bytes = budget_bytes;
    return o;
  }

  absl::Status Forward(absl::Span<const BatchEntry> batch, KvCache& cache, float* logits) override {
    absl::MutexLock lock(&shared_->mu);
    ++shared_->forwards_entered;
    shared_->mu.Await(absl::Condition(
        +[](bool* paused) { return !*paused; }, &shared_->paused));
    std::vector<int> shape;
    for (const BatchEntry& e : batch) shape.push_back(static_cast<int>(e.tokens.size()));
    shared_->steps.push_back(shape);
    if (shared_->after_forward) {
      int tokens = 0;
      for (int n : shape) tokens += n;
      shared_->after_forward(tokens);
    }
    if (shared_->fail_next) {
      shared_->fail_next = false;
      return absl::InternalError("injected failure");
    }
    int row = 0;
    for (const BatchEntry& e : batch) {
      int64_t& next = next_pos_[e.seq];
      if (e.first_pos == 0) next = 0;  // ids are never reused, but be explicit
      if (e.first_pos > next || e.tokens.empty() ||
          cache.capacity_tokens(e.seq) < e.first_pos + static_cast<int64_t>(e.tokens.size())) {
        if (shared_->error.empty()) {
          shared_->error =
              absl::StrCat("bad entry seq ", e.seq, " first_pos ", e.first_pos, " expected ", next);
        }
      }
      next = e.first_pos + static_cast<int64_t>(e.tokens.size());
      if (!e.want_logits) continue;
      for (size_t j = e.tokens.size() - e.num_logits; j < e.tokens.size(); ++j) {
        float* out = logits + static_cast<size_t>(row) * kVocab;
        std::fill(out, out + kVocab, 0.0f);
        out[NextToken(e.tokens[j])] = 10.0f;
        ++row;
      }
    }
    return absl::OkStatus();
  }

 private:
  FakeTokenizer tokenizer_;
  const int step_token_multiple_;
  const int blocked_from_tokens_;
  std::shared_ptr<Shared> shared_;
  absl::flat_hash_map<KvCache::SeqId, int64_t> next_pos_;
};

class RecordingObserver final : public EngineObserver {
 public:
  void OnStep(const StepStats& stats, const EngineGauges& gauges) override {
    absl::MutexLock lock(&mu_);
    const auto released = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !hold_steps_; };
    mu_.Await(absl::Condition(&released));
    steps_.push_back(stats);
    steps_.back().inter_token_latencies = {};
    itl_count_ += stats.inter_token_latencies.size();
  }
  void OnRequestFinished(const FinishInfo& info) override {
    absl::MutexLock lock(&mu_);
    ++finished_;
  }
  void OnGauges(const EngineGauges& gauges) override {
    absl::MutexLock lock(&mu_);
    ++gauge_reports_;
  }
  // While held, OnStep waits (the engine thread with it) before recording its step.
  void HoldSteps(bool hold) {
    absl::MutexLock lock(&mu_);
    hold_steps_ = hold;
  }
  int gauge_reports() {
    absl::MutexLock lock(&mu_);
    return gauge_reports_;
  }
  // Waits (up to 10 s) for a gauge report after the `seen`th; false if none came.
  bool WaitForGaugeReportAfter(int seen) {
    absl::MutexLock lock(&mu_);
    const auto later = [this, seen]()
                           ABSL_SHARED_LOCKS_REQUIRED(mu_) { return gauge_reports_ > seen; };
    return mu_.AwaitWithTimeout(absl::Condition(&later), absl::Seconds(10));
  }
  std::vector<StepStats> steps() {
    absl::MutexLock lock(&mu_);
    return steps_;
  }
  int finished() {
    absl::MutexLock lock(&mu_);
    return finished_;
  }
  size_t itl_count() {
    absl::MutexLock lock(&mu_);
    return itl_count_;
  }

 private:
  absl::Mutex mu_;
  std::vector<StepStats> steps_ ABSL_GUARDED_BY(mu_);
  int finished_ ABSL_GUARDED_BY(mu_) = 0;
  int gauge_reports_ ABSL_GUARDED_BY(mu_) = 0;
  bool hold_steps_ ABSL_GUARDED_BY(mu_) = false;
  size_t itl_count_ ABSL_GUARDED_BY(mu_) = 0;
};

class ManualClock final : public Clock {
 public:
  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_) = absl::FromUnixSeconds(1000000);
};

GenerationRequest Request(std::string id, std::vector<TokenId> prompt, int max_tokens) {
  GenerationRequest r;
  r.request_id = std::move(id);
  r.prompt_ids = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0.0f;
  return r;
}

class EngineFakeTest : public ::testing::Test {
 protected:
  // Small default pool (the 256 MiB default takes longer to zero than the test runs).
  static EngineOptions SmallOptions() {
    EngineOptions options;
    options.kv_cache_bytes = 32 * 16 * 64;  // 64 blocks of 16 tokens
    return options;
  }
  void Start(EngineOptions options = SmallOptions(), const Clock* clock = nullptr) {
    SCOPED_TRACE("Start");
    auto engine = Engine::CreateWithStepModel(std::make_unique<FakeStepModel>(shared_), options,
                                              &observer_, clock);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = std::move(engine).value();
  }
  // The step clock of the inter-token-latency tests: every forward step takes 20 ms plus
  // 1 ms per token on `clock`, and 512 KV blocks of 16 tokens hold any of their loads.
  void StartOnStepClock(EngineOptions options, ManualClock* clock) {
    shared_->after_forward = [clock](int tokens) {
      clock->Advance(absl::Milliseconds(20) + tokens * absl::Milliseconds(1));
    };
    options.kv_cache_bytes = 32 * 16 * 512;
    options.prefix_cache = false;  // the fake model does not model prefix-cache hits
    Start(options, clock);
  }
  // For an engine whose requests are all paused, asleep in real time until a command or
  // its next timer: wakes it, and returns once it has run a whole iteration that began
  // after this call (expiries and rate measurements included), however late the scheduler
  // runs the engine thread. Such an engine reports its gauges once per iteration (its step
  // plans nothing), twice in one where a request ends, so the fifth report after this call
  // comes from the iteration after a whole one that began after it.
  void Poke() {
    for (int i = 0; i < 5; ++i) {
      const int seen = observer_.gauge_reports();
      engine_->Cancel("poke");  // an unknown id: it only wakes the engine
      ASSERT_TRUE(observer_.WaitForGaugeReportAfter(seen)) << "the engine did not wake";
    }
  }
  void SetPaused(bool paused) {
    absl::MutexLock lock(&shared_->mu);
    shared_->paused = paused;
  }
  void WaitForwardsEntered(int n) {
    std::pair<FakeStepModel::Shared*, int> arg(shared_.get(), n);
    absl::MutexLock lock(&shared_->mu);
    shared_->mu.Await(absl::Condition(
        +[](std::pair<FakeStepModel::Shared*, int>* a) {
          a->first->mu.AssertHeld();
          return a->first->forwards_entered >= a->second;
        },
        &arg));
  }
  std::string ModelError() {
    absl::MutexLock lock(&shared_->mu);
    return shared_->error;
  }
  std::vector<std::vector<int>> Steps() {
    absl::MutexLock lock(&shared_->mu);
    return shared_->steps;
  }
  void TearDown() override {
    if (engine_ != nullptr) {
      engine_->Shutdown(absl::Seconds(30));
      EXPECT_EQ(engine_->gauges().kv_blocks_used, 0);
    }
    EXPECT_EQ(ModelError(), "");
  }

  std::shared_ptr<FakeStepModel::Shared> shared_ = std::make_shared<FakeStepModel::Shared>();
  RecordingObserver observer_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(EngineFakeTest, GeneratesByTheRuleUntilMaxTokens) {
  Start();
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine_->Submit(Request("r", {kBos, Letter('C')}, 4), sink).ok());
  ASSERT_TRUE(sink->Wait());
  EXPECT_EQ(sink->ids(),
            (std::vector<TokenId>{Letter('D'), Letter('E'), Letter('F'), Letter('G')}));
  EXPECT_EQ(sink->text(), "DEFG");
  EXPECT_EQ(sink->chunks().size(), 4u);  // one chunk per step
  const FinishInfo info = sink->info();
  EXPECT_EQ(info.reason, FinishReason::kLength);
  EXPECT_TRUE(info.status.ok());
  EXPECT_EQ(info.prompt_tokens, 2);
  EXPECT_EQ(info.completion_tokens, 4);
  // The first token comes out of the step that finishes the prompt.
  EXPECT_EQ(info.timings.time_to_first_token, info.timings.queue_wait + info.timings.prefill);
  EXPECT_EQ(info.timings.total, info.timings.time_to_first_token + info.timings.decode);
  EXPECT_EQ(sink->violations(), "");
}

TEST_F(EngineFakeTest, EosEndsWithoutBeingEmitted) {
  Start();
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine_->Submit(Request("r", {kBos, Letter('X')}, 10), sink).ok());
  ASSERT_TRUE(sink->Wait());
  EXPECT_EQ(sink->ids(), (std::vector<TokenId>{Letter('Y'), Letter('Z')}));
  EXPECT_EQ(sink->info().reason, FinishReason::kEos);
  EXPECT_EQ(sink->info().completion_tokens, 2);
}

TEST_F(EngineFakeTest, EndOfTurnEndsLikeEos) {
  shared_->end_of_turn = Letter('d');
  Start();
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine_->Submit(Request("r", {kBos, Letter('a')}, 10), sink).ok());
  ASSERT_TRUE(sink->Wait());
  EXPECT_EQ(sink->ids(), (std::vector<TokenId>{Letter('b'), Letter('c')}));
  EXPECT_EQ(sink->info().reason, FinishReason::kEos);
  EXPECT_EQ(sink->info().completion_tokens, 2);
}

// ignore_eos covers the whole end-of-generation set: an end-of-turn token is then emitted
// like any other token.
TEST_F(EngineFakeTest, IgnoreEosKeepsGoingPastEndOfTurn) {
  shared_->end_of_turn = Letter('d');
  Start();
  auto sink = std::make_shared<RecordingSink>();
  GenerationRequest r = Request("r", {kBos, Letter('a')}, 4);
  r.ignore_eos = true;
  ASSERT_TRUE(engine_->Submit(r, sink).ok());
  ASSERT_TRUE(sink->Wait());
  EXPECT_EQ(sink->ids(),
            (std::vector<TokenId>{Letter('b'), Letter('c'), Letter('d'), Letter('e')}));
  EXPECT_EQ(sink->info().reason, FinishReason::kLength);
}

TEST_F(EngineFakeTest, IgnoreEosKeepsGoing) {
  Start();
  auto sink = std::make_shared<RecordingSink>();
  GenerationRequest r = Request("r", {kBos, Letter('Y')}, 4);
  r.ignore_eos = true;
  ASSERT_TRUE(engine_->Submit(r, sink).ok());
  ASSERT_TRUE(sink->Wait());
  EXPECT_EQ(sink->ids(), (std::vector<TokenId>{Letter('Z'), kEos, Letter('A'), Letter('B')}));
  EXPECT_EQ(sink->text(), "ZAB");
  EXPECT_EQ(sink->info().reason, FinishReason::kLength);
}

TEST_F(EngineFakeTest, StopTokenEndsWithoutBeingEmitted) {
  Start();
  auto sink = std::make_shared<RecordingSink>();
  GenerationRequest r = Request("r", {kBos, Letter('a')}, 10);
  r.stop_token_ids = {Letter('d')};
  ASSERT_TRUE(engine_->Submit(r, sink).ok());
  ASSERT_TRUE(sink->Wait());
  EXPECT_EQ(sink->ids(), (std::vector<TokenId>{Letter('b'), Letter('c')}));
  EXPECT_EQ(sink->text(), "bc");
  EXPECT_EQ(sink->info().reason, FinishReason::kStop);
  EXPECT_EQ(sink->info().completion_tokens, 2);
}

TEST_F(EngineFakeTest, StopStringSpanningTokensCutsTheText) {
  Start();
  auto sink = std::make_shared<RecordingSink>();
  GenerationRequest r = Request("r", {kBos, Letter('a')}, 20);
  r.stop = {"xyz", "efg"};
  ASSERT_TRUE(engine_->Submit(r, sink).ok());
  ASSERT_TRUE(sink->Wait());
  // b c d e f g: "efg" completes with the 6th token; the text ends before it.
  EXPECT_EQ(sink->text(), "bcd");
  EXPECT_EQ(sink->ids().size(), 6u);
  EXPECT_EQ(sink->info().reason, FinishReason::kStop);
  EXPECT_EQ(sink->info().completion_tokens, 6);
  // "e" and "f" were held back while they could begin "efg": those chunks had no text.
  const std::vector<TokenChunk> chunks = sink->chunks();
  ASSERT_EQ(chunks.size(), 6u);
  EXPECT_EQ(chunks[3].text, "");
  EXPECT_EQ(chunks[4].text, "");
}

TEST_F(EngineFakeTest, HeldTextIsReleasedWhenTheRequestEndsOtherwise) {
  Start();
  auto sink = std::make_shared<RecordingSink>();
  GenerationRequest r = Request("r", {kBos, Letter('a')}, 3);
  r.stop = {"dX"};
  ASSERT_TRUE(engine_->Submit(r, sink).ok());
  ASSERT_TRUE(sink->Wait());
  EXPECT_EQ(sink->text(), "bcd");  // "d" was held, then released at max_tokens
  EXPECT_EQ(sink->info().reason, FinishReason::kLength);
}

TEST_F(EngineFakeTest, LogprobsFromRawLogits) {
  Start();
  auto sink = std::make_shared<RecordingSink>();
  GenerationRequest r = Request("r", {kBos, Letter('a')}, 1);
  r.logprobs = 2;
  ASSERT_TRUE(engine_->Submit(r, sink).ok());
  ASSERT_TRUE(sink->Wait());
  const std::vector<TokenChunk> chunks = sink->chunks();
  ASSERT_EQ(chunks.size(), 1u);
  ASSERT_EQ(chunks[0].tokens.size(), 1u);
  const GeneratedToken& t = chunks[0].tokens[0];
  // One logit of 10, 63 of 0: log softmax = 10 - log(e^10 + 63).
  const float expected = 10.0f - std::log(std::exp(10.0f) + 63.0f);
  EXPECT_NEAR(t.logprob, expected, 1e-5);
  ASSERT_EQ(t.top_logprobs.size(), 2u);
  EXPECT_EQ(t.top_logprobs[0].id, Letter('b'));
  EXPECT_EQ(t.top_logprobs[1].id, 0);  // ties by lowest id
  EXPECT_NEAR(t.top_logprobs[1].logprob, -std::log(std::exp(10.0f) + 63.0f), 1e-5);
}

// Prompt logprobs: every prompt token after the first, scored by the row before it, in
// steps of at most kPromptLogitRowsPerStep rows; the first chunk carries them all.
TEST_F(EngineFakeTest, PromptLogprobsScoreEveryPromptTokenInStepsOfBoundedRows) {
  Start();
  std::vector<TokenId> prompt = {kBos};
  for (int i = 1; i < 120; ++i) {
    // Mostly the rule's next token (a likely one), every fifth a jump (an unlikely one).
    prompt.push_back(i % 5 == 0 ? Letter('q') : NextToken(prompt.back()));
  }
  GenerationRequest r = Request("scored", prompt, 3);
  r.prompt_logprobs = true;
  r.logprobs = 1;
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine_->Submit(r, sink).ok());
  ASSERT_TRUE(sink->Wait());
  EXPECT_EQ(sink->violations(), "");
  const std::vector<TokenChunk> chunks = sink->chunks();
  ASSERT_EQ(chunks.size(), 3u);
  ASSERT_EQ(chunks[0].prompt_logprobs.size(), prompt.size() - 1);
  EXPECT_TRUE(chunks[1].prompt_logprobs.empty());
  const float hit = 10.0f - std::log(std::exp(10.0f) + 63.0f);
  const float miss = -std::log(std::exp(10.0f) + 63.0f);
  for (size_t j = 0; j + 1 < prompt.size(); ++j) {
    const GeneratedToken& t = chunks[0].prompt_logprobs[j];
    EXPECT_EQ(t.id, prompt[j + 1]) << j;
    EXPECT_NEAR(t.logprob, prompt[j + 1] == NextToken(prompt[j]) ? hit : miss, 1e-5) << j;
    ASSERT_EQ(t.top_logprobs.size(), 1u);
    EXPECT_EQ(t.top_logprobs[0].id, NextToken(prompt[j])) << j;
  }
  EXPECT_EQ(sink->ids(),
            (std::vector<TokenId>{NextToken(prompt.back()), NextToken(NextToken(prompt.back())),
                                  NextToken(NextToken(NextToken(prompt.back())))}));
  // 64 rows, then the remaining 56 (whose last row is also sampled), then two decodes.
  EXPECT_EQ(Steps(), (std::vector<std::vector<int>>{{64}, {56}, {1}, {1}}));

  // Cancelled during its prefill: no chunk, and its blocks return (TearDown checks).
  SetPaused(true);
  auto cancelled = std::make_shared<RecordingSink>();
  r.request_id = "cancelled";
  ASSERT_TRUE(engine_->Submit(r, cancelled).ok());
  WaitForwardsEntered(5);  // its first chunk is in flight
  engine_->Cancel("cancelled");
  SetPaused(false);
  ASSERT_TRUE(cancelled->Wait());
  EXPECT_EQ(cancelled->info().reason, FinishReason::kCancelled);
  EXPECT_TRUE(cancelled->chunks().empty());
}

TEST_F(EngineFakeTest, ValidationErrorsNameTheFieldAndNeverCallTheSink) {
  EngineOptions options = SmallOptions();
  options.kv_cache_bytes = 32 * 16 * 4;  // 4 blocks of 16 tokens = 64 tokens
  options.max_tokens_limit = 100;
  Start(options);
  struct Case {
    std::string field;
    std::function<void(GenerationRequest&)> mutate;
  };
  const std::vector<Case> cases = {
      {"request_id", [](GenerationRequest& r) { r.request_id.clear(); }},
      {"request_id", [](GenerationRequest& r) { r.request_id = "a\nb"; }},
      {"prompt", [](GenerationRequest& r) { r.prompt_ids.clear(); }},
      {"prompt_token_ids[1]", [](GenerationRequest& r) { r.prompt_ids[1] = kVocab; }},
      {"prompt_token_ids[0]", [](GenerationRequest& r) { r.prompt_ids[0] = -1; }},
      {"max_tokens", [](GenerationRequest& r) { r.max_tokens = 0; }},
      {"max_tokens", [](GenerationRequest& r) { r.max_tokens = 101; }},
      {"max_tokens",
       [](GenerationRequest& r) {
         r.prompt_ids.resize(100, 5);
         r.max_tokens = 30;
       }},
      {"prompt", [](GenerationRequest& r) { r.prompt_ids.resize(kContext, 5); }},
      {"prompt", [](GenerationRequest& r) { r.prompt_ids.resize(70, 5); }},  // > 4 blocks
      {"max_tokens",
       [](GenerationRequest& r) {
         r.prompt_ids.resize(60, 5);
         r.max_tokens = 5;
       }},
      {"sampling.temperature", [](GenerationRequest& r) { r.sampling.temperature = -1; }},
      {"sampling.temperature",
       [](GenerationRequest& r) { r.sampling.temperature = std::nanf(""); }},
      {"sampling.top_p", [](GenerationRequest& r) { r.sampling.top_p = 0.0f; }},
      {"sampling.top_k", [](GenerationRequest& r) { r.sampling.top_k = -1; }},
      {"logprobs", [](GenerationRequest& r) { r.logprobs = 21; }},
      {"logprobs", [](GenerationRequest& r) { r.logprobs = -1; }},
      {"stop[0]", [](GenerationRequest& r) { r.stop = {"\xC3"}; }},
      {"stop[1]",
       [](GenerationRequest& r) {
         r.stop = {"a", std::string(257, 'x')};
       }},
      {"stop", [](GenerationRequest& r) { r.stop.assign(17, "x"); }},
      {"stop_token_ids[0]", [](GenerationRequest& r) { r.stop_token_ids = {kVocab}; }},
  };
  for (const Case& c : cases) {
    GenerationRequest r = Request("bad", {kBos, 5}, 4);
    c.mutate(r);
    auto sink = std::make_shared<RecordingSink>();
    const absl::Status status = engine_->Submit(r, sink);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.field << ": " << status;
    EXPECT_TRUE(absl::StartsWith(status.message(), c.field)) << c.field << ": " << status;
    EXPECT_FALSE(sink->called()) << c.field;
  }
  EXPECT_EQ(engine_->Submit(Request("ok", {kBos, 5}, 4), nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  // The largest request the pool can hold is fine.
  auto sink = std::make_shared<RecordingSink>();
  GenerationRequest r = Request("ok", {kBos, 5}, 62);
  r.ignore_eos = true;
  ASSERT_TRUE(engine_->Submit(r, sink).ok());
  ASSERT_TRUE(sink->Wait());
  EXPECT_EQ(sink->info().completion_tokens, 62);
}

TEST_F(EngineFakeTest, DuplicateLiveIdIsRejectedAndReusableAfterFinish) {
  Start();
  SetPaused(true);
  auto first = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine_->Submit(Request("same", {kBos, 5}, 3), first).ok());
  auto second = std::make_shared<RecordingSink>();
  EXPECT_EQ(engine_->Submit(Request("same", {kBos, 6}, 3), second).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_FALSE(second->called());
  SetPaused(false);
  ASSERT_TRUE(first->Wait());
  ASSERT_TRUE(engine_->Submit(Request("same", {kBos, 6}, 3), second).ok());
  ASSERT_TRUE(second->Wait());
  EXPECT_EQ(second->info().reason, FinishReason::kLength);
}

TEST_F(EngineFakeTest, QueueFullIsRefusedImmediately) {
  EngineOptions options = SmallOptions();
  options.kv_cache_bytes = 32 * 16 * 2;  // 2 blocks: one request of <= 32 tokens at a time
  options.max_queue = 2;
  Start(options);
  SetPaused(true);
  auto running = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine_->Submit(Request("run", {kBos, 5}, 20), running).ok());
  WaitForwardsEntered(1);  // admitted: it holds both blocks
  std::vector<std::shared_ptr<RecordingSink>> queued;
  for (int i = 0; i < 2; ++i) {
    queued.push_back(std::make_shared<RecordingSink>());
    ASSERT_TRUE(engine_->Submit(Request(absl::StrCat("q", i), {kBos, 5}, 20), queued[i]).ok());
  }
  auto refused = std::make_shared<RecordingSink>();
  EXPECT_EQ(engine_->Submit(Request("over", {kBos, 5}, 20), refused).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_FALSE(refused->called());
  SetPaused(false);
  for (auto& sink : queued) {
    ASSERT_TRUE(sink->Wait());
    EXPECT_EQ(sink->info().reason, FinishReason::kLength);
    EXPECT_GT(sink->info().timings.queue_wait, absl::ZeroDuration());
  }
  ASSERT_TRUE(running->Wait());
}

// A burst that arrives while the engine is busy in a step: requests that find a free run
// slot and their KV blocks start at once, and only the rest count against max_queue.
// (Before, all of them counted until the next step, so this burst got 2 of 10 in.)
TEST_F(EngineFakeTest, BurstWithFreeRunSlotsIsAdmittedUpToSlotsPlusQueue) {
  EngineOptions options = SmallOptions();  // 64 blocks; each request here needs 2
  options.max_running = 8;
  options.max_queue = 2;
  Start(options);
  SetPaused(true);
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  sinks.push_back(std::make_shared<RecordingSink>());
  ASSERT_TRUE(engine_->Submit(Request("pin", {kBos, 5}, 20), sinks.back()).ok());
  WaitForwardsEntered(1);  // the engine is inside a step and admits nobody until it ends
  for (int i = 1; i < 10; ++i) {
    sinks.push_back(std::make_shared<RecordingSink>());
    const absl::Status s =
        engine_->Submit(Request(absl::StrCat("b", i), {kBos, 5}, 20), sinks.back());
    ASSERT_TRUE(s.ok()) << i << ": " << s;
  }
  auto refused = std::make_shared<RecordingSink>();
  const absl::Status over = engine_->Submit(Request("over", {kBos, 5}, 20), refused);
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted) << over;
  EXPECT_THAT(std::string(over.message()), ::testing::HasSubstr("2 requests waiting"));
  // Nothing has finished yet, so the advice is the first guess.
  EXPECT_EQ(RetryPushbackOf(over), absl::Seconds(1));
  SetPaused(false);
  for (auto& sink : sinks) {
    ASSERT_TRUE(sink->Wait());
    EXPECT_EQ(sink->info().reason, FinishReason::kLength);
  }
  EXPECT_FALSE(refused->called());
  // Slots and blocks all came back: a new burst of 10 gets in again.
  for (int i = 0; i < 10; ++i) {
    sinks[i] = std::make_shared<RecordingSink>();
    ASSERT_TRUE(engine_->Submit(Request(absl::StrCat("again", i), {kBos, 5}, 20), sinks[i]).ok());
  }
  for (auto& sink : sinks) ASSERT_TRUE(sink->Wait());
}

TEST_F(EngineFakeTest, CancelWaitingAndRunning) {
  EngineOptions options = SmallOptions();
  options.kv_cache_bytes = 32 * 16 * 2;
  Start(options);
  SetPaused(true);
  auto running = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine_->Submit(Request("run", {kBos, 5}, 20), running).ok());
  WaitForwardsEntered(1);
  auto waiting = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine_->Submit(Request("wait", {kBos, 5}, 20), waiting).ok());
  engine_->Cancel("wait");
  engine_->Cancel("run");
  engine_->Cancel("nobody");
  SetPaused(false);
  ASSERT_TRUE(running->Wait());
  ASSERT_TRUE(waiting->Wait());
  EXPECT_EQ(running->info().reason, FinishReason::kCancelled);
  EXPECT_EQ(running->info().status.code(), absl::StatusCode::kCancelled);
  EXPECT_LT(running->ids().size(), 20u);
  EXPECT_EQ(waiting->info().reason, FinishReason::kCancelled);
  EXPECT_TRUE(waiting->ids().empty());
  engine_->Shutdown(absl::Seconds(10));
  EXPECT_EQ(observer_.finished(), 2);
}

TEST_F(EngineFakeTest, SinkReturningFalseStopsWithinOneStep) {
  Start();
  auto sink = std::make_shared<RecordingSink>(/*gate_chunk=*/0, /*accept_chunks=*/3);
  ASSERT_TRUE(engine_->Submit(Request("r", {kBos, 5}, 50), sink).ok());
  ASSERT_TRUE(sink->Wait());
  EXPECT_EQ(sink->chunks().size(), 3u);  // the third OnChunk returned false
  EXPECT_EQ(sink->info().reason, FinishReason::kCancelled);
  EXPECT_EQ(sink->violations(), "");
}

std::vector<TokenId> ByTheRule(TokenId last, int n) {
  std::vector<TokenId> ids;
  for (int i = 0; i < n; ++i) ids.push_back(last = NextToken(last));
  return ids;
}

// Polls `done` every millisecond until it holds (true) or `timeout` passes (false).
bool PollUntil(const std::function<bool()>& done, absl::Duration timeout = absl::Seconds(30)) {
  const absl::Time give_up = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() > give_up) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}
// Polls the engine's gauges (published at the end of each step) until `done`.
bool WaitForGauges(const Engine& engine, const std::function<bool(const EngineGauges&)>& done) {
  return PollUntil([&] { return done(engine.gauges()); });
}
// Until `sink` has at least `n` tokens.
bool WaitForTokens(RecordingSink& sink, size_t n) {
  return PollUntil([&] { return sink.ids().size() >= n; });
}
bool WaitForPaused(const Engine& engine, int want) {
  return WaitForGauges(engine, [want](const EngineGauges& g) { return g.requests_paused == want; });
}

TEST_F(EngineFakeTest, PausedRequestKeepsItsKvLeavesTheBatchAndResumesWhereItStopped) {
  Start();
  auto slow = std::make_shared<SlowReaderSink>(/*bound=*/3);
  ASSERT_TRUE(engine_->Submit(Request("slow", {kBos, Letter('a')}, 10), slow).ok());
  ASSERT_TRUE(WaitForPaused(*engine_, 1));
  EXPECT_EQ(slow->recorded->ids(), ByTheRule(Letter('a'), 3));
  const int slow_blocks = engine_->gauges().kv_blocks_used;
  EXPECT_GT(slow_blocks, 0);  // paused, its KV stays
  EXPECT_EQ(engine_->gauges().requests_running, 1);

  // Nothing runs while it is paused (and the engine does not spin).
  const size_t steps_at_pause = Steps().size();
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(Steps().size(), steps_at_pause);

  // Another request runs alone, with the output of its solo run.
  auto fast = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine_->Submit(Request("fast", {kBos, Letter('C')}, 6), fast).ok());
  ASSERT_TRUE(fast->Wait());
  EXPECT_EQ(fast->ids(), ByTheRule(Letter('C'), 6));
  const std::vector<std::vector<int>> steps = Steps();
  ASSERT_GT(steps.size(), steps_at_pause);
  for (size_t i = steps_at_pause; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i].size(), 1u) << "step " << i << " batched the paused request";
  }
  EXPECT_EQ(slow->recorded->ids().size(), 3u);
  EXPECT_TRUE(WaitForGauges(*engine_, [&](const EngineGauges& g) {
    return g.requests_running == 1 && g.kv_blocks_used == slow_blocks;
  }));
  EXPECT_EQ(engine_->gauges().requests_paused, 1);

  // Each read lets it run until it is 3 chunks behind again, and it ends as its solo run.
  // (A read whenever it is full: a fixed number of reads at fixed intervals ran out on a
  // slow engine thread.)
  ASSERT_TRUE(PollUntil([&] {
    if (slow->full()) slow->Read(*engine_, "slow");
    return slow->recorded->finishes() > 0;
  }));
  ASSERT_TRUE(slow->recorded->Wait());
  EXPECT_EQ(slow->recorded->ids(), ByTheRule(Letter('a'), 10));
  EXPECT_EQ(slow->recorded->info().reason, FinishReason::kLength);
  EXPECT_EQ(slow->recorded->violations(), "");
  EXPECT_TRUE(WaitForPaused(*engine_, 0));
}

TEST_F(EngineFakeTest, PausedRequestsGiveUpTheirRunSlotAndRejoinWhenOneIsFree) {
  EngineOptions options = SmallOptions();
  options.max_running = 1;
  Start(options);
  auto slow = std::make_shared<SlowReaderSink>(/*bound=*/2);
  ASSERT_TRUE(engine_->Submit(Request("slow", {kBos, Letter('a')}, 10), slow).ok());
  ASSERT_TRUE(WaitForPaused(*engine_, 1));
  // The only run slot is free again: a new request runs (it would wait otherwise).
  SetPaused(true);  // hold the new one mid-forward so that its slot is taken
  auto fast = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine_->Submit(Request("fast", {kBos, Letter('C')}, 6), fast).ok());
  WaitForwardsEntered(static_cast<int>(Steps().size()) + 1);
  // The slow reader drains meanwhile, but rejoins only once the slot is free.
  slow->Read(*engine_, "slow");
  SetPaused(false);
  ASSERT_TRUE(fast->Wait());
  EXPECT_EQ(fast->ids(), ByTheRule(Letter('C'), 6));
  // Then it runs on until it is 2 chunks behind again.
  ASSERT_TRUE(WaitForTokens(*slow->recorded, 4));
  ASSERT_TRUE(WaitForPaused(*engine_, 1));
  EXPECT_EQ(slow->recorded->ids(), ByTheRule(Letter('a'), 4));
  for (const std::vector<int>& step : Steps()) EXPECT_EQ(step.size(), 1u);  // never two at once
  engine_->Cancel("slow");
  ASSERT_TRUE(slow->recorded->Wait());
}

TEST_F(EngineFakeTest, ResumeWhileStillBehindAndForUnknownIdsChangesNothing) {
  Start();
  auto slow = std::make_shared<SlowReaderSink>(/*bound=*/2);
  ASSERT_TRUE(engine_->Submit(Request("slow", {kBos, Letter('a')}, 10), slow).ok());
  ASSERT_TRUE(WaitForPaused(*engine_, 1));
  const size_t steps_at_pause = Steps().size();
  engine_->Resume("slow");  // its sink still would block
  engine_->Resume("nobody");
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(Steps().size(), steps_at_pause);
  EXPECT_EQ(slow->recorded->ids().size(), 2u);
  engine_->Cancel("slow");  // a paused request can be cancelled; its KV is freed
  ASSERT_TRUE(slow->recorded->Wait());
  EXPECT_EQ(slow->recorded->info().reason, FinishReason::kCancelled);
  EXPECT_TRUE(WaitForGauges(*engine_, [](const EngineGauges& g) {
    return g.kv_blocks_used == 0 && g.requests_paused == 0;
  }));
}

TEST_F(EngineFakeTest, RequestPausedLongerThanTheStallTimeoutEndsStalledWithItsKvFreed) {
  ManualClock clock;
  EngineOptions options = SmallOptions();
  options.stall_timeout = absl::Seconds(30);
  Start(options, &clock);
  auto slow = std::make_shared<SlowReaderSink>(/*bound=*/2);
  ASSERT_TRUE(engine_->Submit(Request("slow", {kBos, Letter('a')}, 20), slow).ok());
  ASSERT_TRUE(WaitForPaused(*engine_, 1));
  clock.Advance(absl::Seconds(20));
  Poke();
  // A read restarts the stall clock: it runs 2 more chunks and pauses again.
  slow->Read(*engine_, "slow");
  ASSERT_TRUE(WaitForTokens(*slow->recorded, 4));
  ASSERT_TRUE(WaitForPaused(*engine_, 1));
  EXPECT_EQ(slow->recorded->ids().size(), 4u);
  clock.Advance(absl::Seconds(29));  // 49 s since the first pause, 29 s since the second
  Poke();
  EXPECT_EQ(slow->recorded->finishes(), 0);
  EXPECT_GT(engine_->gauges().kv_blocks_used, 0);
  clock.Advance(absl::Seconds(1));
  Poke();
  ASSERT_TRUE(slow->recorded->Wait());
  const FinishInfo info = slow->recorded->info();
  EXPECT_EQ(info.reason, FinishReason::kStalled);
  EXPECT_EQ(info.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(info.status.message()), ::testing::HasSubstr("read nothing for 30s"));
  EXPECT_EQ(info.completion_tokens, 4);
  EXPECT_TRUE(WaitForGauges(*engine_, [](const EngineGauges& g) {
    return g.kv_blocks_used == 0 && g.requests_paused == 0;
  }));
  EXPECT_EQ(observer_.finished(), 1);
  engine_->Shutdown(absl::ZeroDuration());  // before `clock` goes away
}

TEST_F(EngineFakeTest, ShutdownDrainsPausedRequestsWithoutSpinning) {
  Start();
  auto slow = std::make_shared<SlowReaderSink>(/*bound=*/2);
  ASSERT_TRUE(engine_->Submit(Request("slow", {kBos, Letter('a')}, 20), slow).ok());
  ASSERT_TRUE(WaitForPaused(*engine_, 1));
  const absl::Time start = absl::Now();
  engine_->Shutdown(absl::Milliseconds(300));  // it never reads: ends at the drain deadline
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(250));
  ASSERT_TRUE(slow->recorded->Wait());
  EXPECT_EQ(slow->recorded->info().reason, FinishReason::kShutdown);
  EXPECT_EQ(slow->recorded->ids().size(), 2u);
}

TEST_F(EngineFakeTest, DeadlineInThePastAndDuringDecode) {
  ManualClock clock;
  Start(SmallOptions(), &clock);
  auto late = std::make_shared<RecordingSink>();
  GenerationRequest r = Request("late", {kBos, 5}, 10);
  r.deadline = clock.Now() - absl::Seconds(1);
  // Refused at submit (nothing could make it), so the sink is never called.
  const absl::Status refused = engine_->Submit(r, late);
  EXPECT_EQ(refused.code(), absl::StatusCode::kDeadlineExceeded) << refused;
  EXPECT_FALSE(late->called());
  r.deadline = clock.Now();  // no time left at all is no better
  EXPECT_EQ(engine_->Submit(r, late).code(), absl::StatusCode::kDeadlineExceeded);

  // Time jumps past the deadline while the first token is being delivered.
  class AdvancingSink final : public TokenSink {
   public:
    AdvancingSink(ManualClock* clock, std::shared_ptr<RecordingSink> inner)
        : clock_(clock), inner_(std::move(inner)) {}
    bool OnChunk(TokenChunk chunk) override {
      clock_->Advance(absl::Seconds(10));
      return inner_->OnChunk(std::move(chunk));
    }
    void OnFinish(const FinishInfo& info) override { inner_->OnFinish(info); }

   private:
    ManualClock* clock_;
    std::shared_ptr<RecordingSink> inner_;
  };
  auto recorded = std::make_shared<RecordingSink>();
  r = Request("expiring", {kBos, 5}, 10);
  r.deadline = clock.Now() + absl::Seconds(5);
  ASSERT_TRUE(engine_->Submit(r, std::make_shared<AdvancingSink>(&clock, recorded)).ok());
  ASSERT_TRUE(recorded->Wait());
  EXPECT_EQ(recorded->info().reason, FinishReason::kDeadline);
  EXPECT_EQ(recorded->ids().size(), 1u);
  engine_->Shutdown(absl::ZeroDuration());  // before `clock` goes away
}

// A client's deadline timer cancels its call just before the server's copy of the deadline
// (later by the transit time) passes: a consumer gone that close to its deadline is a
// deadline, one gone well before it a cancel.
TEST_F(EngineFakeTest, ConsumerGoneAtItsDeadlineCountsAsDeadline) {
  ManualClock clock;
  Start(SmallOptions(), &clock);
  auto finish_when_gone = [&](absl::Duration deadline_after_gone) {
    // Its first OnChunk returns false: the consumer went away.
    auto recorded = std::make_shared<RecordingSink>(/*gate_chunk=*/0, /*accept_chunks=*/1);
    GenerationRequest r =
        Request(absl::StrCat("gone", absl::FormatDuration(deadline_after_gone)), {kBos, 5}, 10);
    r.deadline = clock.Now() + deadline_after_gone;
    EXPECT_TRUE(engine_->Submit(r, recorded).ok());
    EXPECT_TRUE(recorded->Wait());
    return recorded->info();
  };
  const FinishInfo at_deadline = finish_when_gone(absl::Milliseconds(20));
  EXPECT_EQ(at_deadline.reason, FinishReason::kDeadline);
  EXPECT_EQ(at_deadline.status.code(), absl::StatusCode::kDeadlineExceeded);
  const FinishInfo early = finish_when_gone(absl::Seconds(10));
  EXPECT_EQ(early.reason, FinishReason::kCancelled);
  EXPECT_EQ(early.status.code(), absl::StatusCode::kCancelled);
  engine_->Shutdown(absl::ZeroDuration());  // before `clock` goes away
}

// Deadline-aware admission, on a clock that ticks 10 ms per forward step, so the engine
// measures exact rates: one request of 10 steps alone finishes every 100 ms (10/s), and a
// 2-token prompt step runs 200 tokens/s.
TEST_F(EngineFakeTest, DeadlinesThatCannotBeMetAreRefusedAndQueuedOnesExpireUnrun) {
  ManualClock clock;
  shared_->after_forward = [&clock](int) { clock.Advance(absl::Milliseconds(10)); };
  EngineOptions options = SmallOptions();
  options.max_running = 1;
  options.max_queue = 10;
  Start(options, &clock);
  for (int i = 0; i < 5; ++i) {  // 500 ms of measured work
    auto warm = std::make_shared<RecordingSink>();
    ASSERT_TRUE(engine_->Submit(Request(absl::StrCat("w", i), {kBos, 5}, 10), warm).ok());
    ASSERT_TRUE(warm->Wait());
  }
  // The pin's first step is held, so the clock stands still while the test submits.
  SetPaused(true);
  auto pin = std::make_shared<RecordingSink>();  // 120 steps: 1.2 s of the only slot
  GenerationRequest p = Request("pin", {kBos, 5}, 120);
  p.ignore_eos = true;
  ASSERT_TRUE(engine_->Submit(p, pin).ok());
  WaitForwardsEntered(51);
  auto queued = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine_->Submit(Request("queued", {kBos, 5}, 10), queued).ok());

  // Must wait for 2 requests to finish (~200 ms) plus prefill: 100 ms cannot cover it.
  auto late = std::make_shared<RecordingSink>();
  GenerationRequest r = Request("late", {kBos, 5}, 10);
  r.deadline = clock.Now() + absl::Milliseconds(100);
  const absl::Status refused = engine_->Submit(r, late);
  EXPECT_EQ(refused.code(), absl::StatusCode::kDeadlineExceeded) << refused;
  EXPECT_THAT(std::string(refused.message()),
              ::testing::HasSubstr("cannot cover the expected queue wait"));
  EXPECT_FALSE(late->called());

  // ~210 ms expected (2 to finish, then prefill), 700 ms given: accepted and queued. But
  // the pin holds the slot past 700 ms, so it leaves the queue at its deadline, unrun.
  auto expires = std::make_shared<RecordingSink>();
  r.request_id = "expires";
  r.deadline = clock.Now() + absl::Milliseconds(700);
  const absl::Status accepted = engine_->Submit(r, expires);
  ASSERT_TRUE(accepted.ok()) << accepted;
  SetPaused(false);
  ASSERT_TRUE(expires->Wait());
  EXPECT_EQ(expires->info().reason, FinishReason::kDeadline);
  EXPECT_EQ(expires->info().status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(expires->ids().empty());
  EXPECT_EQ(expires->info().timings.prefill, absl::ZeroDuration());
  EXPECT_GE(expires->info().timings.total, absl::Milliseconds(700));
  EXPECT_LE(expires->info().timings.total, absl::Milliseconds(720));  // within two steps
  ASSERT_TRUE(pin->Wait());
  EXPECT_EQ(pin->info().reason, FinishReason::kLength);
  ASSERT_TRUE(queued->Wait());
  EXPECT_EQ(queued->info().reason, FinishReason::kLength);
  engine_->Shutdown(absl::ZeroDuration());  // before `clock` goes away
}

TEST_F(EngineFakeTest, AQueueStalledBehindPausedRequestsSlowsTheDeadlineEstimate) {
  ManualClock clock;
  shared_->after_forward = [&clock](int) { clock.Advance(absl::Milliseconds(10)); };
  EngineOptions options = SmallOptions();  // 64 KV blocks of 16 tokens
  options.max_queue = 10;
  Start(options, &clock);
  for (int i = 0; i < 5; ++i) {  // ~10 requests a second
    auto warm = std::make_shared<RecordingSink>();
    ASSERT_TRUE(engine_->Submit(Request(absl::StrCat("w", i), {kBos, 5}, 10), warm).ok());
    ASSERT_TRUE(warm->Wait());
  }
  // Eight readers that stop reading hold every block (128 tokens each), and one request
  // queues behind them: nothing can run, and nothing finishes, until one of them reads.
  std::vector<std::shared_ptr<SlowReaderSink>> slow;
  for (int i = 0; i < 8; ++i) {
    slow.push_back(std::make_shared<SlowReaderSink>(/*bound=*/2));
    GenerationRequest r = Request(absl::StrCat("slow", i), {kBos, Letter('a')}, 126);
    r.ignore_eos = true;
    ASSERT_TRUE(engine_->Submit(r, slow.back()).ok());
  }
  ASSERT_TRUE(WaitForPaused(*engine_, 8));
  auto queued = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine_->Submit(Request("queued", {kBos, 5}, 10), queued).ok());
  Poke();  // the engine has seen the queue, and stalls with it

  // Before the stall counts, 2 s covers a wait behind one request finishing at ~10 a second.
  GenerationRequest r = Request("before", {kBos, 5}, 10);
  r.deadline = clock.Now() + absl::Seconds(2);
  auto before = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine_->Submit(r, before).ok());
  // 20 s of a stalled queue with nothing finished: the 5 s average of finished requests
  // falls to ~0.2 a second, and 2 s no longer covers two of them.
  clock.Advance(absl::Seconds(20));
  Poke();
  r.request_id = "after";
  r.deadline = clock.Now() + absl::Seconds(2);
  auto after = std::make_shared<RecordingSink>();
  const absl::Status refused = engine_->Submit(r, after);
  EXPECT_EQ(refused.code(), absl::StatusCode::kDeadlineExceeded) << refused;
  EXPECT_THAT(std::string(refused.message()),
              ::testing::HasSubstr("cannot cover the expected queue wait"));

  for (int i = 0; i < 8; ++i) engine_->Cancel(absl::StrCat("slow", i));
  ASSERT_TRUE(queued->Wait());
  EXPECT_EQ(queued->info().reason, FinishReason::kLength);
  ASSERT_TRUE(before->Wait());
  engine_->Shutdown(absl::ZeroDuration());  // before `clock` goes away
}

TEST_F(EngineFakeTest, ForwardFailureEndsTheBatchAndServingContinues) {
  Start();
  {
    absl::MutexLock lock(&shared_->mu);
    shared_->fail_next = true;
  }
  auto failed = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine_->Submit(Request("f", {kBos, 5}, 5), failed).ok());
  ASSERT_TRUE(failed->Wait());
  EXPECT_EQ(failed->info().reason, FinishReason::kError);
  EXPECT_EQ(failed->info().status.code(), absl::StatusCode::kInternal);
  auto ok = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine_->Submit(Request("ok", {kBos, 5}, 5), ok).ok());
  ASSERT_TRUE(ok->Wait());
  EXPECT_EQ(ok->info().reason, FinishReason::kLength);
}

// A sink that notes, when its request's end comes, what the metrics held by then: the
// observer's request ends and steps, and the engine's published gauges.
class EndObservingSink final : public TokenSink {
 public:
  EndObservingSink(RecordingObserver* observer, const Engine* engine)
      : observer_(observer), engine_(engine) {}
  bool OnChunk(TokenChunk chunk) override { return true; }
  void OnFinish(const FinishInfo& info) override {
    ends_ = observer_->finished();
    steps_ = static_cast<int>(observer_->steps().size());
    gauges_ = engine_->gauges();
    done_.Notify();
  }
  bool HasEnded() const { return done_.HasBeenNotified(); }
  // False if OnFinish did not come within 120 s.
  bool WaitForEnd() { return done_.WaitForNotificationWithTimeout(absl::Seconds(120)); }
  // Read after WaitForEnd(): written before done_ is notified.
  int ends() const { return ends_; }
  int steps() const { return steps_; }
  const EngineGauges& gauges() const { return gauges_; }

 private:
  RecordingObserver* const observer_;
  const Engine* const engine_;
  absl::Notification done_;
  int ends_ = -1;
  int steps_ = -1;
  EngineGauges gauges_;
};

// By the time a client learns that its request ended, the metrics hold all of it: the
// request counted, the step it ended in recorded, and the gauges showing it neither running
// nor holding KV blocks. This holds even for a request admitted and ended in one step, so
// one scrape after a reply (an operator's dashboard, the integration tests) sees it.
TEST_F(EngineFakeTest, ARequestIsInTheMetricsAndOffTheGaugesBeforeItsClientSeesItEnd) {
  Start();
  const EngineGauges before = engine_->gauges();
  ASSERT_EQ(before.requests_running + before.requests_waiting, 0);
  observer_.HoldSteps(true);
  auto sink = std::make_shared<EndObservingSink>(&observer_, engine_.get());
  // A one-token request: prefilled, sampled and ended in its first step.
  ASSERT_TRUE(engine_->Submit(Request("r", {kBos, Letter('C')}, 1), sink).ok());
  // Its end is counted before its step is recorded (held in OnStep)...
  ASSERT_TRUE(PollUntil([&] { return observer_.finished() == 1; }));
  // ...and until the step is recorded and the gauges published, the client hears nothing,
  // and the gauges still show the request admitted.
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(sink->HasEnded());
  EXPECT_EQ(engine_->gauges().requests_running, 1);
  EXPECT_GT(engine_->gauges().kv_blocks_used, 0);
  observer_.HoldSteps(false);
  ASSERT_TRUE(sink->WaitForEnd());
  EXPECT_EQ(sink->ends(), 1);
  EXPECT_EQ(sink->steps(), 1);
  EXPECT_EQ(sink->gauges().requests_running, 0);
  EXPECT_EQ(sink->gauges().requests_waiting, 0);
  EXPECT_EQ(sink->gauges().kv_blocks_used, 0);
  const std::vector<StepStats> steps = observer_.steps();
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0].prefill_tokens, 2);
}

TEST_F(EngineFakeTest, ChunkedPrefillNextToDecodersAndStepStats) {
  EngineOptions options = SmallOptions();
  options.prefill_chunk_tokens = 8;
  options.max_batch_tokens = 16;
  options.max_running = 4;
  Start(options);
  SetPaused(true);
  auto decoder = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine_->Submit(Request("dec", {kBos, 5}, 12), decoder).ok());
  WaitForwardsEntered(1);  // its prefill step is in flight
  auto long_one = std::make_shared<RecordingSink>();
  std::vector<TokenId> prompt(30, Letter('a'));
  prompt[0] = kBos;
  prompt.back() = Letter('k');
  ASSERT_TRUE(engine_->Submit(Request("long", prompt, 2), long_one).ok());
  SetPaused(false);
  ASSERT_TRUE(decoder->Wait());
  ASSERT_TRUE(long_one->Wait());
  EXPECT_EQ(long_one->ids(), (std::vector<TokenId>{Letter('l'), Letter('m')}));
  engine_->Shutdown(absl::Seconds(10));  // the last OnStep follows the last OnFinish

  // Step 1: the short prompt. Steps 2..5: its decode token + chunks 8, 8, 8, 6.
  const std::vector<std::vector<int>> steps = Steps();
  ASSERT_EQ(steps.size(), 12u);  // 1 prefill + 11 more tokens of "dec"
  EXPECT_EQ(steps[0], (std::vector<int>{2}));
  EXPECT_EQ(steps[1], (std::vector<int>{1, 8}));
  EXPECT_EQ(steps[2], (std::vector<int>{1, 8}));
  EXPECT_EQ(steps[3], (std::vector<int>{1, 8}));
  EXPECT_EQ(steps[4], (std::vector<int>{1, 6}));
  EXPECT_EQ(steps[5], (std::vector<int>{1, 1}));

  const std::vector<StepStats> stats = observer_.steps();
  ASSERT_EQ(stats.size(), steps.size());
  EXPECT_EQ(stats[0].phase, StepPhase::kPrefill);
  EXPECT_EQ(stats[0].prefill_tokens, 2);
  EXPECT_EQ(stats[1].phase, StepPhase::kMixed);
  EXPECT_EQ(stats[1].decode_tokens, 1);
  EXPECT_EQ(stats[1].prefill_tokens, 8);
  EXPECT_EQ(stats[5].phase, StepPhase::kDecode);
  EXPECT_EQ(stats[5].num_sequences, 2);
  // One inter-token gap per decode token emitted: 11 for "dec", 1 for "long".
  EXPECT_EQ(observer_.itl_count(), 12u);
}

std::vector<TokenId> Letters(const std::string& text) {
  std::vector<TokenId> ids;
  for (char c : text) ids.push_back(Letter(c));
  return ids;
}

std::vector<TokenId> WithBos(const std::string& text) {
  std::vector<TokenId> ids = Letters(text);
  ids.insert(ids.begin(), kBos);
  return ids;
}

// The inter-token-latency budget, on a clock that charges each forward step 20 ms plus
// 1 ms per token: `decoders` streams are decoding when `prompts` prompts of
// `prompt_tokens` tokens arrive (by default 8, and 4 of 90 tokens).
class ItlTargetTest : public EngineFakeTest {
 protected:
  struct Outcome {
    absl::Duration longest_decode_step;  // of the steps that carried decode tokens
    int steps_with_prefill = 0;
    int steps_with_drafts_and_prefill = 0;
    std::vector<StepStats> mixed_steps;  // the steps with decode and prompt tokens
  };
  struct Load {
    int decoders = 8;
    int prompts = 4;
    int prompt_tokens = 90;
    // > 0: speculation on, and the decoders' prompts are one cycle of the rule (A..Z, EOS)
    // and its start again, so their continuation is drafted from their prompt.
    int spec_tokens = 0;
  };

  // Steps with decode and prompt tokens hold a multiple of `multiple` tokens while enough
  // prompt tokens wait: only the step that takes the last of them may hold fewer.
  static void ExpectMixedStepsOnMultiple(const Outcome& outcome, int multiple) {
    ASSERT_GE(outcome.mixed_steps.size(), 4u);
    std::vector<int> step_tokens;
    int off_multiple = 0;
    for (const StepStats& step : outcome.mixed_steps) {
      step_tokens.push_back(step.decode_tokens + step.draft_tokens + step.prefill_tokens);
      off_multiple += step_tokens.back() % multiple != 0 ? 1 : 0;
    }
    EXPECT_LE(off_multiple, 1) << absl::StrJoin(step_tokens, " ");
  }

  Outcome Run(absl::Duration itl_target) { return Run(itl_target, Load()); }
  Outcome Run(absl::Duration itl_target, const Load& load) {
    ManualClock clock;
    EngineOptions options;
    options.itl_target = itl_target;
    options.spec_tokens = load.spec_tokens;
    StartOnStepClock(options, &clock);
    SetPaused(true);
    std::vector<TokenId> decoder_prompt = {kBos, 5};
    if (load.spec_tokens > 0) {
      decoder_prompt = WithBos("ABCDEFGHIJKLMNOPQRSTUVWXYZ");
      decoder_prompt.push_back(kEos);
      for (TokenId t : Letters("ABCD")) decoder_prompt.push_back(t);
    }
    std::vector<std::shared_ptr<RecordingSink>> decoders, prompts;
    for (int i = 0; i < load.decoders; ++i) {
      decoders.push_back(std::make_shared<RecordingSink>());
      GenerationRequest r = Request(absl::StrCat("d", i), decoder_prompt, 60);
      r.ignore_eos = true;  // the rule reaches EOS after "Z"
      EXPECT_TRUE(engine_->Submit(r, decoders.back()).ok());
    }
    WaitForwardsEntered(1);  // the decoders' prompt step is under way
    std::vector<std::vector<TokenId>> long_prompts(load.prompts, {kBos});
    for (int i = 0; i < load.prompts; ++i) {
      for (int k = 1; k < load.prompt_tokens; ++k) {
        long_prompts[i].push_back(3 + (i * 7 + k - 1) % 50);
      }
      prompts.push_back(std::make_shared<RecordingSink>());
      GenerationRequest r = Request(absl::StrCat("p", i), long_prompts[i], 4);
      r.ignore_eos = true;
      EXPECT_TRUE(engine_->Submit(r, prompts.back()).ok());
    }
    SetPaused(false);
    for (int i = 0; i < load.prompts; ++i) {
      EXPECT_TRUE(prompts[i]->Wait());
      EXPECT_EQ(prompts[i]->info().reason, FinishReason::kLength);
      // Prompts still complete, and correctly: the rule continues from the last prompt token.
      EXPECT_EQ(prompts[i]->ids().size(), 4u);
      if (!prompts[i]->ids().empty()) {
        EXPECT_EQ(prompts[i]->ids().front(), NextToken(long_prompts[i].back()));
      }
    }
    for (auto& sink : decoders) {
      EXPECT_TRUE(sink->Wait());
      EXPECT_EQ(sink->ids().size(), 60u);
    }
    engine_->Shutdown(absl::ZeroDuration());  // before `clock` goes away
    engine_.reset();
    Outcome outcome;
    for (const StepStats& step : observer_.steps()) {
      if (step.decode_tokens > 0) {
        outcome.longest_decode_step = std::max(outcome.longest_decode_step, step.duration);
      }
      if (step.prefill_tokens > 0) ++outcome.steps_with_prefill;
      if (step.prefill_tokens > 0 && step.decode_tokens > 0) {
        outcome.mixed_steps.push_back(step);
      }
      if (step.prefill_tokens > 0 && step.draft_tokens > 0) {
        ++outcome.steps_with_drafts_and_prefill;
      }
    }
    return outcome;
  }
};

TEST_F(ItlTargetTest, PromptsArriving_StepsStayWithinTheTarget) {
  // 80 ms allows 60 tokens: 8 to 12 decode tokens (the prompts join the decoders as they
  // finish) and 48 to 52 prompt tokens.
  const Outcome outcome = Run(absl::Milliseconds(80));
  EXPECT_LE(outcome.longest_decode_step, absl::Milliseconds(80));
  // 360 prompt tokens at most 52 per step.
  EXPECT_GE(outcome.steps_with_prefill, 7);
}

TEST_F(ItlTargetTest, StepsWithPromptsRoundDownToTheStepMultiple) {
  // 80 ms allows 60 tokens. With a step multiple of 16 a step with decode and prompt tokens
  // holds 48: rounded down, 8 to 12 decode tokens still leave the prompts their 32.
  shared_->step_token_multiple = 16;
  const Outcome outcome = Run(absl::Milliseconds(80));
  ExpectMixedStepsOnMultiple(outcome, 16);
  EXPECT_LE(outcome.longest_decode_step, absl::Milliseconds(80));
}

TEST_F(ItlTargetTest, TheGuardRoundsUpToTheStepMultiple) {
  // A 10 ms target is below a decode-only step: a step may take 1.5x one (42 to 48 ms, 22
  // to 28 tokens). Rounded down to 16, that would leave the prompts less than their 32
  // guaranteed tokens next to 8 to 12 decode tokens, so it rounds up to 48 (68 ms).
  shared_->step_token_multiple = 16;
  const Outcome outcome = Run(absl::Milliseconds(10));
  ExpectMixedStepsOnMultiple(outcome, 16);
  EXPECT_LE(outcome.longest_decode_step, absl::Milliseconds(68));
}

TEST_F(ItlTargetTest, StepsBelowTheKernelBlocksAreNotRounded) {
  // The same load as above, but kernels that run whole blocks only from 64 rows on (as the
  // bf16 GEMV serves smaller steps): rounding 40 to 48 tokens would only add a
  // prompt token's time for each. So the guard's 32 prompt tokens stay 32, next to 8 to 12
  // decode tokens: every step at most 64 ms.
  shared_->step_token_multiple = 16;
  shared_->blocked_from_tokens = 64;
  const Outcome outcome = Run(absl::Milliseconds(10));
  ASSERT_GE(outcome.mixed_steps.size(), 4u);
  for (const StepStats& step : outcome.mixed_steps) {
    EXPECT_LE(step.prefill_tokens, 32) << step.decode_tokens << " decode tokens";
  }
  EXPECT_LE(outcome.longest_decode_step, absl::Milliseconds(64));
}

TEST_F(ItlTargetTest, WithoutATargetOneStepTakesEveryPrompt) {
  const Outcome outcome = Run(absl::ZeroDuration());
  // One step takes every prompt token next to the decoders: 20 + 360 + at least 1 ms (the
  // decoders whose prompts did not make the first step prefill in this one too).
  EXPECT_GE(outcome.longest_decode_step, absl::Milliseconds(381));
}

TEST_F(ItlTargetTest, DecodingAloneOverTheTargetStillLetsPromptsProgress) {
  // A 10 ms target is below even a decode-only step (28 to 32 ms): a step may take 1.5x a
  // decode-only step (at most 48 ms), and prompts get at least 32 tokens per step (8 to 12
  // decoders + 32: at most 64 ms).
  const Outcome outcome = Run(absl::Milliseconds(10));
  EXPECT_LE(outcome.longest_decode_step, absl::Milliseconds(64));
  EXPECT_GE(outcome.steps_with_prefill, 1);
}

TEST_F(ItlTargetTest, ManyDecodersOverTheTarget_PromptsAddHalfADecodeStep) {
  // 60 streams decode (a decode-only step: 80 to 84 ms) when 4 prompts of 90 tokens arrive.
  // With a 10 ms target a step with prompt tokens may take 1.5x a decode-only step: 120 to
  // 126 ms, i.e. 40 to 42 prompt tokens, more than the 32 the guard gives (steps within the
  // guard, such as those that admit the decoders themselves, are the guard's). The cost
  // model is exact on this clock once it has seen two step sizes; before, it charges all
  // the time to the tokens, which only makes steps smaller.
  Load many;
  many.decoders = 60;
  const Outcome outcome = Run(absl::Milliseconds(10), many);
  ASSERT_GE(outcome.mixed_steps.size(), 4u);
  int over_the_guard = 0;
  for (const StepStats& step : outcome.mixed_steps) {
    const absl::Duration decode_only = absl::Milliseconds(20 + step.decode_tokens);
    if (step.prefill_tokens <= 32) continue;  // the guard's share
    EXPECT_LE(step.duration, 1.5 * decode_only)
        << step.decode_tokens << " decode and " << step.prefill_tokens << " prompt tokens";
    ++over_the_guard;
  }
  EXPECT_GE(over_the_guard, 1);  // the budget, not the guard, sized some steps
}

TEST_F(ItlTargetTest, TheBudgetLeavesRoomForTheDecodersDrafts) {
  // 2 streams decode and verify 4 drafts each (drafting stops at 8 decoders) when 30 prompts
  // of 16 tokens arrive. Drafts cost what any token costs: a step may take 1.5x a
  // decode-only step with its drafts (at most 1.5 x (20 + 6 + 8) ms, with 6 decoders), or
  // a decode-only step plus the 32-token guard (8 decoders: 60 ms).
  Load burst;
  burst.decoders = 2;
  burst.prompts = 30;
  burst.prompt_tokens = 16;
  burst.spec_tokens = 4;
  const Outcome outcome = Run(absl::Milliseconds(10), burst);
  EXPECT_GE(outcome.steps_with_drafts_and_prefill, 1);  // the case this test is about
  EXPECT_LE(outcome.longest_decode_step, absl::Milliseconds(68));
}

TEST_F(ItlTargetTest, PromptsKeepPaceWithTheRequestsThatFinish) {
  // 50 prompts of 48 tokens (10 tokens each) and 10 run slots. With a 10 ms target a step
  // may take 1.5x a decode-only step (at most 45 ms: 15 prompt tokens), and the guard alone
  // gives 32: two prompts every three steps. In a closed loop new requests arrive as fast as
  // these finish, so such a guard never drains a queue that formed. Once the finished
  // requests' rate is measured (a 1 s average), the guard covers 1.5x the prompt tokens
  // they had per step, and whole prompts start next to the decoders.
  ManualClock clock;
  EngineOptions options;
  options.max_running = 10;
  options.itl_target = absl::Milliseconds(10);
  StartOnStepClock(options, &clock);
  SetPaused(true);
  const auto prompt = [](int i) {
    std::vector<TokenId> ids = {kBos};
    for (int k = 1; k < 48; ++k) ids.push_back(3 + (i * 7 + k) % 50);
    return ids;
  };
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  for (int i = 0; i < 50; ++i) {
    sinks.push_back(std::make_shared<RecordingSink>());
    GenerationRequest r = Request(absl::StrCat("r", i), prompt(i), 10);
    r.ignore_eos = true;
    ASSERT_TRUE(engine_->Submit(r, sinks.back()).ok());
  }
  SetPaused(false);
  for (auto& sink : sinks) EXPECT_TRUE(sink->Wait());
  engine_->Shutdown(absl::ZeroDuration());  // before `clock` goes away
  engine_.reset();

  int most_prompt_tokens = 0;
  for (const StepStats& step : observer_.steps()) {
    if (step.decode_tokens == 0) continue;
    most_prompt_tokens = std::max(most_prompt_tokens, step.prefill_tokens);
  }
  EXPECT_GE(most_prompt_tokens, 48);  // a whole prompt beside the decoders
  // Fewer than two prompts: the guard follows what finishes (at most a prompt a step), not
  // what waits (the free slots' worth, and the prompts behind them).
  EXPECT_LT(most_prompt_tokens, 96);
}

// Prompts that arrive together while nobody decodes, on a clock that charges each step
// 20 ms plus 1 ms per token: an opener of one token (it never decodes) holds the engine in
// its first step while they arrive, so the next step sees them all and times one step.
class IdleArrivalsTest : public EngineFakeTest {
 protected:
  // The steps after the opener's: each the token counts of its entries.
  std::vector<std::vector<int>> Run(absl::Duration itl_target, int prompts, int prompt_tokens,
                                    int max_tokens, int chunk_tokens = 256) {
    ManualClock clock;
    EngineOptions options;
    options.itl_target = itl_target;
    options.prefill_chunk_tokens = chunk_tokens;
    options.spec_tokens = 0;
    StartOnStepClock(options, &clock);
    SetPaused(true);
    auto opener = std::make_shared<RecordingSink>();
    EXPECT_TRUE(engine_->Submit(Request("opener", {kBos, 5}, 1), opener).ok());
    WaitForwardsEntered(1);
    std::vector<std::shared_ptr<RecordingSink>> sinks;
    for (int i = 0; i < prompts; ++i) {
      std::vector<TokenId> ids = {kBos};
      for (int k = 1; k < prompt_tokens; ++k) ids.push_back(3 + (i * 7 + k) % 50);
      sinks.push_back(std::make_shared<RecordingSink>());
      GenerationRequest r = Request(absl::StrCat("p", i), ids, max_tokens);
      r.ignore_eos = true;
      EXPECT_TRUE(engine_->Submit(r, sinks.back()).ok());
    }
    SetPaused(false);
    EXPECT_TRUE(opener->Wait());
    for (auto& sink : sinks) {
      EXPECT_TRUE(sink->Wait());
      EXPECT_EQ(sink->ids().size(), static_cast<size_t>(max_tokens));
    }
    engine_->Shutdown(absl::ZeroDuration());  // before `clock` goes away
    engine_.reset();
    std::vector<std::vector<int>> steps = Steps();
    steps.erase(steps.begin());
    return steps;
  }
};

// Prompt chunks in a step (decode entries hold one token here).
int PromptChunks(const std::vector<int>& step) {
  return static_cast<int>(std::count_if(step.begin(), step.end(), [](int n) { return n > 1; }));
}

TEST_F(IdleArrivalsTest, WithATargetPromptsThatArriveTogetherStartOneAtATime) {
  // 16 prompts of 32 tokens: a step holding them all would leave each to decode beside
  // the other 15 and end in the same step, and in a closed loop their successors would
  // arrive together again, round after round. The step with nobody decoding takes one
  // whole prompt (a 30 ms target covers less), and the steps beside its decoders take what
  // the target and the guard allow: 32 tokens, one prompt.
  const std::vector<std::vector<int>> steps = Run(absl::Milliseconds(30), 16, 32, 8);
  ASSERT_FALSE(steps.empty());
  EXPECT_EQ(steps[0], std::vector<int>{32});
  int started = 0;
  for (const std::vector<int>& step : steps) {
    EXPECT_LE(PromptChunks(step), 1) << absl::StrJoin(step, " ");
    started += PromptChunks(step);
  }
  EXPECT_EQ(started, 16);
}

TEST_F(IdleArrivalsTest, WithoutATargetOneStepTakesEveryPrompt) {
  const std::vector<std::vector<int>> steps = Run(absl::ZeroDuration(), 16, 32, 8);
  ASSERT_FALSE(steps.empty());
  EXPECT_EQ(steps[0], std::vector<int>(16, 32));
}

TEST_F(IdleArrivalsTest, PromptsThatEndAtTheirPrefillStillStartTogether) {
  // One token each: they never decode, so they form no wave, and one step takes them all.
  const std::vector<std::vector<int>> steps = Run(absl::Milliseconds(30), 16, 32, 1);
  ASSERT_FALSE(steps.empty());
  EXPECT_EQ(steps[0], std::vector<int>(16, 32));
}

TEST_F(IdleArrivalsTest, ALonePromptTakesWholeChunksWhateverTheTarget) {
  // A 10 ms target covers no token, but nobody waits for this prompt's steps: it runs in
  // chunks of 50 as it would without a target, then decodes.
  const std::vector<std::vector<int>> steps =
      Run(absl::Milliseconds(10), 1, 120, 2, /*chunk_tokens=*/50);
  const std::vector<std::vector<int>> expected = {{50}, {50}, {20}, {1}};
  EXPECT_EQ(steps, expected);
}

EngineOptions SpecOptions(int spec_tokens) {
  EngineOptions options;
  options.kv_cache_bytes = 32 * 16 * 64;
  options.spec_tokens = spec_tokens;
  return options;
}

TEST_F(EngineFakeTest, SpeculationAcceptsTheAgreeingPrefixAndRewindsTheRest) {
  Start(SpecOptions(4));
  // After the prefill emits C, "A B C" matched at the start drafts D Q R A: the model
  // agrees with D, then says E instead of Q, so that step emits D E and the next one
  // starts at E's position, over the rejected drafts' K/V.
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine_->Submit(Request("r", WithBos("ABCDQRAB"), 6), sink).ok());
  ASSERT_TRUE(sink->Wait());
  EXPECT_EQ(sink->ids(), Letters("CDEFGH"));
  EXPECT_EQ(sink->text(), "CDEFGH");
  EXPECT_EQ(sink->info().completion_tokens, 6);
  EXPECT_EQ(sink->chunks().size(), 5u);  // D and E came in one chunk
  EXPECT_EQ(sink->violations(), "");

  // A draft the model fully agrees with: D from the prefill, then "B C D" drafts E F G H
  // and the step emits those four plus the model's own I.
  auto full = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine_->Submit(Request("full", WithBos("ABCDEFGHABC"), 7), full).ok());
  ASSERT_TRUE(full->Wait());
  EXPECT_EQ(full->ids(), Letters("DEFGHIJ"));
  engine_->Shutdown(absl::Seconds(10));

  const std::vector<std::vector<int>> steps = Steps();
  const std::vector<std::vector<int>> expected = {{9}, {5}, {1}, {1}, {1},  // "r"
                                                  {12}, {5}, {1}};          // "full"
  EXPECT_EQ(steps, expected);
  const std::vector<StepStats> stats = observer_.steps();
  ASSERT_EQ(stats.size(), expected.size());
  EXPECT_EQ(stats[1].decode_tokens, 1);
  EXPECT_EQ(stats[1].draft_tokens, 4);
  EXPECT_EQ(stats[1].accepted_draft_tokens, 1);
  EXPECT_EQ(stats[6].draft_tokens, 4);
  EXPECT_EQ(stats[6].accepted_draft_tokens, 4);
  EXPECT_EQ(stats[2].draft_tokens, 0);  // "C D E" occurred nowhere before
  // Inter-token gaps: one per decode token emitted (5 + 6); the speculative extras are 0.
  EXPECT_EQ(observer_.itl_count(), 11u);
}

TEST_F(EngineFakeTest, SpeculationNeverDraftsPastMaxTokens) {
  Start(SpecOptions(8));
  auto sink = std::make_shared<RecordingSink>();
  // "B C D" drafts 8 tokens, but only 2 more are wanted after D: one draft is verified.
  ASSERT_TRUE(engine_->Submit(Request("r", WithBos("ABCDEFGHIJKLABC"), 3), sink).ok());
  ASSERT_TRUE(sink->Wait());
  EXPECT_EQ(sink->ids(), Letters("DEF"));
  engine_->Shutdown(absl::Seconds(10));
  EXPECT_EQ(Steps(), (std::vector<std::vector<int>>{{16}, {2}}));
}

TEST_F(EngineFakeTest, SpeculationOptOutAndBusyBatchDoNotDraft) {
  EngineOptions options = SpecOptions(4);
  options.spec_max_decoders = 2;
  Start(options);
  GenerationRequest opted_out = Request("out", WithBos("ABCDEFGHABC"), 7);
  opted_out.disable_speculation = true;
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine_->Submit(opted_out, sink).ok());
  ASSERT_TRUE(sink->Wait());
  EXPECT_EQ(sink->ids(), Letters("DEFGHIJ"));
  for (const StepStats& step : observer_.steps()) EXPECT_EQ(step.draft_tokens, 0);

  // Two decoders reach spec_max_decoders: the first drafts only while it decodes alone.
  SetPaused(true);
  auto first = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine_->Submit(Request("a", WithBos("ABCDEFGHABC"), 12), first).ok());
  WaitForwardsEntered(8);  // 7 steps of "out", then this prefill
  auto second = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine_->Submit(Request("b", WithBos("abcdefghabc"), 12), second).ok());
  SetPaused(false);
  ASSERT_TRUE(first->Wait());
  ASSERT_TRUE(second->Wait());
  EXPECT_EQ(first->ids(), Letters("DEFGHIJKLMNO"));
  EXPECT_EQ(second->ids(), Letters("defghijklmno"));
  engine_->Shutdown(absl::Seconds(10));
  int drafted = 0;
  for (const StepStats& step : observer_.steps()) {
    if (step.decode_tokens >= 2) {
      EXPECT_EQ(step.draft_tokens, 0);
    }
    drafted += step.draft_tokens;
  }
  EXPECT_EQ(drafted, 4);  // "a"'s first decode step, beside "b"'s prefill
}

TEST_F(EngineFakeTest, ShutdownDrainsRunningRequests) {
  Start();
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  for (int i = 0; i < 5; ++i) {
    sinks.push_back(std::make_shared<RecordingSink>());
    ASSERT_TRUE(
        engine_->Submit(Request(absl::StrCat("r", i), {kBos, Letter('a')}, 30), sinks[i]).ok());
  }
  engine_->Shutdown(absl::InfiniteDuration());
  for (auto& sink : sinks) {
    ASSERT_TRUE(sink->Wait());
    EXPECT_EQ(sink->info().reason, FinishReason::kLength);
    EXPECT_EQ(sink->ids().size(), 30u);
  }
  EXPECT_EQ(
      engine_->Submit(Request("after", {kBos, 5}, 3), std::make_shared<RecordingSink>()).code(),
      absl::StatusCode::kUnavailable);
  engine_->Shutdown(absl::ZeroDuration());  // idempotent
}

TEST_F(EngineFakeTest, ShutdownWithoutDrainEndsEverythingUnavailable) {
  EngineOptions options = SmallOptions();
  options.kv_cache_bytes = 32 * 16 * 2;
  Start(options);
  SetPaused(true);
  auto running = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine_->Submit(Request("run", {kBos, 5}, 20), running).ok());
  WaitForwardsEntered(1);
  auto waiting = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine_->Submit(Request("wait", {kBos, 5}, 20), waiting).ok());
  // Close the engine while its first step is still in flight, then let it go on.
  std::thread closer([this] { engine_->Shutdown(absl::ZeroDuration()); });
  while (
      engine_->Submit(Request("probe", {kBos, 5}, 1), std::make_shared<RecordingSink>()).code() !=
      absl::StatusCode::kUnavailable) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  SetPaused(false);
  closer.join();
  ASSERT_TRUE(running->Wait());
  ASSERT_TRUE(waiting->Wait());
  EXPECT_EQ(running->info().reason, FinishReason::kShutdown);
  EXPECT_EQ(running->info().status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(waiting->info().reason, FinishReason::kShutdown);
  EXPECT_EQ(engine_->gauges().requests_running, 0);
  EXPECT_EQ(engine_->gauges().requests_waiting, 0);
}

TEST_F(EngineFakeTest, DestructorShutsDown) {
  Start();
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine_->Submit(Request("r", {kBos, 5}, 100), sink).ok());
  engine_.reset();
  EXPECT_TRUE(sink->Wait());
  EXPECT_EQ(sink->violations(), "");
}

TEST_F(EngineFakeTest, CreateRejectsBadOptions) {
  EngineOptions options = SmallOptions();
  options.max_running = 600;  // more decode tokens than max_batch_tokens
  auto engine =
      Engine::CreateWithStepModel(std::make_unique<FakeStepModel>(shared_), options, nullptr);
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kInvalidArgument);
  options = EngineOptions();
  options.max_batch_tokens = 1024;  // beyond the model's 512
  engine = Engine::CreateWithStepModel(std::make_unique<FakeStepModel>(shared_), options, nullptr);
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kInvalidArgument);
  options = SmallOptions();
  options.spec_tokens = 33;
  engine = Engine::CreateWithStepModel(std::make_unique<FakeStepModel>(shared_), options, nullptr);
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kInvalidArgument);
  options.spec_tokens = 4;
  options.spec_max_decoders = 0;
  engine = Engine::CreateWithStepModel(std::make_unique<FakeStepModel>(shared_), options, nullptr);
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kInvalidArgument);
  options = EngineOptions();
  options.kv_cache_bytes = 100;  // less than one block
  engine = Engine::CreateWithStepModel(std::make_unique<FakeStepModel>(shared_), options, nullptr);
  EXPECT_FALSE(engine.ok());
  options = SmallOptions();
  options.stall_timeout = absl::ZeroDuration();  // "never" is InfiniteDuration
  engine = Engine::CreateWithStepModel(std::make_unique<FakeStepModel>(shared_), options, nullptr);
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(EngineFakeTest, ManyConcurrentRequestsAllFinishAndBlocksReturn) {
  EngineOptions options = SmallOptions();
  options.max_running = 8;
  options.kv_cache_bytes = 32 * 16 * 12;
  Start(options);
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  for (int i = 0; i < 40; ++i) {
    sinks.push_back(std::make_shared<RecordingSink>());
    const TokenId start = Letter('a') + i % 20;
    ASSERT_TRUE(
        engine_->Submit(Request(absl::StrCat("r", i), {kBos, start}, 3 + i % 7), sinks[i]).ok());
  }
  for (int i = 0; i < 40; ++i) {
    ASSERT_TRUE(sinks[i]->Wait());
    std::vector<TokenId> expected;
    TokenId t = Letter('a') + i % 20;
    for (int k = 0; k < 3 + i % 7; ++k) expected.push_back(t = NextToken(t));
    EXPECT_EQ(sinks[i]->ids(), expected) << i;
  }
  for (const StepStats& s : observer_.steps()) EXPECT_LE(s.num_sequences, 8);
  engine_->Shutdown(absl::Seconds(10));
  EXPECT_EQ(engine_->gauges().kv_blocks_used, 0);
  EXPECT_EQ(observer_.finished(), 40);
}

// Records the order in which requests (by id) produce their first token, across sinks.
class FirstTokenOrder {
 public:
  class Sink final : public TokenSink {
   public:
    Sink(std::string id, FirstTokenOrder* order) : id_(std::move(id)), order_(order) {}
    bool OnChunk(TokenChunk chunk) override {
      if (!seen_first_) order_->Add(id_);
      seen_first_ = true;
      return true;
    }
    void OnFinish(const FinishInfo& info) override {
      info_ = info;
      done_.Notify();
    }
    bool Wait() { return done_.WaitForNotificationWithTimeout(absl::Seconds(120)); }
    const FinishInfo& info() const { return info_; }  // after Wait()

   private:
    const std::string id_;
    FirstTokenOrder* const order_;
    bool seen_first_ = false;  // engine thread only
    FinishInfo info_;
    absl::Notification done_;
  };

  void Add(const std::string& id) {
    absl::MutexLock lock(&mu_);
    order_.push_back(id);
  }
  // Position of `id` among first tokens; -1 if it never produced one.
  int IndexOf(const std::string& id) {
    absl::MutexLock lock(&mu_);
    auto it = std::find(order_.begin(), order_.end(), id);
    return it == order_.end() ? -1 : static_cast<int>(it - order_.begin());
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> order_ ABSL_GUARDED_BY(mu_);
};

GenerationRequest TenantRequest(std::string id, std::string tenant, int max_tokens) {
  GenerationRequest r = Request(std::move(id), {kBos, Letter('C')}, max_tokens);
  r.tenant = std::move(tenant);
  return r;
}

// Issue 10 item 6: tenant A queues a burst of 200 requests, then tenant B sends one. B's
// request must start within a step or two, not after A's whole burst. (On the FIFO
// waiting queue B came out 201st of 201.)
TEST_F(EngineFakeTest, OneTenantsBurstDoesNotDelayAnotherTenantsRequest) {
  constexpr int kBurst = 200;
  EngineOptions options = SmallOptions();  // 64 blocks; each request here needs 1
  options.max_running = 2;
  options.max_queue = kBurst + 1;
  Start(options);
  SetPaused(true);
  FirstTokenOrder order;
  std::vector<std::shared_ptr<FirstTokenOrder::Sink>> sinks;
  for (int i = 0; i < kBurst; ++i) {
    const std::string id = absl::StrCat("a", i);
    sinks.push_back(std::make_shared<FirstTokenOrder::Sink>(id, &order));
    ASSERT_TRUE(engine_->Submit(TenantRequest(id, "tenant-a", 3), sinks.back()).ok()) << id;
    if (i == 0) WaitForwardsEntered(1);  // the engine is mid-step: the rest queue up
  }
  sinks.push_back(std::make_shared<FirstTokenOrder::Sink>("b", &order));
  ASSERT_TRUE(engine_->Submit(TenantRequest("b", "tenant-b", 3), sinks.back()).ok());
  SetPaused(false);
  for (auto& sink : sinks) {
    ASSERT_TRUE(sink->Wait());
    EXPECT_EQ(sink->info().reason, FinishReason::kLength);
    EXPECT_EQ(sink->info().completion_tokens, 3);
  }
  // a0 runs (it was admitted at once), a1 held the other slot; after them the fair queue
  // serves a2 (it arrived first at the same virtual time) and then b.
  const int b = order.IndexOf("b");
  EXPECT_GE(b, 0);
  EXPECT_LE(b, 3) << "tenant B's request waited behind " << b << " of tenant A's";
  EXPECT_GT(order.IndexOf("a199"), b);
}

// max_queue_per_tenant: a tenant at its cap is refused while another still gets queue
// space (and nothing else about max_queue changes).
TEST_F(EngineFakeTest, PerTenantQueueCapLeavesRoomForOtherTenants) {
  EngineOptions options = SmallOptions();
  options.kv_cache_bytes = 32 * 16 * 2;  // 2 blocks: one request of <= 32 tokens at a time
  options.max_queue = 10;
  options.max_queue_per_tenant = 2;
  Start(options);
  SetPaused(true);
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  auto submit = [&](const std::string& id, const std::string& tenant) {
    sinks.push_back(std::make_shared<RecordingSink>());
    GenerationRequest r = Request(id, {kBos, 5}, 20);
    r.tenant = tenant;
    return engine_->Submit(r, sinks.back());
  };
  ASSERT_TRUE(submit("run", "a").ok());
  WaitForwardsEntered(1);  // admitted: it holds both blocks
  ASSERT_TRUE(submit("a0", "a").ok());
  ASSERT_TRUE(submit("a1", "a").ok());
  const absl::Status over = submit("a2", "a");
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted) << over;
  EXPECT_THAT(std::string(over.message()), ::testing::HasSubstr("tenant queue full"));
  EXPECT_TRUE(RetryPushbackOf(over).has_value());
  EXPECT_FALSE(sinks.back()->called());
  sinks.pop_back();
  ASSERT_TRUE(submit("b0", "b").ok());
  ASSERT_TRUE(submit("b1", "b").ok());
  SetPaused(false);
  for (auto& sink : sinks) {
    ASSERT_TRUE(sink->Wait());
    EXPECT_EQ(sink->info().reason, FinishReason::kLength);
  }
  // The cap counts only what waits: a's queue is empty again.
  ASSERT_TRUE(submit("a3", "a").ok());
  ASSERT_TRUE(sinks.back()->Wait());
}

TEST_F(EngineFakeTest, TenantIsValidatedAndReported) {
  Start();
  struct Case {
    std::string tenant;
    int weight;
  } bad[] = {{"line\nbreak", 1}, {std::string(65, 't'), 1}, {"ok", 0}, {"ok", 1001}};
  for (const Case& c : bad) {
    GenerationRequest r = Request("r", {kBos, 5}, 2);
    r.tenant = c.tenant;
    r.tenant_weight = c.weight;
    auto sink = std::make_shared<RecordingSink>();
    const absl::Status s = engine_->Submit(r, sink);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.tenant << " " << c.weight;
    EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("tenant"));
    EXPECT_FALSE(sink->called());
  }
  GenerationRequest r = Request("r", {kBos, 5}, 2);
  r.tenant = std::string(64, 't');
  r.tenant_weight = 1000;
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine_->Submit(r, sink).ok());
  ASSERT_TRUE(sink->Wait());
  EXPECT_EQ(sink->info().tenant, std::string(64, 't'));
}

// Deadline-aware refusal counts the requests the fair queue puts ahead of a new one, not
// the whole queue: behind tenant a's 8 queued requests, tenant b's request waits for about
// one of them, so a deadline that a's next request cannot meet is enough for b's.
TEST_F(EngineFakeTest, DeadlineEstimateFollowsTheFairOrder) {
  ManualClock clock;
  shared_->after_forward = [&clock](int) { clock.Advance(absl::Milliseconds(10)); };
  EngineOptions options = SmallOptions();
  options.max_running = 1;
  options.max_queue = 20;
  Start(options, &clock);
  for (int i = 0; i < 5; ++i) {  // 100 ms per request: 10 finish per second
    auto warm = std::make_shared<RecordingSink>();
    ASSERT_TRUE(engine_->Submit(Request(absl::StrCat("w", i), {kBos, 5}, 10), warm).ok());
    ASSERT_TRUE(warm->Wait());
  }
  SetPaused(true);  // the clock stands still while the test submits
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  auto submit = [&](const std::string& id, const std::string& tenant, absl::Duration deadline) {
    sinks.push_back(std::make_shared<RecordingSink>());
    GenerationRequest r = Request(id, {kBos, 5}, 10);
    r.tenant = tenant;
    if (deadline != absl::InfiniteDuration()) r.deadline = clock.Now() + deadline;
    return engine_->Submit(r, sinks.back());
  };
  ASSERT_TRUE(submit("pin", "a", absl::InfiniteDuration()).ok());
  WaitForwardsEntered(51);
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(submit(absl::StrCat("a", i), "a", absl::InfiniteDuration()).ok());
  }
  // a's next one waits for 9 to finish (~900 ms): 400 ms cannot cover it.
  const absl::Status late = submit("a-late", "a", absl::Milliseconds(400));
  EXPECT_EQ(late.code(), absl::StatusCode::kDeadlineExceeded) << late;
  EXPECT_THAT(std::string(late.message()), ::testing::HasSubstr("8 of 8 queued ahead"));
  sinks.pop_back();
  // b's waits for about 2 (~200 ms, one of a's and itself): accepted, and it makes it.
  const absl::Status b = submit("b", "b", absl::Milliseconds(400));
  EXPECT_TRUE(b.ok()) << b;  // not ASSERT: the model must be unpaused to shut down
  if (!b.ok()) sinks.pop_back();
  SetPaused(false);
  for (auto& sink : sinks) {
    ASSERT_TRUE(sink->Wait());
    EXPECT_EQ(sink->info().reason, FinishReason::kLength);
  }
  EXPECT_LT(sinks.back()->info().timings.time_to_first_token, absl::Milliseconds(400));
  engine_->Shutdown(absl::ZeroDuration());  // before `clock` goes away
}

}  // namespace
}  // namespace quill::engine
