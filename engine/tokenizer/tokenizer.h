#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/gguf/gguf_file.h"

namespace quill::engine {

using TokenId = int32_t;

// A half-open byte range [begin, end) of a text.
struct ByteRange {
  size_t begin = 0;
  size_t end = 0;
};

// A tokenizer built from GGUF metadata (tokenizer.ggml.*): "llama" (SentencePiece BPE by
// score with byte fallback) or "gpt2" (byte-level BPE over merges, after the split
// patterns of the family named by tokenizer.ggml.pre). Immutable; every method is const
// and thread-safe.
class Tokenizer {
 public:
  // INVALID_ARGUMENT for a missing/unsupported tokenizer model, an unsupported
  // pre-tokenizer (naming the tokenizer.ggml.pre value) or inconsistent arrays.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromGguf(const GgufFile& file);
  virtual ~Tokenizer() = default;

  // Text -> ids. With add_special, BOS is prepended when the vocabulary says
  // add_bos_token (and EOS appended when it says add_eos_token); an empty result becomes
  // {BOS} if the vocabulary has one, so a prompt is never empty (GPT-2: <|endoftext|>).
  // Control-token text (e.g. "<|im_end|>", "<s>") inside `text` is plain text;
  // user-defined tokens (added tokens that are not special, e.g. Qwen2's "<think>") are
  // recognized as themselves, as Hugging Face and llama.cpp do. INVALID_ARGUMENT if
  // `text` is not valid UTF-8 ("prompt is not valid UTF-8 at byte N").
  virtual absl::StatusOr<std::vector<TokenId>> Encode(absl::string_view text,
                                                      bool add_special) const = 0;

  // Like Encode, but the text of control, unknown and user-defined tokens becomes those
  // tokens, found as llama.cpp's parse_special finds them: longer token texts first,
  // each at its leftmost occurrences that overlap no token found before. A control or
  // unknown token whose text overlaps one of `plain_ranges` (byte offsets into `text`,
  // half-open, in any order; e.g. where a chat template put message content) stays
  // plain text; user-defined tokens are found everywhere, as Encode finds them. The text
  // between found tokens is tokenized as Encode tokenizes a whole text (SentencePiece:
  // with the space prefix at the start and after every special token, as llama.cpp
  // does). `add_special` adds BOS/EOS as Encode does; a template that writes its own BOS
  // text wants false. INVALID_ARGUMENT for invalid UTF-8 or a range with begin > end or
  // end > text.size().
  virtual absl::StatusOr<std::vector<TokenId>> EncodeWithSpecialTokens(
      absl::string_view text, bool add_special, absl::Span<const ByteRange> plain_ranges) const = 0;

  // The bytes a token stands for (byte-fallback pieces give their byte, "▁" gives a
  // space, GPT-2 byte-level symbols their bytes); control tokens give "". May be a
  // fragment of a UTF-8 character.
  virtual std::string TokenBytes(TokenId id) const = 0;

  // A token's text exactly as the vocabulary stores it (tokenizer.ggml.tokens), e.g.
  // "<|begin_of_text|>", "▁Hello" or "ĠHello"; "" for an id out of range. Lets the chat
  // layer pass bos_token/eos_token strings to templates. Valid while the tokenizer lives.
  virtual absl::string_view token_text(TokenId id) const = 0;

  // ids -> text: the concatenated TokenBytes, with the SentencePiece leading space
  // removed when `ids` starts right after BOS (`strip_leading_space`). Invalid UTF-8 is
  // replaced with U+FFFD.
  std::string Decode(absl::Span<const TokenId> ids, bool strip_leading_space = false) const;

  virtual int vocab_size() const = 0;
  virtual TokenId bos_id() const = 0;  // -1 if none
  virtual TokenId eos_id() const = 0;  // -1 if none
  virtual bool add_bos() const = 0;
  // True for the ids in end_of_generation_ids().
  virtual bool IsEndOfGeneration(TokenId id) const = 0;
  // Every id that ends a generation or a chat turn, sorted: the EOS, EOT and EOM ids and
  // the tokens whose text is a known end-of-turn string (<|eot_id|>, <|im_end|>,
  // <end_of_turn>, <|endoftext|>, ...), as llama.cpp derives its end-of-generation set
  // (end_of_generation.h has the list). Valid while the tokenizer lives.
  virtual absl::Span<const TokenId> end_of_generation_ids() const = 0;
  virtual bool IsControl(TokenId id) const = 0;
  virtual std::string model_name() const = 0;  // "llama" or "gpt2"
  // True if Encode prepends a SentencePiece space (llama add_space_prefix); only then do
  // Decode and IncrementalDetokenizer strip a leading space.
  virtual bool adds_space_prefix() const { return false; }
};

// Per-sequence streaming decoder: turns tokens into text as they arrive and never emits
// half a UTF-8 character. Holds a reference to the tokenizer, which must outlive it.
class IncrementalDetokenizer {
 public:
  // With strip_leading_space, a leading SentencePiece space of the very first emitted
  // text is dropped (use it when the first token follows BOS directly).
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer, bool strip_leading_space = false);
  // Appends one token; returns the text that is now complete (possibly empty). Bytes
  // that can never form a valid character are emitted as U+FFFD right away.
  std::string Push(TokenId id);
  // End of stream: returns any held-back bytes, invalid ones as U+FFFD.
  std::string Flush();

 private:
  // Applies the leading-space rule to the first non-empty text.
  std::string Emit(std::string text);

  const Tokenizer& tokenizer_;
  bool strip_leading_space_;
  bool emitted_any_ = false;
  std::string pending_;  // bytes of an incomplete UTF-8 character
};

}  // namespace quill::engine
