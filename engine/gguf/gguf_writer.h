#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/gguf/gguf_file.h"

namespace quill::engine {

// Builds a GGUF v3 file in memory and writes it. Used by quill-make-model and by tests
// that need their own fixtures (including deliberately corrupted ones).
class GgufWriter {
 public:
  void SetUint32(absl::string_view key, uint32_t value);
  void SetInt32(absl::string_view key, int32_t value);
  void SetUint64(absl::string_view key, uint64_t value);
  void SetFloat32(absl::string_view key, float value);
  void SetBool(absl::string_view key, bool value);
  void SetString(absl::string_view key, absl::string_view value);
  void SetStringArray(absl::string_view key, absl::Span<const std::string> values);
  void SetFloat32Array(absl::string_view key, absl::Span<const float> values);
  void SetInt32Array(absl::string_view key, absl::Span<const int32_t> values);
  // Copies every metadata key starting with `prefix` (e.g. "tokenizer.") from `source`,
  // with its stored type.
  absl::Status CopyKeys(const GgufFile& source, absl::string_view prefix);

  // `data` holds the tensor's bytes in the encoding of `type` (size checked at Write).
  void AddTensor(absl::string_view name, GgmlType type, std::vector<int64_t> dims,
                 std::vector<uint8_t> data);

  // Serializes the whole file (v3, alignment 32).
  absl::StatusOr<std::vector<uint8_t>> Serialize() const;
  absl::Status WriteFile(const std::string& path) const;
  // ... (private representation chosen by the implementation)
};

}  // namespace quill::engine
