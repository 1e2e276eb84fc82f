// Loading each family from files written as llama.cpp's converter writes them (tiny random
// fixtures), and refusing broken ones with a clear INVALID_ARGUMENT naming the tensor or key:
// missing biases, a key_length that does not fit, a window beyond the context, an unknown
// pre-tokenizer, ... plus fuzzing of every metadata key a family reads. Loading must never
// crash, whatever the values.
//
// The tensor lists below are written out by hand from the converter's naming, not taken from
// the loader, so they check the loader rather than restate it.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/gguf/ggml_types.h"
#include "engine/gguf/gguf_writer.h"
#include "engine/kv_cache/kv_cache.h"
#include "engine/model/model.h"
#include "engine/quant/dequantize.h"
#include "engine/quant/quantize.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/heap_allocations.h"
#include "tests/testing/test_env.h"

namespace quill::engine {
namespace {

using kernels::Precision;
using ::testing::HasSubstr;

std::string SharedPath(const std::string& rel) {
  const char* dir = std::getenv("QUILL_SHARED_DIR");
  if (dir == nullptr) return "";
  const std::string path = std::string(dir) + "/" + rel;
  return std::ifstream(path).good() ? path : "";
}

using TensorList = std::vector<std::pair<std::string, std::vector<int64_t>>>;

// A tiny model of one family: d 32, 2 layers, 4 heads / 2 KV heads of 8 (gemma2: key_length
// 16), ffn 64, context 64, the tokenizer of another file.
struct Fixture {
  std::string arch = "llama";
  int64_t d = 32, layers = 2, heads = 4, kv_heads = 2, ffn = 64, context = 64;
  int64_t head_dim = 8;
  bool tied = false;
  bool rope_freqs = false;                           // llama: write rope_freqs.weight
  std::vector<std::string> omit;                     // tensors left out
  std::map<std::string, std::vector<int64_t>> bend;  // tensors given other dims
  TensorList extra_tensors;                          // tensors the family does not have
  std::function<void(GgufWriter&)> keys;             // applied last (override or add)
  std::string tokenizer_from = "models/kjv-1m.gguf";
  std::map<std::string, float> fill;  // tensor -> constant value
  // Every 2-D tensor (embeddings, matrices) stored as this type; with `widen`, rounded
  // through it (quant::Quantize then quant::Dequantize) and stored as F32 instead.
  GgmlType matrix_type = GgmlType::kF32;
  bool widen = false;
};

Fixture Family(const std::string& arch) {
  Fixture f;
  f.arch = arch;
  if (arch == "qwen2") f.tied = true;
  if (arch == "gemma2") {
    f.tied = true;
    f.head_dim = 16;  // key_length != d / heads
  }
  if (arch == "gpt2") {
    f.tied = true;
    f.kv_heads = f.heads;
  }
  return f;
}

TensorList Tensors(const Fixture& f, int64_t vocab) {
  const int64_t d = f.d, q = f.heads * f.head_dim, kv = f.kv_heads * f.head_dim, ffn = f.ffn;
  TensorList t = {{"token_embd.weight", {d, vocab}}};
  const bool gpt2 = f.arch == "gpt2", gemma2 = f.arch == "gemma2", qwen2 = f.arch == "qwen2";
  if (gpt2) t.push_back({"position_embd.weight", {d, f.context}});
  if (f.rope_freqs) t.push_back({"rope_freqs.weight", {f.head_dim / 2}});
  for (int64_t l = 0; l < f.layers; ++l) {
    const std::string p = absl::StrCat("blk.", l, ".");
    t.push_back({p + "attn_norm.weight", {d}});
    if (gpt2) {
      t.push_back({p + "attn_norm.bias", {d}});
      t.push_back({p + "attn_qkv.weight", {d, q + 2 * kv}});
      t.push_back({p + "attn_qkv.bias", {q + 2 * kv}});
      t.push_back({p + "attn_output.weight", {q, d}});
      t.push_back({p + "attn_output.bias", {d}});
      t.push_back({p + "ffn_norm.weight", {d}});
      t.push_back({p + "ffn_norm.bias", {d}});
      t.push_back({p + "ffn_up.weight", {d, ffn}});
      t.push_back({p + "ffn_up.bias", {ffn}});
      t.push_back({p + "ffn_down.weight", {ffn, d}});
      t.push_back({p + "ffn_down.bias", {d}});
      continue;
    }
    t.push_back({p + "attn_q.weight", {d, q}});
    t.push_back({p + "attn_k.weight", {d, kv}});
    t.push_back({p + "attn_v.weight", {d, kv}});
    if (qwen2) {
      t.push_back({p + "attn_q.bias", {q}});
      t.push_back({p + "attn_k.bias", {kv}});
      t.push_back({p + "attn_v.bias", {kv}});
    }
    t.push_back({p + "attn_output.weight", {q, d}});
    if (gemma2) t.push_back({p + "post_attention_norm.weight", {d}});
    t.push_back({p + "ffn_norm.weight", {d}});
    t.push_back({p + "ffn_gate.weight", {d, ffn}});
    t.push_back({p + "ffn_up.weight", {d, ffn}});
    t.push_back({p + "ffn_down.weight", {ffn, d}});
    if (gemma2) t.push_back({p + "post_ffw_norm.weight", {d}});
  }
  t.push_back({"output_norm.weight", {d}});
  if (gpt2) t.push_back({"output_norm.bias", {d}});
  if (!f.tied) t.push_back({"output.weight", {d, vocab}});
  return t;
}

// Writes `f` to a temporary file and returns its path ("" and a test failure on error).
std::string Write(const Fixture& f, const std::string& name) {
  const std::string tok_path = SharedPath(f.tokenizer_from);
  auto tok = GgufFile::Open(tok_path);
  EXPECT_TRUE(tok.ok()) << tok.status();
  if (!tok.ok()) return "";
  const int64_t vocab = static_cast<int64_t>(*(*tok)->GetArrayLength("tokenizer.ggml.tokens"));
  GgufWriter w;
  const std::string a = f.arch + ".";
  w.SetString("general.architecture", f.arch);
  w.SetString("general.name", "fixture-" + f.arch);
  w.SetUint32(a + "context_length", f.context);
  w.SetUint32(a + "embedding_length", f.d);
  w.SetUint32(a + "block_count", f.layers);
  w.SetUint32(a + "feed_forward_length", f.ffn);
  w.SetUint32(a + "attention.head_count", f.heads);
  if (f.arch != "gpt2") {
    w.SetUint32(a + "attention.head_count_kv", f.kv_heads);
    w.SetFloat32(a + "attention.layer_norm_rms_epsilon", 1e-6f);
    w.SetFloat32(a + "rope.freq_base", 10000.0f);
  } else {
    w.SetFloat32(a + "attention.layer_norm_epsilon", 1e-5f);
  }
  if (f.arch == "gemma2") {
    w.SetUint32(a + "attention.key_length", f.head_dim);
    w.SetUint32(a + "attention.value_length", f.head_dim);
    w.SetFloat32(a + "attn_logit_softcapping", 10.0f);
    w.SetFloat32(a + "final_logit_softcapping", 30.0f);
    w.SetUint32(a + "attention.sliding_window", 16);
  }
  EXPECT_TRUE(w.CopyKeys(**tok, "tokenizer.").ok());
  if (f.keys) f.keys(w);

  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  TensorList tensors = Tensors(f, vocab);
  tensors.insert(tensors.end(), f.extra_tensors.begin(), f.extra_tensors.end());
  for (auto [tname, dims] : tensors) {
    if (std::find(f.omit.begin(), f.omit.end(), tname) != f.omit.end()) continue;
    if (f.bend.count(tname)) dims = f.bend.at(tname);
    int64_t n = 1;
    for (int64_t x : dims) n *= x;
    std::vector<float> v(n);
    const bool norm = tname.find("norm.weight") != std::string::npos;
    for (float& x : v) {
      x = f.fill.count(tname)            ? f.fill.at(tname)
          : norm                         ? 1.0f + 0.1f * normal(rng)
          : tname == "rope_freqs.weight" ? 1.0f + std::fabs(normal(rng)) * 4
                                         : normal(rng);
    }
    quant::QuantType qt;
    if (dims.size() == 2 && ToQuantType(f.matrix_type, &qt)) {
      const int64_t blocks = n / quant::BlockElements(qt);
      std::vector<uint8_t> packed(blocks * quant::BlockBytes(qt));
      EXPECT_TRUE(quant::Quantize(qt, v.data(), blocks, packed.data()).ok()) << tname;
      if (!f.widen) {
        w.AddTensor(tname, f.matrix_type, dims, std::move(packed));
        continue;
      }
      quant::Dequantize(qt, packed.data(), blocks, v.data());
    }
    std::vector<uint8_t> bytes(n * 4);
    std::memcpy(bytes.data(), v.data(), bytes.size());
    w.AddTensor(tname, GgmlType::kF32, dims, std::move(bytes));
  }
  const std::string path = quill::testing::ScratchPath("model_load_test_" + name + ".gguf");
  const absl::Status written = w.WriteFile(path);
  EXPECT_TRUE(written.ok()) << written;
  return written.ok() ? path : "";
}

absl::StatusOr<std::unique_ptr<Model>> Load(const std::string& path,
                                            Precision p = Precision::kExact) {
  ModelOptions o;
  o.path = path;
  o.precision = p;
  o.max_batch_tokens = 32;
  return Model::Load(o);
}

// One prefill of `n` tokens; every logit must be finite.
void ExpectFiniteLogits(Model& model, int n) {
  const ModelConfig& c = model.config();
  auto cache = KvCache::Create(model.MakeKvCacheOptions(
      int64_t{2} * c.block_count * c.head_count_kv * c.head_dim * 4 * (c.context_length + 16), 16));
  ASSERT_TRUE(cache.ok()) << cache.status();
  ASSERT_TRUE((*cache)->Reserve(1, n).ok());
  std::vector<TokenId> tokens(n);
  for (int i = 0; i < n; ++i) tokens[i] = (i * 37 + 1) % static_cast<int>(c.vocab_size);
  std::vector<float> logits(c.vocab_size);
  BatchEntry e{1, tokens, 0, true};
  ASSERT_TRUE(model.Forward({&e, 1}, **cache, logits.data()).ok());
  for (float x : logits) ASSERT_TRUE(std::isfinite(x));
}

// The logits of the last of `n` prefilled tokens.
std::vector<float> LastLogits(Model& model, int n) {
  const ModelConfig& c = model.config();
  auto cache = KvCache::Create(model.MakeKvCacheOptions(
      int64_t{2} * c.block_count * c.head_count_kv * c.head_dim * 4 * (c.context_length + 16), 16));
  EXPECT_TRUE(cache.ok()) << cache.status();
  std::vector<float> logits(c.vocab_size);
  if (!cache.ok() || !(*cache)->Reserve(1, n).ok()) return {};
  std::vector<TokenId> tokens(n);
  for (int i = 0; i < n; ++i) tokens[i] = (i * 37 + 1) % static_cast<int>(c.vocab_size);
  BatchEntry e{1, tokens, 0, true};
  EXPECT_TRUE(model.Forward({&e, 1}, **cache, logits.data()).ok());
  return logits;
}

class ModelLoadFixtureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (SharedPath("models/kjv-1m.gguf").empty()) {
      GTEST_SKIP() << "shared assets not found (QUILL_SHARED_DIR)";
    }
  }
};

