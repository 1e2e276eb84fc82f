#include "engine/runtime/sequence_state.h"

#include "gtest/gtest.h"

namespace quill::engine {
namespace {

using S = SequenceState;

TEST(SequenceStateTest, LegalMoves) {
  EXPECT_TRUE(IsValidTransition(S::kWaiting, S::kPrefill));
  EXPECT_TRUE(IsValidTransition(S::kWaiting, S::kFinished));
  EXPECT_TRUE(IsValidTransition(S::kPrefill, S::kDecode));
  EXPECT_TRUE(IsValidTransition(S::kPrefill, S::kFinished));
  EXPECT_TRUE(IsValidTransition(S::kDecode, S::kFinished));
}

TEST(SequenceStateTest, IllegalMoves) {
  EXPECT_FALSE(IsValidTransition(S::kWaiting, S::kWaiting));
  EXPECT_FALSE(IsValidTransition(S::kWaiting, S::kDecode));
  EXPECT_FALSE(IsValidTransition(S::kPrefill, S::kWaiting));
  EXPECT_FALSE(IsValidTransition(S::kPrefill, S::kPrefill));
  EXPECT_FALSE(IsValidTransition(S::kDecode, S::kPrefill));
  EXPECT_FALSE(IsValidTransition(S::kDecode, S::kDecode));
  EXPECT_FALSE(IsValidTransition(S::kDecode, S::kWaiting));
  for (S to : {S::kWaiting, S::kPrefill, S::kDecode, S::kFinished}) {
    EXPECT_FALSE(IsValidTransition(S::kFinished, to));
  }
}

TEST(SequenceStateTest, Names) {
  EXPECT_EQ(SequenceStateName(S::kWaiting), "waiting");
  EXPECT_EQ(SequenceStateName(S::kFinished), "finished");
}

}  // namespace
}  // namespace quill::engine
