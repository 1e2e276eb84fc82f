#include "engine/model/model_config.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/gguf/gguf_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace quill::engine {
namespace {

using ::testing::HasSubstr;

// ---------------------------------------------------------------------------------------
// Accounting against published model-card figures.

ModelConfig Llama31_8B() {
  ModelConfig c;
  c.architecture = "llama";
  c.vocab_size = 128256;
  c.embedding_length = 4096;
  c.block_count = 32;
  c.head_count = 32;
  c.head_count_kv = 8;
  c.head_dim = 128;
  c.feed_forward_length = 14336;
  c.rope_dimension_count = 128;
  c.rope_freq_base = 500000.0f;
  c.context_length = 131072;
  return c;
}

ModelConfig Qwen25_7B() {
  ModelConfig c;
  c.architecture = "qwen2";
  c.vocab_size = 152064;
  c.embedding_length = 3584;
  c.block_count = 28;
  c.head_count = 28;
  c.head_count_kv = 4;
  c.head_dim = 128;
  c.feed_forward_length = 18944;
  c.rope_dimension_count = 128;
  c.rope_freq_base = 1000000.0f;
  c.context_length = 32768;
  c.qkv_bias = true;
  return c;
}

TEST(ModelAccountingTest, Llama31_8B) {
  const ModelConfig config = Llama31_8B();
  ASSERT_TRUE(config.Validate().ok()) << config.Validate();
  const ModelAccounting a = ComputeAccounting(config, 8192, 2);
  EXPECT_EQ(a.params_per_block, 218112000);
  EXPECT_EQ(a.embedding_params, 525336576);
  EXPECT_EQ(a.output_params, 525336576);
  EXPECT_EQ(a.total_params, 8030261248);  // the published "8.03B"
  EXPECT_EQ(a.non_embedding_params, 6979588096);
  EXPECT_EQ(a.kv_bytes_per_token, 131072);  // 128 KiB per token in fp16
  // 2 * (6,979,588,096 + 525,336,576) + 4 * 32 * 8192 * 4096, worked by hand.
  EXPECT_EQ(a.flops_per_token, 15009849344 + 4294967296);
  EXPECT_EQ(ComputeAccounting(config, 8192, 4).kv_bytes_per_token, 262144);
}

TEST(ModelAccountingTest, Qwen25_7B) {
  const ModelConfig config = Qwen25_7B();
  ASSERT_TRUE(config.Validate().ok()) << config.Validate();
  const ModelAccounting a = ComputeAccounting(config, 0, 2);
  EXPECT_EQ(a.params_per_block, 233057792);
  EXPECT_EQ(a.total_params, 7615616512);  // the published "7.61B"
  EXPECT_EQ(a.non_embedding_params, 6525621760);  // model card: 6.53B
  EXPECT_EQ(a.kv_bytes_per_token, 57344);
  // Context 0: only the weight matmuls, including the LM head.
  EXPECT_EQ(a.flops_per_token, 2 * (6525621760 + 152064LL * 3584));
}

TEST(ModelAccountingTest, TiedEmbeddingsHaveNoOutputParams) {
  ModelConfig config = Llama31_8B();
  config.tied_embeddings = true;
  const ModelAccounting a = ComputeAccounting(config, 0, 2);
  EXPECT_EQ(a.output_params, 0);
  EXPECT_EQ(a.total_params, 8030261248 - 525336576);
  EXPECT_EQ(a.non_embedding_params, 6979588096);
  // The LM head still runs with tied weights.
  EXPECT_EQ(a.flops_per_token, 15009849344);
}

TEST(ModelConfigValidateTest, RejectsInconsistentNumbers) {
  struct Case {
    const char* what;
    std::function<void(ModelConfig&)> bend;
    const char* message;
  };
  const Case cases[] = {
      {"zero vocab", [](ModelConfig& c) { c.vocab_size = 0; }, "vocab_size"},
      {"negative d", [](ModelConfig& c) { c.embedding_length = -4096; }, "embedding_length"},
      {"zero layers", [](ModelConfig& c) { c.block_count = 0; }, "block_count"},
      {"zero heads", [](ModelConfig& c) { c.head_count = 0; }, "head_count"},
      {"kv does not divide", [](ModelConfig& c) { c.head_count_kv = 5; }, "head_count_kv 5"},
      {"kv above heads", [](ModelConfig& c) { c.head_count_kv = 64; }, "head_count_kv"},
      {"heads do not divide d",
       [](ModelConfig& c) {
         c.head_count = 24;
         c.head_count_kv = 8;
       },
       "embedding_length 4096 is not a multiple of head_count 24"},
      {"head_dim mismatch", [](ModelConfig& c) { c.head_dim = 64; }, "head_dim"},
      {"odd rope dim", [](ModelConfig& c) { c.rope_dimension_count = 127; }, "rope dimension"},
      {"rope dim too big", [](ModelConfig& c) { c.rope_dimension_count = 256; }, "rope dimension"},
      {"nan eps", [](ModelConfig& c) { c.rms_norm_eps = std::nanf(""); }, "rms_norm_eps"},
      {"zero eps", [](ModelConfig& c) { c.rms_norm_eps = 0.0f; }, "rms_norm_eps"},
      {"zero ffn", [](ModelConfig& c) { c.feed_forward_length = 0; }, "feed_forward_length"},
      {"zero context", [](ModelConfig& c) { c.context_length = 0; }, "context_length"},
      {"bad rope base", [](ModelConfig& c) { c.rope_freq_base = -1.0f; }, "freq_base"},
      {"absurd d", [](ModelConfig& c) { c.embedding_length = int64_t{1} << 40; }, "limit"},
  };
  for (const Case& c : cases) {
    ModelConfig config = Llama31_8B();
    c.bend(config);
    const absl::Status status = config.Validate();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_THAT(status.message(), HasSubstr(c.message)) << c.what;
  }
}

// ---------------------------------------------------------------------------------------
// FromGguf on the shared models.

std::string SharedModel(absl::string_view name) {
  const char* dir = std::getenv("QUILL_SHARED_DIR");
  if (dir == nullptr) return "";
  const std::string path = absl::StrCat(dir, "/models/", name);
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? path : "";
}

TEST(ModelConfigTest, KjvFromGguf) {
  const std::string path = SharedModel("kjv-1m.gguf");
  if (path.empty()) GTEST_SKIP() << "shared assets not found (QUILL_SHARED_DIR)";
  auto file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  auto config = ModelConfig::FromGguf(**file);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->architecture, "llama");
  EXPECT_EQ(config->name, "kjv-1m");
  EXPECT_EQ(config->embedding_length, 128);
  EXPECT_EQ(config->block_count, 4);
  EXPECT_EQ(config->head_count, 4);
  EXPECT_EQ(config->head_count_kv, 2);
  EXPECT_EQ(config->head_dim, 32);
  EXPECT_EQ(config->feed_forward_length, 384);
  EXPECT_EQ(config->context_length, 256);
  EXPECT_EQ(config->vocab_size, 1024);
  EXPECT_EQ(config->rope_dimension_count, 32);
  EXPECT_FLOAT_EQ(config->rope_freq_base, 10000.0f);
  EXPECT_FLOAT_EQ(config->rms_norm_eps, 1e-5f);
  EXPECT_FALSE(config->tied_embeddings);
  EXPECT_EQ(ComputeAccounting(*config, config->context_length, 2).total_params, 1049728);  // README
}

