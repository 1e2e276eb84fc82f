#include "engine/gguf/gguf_writer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/gguf/ggml_types.h"

namespace quill::engine {
namespace {

constexpr uint32_t kVersion = 3;
constexpr uint64_t kDefaultAlignment = 32;
constexpr uint64_t kMaxAlignment = uint64_t{1} << 30;

template <typename T>
void Append(std::vector<uint8_t>& out, T value) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &value, sizeof(T));
}

void AppendString(std::vector<uint8_t>& out, absl::string_view text) {
  Append<uint64_t>(out, text.size());
  out.insert(out.end(), text.begin(), text.end());
}

template <typename T>
std::vector<uint8_t> EncodeScalar(T value) {
  std::vector<uint8_t> out;
  Append(out, value);
  return out;
}

template <typename T>
std::vector<uint8_t> EncodeArray(GgufValueType element_type, absl::Span<const T> values) {
  std::vector<uint8_t> out;
  out.reserve(12 + values.size() * sizeof(T));
  Append<uint32_t>(out, static_cast<uint32_t>(element_type));
  Append<uint64_t>(out, values.size());
  for (const T& value : values) Append(out, value);
  return out;
}

uint64_t AlignUp(uint64_t offset, uint64_t alignment) {
  return (offset + alignment - 1) / alignment * alignment;
}

// Appends bytes through the caller's writer, tracking the offset for padding.
class Sink {
 public:
  explicit Sink(absl::FunctionRef<absl::Status(absl::Span<const uint8_t>)> write) : write_(write) {}
  absl::Status Write(absl::Span<const uint8_t> bytes) {
    QUILL_RETURN_IF_ERROR(write_(bytes));
    offset_ += bytes.size();
    return absl::OkStatus();
  }
  absl::Status PadTo(uint64_t alignment) {
    static const uint8_t kZeros[256] = {};
    uint64_t padding = AlignUp(offset_, alignment) - offset_;
    while (padding > 0) {
      const size_t chunk = padding < sizeof(kZeros) ? padding : sizeof(kZeros);
      QUILL_RETURN_IF_ERROR(Write(absl::Span<const uint8_t>(kZeros, chunk)));
      padding -= chunk;
    }
    return absl::OkStatus();
  }
  uint64_t offset() const { return offset_; }

 private:
  absl::FunctionRef<absl::Status(absl::Span<const uint8_t>)> write_;
  uint64_t offset_ = 0;
};

}  // namespace

void GgufWriter::SetRaw(absl::string_view key, GgufValueType type, std::vector<uint8_t> value) {
  auto it = kv_index_.find(key);
  if (it != kv_index_.end()) {
    kvs_[it->second].type = type;
    kvs_[it->second].value = std::move(value);
    return;
  }
  kv_index_.emplace(std::string(key), kvs_.size());
  kvs_.push_back(Kv{std::string(key), type, std::move(value)});
}

void GgufWriter::SetUint32(absl::string_view key, uint32_t value) {
  SetRaw(key, GgufValueType::kUint32, EncodeScalar(value));
}
void GgufWriter::SetInt32(absl::string_view key, int32_t value) {
  SetRaw(key, GgufValueType::kInt32, EncodeScalar(value));
}
void GgufWriter::SetUint64(absl::string_view key, uint64_t value) {
  SetRaw(key, GgufValueType::kUint64, EncodeScalar(value));
}
void GgufWriter::SetFloat32(absl::string_view key, float value) {
  SetRaw(key, GgufValueType::kFloat32, EncodeScalar(value));
}
void GgufWriter::SetBool(absl::string_view key, bool value) {
  SetRaw(key, GgufValueType::kBool, EncodeScalar<uint8_t>(value ? 1 : 0));
}
void GgufWriter::SetString(absl::string_view key, absl::string_view value) {
  std::vector<uint8_t> encoded;
  AppendString(encoded, value);
  SetRaw(key, GgufValueType::kString, std::move(encoded));
}
void GgufWriter::SetStringArray(absl::string_view key, absl::Span<const std::string> values) {
  std::vector<uint8_t> encoded;
  Append<uint32_t>(encoded, static_cast<uint32_t>(GgufValueType::kString));
  Append<uint64_t>(encoded, values.size());
  for (const std::string& value : values) AppendString(encoded, value);
  SetRaw(key, GgufValueType::kArray, std::move(encoded));
}
void GgufWriter::SetFloat32Array(absl::string_view key, absl::Span<const float> values) {
  SetRaw(key, GgufValueType::kArray, EncodeArray(GgufValueType::kFloat32, values));
}
void GgufWriter::SetInt32Array(absl::string_view key, absl::Span<const int32_t> values) {
  SetRaw(key, GgufValueType::kArray, EncodeArray(GgufValueType::kInt32, values));
}

