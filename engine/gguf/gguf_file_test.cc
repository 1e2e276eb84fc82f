#include "engine/gguf/gguf_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "engine/gguf/gguf_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace quill::engine {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// ---------------------------------------------------------------------------------------
// Helpers

std::string SharedDir() {
  const char* dir = std::getenv("QUILL_SHARED_DIR");
  return dir == nullptr ? std::string() : std::string(dir);
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string TempPath(absl::string_view name) {
  return absl::StrCat(::testing::TempDir(), "/gguf_file_test_", ::getpid(), "_", name);
}

void WriteBytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  // Unlink first: rewriting a truncated file makes ext4 flush it (auto_da_alloc), which
  // costs milliseconds per file in the loops below.
  std::remove(path.c_str());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

absl::StatusOr<std::unique_ptr<GgufFile>> OpenBytes(const std::vector<uint8_t>& bytes,
                                                    absl::string_view name) {
  const std::string path = TempPath(name);
  WriteBytes(path, bytes);
  auto file = GgufFile::Open(path);
  std::remove(path.c_str());  // the mapping stays valid after unlink
  return file;
}

// Little-endian byte builder for hand-made (often malformed) files.
class Bytes {
 public:
  template <typename T>
  Bytes& Put(T value) {
    const size_t at = data_.size();
    data_.resize(at + sizeof(T));
    std::memcpy(data_.data() + at, &value, sizeof(T));
    return *this;
  }
  Bytes& U8(uint8_t v) { return Put(v); }
  Bytes& U32(uint32_t v) { return Put(v); }
  Bytes& U64(uint64_t v) { return Put(v); }
  Bytes& I32(int32_t v) { return Put(v); }
  Bytes& F32(float v) { return Put(v); }
  Bytes& Str(absl::string_view s) {
    U64(s.size());
    data_.insert(data_.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& Append(const std::vector<uint8_t>& more) {
    data_.insert(data_.end(), more.begin(), more.end());
    return *this;
  }
  const std::vector<uint8_t>& data() const { return data_; }

 private:
  std::vector<uint8_t> data_;
};

constexpr uint32_t kTypeU32 = 4, kTypeI32 = 5, kTypeF32 = 6, kTypeBool = 7, kTypeString = 8,
                   kTypeArray = 9;
constexpr uint32_t kGgmlF32 = 0, kGgmlQ8_0 = 8, kGgmlF64 = 28;

// One encoded metadata entry.
std::vector<uint8_t> Kv(absl::string_view key, uint32_t type, const Bytes& value) {
  Bytes b;
  b.Str(key).U32(type).Append(value.data());
  return b.data();
}
std::vector<uint8_t> KvU32(absl::string_view key, uint32_t v) { return Kv(key, kTypeU32, Bytes().U32(v)); }
std::vector<uint8_t> KvStr(absl::string_view key, absl::string_view v) {
  return Kv(key, kTypeString, Bytes().Str(v));
}

struct RawTensor {
  std::string name;
  std::vector<uint64_t> dims;
  uint32_t type = kGgmlF32;
  uint64_t offset = 0;
  uint32_t n_dims_override = 0;  // when non-zero, written instead of dims.size()
};

// A hand-assembled GGUF file; each field can be bent to make a malformed one.
struct RawSpec {
  std::string magic = "GGUF";
  uint32_t version = 3;
  std::vector<std::vector<uint8_t>> kvs = {KvStr("general.architecture", "llama"),
                                           KvU32("test.answer", 42)};
  std::vector<RawTensor> tensors = {{"a", {8}, kGgmlF32, 0}, {"b", {4, 2}, kGgmlF32, 32}};
  uint64_t alignment = 32;
  uint64_t data_bytes = 64;
  bool override_counts = false;
  uint64_t tensor_count = 0;
  uint64_t kv_count = 0;
};

std::vector<uint8_t> Build(const RawSpec& spec) {
  Bytes b;
  for (char c : spec.magic) b.U8(static_cast<uint8_t>(c));
  b.U32(spec.version);
  b.U64(spec.override_counts ? spec.tensor_count : spec.tensors.size());
  b.U64(spec.override_counts ? spec.kv_count : spec.kvs.size());
  for (const auto& kv : spec.kvs) b.Append(kv);
  for (const RawTensor& t : spec.tensors) {
    b.Str(t.name);
    b.U32(t.n_dims_override != 0 ? t.n_dims_override : static_cast<uint32_t>(t.dims.size()));
    for (uint64_t d : t.dims) b.U64(d);
    b.U32(t.type);
    b.U64(t.offset);
  }
  std::vector<uint8_t> bytes = b.data();
  bytes.resize((bytes.size() + spec.alignment - 1) / spec.alignment * spec.alignment, 0);
  bytes.resize(bytes.size() + spec.data_bytes, 0xAB);
  return bytes;
}

// ---------------------------------------------------------------------------------------
// Files in /work/shared

class SharedFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    shared_ = SharedDir();
    if (shared_.empty() || !IsDirectory(shared_ + "/models")) {
      GTEST_SKIP() << "shared assets not found at '" << shared_ << "' (QUILL_SHARED_DIR)";
    }
  }
  std::string shared_;
};

TEST_F(SharedFilesTest, AllModelsAndVocabsOpen) {
  struct Expect {
    const char* path;
    size_t tensors;
    size_t keys;
  };
  // Counts from an independent dump of the files.
  const Expect expected[] = {
      {"models/kjv-1m.gguf", 39, 23},
      {"models/mini-random-bf16.gguf", 21, 23},
      {"models/mini-random-q8_0.gguf", 21, 23},
      {"models/micro-random-gpt2vocab-f16.gguf", 21, 20},
      {"models/llama-2-tiny-random.gguf", 12, 18},
      {"vocab/ggml-vocab-llama-spm.gguf", 0, 22},
      {"vocab/ggml-vocab-gpt-2.gguf", 0, 16},
  };
  for (const Expect& e : expected) {
    SCOPED_TRACE(e.path);
    auto file = GgufFile::Open(absl::StrCat(shared_, "/", e.path));
    ASSERT_TRUE(file.ok()) << file.status();
    EXPECT_EQ((*file)->version(), 3u);
    EXPECT_EQ((*file)->alignment(), 32u);
    EXPECT_EQ((*file)->tensors().size(), e.tensors);
    EXPECT_EQ((*file)->Keys().size(), e.keys);
    for (const GgufTensorInfo& t : (*file)->tensors()) {
      EXPECT_EQ(t.file_offset % 32, 0u) << t.name;
      EXPECT_LE(t.file_offset + t.size_bytes, (*file)->file_size()) << t.name;
      EXPECT_NE(t.data, nullptr) << t.name;
    }
  }
}

TEST_F(SharedFilesTest, KjvContents) {
  auto file_or = GgufFile::Open(shared_ + "/models/kjv-1m.gguf");
  ASSERT_TRUE(file_or.ok()) << file_or.status();
  const GgufFile& file = **file_or;
  EXPECT_EQ(file.file_size(), 4223776u);
  EXPECT_EQ(*file.GetString("general.architecture"), "llama");
  EXPECT_EQ(*file.GetUint("llama.embedding_length"), 128u);
  EXPECT_EQ(*file.GetInt("llama.attention.head_count_kv"), 2);
  EXPECT_FLOAT_EQ(*file.GetFloat("llama.rope.freq_base"), 10000.0f);
  EXPECT_TRUE(*file.GetBool("tokenizer.ggml.add_bos_token"));
  EXPECT_FALSE(*file.GetBool("tokenizer.ggml.add_eos_token"));
  EXPECT_EQ(*file.TypeOf("llama.block_count"), GgufValueType::kUint32);
  EXPECT_EQ(*file.GetArrayLength("tokenizer.ggml.tokens"), 1024u);
  auto tokens = file.GetStringArray("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok());
  ASSERT_EQ(tokens->size(), 1024u);
  EXPECT_EQ((*tokens)[0], "<unk>");
  EXPECT_EQ((*tokens)[1], "<s>");
  EXPECT_EQ((*tokens)[2], "</s>");
  auto types = file.GetInt32Array("tokenizer.ggml.token_type");
  ASSERT_TRUE(types.ok());
  EXPECT_EQ(types->size(), 1024u);
  EXPECT_THAT(std::vector<int32_t>(types->begin(), types->begin() + 3), ElementsAre(2, 3, 3));
  EXPECT_EQ(file.GetFloatArray("tokenizer.ggml.scores")->size(), 1024u);
  EXPECT_EQ(file.Keys().front(), "general.architecture");
  EXPECT_EQ(file.Keys().back(), "tokenizer.ggml.add_eos_token");

  const GgufTensorInfo* embd = file.FindTensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->type, GgmlType::kF32);
  EXPECT_THAT(embd->dims, ElementsAre(128, 1024));
  EXPECT_EQ(embd->num_elements, 131072);
  EXPECT_EQ(embd->size_bytes, 524288u);
  EXPECT_EQ(embd->file_offset, 24864u);  // end of tensor infos (24840) aligned to 32
  float first[2];
  std::memcpy(first, embd->data, sizeof(first));
  EXPECT_FLOAT_EQ(first[0], 0.023285353556275368f);
  EXPECT_FLOAT_EQ(first[1], -0.005608373321592808f);
  const GgufTensorInfo* out = file.FindTensor("output.weight");
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(out->file_offset, 24864u + 3674624u);
  std::memcpy(first, out->data, sizeof(first));
  EXPECT_FLOAT_EQ(first[0], 0.24380072951316833f);
  EXPECT_FLOAT_EQ(first[1], -0.17772921919822693f);
  EXPECT_THAT(file.FindTensor("blk.3.attn_k.weight")->dims, ElementsAre(128, 64));
  EXPECT_EQ(file.FindTensor("no.such.tensor"), nullptr);
}

TEST_F(SharedFilesTest, QuantizedAndVocabFiles) {
  auto q8 = GgufFile::Open(shared_ + "/models/mini-random-q8_0.gguf");
  ASSERT_TRUE(q8.ok()) << q8.status();
  const GgufTensorInfo* embd = (*q8)->FindTensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->type, GgmlType::kQ8_0);
  EXPECT_EQ(embd->size_bytes, 128u * 32000 / 32 * 34);
  EXPECT_EQ(embd->file_offset, 725152u);
  EXPECT_EQ(embd->data[0], 0xc9);
  EXPECT_EQ(embd->data[1], 0x0f);
  EXPECT_EQ((*q8)->FindTensor("blk.0.attn_norm.weight")->type, GgmlType::kF32);

  auto gpt2 = GgufFile::Open(shared_ + "/vocab/ggml-vocab-gpt-2.gguf");
  ASSERT_TRUE(gpt2.ok()) << gpt2.status();
  EXPECT_EQ((*gpt2)->file_size(), 1766807u);  // no data section: ends unaligned
  auto merges = (*gpt2)->GetStringArray("tokenizer.ggml.merges");
  ASSERT_TRUE(merges.ok());
  ASSERT_EQ(merges->size(), 50000u);
  EXPECT_EQ((*merges)[0], "\xC4\xA0 t");
  EXPECT_EQ(*(*gpt2)->GetUint("tokenizer.ggml.eos_token_id"), 50256u);
}

