// Batching invariance: a sequence's logits must not depend on what else is in the batch
// or on how its prompt is chunked. Exact mode: bit-for-bit. Fast mode: same greedy tokens,
// logits close.

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/kv_cache/kv_cache.h"
#include "engine/model/model.h"
#include "gtest/gtest.h"

namespace quill::engine {
namespace {

using kernels::Precision;

constexpr int kPromptLengths[] = {3, 60, 7, 12, 45, 20, 37, 28};  // deliberately unsorted

// Prompt length of sequence i: the list above, then a spread of 2..61 for larger batches.
int PromptLength(int i) { return i < 8 ? kPromptLengths[i] : 2 + (i * 37) % 60; }

std::string ModelPath(const std::string& name) {
  const char* dir = std::getenv("QUILL_SHARED_DIR");
  return dir == nullptr ? "" : std::string(dir) + "/models/" + name;
}

// logits[seq][step]: step 0 is the prefill's last position, then one per decode step.
struct RunResult {
  std::vector<std::vector<std::vector<float>>> logits;
  std::vector<std::vector<TokenId>> tokens;  // the decode inputs actually fed
};

TokenId Argmax(const std::vector<float>& x) {
  return static_cast<TokenId>(std::max_element(x.begin(), x.end()) - x.begin());
}

// ../shared/golden's greedy rule: a step's argmax is decided when its top-1/top-2 logit
// margin is at least 0.02 x the standard deviation of the step's logits. Below that, a
// random-weight model's choice is a near tie that any change of rounding may flip.
bool ArgmaxIsDecided(const std::vector<float>& x) {
  double sum = 0, sum_sq = 0;
  float top1 = -INFINITY, top2 = -INFINITY;
  for (float v : x) {
    sum += v;
    sum_sq += double{v} * v;
    if (v > top1) {
      top2 = top1;
      top1 = v;
    } else if (v > top2) {
      top2 = v;
    }
  }
  const double mean = sum / x.size();
  const double stddev = std::sqrt(std::max(0.0, sum_sq / x.size() - mean * mean));
  return double{top1} - top2 >= 0.02 * stddev;
}

// The harness; TEST_F uses it as is, TEST_P (FamilyInvarianceTest) with a model file.
class BatchInvarianceTest : public ::testing::TestWithParam<const char*> {
 protected:
  void Load(const std::string& name, Precision precision, int num_seqs = 8) {
    num_seqs_ = num_seqs;
    path_ = ModelPath(name);
    if (path_.empty() || !std::ifstream(path_).good()) {
      GTEST_SKIP() << "shared assets not found at '" << path_ << "'";
    }
    ModelOptions options;
    options.path = path_;
    options.precision = precision;
    options.max_batch_tokens = num_seqs <= 8 ? 256 : 64 * num_seqs;  // whole prefill in one step
    auto m = Model::Load(options);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m);
    vocab_ = model_->config().vocab_size;
    std::mt19937 rng(7);
    std::uniform_int_distribution<TokenId> dist(3, static_cast<TokenId>(vocab_ - 1));
    prompts_.clear();
    for (int i = 0; i < num_seqs; ++i) {
      std::vector<TokenId> p(PromptLength(i));
      for (TokenId& t : p) t = dist(rng);
      p[0] = model_->tokenizer().bos_id() >= 0 ? model_->tokenizer().bos_id() : p[0];
      prompts_.push_back(p);
    }
  }

  std::unique_ptr<KvCache> NewCache() {
    KvCacheOptions options = model_->MakeKvCacheOptions(0, 16);
    if (kv_element_.has_value()) options.element = *kv_element_;
    options.budget_bytes = options.BudgetForTokens(int64_t{128} * num_seqs_);
    auto cache = KvCache::Create(options);
    EXPECT_TRUE(cache.ok()) << cache.status();
    return std::move(*cache);
  }

