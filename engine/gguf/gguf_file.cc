#include "engine/gguf/gguf_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/gguf/ggml_types.h"

namespace quill::engine {
namespace {

constexpr char kMagic[4] = {'G', 'G', 'U', 'F'};
constexpr uint64_t kDefaultAlignment = 32;
// Larger alignments are no use and would make the aligned data start overflow.
constexpr uint64_t kMaxAlignment = uint64_t{1} << 30;
// An array may hold arrays, but those may not hold arrays again: enough for every known
// producer, and it bounds the parser's recursion.
constexpr int kMaxArrayDepth = 2;
// Lower bounds on the encoded size of one entry, used to reject counts that cannot fit
// in the rest of the file before looping over them.
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;          // key length, 1 char, type, u8
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;  // name, n_dims, 1 dim, type, offset
constexpr uint64_t kMinStringBytes = 8;
constexpr uint64_t kMinArrayBytes = 4 + 8;               // element type, count
constexpr uint32_t kMaxDims = 4;

// A key or tensor name from the file, made safe and short for an error message.
std::string Quote(absl::string_view text) {
  constexpr size_t kMaxShown = 96;
  std::string shown = absl::CHexEscape(text.substr(0, kMaxShown));
  if (text.size() > kMaxShown) absl::StrAppend(&shown, "...");
  return absl::StrCat("'", shown, "'");
}

bool IsKnownValueType(uint32_t raw) { return raw <= static_cast<uint32_t>(GgufValueType::kFloat64); }

// Bytes of one scalar of `type`; 0 for string and array (variable size).
uint64_t ScalarSize(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
      return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32:
      return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
      return 8;
    case GgufValueType::kString:
    case GgufValueType::kArray:
      return 0;
  }
  return 0;
}

uint64_t MinValueSize(GgufValueType type) {
  if (type == GgufValueType::kString) return kMinStringBytes;
  if (type == GgufValueType::kArray) return kMinArrayBytes;
  return ScalarSize(type);
}

bool IsIntegerType(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
      return true;
    default:
      return false;
  }
}

// Bounds-checked little-endian reader over the mapping. Every read checks the remaining
// bytes first; `what` is a callable building the error context only on failure.
class ByteReader {
 public:
  ByteReader(const uint8_t* data, uint64_t size) : data_(data), size_(size) {}

  uint64_t offset() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  template <typename WhatFn>
  absl::Status Truncated(uint64_t need, const WhatFn& what) const {
    return absl::DataLossError(absl::StrCat("truncated at offset ", pos_, " while reading ",
                                            what(), " (need ", need, " bytes, ", remaining(),
                                            " remain)"));
  }

  // A declared count whose entries cannot fit in the remaining bytes; checked before any
  // loop or allocation sized by the count.
  template <typename WhatFn>
  absl::Status TooMany(uint64_t count, uint64_t min_each, const WhatFn& what) const {
    return absl::DataLossError(absl::StrCat("truncated at offset ", pos_, " while reading ",
                                            what(), ": ", count, " entries of at least ",
                                            min_each, " bytes each, but ", remaining(),
                                            " bytes remain"));
  }