// ---------------------------------------------------------------------------------------
// Metadata getters and the writer

std::vector<uint8_t> MakeMetadataFile(uint32_t alignment = 0) {
  GgufWriter w;
  if (alignment != 0) w.SetUint32("general.alignment", alignment);
  w.SetString("s", "hello");
  w.SetUint32("u32", 4000000000u);
  w.SetInt32("neg", -5);
  w.SetInt32("pos", 17);
  w.SetUint64("big", 18000000000000000000ull);
  w.SetFloat32("f", 1.5f);
  w.SetBool("yes", true);
  w.SetStringArray("strs", std::vector<std::string>{"x", "", "yz"});
  w.SetFloat32Array("floats", std::vector<float>{0.5f, -2.0f});
  w.SetInt32Array("ints", std::vector<int32_t>{1, -2, 3});
  w.SetStringArray("empty", std::vector<std::string>{});
  std::vector<float> a = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<uint8_t> a_bytes(a.size() * 4);
  std::memcpy(a_bytes.data(), a.data(), a_bytes.size());
  w.AddTensor("a", GgmlType::kF32, {8}, a_bytes);
  w.AddTensor("h", GgmlType::kF16, {3}, std::vector<uint8_t>{1, 2, 3, 4, 5, 6});
  w.AddTensor("q", GgmlType::kQ8_0, {32, 2}, std::vector<uint8_t>(68, 7));
  auto bytes = w.Serialize();
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *bytes : std::vector<uint8_t>();
}

