#include "engine/tokenizer/tokenizer.h"

#include "engine/base/utf8.h"

namespace quill::engine {

std::string Tokenizer::Decode(absl::Span<const TokenId> ids, bool strip_leading_space) const {
  std::string bytes;
  for (TokenId id : ids) bytes += TokenBytes(id);
  absl::string_view view(bytes);
  if (strip_leading_space && adds_space_prefix() && !view.empty() && view.front() == ' ') {
    view.remove_prefix(1);
  }
  std::string text;
  text.reserve(view.size());
  AppendSanitizedUtf8(view, /*hold_back_truncated=*/false, &text);
  return text;
}

}  // namespace quill::engine