  // Decode input of `seq` at `step`: forced if given, else greedy from its own logits.
  TokenId NextToken(RunResult& r, int seq, int step, const RunResult* forced) {
    TokenId t = forced != nullptr ? forced->tokens[seq][step] : Argmax(r.logits[seq].back());
    r.tokens[seq].push_back(t);
    return t;
  }

  // All sequences in one Forward() for the prefill, then all decode together.
  RunResult RunTogether(int steps, const RunResult* forced) {
    RunResult r;
    r.logits.assign(num_seqs_, {});
    r.tokens.assign(num_seqs_, {});
    auto cache = NewCache();
    std::vector<BatchEntry> batch;
    for (int s = 0; s < num_seqs_; ++s) {
      EXPECT_TRUE(cache->Reserve(s + 10, prompts_[s].size() + steps).ok());
      batch.push_back({s + 10, prompts_[s], 0, true});
    }
    std::vector<float> out(vocab_ * num_seqs_);
    std::vector<std::vector<TokenId>> fed(num_seqs_);
    for (int step = 0; step <= steps; ++step) {
      if (step > 0) {
        for (int s = 0; s < num_seqs_; ++s) {
          fed[s].push_back(NextToken(r, s, step - 1, forced));
          batch[s] = {s + 10, absl::MakeConstSpan(&fed[s].back(), 1),
                      static_cast<int32_t>(prompts_[s].size() + step - 1), true};
        }
      }
      absl::Status st = model_->Forward(batch, *cache, out.data());
      EXPECT_TRUE(st.ok()) << st;
      for (int s = 0; s < num_seqs_; ++s) {
        r.logits[s].emplace_back(out.begin() + s * vocab_, out.begin() + (s + 1) * vocab_);
      }
    }
    return r;
  }

  // Each sequence alone; its prompt in chunks of `chunk` tokens (0 = whole).
  RunResult RunAlone(int steps, int chunk, const RunResult* forced) {
    RunResult r;
    r.logits.assign(num_seqs_, {});
    r.tokens.assign(num_seqs_, {});
    std::vector<float> out(vocab_);
    for (int s = 0; s < num_seqs_; ++s) {
      auto cache = NewCache();
      const KvCache::SeqId id = 1000 + s;
      EXPECT_TRUE(cache->Reserve(id, prompts_[s].size() + steps).ok());
      const size_t n = prompts_[s].size();
      const size_t c = chunk > 0 ? chunk : n;
      for (size_t b = 0; b < n; b += c) {
        const size_t len = std::min(c, n - b);
        BatchEntry e{id, absl::MakeConstSpan(prompts_[s].data() + b, len), static_cast<int32_t>(b),
                     b + len == n};
        absl::Status st = model_->Forward({&e, 1}, *cache, out.data());
        EXPECT_TRUE(st.ok()) << st;
      }
      r.logits[s].push_back(out);
      std::vector<TokenId> fed;
      fed.reserve(steps);
      for (int step = 1; step <= steps; ++step) {
        fed.push_back(NextToken(r, s, step - 1, forced));
        BatchEntry e{id, absl::MakeConstSpan(&fed.back(), 1),
                     static_cast<int32_t>(n + step - 1), true};
        absl::Status st = model_->Forward({&e, 1}, *cache, out.data());
        EXPECT_TRUE(st.ok()) << st;
        r.logits[s].push_back(out);
      }
    }
    return r;
  }

