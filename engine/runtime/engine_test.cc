// Engine tests on the real kjv-1m model in exact mode, where Forward is batch-invariant,
// so a request must give the same tokens alone, among others, or chunked.

#include "engine/runtime/engine.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "engine/kv_cache/kv_cache.h"
#include "engine/runtime/recording_sink_for_test.h"
#include "engine/sampler/json_schema.h"
#include "engine/sampler/sampler.h"
#include "engine/sampler/schema_prefix.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/heap_allocations.h"

namespace quill::engine {
namespace {

std::string ModelPath() {
  const char* dir = std::getenv("QUILL_SHARED_DIR");
  return dir == nullptr ? "" : std::string(dir) + "/models/kjv-1m.gguf";
}

std::unique_ptr<Model> LoadModel(kernels::Precision precision = kernels::Precision::kExact) {
  ModelOptions options;
  options.path = ModelPath();
  options.precision = precision;
  options.max_batch_tokens = 512;
  auto model = Model::Load(options);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? std::move(model).value() : nullptr;
}

class StepRecorder final : public EngineObserver {
 public:
  struct Step {
    int prefill_tokens;
    int decode_tokens;
    int prefix_waited_requests;
  };
  void OnStep(const StepStats& stats, const EngineGauges& /*gauges*/) override {
    absl::MutexLock lock(&mu_);
    steps_.push_back({stats.prefill_tokens, stats.decode_tokens, stats.prefix_waited_requests});
  }
  std::vector<Step> steps() {
    absl::MutexLock lock(&mu_);
    return steps_;
  }

 private:
  absl::Mutex mu_;
  std::vector<Step> steps_ ABSL_GUARDED_BY(mu_);
};

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = ModelPath();
    if (path.empty() || !std::ifstream(path).good()) {
      GTEST_SKIP() << "shared assets not found at '" << path << "'";
    }
    reference_model_ = LoadModel();
    ASSERT_NE(reference_model_, nullptr);
    vocab_ = static_cast<int>(reference_model_->config().vocab_size);
  }

  static EngineOptions DefaultOptions() {
    EngineOptions options;
    options.kv_cache_bytes = int64_t{8} << 20;
    return options;
  }

  void Start(EngineOptions options = DefaultOptions(), EngineObserver* observer = nullptr,
             kernels::Precision precision = kernels::Precision::kExact,
             std::unique_ptr<Model> draft_model = nullptr) {
    std::unique_ptr<Model> model = LoadModel(precision);
    ASSERT_NE(model, nullptr);
    auto engine = Engine::Create(std::move(model), options, observer, std::move(draft_model));
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = std::move(engine).value();
  }

  void TearDown() override {
    if (engine_ == nullptr) return;
    engine_->Shutdown(absl::Seconds(60));
    EXPECT_EQ(engine_->gauges().kv_blocks_used, 0);
  }

  std::vector<TokenId> Encode(const std::string& text) {
    auto ids = reference_model_->tokenizer().Encode(text, /*add_special=*/true);
    EXPECT_TRUE(ids.ok()) << ids.status();
    return ids.ok() ? *ids : std::vector<TokenId>{};
  }

  // The reference: the whole prompt in one Forward, then one token per Forward, sampled
  // by a fresh Sampler; stops at max_tokens or an end-of-generation token.
  std::vector<TokenId> ReferenceLoop(const GenerationRequest& r) {
    KvCacheOptions kv_options = reference_model_->MakeKvCacheOptions(int64_t{4} << 20, 16);
    auto kv = KvCache::Create(kv_options);
    EXPECT_TRUE(kv.ok());
    if (!kv.ok()) return {};
    KvCache& cache = **kv;
    EXPECT_TRUE(cache.Reserve(1, r.prompt_ids.size() + r.max_tokens).ok());
    Sampler sampler(r.sampling, vocab_);
    std::vector<TokenId> history = r.prompt_ids;
    std::vector<TokenId> out;
    std::vector<float> logits(vocab_);
    BatchEntry entry;
    entry.seq = 1;
    entry.tokens = history;
    entry.first_pos = 0;
    entry.want_logits = true;
    while (true) {
      EXPECT_TRUE(reference_model_->Forward({&entry, 1}, cache, logits.data()).ok());
      const TokenId next = sampler.Sample(logits, r.prompt_ids, out);
      if (!r.ignore_eos && reference_model_->tokenizer().IsEndOfGeneration(next)) break;
      out.push_back(next);
      history.push_back(next);
      if (static_cast<int>(out.size()) >= r.max_tokens) break;
      entry.first_pos = static_cast<int32_t>(history.size() - 1);
      entry.tokens = absl::MakeConstSpan(&history.back(), 1);
    }
    return out;
  }

  GenerationRequest Request(std::string id, const std::string& prompt, int max_tokens) {
    GenerationRequest r;
    r.request_id = std::move(id);
    r.prompt_ids = Encode(prompt);
    r.max_tokens = max_tokens;
    r.sampling.temperature = 0.0f;
    return r;
  }

  // Runs `r` through the engine alone and returns its sink.
  std::shared_ptr<RecordingSink> RunAlone(const GenerationRequest& r) {
    auto sink = std::make_shared<RecordingSink>();
    EXPECT_TRUE(engine_->Submit(r, sink).ok());
    EXPECT_TRUE(sink->Wait());
    return sink;
  }

  // Drafts are counted in OnStep, just after a step's tokens reach their sinks: a
  // one-token request without speculation, which runs in a later step, makes the counts of
  // every earlier step final.
  void AwaitStepReports() {
    GenerationRequest r = Request("barrier", "Amen", 1);
    r.disable_speculation = true;
    RunAlone(r);
  }

  // Submits every request at once (so that they batch together) and waits for them all.
  std::vector<std::shared_ptr<RecordingSink>> RunTogether(
      const std::vector<GenerationRequest>& requests) {
    std::vector<std::shared_ptr<RecordingSink>> sinks;
    for (const GenerationRequest& r : requests) {
      sinks.push_back(std::make_shared<RecordingSink>());
      EXPECT_TRUE(engine_->Submit(r, sinks.back()).ok()) << r.request_id;
    }
    for (const auto& sink : sinks) EXPECT_TRUE(sink->Wait());
    return sinks;
  }

  std::unique_ptr<Model> reference_model_;
  int vocab_ = 0;
  std::unique_ptr<Engine> engine_;
};

const char* const kPrompts[] = {
    "In the beginning",
    "And the LORD said unto Moses,",
    "Blessed are the",
    "And it came to pass, when",
    "The LORD is my shepherd;",
    "For God so loved",
    "And Jesus answered and said",
    "Then said he unto them,",
};

SamplingParams Greedy() {
  SamplingParams p;
  p.temperature = 0.0f;
  return p;
}

SamplingParams Seeded(uint64_t seed) {
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_p = 0.9f;
  p.seed = seed;
  return p;
}

TEST_F(EngineTest, GreedyAndSeededEqualTheReferenceLoop) {
  Start();
  for (int i = 0; i < 4; ++i) {
    GenerationRequest r = Request(absl::StrCat("g", i), kPrompts[i], 24);
    const std::vector<TokenId> expected = ReferenceLoop(r);
    ASSERT_FALSE(expected.empty());
    EXPECT_EQ(RunAlone(r)->ids(), expected) << kPrompts[i];

    r.request_id = absl::StrCat("s", i);
    r.sampling = Seeded(42 + i);
    EXPECT_EQ(RunAlone(r)->ids(), ReferenceLoop(r)) << kPrompts[i] << " seeded";
  }
}

// The penalties read the sequence's output apart from its prompt: the engine must hand
// the sampler the same split as the reference loop (the prompt, then what was generated).
SamplingParams WithPenaltiesAndBias(SamplingParams p) {
  p.frequency_penalty = 0.7f;
  p.presence_penalty = 0.4f;
  p.repetition_penalty = 1.05f;
  p.logit_bias = {{5, -100.0f}, {100, 1.5f}};
  return p;
}

TEST_F(EngineTest, PenaltiesAndLogitBiasEqualTheReferenceLoop) {
  Start();
  for (int i = 0; i < 4; ++i) {
    GenerationRequest plain = Request(absl::StrCat("plain", i), kPrompts[i], 32);
    GenerationRequest r = plain;
    r.request_id = absl::StrCat("g", i);
    r.sampling = WithPenaltiesAndBias(Greedy());
    const std::vector<TokenId> expected = ReferenceLoop(r);
    ASSERT_FALSE(expected.empty());
    EXPECT_EQ(RunAlone(r)->ids(), expected) << kPrompts[i];
    // The penalties must matter here, or the comparison proves nothing.
    EXPECT_NE(expected, ReferenceLoop(plain)) << kPrompts[i];

    r.request_id = absl::StrCat("s", i);
    r.sampling = WithPenaltiesAndBias(Seeded(42 + i));
    EXPECT_EQ(RunAlone(r)->ids(), ReferenceLoop(r)) << kPrompts[i] << " seeded";
  }
}

