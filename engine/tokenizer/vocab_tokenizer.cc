#include "engine/tokenizer/vocab_tokenizer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/base/utf8.h"
#include "engine/tokenizer/end_of_generation.h"

namespace quill::engine {

VocabTokenizer::VocabTokenizer(const VocabData& vocab, bool default_add_bos)
    : model_name_(vocab.model),
      token_text_(vocab.tokens),
      bos_id_(vocab.bos_id),
      eos_id_(vocab.eos_id),
      add_bos_(vocab.add_bos.value_or(default_add_bos)),
      add_eos_(vocab.add_eos.value_or(false)) {
  types_.resize(vocab.tokens.size(), TokenType::kNormal);
  for (size_t i = 0; i < vocab.types.size(); ++i) {
    types_[i] = static_cast<TokenType>(vocab.types[i]);
  }
  EndOfGeneration eog = DeriveEndOfGeneration(vocab);
  for (TokenId id : eog.control_ids) types_[id] = TokenType::kControl;
  end_of_generation_ = std::move(eog.ids);
  for (size_t i = 0; i < vocab.tokens.size(); ++i) {
    const TokenId id = static_cast<TokenId>(i);
    // Token texts that are not valid UTF-8 can never occur in (valid) input text.
    if (FindInvalidUtf8(vocab.tokens[i]) != absl::string_view::npos) continue;
    switch (types_[i]) {
      case TokenType::kUserDefined:
        special_tokens_.Add(id, vocab.tokens[i], /*always=*/true);
        break;
      case TokenType::kControl:
      case TokenType::kUnknown:
        special_tokens_.Add(id, vocab.tokens[i], /*always=*/false);
        break;
      default:
        break;
    }
  }
}

void VocabTokenizer::InitTokenBytes(const std::vector<std::string>& tokens) {
  token_bytes_.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i)
    token_bytes_.push_back(TokenBytesOf(tokens[i], types_[i]));
}

absl::StatusOr<std::vector<TokenId>> VocabTokenizer::Encode(absl::string_view text,
                                                            bool add_special) const {
  return EncodeFragments(text, add_special, /*parse_special=*/false, {});
}

absl::StatusOr<std::vector<TokenId>> VocabTokenizer::EncodeWithSpecialTokens(
    absl::string_view text, bool add_special, absl::Span<const ByteRange> plain_ranges) const {
  for (const ByteRange& range : plain_ranges) {
    if (range.begin > range.end || range.end > text.size()) {
      return absl::InvalidArgumentError(absl::StrCat("plain-text range [", range.begin, ", ",
                                                     range.end, ") is not within the ", text.size(),
                                                     "-byte text"));
    }
  }
  return EncodeFragments(text, add_special, /*parse_special=*/true, plain_ranges);
}

absl::StatusOr<std::vector<TokenId>> VocabTokenizer::EncodeFragments(
    absl::string_view text, bool add_special, bool parse_special,
    absl::Span<const ByteRange> plain_ranges) const {
  const size_t bad = FindInvalidUtf8(text);
  if (bad != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("prompt is not valid UTF-8 at byte ", bad));
  }
  std::vector<TokenId> ids;
  ids.reserve(text.size() / 3 + 2);  // typical text averages over 3 bytes per token
  if (add_special && add_bos_ && bos_id_ >= 0) ids.push_back(bos_id_);
  std::vector<TextFragment> fragments;
  special_tokens_.Partition(text, parse_special, plain_ranges, &fragments);
  bool after_special = true;  // the start of the text counts as following a special token
  for (const TextFragment& fragment : fragments) {
    if (fragment.token >= 0) {
      ids.push_back(fragment.token);
      after_special = true;
      continue;
    }
    QUILL_RETURN_IF_ERROR(EncodeText(fragment.text, after_special, &ids));
    after_special = false;
  }
  if (add_special && add_eos_ && eos_id_ >= 0) ids.push_back(eos_id_);
  // A model cannot start from zero tokens: an empty prompt becomes BOS alone, even for a
  // vocabulary that does not otherwise add BOS (GPT-2's <|endoftext|>).
  if (add_special && ids.empty() && bos_id_ >= 0) ids.push_back(bos_id_);
  return ids;
}

std::string VocabTokenizer::TokenBytes(TokenId id) const {
  if (id < 0 || id >= vocab_size()) return "";
  return token_bytes_[id];
}

absl::string_view VocabTokenizer::token_text(TokenId id) const {
  if (id < 0 || id >= vocab_size()) return "";
  return token_text_[id];
}

bool VocabTokenizer::IsEndOfGeneration(TokenId id) const {
  return std::binary_search(end_of_generation_.begin(), end_of_generation_.end(), id);
}

bool VocabTokenizer::IsControl(TokenId id) const {
  return id >= 0 && id < vocab_size() && types_[id] == TokenType::kControl;
}

}  // namespace quill::engine