TEST(ModelConfigTest, OtherSharedModels) {
  if (SharedModel("kjv-1m.gguf").empty()) GTEST_SKIP() << "shared assets not found";
  struct Expect {
    const char* name;
    int64_t d, layers, heads, kv_heads, ffn, vocab, rope_dims;
    float rope_base;
  };
  const Expect expected[] = {
      {"mini-random-bf16.gguf", 128, 2, 4, 2, 256, 32000, 32, 10000.0f},
      {"mini-random-q8_0.gguf", 128, 2, 4, 2, 256, 32000, 32, 10000.0f},
      {"micro-random-gpt2vocab-f16.gguf", 32, 2, 4, 2, 64, 50257, 8, 500000.0f},
      {"llama-2-tiny-random.gguf", 8, 1, 2, 2, 32, 32000, 4, 10000.0f},  // no freq_base key
  };
  for (const Expect& e : expected) {
    SCOPED_TRACE(e.name);
    auto file = GgufFile::Open(SharedModel(e.name));
    ASSERT_TRUE(file.ok()) << file.status();
    auto c = ModelConfig::FromGguf(**file);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->embedding_length, e.d);
    EXPECT_EQ(c->block_count, e.layers);
    EXPECT_EQ(c->head_count, e.heads);
    EXPECT_EQ(c->head_count_kv, e.kv_heads);
    EXPECT_EQ(c->feed_forward_length, e.ffn);
    EXPECT_EQ(c->vocab_size, e.vocab);
    EXPECT_EQ(c->rope_dimension_count, e.rope_dims);
    EXPECT_FLOAT_EQ(c->rope_freq_base, e.rope_base);
    EXPECT_FALSE(c->tied_embeddings);
  }
  // A vocabulary-only file is not a model.
  const char* dir = std::getenv("QUILL_SHARED_DIR");
  auto vocab = GgufFile::Open(absl::StrCat(dir, "/vocab/ggml-vocab-llama-spm.gguf"));
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  auto c = ModelConfig::FromGguf(**vocab);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("token_embd.weight"));
}