absl::Status GgufWriter::CopyKeys(const GgufFile& source, absl::string_view prefix) {
  for (const std::string& key : source.Keys()) {
    if (!absl::StartsWith(key, prefix)) continue;
    QUILL_ASSIGN_OR_RETURN(GgufValueType type, source.TypeOf(key));
    QUILL_ASSIGN_OR_RETURN(absl::Span<const uint8_t> raw, source.RawValue(key));
    SetRaw(key, type, std::vector<uint8_t>(raw.begin(), raw.end()));
  }
  return absl::OkStatus();
}

void GgufWriter::AddTensor(absl::string_view name, GgmlType type, std::vector<int64_t> dims,
                           std::vector<uint8_t> data) {
  tensors_.push_back(Tensor{std::string(name), type, std::move(dims), std::move(data), nullptr});
}

void GgufWriter::AddStreamedTensor(absl::string_view name, GgmlType type,
                                   std::vector<int64_t> dims, TensorProducer producer) {
  tensors_.push_back(Tensor{std::string(name), type, std::move(dims), {}, std::move(producer)});
}

absl::Status GgufWriter::WriteTo(
    absl::FunctionRef<absl::Status(absl::Span<const uint8_t>)> write) const {
  Sink sink(write);
  uint64_t alignment = kDefaultAlignment;
  if (auto it = kv_index_.find("general.alignment"); it != kv_index_.end()) {
    const Kv& kv = kvs_[it->second];
    uint32_t value = 0;
    if (kv.type != GgufValueType::kUint32) {
      return absl::InvalidArgumentError("general.alignment must be a uint32");
    }
    std::memcpy(&value, kv.value.data(), 4);
    if (value == 0 || (value & (value - 1)) != 0 || value > kMaxAlignment) {
      return absl::InvalidArgumentError(
          absl::StrCat("general.alignment ", value, " is not a power of two <= 2^30"));
    }
    alignment = value;
  }

  // Validate every tensor and lay out the data section before writing anything.
  std::vector<uint64_t> sizes;
  std::vector<uint64_t> offsets;
  absl::flat_hash_set<absl::string_view> names;
  uint64_t data_offset = 0;
  for (const Tensor& tensor : tensors_) {
    if (tensor.name.empty()) return absl::InvalidArgumentError("tensor with an empty name");
    if (!names.insert(tensor.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate tensor name '", tensor.name, "'"));
    }
    absl::StatusOr<GgmlTensorSize> size = ComputeGgmlTensorSize(tensor.type, tensor.dims);
    if (!size.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", tensor.name, "': ", size.status().message()));
    }
    if (!tensor.producer && tensor.data.size() != size->size_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", tensor.name, "' has ", tensor.data.size(), " bytes of data, its ",
          GgmlTypeName(tensor.type), " shape needs ", size->size_bytes));
    }
    data_offset = AlignUp(data_offset, alignment);
    offsets.push_back(data_offset);
    sizes.push_back(size->size_bytes);
    data_offset += size->size_bytes;
  }

  std::vector<uint8_t> header;
  header.insert(header.end(), {'G', 'G', 'U', 'F'});
  Append<uint32_t>(header, kVersion);
  Append<uint64_t>(header, tensors_.size());
  Append<uint64_t>(header, kvs_.size());
  for (const Kv& kv : kvs_) {
    AppendString(header, kv.key);
    Append<uint32_t>(header, static_cast<uint32_t>(kv.type));
    header.insert(header.end(), kv.value.begin(), kv.value.end());
  }
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const Tensor& tensor = tensors_[i];
    AppendString(header, tensor.name);
    Append<uint32_t>(header, static_cast<uint32_t>(tensor.dims.size()));
    for (int64_t dim : tensor.dims) Append<uint64_t>(header, static_cast<uint64_t>(dim));
    Append<uint32_t>(header, static_cast<uint32_t>(tensor.type));
    Append<uint64_t>(header, offsets[i]);
  }
  QUILL_RETURN_IF_ERROR(sink.Write(header));
  header = {};
  QUILL_RETURN_IF_ERROR(sink.PadTo(alignment));

  const uint64_t data_start = sink.offset();
  std::vector<uint8_t> produced;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const Tensor& tensor = tensors_[i];
    QUILL_RETURN_IF_ERROR(sink.PadTo(alignment));
    if (sink.offset() != data_start + offsets[i]) {
      return absl::InternalError(absl::StrCat("tensor '", tensor.name, "' landed at offset ",
                                              sink.offset(), " instead of ", data_start + offsets[i]));
    }
    if (!tensor.producer) {
      QUILL_RETURN_IF_ERROR(sink.Write(tensor.data));
      continue;
    }
    produced.clear();
    absl::Status status = tensor.producer(&produced);
    if (!status.ok()) {
      return absl::Status(status.code(),
                          absl::StrCat("producing tensor '", tensor.name, "': ", status.message()));
    }
    if (produced.size() != sizes[i]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "producer of tensor '", tensor.name, "' gave ", produced.size(), " bytes, its ",
          GgmlTypeName(tensor.type), " shape needs ", sizes[i]));
    }
    QUILL_RETURN_IF_ERROR(sink.Write(produced));
  }
  // Like llama.cpp, pad the end so every tensor (including the last) spans whole
  // alignment units.
  if (!tensors_.empty()) QUILL_RETURN_IF_ERROR(sink.PadTo(alignment));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint8_t>> GgufWriter::Serialize() const {
  std::vector<uint8_t> bytes;
  QUILL_RETURN_IF_ERROR(WriteTo([&bytes](absl::Span<const uint8_t> chunk) {
    bytes.insert(bytes.end(), chunk.begin(), chunk.end());
    return absl::OkStatus();
  }));
  return bytes;
}

