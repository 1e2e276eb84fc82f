#include "engine/model/model.h"

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/base/cpu_features.h"
#include "engine/gguf/gguf_writer.h"
#include "engine/kv_cache/kv_cache.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_env.h"

namespace quill::engine {
namespace {

using kernels::Precision;
using ::testing::HasSubstr;

std::string Shared() {
  const char* dir = std::getenv("QUILL_SHARED_DIR");
  return dir == nullptr ? "" : dir;
}

bool Exists(const std::string& path) { return std::ifstream(path).good(); }

#define REQUIRE_FILE(path)                                             \
  do {                                                                 \
    if (!Exists(path)) GTEST_SKIP() << "shared assets not found at " << (path); \
  } while (0)

std::string KjvPath() { return Shared() + "/models/kjv-1m.gguf"; }

std::vector<uint8_t> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

void WriteAll(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

absl::StatusOr<std::unique_ptr<Model>> LoadPath(const std::string& path,
                                                Precision precision = Precision::kExact,
                                                int max_batch_tokens = 64) {
  ModelOptions o;
  o.path = path;
  o.precision = precision;
  o.max_batch_tokens = max_batch_tokens;
  return Model::Load(o);
}

std::unique_ptr<KvCache> MakeCache(const Model& model, int64_t tokens) {
  const ModelConfig& c = model.config();
  const int64_t per_token = int64_t{2} * c.block_count * c.head_count_kv * c.head_dim * 4;
  auto cache = KvCache::Create(model.MakeKvCacheOptions(per_token * (tokens + 16), 16));
  EXPECT_TRUE(cache.ok()) << cache.status();
  return cache.ok() ? std::move(*cache) : nullptr;
}

// A tiny random Llama written with GgufWriter, using kjv-1m's tokenizer (1024 tokens).
struct TinySpec {
  bool tied = false;
  bool output_equals_embedding = false;  // untied, but output.weight = token_embd.weight
  GgmlType matmul_type = GgmlType::kF32;
  std::string omit;  // tensor name to leave out
};

constexpr int kVocab = 1024, kDim = 32, kLayers = 2, kHeads = 4, kKvHeads = 2, kFfn = 64;

std::vector<uint8_t> Encode(const std::vector<float>& v, GgmlType type) {
  std::vector<uint8_t> out;
  if (type == GgmlType::kF32) {
    out.resize(v.size() * 4);
    std::memcpy(out.data(), v.data(), out.size());
  } else if (type == GgmlType::kBF16 || type == GgmlType::kF16) {
    out.resize(v.size() * 2);
    for (size_t i = 0; i < v.size(); ++i) {
      uint16_t h = type == GgmlType::kBF16 ? kernels::FloatToBf16(v[i]) : kernels::FloatToFp16(v[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  } else if (type == GgmlType::kI32) {
    out.assign(v.size() * 4, 0);  // contents irrelevant: the loader must refuse it
  }
  return out;
}

absl::Status WriteTinyModel(const std::string& path, const TinySpec& spec) {
  auto tok_file = GgufFile::Open(KjvPath());
  if (!tok_file.ok()) return tok_file.status();
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetString("general.name", "tiny-test");
  w.SetUint32("llama.context_length", 128);
  w.SetUint32("llama.embedding_length", kDim);
  w.SetUint32("llama.block_count", kLayers);
  w.SetUint32("llama.feed_forward_length", kFfn);
  w.SetUint32("llama.attention.head_count", kHeads);
  w.SetUint32("llama.attention.head_count_kv", kKvHeads);
  w.SetUint32("llama.rope.dimension_count", kDim / kHeads);
  w.SetFloat32("llama.rope.freq_base", 10000.0f);
  w.SetFloat32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  if (absl::Status s = w.CopyKeys(**tok_file, "tokenizer."); !s.ok()) return s;

  std::mt19937 rng(99);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  auto random = [&](int64_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = normal(rng);
    return v;
  };
  auto add = [&](const std::string& name, GgmlType type, std::vector<int64_t> dims,
                 const std::vector<float>& values) {
    if (name == spec.omit) return;
    w.AddTensor(name, type, dims, Encode(values, type));
  };
  const int hd = kDim / kHeads;
  std::vector<float> embd = random(int64_t{kVocab} * kDim);
  add("token_embd.weight", GgmlType::kF32, {kDim, kVocab}, embd);
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = absl::StrCat("blk.", l, ".");
    std::vector<float> ones(kDim);
    for (float& x : ones) x = 1.0f + 0.1f * normal(rng);
    add(p + "attn_norm.weight", GgmlType::kF32, {kDim}, ones);
    add(p + "ffn_norm.weight", GgmlType::kF32, {kDim}, ones);
    const GgmlType t = spec.matmul_type;
    add(p + "attn_q.weight", t, {kDim, kHeads * hd}, random(kDim * kHeads * hd));
    add(p + "attn_k.weight", t, {kDim, kKvHeads * hd}, random(kDim * kKvHeads * hd));
    add(p + "attn_v.weight", t, {kDim, kKvHeads * hd}, random(kDim * kKvHeads * hd));
    add(p + "attn_output.weight", t, {kHeads * hd, kDim}, random(kDim * kHeads * hd));
    add(p + "ffn_gate.weight", t, {kDim, kFfn}, random(kDim * kFfn));
    add(p + "ffn_up.weight", t, {kDim, kFfn}, random(kDim * kFfn));
    add(p + "ffn_down.weight", t, {kFfn, kDim}, random(kDim * kFfn));
  }
  std::vector<float> norm(kDim, 1.0f);
  add("output_norm.weight", GgmlType::kF32, {kDim}, norm);
  if (!spec.tied) {
    add("output.weight", GgmlType::kF32, {kDim, kVocab},
        spec.output_equals_embedding ? embd : random(int64_t{kVocab} * kDim));
  }
  return w.WriteFile(path);
}

TinySpec Omitting(const std::string& name) {
  TinySpec s;
  s.omit = name;
  return s;
}
TinySpec WithType(GgmlType type) {
  TinySpec s;
  s.matmul_type = type;
  return s;
}
TinySpec Tied() {
  TinySpec s;
  s.tied = true;
  return s;
}
TinySpec OutputCopiesEmbedding() {
  TinySpec s;
  s.output_equals_embedding = true;
  return s;
}

// Unique to this process and removed when it exits.
std::string TempPath(const std::string& name) { return quill::testing::ScratchPath(name); }

TEST(ModelLoadTest, MissingFileIsNotFound) {
  auto m = LoadPath("/nonexistent/dir/model.gguf");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kNotFound) << m.status();
}

TEST(ModelLoadTest, RejectsNonPositiveBatch) {
  REQUIRE_FILE(KjvPath());
  auto m = LoadPath(KjvPath(), Precision::kExact, 0);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << m.status();
}

TEST(ModelLoadTest, VocabOnlyFileIsMissingTensors) {
  const std::string path = Shared() + "/vocab/ggml-vocab-llama-spm.gguf";
  REQUIRE_FILE(path);
  auto m = LoadPath(path);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << m.status();
}

TEST(ModelLoadTest, TruncatedCopyIsDataLoss) {
  REQUIRE_FILE(KjvPath());
  std::vector<uint8_t> bytes = ReadAll(KjvPath());
  bytes.resize(bytes.size() - 1000);
  const std::string path = TempPath("kjv-truncated.gguf");
  WriteAll(path, bytes);
  auto m = LoadPath(path);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kDataLoss) << m.status();
}

TEST(ModelLoadTest, CorruptedMagicIsRejected) {
  REQUIRE_FILE(KjvPath());
  std::vector<uint8_t> bytes = ReadAll(KjvPath());
  bytes[0] ^= 0xFF;
  const std::string path = TempPath("kjv-badmagic.gguf");
  WriteAll(path, bytes);
  auto m = LoadPath(path);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << m.status();
}

TEST(ModelLoadTest, MissingLayerTensorIsNamed) {
  REQUIRE_FILE(KjvPath());
  const std::string path = TempPath("tiny-missing.gguf");
  ASSERT_TRUE(WriteTinyModel(path, Omitting("blk.1.ffn_down.weight")).ok());
  auto m = LoadPath(path);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << m.status();
  EXPECT_THAT(m.status().message(), HasSubstr("blk.1.ffn_down.weight"));
}

TEST(ModelLoadTest, UnsupportedMatmulTypeIsNamed) {
  REQUIRE_FILE(KjvPath());
  const std::string path = TempPath("tiny-i32.gguf");
  ASSERT_TRUE(WriteTinyModel(path, WithType(GgmlType::kI32)).ok());
  auto m = LoadPath(path);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << m.status();
  EXPECT_THAT(m.status().message(), HasSubstr("blk.0.attn_q.weight"));
  EXPECT_THAT(m.status().message(), HasSubstr("I32"));
}

TEST(ModelLoadTest, ReportsWeightsAndTypes) {
  for (const auto& [file, type] : std::vector<std::pair<std::string, std::string>>{
           {"kjv-1m.gguf", "F32"}, {"mini-random-bf16.gguf", "BF16"},
           {"mini-random-q8_0.gguf", "Q8_0"}, {"micro-random-gpt2vocab-f16.gguf", "F16"}}) {
    const std::string path = Shared() + "/models/" + file;
    REQUIRE_FILE(path);
    for (Precision p : {Precision::kExact, Precision::kFast}) {
      auto m = LoadPath(path, p);
      ASSERT_TRUE(m.ok()) << file << ": " << m.status();
      EXPECT_EQ((*m)->weight_type_name(), type) << file;
      const ModelConfig& c = (*m)->config();
      // At least the norms, plus something for every matmul weight.
      const int64_t norms = (2 * c.block_count + 1) * c.embedding_length * 4;
      EXPECT_GT((*m)->weight_bytes(), norms) << file;
      EXPECT_FALSE((*m)->kernel_summary().empty());
      // The exact kernels take every step size alike; fast BF16 runs oneDNN buckets 32
      // rows apart (max_batch_tokens 64), and a step of one row (a GEMV's) is not rounded.
      if (p == Precision::kExact) {
        EXPECT_EQ((*m)->step_token_multiple(64), 1) << file;
      }
      if (p == Precision::kFast && type == "BF16") {
        EXPECT_EQ((*m)->step_token_multiple(64), 32) << file << ": " << (*m)->kernel_summary();
        if (GetCpuFeatures().avx512f) {
          EXPECT_EQ((*m)->step_token_multiple(1), 1) << file << ": " << (*m)->kernel_summary();
        }
      }
    }
  }
}

TEST(ModelLoadTest, KvCacheOptionsMatchShape) {
  REQUIRE_FILE(KjvPath());
  auto m = LoadPath(KjvPath());
  ASSERT_TRUE(m.ok()) << m.status();
  KvCacheOptions o = (*m)->MakeKvCacheOptions(1 << 20, 32);
  EXPECT_EQ(o.num_layers, 4);
  EXPECT_EQ(o.num_kv_heads, 2);
  EXPECT_EQ(o.head_dim, 32);
  EXPECT_EQ(o.block_size_tokens, 32);
  EXPECT_EQ(o.budget_bytes, 1 << 20);
}

// Exact mode keeps f32 K/V (bit-exact logits); fast mode stores f16, so the same budget
// holds twice the tokens.
TEST(ModelLoadTest, KvElementFollowsPrecision) {
  REQUIRE_FILE(KjvPath());
  for (auto [precision, element] :
       {std::pair{kernels::Precision::kExact, kernels::KvElement::kF32},
        std::pair{kernels::Precision::kFast, kernels::KvElement::kF16}}) {
    auto m = LoadPath(KjvPath(), precision);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ((*m)->kv_element(), element);
    KvCacheOptions o = (*m)->MakeKvCacheOptions(1 << 20, 16);
    EXPECT_EQ(o.element, element);
    auto cache = KvCache::Create(o);
    ASSERT_TRUE(cache.ok()) << cache.status();
    // kjv-1m: 4 layers x 2 KV heads x 32 dims, K and V.
    EXPECT_EQ((*cache)->bytes_per_token(), 2 * 4 * 2 * 32 * kernels::KvElementBytes(element));
    EXPECT_EQ((*cache)->layout().element, element);
  }
}

TEST(ModelTiedTest, TiedHeadEqualsExplicitCopy) {
  REQUIRE_FILE(KjvPath());
  const std::string tied_path = TempPath("tiny-tied.gguf");
  const std::string copy_path = TempPath("tiny-untied-copy.gguf");
  const std::string other_path = TempPath("tiny-untied-other.gguf");
  ASSERT_TRUE(WriteTinyModel(tied_path, Tied()).ok());
  ASSERT_TRUE(WriteTinyModel(copy_path, OutputCopiesEmbedding()).ok());
  ASSERT_TRUE(WriteTinyModel(other_path, TinySpec()).ok());

  std::vector<std::vector<float>> logits;
  for (const std::string& path : {tied_path, copy_path, other_path}) {
    auto m = LoadPath(path, Precision::kExact);
    ASSERT_TRUE(m.ok()) << path << ": " << m.status();
    Model& model = **m;
    EXPECT_EQ(model.config().tied_embeddings, path == tied_path);
    auto cache = MakeCache(model, 32);
    ASSERT_NE(cache, nullptr);
    ASSERT_TRUE(cache->Reserve(1, 16).ok());
    const std::vector<TokenId> prompt = {1, 50, 300, 7, 1000, 12};
    std::vector<float> out(kVocab);
    BatchEntry e{1, prompt, 0, true};
    ASSERT_TRUE(model.Forward({&e, 1}, *cache, out.data()).ok());
    logits.push_back(out);
  }
  // The tied model computes exactly what an explicit copy of the embedding computes...
  EXPECT_EQ(0, std::memcmp(logits[0].data(), logits[1].data(), kVocab * sizeof(float)));
  // ...and the head really matters: another output matrix gives other logits.
  EXPECT_NE(0, std::memcmp(logits[0].data(), logits[2].data(), kVocab * sizeof(float)));
}

class ForwardValidationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!Exists(KjvPath())) GTEST_SKIP() << "shared assets not found at " << KjvPath();
    auto m = LoadPath(KjvPath(), Precision::kExact, /*max_batch_tokens=*/16);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m);
    cache_ = MakeCache(*model_, 512);
    ASSERT_NE(cache_, nullptr);
    ASSERT_TRUE(cache_->Reserve(1, 8).ok());
    logits_.resize(model_->config().vocab_size * 4);
  }

  absl::StatusCode Run(std::vector<BatchEntry> batch) {
    return model_->Forward(batch, *cache_, logits_.data()).code();
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<KvCache> cache_;
  std::vector<float> logits_;
};