// RssFile of /proc/self/status, in bytes.
int64_t RssFileBytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("RssFile:", 0) == 0) return std::stoll(line.substr(8)) * 1024;
  }
  return -1;
}

TEST_F(SharedFilesTest, ReleaseResidentPagesKeepsContentsAndFreesMemory) {
  auto file = GgufFile::Open(shared_ + "/models/tinyllama-256-Q6_K.gguf");
  ASSERT_TRUE(file.ok()) << file.status();
  const GgufTensorInfo* t = (*file)->FindTensor("token_embd.weight");
  ASSERT_NE(t, nullptr);
  uint64_t sum = 0;
  for (uint64_t i = 0; i < t->size_bytes; ++i) sum += t->data[i];
  const int64_t touched = RssFileBytes();
  (*file)->ReleaseResidentPages();
  const int64_t released = RssFileBytes();
  EXPECT_LT(released, touched - static_cast<int64_t>(t->size_bytes) / 2)
      << "RssFile " << touched << " -> " << released;
  uint64_t again = 0;
  for (uint64_t i = 0; i < t->size_bytes; ++i) again += t->data[i];
  EXPECT_EQ(again, sum);
}

// One tensor's pages: that tensor stops counting, another touched one stays resident.
TEST_F(SharedFilesTest, ReleaseResidentPagesOfOneTensorKeepsContentsAndTheOthers) {
  auto file = GgufFile::Open(shared_ + "/models/tinyllama-256-Q6_K.gguf");
  ASSERT_TRUE(file.ok()) << file.status();
  const GgufTensorInfo* embd = (*file)->FindTensor("token_embd.weight");
  const GgufTensorInfo* out = (*file)->FindTensor("output.weight");
  ASSERT_NE(embd, nullptr);
  ASSERT_NE(out, nullptr);
  const auto sum = [](const GgufTensorInfo& t) {
    uint64_t s = 0;
    for (uint64_t i = 0; i < t.size_bytes; ++i) s += t.data[i];
    return s;
  };
  const uint64_t embd_sum = sum(*embd);
  EXPECT_GT(sum(*out), 0u);  // used, so the reads happen
  const int64_t touched = RssFileBytes();
  (*file)->ReleaseResidentPages(*embd);
  const int64_t released = RssFileBytes();
  EXPECT_LT(released, touched - static_cast<int64_t>(embd->size_bytes) / 2)
      << "RssFile " << touched << " -> " << released;
  // output.weight's pages (but the one it may share with the embedding) are still there.
  EXPECT_GT(released, static_cast<int64_t>(out->size_bytes) - 8192)
      << "RssFile " << touched << " -> " << released;
  EXPECT_EQ(sum(*embd), embd_sum);
}

TEST(GgufFileTest, GettersReturnStoredValues) {
  auto file_or = OpenBytes(MakeMetadataFile(), "getters");
  ASSERT_TRUE(file_or.ok()) << file_or.status();
  const GgufFile& f = **file_or;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_THAT(f.Keys(), ElementsAre("s", "u32", "neg", "pos", "big", "f", "yes", "strs", "floats",
                                    "ints", "empty"));
  EXPECT_TRUE(f.HasKey("s"));
  EXPECT_FALSE(f.HasKey("nope"));
  EXPECT_EQ(*f.GetString("s"), "hello");
  EXPECT_EQ(*f.GetUint("u32"), 4000000000u);
  EXPECT_EQ(*f.GetInt("u32"), 4000000000);
  EXPECT_EQ(*f.GetInt("neg"), -5);
  EXPECT_EQ(*f.GetUint("pos"), 17u);  // any integer type whose value fits
  EXPECT_EQ(*f.GetUint("big"), 18000000000000000000ull);
  EXPECT_FLOAT_EQ(*f.GetFloat("f"), 1.5f);
  EXPECT_TRUE(*f.GetBool("yes"));
  EXPECT_THAT(*f.GetStringArray("strs"), ElementsAre("x", "", "yz"));
  EXPECT_THAT(*f.GetFloatArray("floats"), ElementsAre(0.5f, -2.0f));
  EXPECT_THAT(*f.GetInt32Array("ints"), ElementsAre(1, -2, 3));
  EXPECT_EQ(*f.GetArrayLength("strs"), 3u);
  EXPECT_EQ(*f.GetArrayLength("empty"), 0u);
  EXPECT_TRUE(f.GetStringArray("empty")->empty());
  EXPECT_EQ(*f.TypeOf("neg"), GgufValueType::kInt32);
  EXPECT_EQ(*f.TypeOf("strs"), GgufValueType::kArray);
  EXPECT_EQ(*f.ArrayElementType("ints"), GgufValueType::kInt32);
}

