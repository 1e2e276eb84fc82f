#pragma once

#include <array>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "engine/tokenizer/vocab_tokenizer.h"

namespace quill::engine {

// SentencePiece BPE by score ("llama"): spaces become U+2581 (and one is prepended with
// add_space_prefix, at the start and after every special token, as llama.cpp does), the
// text is split into characters, and the adjacent pair whose concatenation is a piece with
// the highest score is merged until none is left (ties: leftmost). A leftover character
// that is not a piece becomes its <0xNN> byte pieces, or the unknown token without them.
// Only normal and user-defined pieces take part, so control text such as "<s>" stays
// plain text.
//
// When no piece has a U+2581 after another character (true of SentencePiece models that
// split by whitespace, such as Llama 2's), no merge can cross the start of a run of
// U+2581, so the text is merged one such word at a time: the same result as merging it
// whole, in a working set that stays in cache.
class SpmTokenizer final : public VocabTokenizer {
 public:
  // `vocab` must have passed ValidateVocabData.
  explicit SpmTokenizer(const VocabData& vocab);

  bool adds_space_prefix() const override { return add_space_prefix_; }

 protected:
  absl::Status EncodeText(absl::string_view text, bool after_special,
                          std::vector<TokenId>* ids) const override;
  std::string TokenBytesOf(const std::string& text, TokenType type) const override;

 private:
  struct Symbol;
  struct Scratch;
  // Merges `text` (normalized, non-empty) and appends its ids.
  absl::Status EncodeSegment(absl::string_view text, Scratch& scratch,
                             std::vector<TokenId>* ids) const;
  // Appends the id(s) of one final symbol.
  absl::Status EmitSymbol(absl::string_view piece, std::vector<TokenId>* ids) const;

  absl::flat_hash_map<std::string, TokenId> piece_to_id_;  // mergeable pieces only
  std::vector<float> scores_;
  std::array<TokenId, 256> byte_to_id_;  // -1 if the byte has no piece
  TokenId unk_id_;
  bool add_space_prefix_;
  bool merges_stay_within_words_ = false;  // see the class comment
};

}  // namespace quill::engine
