#pragma once

// A vocabulary's tokens as a prefix tree of their bytes, so that a byte-level constraint
// (JSON mode) tries each shared prefix once and refuses a whole subtree with one byte
// instead of trying every token: after a colon, the ~16,000 pieces of a 32,000-token
// vocabulary that start with a space share that space and then split on a handful of
// bytes, nearly all refused.

#include <cstdint>
#include <string>
#include <vector>

namespace quill::engine {

class TokenTrie {
 public:
  // One node per distinct byte prefix of the tokens. The tokens in its subtree are
  // order()[tokens_begin, tokens_end) (token ids sorted by their bytes), those whose bytes
  // end at this node first, up to own_end. Its children are nodes()[children_begin,
  // children_end), by increasing byte.
  struct Node {
    int32_t tokens_begin = 0;
    int32_t own_end = 0;
    int32_t tokens_end = 0;
    int32_t children_begin = 0;
    int32_t children_end = 0;
    uint8_t byte = 0;  // the last byte of this node's prefix (none for the root)
    // Every token below this node continues its prefix with plain string text (whole
    // UTF-8 characters, no '"', '\\' or control character): a JSON string that is between
    // two characters after the prefix takes the whole subtree as it is.
    bool plain_below = false;
  };

  // The trie of bytes[id] over every id with bytes (tokens without bytes are left out).
  static TokenTrie Build(const std::vector<std::string>& bytes);

  const Node& root() const { return nodes_[0]; }
  const Node& node(int32_t index) const { return nodes_[index]; }
  const std::vector<int32_t>& order() const { return order_; }

 private:
  // Adds the children of `parent`, whose tokens order_[parent's range) share `depth`
  // bytes, and their subtrees.
  void AddChildren(int32_t parent, int depth, const std::vector<std::string>& bytes);

  std::vector<Node> nodes_;
  std::vector<int32_t> order_;
};

}  // namespace quill::engine