  // Continuous batching: every step carries the next `chunk` prompt tokens of each
  // sequence still prefilling and one token of each sequence already decoding, so a
  // sequence's chunks share steps with other sequences' chunks and decodes.
  RunResult RunStaggered(int steps, int chunk, const RunResult* forced) {
    RunResult r;
    r.logits.assign(num_seqs_, {});
    r.tokens.assign(num_seqs_, {});
    auto cache = NewCache();
    std::vector<size_t> done(num_seqs_, 0);  // prompt tokens processed
    std::vector<std::vector<TokenId>> fed(num_seqs_);
    for (int s = 0; s < num_seqs_; ++s) {
      fed[s].reserve(steps);
      EXPECT_TRUE(cache->Reserve(s + 50, prompts_[s].size() + steps).ok());
    }
    std::vector<float> out(vocab_ * num_seqs_);
    for (int step_index = 0;; ++step_index) {
      std::vector<BatchEntry> batch;
      std::vector<int> who;
      for (int s = 0; s < num_seqs_; ++s) {
        const size_t n = prompts_[s].size();
        if (done[s] < n) {
          if (step_index < s) continue;  // sequence s starts s steps late
          const size_t len = std::min<size_t>(chunk, n - done[s]);
          batch.push_back({s + 50, absl::MakeConstSpan(prompts_[s].data() + done[s], len),
                           static_cast<int32_t>(done[s]), done[s] + len == n});
          done[s] += len;
          if (batch.back().want_logits) who.push_back(s);
        } else if (static_cast<int>(fed[s].size()) < steps) {
          const int step = static_cast<int>(fed[s].size()) + 1;
          fed[s].push_back(NextToken(r, s, step - 1, forced));
          batch.push_back({s + 50, absl::MakeConstSpan(&fed[s].back(), 1),
                           static_cast<int32_t>(n + step - 1), true});
          who.push_back(s);
        }
      }
      if (batch.empty() && step_index >= num_seqs_) break;
      if (batch.empty()) continue;
      absl::Status st = model_->Forward(batch, *cache, out.data());
      EXPECT_TRUE(st.ok()) << st;
      if (!st.ok()) break;
      for (size_t i = 0; i < who.size(); ++i) {
        r.logits[who[i]].emplace_back(out.begin() + i * vocab_, out.begin() + (i + 1) * vocab_);
      }
    }
    return r;
  }

  // Speculative verification: each sequence alone, whole prompt, then the decode inputs
  // of `forced` fed `chunk` at a time as one entry with num_logits = chunk (all rows), the
  // shape in which the engine verifies chunk - 1 draft tokens.
  RunResult RunVerifyChunks(int steps, int chunk, const RunResult& forced) {
    RunResult r;
    r.logits.assign(num_seqs_, {});
    r.tokens.assign(num_seqs_, {});
    std::vector<float> out(static_cast<size_t>(vocab_) * chunk);
    for (int s = 0; s < num_seqs_; ++s) {
      auto cache = NewCache();
      const KvCache::SeqId id = 2000 + s;
      const size_t n = prompts_[s].size();
      EXPECT_TRUE(cache->Reserve(id, n + steps).ok());
      BatchEntry e{id, prompts_[s], 0, true};
      EXPECT_TRUE(model_->Forward({&e, 1}, *cache, out.data()).ok());
      r.logits[s].emplace_back(out.begin(), out.begin() + vocab_);
      const std::vector<TokenId>& fed = forced.tokens[s];
      for (int step = 0; step < steps; step += chunk) {
        const int len = std::min(chunk, steps - step);
        e = BatchEntry{id, absl::MakeConstSpan(fed.data() + step, len),
                       static_cast<int32_t>(n + step), true, len};
        absl::Status st = model_->Forward({&e, 1}, *cache, out.data());
        EXPECT_TRUE(st.ok()) << st;
        for (int j = 0; j < len; ++j) {
          r.logits[s].emplace_back(out.begin() + j * vocab_, out.begin() + (j + 1) * vocab_);
        }
      }
    }
    return r;
  }

  // Bitwise comparison of every logits row.
  void ExpectIdentical(const RunResult& a, const RunResult& b, const std::string& what) {
    for (int s = 0; s < num_seqs_; ++s) {
      ASSERT_EQ(a.logits[s].size(), b.logits[s].size()) << what << " seq " << s;
      for (size_t step = 0; step < a.logits[s].size(); ++step) {
        EXPECT_EQ(0, std::memcmp(a.logits[s][step].data(), b.logits[s][step].data(),
                                 vocab_ * sizeof(float)))
            << what << ": seq " << s << " (prompt " << prompts_[s].size() << ") step " << step
            << " max|d| " << MaxDiff(a.logits[s][step], b.logits[s][step]);
      }
    }
  }