  template <typename T, typename WhatFn>
  absl::Status Read(T* out, const WhatFn& what) {
    if (remaining() < sizeof(T)) return Truncated(sizeof(T), what);
    std::memcpy(out, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return absl::OkStatus();
  }

  template <typename WhatFn>
  absl::Status Skip(uint64_t n, const WhatFn& what) {
    if (remaining() < n) return Truncated(n, what);
    pos_ += n;
    return absl::OkStatus();
  }

  // A length-prefixed string, returned as a view into the mapping (no allocation).
  template <typename WhatFn>
  absl::Status ReadString(absl::string_view* out, const WhatFn& what) {
    uint64_t length = 0;
    QUILL_RETURN_IF_ERROR(Read(&length, [&] { return absl::StrCat("length of ", what()); }));
    if (remaining() < length) {
      return Truncated(length, what);
    }
    *out = absl::string_view(reinterpret_cast<const char*>(data_ + pos_), length);
    pos_ += length;
    return absl::OkStatus();
  }

  const uint8_t* data() const { return data_; }

 private:
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

// A metadata entry: where its value lives in the mapping.
struct Entry {
  std::string key;
  GgufValueType type;
  uint64_t value_offset = 0;  // first byte of the value
  uint64_t value_size = 0;    // encoded bytes of the value
  // Arrays only.
  GgufValueType element_type = GgufValueType::kUint8;
  uint64_t count = 0;
  uint64_t elements_offset = 0;
};

std::string DescribeType(const Entry& entry) {
  if (entry.type != GgufValueType::kArray) return GgufValueTypeName(entry.type);
  return absl::StrCat("array<", GgufValueTypeName(entry.element_type), ">");
}

// Validates and skips one value of `type`; `depth` counts the enclosing arrays. `what`
// is type-erased so that the recursion does not instantiate a new template per level.
absl::Status SkipValue(ByteReader& reader, GgufValueType type, int depth,
                       absl::FunctionRef<std::string()> what) {
  switch (type) {
    case GgufValueType::kString: {
      absl::string_view ignored;
      return reader.ReadString(&ignored, what);
    }
    case GgufValueType::kBool: {
      uint8_t value = 0;
      const uint64_t at = reader.offset();
      QUILL_RETURN_IF_ERROR(reader.Read(&value, what));
      if (value > 1) {
        return absl::InvalidArgumentError(absl::StrCat(what(), " at offset ", at,
                                                       " is a bool with byte value ", value,
                                                       " (must be 0 or 1)"));
      }
      return absl::OkStatus();
    }
    case GgufValueType::kArray: {
      uint32_t raw_element = 0;
      QUILL_RETURN_IF_ERROR(
          reader.Read(&raw_element, [&] { return absl::StrCat("array element type of ", what()); }));
      if (!IsKnownValueType(raw_element)) {
        return absl::InvalidArgumentError(absl::StrCat(what(), " is an array of unknown value type ",
                                                       raw_element, " (offset ",
                                                       reader.offset() - 4, ")"));
      }
      const auto element = static_cast<GgufValueType>(raw_element);
      if (element == GgufValueType::kArray && depth + 1 >= kMaxArrayDepth) {
        return absl::InvalidArgumentError(absl::StrCat(what(), " nests arrays more than ",
                                                       kMaxArrayDepth, " levels deep"));
      }
      uint64_t count = 0;
      QUILL_RETURN_IF_ERROR(
          reader.Read(&count, [&] { return absl::StrCat("array length of ", what()); }));
      const uint64_t min_size = MinValueSize(element);
      if (count > reader.remaining() / min_size) {
        return reader.TooMany(count, min_size, [&] {
          return absl::StrCat(what(), " (array of ", GgufValueTypeName(element), ")");
        });
      }
      const uint64_t fixed = ScalarSize(element);
      if (fixed != 0 && element != GgufValueType::kBool) {
        return reader.Skip(count * fixed, what);  // cannot fail: checked above
      }
      for (uint64_t i = 0; i < count; ++i) {
        QUILL_RETURN_IF_ERROR(SkipValue(reader, element, depth + 1, [&] {
          return absl::StrCat("element ", i, " of ", what());
        }));
      }
      return absl::OkStatus();
    }
    default:
      return reader.Skip(ScalarSize(type), what);
  }
}

// Signed or unsigned integer value, widened.
struct IntegerValue {
  bool is_signed = false;
  int64_t signed_value = 0;
  uint64_t unsigned_value = 0;
};

IntegerValue DecodeInteger(const uint8_t* p, GgufValueType type) {
  IntegerValue v;
  auto load = [p](auto* out) { std::memcpy(out, p, sizeof(*out)); };
  switch (type) {
    case GgufValueType::kUint8: { uint8_t x; load(&x); v.unsigned_value = x; break; }
    case GgufValueType::kUint16: { uint16_t x; load(&x); v.unsigned_value = x; break; }
    case GgufValueType::kUint32: { uint32_t x; load(&x); v.unsigned_value = x; break; }
    case GgufValueType::kUint64: { uint64_t x; load(&x); v.unsigned_value = x; break; }
    case GgufValueType::kInt8: { int8_t x; load(&x); v.is_signed = true; v.signed_value = x; break; }
    case GgufValueType::kInt16: { int16_t x; load(&x); v.is_signed = true; v.signed_value = x; break; }
    case GgufValueType::kInt32: { int32_t x; load(&x); v.is_signed = true; v.signed_value = x; break; }
    case GgufValueType::kInt64: { int64_t x; load(&x); v.is_signed = true; v.signed_value = x; break; }
    default: break;
  }
  return v;
}

absl::StatusOr<uint64_t> IntegerAsUint(const IntegerValue& v, absl::string_view key) {
  if (v.is_signed && v.signed_value < 0) {
    return absl::InvalidArgumentError(absl::StrCat("key ", Quote(key), " has negative value ",
                                                   v.signed_value, ", expected an unsigned integer"));
  }
  return v.is_signed ? static_cast<uint64_t>(v.signed_value) : v.unsigned_value;
}

absl::StatusOr<int64_t> IntegerAsInt(const IntegerValue& v, absl::string_view key) {
  if (!v.is_signed && v.unsigned_value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return absl::InvalidArgumentError(absl::StrCat("key ", Quote(key), " value ", v.unsigned_value,
                                                   " does not fit in int64"));
  }
  return v.is_signed ? v.signed_value : static_cast<int64_t>(v.unsigned_value);
}

absl::Status TypeMismatch(const Entry& entry, absl::string_view expected) {
  return absl::InvalidArgumentError(absl::StrCat("key ", Quote(entry.key), " has type ",
                                                 DescribeType(entry), ", expected ", expected));
}

absl::Status OpenError(int error, const std::string& path) {
  if (error == ENOENT || error == ENOTDIR) {
    return absl::NotFoundError(absl::StrCat("GGUF file not found: ", path));
  }
  return absl::ErrnoToStatus(error, absl::StrCat("cannot open GGUF file ", path));
}

}  // namespace

std::string GgufValueTypeName(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8: return "uint8";
    case GgufValueType::kInt8: return "int8";
    case GgufValueType::kUint16: return "uint16";
    case GgufValueType::kInt16: return "int16";
    case GgufValueType::kUint32: return "uint32";
    case GgufValueType::kInt32: return "int32";
    case GgufValueType::kFloat32: return "float32";
    case GgufValueType::kBool: return "bool";
    case GgufValueType::kString: return "string";
    case GgufValueType::kArray: return "array";
    case GgufValueType::kUint64: return "uint64";
    case GgufValueType::kInt64: return "int64";
    case GgufValueType::kFloat64: return "float64";
  }
  return absl::StrCat("unknown(", static_cast<uint32_t>(type), ")");
}

