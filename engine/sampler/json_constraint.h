#pragma once

// JSON mode: each step, the tokens that would break the JSON object being written are
// masked out of the logits before sampling; once the object is closed only the
// end-of-generation tokens remain. Holds the recognizer's state between steps.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "engine/sampler/json_prefix.h"
#include "engine/sampler/json_schema.h"
#include "engine/sampler/schema_prefix.h"
#include "engine/sampler/token_trie.h"

namespace quill::engine {

// What JSON mode needs of a vocabulary, built once per model (Make): each token's bytes,
// which tokens end a generation, and the tokens with bytes as a prefix tree.
struct TokenBytesTable {
  std::vector<std::string> bytes;        // by token id; "" for control tokens
  std::vector<uint8_t> ends_generation;  // by token id: 1 for the end-of-generation ids
  std::vector<int32_t> without_bytes;    // the ids whose bytes are ""
  TokenTrie trie;                        // the others

  static TokenBytesTable Make(std::vector<std::string> bytes, std::vector<uint8_t> ends_generation);
};

class JsonConstraint {
 public:
  // Any JSON object (JSON mode), or with a schema one that satisfies it.
  explicit JsonConstraint(const TokenBytesTable& table,
                          std::shared_ptr<const JsonSchema> schema = nullptr);

  // Sets every token the object cannot take next to -inf (logits has one entry per token
  // of the table). Tokens without bytes are masked, except the end-of-generation ones
  // once the object is complete; an incomplete object takes only tokens with bytes it
  // accepts. Returns how many tokens remain allowed. Walks the table's trie: a prefix
  // refused refuses its subtree, and inside a string a subtree of plain text is taken
  // without trying it.
  int Mask(absl::Span<float> logits) const;
  // The sampled token joins the object (it was allowed by Mask).
  void Advance(int32_t token);
  bool complete() const { return schema_ ? schema_->complete() : json_.complete(); }
  // The lowest end-of-generation id, -1 if the table has none: what ends an answer the
  // vocabulary cannot continue (Mask allowed nothing).
  int32_t FirstEndOfGeneration() const;

 private:
  const TokenBytesTable* table_;
  std::shared_ptr<const JsonSchema> schema_owner_;
  JsonPrefix json_;                     // without a schema
  std::optional<SchemaPrefix> schema_;  // with one
};

}  // namespace quill::engine
