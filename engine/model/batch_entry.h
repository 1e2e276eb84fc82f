#pragma once

#include <cstdint>

#include "absl/types/span.h"
#include "engine/kv_cache/kv_cache.h"
#include "engine/tokenizer/tokenizer.h"

namespace quill::engine {

// One sequence's part of a forward step: a chunk of its prompt (prefill), its one new
// token (decode), or its last token plus draft tokens (speculative verification).
struct BatchEntry {
  KvCache::SeqId seq = 0;
  absl::Span<const TokenId> tokens;
  int32_t first_pos = 0;     // absolute position of tokens[0]
  bool want_logits = false;  // produce logits for the last of `tokens`
  // With want_logits: logits for the last `num_logits` of `tokens` (1..tokens.size()), one
  // row each in order. Verifying k drafts takes all k + 1 rows of one entry.
  int32_t num_logits = 1;
};

}  // namespace quill::engine
