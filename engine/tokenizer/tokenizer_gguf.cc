// Tokenizer::FromGguf: reads tokenizer.ggml.* into a VocabData. Kept apart from the
// algorithms so they build and test without the GGUF reader.
#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/gguf/gguf_file.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/vocab_data.h"

namespace quill::engine {
namespace {

// Reads an optional token id; a stored -1 means "none". Absent keys keep `*id`.
absl::Status ReadOptionalId(const GgufFile& file, absl::string_view key, TokenId* id) {
  if (!file.HasKey(key)) return absl::OkStatus();
  QUILL_ASSIGN_OR_RETURN(const int64_t value, file.GetInt(key));
  if (value < -1 || value > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(key, " = ", value, " is not a token id"));
  }
  *id = static_cast<TokenId>(value);
  return absl::OkStatus();
}

absl::Status ReadOptionalBool(const GgufFile& file, absl::string_view key,
                              std::optional<bool>* flag) {
  if (!file.HasKey(key)) return absl::OkStatus();
  QUILL_ASSIGN_OR_RETURN(const bool value, file.GetBool(key));
  *flag = value;
  return absl::OkStatus();
}

// Type errors from the reader are INVALID_ARGUMENT already; a missing required key
// becomes INVALID_ARGUMENT too (the file is not a usable model, not a missing file).
absl::Status AsInvalid(const absl::Status& status, absl::string_view key) {
  if (status.ok() || absl::IsInvalidArgument(status)) return status;
  return absl::InvalidArgumentError(absl::StrCat("tokenizer key ", key, ": ", status.message()));
}

absl::StatusOr<VocabData> ReadVocabData(const GgufFile& file) {
  VocabData vocab;
  auto model = file.GetString("tokenizer.ggml.model");
  QUILL_RETURN_IF_ERROR(AsInvalid(model.status(), "tokenizer.ggml.model"));
  vocab.model = *std::move(model);
  auto tokens = file.GetStringArray("tokenizer.ggml.tokens");
  QUILL_RETURN_IF_ERROR(AsInvalid(tokens.status(), "tokenizer.ggml.tokens"));
  vocab.tokens = *std::move(tokens);
  if (file.HasKey("tokenizer.ggml.pre")) {
    QUILL_ASSIGN_OR_RETURN(vocab.pre, file.GetString("tokenizer.ggml.pre"));
  }
  if (file.HasKey("tokenizer.ggml.scores")) {
    QUILL_ASSIGN_OR_RETURN(vocab.scores, file.GetFloatArray("tokenizer.ggml.scores"));
  }
  if (file.HasKey("tokenizer.ggml.token_type")) {
    QUILL_ASSIGN_OR_RETURN(vocab.types, file.GetInt32Array("tokenizer.ggml.token_type"));
  }
  if (file.HasKey("tokenizer.ggml.merges")) {
    QUILL_ASSIGN_OR_RETURN(vocab.merges, file.GetStringArray("tokenizer.ggml.merges"));
  }
  if (vocab.model == "llama" && vocab.tokens.size() > 2) {
    // SentencePiece's fixed layout, for old files that do not store the ids.
    vocab.unk_id = 0;
    vocab.bos_id = 1;
    vocab.eos_id = 2;
  }
  QUILL_RETURN_IF_ERROR(ReadOptionalId(file, "tokenizer.ggml.bos_token_id", &vocab.bos_id));
  QUILL_RETURN_IF_ERROR(ReadOptionalId(file, "tokenizer.ggml.eos_token_id", &vocab.eos_id));
  QUILL_RETURN_IF_ERROR(ReadOptionalId(file, "tokenizer.ggml.unknown_token_id", &vocab.unk_id));
  QUILL_RETURN_IF_ERROR(ReadOptionalId(file, "tokenizer.ggml.eot_token_id", &vocab.eot_id));
  QUILL_RETURN_IF_ERROR(ReadOptionalId(file, "tokenizer.ggml.eom_token_id", &vocab.eom_id));
  QUILL_RETURN_IF_ERROR(ReadOptionalBool(file, "tokenizer.ggml.add_bos_token", &vocab.add_bos));
  QUILL_RETURN_IF_ERROR(ReadOptionalBool(file, "tokenizer.ggml.add_eos_token", &vocab.add_eos));
  QUILL_RETURN_IF_ERROR(
      ReadOptionalBool(file, "tokenizer.ggml.add_space_prefix", &vocab.add_space_prefix));
  return vocab;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const GgufFile& file) {
  QUILL_ASSIGN_OR_RETURN(VocabData vocab, ReadVocabData(file));
  return CreateTokenizer(std::move(vocab));
}

}  // namespace quill::engine
