#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/tokenizer/tokenizer.h"

namespace quill::engine {

// GGUF token types (tokenizer.ggml.token_type).
enum class TokenType : int32_t {
  kUndefined = 0,  // treated as normal
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,  // byte-fallback piece "<0xNN>"
};

// Everything a tokenizer is built from: the tokenizer.ggml.* metadata as plain values,
// so the algorithms can be built and tested without a GGUF file.
struct VocabData {
  std::string model;  // "llama" (SentencePiece BPE) or "gpt2" (byte-level BPE)
  std::string pre;    // gpt2: tokenizer.ggml.pre ("" if absent); see pretokenizer_families.h
  std::vector<std::string> tokens;  // id -> piece text
  std::vector<float> scores;        // empty: all 0 (llama merge priority, higher first)
  std::vector<int32_t> types;       // empty: all normal (TokenType values)
  std::vector<std::string> merges;  // gpt2: "left right", rank = index
  TokenId bos_id = -1;              // -1: none
  TokenId eos_id = -1;
  TokenId unk_id = -1;
  TokenId eot_id = -1;  // end of turn: also ends generation
  TokenId eom_id = -1;  // end of message: also ends generation
  // nullopt: the model's default (add_bos: true for llama and for gpt2 with the Llama 3
  // pre-tokenizer, else false; add_eos: false; add_space_prefix: true, llama only).
  std::optional<bool> add_bos;
  std::optional<bool> add_eos;
  std::optional<bool> add_space_prefix;
};

// The byte of a byte-fallback piece "<0xNN>" (two hex digits), or -1.
int ParseBytePiece(absl::string_view text);

// INVALID_ARGUMENT (naming the problem) for an unsupported model or pre-tokenizer,
// arrays of different lengths, unknown token types, special ids out of range, a byte
// token that is not "<0xNN>", a merge without a space, or a gpt2 vocabulary missing the
// byte symbol of the space or of a printable ASCII character.
absl::Status ValidateVocabData(const VocabData& vocab);

// Validates `vocab` and builds the tokenizer for vocab.model.
absl::StatusOr<std::unique_ptr<Tokenizer>> CreateTokenizer(VocabData vocab);

}  // namespace quill::engine