  static double MaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
    double m = 0;
    for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double{a[i]} - b[i]));
    return m;
  }

  // Logit rows (over every sequence and step) whose argmax differs between a and b.
  int ArgmaxMismatches(const RunResult& a, const RunResult& b) {
    int near_tie_flips = 0;
    return DecidedArgmaxMismatches(a, b, &near_tie_flips) + near_tie_flips;
  }

  // Rows whose argmax the reference decides by the golden rule (ArgmaxIsDecided) and
  // `other` changes; near ties are counted in *near_tie_flips.
  int DecidedArgmaxMismatches(const RunResult& reference, const RunResult& other,
                              int* near_tie_flips) {
    int mismatches = 0;
    *near_tie_flips = 0;
    for (int s = 0; s < num_seqs_; ++s) {
      const size_t steps = std::min(reference.logits[s].size(), other.logits[s].size());
      for (size_t step = 0; step < steps; ++step) {
        const std::vector<float>& row = reference.logits[s][step];
        if (Argmax(row) == Argmax(other.logits[s][step])) continue;
        ++(ArgmaxIsDecided(row) ? mismatches : *near_tie_flips);
      }
    }
    return mismatches;
  }

  double MaxDiffAll(const RunResult& a, const RunResult& b) {
    double m = 0;
    for (int s = 0; s < num_seqs_; ++s) {
      for (size_t step = 0; step < std::min(a.logits[s].size(), b.logits[s].size()); ++step) {
        m = std::max(m, MaxDiff(a.logits[s][step], b.logits[s][step]));
      }
    }
    return m;
  }

  std::string path_;
  std::optional<kernels::KvElement> kv_element_;  // the model's own when unset
  int num_seqs_ = 8;
  std::unique_ptr<Model> model_;
  int64_t vocab_ = 0;
  std::vector<std::vector<TokenId>> prompts_;
};

TEST_F(BatchInvarianceTest, ExactBatchedEqualsAloneBitForBit) {
  Load("kjv-1m.gguf", Precision::kExact);
  if (IsSkipped()) return;
  const int steps = 6;
  RunResult together = RunTogether(steps, nullptr);
  RunResult alone = RunAlone(steps, 0, &together);
  ExpectIdentical(together, alone, "batched vs alone");
}

TEST_F(BatchInvarianceTest, ExactChunkedPrefillEqualsWholeBitForBit) {
  Load("kjv-1m.gguf", Precision::kExact);
  if (IsSkipped()) return;
  const int steps = 4;
  RunResult whole = RunAlone(steps, 0, nullptr);
  RunResult chunked = RunAlone(steps, 7, &whole);
  ExpectIdentical(whole, chunked, "chunks of 7 vs whole prompt");
  RunResult staggered = RunStaggered(steps, 5, &whole);
  ExpectIdentical(whole, staggered, "continuous batching (chunks of 5) vs alone");
}

// Speculative decoding verifies k drafts as one (k + 1)-token entry with logits for every
// row; in exact mode each row must equal the one-token decode at its position bit for bit,
// so speculation cannot change a greedy or seeded output.
TEST_F(BatchInvarianceTest, ExactMultiRowLogitsEqualSingleRowDecodeBitForBit) {
  Load("kjv-1m.gguf", Precision::kExact);
  if (IsSkipped()) return;
  const int steps = 10;
  RunResult alone = RunAlone(steps, 0, nullptr);
  for (int chunk : {2, 5}) {
    RunResult verified = RunVerifyChunks(steps, chunk, alone);
    ExpectIdentical(alone, verified, absl::StrCat("verify chunks of ", chunk, " vs decode"));
  }
}