struct GgufFile::Impl {
  std::string path;
  void* mapping = nullptr;
  uint64_t size = 0;
  const uint8_t* base = nullptr;
  uint32_t version = 0;
  uint64_t alignment = kDefaultAlignment;
  std::vector<Entry> entries;
  absl::flat_hash_map<std::string, size_t> entry_index;
  std::vector<GgufTensorInfo> tensors;
  absl::flat_hash_map<std::string, size_t> tensor_index;

  ~Impl() {
    if (mapping != nullptr) munmap(mapping, size);
  }

  absl::Status Parse();
  absl::Status ParseHeader(ByteReader& reader, uint64_t* tensor_count, uint64_t* kv_count);
  absl::Status ParseMetadata(ByteReader& reader, uint64_t kv_count);
  absl::Status ResolveAlignment();
  absl::Status ParseTensorInfos(ByteReader& reader, uint64_t tensor_count);
  absl::Status PlaceTensorData(uint64_t infos_end);

  const Entry* Find(absl::string_view key) const {
    auto it = entry_index.find(key);
    return it == entry_index.end() ? nullptr : &entries[it->second];
  }
  absl::StatusOr<const Entry*> FindOrError(absl::string_view key) const {
    const Entry* entry = Find(key);
    if (entry == nullptr) {
      return absl::NotFoundError(absl::StrCat("metadata key ", Quote(key), " not found in ", path));
    }
    return entry;
  }
  absl::StatusOr<const Entry*> FindArray(absl::string_view key) const {
    QUILL_ASSIGN_OR_RETURN(const Entry* entry, FindOrError(key));
    if (entry->type != GgufValueType::kArray) return TypeMismatch(*entry, "an array");
    return entry;
  }
};

