#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/tokenizer/tokenizer.h"

namespace quill::engine {

// A piece of Encode's input: plain text, or one special token recognized in it.
struct TextFragment {
  absl::string_view text;  // a view into the input
  TokenId token = -1;      // -1: plain text to tokenize
};

// Finds special-token text in a string the way llama.cpp partitions it: tokens are
// taken longest text first (ties: lower id first), each at its leftmost occurrences that
// do not overlap a token already taken. Immutable after Build; Partition is const and
// thread-safe.
class SpecialTokenMatcher {
 public:
  // `always`: recognized by plain Encode too (user-defined tokens, which Hugging Face
  // and llama.cpp split out of any text); otherwise only when parsing special tokens
  // (control and unknown tokens). Empty texts are ignored; of several tokens with the
  // same text and kind the lowest id wins.
  void Add(TokenId id, absl::string_view text, bool always);

  // Splits `text` into fragments in order. With parse_special, control/unknown tokens
  // are recognized too, except where their text overlaps one of `plain_ranges` (byte
  // offsets into `text`, checked by the caller). Adjacent plain text is one fragment.
  void Partition(absl::string_view text, bool parse_special,
                 absl::Span<const ByteRange> plain_ranges,
                 std::vector<TextFragment>* fragments) const;

  bool empty() const { return terminals_.empty(); }

 private:
  struct Terminal {
    TokenId always = -1;   // lowest id of an always-recognized token with this text
    TokenId special = -1;  // lowest id of a control/unknown token with this text
  };
  struct Occurrence {
    uint32_t length;
    TokenId id;
    size_t begin;
  };
  static uint64_t EdgeKey(int32_t node, uint8_t byte) {
    return (static_cast<uint64_t>(node) << 8) | byte;
  }
  // Every token occurrence starting anywhere in `text` that may be taken.
  std::vector<Occurrence> FindOccurrences(absl::string_view text, bool parse_special,
                                          absl::Span<const ByteRange> plain_ranges) const;

  // A byte trie over the token texts; node 0 is the root.
  int32_t num_nodes_ = 1;
  absl::flat_hash_map<uint64_t, int32_t> edges_;
  absl::flat_hash_map<int32_t, Terminal> terminals_;  // node -> tokens ending there
  std::array<bool, 256> first_byte_{};                // some token starts with this byte
};

}  // namespace quill::engine