TEST_F(ModelLoadFixtureTest, EveryFamilyLoadsAndRuns) {
  for (const char* arch : {"llama", "qwen2", "gemma2", "gpt2"}) {
    SCOPED_TRACE(arch);
    Fixture f = Family(arch);
    const std::string path = Write(f, arch);
    for (Precision p : {Precision::kExact, Precision::kFast}) {
      auto m = Load(path, p);
      ASSERT_TRUE(m.ok()) << m.status();
      EXPECT_EQ((*m)->config().architecture, arch);
      ExpectFiniteLogits(**m, 20);  // beyond gemma2's window of 16
    }
    std::remove(path.c_str());
  }
  Fixture llama3 = Family("llama");
  llama3.rope_freqs = true;
  const std::string path = Write(llama3, "llama3");
  auto m = Load(path);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE((*m)->config().decoder.rope_freq_factors);
  ExpectFiniteLogits(**m, 20);
}

// The block types load for every family through the one loader. In exact mode a file with
// Q4_0 / Q5_1 / Q8_0 matrices gives the logits of the same file written as F32 with those
// weights dequantized by quant::Dequantize (not by the loader); fast mode gives the same top-1.
TEST_F(ModelLoadFixtureTest, EveryFamilyLoadsBlockTypes) {
  int i = 0;
  for (const char* arch : {"llama", "qwen2", "gemma2", "gpt2"}) {
    for (GgmlType type : {GgmlType::kQ4_0, GgmlType::kQ5_1, GgmlType::kQ8_0}) {
      SCOPED_TRACE(absl::StrCat(arch, " ", GgmlTypeName(type)));
      Fixture f = Family(arch);
      f.matrix_type = type;
      Fixture widened = f;
      widened.widen = true;
      const std::string qpath = Write(f, absl::StrCat("blocks", i));
      const std::string fpath = Write(widened, absl::StrCat("widened", i++));
      auto quantized = Load(qpath);
      auto reference = Load(fpath);
      auto fast = Load(qpath, Precision::kFast);
      std::remove(qpath.c_str());
      std::remove(fpath.c_str());
      ASSERT_TRUE(quantized.ok()) << quantized.status();
      ASSERT_TRUE(reference.ok()) << reference.status();
      ASSERT_TRUE(fast.ok()) << fast.status();
      EXPECT_EQ((*quantized)->weight_type_name(), GgmlTypeName(type));
      EXPECT_EQ((*reference)->weight_type_name(), "F32");

      const std::vector<float> got = LastLogits(**quantized, 9);
      const std::vector<float> want = LastLogits(**reference, 9);
      const std::vector<float> got_fast = LastLogits(**fast, 9);
      ASSERT_EQ(got.size(), want.size());
      ASSERT_EQ(got_fast.size(), want.size());
      float max_ref = 1.0f, max_diff = 0.0f;
      for (size_t j = 0; j < want.size(); ++j) {
        ASSERT_TRUE(std::isfinite(got[j]) && std::isfinite(got_fast[j]));
        max_ref = std::max(max_ref, std::fabs(want[j]));
        max_diff = std::max(max_diff, std::fabs(got[j] - want[j]));
      }
      EXPECT_LE(max_diff, 1e-4f * max_ref);
      auto argmax = [](const std::vector<float>& x) {
        return std::max_element(x.begin(), x.end()) - x.begin();
      };
      EXPECT_EQ(argmax(got_fast), argmax(want));
    }
  }
}

