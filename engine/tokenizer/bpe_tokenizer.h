#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "engine/tokenizer/pretokenizer.h"
#include "engine/tokenizer/vocab_tokenizer.h"

namespace quill::engine {

// Byte-level BPE ("gpt2"): the text is split into words by the family's pre-tokenizer
// (tokenizer.ggml.pre), each word's bytes are written in the byte-level alphabet, and
// within a word the adjacent pair with the lowest merge rank is merged until none is
// left (ties: leftmost). With ignore_merges (Llama 3) a word that is itself a token
// becomes that token at once. A final symbol that is not a token becomes one token per
// byte (INVALID_ARGUMENT if the vocabulary lacks one, as Falcon lacks most C0 control
// bytes). Control tokens (<|endoftext|>) are never produced from text.
class BpeTokenizer final : public VocabTokenizer {
 public:
  // `vocab` must have passed ValidateVocabData; `pre` is its pre-tokenizer and
  // `default_add_bos` the family's default for a file without add_bos_token.
  BpeTokenizer(const VocabData& vocab, PreTokenizer pre, bool default_add_bos);

 protected:
  absl::Status EncodeText(absl::string_view text, bool after_special,
                          std::vector<TokenId>* ids) const override;
  std::string TokenBytesOf(const std::string& text, TokenType type) const override;

 private:
  struct Merge {
    int32_t rank;
    int32_t result;  // piece index of the merged symbol
  };
  struct Symbol;
  struct Scratch;
  // Piece index of `text`, adding it past the token ids if it is not a token.
  int32_t InternPiece(const std::string& text);
  static uint64_t PairKey(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  // INVALID_ARGUMENT if the word needs the token of a byte the vocabulary lacks.
  absl::Status EncodeWord(absl::string_view word, Scratch& scratch,
                          std::vector<TokenId>* ids) const;

  // Piece indexes: a token id for every non-control token; strings that only occur in
  // merges get indexes >= vocab size.
  absl::flat_hash_map<std::string, int32_t> piece_index_;
  int32_t num_pieces_ = 0;
  absl::flat_hash_map<uint64_t, Merge> merges_;  // (left piece, right piece) -> merge
  std::array<int32_t, 256> byte_piece_;          // piece of each byte's alphabet symbol
  PreTokenizer pre_;
  // ignore_merges only: the bytes of every normal token -> its id.
  absl::flat_hash_map<std::string, TokenId> whole_words_;
};

}  // namespace quill::engine