TEST(GgufFileTest, GetterErrors) {
  auto file_or = OpenBytes(MakeMetadataFile(), "getter_errors");
  ASSERT_TRUE(file_or.ok()) << file_or.status();
  const GgufFile& f = **file_or;

  EXPECT_EQ(f.GetString("missing").status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(f.GetString("missing").status().message(), HasSubstr("'missing'"));
  EXPECT_EQ(f.TypeOf("missing").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(f.GetUint("missing").status().code(), absl::StatusCode::kNotFound);

  // Wrong type: INVALID_ARGUMENT naming the key, the stored and the expected type.
  absl::Status s = f.GetString("u32").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("'u32'"));
  EXPECT_THAT(s.message(), HasSubstr("uint32"));
  EXPECT_THAT(s.message(), HasSubstr("expected string"));
  s = f.GetUint("s").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("has type string"));
  EXPECT_EQ(f.GetUint("f").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f.GetInt("yes").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f.GetFloat("u32").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f.GetBool("u32").status().code(), absl::StatusCode::kInvalidArgument);
  // Negative value for an unsigned getter; uint64 beyond int64.
  s = f.GetUint("neg").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("negative"));
  EXPECT_EQ(f.GetInt("big").status().code(), absl::StatusCode::kInvalidArgument);
  // Arrays: scalar asked as array, wrong element type.
  s = f.GetStringArray("s").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("an array"));
  s = f.GetStringArray("ints").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("array<int32>"));
  EXPECT_EQ(f.GetFloatArray("strs").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f.GetInt32Array("floats").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f.GetArrayLength("s").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f.GetString("strs").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(GgufFileTest, AllThirteenValueTypes) {
  RawSpec spec;
  spec.kvs = {
      Kv("u8", 0, Bytes().U8(200)),
      Kv("i8", 1, Bytes().Put<int8_t>(-100)),
      Kv("u16", 2, Bytes().Put<uint16_t>(60000)),
      Kv("i16", 3, Bytes().Put<int16_t>(-30000)),
      Kv("u32", 4, Bytes().U32(4000000000u)),
      Kv("i32", 5, Bytes().I32(-2000000000)),
      Kv("f32", 6, Bytes().F32(0.25f)),
      Kv("bool", 7, Bytes().U8(1)),
      Kv("str", 8, Bytes().Str("text")),
      Kv("u64", 10, Bytes().U64(1ull << 40)),
      Kv("i64", 11, Bytes().Put<int64_t>(-(1ll << 40))),
      Kv("f64", 12, Bytes().Put<double>(-1.5)),
      Kv("arr_i16", 9, Bytes().U32(3).U64(3).Put<int16_t>(-1).Put<int16_t>(2).Put<int16_t>(-3)),
      Kv("arr_f64", 9, Bytes().U32(12).U64(2).Put<double>(0.5).Put<double>(4.0)),
      Kv("arr_bool", 9, Bytes().U32(7).U64(3).U8(1).U8(0).U8(1)),
      Kv("arr_u8", 9, Bytes().U32(0).U64(0)),
      // array<array<uint32>> (one level of nesting is allowed).
      Kv("arr_arr", 9, Bytes().U32(9).U64(2).U32(4).U64(1).U32(7).U32(4).U64(2).U32(8).U32(9)),
  };
  auto file_or = OpenBytes(Build(spec), "all_types");
  ASSERT_TRUE(file_or.ok()) << file_or.status();
  const GgufFile& f = **file_or;
  EXPECT_EQ(*f.GetUint("u8"), 200u);
  EXPECT_EQ(*f.GetInt("i8"), -100);
  EXPECT_EQ(*f.GetUint("u16"), 60000u);
  EXPECT_EQ(*f.GetInt("i16"), -30000);
  EXPECT_EQ(*f.GetUint("u32"), 4000000000u);
  EXPECT_EQ(*f.GetInt("i32"), -2000000000);
  EXPECT_FLOAT_EQ(*f.GetFloat("f32"), 0.25f);
  EXPECT_TRUE(*f.GetBool("bool"));
  EXPECT_EQ(*f.GetString("str"), "text");
  EXPECT_EQ(*f.GetUint("u64"), 1ull << 40);
  EXPECT_EQ(*f.GetInt("i64"), -(1ll << 40));
  EXPECT_FLOAT_EQ(*f.GetFloat("f64"), -1.5f);
  EXPECT_EQ(*f.TypeOf("i8"), GgufValueType::kInt8);
  EXPECT_EQ(*f.TypeOf("f64"), GgufValueType::kFloat64);
  EXPECT_EQ(f.GetUint("i64").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(*f.GetInt32Array("arr_i16"), ElementsAre(-1, 2, -3));
  EXPECT_THAT(*f.GetFloatArray("arr_f64"), ElementsAre(0.5f, 4.0f));
  EXPECT_EQ(*f.GetArrayLength("arr_bool"), 3u);
  EXPECT_EQ(*f.ArrayElementType("arr_bool"), GgufValueType::kBool);
  EXPECT_EQ(*f.GetArrayLength("arr_u8"), 0u);
  EXPECT_EQ(*f.GetArrayLength("arr_arr"), 2u);
  EXPECT_EQ(*f.ArrayElementType("arr_arr"), GgufValueType::kArray);
  EXPECT_EQ(f.GetInt32Array("arr_arr").status().code(), absl::StatusCode::kInvalidArgument);
  // The raw bytes of a value are exactly what was written after the type field.
  auto raw = f.RawValue("u16");
  ASSERT_TRUE(raw.ok());
  EXPECT_THAT(std::vector<uint8_t>(raw->begin(), raw->end()), ElementsAre(0x60, 0xEA));
  EXPECT_EQ(f.RawValue("arr_arr")->size(), 12u + 2 * (12 + 4) + 4);
  // Every type survives a CopyKeys round trip through the writer.
  GgufWriter w;
  ASSERT_TRUE(w.CopyKeys(f, "").ok());
  auto copy = OpenBytes(*w.Serialize(), "all_types_copy");
  ASSERT_TRUE(copy.ok()) << copy.status();
  EXPECT_EQ((*copy)->Keys(), f.Keys());
  EXPECT_EQ(*(*copy)->GetInt("i16"), -30000);
  EXPECT_EQ(*(*copy)->GetArrayLength("arr_arr"), 2u);
  EXPECT_THAT(*(*copy)->GetFloatArray("arr_f64"), ElementsAre(0.5f, 4.0f));
}

TEST(GgufFileTest, Int32ArrayRejectsValuesThatDoNotFit) {
  // An array of uint32 holding 3e9.
  RawSpec spec;
  spec.kvs.push_back(Kv("wide", kTypeArray, Bytes().U32(kTypeU32).U64(2).U32(5).U32(3000000000u)));
  auto file = OpenBytes(Build(spec), "int32_fit");
  ASSERT_TRUE(file.ok()) << file.status();
  absl::Status s = (*file)->GetInt32Array("wide").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("3000000000"));
}

TEST(GgufWriterTest, RoundTrip) {
  const std::vector<uint8_t> bytes = MakeMetadataFile();
  // Header fields at fixed offsets (GGUF v3 layout).
  ASSERT_GE(bytes.size(), 24u);
  EXPECT_EQ(std::string(bytes.begin(), bytes.begin() + 4), "GGUF");
  uint32_t version;
  uint64_t n_tensors, n_kv;
  std::memcpy(&version, bytes.data() + 4, 4);
  std::memcpy(&n_tensors, bytes.data() + 8, 8);
  std::memcpy(&n_kv, bytes.data() + 16, 8);
  EXPECT_EQ(version, 3u);
  EXPECT_EQ(n_tensors, 3u);
  EXPECT_EQ(n_kv, 11u);
  EXPECT_EQ(bytes.size() % 32, 0u);

  auto file_or = OpenBytes(bytes, "roundtrip");
  ASSERT_TRUE(file_or.ok()) << file_or.status();
  const GgufFile& f = **file_or;
  ASSERT_EQ(f.tensors().size(), 3u);
  const GgufTensorInfo& a = f.tensors()[0];
  EXPECT_EQ(a.name, "a");
  EXPECT_EQ(a.type, GgmlType::kF32);
  EXPECT_THAT(a.dims, ElementsAre(8));
  float values[8];
  std::memcpy(values, a.data, sizeof(values));
  EXPECT_THAT(values, ElementsAre(1, 2, 3, 4, 5, 6, 7, 8));
  const GgufTensorInfo* h = f.FindTensor("h");
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->file_offset, a.file_offset + 32);
  EXPECT_EQ(h->size_bytes, 6u);
  EXPECT_THAT(std::vector<uint8_t>(h->data, h->data + 6), ElementsAre(1, 2, 3, 4, 5, 6));
  const GgufTensorInfo* q = f.FindTensor("q");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->file_offset, h->file_offset + 32);  // 6 bytes padded to 32
  EXPECT_EQ(q->size_bytes, 68u);
  EXPECT_EQ(q->num_elements, 64);
  EXPECT_EQ(q->data[67], 7);

  // Copying keys with their stored types reproduces the values.
  GgufWriter copy;
  ASSERT_TRUE(copy.CopyKeys(f, "").ok());
  auto copy_or = OpenBytes(*copy.Serialize(), "roundtrip_copy");
  ASSERT_TRUE(copy_or.ok()) << copy_or.status();
  EXPECT_EQ((*copy_or)->Keys(), f.Keys());
  EXPECT_THAT(*(*copy_or)->GetStringArray("strs"), ElementsAre("x", "", "yz"));
  EXPECT_EQ(*(*copy_or)->GetInt("neg"), -5);
  EXPECT_TRUE((*copy_or)->tensors().empty());

  // Prefix filter.
  GgufWriter some;
  ASSERT_TRUE(some.CopyKeys(f, "s").ok());
  auto some_or = OpenBytes(*some.Serialize(), "roundtrip_prefix");
  ASSERT_TRUE(some_or.ok()) << some_or.status();
  EXPECT_THAT((*some_or)->Keys(), ElementsAre("s", "strs"));
}

