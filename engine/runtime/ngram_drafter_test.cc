#include "engine/runtime/ngram_drafter.h"

#include <vector>

#include "gtest/gtest.h"

namespace quill::engine {
namespace {

std::vector<TokenId> Draft(const std::vector<TokenId>& history, int k,
                           NgramDraftOptions options = {}) {
  std::vector<TokenId> draft(k, -1);
  const int n = ProposeNgramDraft(history, options, absl::MakeSpan(draft));
  draft.resize(n);
  return draft;
}

TEST(NgramDrafterTest, CopiesWhatFollowedTheLongestRecentMatch) {
  // "5 6 7" occurred at the start followed by 8 9 10 11; 7 alone occurs later (after 1),
  // but the 3-gram wins over the more recent 1-gram.
  EXPECT_EQ(Draft({5, 6, 7, 8, 9, 10, 11, 1, 7, 2, 5, 6, 7}, 4),
            (std::vector<TokenId>{8, 9, 10, 11}));
}

TEST(NgramDrafterTest, PrefersTheMostRecentOccurrence) {
  EXPECT_EQ(Draft({1, 2, 3, 4, 1, 2, 3, 9, 1, 2, 3}, 1), (std::vector<TokenId>{9}));
}

TEST(NgramDrafterTest, FallsBackToShorterSuffixes) {
  EXPECT_EQ(Draft({4, 3, 8, 2, 3}, 2), (std::vector<TokenId>{8, 2}));  // 1-gram "3"
  NgramDraftOptions two;
  two.min_ngram = 2;
  EXPECT_TRUE(Draft({4, 3, 8, 2, 3}, 2, two).empty());
}

TEST(NgramDrafterTest, RepeatingPatternContinuesPastTheEndOfHistory) {
  // Period 2: the match of "1 2 1" at 0 is followed by "2" and then by its own draft.
  EXPECT_EQ(Draft({1, 2, 1, 2, 1}, 5), (std::vector<TokenId>{2, 1, 2, 1, 2}));
  EXPECT_EQ(Draft({7, 7, 7}, 3), (std::vector<TokenId>{7, 7, 7}));
}

TEST(NgramDrafterTest, NoMatchNoDraft) {
  EXPECT_TRUE(Draft({1, 2, 3, 4, 5}, 4).empty());
  EXPECT_TRUE(Draft({1}, 4).empty());
  EXPECT_TRUE(Draft({1, 1, 1}, 0).empty());
}

TEST(NgramDrafterTest, LookbackBoundsTheSearch) {
  NgramDraftOptions near;
  near.max_lookback = 4;
  EXPECT_TRUE(Draft({9, 8, 1, 2, 3, 4, 5, 9}, 2, near).empty());
  EXPECT_EQ(Draft({9, 8, 1, 2, 3, 4, 5, 9}, 2), (std::vector<TokenId>{8, 1}));
}

}  // namespace
}  // namespace quill::engine
