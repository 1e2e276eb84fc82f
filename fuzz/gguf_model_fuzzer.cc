// libFuzzer target: arbitrary bytes as a GGUF file, through everything a model load reads
// before the weights: GgufFile::Open (every count, length, type and offset validated),
// ModelConfig::FromGguf + Validate + ComputeAccounting + ResolveDecoder (each family's
// metadata: soft-caps, sliding window, rope_freqs), Tokenizer::FromGguf, and a short
// encode/decode with whatever tokenizer the file describes. Any crash, sanitizer report or
// broken invariant (QUILL_CHECK aborts) is a finding.

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/base/check.h"
#include "engine/base/utf8.h"
#include "engine/gguf/gguf_file.h"
#include "engine/model/decoder_description.h"
#include "engine/model/model_config.h"
#include "engine/tokenizer/tokenizer.h"

namespace {

// One in-memory file, rewritten for each input; GgufFile::Open maps it by path.
int MemoryFile() {
  static const int fd = memfd_create("gguf_model_fuzzer", 0);
  QUILL_CHECK(fd >= 0);
  return fd;
}

bool WriteAll(int fd, const uint8_t* data, size_t size) {
  if (ftruncate(fd, 0) != 0) return false;
  size_t done = 0;
  while (done < size) {
    const ssize_t n = pwrite(fd, data + done, size - done, static_cast<off_t>(done));
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

void ExerciseTokenizer(const quill::engine::Tokenizer& tokenizer) {
  using quill::engine::TokenId;
  const int vocab = tokenizer.vocab_size();
  QUILL_CHECK(vocab > 0);
  for (const char* text : {"In the beginning", " caf\xC3\xA9  \xE4\xB8\xAD\n", ""}) {
    auto ids = tokenizer.Encode(text, /*add_special=*/true);
    if (!ids.ok()) continue;
    for (TokenId id : *ids) QUILL_CHECK(id >= 0 && id < vocab);
    QUILL_CHECK(quill::engine::IsValidUtf8(tokenizer.Decode(*ids, true)));
  }
  // Every token's bytes, and a stream of the first few hundred ids, decode to valid UTF-8.
  quill::engine::IncrementalDetokenizer detokenizer(tokenizer);
  std::string text;
  for (TokenId id = 0; id < vocab && id < 512; ++id) {
    (void)tokenizer.TokenBytes(id);
    text += detokenizer.Push(id);
  }
  text += detokenizer.Flush();
  QUILL_CHECK(quill::engine::IsValidUtf8(text));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = MemoryFile();
  if (!WriteAll(fd, data, size)) return 0;
  auto file = quill::engine::GgufFile::Open("/proc/self/fd/" + std::to_string(fd));
  if (!file.ok()) return 0;
  const quill::engine::GgufFile& gguf = **file;
  QUILL_CHECK(gguf.file_size() == size);
  for (const quill::engine::GgufTensorInfo& t : gguf.tensors()) {
    QUILL_CHECK(t.file_offset + t.size_bytes <= gguf.file_size());
  }

  auto config = quill::engine::ModelConfig::FromGguf(gguf);
  if (config.ok() && config->Validate().ok()) {
    const auto accounting = quill::engine::ComputeAccounting(
        *config, config->context_length, quill::engine::kernels::KvElement::kF32);
    QUILL_CHECK(accounting.total_params > 0 && accounting.kv_bytes_per_token > 0);
    auto decoder = quill::engine::ResolveDecoder(gguf, *config);
    if (decoder.ok()) QUILL_CHECK(!quill::engine::DecoderSummary(*decoder).empty());
  }
  auto tokenizer = quill::engine::Tokenizer::FromGguf(gguf);
  if (tokenizer.ok()) ExerciseTokenizer(**tokenizer);
  return 0;
}