// ---------------------------------------------------------------------------------------
// FromGguf on fixtures written with GgufWriter.

// A tiny llama: d 8, 2 layers, 2 heads / 1 KV head (head_dim 4), ffn 16, vocab 10.
struct Fixture {
  std::string arch = "llama";
  std::vector<std::string> skip_keys;
  std::vector<std::string> skip_tensors;
  std::string bent_tensor;  // gets `bent_dims` instead of its real shape
  std::vector<int64_t> bent_dims;
  int tokenizer_tokens = 10;  // 0: no tokenizer keys
  int64_t kv_width = 4;       // width of attn_k / attn_v
  std::function<void(GgufWriter&)> extra;
};

absl::StatusOr<ModelConfig> Load(const Fixture& f) {
  GgufWriter w;
  auto skip_key = [&](const std::string& k) {
    for (const auto& s : f.skip_keys) if (s == k) return true;
    return false;
  };
  auto u32 = [&](const std::string& k, uint32_t v) {
    if (!skip_key(k)) w.SetUint32(k, v);
  };
  if (!skip_key("general.architecture")) w.SetString("general.architecture", f.arch);
  w.SetString("general.name", "fixture");
  u32(f.arch + ".embedding_length", 8);
  u32(f.arch + ".block_count", 2);
  u32(f.arch + ".attention.head_count", 2);
  u32(f.arch + ".attention.head_count_kv", 1);
  u32(f.arch + ".feed_forward_length", 16);
  u32(f.arch + ".context_length", 64);
  if (f.tokenizer_tokens > 0) {
    std::vector<std::string> tokens;
    for (int i = 0; i < f.tokenizer_tokens; ++i) tokens.push_back(absl::StrCat("t", i));
    w.SetStringArray("tokenizer.ggml.tokens", tokens);
  }
  if (f.extra) f.extra(w);
  auto add = [&](const std::string& name, std::vector<int64_t> dims) {
    for (const auto& s : f.skip_tensors) if (s == name) return;
    if (name == f.bent_tensor) dims = f.bent_dims;
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    w.AddTensor(name, GgmlType::kF32, dims, std::vector<uint8_t>(n * 4, 0));
  };
  add("token_embd.weight", {8, 10});
  for (int i = 0; i < 2; ++i) {
    const std::string b = absl::StrCat("blk.", i, ".");
    add(b + "attn_norm.weight", {8});
    add(b + "attn_q.weight", {8, 8});
    add(b + "attn_k.weight", {8, f.kv_width});
    add(b + "attn_v.weight", {8, f.kv_width});
    add(b + "attn_output.weight", {8, 8});
    add(b + "ffn_norm.weight", {8});
    add(b + "ffn_gate.weight", {8, 16});
    add(b + "ffn_up.weight", {8, 16});
    add(b + "ffn_down.weight", {16, 8});
  }
  add("output_norm.weight", {8});
  add("output.weight", {8, 10});
  const std::string path =
      absl::StrCat(::testing::TempDir(), "/model_config_test_", ::getpid(), ".gguf");
  std::remove(path.c_str());
  absl::Status written = w.WriteFile(path);
  if (!written.ok()) return written;
  auto file = GgufFile::Open(path);
  std::remove(path.c_str());
  if (!file.ok()) return file.status();
  return ModelConfig::FromGguf(**file);
}

