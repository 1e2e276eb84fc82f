#include "engine/tokenizer/vocab_data.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/base/utf8.h"
#include "engine/tokenizer/bpe_tokenizer.h"
#include "engine/tokenizer/byte_unicode.h"
#include "engine/tokenizer/pretokenizer.h"
#include "engine/tokenizer/pretokenizer_families.h"
#include "engine/tokenizer/spm_tokenizer.h"

namespace quill::engine {
namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

absl::Status CheckSpecialId(absl::string_view name, TokenId id, size_t vocab_size) {
  if (id == -1 || (id >= 0 && static_cast<size_t>(id) < vocab_size)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("tokenizer ", name, " id ", id,
                                                 " is out of range for a vocabulary of ",
                                                 vocab_size, " tokens"));
}

absl::Status ValidateGpt2(const VocabData& vocab) {
  QUILL_RETURN_IF_ERROR(FindPreTokenizerSpec(vocab.pre).status());
  for (size_t i = 0; i < vocab.merges.size(); ++i) {
    const size_t space = vocab.merges[i].find(' ', 1);
    if (space == std::string::npos || space + 1 == vocab.merges[i].size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer merge ", i, " '", vocab.merges[i], "' is not \"left right\""));
    }
  }
  // Byte symbols are the fallback for unmerged text. Real vocabularies lack some that
  // text rarely or never needs (Falcon: most C0 controls; Refact: 0xC0, 0xC1, 0xF5..);
  // those fail at Encode. Printable ASCII and the space must be there.
  absl::flat_hash_map<absl::string_view, size_t> ids;
  for (size_t i = 0; i < vocab.tokens.size(); ++i) {
    const bool control =
        !vocab.types.empty() && vocab.types[i] == static_cast<int32_t>(TokenType::kControl);
    if (!control) ids.emplace(vocab.tokens[i], i);
  }
  for (int b = 0x20; b <= 0x7E; ++b) {
    std::string symbol;
    AppendUtf8(ByteToUnicode()[b], &symbol);
    if (!ids.contains(symbol)) {
      return absl::InvalidArgumentError(
          absl::StrCat("gpt2 vocabulary has no token for byte ", b, " ('", symbol, "')"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int ParseBytePiece(absl::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  const int hi = HexDigit(text[3]);
  const int lo = HexDigit(text[4]);
  if (hi < 0 || lo < 0) return -1;
  return hi * 16 + lo;
}

absl::Status ValidateVocabData(const VocabData& vocab) {
  if (vocab.model != "llama" && vocab.model != "gpt2") {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported tokenizer model '", vocab.model, "' (supported: llama, gpt2)"));
  }
  const size_t n = vocab.tokens.size();
  if (n == 0) return absl::InvalidArgumentError("tokenizer vocabulary is empty");
  if (n > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError("tokenizer vocabulary is too large");
  }
  if (!vocab.scores.empty() && vocab.scores.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer has ", n, " tokens but ", vocab.scores.size(), " scores"));
  }
  if (!vocab.types.empty() && vocab.types.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer has ", n, " tokens but ", vocab.types.size(), " token types"));
  }
  for (size_t i = 0; i < vocab.types.size(); ++i) {
    const int32_t t = vocab.types[i];
    if (t < 0 || t > static_cast<int32_t>(TokenType::kByte)) {
      return absl::InvalidArgumentError(absl::StrCat("token ", i, " has unknown type ", t));
    }
    if (t == static_cast<int32_t>(TokenType::kByte) && ParseBytePiece(vocab.tokens[i]) < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("byte token ", i, " '", vocab.tokens[i], "' is not of the form <0xNN>"));
    }
  }
  QUILL_RETURN_IF_ERROR(CheckSpecialId("bos", vocab.bos_id, n));
  QUILL_RETURN_IF_ERROR(CheckSpecialId("eos", vocab.eos_id, n));
  QUILL_RETURN_IF_ERROR(CheckSpecialId("unknown", vocab.unk_id, n));
  QUILL_RETURN_IF_ERROR(CheckSpecialId("eot", vocab.eot_id, n));
  QUILL_RETURN_IF_ERROR(CheckSpecialId("eom", vocab.eom_id, n));
  if (vocab.model == "gpt2") QUILL_RETURN_IF_ERROR(ValidateGpt2(vocab));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Tokenizer>> CreateTokenizer(VocabData vocab) {
  QUILL_RETURN_IF_ERROR(ValidateVocabData(vocab));
  if (vocab.model == "llama") return std::unique_ptr<Tokenizer>(new SpmTokenizer(vocab));
  QUILL_ASSIGN_OR_RETURN(const PreTokenizerSpec spec, FindPreTokenizerSpec(vocab.pre));
  QUILL_ASSIGN_OR_RETURN(PreTokenizer pre, PreTokenizer::Create(spec));
  return std::unique_ptr<Tokenizer>(new BpeTokenizer(vocab, std::move(pre), spec.add_bos));
}

}  // namespace quill::engine
