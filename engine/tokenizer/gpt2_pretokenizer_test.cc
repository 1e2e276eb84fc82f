#include "engine/tokenizer/gpt2_pretokenizer.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace quill::engine {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

std::vector<std::string> Split(absl::string_view text) {
  std::vector<std::string> words;
  for (absl::string_view w : Gpt2PreTokenize(text)) words.emplace_back(w);
  return words;
}

// Expected splits are worked out by hand from the regex
// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
TEST(Gpt2PreTokenizeTest, WordsTakeTheirLeadingSpace) {
  EXPECT_THAT(Split("Hello world"), ElementsAre("Hello", " world"));
  EXPECT_THAT(Split(" Hello"), ElementsAre(" Hello"));
  EXPECT_THAT(Split("Hello, world!"), ElementsAre("Hello", ",", " world", "!"));
  EXPECT_THAT(Split(""), IsEmpty());
}

TEST(Gpt2PreTokenizeTest, Contractions) {
  EXPECT_THAT(Split("don't"), ElementsAre("don", "'t"));
  EXPECT_THAT(Split("I've we'll she'd they're I'm"),
              ElementsAre("I", "'ve", " we", "'ll", " she", "'d", " they", "'re", " I", "'m"));
  // Case-sensitive, and "'a" is no contraction.
  EXPECT_THAT(Split("'RE"), ElementsAre("'", "RE"));
  EXPECT_THAT(Split("y'all"), ElementsAre("y", "'", "all"));
  EXPECT_THAT(Split("''s"), ElementsAre("''", "s"));
}

TEST(Gpt2PreTokenizeTest, WhitespaceRuns) {
  // Before a word the last space of a run goes with the word.
  EXPECT_THAT(Split("a  b"), ElementsAre("a", " ", " b"));
  EXPECT_THAT(Split("a    b"), ElementsAre("a", "   ", " b"));
  // A run before a non-space keeps all but its last character, which stands alone if it
  // cannot prefix the next word.
  EXPECT_THAT(Split("a \n b"), ElementsAre("a", " \n", " b"));
  EXPECT_THAT(Split("a\n\nb"), ElementsAre("a", "\n", "\n", "b"));
  EXPECT_THAT(Split("x\ny"), ElementsAre("x", "\n", "y"));
  // At the end of the text the whole run.
  EXPECT_THAT(Split("end   "), ElementsAre("end", "   "));
  EXPECT_THAT(Split("\n\n\n"), ElementsAre("\n\n\n"));
  EXPECT_THAT(Split(" "), ElementsAre(" "));
  // Only ASCII space is the optional prefix: NBSP stands alone.
  EXPECT_THAT(Split("a\xC2\xA0" "b"), ElementsAre("a", "\xC2\xA0", "b"));
  EXPECT_THAT(Split("\tx"), ElementsAre("\t", "x"));
}

TEST(Gpt2PreTokenizeTest, NumbersLettersAndOthers) {
  EXPECT_THAT(Split("3.14"), ElementsAre("3", ".", "14"));
  EXPECT_THAT(Split(" 123abc"), ElementsAre(" 123", "abc"));
  EXPECT_THAT(Split("$$$ ok"), ElementsAre("$$$", " ok"));
  EXPECT_THAT(Split("x ½"), ElementsAre("x", " \xC2\xBD"));                   // ½ is \p{N}
  EXPECT_THAT(Split("na\xC3\xAFve"), ElementsAre("na\xC3\xAFve"));           // naïve
  EXPECT_THAT(Split("\xE6\x97\xA5\xE6\x9C\xAC"), ElementsAre("\xE6\x97\xA5\xE6\x9C\xAC"));  // 日本
  EXPECT_THAT(Split(" \xF0\x9F\xA6\x99!a"), ElementsAre(" \xF0\x9F\xA6\x99!", "a"));        // 🦙
  EXPECT_THAT(Split("w048"), ElementsAre("w", "048"));
}

}  // namespace
}  // namespace quill::engine