// The rope_freqs factors really reach the rotation: all-ones factors equal no factors bit
// for bit, other factors change the logits.
TEST_F(ModelLoadFixtureTest, RopeFreqFactorsApply) {
  std::vector<std::vector<float>> logits;
  for (int variant = 0; variant < 3; ++variant) {
    Fixture f = Family("llama");
    f.rope_freqs = variant > 0;
    if (variant == 1) f.fill["rope_freqs.weight"] = 1.0f;
    const std::string path = Write(f, absl::StrCat("freqs", variant));
    auto m = Load(path);
    ASSERT_TRUE(m.ok()) << m.status();
    const ModelConfig& c = (*m)->config();
    auto cache = KvCache::Create((*m)->MakeKvCacheOptions(int64_t{1} << 20, 16));
    ASSERT_TRUE(cache.ok());
    ASSERT_TRUE((*cache)->Reserve(1, 12).ok());
    const std::vector<TokenId> tokens = {1, 50, 300, 7, 900, 12, 5, 77, 3, 2, 40, 41};
    std::vector<float> out(c.vocab_size);
    BatchEntry e{1, tokens, 0, true};
    ASSERT_TRUE((*m)->Forward({&e, 1}, **cache, out.data()).ok());
    logits.push_back(out);
  }
  EXPECT_EQ(logits[0], logits[1]);
  EXPECT_NE(logits[0], logits[2]);
}

