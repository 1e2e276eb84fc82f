#pragma once

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace quill::engine {

// Finds stop strings in streamed generated text. Text that could still be the beginning
// of a stop string is held back until the next piece shows whether it is; when a stop
// string appears, the output ends right before it. Empty stop strings are ignored.
//
// Only the held-back tail needs searching: any match that began in text already released
// would have had its start held back, so every match starts inside the held text.
class StopStringMatcher {
 public:
  StopStringMatcher() = default;
  explicit StopStringMatcher(absl::Span<const std::string> stops);

  // Feeds new text and appends to `out` the text that is now safe to release. Returns
  // true when a stop string matched: `out` then ends right before it and the matcher
  // ignores everything afterwards.
  bool Push(absl::string_view text, std::string* out);

  // End of stream without a match: appends the held-back text to `out`.
  void Flush(std::string* out);

  bool matched() const { return matched_; }
  absl::string_view held() const { return held_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool matched_ = false;
};

}  // namespace quill::engine