TEST_F(BatchInvarianceTest, FastMultiRowLogitsSameArgmaxAsSingleRowDecode) {
  Load("kjv-1m.gguf", Precision::kFast);
  if (IsSkipped()) return;
  const int steps = 10;
  RunResult alone = RunAlone(steps, 0, nullptr);
  RunResult verified = RunVerifyChunks(steps, 5, alone);
  const int mismatches = ArgmaxMismatches(alone, verified);
  const double diff = MaxDiffAll(alone, verified);
  std::cout << absl::StrFormat(
      "[batch-invariance] kjv-1m fast, 5-row verify chunks: max|d| logits %.3g, argmax "
      "mismatches %d\n",
      diff, mismatches);
  EXPECT_EQ(mismatches, 0);
  EXPECT_LE(diff, 1e-3);
}

TEST_F(BatchInvarianceTest, FastKjvSameGreedyTokens) {
  Load("kjv-1m.gguf", Precision::kFast);
  if (IsSkipped()) return;
  const int steps = 32;
  RunResult together = RunTogether(steps, nullptr);
  RunResult alone = RunAlone(steps, 0, nullptr);  // its own greedy choices
  for (int s = 0; s < num_seqs_; ++s) {
    // The last decode's logits were not used to pick a token; compare the ones that were.
    EXPECT_EQ(together.tokens[s], alone.tokens[s]) << "seq " << s;
  }
  const double diff = MaxDiffAll(together, alone);
  std::cout << absl::StrFormat("[batch-invariance] kjv-1m fast: max|d| logits %.3g (%s)\n", diff,
                               model_->kernel_summary());
  RecordProperty("kjv_fast_max_abs_diff", absl::StrFormat("%.3g", diff));
  EXPECT_LE(diff, 1e-3);
}

// Fast mode stores K/V as f16. Against an f32 cache, with both fed the same tokens, every
// greedy choice the f32 run decides by a clear margin (the golden rule) stays the same;
// flips of near ties and the logits' largest difference are printed. (With AMX bf16
// matmuls, mini-random-bf16 flips one near tie of 200.)
TEST_F(BatchInvarianceTest, FastF16KvKeepsTheGreedyTokensOfAnF32Kv) {
  for (const char* name : {"kjv-1m.gguf", "mini-random-bf16.gguf"}) {
    SCOPED_TRACE(name);
    Load(name, Precision::kFast);
    if (IsSkipped()) return;
    ASSERT_EQ(model_->kv_element(), kernels::KvElement::kF16);
    const int steps = 24;
    kv_element_ = kernels::KvElement::kF32;
    const RunResult f32 = RunTogether(steps, nullptr);
    kv_element_ = kernels::KvElement::kF16;
    const RunResult f16 = RunTogether(steps, &f32);
    kv_element_.reset();
    int near_tie_flips = 0;
    const int mismatches = DecidedArgmaxMismatches(f32, f16, &near_tie_flips);
    const double diff = MaxDiffAll(f32, f16);
    std::cout << absl::StrFormat(
        "[kv-f16] %s fast: f16 against f32 K/V, max|d| logits %.3g, argmax mismatches %d of "
        "%d (and %d near ties flipped)\n",
        name, diff, mismatches, num_seqs_ * (steps + 1), near_tie_flips);
    EXPECT_EQ(mismatches, 0);
    EXPECT_GT(diff, 0.0) << "the f16 cache should round some K/V";
  }
}