TEST(GgufWriterTest, WriteFileMatchesSerializeAndStreams) {
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetString("general.architecture", "llama2");  // overwrite keeps one entry
  int produced = 0;
  w.AddStreamedTensor("s", GgmlType::kF32, {4}, [&](std::vector<uint8_t>* out) {
    ++produced;
    out->assign(16, 9);
    return absl::OkStatus();
  });
  w.AddTensor("t", GgmlType::kI8, {5}, std::vector<uint8_t>{1, 2, 3, 4, 5});
  const std::string path = TempPath("writefile.gguf");
  ASSERT_TRUE(w.WriteFile(path).ok());
  auto serialized = w.Serialize();
  ASSERT_TRUE(serialized.ok());
  EXPECT_EQ(produced, 2);
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> on_disk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(on_disk, *serialized);
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_THAT((*f)->Keys(), ElementsAre("general.architecture"));
  EXPECT_EQ(*(*f)->GetString("general.architecture"), "llama2");
  EXPECT_EQ((*f)->FindTensor("s")->data[15], 9);
  EXPECT_EQ((*f)->FindTensor("t")->data[4], 5);
  std::remove(path.c_str());
}

TEST(GgufWriterTest, HonoursAlignmentKey) {
  auto f = OpenBytes(MakeMetadataFile(64), "align64");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->alignment(), 64u);
  for (const GgufTensorInfo& t : (*f)->tensors()) EXPECT_EQ(t.file_offset % 64, 0u) << t.name;
  EXPECT_EQ((*f)->FindTensor("h")->file_offset, (*f)->FindTensor("a")->file_offset + 64);
}