TEST_F(EngineTest, ThirtyTwoConcurrentRequestsEqualTheirSoloRuns) {
  Start();
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 32; ++i) {
    GenerationRequest r = Request(absl::StrCat("r", i), kPrompts[i % 8], 8 + (i * 7) % 33);
    if (i % 2 == 1) r.sampling = Seeded(1000 + i);
    if (i % 3 == 0) {  // longer prompts too
      const std::vector<TokenId> copy = r.prompt_ids;
      r.prompt_ids.insert(r.prompt_ids.end(), copy.begin() + 1, copy.end());
    }
    requests.push_back(std::move(r));
  }
  std::vector<std::vector<TokenId>> solo;
  for (const GenerationRequest& r : requests) solo.push_back(RunAlone(r)->ids());

  const std::vector<std::shared_ptr<RecordingSink>> sinks = RunTogether(requests);
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(sinks[i]->ids(), solo[i]) << "request " << i;
    EXPECT_EQ(sinks[i]->finishes(), 1);
  }
}

// Slow readers pause and resume many times, in and out of the others' batches: nobody's
// tokens change (exact mode is batch-invariant), and each ends as its solo run.
TEST_F(EngineTest, PausedSlowReadersChangeNoOutputs) {
  Start();
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 8; ++i) {
    GenerationRequest r = Request(absl::StrCat("r", i), kPrompts[i], 24 + i);
    if (i % 2 == 1) r.sampling = Seeded(2000 + i);
    requests.push_back(std::move(r));
  }
  std::vector<std::vector<TokenId>> solo;
  for (const GenerationRequest& r : requests) solo.push_back(RunAlone(r)->ids());

  // Even-numbered requests read normally; odd ones only when the test reads for them.
  std::vector<std::shared_ptr<RecordingSink>> recorded(8);
  std::vector<std::shared_ptr<SlowReaderSink>> slow(8);
  for (int i = 0; i < 8; ++i) {
    std::shared_ptr<TokenSink> sink;
    if (i % 2 == 0) {
      recorded[i] = std::make_shared<RecordingSink>();
      sink = recorded[i];
    } else {
      slow[i] = std::make_shared<SlowReaderSink>(/*bound=*/2 + i % 3);
      recorded[i] = slow[i]->recorded;
      sink = slow[i];
    }
    ASSERT_TRUE(engine_->Submit(requests[i], sink).ok());
  }
  int most_paused = 0;
  for (int round = 0; round < 20000; ++round) {
    most_paused = std::max(most_paused, engine_->gauges().requests_paused);
    bool all_done = true;
    for (int i = 1; i < 8; i += 2) {
      if (recorded[i]->finishes() > 0) continue;
      all_done = false;
      // A slow reader reads only once it is full, so it pauses however fast the engine runs
      // (a sanitized build emits a few tokens in the time a fast one emits dozens).
      if (round % 3 == i % 3 && slow[i]->full()) slow[i]->Read(*engine_, requests[i].request_id);
    }
    if (all_done) break;
    absl::SleepFor(absl::Milliseconds(2));
  }
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(recorded[i]->Wait());
    EXPECT_EQ(recorded[i]->ids(), solo[i]) << "request " << i;
    EXPECT_EQ(recorded[i]->violations(), "");
  }
  // Every slow reader was paused at least once (the gauge, sampled, may miss them).
  for (int i = 1; i < 8; i += 2) {
    if (solo[i].size() > static_cast<size_t>(2 + i % 3)) {  // longer than its bound
      EXPECT_GT(slow[i]->times_blocked(), 0) << "request " << i;
    }
  }
  std::cout << "[slow readers] most paused at once (sampled): " << most_paused << "\n";
}

// Counts speculative draft tokens verified and accepted.
class SpecCounter final : public EngineObserver {
 public:
  void OnStep(const StepStats& stats, const EngineGauges& /*gauges*/) override {
    absl::MutexLock lock(&mu_);
    drafted_ += stats.draft_tokens;
    accepted_ += stats.accepted_draft_tokens;
  }
  int drafted() {
    absl::MutexLock lock(&mu_);
    return drafted_;
  }
  int accepted() {
    absl::MutexLock lock(&mu_);
    return accepted_;
  }

 private:
  absl::Mutex mu_;
  int drafted_ ABSL_GUARDED_BY(mu_) = 0;
  int accepted_ ABSL_GUARDED_BY(mu_) = 0;
};

// Text that repeats, so n-gram drafts are often right.
const char* const kRepetitivePrompts[] = {
    "And God said, Let there be light: and there was light. And God said, Let there be "
    "light: and there was light. And God said, Let there be",
    "Holy, holy, holy, holy, holy, holy, holy, holy,",
};

EngineOptions SpecOptions(int spec_tokens) {
  EngineOptions options;
  options.kv_cache_bytes = int64_t{8} << 20;
  options.spec_tokens = spec_tokens;
  options.spec_max_decoders = 64;  // draft even among many decoders (exercises batching)
  return options;
}

// Exact precision: a (1 + k)-row verification gives each row the bits of a one-token
// decode, and a draft is accepted exactly when the sampler picks it, so greedy and seeded
// outputs equal the one-token-per-step reference loop.
TEST_F(EngineTest, SpeculationIsLosslessGreedyAndSeeded) {
  SpecCounter counter;
  Start(SpecOptions(4), &counter);
  for (const char* prompt : kPrompts) {
    GenerationRequest r = Request("g", prompt, 32);
    EXPECT_EQ(RunAlone(r)->ids(), ReferenceLoop(r)) << prompt;
  }
  AwaitStepReports();
  const int accepted_plain = counter.accepted();
  for (const char* prompt : kRepetitivePrompts) {
    GenerationRequest r = Request("rep", prompt, 48);
    const std::vector<TokenId> expected = ReferenceLoop(r);
    EXPECT_EQ(RunAlone(r)->ids(), expected) << prompt;
    r.sampling = Seeded(7);
    r.request_id = "rep-seeded";
    EXPECT_EQ(RunAlone(r)->ids(), ReferenceLoop(r)) << prompt << " seeded";
  }
  for (int i = 0; i < 4; ++i) {
    GenerationRequest r = Request("s", kPrompts[i], 32);
    r.sampling = Seeded(42 + i);
    EXPECT_EQ(RunAlone(r)->ids(), ReferenceLoop(r)) << kPrompts[i] << " seeded";
  }
  // Penalties change each row's distribution by the rows accepted before it in the step:
  // still the reference's tokens.
  for (const char* prompt : kRepetitivePrompts) {
    GenerationRequest r = Request("rep-penalized", prompt, 48);
    r.sampling = WithPenaltiesAndBias(Greedy());
    EXPECT_EQ(RunAlone(r)->ids(), ReferenceLoop(r)) << prompt << " penalized";
  }
  engine_->Shutdown(absl::Seconds(30));  // every OnStep has been delivered
  std::cout << "[speculation] kjv-1m exact: drafted " << counter.drafted() << ", accepted "
            << counter.accepted() << " (plain prompts: " << accepted_plain << ")\n";
  EXPECT_GT(counter.drafted(), 0);
  // The repetitive prompts make the path run: some drafts were right.
  EXPECT_GT(counter.accepted() - accepted_plain, 8);
}