// Load reports each layer as it is packed, in order, with the packed bytes growing to at
// most what the model holds at the end (the LM head and final norm come after).
TEST_F(ModelLoadFixtureTest, LoadReportsEachLayerAsItIsPacked) {
  for (const char* arch : {"llama", "gpt2"}) {
    SCOPED_TRACE(arch);
    const std::string path = Write(Family(arch), std::string("progress_") + arch);
    std::vector<LoadProgress> reports;
    ModelOptions o;
    o.path = path;
    o.max_batch_tokens = 32;
    o.on_progress = [&](const LoadProgress& p) { reports.push_back(p); };
    auto m = Model::Load(o);
    ASSERT_TRUE(m.ok()) << m.status();
    const int64_t layers = (*m)->config().block_count;
    ASSERT_EQ(static_cast<int64_t>(reports.size()), layers);
    for (int64_t l = 0; l < layers; ++l) {
      EXPECT_EQ(reports[l].layers_packed, l + 1);
      EXPECT_EQ(reports[l].layers_total, layers);
      EXPECT_GT(reports[l].bytes_packed, l == 0 ? 0 : reports[l - 1].bytes_packed);
    }
    EXPECT_LT(reports.back().bytes_packed, (*m)->weight_bytes());
    std::remove(path.c_str());
  }
}