TEST(GgufWriterTest, Errors) {
  {
    GgufWriter w;
    w.AddTensor("a", GgmlType::kF32, {3}, std::vector<uint8_t>(11));
    absl::Status s = w.Serialize().status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("'a'"));
  }
  {
    GgufWriter w;
    w.AddTensor("a", GgmlType::kF32, {1}, std::vector<uint8_t>(4));
    w.AddTensor("a", GgmlType::kF32, {1}, std::vector<uint8_t>(4));
    EXPECT_EQ(w.Serialize().status().code(), absl::StatusCode::kInvalidArgument);
  }
  {
    GgufWriter w;
    w.AddTensor("q", GgmlType::kQ8_0, {16}, std::vector<uint8_t>(17));  // not a whole block
    EXPECT_EQ(w.Serialize().status().code(), absl::StatusCode::kInvalidArgument);
  }
  {
    GgufWriter w;
    w.AddStreamedTensor("p", GgmlType::kF32, {2}, [](std::vector<uint8_t>* out) {
      out->resize(4);
      return absl::OkStatus();
    });
    EXPECT_EQ(w.Serialize().status().code(), absl::StatusCode::kInvalidArgument);
  }
  {
    GgufWriter w;
    w.AddStreamedTensor("p", GgmlType::kF32, {2}, [](std::vector<uint8_t>*) {
      return absl::ResourceExhaustedError("out of ideas");
    });
    const std::string path = TempPath("failed_write.gguf");
    absl::Status s = w.WriteFile(path);
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(s.message(), HasSubstr("'p'"));
    // Neither the target nor the temporary file is left behind.
    EXPECT_NE(::access(path.c_str(), F_OK), 0);
    EXPECT_NE(::access((path + ".tmp").c_str(), F_OK), 0);
  }
  {
    GgufWriter w;
    w.SetUint32("general.alignment", 48);
    EXPECT_EQ(w.Serialize().status().code(), absl::StatusCode::kInvalidArgument);
  }
  {
    GgufWriter w;
    EXPECT_FALSE(w.WriteFile("/nonexistent-dir/x.gguf").ok());
  }
}

TEST(GgufFileTest, AcceptsVersion2) {
  std::vector<uint8_t> bytes = MakeMetadataFile();
  bytes[4] = 2;
  auto f = OpenBytes(bytes, "v2");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->version(), 2u);
}

TEST(GgufFileTest, RawSpecBaselineIsValid) {
  // The corruption cases below each bend one field of this file.
  auto f = OpenBytes(Build(RawSpec()), "baseline");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->tensors().size(), 2u);
  EXPECT_EQ(*(*f)->GetUint("test.answer"), 42u);
  EXPECT_EQ((*f)->FindTensor("b")->file_offset, (*f)->FindTensor("a")->file_offset + 32);
}

// ---------------------------------------------------------------------------------------
// Corrupted files

TEST(GgufCorruptTest, TruncatedAtEveryOffset) {
  const std::vector<uint8_t> bytes = MakeMetadataFile();
  ASSERT_FALSE(bytes.empty());
  // The last tensor (68 bytes at an aligned offset) ends 28 bytes before the padded end;
  // cutting only the final padding leaves a valid file, so stop where the data ends.
  auto full = OpenBytes(bytes, "trunc_full");
  ASSERT_TRUE(full.ok());
  const GgufTensorInfo* q = (*full)->FindTensor("q");
  const uint64_t data_end = q->file_offset + q->size_bytes;
  const std::string path = TempPath("trunc");
  for (uint64_t n = 0; n < data_end; ++n) {
    WriteBytes(path, std::vector<uint8_t>(bytes.begin(), bytes.begin() + n));
    auto f = GgufFile::Open(path);
    ASSERT_FALSE(f.ok()) << "truncated to " << n << " bytes opened";
    ASSERT_EQ(f.status().code(), absl::StatusCode::kDataLoss) << n << ": " << f.status();
    ASSERT_THAT(f.status().message(), HasSubstr("truncated")) << n;
  }
  for (uint64_t n = data_end; n <= bytes.size(); ++n) {
    WriteBytes(path, std::vector<uint8_t>(bytes.begin(), bytes.begin() + n));
    EXPECT_TRUE(GgufFile::Open(path).ok()) << n;
  }
  std::remove(path.c_str());
}

struct CorruptCase {
  std::string name;
  std::vector<uint8_t> bytes;
  absl::StatusCode code;
  std::string message;  // expected substring
};