absl::Status GgufFile::Impl::ParseHeader(ByteReader& reader, uint64_t* tensor_count,
                                         uint64_t* kv_count) {
  char magic[4];
  QUILL_RETURN_IF_ERROR(reader.Read(&magic, [] { return "the magic number"; }));
  if (std::memcmp(magic, kMagic, 4) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "not a GGUF file (bad magic ", Quote(absl::string_view(magic, 4)), ", expected 'GGUF')"));
  }
  QUILL_RETURN_IF_ERROR(reader.Read(&version, [] { return "the version"; }));
  if (version == 1) {
    return absl::InvalidArgumentError(
        "GGUF version 1 is not supported (it used 32-bit counts); re-convert the model to GGUF v3");
  }
  if (version != 2 && version != 3) {
    const uint32_t swapped = __builtin_bswap32(version);
    if (swapped >= 1 && swapped <= 3) {
      return absl::InvalidArgumentError(absl::StrCat(
          "big-endian GGUF file (version ", swapped, ") is not supported"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported GGUF version ", version, " (supported: 2, 3)"));
  }
  QUILL_RETURN_IF_ERROR(reader.Read(tensor_count, [] { return "the tensor count"; }));
  QUILL_RETURN_IF_ERROR(reader.Read(kv_count, [] { return "the metadata key count"; }));
  return absl::OkStatus();
}

absl::Status GgufFile::Impl::ParseMetadata(ByteReader& reader, uint64_t kv_count) {
  if (kv_count > reader.remaining() / kMinKvBytes) {
    return reader.TooMany(kv_count, kMinKvBytes, [] { return "the metadata entries"; });
  }
  entries.reserve(kv_count);
  for (uint64_t i = 0; i < kv_count; ++i) {
    absl::string_view key;
    QUILL_RETURN_IF_ERROR(
        reader.ReadString(&key, [&] { return absl::StrCat("the key of metadata entry ", i); }));
    if (key.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("metadata entry ", i, " has an empty key"));
    }
    uint32_t raw_type = 0;
    QUILL_RETURN_IF_ERROR(
        reader.Read(&raw_type, [&] { return absl::StrCat("the value type of key ", Quote(key)); }));
    if (!IsKnownValueType(raw_type)) {
      return absl::InvalidArgumentError(absl::StrCat("key ", Quote(key), " has unknown value type ",
                                                     raw_type, " (offset ", reader.offset() - 4, ")"));
    }
    Entry entry;
    entry.key = std::string(key);
    entry.type = static_cast<GgufValueType>(raw_type);
    entry.value_offset = reader.offset();
    QUILL_RETURN_IF_ERROR(SkipValue(reader, entry.type, 0, [&] {
      return absl::StrCat("the value of key ", Quote(key));
    }));
    entry.value_size = reader.offset() - entry.value_offset;
    if (entry.type == GgufValueType::kArray) {
      uint32_t element = 0;
      std::memcpy(&element, base + entry.value_offset, 4);
      entry.element_type = static_cast<GgufValueType>(element);
      std::memcpy(&entry.count, base + entry.value_offset + 4, 8);
      entry.elements_offset = entry.value_offset + 12;
    }
    auto [it, inserted] = entry_index.emplace(entry.key, entries.size());
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate metadata key ", Quote(key),
                                                     " (entries ", it->second, " and ", i, ")"));
    }
    entries.push_back(std::move(entry));
  }
  return absl::OkStatus();
}

