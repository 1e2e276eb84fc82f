#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace quill::engine {

// Tensor element types, numbered as in GGUF/ggml. The reader knows the sizes of every
// standard ggml type (so that offsets of any file can be validated); the model loader
// supports F32, F16, BF16 and Q8_0.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kBF16 = 30,
};

// "F32", "Q8_0", ...; "unknown(N)" for a type the reader does not know.
std::string GgmlTypeName(GgmlType type);

// Metadata value types, numbered as in the GGUF specification.
enum class GgufValueType : uint32_t {
  kUint8 = 0, kInt8 = 1, kUint16 = 2, kInt16 = 3, kUint32 = 4, kInt32 = 5,
  kFloat32 = 6, kBool = 7, kString = 8, kArray = 9, kUint64 = 10, kInt64 = 11, kFloat64 = 12,
};

// "uint32", "string", "array", ...; "unknown(N)" otherwise.
std::string GgufValueTypeName(GgufValueType type);

struct GgufTensorInfo {
  std::string name;
  GgmlType type;
  std::vector<int64_t> dims;  // GGUF order: dims[0] is the innermost (contiguous) dimension.
  int64_t num_elements = 0;
  uint64_t size_bytes = 0;
  uint64_t file_offset = 0;        // absolute offset of the data in the file
  const uint8_t* data = nullptr;   // into the mapping; valid while the GgufFile lives
};

// A GGUF file (v2 or v3), memory-mapped read-only. Open() validates every count, length,
// type, dimension and offset against the file size before using it and never allocates
// memory sized by an unchecked field. Immutable after Open(); safe to share across threads.
class GgufFile {
 public:
  // NOT_FOUND if the file does not exist; INVALID_ARGUMENT (DATA_LOSS for truncation)
  // with a message naming the offending key/tensor and offset for a malformed file.
  // Anything that reaches past the end of the file (a read, a declared length or count
  // that cannot fit in the remaining bytes, tensor data beyond the end) is DATA_LOSS, as
  // it is indistinguishable from a truncated file; every other defect is INVALID_ARGUMENT.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);

  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const;
  const std::string& path() const;
  uint64_t file_size() const;
  uint64_t alignment() const;

  bool HasKey(absl::string_view key) const;
  std::vector<std::string> Keys() const;  // in file order
  // The stored type of a key; NOT_FOUND if absent.
  absl::StatusOr<GgufValueType> TypeOf(absl::string_view key) const;

  // Typed getters. NOT_FOUND if the key is absent; INVALID_ARGUMENT naming the key, the
  // expected and the stored type if the type is wrong. Integer getters accept any integer
  // type whose value fits (a negative value for GetUint is an error).
  absl::StatusOr<uint64_t> GetUint(absl::string_view key) const;
  absl::StatusOr<int64_t> GetInt(absl::string_view key) const;
  absl::StatusOr<float> GetFloat(absl::string_view key) const;  // float32 or float64
  absl::StatusOr<bool> GetBool(absl::string_view key) const;
  absl::StatusOr<std::string> GetString(absl::string_view key) const;
  absl::StatusOr<std::vector<std::string>> GetStringArray(absl::string_view key) const;
  absl::StatusOr<std::vector<float>> GetFloatArray(absl::string_view key) const;
  absl::StatusOr<std::vector<int32_t>> GetInt32Array(absl::string_view key) const;
  // Length of an array value (any element type).
  absl::StatusOr<uint64_t> GetArrayLength(absl::string_view key) const;
  // Element type of an array value; INVALID_ARGUMENT if the key is not an array.
  absl::StatusOr<GgufValueType> ArrayElementType(absl::string_view key) const;
  // The value's bytes exactly as encoded in the file (for an array: element type, count,
  // then the elements), pointing into the mapping. Used to copy keys between files.
  absl::StatusOr<absl::Span<const uint8_t>> RawValue(absl::string_view key) const;

  // Drops the mapping's resident pages (MADV_DONTNEED): they stop counting towards the
  // process's memory until read again, which re-reads them from the file. Contents and
  // pointers stay valid (the mapping is read-only). For loaders that copied the weights
  // they use, so memory holds the copy and not the file as well.
  void ReleaseResidentPages() const;
  // The same for the pages holding tensor `t` (whole pages: a neighbour sharing its first
  // or last page is dropped too, and simply re-read if used). Loaders call it as soon as a
  // tensor is copied, so the load's peak holds one tensor of the file, not all of them.
  void ReleaseResidentPages(const GgufTensorInfo& t) const;

  const std::vector<GgufTensorInfo>& tensors() const;
  // nullptr if absent.
  const GgufTensorInfo* FindTensor(absl::string_view name) const;

 private:
  struct Impl;
  explicit GgufFile(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace quill::engine