std::vector<CorruptCase> CorruptCases() {
  std::vector<CorruptCase> cases;
  auto add = [&](std::string name, const RawSpec& spec, absl::StatusCode code, std::string msg) {
    cases.push_back({std::move(name), Build(spec), code, std::move(msg)});
  };
  constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
  constexpr auto kDataLoss = absl::StatusCode::kDataLoss;
  const uint64_t kHuge = uint64_t{1} << 62;
  {
    RawSpec s;
    s.magic = "GGML";
    add("bad_magic", s, kInvalid, "bad magic");
  }
  {
    RawSpec s;
    s.version = 1;
    add("version_1", s, kInvalid, "version 1 is not supported");
  }
  {
    RawSpec s;
    s.version = 99;
    add("version_99", s, kInvalid, "unsupported GGUF version 99");
  }
  {
    RawSpec s;
    s.version = 0x03000000;
    add("big_endian", s, kInvalid, "big-endian");
  }
  {
    RawSpec s;
    s.override_counts = true;
    s.tensor_count = kHuge;
    s.kv_count = s.kvs.size();
    add("huge_tensor_count", s, kDataLoss, "tensor infos: 4611686018427387904 entries");
  }
  {
    RawSpec s;
    s.override_counts = true;
    s.tensor_count = s.tensors.size();
    s.kv_count = std::numeric_limits<uint64_t>::max();
    add("huge_kv_count", s, kDataLoss, "metadata entries: 18446744073709551615 entries");
  }
  {
    RawSpec s;
    s.kvs.push_back(Kv("long", kTypeString, Bytes().U64(std::numeric_limits<uint64_t>::max())));
    add("huge_string_length", s, kDataLoss, "'long'");
  }
  {
    RawSpec s;
    s.kvs.push_back(Bytes().U64(kHuge).data());
    add("huge_key_length", s, kDataLoss, "key of metadata entry 2");
  }
  {
    RawSpec s;
    s.kvs.push_back(Kv("arr", kTypeArray, Bytes().U32(kTypeU32).U64(kHuge)));
    add("huge_array_length", s, kDataLoss, "'arr'");
  }
  {
    RawSpec s;
    // 2^60 empty arrays declared: must be refused before any loop or allocation.
    s.kvs.push_back(Kv("bomb", kTypeArray, Bytes().U32(kTypeArray).U64(uint64_t{1} << 60)));
    add("array_of_arrays_bomb", s, kDataLoss, "'bomb'");
  }
  {
    RawSpec s;
    // array<array<array<u8>>>: deeper than allowed.
    s.kvs.push_back(Kv("deep", kTypeArray,
                       Bytes().U32(kTypeArray).U64(1).U32(kTypeArray).U64(1).U32(0).U64(0)));
    add("arrays_nested_too_deep", s, kInvalid, "nests arrays");
  }
  {
    RawSpec s;
    s.kvs.push_back(Kv("odd", 13, Bytes().U32(0)));
    add("unknown_value_type", s, kInvalid, "unknown value type 13");
  }
  {
    RawSpec s;
    s.kvs.push_back(Kv("odd_array", kTypeArray, Bytes().U32(77).U64(1).U32(0)));
    add("unknown_array_element_type", s, kInvalid, "unknown value type 77");
  }
  {
    RawSpec s;
    s.kvs.push_back(Kv("flag", kTypeBool, Bytes().U8(2)));
    add("bool_not_0_or_1", s, kInvalid, "'flag'");
  }
  {
    RawSpec s;
    s.kvs.push_back(KvU32("", 1));
    add("empty_key", s, kInvalid, "empty key");
  }
  {
    RawSpec s;
    s.kvs.push_back(KvU32("test.answer", 43));
    add("duplicate_key", s, kInvalid, "duplicate metadata key 'test.answer'");
  }
  {
    RawSpec s;
    s.kvs.push_back(KvU32("general.alignment", 48));
    s.alignment = 48;
    s.tensors[1].offset = 48;
    add("alignment_not_power_of_two", s, kInvalid, "not a power of two");
  }
  {
    RawSpec s;
    s.kvs.push_back(KvU32("general.alignment", 0));
    add("alignment_zero", s, kInvalid, "general.alignment 0");
  }
  {
    RawSpec s;
    s.kvs.push_back(KvStr("general.alignment", "32"));
    add("alignment_wrong_type", s, kInvalid, "'general.alignment' has type string");
  }
  {
    RawSpec s;
    s.kvs.push_back(Kv("general.alignment", kTypeF32, Bytes().F32(32.0f)));
    add("alignment_float", s, kInvalid, "'general.alignment' has type float32");
  }
  {
    RawSpec s;
    s.kvs.push_back(Kv("general.alignment", kTypeI32, Bytes().I32(-32)));
    add("alignment_negative", s, kInvalid, "negative");
  }
  {
    RawSpec s;
    s.tensors[0].type = 4;  // Q4_2 was removed from ggml
    add("unknown_tensor_type_removed", s, kInvalid, "tensor 'a' has unknown ggml type 4");
  }
  {
    RawSpec s;
    s.tensors[1].type = 1000;
    add("unknown_tensor_type", s, kInvalid, "unknown ggml type 1000");
  }
  {
    RawSpec s;
    s.tensors[0].dims = {};
    add("n_dims_0", s, kInvalid, "has 0 dimensions");
  }
  {
    RawSpec s;
    s.tensors[0].dims = {8, 1, 1, 1, 1};
    add("n_dims_5", s, kInvalid, "has 5 dimensions");
  }
  {
    RawSpec s;
    s.tensors[0].dims = {8};
    s.tensors[0].n_dims_override = 0xFFFFFFFF;
    add("n_dims_huge", s, kInvalid, "dimensions");
  }
  {
    RawSpec s;
    s.tensors[1].dims = {4, 0};
    add("zero_dimension", s, kInvalid, "'b' dimension 1 is 0");
  }
  {
    RawSpec s;
    s.tensors[1].dims = {uint64_t{1} << 32, uint64_t{1} << 32};
    add("dimension_product_overflow", s, kInvalid, "overflows");
  }
  {
    RawSpec s;
    s.tensors[1].dims = {std::numeric_limits<uint64_t>::max(), 1};
    add("dimension_above_int64", s, kInvalid, "'b' dimension 0");
  }
  {
    RawSpec s;
    s.tensors[1].type = kGgmlF64;  // element count fits, byte count does not
    s.tensors[1].dims = {uint64_t{1} << 61, 1};
    add("byte_size_overflow", s, kInvalid, "overflows");
  }
  {
    RawSpec s;
    s.tensors[1].type = kGgmlQ8_0;
    s.tensors[1].dims = {16, 2};
    add("partial_quant_block", s, kInvalid, "block size 32");
  }
  // The block types Quill decodes: a row that is not whole blocks, and block data cut short.
  const struct {
    const char* name;
    uint32_t type, block_elements, block_bytes;
  } kBlockTypes[] = {{"q4_0", 2, 32, 18},   {"q4_1", 3, 32, 20},    {"q5_0", 6, 32, 22},
                     {"q5_1", 7, 32, 24},   {"q4_k", 12, 256, 144}, {"q5_k", 13, 256, 176},
                     {"q6_k", 14, 256, 210}};
  for (const auto& t : kBlockTypes) {
    {
      RawSpec s;
      s.tensors[1].type = t.type;
      s.tensors[1].dims = {t.block_elements + 16, 2};
      add(absl::StrCat(t.name, "_partial_block"), s, kInvalid,
          absl::StrCat("not a multiple of the ", absl::AsciiStrToUpper(t.name), " block size ",
                       t.block_elements));
    }
    {
      RawSpec s;  // two blocks at offset 32: one byte more than the file holds
      s.tensors[1].type = t.type;
      s.tensors[1].dims = {2 * t.block_elements};
      s.data_bytes = 32 + 2 * t.block_bytes - 1;
      add(absl::StrCat(t.name, "_truncated_blocks"), s, kDataLoss, "extends past the end");
    }
  }
  {
    RawSpec s;
    s.tensors[1].offset = 1024;
    add("offset_past_end", s, kDataLoss, "tensor 'b'");
  }
  {
    RawSpec s;
    s.tensors[1].offset = std::numeric_limits<uint64_t>::max() - 31;  // aligned, wraps if added
    add("offset_wraps", s, kDataLoss, "tensor 'b'");
  }
  {
    RawSpec s;
    s.tensors[1].dims = {4, 4};  // 64 bytes from offset 32: 32 bytes past the end
    add("data_past_end", s, kDataLoss, "extends past the end");
  }
  {
    RawSpec s;
    s.tensors[1].offset = 36;
    add("misaligned_offset", s, kInvalid, "not a multiple of the alignment 32");
  }
  {
    RawSpec s;
    s.tensors[0].dims = {16};  // 64 bytes at 0 overlaps 'b' at 32
    add("overlapping_tensors", s, kInvalid, "overlap");
  }
  {
    RawSpec s;
    s.tensors[1].offset = 0;
    s.tensors[1].dims = {8};
    add("same_offset_tensors", s, kInvalid, "overlap");
  }
  {
    RawSpec s;
    s.tensors[1].name = "a";
    add("duplicate_tensor_names", s, kInvalid, "duplicate tensor name 'a'");
  }
  {
    RawSpec s;
    s.tensors[1].name = "";
    add("empty_tensor_name", s, kInvalid, "empty name");
  }
  {
    RawSpec s;
    s.tensors[1].name = std::string("bad\xff\n", 5);
    s.tensors[1].dims = {4, 0};
    add("garbage_name_is_escaped", s, kInvalid, "'bad\\xff\\n'");
  }
  cases.push_back({"empty_file", {}, kDataLoss, "empty"});
  return cases;
}

