#pragma once

#include <cstdint>

#include "absl/types/span.h"

namespace quill::engine {

using TokenId = int32_t;

struct NgramDraftOptions {
  int max_ngram = 3;  // longest suffix tried first (longer matches predict better)
  int min_ngram = 1;
  // Only the last max_lookback tokens are searched, so a step's drafting costs at most
  // (max_ngram - min_ngram + 1) * max_lookback comparisons per sequence.
  int max_lookback = 8192;
};

// Model-free drafting for speculative decoding ("prompt lookup"): finds the most recent
// earlier occurrence of the last n tokens of `history` (n = max_ngram down to min_ngram)
// and proposes the tokens that followed it, filling all of `draft`. Where the copy runs
// into the end of history it continues from its own output, the way a repeating pattern
// goes on (LZ77-style overlap), so a period shorter than the draft still fills it.
// Returns the number of draft tokens written: draft.size(), or 0 when nothing matched.
// Allocates nothing.
int ProposeNgramDraft(absl::Span<const TokenId> history, const NgramDraftOptions& options,
                      absl::Span<TokenId> draft);

}  // namespace quill::engine
