#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace quill::engine {

// How one byte-level BPE family splits text before the merges: its published split
// patterns (Hugging Face tokenizer.json / llama.cpp's vocabulary code) and its flags.
struct PreTokenizerSpec {
  std::string name;  // the canonical tokenizer.ggml.pre value
  // Applied in order: the first splits the text into matches and the text between
  // them; each further pattern splits every piece of the previous step the same way,
  // seeing that piece as its whole subject.
  std::vector<std::string> patterns;
  // Llama 3: a pre-token that is itself a vocabulary entry becomes that one token,
  // without merges.
  bool ignore_merges = false;
  // Default of tokenizer.ggml.add_bos_token when the file does not say.
  bool add_bos = false;
};

// The spec for a tokenizer.ggml.pre value. "" (key absent) and "default" mean GPT-2's
// pattern. INVALID_ARGUMENT naming `pre` and the supported values otherwise.
absl::StatusOr<PreTokenizerSpec> FindPreTokenizerSpec(absl::string_view pre);

// The supported tokenizer.ggml.pre values, comma-separated (for messages and docs).
std::string SupportedPreTokenizers();

}  // namespace quill::engine
