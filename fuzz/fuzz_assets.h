#pragma once

// Where the fuzz targets find the vocabularies they load once at startup: the repository's
// built-in model and ../shared (paths compiled in; QUILL_SOURCE_DIR / QUILL_SHARED_DIR in
// the environment override them).

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "engine/gguf/gguf_file.h"
#include "engine/tokenizer/tokenizer.h"

namespace quill::fuzz {

inline std::string AssetPath(const char* env, const char* fallback, const char* relative) {
  const char* dir = std::getenv(env);
  return std::string(dir != nullptr ? dir : fallback) + "/" + relative;
}

// The tokenizer of a GGUF file, or null (with a note on stderr) if it cannot be loaded.
inline std::unique_ptr<engine::Tokenizer> LoadTokenizer(const std::string& path) {
  auto file = engine::GgufFile::Open(path);
  if (!file.ok()) {
    std::fprintf(stderr, "fuzz: skipping %s: %s\n", path.c_str(),
                 std::string(file.status().message()).c_str());
    return nullptr;
  }
  auto tokenizer = engine::Tokenizer::FromGguf(**file);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "fuzz: skipping %s: %s\n", path.c_str(),
                 std::string(tokenizer.status().message()).c_str());
    return nullptr;
  }
  return *std::move(tokenizer);
}

// The built-in kjv-1m tokenizer (SentencePiece); aborts if it is missing, since every
// target that asks for it needs it.
inline std::unique_ptr<engine::Tokenizer> BuiltinTokenizer() {
  auto tokenizer =
      LoadTokenizer(AssetPath("QUILL_SOURCE_DIR", QUILL_FUZZ_SOURCE_DIR, "models/kjv-1m.gguf"));
  if (tokenizer == nullptr) std::abort();
  return tokenizer;
}

}  // namespace quill::fuzz
