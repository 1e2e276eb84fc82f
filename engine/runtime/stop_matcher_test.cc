#include "engine/runtime/stop_matcher.h"

#include <string>
#include <vector>

#include "engine/runtime/engine_observer.h"
#include "engine/runtime/request.h"
#include "gtest/gtest.h"

namespace quill::engine {
namespace {

// Feeds `pieces` one by one; returns the text released after each piece.
std::vector<std::string> Feed(StopStringMatcher& m, const std::vector<std::string>& pieces,
                              bool* matched) {
  std::vector<std::string> released;
  *matched = false;
  for (const std::string& piece : pieces) {
    std::string out;
    *matched = m.Push(piece, &out);
    released.push_back(out);
    if (*matched) break;
  }
  return released;
}

TEST(StopStringMatcherTest, NoStopsPassesThrough) {
  StopStringMatcher m;
  bool matched;
  EXPECT_EQ(Feed(m, {"ab", "c"}, &matched), (std::vector<std::string>{"ab", "c"}));
  EXPECT_FALSE(matched);
}

TEST(StopStringMatcherTest, MatchInsideOnePiece) {
  StopStringMatcher m(std::vector<std::string>{"END"});
  bool matched;
  EXPECT_EQ(Feed(m, {"abENDxyz"}, &matched), (std::vector<std::string>{"ab"}));
  EXPECT_TRUE(matched);
  std::string out;
  EXPECT_TRUE(m.Push("more", &out));
  EXPECT_EQ(out, "");
}

TEST(StopStringMatcherTest, MatchSpanningPiecesHoldsPrefix) {
  StopStringMatcher m(std::vector<std::string>{"END"});
  bool matched;
  // "xE" could begin "END": "E" is held; "N" extends it; "Dz" completes it.
  EXPECT_EQ(Feed(m, {"xE", "N", "Dz"}, &matched), (std::vector<std::string>{"x", "", ""}));
  EXPECT_TRUE(matched);
}

TEST(StopStringMatcherTest, FalseStartIsReleased) {
  StopStringMatcher m(std::vector<std::string>{"END"});
  bool matched;
  EXPECT_EQ(Feed(m, {"xE", "Nq", "r"}, &matched), (std::vector<std::string>{"x", "ENq", "r"}));
  EXPECT_FALSE(matched);
}

TEST(StopStringMatcherTest, FlushReleasesHeldText) {
  StopStringMatcher m(std::vector<std::string>{"END"});
  std::string out;
  EXPECT_FALSE(m.Push("abEN", &out));
  EXPECT_EQ(out, "ab");
  EXPECT_EQ(m.held(), "EN");
  m.Flush(&out);
  EXPECT_EQ(out, "abEN");
}

TEST(StopStringMatcherTest, EarliestOfSeveralWins) {
  StopStringMatcher m(std::vector<std::string>{"cd", "bcx", "b"});
  std::string out;
  EXPECT_TRUE(m.Push("abcd", &out));
  EXPECT_EQ(out, "a");
}

TEST(StopStringMatcherTest, LongestPossiblePrefixHeld) {
  // "aab" ends with "ab" (a prefix of "abc") and "b"... the longest candidate is kept.
  StopStringMatcher m(std::vector<std::string>{"abc", "bz"});
  std::string out;
  EXPECT_FALSE(m.Push("xaab", &out));
  EXPECT_EQ(out, "xa");
  EXPECT_EQ(m.held(), "ab");
  EXPECT_TRUE(m.Push("z", &out));  // "abz" contains "bz" at offset 1
  EXPECT_EQ(out, "xaa");
}

TEST(StopStringMatcherTest, EmptyStopStringsIgnored) {
  StopStringMatcher m(std::vector<std::string>{""});
  std::string out;
  EXPECT_FALSE(m.Push("abc", &out));
  EXPECT_EQ(out, "abc");
}

TEST(StopStringMatcherTest, MultiByteStop) {
  StopStringMatcher m(std::vector<std::string>{"\xC3\xA9t\xC3\xA9"});  // "été"
  std::string out;
  EXPECT_FALSE(m.Push("l'\xC3\xA9", &out));
  EXPECT_EQ(out, "l'");
  EXPECT_TRUE(m.Push("t\xC3\xA9!", &out));
  EXPECT_EQ(out, "l'");
}

TEST(NamesTest, FinishReasonAndPhase) {
  EXPECT_EQ(FinishReasonName(FinishReason::kLength), "length");
  EXPECT_EQ(FinishReasonName(FinishReason::kStop), "stop");
  EXPECT_EQ(FinishReasonName(FinishReason::kEos), "eos");
  EXPECT_EQ(FinishReasonName(FinishReason::kCancelled), "cancelled");
  EXPECT_EQ(FinishReasonName(FinishReason::kDeadline), "deadline");
  EXPECT_EQ(FinishReasonName(FinishReason::kError), "error");
  EXPECT_EQ(FinishReasonName(FinishReason::kShutdown), "shutdown");
  EXPECT_EQ(StepPhaseName(StepPhase::kPrefill), "prefill");
  EXPECT_EQ(StepPhaseName(StepPhase::kDecode), "decode");
  EXPECT_EQ(StepPhaseName(StepPhase::kMixed), "mixed");
}

}  // namespace
}  // namespace quill::engine