// After a first step has sized everything, prefill and decode steps of every family (a
// batch of a chunk and a decode row, crossing gemma2's window) allocate nothing.
TEST_F(ModelLoadFixtureTest, ForwardAllocatesNothing) {
  for (const char* arch : {"llama", "qwen2", "gemma2", "gpt2"}) {
    Fixture f = Family(arch);
    f.rope_freqs = std::string(arch) == "llama";
    const std::string path = Write(f, std::string("alloc_") + arch);
    for (Precision p : {Precision::kExact, Precision::kFast}) {
      SCOPED_TRACE(std::string(arch) + (p == Precision::kExact ? " exact" : " fast"));
      auto m = Load(path, p);
      ASSERT_TRUE(m.ok()) << m.status();
      Model& model = **m;
      auto cache = KvCache::Create(model.MakeKvCacheOptions(int64_t{1} << 20, 16));
      ASSERT_TRUE(cache.ok());
      ASSERT_TRUE((*cache)->Reserve(1, 40).ok());
      ASSERT_TRUE((*cache)->Reserve(2, 48).ok());
      const std::vector<TokenId> prompt = {1, 5, 9, 300, 12, 7, 8, 100, 200, 3, 4, 5, 6, 7, 8, 9};
      std::vector<float> logits(2 * model.config().vocab_size);
      // The warm-up has the steps' batch shape (PagedAttention's per-call table only grows).
      BatchEntry warm[2] = {{1, prompt, 0, true},
                            {2, absl::MakeConstSpan(prompt.data(), 1), 0, true}};
      ASSERT_TRUE(model.Forward(warm, **cache, logits.data()).ok());
      const int64_t before = quill::testing::HeapAllocations();
      for (int step = 0; step < 20; ++step) {
        BatchEntry batch[2] = {
            {1, absl::MakeConstSpan(&prompt[step % 16], 1), 16 + step, true},
            {2, absl::MakeConstSpan(prompt.data(), 2), 1 + 2 * step, step % 3 == 0}};
        ASSERT_TRUE(model.Forward(batch, **cache, logits.data()).ok());
      }
      EXPECT_EQ(quill::testing::HeapAllocations() - before, 0);
    }
    std::remove(path.c_str());
  }
}

struct Corruption {
  const char* what;
  Fixture fixture;
  std::vector<std::string> messages;
};

