#pragma once

#include <vector>

#include "absl/strings/string_view.h"

namespace quill::engine {

// Splits `text` (valid UTF-8) into the words matched, left to right, by the GPT-2
// pre-tokenizer regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// implemented by hand (std::regex has no \p classes). The words are views into `text`
// and concatenate back to it.
std::vector<absl::string_view> Gpt2PreTokenize(absl::string_view text);

}  // namespace quill::engine
