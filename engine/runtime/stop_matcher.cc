#include "engine/runtime/stop_matcher.h"

#include <algorithm>

#include "absl/strings/match.h"

namespace quill::engine {

StopStringMatcher::StopStringMatcher(absl::Span<const std::string> stops) {
  size_t longest = 0;
  for (const std::string& stop : stops) {
    if (stop.empty()) continue;
    stops_.push_back(stop);
    longest = std::max(longest, stop.size());
  }
  held_.reserve(longest * 2 + 16);
}

bool StopStringMatcher::Push(absl::string_view text, std::string* out) {
  if (matched_) return true;
  if (stops_.empty()) {
    out->append(text.data(), text.size());
    return false;
  }
  held_.append(text.data(), text.size());
  const absl::string_view buf(held_);

  // The earliest match wins.
  size_t match = absl::string_view::npos;
  for (const std::string& stop : stops_) {
    const size_t pos = buf.find(stop);
    if (pos < match) match = pos;
  }
  if (match != absl::string_view::npos) {
    out->append(held_.data(), match);
    held_.clear();
    matched_ = true;
    return true;
  }

  // Hold back the longest tail that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const std::string& stop : stops_) {
    const size_t max_len = std::min(buf.size(), stop.size() - 1);
    for (size_t len = max_len; len > keep; --len) {
      if (absl::StartsWith(stop, buf.substr(buf.size() - len))) {
        keep = len;
        break;
      }
    }
  }
  out->append(held_.data(), held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return false;
}

void StopStringMatcher::Flush(std::string* out) {
  if (matched_) return;
  out->append(held_);
  held_.clear();
}

}  // namespace quill::engine