TEST_F(ForwardValidationTest, RejectsBadBatches) {
  const std::vector<TokenId> ok = {1, 100, 200};
  const std::vector<TokenId> out_of_vocab = {1, 1024};
  const std::vector<TokenId> negative = {1, -5};
  const std::vector<TokenId> empty;
  const std::vector<TokenId> many(17, 5);
  EXPECT_EQ(Run({}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Run({{1, out_of_vocab, 0, true}}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Run({{1, negative, 0, true}}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Run({{1, empty, 0, true}}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Run({{1, ok, -1, true}}), absl::StatusCode::kInvalidArgument);
  // More tokens than max_batch_tokens (16), even across entries.
  ASSERT_TRUE(cache_->Reserve(2, 64).ok());
  ASSERT_TRUE(cache_->Reserve(4, 300).ok());
  EXPECT_EQ(Run({{2, many, 0, true}}), absl::StatusCode::kInvalidArgument);
  const std::vector<TokenId> nine(9, 5);
  const std::vector<TokenId> eleven(11, 5);  // 11 + 3 + 3 = 17 > 16
  EXPECT_EQ(Run({{2, eleven, 0, true}, {1, ok, 0, true}, {4, ok, 0, true}}),
            absl::StatusCode::kInvalidArgument);
  // Beyond the context (256).
  EXPECT_EQ(Run({{4, ok, 254, true}}), absl::StatusCode::kInvalidArgument);
  // Unknown sequence, and one without the capacity for its positions.
  EXPECT_EQ(Run({{77, ok, 0, true}}), absl::StatusCode::kFailedPrecondition);
  const int32_t cap = static_cast<int32_t>(cache_->capacity_tokens(1));  // 8 rounded up to blocks
  EXPECT_EQ(Run({{1, ok, cap - 2, true}}), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Run({{1, ok, cap - 3, true}}), absl::StatusCode::kOk);
  // The same sequence twice in one step.
  EXPECT_EQ(Run({{1, ok, 0, false}, {1, ok, 3, true}}), absl::StatusCode::kInvalidArgument);
  // Logits wanted but nowhere to put them.
  BatchEntry e{1, ok, 0, true};
  EXPECT_EQ(model_->Forward({&e, 1}, *cache_, nullptr).code(), absl::StatusCode::kInvalidArgument);
  // A KV cache of another shape.
  KvCacheOptions other = model_->MakeKvCacheOptions(1 << 20, 16);
  other.head_dim = 16;
  auto wrong = KvCache::Create(other);
  ASSERT_TRUE(wrong.ok());
  ASSERT_TRUE((*wrong)->Reserve(1, 8).ok());
  EXPECT_EQ(model_->Forward({&e, 1}, **wrong, logits_.data()).code(),
            absl::StatusCode::kFailedPrecondition);

  // After all that, a valid step works: the model's scratch is still sound.
  EXPECT_EQ(Run({{1, ok, 0, true}}), absl::StatusCode::kOk);
  EXPECT_EQ(Run({{2, nine, 0, false}, {1, ok, 3, true}}), absl::StatusCode::kOk);
}

TEST_F(ForwardValidationTest, NoLogitsRequestedWritesNothing) {
  const std::vector<TokenId> ok = {1, 100, 200};
  std::fill(logits_.begin(), logits_.end(), -7.0f);
  EXPECT_EQ(Run({{1, ok, 0, false}}), absl::StatusCode::kOk);
  for (float x : logits_) ASSERT_EQ(x, -7.0f);
  EXPECT_EQ(model_->Forward({}, *cache_, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ForwardValidationTest, LogitRowsFollowEntryOrder) {
  // Entries with want_logits get consecutive rows in entry order; others get none.
  const std::vector<TokenId> a = {1, 100, 200}, b = {1, 300}, c = {1, 5, 6, 7};
  ASSERT_TRUE(cache_->Reserve(2, 8).ok());
  ASSERT_TRUE(cache_->Reserve(3, 8).ok());
  const int64_t v = model_->config().vocab_size;
  std::vector<float> together(2 * v);
  std::vector<BatchEntry> batch = {{1, a, 0, true}, {2, b, 0, false}, {3, c, 0, true}};
  ASSERT_TRUE(model_->Forward(batch, *cache_, together.data()).ok());
  for (int which : {0, 2}) {
    auto cache = MakeCache(*model_, 64);
    ASSERT_TRUE(cache->Reserve(9, 8).ok());
    std::vector<float> alone(v);
    BatchEntry e{9, batch[which].tokens, 0, true};
    ASSERT_TRUE(model_->Forward({&e, 1}, *cache, alone.data()).ok());
    const float* row = together.data() + (which == 0 ? 0 : v);
    EXPECT_EQ(0, std::memcmp(row, alone.data(), v * sizeof(float))) << "entry " << which;
  }
}

TEST_F(ForwardValidationTest, PausedProfilingKeepsTotalsAndTimesNothing) {
  const std::vector<TokenId> three = {1, 100, 200}, one = {300};
  model_->SetProfiling(true);
  ASSERT_EQ(Run({{1, three, 0, true}}), absl::StatusCode::kOk);
  EXPECT_EQ(model_->profile().steps, 1);
  EXPECT_EQ(model_->profile().tokens, 3);
  const double total = model_->profile().total;
  EXPECT_GT(total, 0.0);

  model_->PauseProfiling(true);
  ASSERT_EQ(Run({{1, one, 3, true}}), absl::StatusCode::kOk);
  EXPECT_EQ(model_->profile().steps, 1);
  EXPECT_EQ(model_->profile().tokens, 3);
  EXPECT_EQ(model_->profile().total, total);

  model_->PauseProfiling(false);
  ASSERT_EQ(Run({{1, one, 4, true}}), absl::StatusCode::kOk);
  EXPECT_EQ(model_->profile().steps, 2);
  EXPECT_EQ(model_->profile().tokens, 4);
  EXPECT_GT(model_->profile().total, total);
  model_->SetProfiling(false);
}

}  // namespace
}  // namespace quill::engine