// The opt-in caches on the trained model, q8 (8-bit K/V and queries) and bf16 (K/V,
// queries and softmax weights rounded to bf16): against an f32 cache fed the same tokens,
// every greedy choice the f32 run decides by a clear margin stays the same; and batched
// with the other sequences each picks the tokens it picks alone.
TEST_F(BatchInvarianceTest, FastOptInKvKjvKeepsTheGreedyTokens) {
  Load("kjv-1m.gguf", Precision::kFast);
  if (IsSkipped()) return;
  const int steps = 24;
  kv_element_ = kernels::KvElement::kF32;
  const RunResult f32 = RunTogether(steps, nullptr);
  for (const kernels::KvElement element : {kernels::KvElement::kQ8, kernels::KvElement::kBf16}) {
    const char* name = kernels::KvElementName(element);
    SCOPED_TRACE(name);
    kv_element_ = element;
    const RunResult rounded = RunTogether(steps, &f32);
    int near_tie_flips = 0;
    const int mismatches = DecidedArgmaxMismatches(f32, rounded, &near_tie_flips);
    const double diff = MaxDiffAll(f32, rounded);

    const RunResult together = RunTogether(steps, nullptr);
    const RunResult alone = RunAlone(steps, 0, nullptr);
    for (int s = 0; s < num_seqs_; ++s) {
      EXPECT_EQ(together.tokens[s], alone.tokens[s]) << "seq " << s;
    }
    const double batch_diff = MaxDiffAll(together, alone);
    std::cout << absl::StrFormat(
        "[kv-%s] kjv-1m fast: %s against f32 K/V, max|d| logits %.3g, argmax mismatches %d of "
        "%d (and %d near ties flipped); batched against alone max|d| %.3g\n",
        name, name, diff, mismatches, num_seqs_ * (steps + 1), near_tie_flips, batch_diff);
    EXPECT_EQ(mismatches, 0);
    EXPECT_GT(diff, 0.0) << "the cache should round K/V";
  }
  kv_element_.reset();
}

TEST_F(BatchInvarianceTest, FastMiniBf16SameArgmax) {
  Load("mini-random-bf16.gguf", Precision::kFast);
  if (IsSkipped()) return;
  const int steps = 32;
  RunResult together = RunTogether(steps, nullptr);
  RunResult alone = RunAlone(steps, 0, &together);  // same inputs, compare outputs
  for (int s = 0; s < num_seqs_; ++s) {
    for (size_t step = 0; step < together.logits[s].size(); ++step) {
      EXPECT_EQ(Argmax(together.logits[s][step]), Argmax(alone.logits[s][step]))
          << "seq " << s << " step " << step;
    }
  }
  const double diff = MaxDiffAll(together, alone);
  std::cout << absl::StrFormat("[batch-invariance] mini-random-bf16 fast: max|d| logits %.3g (%s)\n",
                               diff, model_->kernel_summary());
  RecordProperty("mini_bf16_fast_max_abs_diff", absl::StrFormat("%.3g", diff));
}

// The serving claim: a request's output does not change among 63 others. 64 decode rows
// take the large-batch matmul path, unlike a solo run.
TEST_F(BatchInvarianceTest, ExactAmong63OthersBitForBit) {
  Load("kjv-1m.gguf", Precision::kExact, 64);
  if (IsSkipped()) return;
  const int steps = 4;
  RunResult together = RunTogether(steps, nullptr);
  RunResult alone = RunAlone(steps, 0, &together);
  ExpectIdentical(together, alone, "64 batched vs alone");
}

// Fast mode among 63 others: measured and printed (the large-batch path uses oneDNN, whose
// summation order differs from the small-batch kernels); greedy tokens must still agree.
TEST_F(BatchInvarianceTest, FastKjvAmong63OthersSameGreedyTokens) {
  Load("kjv-1m.gguf", Precision::kFast, 64);
  if (IsSkipped()) return;
  const int steps = 16;
  RunResult together = RunTogether(steps, nullptr);
  RunResult alone = RunAlone(steps, 0, &together);  // same inputs, compare outputs
  const int argmax_mismatches = ArgmaxMismatches(together, alone);
  const double diff = MaxDiffAll(together, alone);
  std::cout << absl::StrFormat(
      "[batch-invariance] kjv-1m fast, 64 sequences: max|d| logits %.3g, argmax mismatches %d\n",
      diff, argmax_mismatches);
  RecordProperty("kjv_fast_64_max_abs_diff", absl::StrFormat("%.3g", diff));
  EXPECT_EQ(argmax_mismatches, 0);
  EXPECT_LE(diff, 1e-3);
}