std::vector<Corruption> Corruptions() {
  std::vector<Corruption> cases;
  auto add = [&](const char* what, Fixture f, std::vector<std::string> messages) {
    cases.push_back({what, std::move(f), std::move(messages)});
  };
  {
    Fixture f = Family("qwen2");
    f.omit = {"blk.1.attn_k.bias"};
    add("qwen2 missing K bias", f, {"missing tensor 'blk.1.attn_k.bias'"});
  }
  {
    Fixture f = Family("qwen2");
    f.bend = {{"blk.0.attn_q.bias", {33}}};
    add("qwen2 Q bias of the wrong length", f, {"'blk.0.attn_q.bias'", "[33]", "expected [32]"});
  }
  {
    Fixture f = Family("gpt2");
    f.omit = {"blk.0.attn_qkv.bias"};
    add("gpt2 missing QKV bias", f, {"missing tensor 'blk.0.attn_qkv.bias'"});
  }
  {
    Fixture f = Family("gpt2");
    f.omit = {"blk.1.ffn_down.bias"};
    add("gpt2 missing down bias", f, {"missing tensor 'blk.1.ffn_down.bias'"});
  }
  {
    Fixture f = Family("gpt2");
    f.omit = {"output_norm.bias"};
    add("gpt2 missing final norm bias", f, {"missing tensor 'output_norm.bias'"});
  }
  {
    Fixture f = Family("gpt2");
    f.omit = {"position_embd.weight"};
    add("gpt2 missing position embeddings", f, {"missing tensor 'position_embd.weight'"});
  }
  {
    Fixture f = Family("gpt2");
    f.bend = {{"position_embd.weight", {32, 63}}};
    add("gpt2 position table shorter than the context", f,
        {"'position_embd.weight'", "expected [32, 64]"});
  }
  {
    Fixture f = Family("llama");
    f.extra_tensors = {{"blk.0.attn_q.bias", {32}}};
    add("llama with a bias it does not use", f,
        {"tensor 'blk.0.attn_q.bias' is not used by architecture 'llama'"});
  }
  {
    Fixture f = Family("gemma2");
    f.omit = {"blk.1.post_ffw_norm.weight"};
    add("gemma2 missing post-FFN norm", f, {"missing tensor 'blk.1.post_ffw_norm.weight'"});
  }
  {
    Fixture f = Family("gemma2");
    f.keys = [](GgufWriter& w) {
      w.SetUint32("gemma2.attention.key_length", 12);
      w.SetUint32("gemma2.attention.value_length", 12);
    };
    add("key_length that does not match the Q/K/V tensors", f,
        {"'blk.0.attn_q.weight' has shape [32, 64], expected [32, 48]"});
  }
  {
    Fixture f = Family("gemma2");
    f.keys = [](GgufWriter& w) {
      w.SetUint32("gemma2.attention.key_length", 15);
      w.SetUint32("gemma2.attention.value_length", 15);
    };
    add("odd key_length under RoPE", f, {"rope dimension count 15"});
  }
  {
    Fixture f = Family("llama");
    f.keys = [](GgufWriter& w) { w.SetUint32("llama.attention.head_count", 3); };
    add("heads that do not divide d_model, no key_length", f,
        {"embedding_length 32 is not a multiple of head_count 3"});
  }
  {
    Fixture f = Family("gemma2");
    f.keys = [](GgufWriter& w) { w.SetUint32("gemma2.attention.sliding_window", 65); };
    add("window larger than the context", f, {"'gemma2.attention.sliding_window' is 65"});
  }
  {
    Fixture f = Family("gpt2");
    f.tokenizer_from = "vocab/ggml-vocab-gpt-2.gguf";
    f.keys = [](GgufWriter& w) { w.SetString("tokenizer.ggml.pre", "no-such-pre"); };
    add("unknown pre-tokenizer", f, {"no-such-pre"});
  }
  {
    Fixture f = Family("llama");
    f.rope_freqs = true;
    f.bend = {{"rope_freqs.weight", {8}}};
    add("rope_freqs of head_dim entries", f, {"'rope_freqs.weight'", "expected [4]"});
  }
  {
    Fixture f = Family("llama");
    f.rope_freqs = true;
    f.fill["rope_freqs.weight"] = 0.0f;
    add("rope_freqs with a zero factor", f, {"'rope_freqs.weight'", "finite and > 0"});
  }
  {
    Fixture f = Family("gpt2");
    f.extra_tensors = {{"rope_freqs.weight", {4}}};
    add("rope_freqs on a model without RoPE", f,
        {"tensor 'rope_freqs.weight' is not used by architecture 'gpt2'"});
  }
  {
    Fixture f = Family("llama");
    f.rope_freqs = true;
    f.bend = {{"rope_freqs.weight", {2, 2}}};
    add("rope_freqs of two dimensions", f, {"'rope_freqs.weight'", "[2, 2]", "expected [4]"});
  }
  {
    Fixture f = Family("llama");
    f.rope_freqs = true;
    f.fill["rope_freqs.weight"] = NAN;
    add("rope_freqs with a NaN factor", f, {"'rope_freqs.weight'", "finite and > 0"});
  }
  {
    Fixture f = Family("qwen2");
    f.omit = {"blk.0.attn_v.bias"};
    add("qwen2 missing V bias", f, {"missing tensor 'blk.0.attn_v.bias'"});
  }
  {
    Fixture f = Family("gpt2");
    f.omit = {"blk.0.attn_output.bias"};
    add("gpt2 missing output-projection bias", f, {"missing tensor 'blk.0.attn_output.bias'"});
  }
  {
    Fixture f = Family("gpt2");
    f.bend = {{"blk.1.ffn_up.bias", {32}}};
    add("gpt2 up bias of d_model entries", f, {"'blk.1.ffn_up.bias'", "[32]", "expected [64]"});
  }
  {
    Fixture f = Family("gemma2");
    f.omit = {"blk.0.post_attention_norm.weight"};
    add("gemma2 missing post-attention norm", f,
        {"missing tensor 'blk.0.post_attention_norm.weight'"});
  }
  {
    Fixture f = Family("gemma2");
    f.keys = [](GgufWriter& w) {
      w.SetUint32("gemma2.attention.key_length", 512);
      w.SetUint32("gemma2.attention.value_length", 512);
    };
    add("key_length above the kernel limit", f, {"'gemma2.attention.key_length' is 512"});
  }
  {
    Fixture f = Family("gemma2");
    f.keys = [](GgufWriter& w) { w.SetUint32("gemma2.attention.value_length", 8); };
    add("value_length != key_length", f, {"'gemma2.attention.value_length' is 8"});
  }
  {
    Fixture f = Family("gemma2");
    f.keys = [](GgufWriter& w) { w.SetFloat32("gemma2.attn_logit_softcapping", NAN); };
    add("NaN attention soft-cap", f, {"'gemma2.attn_logit_softcapping' is nan", "finite"});
  }
  {
    Fixture f = Family("gemma2");
    f.keys = [](GgufWriter& w) { w.SetFloat32("gemma2.final_logit_softcapping", -30.0f); };
    add("negative final soft-cap", f, {"'gemma2.final_logit_softcapping' is -30"});
  }
  {
    Fixture f = Family("gemma2");
    f.keys = [](GgufWriter& w) { w.SetFloat32("gemma2.final_logit_softcapping", INFINITY); };
    add("infinite final soft-cap", f, {"'gemma2.final_logit_softcapping' is inf"});
  }
  {
    Fixture f = Family("gemma2");
    f.keys = [](GgufWriter& w) { w.SetFloat32("gemma2.attn_logit_softcapping", 0.0f); };
    add("zero attention soft-cap", f, {"'gemma2.attn_logit_softcapping' is 0"});
  }
  {
    Fixture f = Family("gemma2");
    f.keys = [](GgufWriter& w) { w.SetUint32("gemma2.attention.sliding_window", 0); };
    add("zero window", f, {"'gemma2.attention.sliding_window' is 0", "[1, 64]"});
  }
  {
    Fixture f = Family("gemma2");
    f.keys = [](GgufWriter& w) { w.SetUint32("gemma2.attention.sliding_window", 0xFFFFFFFFu); };
    add("huge window", f, {"'gemma2.attention.sliding_window' is 4294967295", "[1, 64]"});
  }
  {
    Fixture f = Family("gemma2");
    f.keys = [](GgufWriter& w) { w.SetInt32("gemma2.attention.sliding_window", -16); };
    add("negative window", f, {"'gemma2.attention.sliding_window' is -16"});
  }
  {
    Fixture f = Family("gemma2");
    f.keys = [](GgufWriter& w) { w.SetUint32("gemma2.attention.sliding_window_pattern", 3); };
    add("window pattern beyond the layers", f,
        {"'gemma2.attention.sliding_window_pattern' is 3", "[0, 2]"});
  }
  return cases;
}

