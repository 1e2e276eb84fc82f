// ModelDrafter on the real kjv-1m model in exact precision, where logits do not depend on
// how a history is chunked: a drafter that reuses its KV across rounds must propose
// exactly what a fresh drafter proposes from the whole history.

#include "engine/runtime/model_drafter.h"

#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "engine/runtime/step_model.h"
#include "gtest/gtest.h"

namespace quill::engine {
namespace {

constexpr int kDrafts = 4;

std::string ModelPath() {
  const char* dir = std::getenv("QUILL_SHARED_DIR");
  return dir == nullptr ? "" : std::string(dir) + "/models/kjv-1m.gguf";
}

std::unique_ptr<StepModel> Load(int max_batch_tokens) {
  ModelOptions options;
  options.path = ModelPath();
  options.precision = kernels::Precision::kExact;
  options.max_batch_tokens = max_batch_tokens;
  auto model = Model::Load(options);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? MakeModelStepModel(*std::move(model)) : nullptr;
}

class ModelDrafterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (ModelPath().empty() || !std::ifstream(ModelPath()).good()) {
      GTEST_SKIP() << "shared assets not found at '" << ModelPath() << "'";
    }
    target_ = Load(512);
    ASSERT_NE(target_, nullptr);
  }

  std::unique_ptr<ModelDrafter> MakeDrafter(int max_batch_tokens) {
    auto drafter = ModelDrafter::Create(Load(max_batch_tokens), *target_, /*kv_tokens=*/1024,
                                        /*block_size=*/16, /*max_sequences=*/4, kDrafts);
    EXPECT_TRUE(drafter.ok()) << drafter.status();
    return drafter.ok() ? *std::move(drafter) : nullptr;
  }

  std::vector<TokenId> Encode(const std::string& text) {
    auto ids = target_->tokenizer().Encode(text, /*add_special=*/true);
    EXPECT_TRUE(ids.ok());
    return ids.ok() ? *ids : std::vector<TokenId>{};
  }

  // One sequence's round; returns its drafts.
  static std::vector<TokenId> Round(ModelDrafter& drafter, KvCache::SeqId seq,
                                    const std::vector<TokenId>& history, int wanted = kDrafts,
                                    int64_t reserve = 256) {
    std::vector<TokenId> draft(wanted);
    ModelDrafter::Proposal p;
    p.seq = seq;
    p.history = history;
    p.reserve_tokens = reserve;
    p.draft = absl::MakeSpan(draft);
    drafter.Propose(absl::MakeSpan(&p, 1));
    draft.resize(p.drafted);
    return draft;
  }

  // What a drafter that has never seen the sequence proposes.
  std::vector<TokenId> Fresh(const std::vector<TokenId>& history) {
    std::unique_ptr<ModelDrafter> fresh = MakeDrafter(512);
    return Round(*fresh, 1, history);
  }

  std::unique_ptr<StepModel> target_;
};

TEST_F(ModelDrafterTest, ReusedKvProposesWhatAFreshDrafterProposes) {
  std::unique_ptr<ModelDrafter> drafter = MakeDrafter(512);
  std::vector<TokenId> history = Encode("And the LORD said unto Moses,");
  std::vector<TokenId> first = Round(*drafter, 7, history);
  ASSERT_EQ(first.size(), static_cast<size_t>(kDrafts));
  EXPECT_EQ(first, Fresh(history));

  // The target accepted two drafts, rejected the third (emitting another token instead),
  // and the sequence then decoded one more step without drafting: the draft KV at the
  // rejected position is stale and must be recomputed.
  const TokenId other = first[2] == 5 ? 6 : 5;
  history.insert(history.end(), {first[0], first[1], other, 42});
  std::vector<TokenId> second = Round(*drafter, 7, history);
  ASSERT_EQ(second.size(), static_cast<size_t>(kDrafts));
  EXPECT_EQ(second, Fresh(history));

  // Everything accepted, plus the target's own next token.
  history.insert(history.end(), second.begin(), second.end());
  history.push_back(second[0]);
  EXPECT_EQ(Round(*drafter, 7, history), Fresh(history));

  EXPECT_GT(drafter->kv_blocks_used(), 0);
  drafter->Release(7);
  EXPECT_EQ(drafter->kv_blocks_used(), 0);
}

TEST_F(ModelDrafterTest, LongCatchUpIsChunkedAcrossRounds) {
  std::unique_ptr<ModelDrafter> drafter = MakeDrafter(/*max_batch_tokens=*/32);
  std::vector<TokenId> history;
  for (int i = 0; i < 4; ++i) {
    std::vector<TokenId> part = Encode("In the beginning God created the heaven and the earth.");
    history.insert(history.end(), part.begin() + (i == 0 ? 0 : 1), part.end());
  }
  ASSERT_GT(history.size(), 64u);
  ASSERT_LE(history.size(), 96u);
  // 32 tokens per round: no drafts until the whole history has been fed.
  EXPECT_TRUE(Round(*drafter, 3, history).empty());
  EXPECT_TRUE(Round(*drafter, 3, history).empty());
  EXPECT_EQ(Round(*drafter, 3, history), Fresh(history));
}

TEST_F(ModelDrafterTest, StopsAtTheReservationAndTheContext) {
  std::unique_ptr<ModelDrafter> drafter = MakeDrafter(512);
  const std::vector<TokenId> history = Encode("Blessed are the");
  const int64_t n = static_cast<int64_t>(history.size());
  // Room for the K/V of the last token and one draft fed back: two drafts, not four.
  EXPECT_EQ(Round(*drafter, 1, history, kDrafts, n + 1).size(), 2u);
  // A sequence longer than the draft model's context (256) never drafts.
  EXPECT_TRUE(Round(*drafter, 2, history, kDrafts, 257).empty());
  drafter->Release(1);
  drafter->Release(2);
  EXPECT_EQ(drafter->kv_blocks_used(), 0);
}

}  // namespace
}  // namespace quill::engine