absl::Status GgufFile::Impl::ResolveAlignment() {
  const Entry* entry = Find("general.alignment");
  if (entry == nullptr) return absl::OkStatus();
  if (!IsIntegerType(entry->type)) return TypeMismatch(*entry, "uint32");
  QUILL_ASSIGN_OR_RETURN(uint64_t value,
                         IntegerAsUint(DecodeInteger(base + entry->value_offset, entry->type),
                                       entry->key));
  if (value == 0 || (value & (value - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("general.alignment ", value, " is not a power of two"));
  }
  if (value > kMaxAlignment) {
    return absl::InvalidArgumentError(
        absl::StrCat("general.alignment ", value, " exceeds the limit ", kMaxAlignment));
  }
  alignment = value;
  return absl::OkStatus();
}

absl::Status GgufFile::Impl::ParseTensorInfos(ByteReader& reader, uint64_t tensor_count) {
  if (tensor_count > reader.remaining() / kMinTensorInfoBytes) {
    return reader.TooMany(tensor_count, kMinTensorInfoBytes, [] { return "the tensor infos"; });
  }
  tensors.reserve(tensor_count);
  for (uint64_t i = 0; i < tensor_count; ++i) {
    absl::string_view name;
    QUILL_RETURN_IF_ERROR(
        reader.ReadString(&name, [&] { return absl::StrCat("the name of tensor ", i); }));
    if (name.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", i, " has an empty name"));
    }
    auto context = [&] { return absl::StrCat("tensor ", Quote(name)); };
    uint32_t n_dims = 0;
    QUILL_RETURN_IF_ERROR(
        reader.Read(&n_dims, [&] { return absl::StrCat("the dimension count of ", context()); }));
    if (n_dims == 0 || n_dims > kMaxDims) {
      return absl::InvalidArgumentError(absl::StrCat(context(), " has ", n_dims,
                                                     " dimensions (must be 1..", kMaxDims, ")"));
    }
    GgufTensorInfo info;
    info.name = std::string(name);
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t dim = 0;
      QUILL_RETURN_IF_ERROR(reader.Read(
          &dim, [&] { return absl::StrCat("dimension ", d, " of ", context()); }));
      if (dim == 0 || dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return absl::InvalidArgumentError(
            absl::StrCat(context(), " dimension ", d, " is ", dim, " (must be 1..2^63-1)"));
      }
      info.dims.push_back(static_cast<int64_t>(dim));
    }
    uint32_t raw_type = 0;
    QUILL_RETURN_IF_ERROR(reader.Read(&raw_type, [&] { return absl::StrCat("the type of ", context()); }));
    GgmlTypeTraits traits;
    if (!LookupGgmlType(raw_type, &traits)) {
      return absl::InvalidArgumentError(
          absl::StrCat(context(), " has unknown ggml type ", raw_type));
    }
    info.type = static_cast<GgmlType>(raw_type);
    absl::StatusOr<GgmlTensorSize> size = ComputeGgmlTensorSize(info.type, info.dims);
    if (!size.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(context(), " (", GgmlTypeName(info.type), "): ", size.status().message()));
    }
    info.num_elements = size->num_elements;
    info.size_bytes = size->size_bytes;
    uint64_t relative_offset = 0;
    QUILL_RETURN_IF_ERROR(reader.Read(
        &relative_offset, [&] { return absl::StrCat("the data offset of ", context()); }));
    if (relative_offset % alignment != 0) {
      return absl::InvalidArgumentError(absl::StrCat(context(), " data offset ", relative_offset,
                                                     " is not a multiple of the alignment ",
                                                     alignment));
    }
    info.file_offset = relative_offset;  // made absolute in PlaceTensorData
    auto [it, inserted] = tensor_index.emplace(info.name, tensors.size());
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate tensor name ", Quote(name),
                                                     " (tensors ", it->second, " and ", i, ")"));
    }
    tensors.push_back(std::move(info));
  }
  return absl::OkStatus();
}