TEST_F(ModelLoadFixtureTest, CorruptedFilesAreRefusedByName) {
  int i = 0;
  for (const Corruption& c : Corruptions()) {
    SCOPED_TRACE(c.what);
    if (SharedPath(c.fixture.tokenizer_from).empty()) {
      GTEST_SKIP() << "missing " << c.fixture.tokenizer_from;
    }
    const std::string path = Write(c.fixture, absl::StrCat("corrupt", i++));
    auto m = Load(path);
    std::remove(path.c_str());
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << m.status();
    for (const std::string& msg : c.messages) EXPECT_THAT(m.status().message(), HasSubstr(msg));
  }
}

// Every metadata key a family reads, set to random values of random types: loading returns
// OK or INVALID_ARGUMENT / DATA_LOSS and never crashes; whatever loads runs a forward step
// with finite logits.
TEST_F(ModelLoadFixtureTest, FamilyKeyFuzzNeverCrashes) {
  std::mt19937_64 rng(20261201);
  const std::vector<std::string> common = {"context_length",
                                           "embedding_length",
                                           "block_count",
                                           "feed_forward_length",
                                           "attention.head_count",
                                           "attention.head_count_kv",
                                           "attention.key_length",
                                           "attention.value_length",
                                           "rope.freq_base",
                                           "rope.dimension_count",
                                           "attention.layer_norm_rms_epsilon",
                                           "attention.layer_norm_epsilon",
                                           "attn_logit_softcapping",
                                           "final_logit_softcapping",
                                           "attention.sliding_window",
                                           "attention.sliding_window_pattern",
                                           "vocab_size"};
  int loaded = 0, refused = 0;
  for (const char* arch : {"llama", "qwen2", "gemma2", "gpt2"}) {
    for (int iteration = 0; iteration < 60; ++iteration) {
      Fixture f = Family(arch);
      f.rope_freqs = std::string(arch) == "llama" && iteration % 2 == 0;
      const std::string key = absl::StrCat(arch, ".", common[rng() % common.size()]);
      const uint64_t kind = rng() % 6;
      const uint64_t r = rng();
      f.keys = [key, kind, r](GgufWriter& w) {
        const uint32_t small[] = {0, 1, 2, 3, 4, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 256};
        switch (kind) {
          case 0:
            w.SetUint32(key, small[r % 17]);
            break;
          case 1:
            w.SetUint32(key, static_cast<uint32_t>(r));
            break;
          case 2:
            w.SetInt32(key, -static_cast<int32_t>(r % 1000) - 1);
            break;
          case 3: {
            const float values[] = {0.0f, -1.0f, 1e-30f, 1e30f, NAN, INFINITY, 0.5f, 64.0f};
            w.SetFloat32(key, values[r % 8]);
            break;
          }
          case 4:
            w.SetString(key, "12");
            break;
          default:
            w.SetBool(key, true);
            break;
        }
      };
      SCOPED_TRACE(absl::StrCat(key, " kind ", kind, " r ", r));
      const std::string path = Write(f, "fuzz");
      auto m = Load(path, iteration % 3 == 0 ? Precision::kFast : Precision::kExact);
      if (m.ok()) {
        ++loaded;
        ExpectFiniteLogits(**m, 9);
      } else {
        ++refused;
        const absl::StatusCode code = m.status().code();
        EXPECT_TRUE(code == absl::StatusCode::kInvalidArgument ||
                    code == absl::StatusCode::kDataLoss)
            << m.status();
      }
      std::remove(path.c_str());
    }
  }
  std::cout << "[fuzz] family keys: " << loaded << " loaded, " << refused << " refused\n";
  EXPECT_GT(refused, 40);  // the values did reach the checks
  EXPECT_GT(loaded, 20);   // and harmless ones still load
}

}  // namespace
}  // namespace quill::engine
