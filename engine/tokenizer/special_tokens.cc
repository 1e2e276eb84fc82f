#include "engine/tokenizer/special_tokens.h"

#include <algorithm>
#include <tuple>

namespace quill::engine {
namespace {

// Sorted, disjoint, non-empty ranges covering the same bytes as `ranges`.
std::vector<ByteRange> MergeRanges(absl::Span<const ByteRange> ranges) {
  std::vector<ByteRange> sorted;
  for (const ByteRange& r : ranges) {
    if (r.begin < r.end) sorted.push_back(r);
  }
  std::sort(sorted.begin(), sorted.end(),
            [](const ByteRange& a, const ByteRange& b) { return a.begin < b.begin; });
  std::vector<ByteRange> merged;
  for (const ByteRange& r : sorted) {
    if (!merged.empty() && r.begin <= merged.back().end) {
      merged.back().end = std::max(merged.back().end, r.end);
    } else {
      merged.push_back(r);
    }
  }
  return merged;
}

// True if [begin, end) shares a byte with one of the merged `ranges`.
bool Overlaps(const std::vector<ByteRange>& ranges, size_t begin, size_t end) {
  // The first range ending after `begin` is the only candidate.
  const auto it = std::upper_bound(ranges.begin(), ranges.end(), begin,
                                   [](size_t pos, const ByteRange& r) { return pos < r.end; });
  return it != ranges.end() && it->begin < end;
}

}  // namespace

void SpecialTokenMatcher::Add(TokenId id, absl::string_view text, bool always) {
  if (text.empty() || id < 0) return;
  int32_t node = 0;
  for (char c : text) {
    const auto [it, inserted] =
        edges_.try_emplace(EdgeKey(node, static_cast<uint8_t>(c)), num_nodes_);
    if (inserted) ++num_nodes_;
    node = it->second;
  }
  first_byte_[static_cast<uint8_t>(text[0])] = true;
  Terminal& terminal = terminals_[node];
  TokenId& slot = always ? terminal.always : terminal.special;
  if (slot < 0 || id < slot) slot = id;
}

std::vector<SpecialTokenMatcher::Occurrence> SpecialTokenMatcher::FindOccurrences(
    absl::string_view text, bool parse_special, absl::Span<const ByteRange> plain_ranges) const {
  const std::vector<ByteRange> plain = MergeRanges(plain_ranges);
  std::vector<Occurrence> found;
  for (size_t begin = 0; begin < text.size(); ++begin) {
    if (!first_byte_[static_cast<uint8_t>(text[begin])]) continue;
    int32_t node = 0;
    for (size_t end = begin; end < text.size(); ++end) {
      const auto edge = edges_.find(EdgeKey(node, static_cast<uint8_t>(text[end])));
      if (edge == edges_.end()) break;
      node = edge->second;
      const auto terminal = terminals_.find(node);
      if (terminal == terminals_.end()) continue;
      const size_t length = end + 1 - begin;
      TokenId id = terminal->second.always;
      const TokenId special = terminal->second.special;
      if (parse_special && special >= 0 && (id < 0 || special < id) &&
          !Overlaps(plain, begin, begin + length)) {
        id = special;
      }
      if (id >= 0) found.push_back({static_cast<uint32_t>(length), id, begin});
    }
  }
  return found;
}

void SpecialTokenMatcher::Partition(absl::string_view text, bool parse_special,
                                    absl::Span<const ByteRange> plain_ranges,
                                    std::vector<TextFragment>* fragments) const {
  std::vector<Occurrence> found;
  if (!terminals_.empty()) found = FindOccurrences(text, parse_special, plain_ranges);
  if (found.empty()) {
    if (!text.empty()) fragments->push_back({text, -1});
    return;
  }
  // llama.cpp's order: longer token texts first; each token then takes its occurrences
  // left to right where they overlap nothing taken before.
  std::sort(found.begin(), found.end(), [](const Occurrence& a, const Occurrence& b) {
    return std::make_tuple(-static_cast<int64_t>(a.length), a.id, a.begin) <
           std::make_tuple(-static_cast<int64_t>(b.length), b.id, b.begin);
  });
  std::vector<bool> taken(text.size(), false);
  std::vector<Occurrence> accepted;
  for (const Occurrence& o : found) {
    bool free = true;
    for (size_t i = o.begin; free && i < o.begin + o.length; ++i) free = !taken[i];
    if (!free) continue;
    for (size_t i = o.begin; i < o.begin + o.length; ++i) taken[i] = true;
    accepted.push_back(o);
  }
  std::sort(accepted.begin(), accepted.end(),
            [](const Occurrence& a, const Occurrence& b) { return a.begin < b.begin; });
  size_t pos = 0;
  for (const Occurrence& o : accepted) {
    if (o.begin > pos) fragments->push_back({text.substr(pos, o.begin - pos), -1});
    fragments->push_back({text.substr(o.begin, o.length), o.id});
    pos = o.begin + o.length;
  }
  if (pos < text.size()) fragments->push_back({text.substr(pos), -1});
}

}  // namespace quill::engine