absl::Status GgufFile::Impl::PlaceTensorData(uint64_t infos_end) {
  // The data section starts at the next multiple of the alignment (it may be absent when
  // there are no tensors, as in vocabulary-only files).
  const uint64_t data_start = (infos_end + alignment - 1) / alignment * alignment;
  for (GgufTensorInfo& info : tensors) {
    const uint64_t relative = info.file_offset;
    if (data_start > size || relative > size - data_start ||
        info.size_bytes > size - data_start - relative) {
      return absl::DataLossError(absl::StrCat(
          "truncated: tensor ", Quote(info.name), " data (", info.size_bytes,
          " bytes at data section offset ", relative, ", data section at ", data_start,
          ") extends past the end of the file (", size, " bytes)"));
    }
    info.file_offset = data_start + relative;
    info.data = base + info.file_offset;
  }
  std::vector<const GgufTensorInfo*> by_offset;
  by_offset.reserve(tensors.size());
  for (const GgufTensorInfo& info : tensors) by_offset.push_back(&info);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->file_offset < b->file_offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo& prev = *by_offset[i - 1];
    const GgufTensorInfo& next = *by_offset[i];
    if (prev.file_offset + prev.size_bytes > next.file_offset) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensors ", Quote(prev.name), " [", prev.file_offset, ", ",
          prev.file_offset + prev.size_bytes, ") and ", Quote(next.name), " [", next.file_offset,
          ", ", next.file_offset + next.size_bytes, ") overlap"));
    }
  }
  return absl::OkStatus();
}

absl::Status GgufFile::Impl::Parse() {
  ByteReader reader(base, size);
  uint64_t tensor_count = 0;
  uint64_t kv_count = 0;
  QUILL_RETURN_IF_ERROR(ParseHeader(reader, &tensor_count, &kv_count));
  QUILL_RETURN_IF_ERROR(ParseMetadata(reader, kv_count));
  QUILL_RETURN_IF_ERROR(ResolveAlignment());
  QUILL_RETURN_IF_ERROR(ParseTensorInfos(reader, tensor_count));
  return PlaceTensorData(reader.offset());
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  // O_NONBLOCK so that opening a FIFO by mistake does not hang; no effect on files.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return OpenError(errno, path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int error = errno;
    ::close(fd);
    return absl::ErrnoToStatus(error, absl::StrCat("cannot stat ", path));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, " is a directory, not a GGUF file"));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file"));
  }
  if (st.st_size == 0) {
    ::close(fd);
    return absl::DataLossError(
        absl::StrCat("truncated at offset 0 while reading the GGUF header: ", path, " is empty"));
  }
  impl->size = static_cast<uint64_t>(st.st_size);
  void* mapping = ::mmap(nullptr, impl->size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int mmap_error = errno;
  ::close(fd);  // the mapping keeps the file referenced
  if (mapping == MAP_FAILED) {
    return absl::ErrnoToStatus(mmap_error, absl::StrCat("cannot mmap ", path));
  }
  impl->mapping = mapping;
  impl->base = static_cast<const uint8_t*>(mapping);
  absl::Status status = impl->Parse();
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat(path, ": ", status.message()));
  }
  return std::unique_ptr<GgufFile>(new GgufFile(std::move(impl)));
}

GgufFile::GgufFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GgufFile::~GgufFile() = default;

void GgufFile::ReleaseResidentPages() const {
  // Advisory: on failure the pages simply stay resident.
  madvise(impl_->mapping, impl_->size, MADV_DONTNEED);
}

