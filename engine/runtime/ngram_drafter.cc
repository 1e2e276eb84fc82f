#include "engine/runtime/ngram_drafter.h"

#include <algorithm>

namespace quill::engine {

int ProposeNgramDraft(absl::Span<const TokenId> history, const NgramDraftOptions& options,
                      absl::Span<TokenId> draft) {
  const int length = static_cast<int>(history.size());
  const int k = static_cast<int>(draft.size());
  if (k == 0 || length < 2) return 0;
  const int lowest = std::max(0, length - options.max_lookback);
  for (int n = std::min(options.max_ngram, length - 1); n >= std::max(1, options.min_ngram); --n) {
    const TokenId* suffix = history.data() + length - n;
    // Most recent first: nearby text predicts the continuation best.
    for (int start = length - n - 1; start >= lowest; --start) {
      if (history[start] != suffix[0] ||
          !std::equal(suffix + 1, suffix + n, history.data() + start + 1)) {
        continue;
      }
      const int from = start + n;  // < length: the match ends before the suffix does
      for (int j = 0; j < k; ++j) {
        const int source = from + j;
        draft[j] = source < length ? history[source] : draft[source - length];
      }
      return k;
    }
  }
  return 0;
}

}  // namespace quill::engine
