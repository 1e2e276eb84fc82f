#include "engine/sampler/json_constraint.h"

#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace quill::engine {
namespace {

// A toy vocabulary: id 0 ends generation, 1 is another control token, then pieces.
TokenBytesTable Table() {
  TokenBytesTable table;
  table.bytes = {"", "", "{", "}", "\"", "a", ":", " ", "1", "{\"", "\"}", "x\"", "]"};
  table.ends_generation.assign(table.bytes.size(), 0);
  table.ends_generation[0] = 1;
  return table;
}

std::vector<int> Allowed(const JsonConstraint& constraint, size_t vocab) {
  std::vector<float> logits(vocab, 0.5f);
  const int count = constraint.Mask(absl::MakeSpan(logits));
  std::vector<int> allowed;
  for (size_t id = 0; id < vocab; ++id) {
    if (!std::isinf(logits[id])) {
      EXPECT_EQ(logits[id], 0.5f);  // allowed logits are left as they were
      allowed.push_back(static_cast<int>(id));
    }
  }
  EXPECT_EQ(count, static_cast<int>(allowed.size()));
  return allowed;
}

TEST(JsonConstraintTest, MasksTokensTheObjectCannotTakeAndEndsWithEndOfGeneration) {
  const TokenBytesTable table = Table();
  JsonConstraint json(table);
  const size_t vocab = table.bytes.size();
  // Start: '{', whitespace, or '{"' (a multi-byte token checked whole).
  EXPECT_EQ(Allowed(json, vocab), (std::vector<int>{2, 7, 9}));
  json.Advance(9);  // {"
  // In a key: any string byte, or the closing quote, but not the quote then '}' (the
  // colon must come first).
  EXPECT_EQ(Allowed(json, vocab), (std::vector<int>{2, 3, 4, 5, 6, 7, 8, 9, 11, 12}));
  json.Advance(5);  // a
  json.Advance(4);  // "
  json.Advance(6);  // :
  json.Advance(8);  // 1
  EXPECT_FALSE(json.complete());
  // After a number in an object: more digits, whitespace, or the close ('}' or '"}' no).
  EXPECT_EQ(Allowed(json, vocab), (std::vector<int>{3, 7, 8}));
  json.Advance(3);
  EXPECT_TRUE(json.complete());
  // Complete: only the end of generation (not the other control token).
  EXPECT_EQ(Allowed(json, vocab), (std::vector<int>{0}));
}

}  // namespace
}  // namespace quill::engine
