#include "engine/sampler/token_trie.h"

#include <algorithm>

#include "absl/strings/string_view.h"
#include "engine/base/utf8.h"

namespace quill::engine {

namespace {

// Whether `bytes` are well-formed UTF-8 with no '"', '\\' or control character: text a
// JSON string takes as it is between two characters (stricter than JsonPrefix, so the
// trie's shortcut never admits a token that trying its bytes would refuse).
bool IsPlainStringText(absl::string_view bytes) {
  for (char c : bytes) {
    const uint8_t b = static_cast<uint8_t>(c);
    if (b < 0x20 || b == '"' || b == '\\') return false;
  }
  return IsValidUtf8(bytes);
}

}  // namespace

TokenTrie TokenTrie::Build(const std::vector<std::string>& bytes) {
  TokenTrie trie;
  for (size_t id = 0; id < bytes.size(); ++id) {
    if (bytes[id].empty()) continue;
    trie.order_.push_back(static_cast<int32_t>(id));
  }
  // std::string orders bytes as unsigned, so a prefix comes before its extensions and
  // every subtree is one run of the order. Ties (tokens with the same bytes) by id.
  // (std::sort: stable_sort's temporary buffer comes from a nothrow operator new.)
  std::sort(trie.order_.begin(), trie.order_.end(), [&](int32_t a, int32_t b) {
    const int order = bytes[a].compare(bytes[b]);
    return order != 0 ? order < 0 : a < b;
  });
  Node root;
  root.tokens_end = static_cast<int32_t>(trie.order_.size());
  trie.nodes_.push_back(root);
  trie.AddChildren(0, 0, bytes);
  return trie;
}

void TokenTrie::AddChildren(int32_t parent, int depth, const std::vector<std::string>& bytes) {
  const int32_t begin = nodes_[parent].own_end;
  const int32_t end = nodes_[parent].tokens_end;
  bool plain_below = true;
  for (int32_t i = begin; i < end; ++i) {
    plain_below =
        plain_below && IsPlainStringText(absl::string_view(bytes[order_[i]]).substr(depth));
  }
  nodes_[parent].plain_below = plain_below;
  // The children, contiguous: one per distinct byte at `depth` (all tokens in the range
  // are longer than `depth`).
  const auto byte_at = [&](int32_t i) { return static_cast<uint8_t>(bytes[order_[i]][depth]); };
  const int32_t children_begin = static_cast<int32_t>(nodes_.size());
  for (int32_t i = begin; i < end;) {
    Node child;
    child.byte = byte_at(i);
    child.tokens_begin = i;
    while (i < end && byte_at(i) == child.byte) ++i;
    child.tokens_end = i;
    child.own_end = child.tokens_begin;
    while (child.own_end < child.tokens_end &&
           static_cast<int>(bytes[order_[child.own_end]].size()) == depth + 1) {
      ++child.own_end;
    }
    nodes_.push_back(child);
  }
  const int32_t children_end = static_cast<int32_t>(nodes_.size());
  nodes_[parent].children_begin = children_begin;
  nodes_[parent].children_end = children_end;
  for (int32_t c = children_begin; c < children_end; ++c) AddChildren(c, depth + 1, bytes);
}

}  // namespace quill::engine
