#pragma once

#include <cstdint>

#include "absl/types/span.h"
#include "engine/kv_cache/kv_cache.h"
#include "engine/tokenizer/tokenizer.h"

namespace quill::engine {

// One sequence's part of a forward step: a chunk of its prompt (prefill) or its one new
// token (decode).
struct BatchEntry {
  KvCache::SeqId seq = 0;
  absl::Span<const TokenId> tokens;
  int32_t first_pos = 0;     // absolute position of tokens[0]
  bool want_logits = false;  // produce logits for the last of `tokens`
};

}  // namespace quill::engine