absl::Status GgufWriter::WriteFile(const std::string& path) const {
  const std::string temp_path = absl::StrCat(path, ".tmp");
  std::FILE* file = std::fopen(temp_path.c_str(), "wb");
  if (file == nullptr) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot create ", temp_path));
  }
  constexpr size_t kBufferBytes = size_t{4} << 20;
  std::unique_ptr<char[]> buffer(new char[kBufferBytes]);
  std::setvbuf(file, buffer.get(), _IOFBF, kBufferBytes);
  uint64_t written = 0;
  absl::Status status = WriteTo([&](absl::Span<const uint8_t> chunk) {
    if (!chunk.empty() && std::fwrite(chunk.data(), 1, chunk.size(), file) != chunk.size()) {
      return absl::ErrnoToStatus(errno, absl::StrCat("write to ", temp_path,
                                                     " failed at offset ", written));
    }
    written += chunk.size();
    return absl::OkStatus();
  });
  if (std::fflush(file) != 0 && status.ok()) {
    status = absl::ErrnoToStatus(errno, absl::StrCat("write to ", temp_path, " failed"));
  }
  if (std::fclose(file) != 0 && status.ok()) {
    status = absl::ErrnoToStatus(errno, absl::StrCat("closing ", temp_path, " failed"));
  }
  if (status.ok() && std::rename(temp_path.c_str(), path.c_str()) != 0) {
    status = absl::ErrnoToStatus(errno, absl::StrCat("cannot rename ", temp_path, " to ", path));
  }
  if (!status.ok()) std::remove(temp_path.c_str());
  return status;
}

}  // namespace quill::engine
