#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/tokenizer/special_tokens.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/vocab_data.h"

namespace quill::engine {

// What the two vocabulary-based tokenizers share: special ids, token types, the
// precomputed bytes of every token, UTF-8 validation, special-token recognition and
// BOS/EOS handling. Subclasses implement EncodeText (plain text -> ids) and TokenBytesOf.
class VocabTokenizer : public Tokenizer {
 public:
  absl::StatusOr<std::vector<TokenId>> Encode(absl::string_view text, bool add_special) const final;
  absl::StatusOr<std::vector<TokenId>> EncodeWithSpecialTokens(
      absl::string_view text, bool add_special,
      absl::Span<const ByteRange> plain_ranges) const final;
  std::string TokenBytes(TokenId id) const final;
  absl::string_view token_text(TokenId id) const final;
  int vocab_size() const final { return static_cast<int>(types_.size()); }
  TokenId bos_id() const final { return bos_id_; }
  TokenId eos_id() const final { return eos_id_; }
  bool add_bos() const final { return add_bos_; }
  bool IsEndOfGeneration(TokenId id) const final;
  absl::Span<const TokenId> end_of_generation_ids() const final { return end_of_generation_; }
  bool IsControl(TokenId id) const final;
  std::string model_name() const final { return model_name_; }

 protected:
  // `vocab` has passed ValidateVocabData. Call InitTokenBytes() at the end of the
  // subclass constructor (it calls the virtual TokenBytesOf). Tokens that end generation
  // by their text are typed control from here on (type()).
  VocabTokenizer(const VocabData& vocab, bool default_add_bos);

  // Appends the ids of `text` (valid, non-empty UTF-8 without special tokens) to `ids`.
  // `after_special` is true for the first text of the input and for text that follows
  // a special token (SentencePiece then prefixes a space).
  virtual absl::Status EncodeText(absl::string_view text, bool after_special,
                                  std::vector<TokenId>* ids) const = 0;
  // The bytes of token `id` given its text and type.
  virtual std::string TokenBytesOf(const std::string& text, TokenType type) const = 0;

  void InitTokenBytes(const std::vector<std::string>& tokens);
  TokenType type(TokenId id) const { return types_[id]; }

 private:
  // Encode with or without recognizing control/unknown token text.
  absl::StatusOr<std::vector<TokenId>> EncodeFragments(
      absl::string_view text, bool add_special, bool parse_special,
      absl::Span<const ByteRange> plain_ranges) const;

  std::string model_name_;
  std::vector<TokenType> types_;
  std::vector<std::string> token_text_;
  std::vector<std::string> token_bytes_;
  SpecialTokenMatcher special_tokens_;
  std::vector<TokenId> end_of_generation_;  // sorted
  TokenId bos_id_, eos_id_;
  bool add_bos_, add_eos_;
};

}  // namespace quill::engine