void GgufFile::ReleaseResidentPages(const GgufTensorInfo& t) const {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(t.data) / page * page;
  const uintptr_t end = std::min(reinterpret_cast<uintptr_t>(t.data) + t.size_bytes,
                                 reinterpret_cast<uintptr_t>(impl_->base) + impl_->size);
  if (t.data == nullptr || end <= begin) return;
  madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);  // advisory
}

uint32_t GgufFile::version() const { return impl_->version; }
const std::string& GgufFile::path() const { return impl_->path; }
uint64_t GgufFile::file_size() const { return impl_->size; }
uint64_t GgufFile::alignment() const { return impl_->alignment; }

bool GgufFile::HasKey(absl::string_view key) const { return impl_->Find(key) != nullptr; }

std::vector<std::string> GgufFile::Keys() const {
  std::vector<std::string> keys;
  keys.reserve(impl_->entries.size());
  for (const Entry& entry : impl_->entries) keys.push_back(entry.key);
  return keys;
}

absl::StatusOr<GgufValueType> GgufFile::TypeOf(absl::string_view key) const {
  QUILL_ASSIGN_OR_RETURN(const Entry* entry, impl_->FindOrError(key));
  return entry->type;
}

absl::StatusOr<uint64_t> GgufFile::GetUint(absl::string_view key) const {
  QUILL_ASSIGN_OR_RETURN(const Entry* entry, impl_->FindOrError(key));
  if (!IsIntegerType(entry->type)) return TypeMismatch(*entry, "an unsigned integer");
  return IntegerAsUint(DecodeInteger(impl_->base + entry->value_offset, entry->type), entry->key);
}

absl::StatusOr<int64_t> GgufFile::GetInt(absl::string_view key) const {
  QUILL_ASSIGN_OR_RETURN(const Entry* entry, impl_->FindOrError(key));
  if (!IsIntegerType(entry->type)) return TypeMismatch(*entry, "an integer");
  return IntegerAsInt(DecodeInteger(impl_->base + entry->value_offset, entry->type), entry->key);
}

absl::StatusOr<float> GgufFile::GetFloat(absl::string_view key) const {
  QUILL_ASSIGN_OR_RETURN(const Entry* entry, impl_->FindOrError(key));
  const uint8_t* p = impl_->base + entry->value_offset;
  if (entry->type == GgufValueType::kFloat32) {
    float value;
    std::memcpy(&value, p, 4);
    return value;
  }
  if (entry->type == GgufValueType::kFloat64) {
    double value;
    std::memcpy(&value, p, 8);
    if (std::isfinite(value) && std::fabs(value) > std::numeric_limits<float>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat("key ", Quote(key), " value ", value, " does not fit in float32"));
    }
    return static_cast<float>(value);
  }
  return TypeMismatch(*entry, "float32 or float64");
}

absl::StatusOr<bool> GgufFile::GetBool(absl::string_view key) const {
  QUILL_ASSIGN_OR_RETURN(const Entry* entry, impl_->FindOrError(key));
  if (entry->type != GgufValueType::kBool) return TypeMismatch(*entry, "bool");
  return impl_->base[entry->value_offset] != 0;
}

absl::StatusOr<std::string> GgufFile::GetString(absl::string_view key) const {
  QUILL_ASSIGN_OR_RETURN(const Entry* entry, impl_->FindOrError(key));
  if (entry->type != GgufValueType::kString) return TypeMismatch(*entry, "string");
  const uint8_t* p = impl_->base + entry->value_offset;
  return std::string(reinterpret_cast<const char*>(p + 8), entry->value_size - 8);
}

