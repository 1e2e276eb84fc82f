#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
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

  // Produces a tensor's bytes on demand: fills `out` (cleared by the caller) with exactly
  // the tensor's encoded bytes.
  using TensorProducer = std::function<absl::Status(std::vector<uint8_t>* out)>;
  // Declares a tensor whose bytes are produced only while the file is written, one tensor
  // at a time, so that a multi-gigabyte model is never held in memory whole.
  void AddStreamedTensor(absl::string_view name, GgmlType type, std::vector<int64_t> dims,
                         TensorProducer producer);

  // Serializes the whole file (v3, alignment 32 unless general.alignment was set).
  // Setting a key twice keeps its first position and the last value. INVALID_ARGUMENT
  // for duplicate tensor names, bad dims, or data whose size does not match.
  absl::StatusOr<std::vector<uint8_t>> Serialize() const;
  // Streams the file to `path` (through a temporary file renamed at the end, so a failed
  // write never leaves a partial file under `path`).
  absl::Status WriteFile(const std::string& path) const;

 private:
  struct Kv {
    std::string key;
    GgufValueType type;
    std::vector<uint8_t> value;  // encoded exactly as in the file
  };
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> dims;
    std::vector<uint8_t> data;  // used when producer is empty
    TensorProducer producer;
  };

  void SetRaw(absl::string_view key, GgufValueType type, std::vector<uint8_t> value);
  // Serializes through `write`, which appends bytes to the output.
  absl::Status WriteTo(absl::FunctionRef<absl::Status(absl::Span<const uint8_t>)> write) const;

  std::vector<Kv> kvs_;
  absl::flat_hash_map<std::string, size_t> kv_index_;
  std::vector<Tensor> tensors_;
};

}  // namespace quill::engine