// Speculating sequences batched together and with the prefix cache: outputs still equal
// the reference, and the blocks cached from speculative output (never holding a rejected
// draft's K/V) give a follow-up request exactly the reference output.
TEST_F(EngineTest, SpeculationInABatchAndWithThePrefixCacheIsExact) {
  SpecCounter counter;
  EngineOptions options = SpecOptions(4);
  options.block_size_tokens = 8;
  Start(options, &counter);
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 6; ++i) {
    GenerationRequest r = Request(absl::StrCat("b", i),
                                  i % 2 == 0 ? kRepetitivePrompts[i / 2 % 2] : kPrompts[i], 40);
    if (i % 3 == 2) r.sampling = Seeded(100 + i);
    requests.push_back(std::move(r));
  }
  const std::vector<std::shared_ptr<RecordingSink>> sinks = RunTogether(requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(sinks[i]->ids(), ReferenceLoop(requests[i])) << "request " << i;
  }

  GenerationRequest follow_up = requests[0];
  follow_up.request_id = "follow-up";
  const std::vector<TokenId> output = sinks[0]->ids();
  follow_up.prompt_ids.insert(follow_up.prompt_ids.end(), output.begin(), output.end());
  follow_up.max_tokens = 16;
  auto follow = RunAlone(follow_up);
  EXPECT_GT(follow->info().cached_prompt_tokens, static_cast<int>(requests[0].prompt_ids.size()));
  EXPECT_EQ(follow->ids(), ReferenceLoop(follow_up));
  engine_->Shutdown(absl::Seconds(30));
  EXPECT_GT(counter.accepted(), 0);
}

// A draft model: kjv-1m in fast precision drafting for itself in exact precision. Its
// greedy guesses mostly agree with the target (drafts accepted) but not always (fast and
// exact logits differ, and seeded sampling departs from greedy), so both paths run. Every
// output must still equal the one-token-per-step reference loop.
TEST_F(EngineTest, DraftModelIsLosslessGreedyAndSeeded) {
  SpecCounter counter;
  Start(SpecOptions(4), &counter, kernels::Precision::kExact, LoadModel(kernels::Precision::kFast));
  for (int i = 0; i < 6; ++i) {
    GenerationRequest r = Request(absl::StrCat("g", i), kPrompts[i], 40);
    EXPECT_EQ(RunAlone(r)->ids(), ReferenceLoop(r)) << kPrompts[i];
  }
  AwaitStepReports();
  const int greedy_drafted = counter.drafted();
  const int greedy_accepted = counter.accepted();
  for (int i = 0; i < 6; ++i) {
    GenerationRequest r = Request(absl::StrCat("s", i), kPrompts[i], 40);
    r.sampling = Seeded(42 + i);
    EXPECT_EQ(RunAlone(r)->ids(), ReferenceLoop(r)) << kPrompts[i] << " seeded";
  }
  engine_->Shutdown(absl::Seconds(30));  // every OnStep has been delivered
  std::cout << "[draft model] greedy: drafted " << greedy_drafted << ", accepted "
            << greedy_accepted << "; seeded: drafted " << counter.drafted() - greedy_drafted
            << ", accepted " << counter.accepted() - greedy_accepted << "\n";
  // The same model's greedy guesses: most are right, on text without repeats, where
  // n-gram lookup finds little.
  EXPECT_GT(greedy_drafted, 100);
  EXPECT_GT(greedy_accepted, greedy_drafted * 3 / 4);
  // Sampling departs from the greedy draft: some drafts are rejected.
  EXPECT_LT(counter.accepted() - greedy_accepted, counter.drafted() - greedy_drafted);
}

// Drafting sequences batched with each other and with prompts being prefilled, with
// lengths that run into max_tokens mid-draft, and with the prefix cache: still the
// reference output; the draft KV of finished requests is freed for later ones.
TEST_F(EngineTest, DraftModelInABatchIsExact) {
  SpecCounter counter;
  EngineOptions options = SpecOptions(3);
  options.block_size_tokens = 8;
  Start(options, &counter, kernels::Precision::kExact, LoadModel(kernels::Precision::kFast));
  for (int round = 0; round < 2; ++round) {
    std::vector<GenerationRequest> requests;
    for (int i = 0; i < 8; ++i) {
      GenerationRequest r = Request(absl::StrCat("b", round, "-", i), kPrompts[i], 9 + 7 * i);
      if (i % 3 == 2) r.sampling = Seeded(100 + i);
      if (i == 5) r.disable_speculation = true;
      requests.push_back(std::move(r));
    }
    const std::vector<std::shared_ptr<RecordingSink>> sinks = RunTogether(requests);
    for (size_t i = 0; i < requests.size(); ++i) {
      EXPECT_EQ(sinks[i]->ids(), ReferenceLoop(requests[i]))
          << "round " << round << " request " << i;
    }
  }
  engine_->Shutdown(absl::Seconds(30));
  EXPECT_GT(counter.accepted(), 0);
}

TEST_F(EngineTest, DraftModelMustShareTheVocabularyAndSpeculate) {
  const char* dir = std::getenv("QUILL_SHARED_DIR");
  ModelOptions other;
  other.path = std::string(dir) + "/models/mini-random-bf16.gguf";  // Llama 2 vocab, 32,000
  other.precision = kernels::Precision::kExact;
  auto draft = Model::Load(other);
  ASSERT_TRUE(draft.ok()) << draft.status();
  auto engine = Engine::Create(LoadModel(), SpecOptions(4), nullptr, *std::move(draft));
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(engine.status().message().find("same vocabulary"), std::string::npos)
      << engine.status();

  auto no_spec = Engine::Create(LoadModel(), SpecOptions(0), nullptr, LoadModel());
  ASSERT_FALSE(no_spec.ok());
  EXPECT_EQ(no_spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(no_spec.status().message().find("spec_tokens"), std::string::npos) << no_spec.status();
}

TEST_F(EngineTest, LongPromptIsChunkedWhileOthersKeepDecoding) {
  EngineOptions options = DefaultOptions();
  options.prefill_chunk_tokens = 16;
  Start(options);

  std::string text;
  for (int i = 0; i < 8; ++i) absl::StrAppend(&text, kPrompts[i], " ");
  std::vector<TokenId> prompt = Encode(text + text + text + text + text + text);
  ASSERT_GE(prompt.size(), 200u);
  prompt.resize(200);
  GenerationRequest long_request;
  long_request.request_id = "long";
  long_request.prompt_ids = prompt;
  long_request.max_tokens = 20;
  long_request.sampling.temperature = 0.0f;
  long_request.ignore_eos = true;
  const std::vector<TokenId> long_solo = RunAlone(long_request)->ids();
  EXPECT_EQ(long_solo, ReferenceLoop(long_request));  // chunking does not change the result

  // A fresh engine whose every step is recorded.
  engine_->Shutdown(absl::Seconds(30));
  StepRecorder recorder;
  Start(options, &recorder);
  // Decoder 0 pins the engine in its prefill step while 1..3 queue up; decoder 3 pins it
  // in the next step while the long request arrives, so all four decode from then on.
  std::vector<std::shared_ptr<RecordingSink>> decoders;
  for (int i = 0; i < 4; ++i) {
    decoders.push_back(std::make_shared<RecordingSink>(/*gate_chunk=*/i == 0 || i == 3 ? 1 : 0));
    GenerationRequest r = Request(absl::StrCat("d", i), kPrompts[i], 40);
    r.ignore_eos = true;
    ASSERT_TRUE(engine_->Submit(r, decoders.back()).ok());
    if (i == 0) decoders[0]->WaitGated();
  }
  decoders[0]->Release();
  decoders[3]->WaitGated();
  auto long_sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine_->Submit(long_request, long_sink).ok());
  decoders[3]->Release();
  ASSERT_TRUE(long_sink->Wait());
  for (auto& d : decoders) ASSERT_TRUE(d->Wait());
  EXPECT_EQ(long_sink->ids(), long_solo);
  engine_->Shutdown(absl::Seconds(30));  // every OnStep has been delivered

  // Step 0 is decoder 0's prefill. From then on no step lacks decode tokens, and every
  // step that carries part of the long prompt carries all four decoders' tokens.
  const std::vector<StepRecorder::Step> steps = recorder.steps();
  ASSERT_GT(steps.size(), 15u);
  EXPECT_EQ(steps[0].decode_tokens, 0);
  EXPECT_EQ(steps[1].decode_tokens, 1);
  int long_chunks = 0;
  for (size_t i = 1; i < steps.size(); ++i) {
    EXPECT_GE(steps[i].decode_tokens, 1) << "step " << i;
    if (i >= 2 && steps[i].prefill_tokens > 0) {
      EXPECT_LE(steps[i].prefill_tokens, 16) << "step " << i;
      EXPECT_EQ(steps[i].decode_tokens, 4) << "step " << i;
      ++long_chunks;
    }
  }
  EXPECT_EQ(long_chunks, 13);  // 12 chunks of 16 and one of 8
}