absl::StatusOr<std::vector<std::string>> GgufFile::GetStringArray(absl::string_view key) const {
  QUILL_ASSIGN_OR_RETURN(const Entry* entry, impl_->FindArray(key));
  if (entry->element_type != GgufValueType::kString) return TypeMismatch(*entry, "array<string>");
  std::vector<std::string> values;
  values.reserve(entry->count);
  // Lengths were validated by Open().
  const uint8_t* p = impl_->base + entry->elements_offset;
  for (uint64_t i = 0; i < entry->count; ++i) {
    uint64_t length;
    std::memcpy(&length, p, 8);
    values.emplace_back(reinterpret_cast<const char*>(p + 8), length);
    p += 8 + length;
  }
  return values;
}

absl::StatusOr<std::vector<float>> GgufFile::GetFloatArray(absl::string_view key) const {
  QUILL_ASSIGN_OR_RETURN(const Entry* entry, impl_->FindArray(key));
  const uint8_t* p = impl_->base + entry->elements_offset;
  std::vector<float> values;
  if (entry->element_type == GgufValueType::kFloat32) {
    values.resize(entry->count);
    if (entry->count > 0) std::memcpy(values.data(), p, entry->count * 4);
    return values;
  }
  if (entry->element_type == GgufValueType::kFloat64) {
    values.reserve(entry->count);
    for (uint64_t i = 0; i < entry->count; ++i) {
      double value;
      std::memcpy(&value, p + 8 * i, 8);
      values.push_back(static_cast<float>(value));
    }
    return values;
  }
  return TypeMismatch(*entry, "array<float32> or array<float64>");
}

absl::StatusOr<std::vector<int32_t>> GgufFile::GetInt32Array(absl::string_view key) const {
  QUILL_ASSIGN_OR_RETURN(const Entry* entry, impl_->FindArray(key));
  if (!IsIntegerType(entry->element_type)) return TypeMismatch(*entry, "array<int32>");
  const uint64_t element_size = ScalarSize(entry->element_type);
  const uint8_t* p = impl_->base + entry->elements_offset;
  std::vector<int32_t> values;
  values.reserve(entry->count);
  for (uint64_t i = 0; i < entry->count; ++i) {
    const IntegerValue v = DecodeInteger(p + i * element_size, entry->element_type);
    const bool fits = v.is_signed ? (v.signed_value >= std::numeric_limits<int32_t>::min() &&
                                     v.signed_value <= std::numeric_limits<int32_t>::max())
                                  : v.unsigned_value <= static_cast<uint64_t>(
                                                            std::numeric_limits<int32_t>::max());
    if (!fits) {
      return absl::InvalidArgumentError(absl::StrCat(
          "key ", Quote(key), " element ", i, " (",
          v.is_signed ? absl::StrCat(v.signed_value) : absl::StrCat(v.unsigned_value),
          ") does not fit in int32"));
    }
    values.push_back(v.is_signed ? static_cast<int32_t>(v.signed_value)
                                 : static_cast<int32_t>(v.unsigned_value));
  }
  return values;
}

absl::StatusOr<uint64_t> GgufFile::GetArrayLength(absl::string_view key) const {
  QUILL_ASSIGN_OR_RETURN(const Entry* entry, impl_->FindArray(key));
  return entry->count;
}

absl::StatusOr<GgufValueType> GgufFile::ArrayElementType(absl::string_view key) const {
  QUILL_ASSIGN_OR_RETURN(const Entry* entry, impl_->FindArray(key));
  return entry->element_type;
}

absl::StatusOr<absl::Span<const uint8_t>> GgufFile::RawValue(absl::string_view key) const {
  QUILL_ASSIGN_OR_RETURN(const Entry* entry, impl_->FindOrError(key));
  return absl::Span<const uint8_t>(impl_->base + entry->value_offset, entry->value_size);
}

const std::vector<GgufTensorInfo>& GgufFile::tensors() const { return impl_->tensors; }

const GgufTensorInfo* GgufFile::FindTensor(absl::string_view name) const {
  auto it = impl_->tensor_index.find(name);
  return it == impl_->tensor_index.end() ? nullptr : &impl_->tensors[it->second];
}

}  // namespace quill::engine