class GgufCorruptCaseTest : public ::testing::TestWithParam<CorruptCase> {};

TEST_P(GgufCorruptCaseTest, ReturnsCleanError) {
  const CorruptCase& c = GetParam();
  auto f = OpenBytes(c.bytes, c.name);
  ASSERT_FALSE(f.ok()) << c.name << " opened";
  EXPECT_EQ(f.status().code(), c.code) << f.status();
  EXPECT_THAT(f.status().message(), HasSubstr(c.message)) << f.status();
}

INSTANTIATE_TEST_SUITE_P(Cases, GgufCorruptCaseTest, ::testing::ValuesIn(CorruptCases()),
                         [](const ::testing::TestParamInfo<CorruptCase>& info) {
                           return info.param.name;
                         });

TEST(GgufCorruptTest, PathErrors) {
  auto missing = GgufFile::Open(TempPath("does_not_exist.gguf"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("does_not_exist.gguf"));
  auto missing_dir = GgufFile::Open("/nonexistent-dir/x.gguf");
  EXPECT_EQ(missing_dir.status().code(), absl::StatusCode::kNotFound);
  auto dir = GgufFile::Open(::testing::TempDir());
  EXPECT_EQ(dir.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(dir.status().message(), HasSubstr("directory"));
}

// Flips random bytes of a valid file; Open must never crash or read out of bounds, and
// whatever opens must be fully readable.
TEST(GgufCorruptTest, RandomByteFlipsNeverCrash) {
  const std::vector<uint8_t> bytes = MakeMetadataFile();
  ASSERT_FALSE(bytes.empty());
  std::mt19937_64 rng(20240601);
  const std::string path = TempPath("fuzz");
  int failures = 0;
  for (int iteration = 0; iteration < 2000; ++iteration) {
    std::vector<uint8_t> mutated = bytes;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < flips; ++i) {
      // Most flips land in the header and metadata, where the parser's decisions are.
      const size_t limit = (rng() % 4 == 0) ? mutated.size() : std::min<size_t>(mutated.size(), 400);
      mutated[rng() % limit] ^= static_cast<uint8_t>(1 + rng() % 255);
    }
    WriteBytes(path, mutated);
    auto f = GgufFile::Open(path);
    if (!f.ok()) {
      ++failures;
      const absl::StatusCode code = f.status().code();
      ASSERT_TRUE(code == absl::StatusCode::kInvalidArgument || code == absl::StatusCode::kDataLoss)
          << f.status();
      continue;
    }
    // Touch every value and every tensor byte.
    for (const std::string& key : (*f)->Keys()) {
      (void)(*f)->GetString(key);
      (void)(*f)->GetUint(key);
      (void)(*f)->GetInt(key);
      (void)(*f)->GetFloat(key);
      (void)(*f)->GetBool(key);
      (void)(*f)->GetStringArray(key);
      (void)(*f)->GetFloatArray(key);
      (void)(*f)->GetInt32Array(key);
      (void)(*f)->RawValue(key);
    }
    uint64_t sum = 0;
    for (const GgufTensorInfo& t : (*f)->tensors()) {
      ASSERT_LE(t.file_offset + t.size_bytes, (*f)->file_size());
      for (uint64_t i = 0; i < t.size_bytes; ++i) sum += t.data[i];
    }
    (void)sum;
  }
  std::remove(path.c_str());
  EXPECT_GT(failures, 100);  // the flips did reach the parser's checks
}

}  // namespace
}  // namespace quill::engine