TEST_F(EngineTest, CancelTwentyOfThirty) {
  Start();
  // Stream 0 pins the engine in its first step while the other 29 queue up; stream 29
  // pins it again in the step that admits them, so all 30 are running at the cancels.
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  for (int i = 0; i < 30; ++i) {
    sinks.push_back(std::make_shared<RecordingSink>(/*gate_chunk=*/i == 0 || i == 29 ? 1 : 0));
    GenerationRequest r = Request(absl::StrCat("c", i), kPrompts[i % 8], 100);
    r.ignore_eos = true;
    EXPECT_TRUE(engine_->Submit(r, sinks.back()).ok());  // no ASSERT: the gate must open
    if (i == 0) sinks[0]->WaitGated();
  }
  sinks[0]->Release();
  sinks[29]->WaitGated();
  for (int i = 0; i < 30; i += 3) {
    engine_->Cancel(absl::StrCat("c", i + 1));
    engine_->Cancel(absl::StrCat("c", i + 2));
  }
  EXPECT_GT(engine_->gauges().kv_blocks_used, 0);
  sinks[29]->Release();
  for (int i = 0; i < 30; ++i) {
    ASSERT_TRUE(sinks[i]->Wait());
    const FinishInfo info = sinks[i]->info();
    if (i % 3 == 0) {
      EXPECT_EQ(info.reason, FinishReason::kLength) << i;
      EXPECT_EQ(sinks[i]->ids().size(), 100u) << i;
    } else {
      EXPECT_EQ(info.reason, FinishReason::kCancelled) << i;
      EXPECT_EQ(info.status.code(), absl::StatusCode::kCancelled) << i;
      EXPECT_LT(sinks[i]->ids().size(), 10u) << i;
    }
    EXPECT_EQ(sinks[i]->finishes(), 1);
  }
  engine_->Shutdown(absl::Seconds(30));
  EXPECT_EQ(engine_->gauges().kv_blocks_used, 0);
  EXPECT_EQ(engine_->gauges().requests_running, 0);
}

TEST_F(EngineTest, StopStringSpanningTwoTokens) {
  Start();
  GenerationRequest r = Request("plain", "And the LORD said unto Moses,", 30);
  r.ignore_eos = true;
  const std::vector<TokenChunk> chunks = RunAlone(r)->chunks();
  std::string text;
  std::vector<size_t> token_start;  // where each token's text begins
  for (const TokenChunk& c : chunks) {
    token_start.push_back(text.size());
    text += c.text;
  }
  // A stop string that starts one byte into a token of at least 2 bytes and runs into
  // the next token.
  size_t start = std::string::npos;
  for (size_t k = 3; k + 1 < chunks.size(); ++k) {
    if (chunks[k].text.size() >= 2 && !chunks[k + 1].text.empty()) {
      start = token_start[k] + 1;
      break;
    }
  }
  ASSERT_NE(start, std::string::npos) << text;
  size_t k = 0;
  while (k + 1 < token_start.size() && token_start[k + 1] <= start) ++k;
  // The rest of token k plus up to two bytes of token k + 1.
  const size_t end = token_start[k + 1] + std::min<size_t>(2, chunks[k + 1].text.size());
  const std::string stop = text.substr(start, end - start);
  const size_t first = text.find(stop);
  ASSERT_LE(first, start);

  r.request_id = "stopped";
  r.stop = {"never appears 123", stop};
  auto sink = RunAlone(r);
  EXPECT_EQ(sink->text(), text.substr(0, first)) << "stop \"" << stop << "\"";
  EXPECT_EQ(sink->info().reason, FinishReason::kStop);
  EXPECT_TRUE(sink->info().status.ok());
}

// Whether `text` is a JSON object or the start of one, by nlohmann's parser: a text that
// some continuation makes valid fails only where the input ends (the error is at byte
// size + 1), an invalid one at a byte inside it.
bool IsJsonObjectOrItsStart(const std::string& text) {
  struct ErrorAt : nlohmann::json_sax<nlohmann::json> {
    size_t position = 0;
    bool null() override { return true; }
    bool boolean(bool) override { return true; }
    bool number_integer(number_integer_t) override { return true; }
    bool number_unsigned(number_unsigned_t) override { return true; }
    bool number_float(number_float_t, const string_t&) override { return true; }
    bool string(string_t&) override { return true; }
    bool binary(binary_t&) override { return true; }
    bool start_object(std::size_t) override { return true; }
    bool key(string_t&) override { return true; }
    bool end_object() override { return true; }
    bool start_array(std::size_t) override { return true; }
    bool end_array() override { return true; }
    bool parse_error(std::size_t at, const std::string&,
                     const nlohmann::detail::exception&) override {
      position = at;
      return false;
    }
  };
  const size_t first = text.find_first_not_of(" \t\n\r");
  if (first != std::string::npos && text[first] != '{') return false;
  ErrorAt handler;
  if (nlohmann::json::sax_parse(text, &handler)) return true;
  return handler.position == text.size() + 1;
}

// JSON mode: kjv-1m writes scripture, never JSON; the mask alone makes every answer a
// JSON object (ended by EOS) or, cut at max_tokens, the start of one. Greedy and seeded,
// and in a batch with other requests each answer is its answer alone.
TEST_F(EngineTest, JsonObjectModeAnswersWithAJsonObject) {
  // The checker itself, on texts whose status is known.
  EXPECT_TRUE(IsJsonObjectOrItsStart("{\"a\": \"xy"));
  EXPECT_TRUE(IsJsonObjectOrItsStart(" {\"a\": [1, tr"));
  EXPECT_FALSE(IsJsonObjectOrItsStart("{\"a\": x"));
  EXPECT_FALSE(IsJsonObjectOrItsStart("{}x"));
  EXPECT_FALSE(IsJsonObjectOrItsStart("[1"));

  Start();
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 8; ++i) {
    GenerationRequest r = Request(absl::StrCat("json", i), kPrompts[i], 200);
    if (i > 0) r.sampling = Seeded(40 + i);
    r.json_object = i % 4 != 3;  // two plain requests share the batch
    requests.push_back(std::move(r));
  }
  std::vector<std::vector<TokenId>> alone;
  int objects = 0;
  for (const GenerationRequest& r : requests) {
    auto sink = RunAlone(r);
    alone.push_back(sink->ids());
    if (!r.json_object) continue;
    const std::string text = sink->text();
    if (sink->info().reason == FinishReason::kEos) {
      ASSERT_TRUE(nlohmann::json::accept(text)) << r.request_id << ": " << text;
      EXPECT_TRUE(nlohmann::json::parse(text).is_object()) << text;
      ++objects;
    } else {
      EXPECT_EQ(sink->info().reason, FinishReason::kLength) << r.request_id;
      EXPECT_TRUE(IsJsonObjectOrItsStart(text)) << r.request_id << ": " << text;
    }
  }
  // Some answers close their object before 200 tokens (two of these six; the others write
  // scripture into a string).
  EXPECT_GE(objects, 2);
  const std::vector<std::shared_ptr<RecordingSink>> together = RunTogether(requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(together[i]->ids(), alone[i]) << requests[i].request_id;
  }

  GenerationRequest endless = requests[0];
  endless.ignore_eos = true;
  EXPECT_EQ(engine_->Submit(endless, std::make_shared<RecordingSink>()).code(),
            absl::StatusCode::kInvalidArgument);
}

// JSON mode after a thought (a reasoning model's chat): sampling is free until the close
// token, then the mask holds. kjv-1m has no thought tags, so its own tokens stand in: the
// close tag is a token its greedy answer writes at position k. Opened by the prompt, or
// opened by the answer's first token, the answer is the greedy one through k, then a JSON
// object (or its start); an open tag the model does not write leaves JSON mode as it was.
TEST_F(EngineTest, JsonObjectAfterAThought) {
  Start();
  GenerationRequest plain = Request("plain", kPrompts[1], 40);
  plain.ignore_eos = true;
  const std::vector<TokenId> greedy = RunAlone(plain)->ids();
  size_t k = 3;
  while (k < greedy.size() &&
         std::find(greedy.begin(), greedy.begin() + k, greedy[k]) != greedy.begin() + k) {
    ++k;
  }
  ASSERT_LT(k, 20u);
  plain.max_tokens = static_cast<int>(k) + 1;
  const std::string thought = RunAlone(plain)->text();
  for (const bool opened : {true, false}) {
    SCOPED_TRACE(opened ? "opened by the prompt" : "opened by the answer");
    GenerationRequest r = Request(opened ? "opened" : "may-think", kPrompts[1], 40);
    r.json_object = true;
    r.thought = ThoughtTokens{opened ? -1 : greedy[0], greedy[k], opened};
    const auto sink = RunAlone(r);
    const std::vector<TokenId> ids = sink->ids();
    ASSERT_GT(ids.size(), k + 1);
    EXPECT_EQ(std::vector<TokenId>(ids.begin(), ids.begin() + k + 1),
              std::vector<TokenId>(greedy.begin(), greedy.begin() + k + 1));
    EXPECT_EQ(sink->info().reasoning_tokens, static_cast<int>(k) + 1);
    const std::string text = sink->text();
    ASSERT_TRUE(absl::StartsWith(text, thought)) << text;
    EXPECT_TRUE(IsJsonObjectOrItsStart(text.substr(thought.size()))) << text;
  }
  GenerationRequest json = Request("json", kPrompts[1], 40);
  json.json_object = true;
  const std::vector<TokenId> json_ids = RunAlone(json)->ids();
  EXPECT_EQ(RunAlone(json)->info().reasoning_tokens, std::nullopt);
  json.thought = ThoughtTokens{/*open=*/0, greedy[k], false};  // <unk>
  const auto unopened = RunAlone(json);
  EXPECT_EQ(unopened->ids(), json_ids);
  EXPECT_EQ(unopened->info().reasoning_tokens, 0);
  json.thought->close = 1 << 30;
  EXPECT_EQ(engine_->Submit(json, std::make_shared<RecordingSink>()).code(),
            absl::StatusCode::kInvalidArgument);
}