TEST(ModelConfigFixtureTest, ValidFixtureAndDefaults) {
  auto c = Load(Fixture());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->vocab_size, 10);
  EXPECT_EQ(c->head_dim, 4);
  EXPECT_EQ(c->head_count_kv, 1);
  EXPECT_EQ(c->rope_dimension_count, 4);      // default head_dim
  EXPECT_FLOAT_EQ(c->rope_freq_base, 10000);  // default
  EXPECT_FLOAT_EQ(c->rms_norm_eps, 1e-5f);    // default
  EXPECT_FALSE(c->tied_embeddings);

  Fixture mha;
  mha.skip_keys = {"llama.attention.head_count_kv"};  // defaults to head_count
  mha.kv_width = 8;
  auto m = Load(mha);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->head_count_kv, 2);

  // Without the key, the {8, 4} K/V tensors of a GQA model no longer match.
  Fixture gqa_without_key;
  gqa_without_key.skip_keys = {"llama.attention.head_count_kv"};
  auto g = Load(gqa_without_key);
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(g.status().message(), HasSubstr("'blk.0.attn_k.weight' has shape {8, 4}, expected {8, 8}"));
}

TEST(ModelConfigFixtureTest, TiedModelAccepted) {
  Fixture f;
  f.skip_tensors = {"output.weight"};
  auto c = Load(f);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->tied_embeddings);
  EXPECT_EQ(ComputeAccounting(*c, 64, 2).output_params, 0);
}

TEST(ModelConfigFixtureTest, Errors) {
  struct Case {
    const char* what;
    Fixture fixture;
    std::vector<std::string> messages;
  };
  std::vector<Case> cases;
  {
    Fixture f;
    f.skip_keys = {"llama.block_count"};
    cases.push_back({"missing key", f, {"missing required key 'llama.block_count'"}});
  }
  {
    Fixture f;
    f.skip_keys = {"general.architecture"};
    cases.push_back({"missing arch", f, {"general.architecture"}});
  }
  {
    Fixture f;
    f.arch = "gpt2";
    cases.push_back({"unsupported arch", f, {"unsupported architecture 'gpt2' (Quill supports: llama)"}});
  }
  {
    Fixture f;
    f.bent_tensor = "blk.1.ffn_down.weight";
    f.bent_dims = {8, 16};  // transposed
    cases.push_back({"wrong shape", f, {"'blk.1.ffn_down.weight'", "{8, 16}", "expected {16, 8}"}});
  }
  {
    Fixture f;
    f.bent_tensor = "output.weight";
    f.bent_dims = {8, 11};
    cases.push_back({"wrong output shape", f, {"'output.weight'", "{8, 11}", "expected {8, 10}"}});
  }
  {
    Fixture f;
    f.bent_tensor = "token_embd.weight";
    f.bent_dims = {9, 10};
    f.skip_tensors = {};
    cases.push_back({"wrong embedding width", f, {"'token_embd.weight'", "{9, 10}"}});
  }
  {
    Fixture f;
    f.skip_tensors = {"blk.1.attn_v.weight"};
    cases.push_back({"missing tensor", f, {"missing tensor 'blk.1.attn_v.weight'", "{8, 4}"}});
  }
  {
    Fixture f;
    f.skip_tensors = {"token_embd.weight"};
    cases.push_back({"missing embedding", f, {"token_embd.weight"}});
  }
  {
    Fixture f;
    f.tokenizer_tokens = 11;
    cases.push_back({"tokenizer size", f, {"11 tokens", "10 rows"}});
  }
  {
    Fixture f;
    f.extra = [](GgufWriter& w) { w.SetUint32("llama.vocab_size", 12); };
    cases.push_back({"vocab_size key", f, {"llama.vocab_size", "12"}});
  }
  {
    Fixture f;
    f.extra = [](GgufWriter& w) { w.SetString("llama.context_length", "64"); };
    cases.push_back({"key of wrong type", f, {"'llama.context_length'", "string"}});
  }
  {
    Fixture f;
    f.extra = [](GgufWriter& w) { w.SetUint32("llama.rope.dimension_count", 3); };
    cases.push_back({"odd rope dims", f, {"rope dimension count 3"}});
  }
  {
    Fixture f;
    f.extra = [](GgufWriter& w) { w.SetUint32("llama.attention.key_length", 8); };
    cases.push_back({"head_dim override", f, {"key_length"}});
  }
  {
    Fixture f;
    f.extra = [](GgufWriter& w) { w.SetUint32("llama.attention.head_count_kv", 3); };
    cases.push_back({"kv heads", f, {"head_count_kv 3"}});
  }
  for (const Case& c : cases) {
    auto config = Load(c.fixture);
    ASSERT_FALSE(config.ok()) << c.what;
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << c.what;
    for (const std::string& m : c.messages) {
      EXPECT_THAT(config.status().message(), HasSubstr(m)) << c.what;
    }
  }
}

}  // namespace
}  // namespace quill::engine
