#include "engine/base/utf8.h"
#include "engine/tokenizer/tokenizer.h"

namespace quill::engine {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool strip_leading_space)
    : tokenizer_(tokenizer), strip_leading_space_(strip_leading_space) {}

std::string IncrementalDetokenizer::Push(TokenId id) {
  pending_ += tokenizer_.TokenBytes(id);
  std::string text;
  // Ill-formed bytes can never become valid and are replaced at once; only a valid but
  // incomplete character at the end waits for the next token.
  const size_t consumed = AppendSanitizedUtf8(pending_, /*hold_back_truncated=*/true, &text);
  pending_.erase(0, consumed);
  return Emit(std::move(text));
}

std::string IncrementalDetokenizer::Flush() {
  std::string text;
  AppendSanitizedUtf8(pending_, /*hold_back_truncated=*/false, &text);
  pending_.clear();
  return Emit(std::move(text));
}

std::string IncrementalDetokenizer::Emit(std::string text) {
  if (text.empty() || emitted_any_) return text;
  emitted_any_ = true;
  // Same rule as Tokenizer::Decode: the first character of the whole output.
  if (strip_leading_space_ && tokenizer_.adds_space_prefix() && text.front() == ' ') {
    text.erase(0, 1);
  }
  return text;
}

}  // namespace quill::engine