// Without JSON mode the thought's tags change nothing but the count of its tokens: from
// the answer's opening tag (or its start, when the prompt opened the thought) to the first
// closing tag, tags included; all of them when it never closes; none without a thought.
TEST_F(EngineTest, ReasoningTokensCountTheThought) {
  Start();
  GenerationRequest plain = Request("plain", kPrompts[2], 24);
  plain.ignore_eos = true;
  const std::vector<TokenId> greedy = RunAlone(plain)->ids();
  ASSERT_EQ(greedy.size(), 24u);
  const auto first_at = [&](TokenId id) {
    return static_cast<int>(std::find(greedy.begin(), greedy.end(), id) - greedy.begin());
  };
  const TokenId close = greedy[9];
  const TokenId absent = 0;  // <unk>, which greedy kjv-1m never writes
  ASSERT_EQ(first_at(absent), 24);
  struct Case {
    const char* name;
    ThoughtTokens thought;
    int want;
  };
  const Case cases[] = {
      {"opened by the answer", {greedy[0], close, false}, first_at(close) + 1},
      {"opened by the prompt", {-1, close, true}, first_at(close) + 1},
      {"never closed", {-1, absent, true}, 24},
      {"never opened", {absent, close, false}, 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    GenerationRequest r = plain;
    r.request_id = c.name;
    r.thought = c.thought;
    const auto sink = RunAlone(r);
    EXPECT_EQ(sink->ids(), greedy);
    EXPECT_EQ(sink->info().completion_tokens, 24);
    EXPECT_EQ(sink->info().reasoning_tokens, c.want);
  }
}

// Structured output on kjv-1m, which writes scripture: the mask alone makes each finished
// answer an object with exactly the schema's properties, typed as it says.
TEST_F(EngineTest, JsonSchemaModeAnswersSatisfyTheSchema) {
  auto schema = JsonSchema::Compile(R"({
    "type": "object",
    "properties": {
      "book": {"enum": ["Genesis", "Exodus"]},
      "chapter": {"type": "integer"},
      "holy": {"type": "boolean"}
    },
    "required": ["book", "chapter", "holy"],
    "additionalProperties": false
  })");
  ASSERT_TRUE(schema.ok()) << schema.status();
  Start();
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 6; ++i) {
    GenerationRequest r = Request(absl::StrCat("schema", i), kPrompts[i], 200);
    if (i > 0) r.sampling = Seeded(70 + i);
    r.json_object = i != 2;  // a plain request shares the batch
    if (r.json_object) r.json_schema = *schema;
    requests.push_back(std::move(r));
  }
  std::vector<std::vector<TokenId>> alone;
  int finished = 0;
  for (const GenerationRequest& r : requests) {
    auto sink = RunAlone(r);
    alone.push_back(sink->ids());
    if (!r.json_object) continue;
    const std::string text = sink->text();
    // Every answer, cut by max_tokens or not, is what the schema's recognizer accepts.
    SchemaPrefix prefix(**schema);
    EXPECT_TRUE(prefix.Accept(text)) << r.request_id << ": " << text;
    if (sink->info().reason != FinishReason::kEos) continue;  // kjv-1m loves whitespace
    ++finished;
    const nlohmann::json value = nlohmann::json::parse(text, nullptr, false);
    ASSERT_TRUE(value.is_object()) << r.request_id << ": " << text;
    EXPECT_EQ(value.size(), 3u) << text;
    EXPECT_TRUE(value["book"] == "Genesis" || value["book"] == "Exodus") << text;
    EXPECT_TRUE(value["chapter"].is_number_integer()) << text;
    EXPECT_TRUE(value["holy"].is_boolean()) << text;
  }
  EXPECT_GE(finished, 1);
  const std::vector<std::shared_ptr<RecordingSink>> together = RunTogether(requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(together[i]->ids(), alone[i]) << requests[i].request_id;
  }
  GenerationRequest without_json_object = requests[0];
  without_json_object.json_object = false;
  EXPECT_EQ(engine_->Submit(without_json_object, std::make_shared<RecordingSink>()).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(EngineTest, StopTokenIdsAndMaxTokens) {
  Start();
  GenerationRequest r = Request("plain", "In the beginning", 20);
  r.ignore_eos = true;
  auto plain = RunAlone(r);
  const std::vector<TokenId> ids = plain->ids();
  ASSERT_EQ(ids.size(), 20u);
  EXPECT_EQ(plain->info().reason, FinishReason::kLength);
  EXPECT_EQ(plain->info().completion_tokens, 20);

  r.request_id = "stopped";
  r.stop_token_ids = {ids[5]};
  auto stopped = RunAlone(r);
  const size_t cut = std::find(ids.begin(), ids.end(), ids[5]) - ids.begin();
  EXPECT_EQ(stopped->ids(), std::vector<TokenId>(ids.begin(), ids.begin() + cut));
  EXPECT_EQ(stopped->info().reason, FinishReason::kStop);
  EXPECT_EQ(stopped->info().completion_tokens, static_cast<int>(cut));
}

// EOS handling (not emitted, not counted; ignore_eos) is tested on the scripted model in
// engine_fake_test.cc: kjv-1m does not produce EOS within its context on these prompts.

TEST_F(EngineTest, LogprobsMatchComputeLogprobsOnReferenceLogits) {
  Start();
  GenerationRequest r = Request("lp", "Blessed are the", 1);
  r.logprobs = 5;
  auto sink = RunAlone(r);
  const std::vector<TokenChunk> chunks = sink->chunks();
  ASSERT_EQ(chunks.size(), 1u);
  ASSERT_EQ(chunks[0].tokens.size(), 1u);
  const GeneratedToken& t = chunks[0].tokens[0];

  auto kv = KvCache::Create(reference_model_->MakeKvCacheOptions(int64_t{1} << 20, 16));
  ASSERT_TRUE(kv.ok());
  ASSERT_TRUE((*kv)->Reserve(1, r.prompt_ids.size()).ok());
  std::vector<float> logits(vocab_);
  BatchEntry entry{1, r.prompt_ids, 0, true};
  ASSERT_TRUE(reference_model_->Forward({&entry, 1}, **kv, logits.data()).ok());
  std::vector<TokenLogprob> top;
  const float expected = ComputeLogprobs(logits, t.id, 5, &top);
  EXPECT_EQ(t.logprob, expected);
  ASSERT_EQ(t.top_logprobs.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(t.top_logprobs[i].id, top[i].id);
    EXPECT_EQ(t.top_logprobs[i].logprob, top[i].logprob);
  }
  EXPECT_EQ(t.top_logprobs[0].id, t.id);  // greedy picks the most likely
}

TEST_F(EngineTest, QueueFullWithATinyKvBudget) {
  EngineOptions options = DefaultOptions();
  auto probe = KvCache::Create(reference_model_->MakeKvCacheOptions(int64_t{1} << 20, 16));
  ASSERT_TRUE(probe.ok());
  const int64_t block_bytes = (*probe)->block_bytes();
  options.kv_cache_bytes = block_bytes * 8;  // 128 tokens: one request at a time
  options.max_queue = 2;
  Start(options);
  EXPECT_EQ(engine_->gauges().kv_blocks_total, 8);
  auto running = std::make_shared<RecordingSink>(/*gate_chunk=*/1);
  GenerationRequest r = Request("run", "In the beginning", 100);
  r.ignore_eos = true;
  ASSERT_TRUE(engine_->Submit(r, running).ok());
  running->WaitGated();
  std::vector<std::shared_ptr<RecordingSink>> queued;
  for (int i = 0; i < 2; ++i) {
    queued.push_back(std::make_shared<RecordingSink>());
    r.request_id = absl::StrCat("q", i);
    ASSERT_TRUE(engine_->Submit(r, queued.back()).ok());
  }
  auto refused = std::make_shared<RecordingSink>();
  r.request_id = "refused";
  const absl::Status status = engine_->Submit(r, refused);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  r.request_id = "q0";
  EXPECT_EQ(engine_->Submit(r, refused).code(), absl::StatusCode::kAlreadyExists);
  running->Release();
  ASSERT_TRUE(running->Wait());
  for (auto& q : queued) {
    ASSERT_TRUE(q->Wait());
    EXPECT_EQ(q->ids(), running->ids());
  }
  EXPECT_TRUE(refused->chunks().empty());
  EXPECT_EQ(refused->finishes(), 0);
}

TEST_F(EngineTest, DeadlineAndShutdown) {
  Start();
  GenerationRequest r = Request("late", "In the beginning", 10);
  r.deadline = absl::Now() - absl::Seconds(1);
  // A deadline already passed is refused at submit; the sink never hears of it.
  auto late = std::make_shared<RecordingSink>();
  EXPECT_EQ(engine_->Submit(r, late).code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_FALSE(late->called());

  // Drain: the running requests complete.
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  for (int i = 0; i < 3; ++i) {
    sinks.push_back(std::make_shared<RecordingSink>());
    GenerationRequest d = Request(absl::StrCat("d", i), kPrompts[i], 30);
    d.ignore_eos = true;
    ASSERT_TRUE(engine_->Submit(d, sinks.back()).ok());
  }
  engine_->Shutdown(absl::Seconds(60));
  for (auto& s : sinks) {
    ASSERT_TRUE(s->Wait());
    EXPECT_EQ(s->info().reason, FinishReason::kLength);
    EXPECT_EQ(s->ids().size(), 30u);
  }
  r.request_id = "after";
  r.deadline = absl::InfiniteFuture();
  EXPECT_EQ(engine_->Submit(r, std::make_shared<RecordingSink>()).code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(EngineTest, ZeroDrainEndsRunningRequestsWithShutdown) {
  Start();
  auto running = std::make_shared<RecordingSink>(/*gate_chunk=*/1);
  GenerationRequest r = Request("run", "In the beginning", 50);
  r.ignore_eos = true;
  ASSERT_TRUE(engine_->Submit(r, running).ok());
  running->WaitGated();
  std::thread closer([this] { engine_->Shutdown(absl::ZeroDuration()); });
  while (engine_->Submit(Request("probe", "x", 1), std::make_shared<RecordingSink>()).code() !=
         absl::StatusCode::kUnavailable) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  running->Release();
  closer.join();
  ASSERT_TRUE(running->Wait());
  EXPECT_EQ(running->info().reason, FinishReason::kShutdown);
  EXPECT_EQ(running->info().status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(running->ids().size(), 1u);
}

TEST_F(EngineTest, SinkReturningFalseStopsTheRequest) {
  Start();
  auto sink = std::make_shared<RecordingSink>(/*gate_chunk=*/0, /*accept_chunks=*/2);
  GenerationRequest r = Request("gone", "In the beginning", 50);
  r.ignore_eos = true;
  ASSERT_TRUE(engine_->Submit(r, sink).ok());
  ASSERT_TRUE(sink->Wait());
  EXPECT_EQ(sink->chunks().size(), 2u);
  EXPECT_EQ(sink->info().reason, FinishReason::kCancelled);
}

// The process's allocation count at every chunk that any of its sinks receives (on the
// engine thread, into fixed arrays), and the heap blocks each chunk itself owns: its token
// vector, its text if longer than the string's in-place capacity, and each token's
// top-logprob vector. The log closes at the first finish: ending a request frees and
// caches its KV blocks, a per-request cost, not a per-token one.
class AllocationLog {
 public:
  static constexpr int kMaxChunks = 2048;

  // `sink` numbers the request (0, 1, ...) whose chunk this is.
  void OnChunk(int sink, const TokenChunk& chunk) {
    if (closed_ || chunks_ == kMaxChunks) return;
    allocations_at_[chunks_] = quill::testing::HeapAllocations();
    if (sink >= static_cast<int>(chunks_of_.size())) chunks_of_.resize(sink + 1, 0);
    ++chunks_of_[sink];
    int blocks = chunk.tokens.empty() ? 0 : 1;
    if (chunk.text.capacity() > std::string().capacity()) ++blocks;
    for (const GeneratedToken& t : chunk.tokens) blocks += t.top_logprobs.empty() ? 0 : 1;
    chunk_blocks_[chunks_++] = blocks;
  }
  void Close() { closed_ = true; }
  // After OnChunk: the first chunk by which each of `requests` requests has had `warm` chunks
  // of its own and the log `from` in all, or -1 before that. A request admitted late (the
  // step planner's budgets follow measured step times, so admission order depends on the
  // machine's load) sizes its buffers in its first chunks, wherever they fall in the log.
  int SteadyFrom(int requests, int warm, int from) {
    if (steady_from_ < 0 && chunks_ > from && static_cast<int>(chunks_of_.size()) == requests &&
        *std::min_element(chunks_of_.begin(), chunks_of_.end()) >= warm) {
      steady_from_ = chunks_ - 1;
    }
    return steady_from_;
  }

  // Read once every request has finished.
  int chunks() const { return chunks_; }
  // Heap allocations from chunk `from` to the last, and the blocks those chunks owned.
  int64_t AllocationsAfter(int from) const {
    return allocations_at_[chunks_ - 1] - allocations_at_[from];
  }
  int64_t ChunkBlocksAfter(int from) const {
    int64_t blocks = 0;
    for (int i = from + 1; i < chunks_; ++i) blocks += chunk_blocks_[i];
    return blocks;
  }

 private:
  int64_t allocations_at_[kMaxChunks] = {};
  int chunk_blocks_[kMaxChunks] = {};
  int chunks_ = 0;
  bool closed_ = false;
  std::vector<int> chunks_of_;  // per request (not per token: fixed before the log opens)
  int steady_from_ = -1;
};

class AllocationLoggingSink final : public TokenSink {
 public:
  AllocationLoggingSink(AllocationLog* log, int index, int requests, int warm, int from)
      : log_(log), index_(index), requests_(requests), warm_(warm), from_(from) {}
  bool OnChunk(TokenChunk chunk) override {
    log_->OnChunk(index_, chunk);
    log_->SteadyFrom(requests_, warm_, from_);
    return true;
  }
  void OnFinish(const FinishInfo& info) override {
    log_->Close();
    reason_ = info.reason;
    done_.Notify();
  }
  bool Wait() { return done_.WaitForNotificationWithTimeout(absl::Seconds(120)); }
  FinishReason reason() const { return reason_; }  // after Wait()

 private:
  AllocationLog* const log_;
  const int index_, requests_, warm_, from_;
  FinishReason reason_ = FinishReason::kCancelled;
  absl::Notification done_;
};

// Once requests decode, a step (planning, the forward pass, sampling, stop-string matching,
// detokenizing, speculative drafting and verification) allocates nothing but the chunks it
// hands to the sinks: "nothing allocates per token on the hot path" for the engine loop, as
// ForwardAllocatesNothing and SampleDoesNotAllocate prove it for the model and the sampler.
// Counted from chunk kFrom on, and not before every request has had kWarm chunks of its
// own: the first steps size the buffers.
class EngineAllocationTest : public EngineTest {
 protected:
  static constexpr int kFrom = 24;
  static constexpr int kWarm = 8;

  // Runs the requests together (each finishing at max_tokens) and checks the log.
  void ExpectOnlyChunkAllocations(std::vector<GenerationRequest> requests) {
    auto log = std::make_unique<AllocationLog>();
    std::vector<std::shared_ptr<AllocationLoggingSink>> sinks;
    const int n = static_cast<int>(requests.size());
    for (GenerationRequest& r : requests) {
      r.ignore_eos = true;
      sinks.push_back(std::make_shared<AllocationLoggingSink>(
          log.get(), static_cast<int>(sinks.size()), n, kWarm, kFrom));
      ASSERT_TRUE(engine_->Submit(std::move(r), sinks.back()).ok());
    }
    for (auto& sink : sinks) {
      ASSERT_TRUE(sink->Wait());
      ASSERT_EQ(sink->reason(), FinishReason::kLength);
    }
    const int from = log->SteadyFrom(n, kWarm, kFrom);
    ASSERT_GE(from, kFrom);
    ASSERT_GT(log->chunks(), from + 30);
    EXPECT_EQ(log->AllocationsAfter(from), log->ChunkBlocksAfter(from))
        << "over " << log->chunks() - from - 1 << " chunks";
  }

  static EngineOptions Options() {
    EngineOptions options = DefaultOptions();
    options.spec_tokens = 4;
    options.itl_target = absl::Milliseconds(100);
    return options;
  }
};

TEST_F(EngineAllocationTest, SampledWithStopStrings) {
  Start(Options());
  GenerationRequest r = Request("sampled", kPrompts[0], 200);
  r.sampling = Seeded(7);
  r.stop = {"zzq", "\n\n\n"};
  r.disable_speculation = true;
  ExpectOnlyChunkAllocations({r});
}

TEST_F(EngineAllocationTest, GreedyWithDraftsAndLogprobs) {
  Start(Options());
  GenerationRequest r = Request("drafted", kPrompts[1], 200);
  r.logprobs = 2;
  ExpectOnlyChunkAllocations({r});
}

// Eight requests decoding in one batch, some drafting, with prompts prefilled beside them.
TEST_F(EngineAllocationTest, ABatchOfEight) {
  Start(Options());
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 8; ++i) {
    GenerationRequest r = Request(absl::StrCat("b", i), kPrompts[i], 100 + 10 * i);
    if (i % 2 == 1) r.sampling = Seeded(100 + i);
    if (i % 3 == 0) r.logprobs = 1;
    requests.push_back(std::move(r));
  }
  ExpectOnlyChunkAllocations(std::move(requests));
}

}  // namespace
}  // namespace quill::engine

namespace quill::engine {
namespace {

// Everything a request returned: ids, and the bits of its logprobs.
struct Output {
  std::vector<TokenId> ids;
  std::vector<float> logprobs;
  std::vector<TokenId> top_ids;
  std::vector<float> top_logprobs;
  bool operator==(const Output& o) const {
    return ids == o.ids && logprobs == o.logprobs && top_ids == o.top_ids &&
           top_logprobs == o.top_logprobs;
  }
};

Output OutputOf(RecordingSink& sink) {
  Output out;
  for (const TokenChunk& c : sink.chunks()) {
    for (const GeneratedToken& t : c.tokens) {
      out.ids.push_back(t.id);
      out.logprobs.push_back(t.logprob);
      for (const TokenLogprob& top : t.top_logprobs) {
        out.top_ids.push_back(top.id);
        out.top_logprobs.push_back(top.logprob);
      }
    }
  }
  return out;
}

// Prompts sharing a ~100-token prefix (several full KV blocks), with different tails.
class PrefixCacheEngineTest : public EngineTest {
 protected:
  static constexpr int kPrefixTokens = 100;
  static constexpr int kBlock = 16;

  std::vector<GenerationRequest> SharedPrefixRequests() {
    std::string text;
    for (int i = 0; i < 8; ++i) absl::StrAppend(&text, kPrompts[i], " ");
    std::vector<TokenId> prefix = Encode(text + text + text);
    EXPECT_GE(prefix.size(), static_cast<size_t>(kPrefixTokens));
    prefix.resize(kPrefixTokens);
    std::vector<GenerationRequest> requests;
    for (int i = 0; i < 6; ++i) {
      GenerationRequest r = Request(absl::StrCat("p", i), kPrompts[i], 24);
      // The tail without its BOS, after the shared prefix.
      r.prompt_ids.erase(r.prompt_ids.begin());
      r.prompt_ids.insert(r.prompt_ids.begin(), prefix.begin(), prefix.end());
      r.ignore_eos = true;
      r.logprobs = 3;
      if (i % 2 == 1) r.sampling = Seeded(500 + i);
      requests.push_back(std::move(r));
    }
    return requests;
  }

  // What a request can reuse once `cached` is in the cache: whole blocks of the common
  // prefix, leaving at least its last prompt token to compute.
  static int ExpectedCachedTokens(const std::vector<TokenId>& prompt,
                                  const std::vector<TokenId>& cached) {
    size_t common = 0;
    while (common < prompt.size() && common < cached.size() && prompt[common] == cached[common]) {
      ++common;
    }
    common = std::min(common, prompt.size() - 1);
    return static_cast<int>(common / kBlock * kBlock);
  }

  static EngineOptions Options(bool prefix_cache) {
    EngineOptions options = DefaultOptions();
    options.prefix_cache = prefix_cache;
    options.block_size_tokens = kBlock;
    options.prefill_chunk_tokens = 32;  // chunk boundaries differ from the cached prefix's
    return options;
  }
};

TEST_F(PrefixCacheEngineTest, ExactHitIsBitIdenticalAloneAndAmongOthers) {
  const std::vector<GenerationRequest> requests = SharedPrefixRequests();
  Start(Options(/*prefix_cache=*/false));
  std::vector<Output> solo;
  for (const GenerationRequest& r : requests) {
    auto sink = RunAlone(r);
    solo.push_back(OutputOf(*sink));
    EXPECT_EQ(sink->info().cached_prompt_tokens, 0);
    ASSERT_EQ(solo.back().ids.size(), 24u);
  }
  EXPECT_EQ(engine_->gauges().kv_blocks_cached, 0);
  EXPECT_EQ(solo[0].ids, ReferenceLoop(requests[0]));
  engine_->Shutdown(absl::Seconds(30));

  Start(Options(/*prefix_cache=*/true));
  // A cold cache, then a hit on the shared prefix, alone.
  auto first = RunAlone(requests[0]);
  EXPECT_EQ(first->info().cached_prompt_tokens, 0);
  EXPECT_TRUE(OutputOf(*first) == solo[0]);
  EXPECT_GT(engine_->gauges().kv_blocks_cached, 0);
  auto second = RunAlone(requests[1]);
  const int expected1 = ExpectedCachedTokens(requests[1].prompt_ids, requests[0].prompt_ids);
  EXPECT_GE(expected1, 96);
  EXPECT_EQ(second->info().cached_prompt_tokens, expected1);
  EXPECT_TRUE(OutputOf(*second) == solo[1]) << "alone, with a hit";

  // All at once: the repeated request 0 hits its whole prompt but the last token, the
  // others the shared prefix, while they batch with each other.
  const std::vector<std::shared_ptr<RecordingSink>> sinks = RunTogether(requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_TRUE(OutputOf(*sinks[i]) == solo[i]) << "request " << i << " among others";
    EXPECT_GE(sinks[i]->info().cached_prompt_tokens, 96) << "request " << i;
  }
  EXPECT_EQ(sinks[0]->info().cached_prompt_tokens,
            ExpectedCachedTokens(requests[0].prompt_ids, requests[0].prompt_ids));
  // Its own generated tokens were cached too: asking again with the output appended
  // reuses prompt and output.
  GenerationRequest follow_up = requests[0];
  follow_up.request_id = "follow-up";
  follow_up.prompt_ids.insert(follow_up.prompt_ids.end(), solo[0].ids.begin(), solo[0].ids.end());
  follow_up.max_tokens = 8;
  auto follow = RunAlone(follow_up);
  EXPECT_EQ(follow->info().cached_prompt_tokens,
            static_cast<int>((follow_up.prompt_ids.size() - 1) / kBlock * kBlock));
  EXPECT_EQ(follow->ids(), ReferenceLoop(follow_up));
}

// Requests that arrive together with a common prompt prefix (a shared system prompt, or
// the n choices of one prompt) prefill it once: the first writes each block, the others
// wait for it and take it from the cache, so each reuses all it shares with any request
// ahead of it; and their tokens are still the reference's.
TEST_F(PrefixCacheEngineTest, RequestsArrivingTogetherPrefillTheSharedPrefixOnce) {
  std::vector<GenerationRequest> requests = SharedPrefixRequests();
  for (uint64_t seed : {7, 8}) {  // two more choices of request 1's prompt
    GenerationRequest choice = requests[1];
    choice.request_id = absl::StrCat(choice.request_id, "-", seed);
    choice.sampling = Seeded(seed);
    requests.push_back(std::move(choice));
  }
  StepRecorder recorder;
  Start(Options(/*prefix_cache=*/true), &recorder);
  // The engine thread waits in the sink of a request's first token while all of them are
  // submitted: they are all waiting at the next step, and could all be admitted in it.
  auto gate = std::make_shared<RecordingSink>(/*gate_chunk=*/1);
  ASSERT_TRUE(engine_->Submit(Request("gate", "Amen", 2), gate).ok());
  gate->WaitGated();
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  for (const GenerationRequest& r : requests) {
    sinks.push_back(std::make_shared<RecordingSink>());
    EXPECT_TRUE(engine_->Submit(r, sinks.back()).ok());  // no ASSERT: the gate must open
  }
  gate->Release();
  for (const auto& sink : sinks) ASSERT_TRUE(sink->Wait());
  EXPECT_EQ(sinks[0]->info().cached_prompt_tokens, 0);
  for (size_t i = 1; i < requests.size(); ++i) {
    int shared = 0;
    for (size_t j = 0; j < i; ++j) {
      shared =
          std::max(shared, ExpectedCachedTokens(requests[i].prompt_ids, requests[j].prompt_ids));
    }
    EXPECT_GE(shared, 96);
    EXPECT_EQ(sinks[i]->info().cached_prompt_tokens, shared) << "request " << i;
  }
  // Every request but the first waited (and was counted once) before it was admitted.
  engine_->Shutdown(absl::Seconds(30));  // every OnStep has been delivered
  int waited = 0;
  for (const StepRecorder::Step& step : recorder.steps()) waited += step.prefix_waited_requests;
  EXPECT_EQ(waited, static_cast<int>(requests.size()) - 1);
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(sinks[i]->ids(), ReferenceLoop(requests[i])) << "request " << i;
  }
}

// Prompt logprobs: row j scores prompt token j + 1, which is what the first token of a
// request whose prompt ends at j sees. In exact mode the two agree bit for bit, whatever
// the chunking (prefill chunks of 32, at most 64 logit rows a step), the batch, or a
// warm prefix cache (which such a request must not use).
TEST_F(PrefixCacheEngineTest, PromptLogprobsAreEachPrefixsFirstTokenLogprobs) {
  std::vector<GenerationRequest> requests = SharedPrefixRequests();
  Start(Options(/*prefix_cache=*/true));
  const Output plain = OutputOf(*RunAlone(requests[0]));  // also warms the cache
  GenerationRequest r = requests[0];
  r.request_id = "prompt-logprobs";
  r.prompt_logprobs = true;
  auto sink = RunAlone(r);
  EXPECT_EQ(sink->info().cached_prompt_tokens, 0);
  EXPECT_TRUE(OutputOf(*sink) == plain) << "prompt logprobs change no output";
  const std::vector<TokenChunk> chunks = sink->chunks();
  ASSERT_FALSE(chunks.empty());
  const std::vector<GeneratedToken> scored = chunks[0].prompt_logprobs;
  const int prompt = static_cast<int>(r.prompt_ids.size());
  ASSERT_EQ(static_cast<int>(scored.size()), prompt - 1);
  for (size_t i = 1; i < chunks.size(); ++i) EXPECT_TRUE(chunks[i].prompt_logprobs.empty());

  for (int j = 0; j + 1 < prompt; j += (j + 1 < prompt - 8 ? 9 : 1)) {
    const GeneratedToken& t = scored[j];
    ASSERT_EQ(t.id, r.prompt_ids[j + 1]) << j;
    GenerationRequest prefix = Request(absl::StrCat("prefix-", j), "", 1);
    prefix.prompt_ids.assign(r.prompt_ids.begin(), r.prompt_ids.begin() + j + 1);
    prefix.logprobs = r.logprobs;
    const std::vector<TokenChunk> first = RunAlone(prefix)->chunks();
    ASSERT_EQ(first.size(), 1u) << j;
    const GeneratedToken& want = first[0].tokens[0];
    ASSERT_EQ(t.top_logprobs.size(), want.top_logprobs.size()) << j;
    for (size_t k = 0; k < want.top_logprobs.size(); ++k) {
      EXPECT_EQ(t.top_logprobs[k].id, want.top_logprobs[k].id) << j;
      EXPECT_EQ(t.top_logprobs[k].logprob, want.top_logprobs[k].logprob) << j;
      if (want.top_logprobs[k].id == t.id) {
        EXPECT_EQ(t.logprob, want.top_logprobs[k].logprob) << j;
      }
    }
    EXPECT_LE(t.logprob, want.top_logprobs[0].logprob) << j;
  }

  // Among the other prompts (prefilling and decoding beside it): the same values.
  requests[0] = r;
  requests[0].request_id = "prompt-logprobs-batched";
  const std::vector<std::shared_ptr<RecordingSink>> sinks = RunTogether(requests);
  const std::vector<TokenChunk> batched = sinks[0]->chunks();
  ASSERT_FALSE(batched.empty());
  ASSERT_EQ(batched[0].prompt_logprobs.size(), scored.size());
  for (size_t j = 0; j < scored.size(); ++j) {
    EXPECT_EQ(batched[0].prompt_logprobs[j].logprob, scored[j].logprob) << j;
    ASSERT_EQ(batched[0].prompt_logprobs[j].top_logprobs.size(), scored[j].top_logprobs.size());
    for (size_t k = 0; k < scored[j].top_logprobs.size(); ++k) {
      EXPECT_EQ(batched[0].prompt_logprobs[j].top_logprobs[k].logprob,
                scored[j].top_logprobs[k].logprob);
    }
  }
  EXPECT_TRUE(OutputOf(*sinks[0]) == plain);
}

TEST_F(PrefixCacheEngineTest, FastModeHitGivesTheSameGreedyTokens) {
  std::vector<GenerationRequest> requests = SharedPrefixRequests();
  for (GenerationRequest& r : requests) {
    r.sampling = SamplingParams();
    r.sampling.temperature = 0.0f;
    r.logprobs = 0;
  }
  Start(Options(/*prefix_cache=*/false), nullptr, kernels::Precision::kFast);
  std::vector<std::vector<TokenId>> solo;
  for (const GenerationRequest& r : requests) solo.push_back(RunAlone(r)->ids());
  engine_->Shutdown(absl::Seconds(30));

  Start(Options(/*prefix_cache=*/true), nullptr, kernels::Precision::kFast);
  for (size_t i = 0; i < requests.size(); ++i) {
    auto sink = RunAlone(requests[i]);
    if (i > 0) {
      EXPECT_GE(sink->info().cached_prompt_tokens, 96);
    }
    EXPECT_EQ(sink->ids(), solo[i]) << "request " << i;
  }
}

TEST_F(PrefixCacheEngineTest, CachedBlocksAreEvictedWhenThePoolNeedsThem) {
  // A pool of 24 blocks; each request holds 9 (about 124 prompt + 24 output tokens), so
  // the cache of finished requests must give way to new ones.
  const KvCacheOptions shape = reference_model_->MakeKvCacheOptions(int64_t{8} << 20, kBlock);
  const int64_t block_bytes = int64_t{2} * shape.num_layers * shape.num_kv_heads * shape.head_dim *
                              static_cast<int64_t>(sizeof(float)) * kBlock;
  EngineOptions options = Options(/*prefix_cache=*/true);
  options.kv_cache_bytes = 24 * block_bytes;
  Start(options);
  ASSERT_EQ(engine_->gauges().kv_blocks_total, 24);
  const std::vector<GenerationRequest> requests = SharedPrefixRequests();
  std::vector<Output> first_round;
  for (int round = 0; round < 2; ++round) {
    for (size_t i = 0; i < requests.size(); ++i) {
      // An unrelated prompt (the request's reversed) pushes other blocks into the cache.
      GenerationRequest other = requests[i];
      other.request_id = absl::StrCat("other-", i, "-", round);
      std::reverse(other.prompt_ids.begin() + 1, other.prompt_ids.end());
      EXPECT_EQ(RunAlone(other)->finishes(), 1);
      auto sink = RunAlone(requests[i]);
      EXPECT_EQ(sink->finishes(), 1);
      if (round == 0) {
        first_round.push_back(OutputOf(*sink));
      } else {
        EXPECT_TRUE(OutputOf(*sink) == first_round[i]) << "request " << i;
      }
      EXPECT_LE(engine_->gauges().kv_blocks_cached, 24);
    }
  }
}

}  // namespace
}  // namespace quill::engine
