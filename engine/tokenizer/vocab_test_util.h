#pragma once

// Helpers for the tests that read the shared vocabularies (../shared/vocab): locating
// them, loading a tokenizer from a GGUF file, and the llama.cpp test vectors.

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"

namespace quill::engine::vocab_testing {

// $QUILL_SHARED_DIR, or "" if unset.
std::string SharedDir();

// The whole file; false if it cannot be read.
bool ReadFile(const std::string& path, std::string* contents);

// The tokenizer of a GGUF file; nullptr (with a test failure) if it does not load.
std::unique_ptr<Tokenizer> LoadTokenizer(const std::string& path);

// Encode / EncodeWithSpecialTokens, with a test failure (and {}) on error.
std::vector<TokenId> EncodeOrDie(const Tokenizer& t, absl::string_view text, bool add_special);
std::vector<TokenId> EncodeSpecialOrDie(const Tokenizer& t, absl::string_view text,
                                        bool add_special, std::vector<ByteRange> plain_ranges = {});

// The llama.cpp vectors of `gguf_path` (its .inp and .out files): the texts and, for
// each, the ids expected without BOS/EOS and without special-token parsing.
struct Vectors {
  std::vector<std::string> texts;
  std::vector<std::vector<TokenId>> ids;
  // The ids of `text`, which must be one of the texts (a test failure otherwise).
  std::vector<TokenId> IdsOf(absl::string_view text) const;
};
bool ReadVectors(const std::string& gguf_path, Vectors* vectors);

}  // namespace quill::engine::vocab_testing

// Skips the test when the shared assets (`path`, a file below them) are absent.
#define SKIP_IF_NO_SHARED(path)                                           \
  do {                                                                    \
    std::ifstream probe_(path);                                           \
    if (::quill::engine::vocab_testing::SharedDir().empty() || !probe_) { \
      GTEST_SKIP() << "shared assets not found at '" << (path) << "'";    \
    }                                                                     \
  } while (0)