TEST_F(BatchInvarianceTest, FastMiniBf16Among63OthersSameArgmax) {
  Load("mini-random-bf16.gguf", Precision::kFast, 64);
  if (IsSkipped()) return;
  const int steps = 8;
  RunResult together = RunTogether(steps, nullptr);
  RunResult alone = RunAlone(steps, 0, &together);
  const int argmax_mismatches = ArgmaxMismatches(together, alone);
  const double diff = MaxDiffAll(together, alone);
  std::cout << absl::StrFormat(
      "[batch-invariance] mini-random-bf16 fast, 64 sequences: max|d| logits %.3g, argmax "
      "mismatches %d\n",
      diff, argmax_mismatches);
  RecordProperty("mini_bf16_fast_64_max_abs_diff", absl::StrFormat("%.3g", diff));
  EXPECT_EQ(argmax_mismatches, 0);
}

// ---- One model of each family ------------------------------------------------------------
// gpt2: learned positions, LayerNorm, fused QKV and biases; gemma2: soft-caps, a 32-token
// sliding window on alternate layers (the prompts reach 61 tokens), post-norms, GEGLU;
// qwen2: Q/K/V biases, NEOX RoPE; llama3: rope_freqs.

class FamilyInvarianceTest : public BatchInvarianceTest {};

TEST_P(FamilyInvarianceTest, ExactBatchedChunkedAndStaggeredBitForBit) {
  Load(GetParam(), Precision::kExact);
  if (IsSkipped()) return;
  const int steps = 6;
  RunResult together = RunTogether(steps, nullptr);
  RunResult alone = RunAlone(steps, 0, &together);
  ExpectIdentical(together, alone, "batched vs alone");
  RunResult chunked = RunAlone(steps, 7, &together);
  ExpectIdentical(together, chunked, "chunks of 7 vs batched whole prompts");
  RunResult staggered = RunStaggered(steps, 5, &together);
  ExpectIdentical(together, staggered, "continuous batching (chunks of 5) vs batched");
}

// Fast mode: the same argmax in every row, max|d| measured and printed.
TEST_P(FamilyInvarianceTest, FastSameArgmax) {
  Load(GetParam(), Precision::kFast);
  if (IsSkipped()) return;
  const int steps = 8;
  RunResult together = RunTogether(steps, nullptr);
  RunResult alone = RunAlone(steps, 0, &together);  // same inputs, compare outputs
  RunResult staggered = RunStaggered(steps, 5, &together);
  const int mismatches = ArgmaxMismatches(together, alone) + ArgmaxMismatches(together, staggered);
  const double diff = std::max(MaxDiffAll(together, alone), MaxDiffAll(together, staggered));
  std::cout << absl::StrFormat(
      "[batch-invariance] %s fast: max|d| logits %.3g, argmax mismatches %d (%s)\n", GetParam(),
      diff, mismatches, model_->kernel_summary());
  RecordProperty("fast_max_abs_diff", absl::StrFormat("%.3g", diff));
  EXPECT_EQ(mismatches, 0);
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyInvarianceTest,
                         ::testing::Values("gpt2-tiny.gguf", "gemma2-tiny.gguf",
                                           "gemma2-tiny-bf16.gguf", "qwen2-tiny.gguf",
                                           "llama3-tiny.gguf"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string name = info.param;
                           name = name.substr(0, name.find(".gguf"));
                           for (char& c : name) c = std::isalnum(c) ? c : '_';
                           return name;
                         });

}  // namespace
}  // namespace quill::engine
