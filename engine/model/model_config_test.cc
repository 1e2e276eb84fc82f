#include "engine/model/model_config.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
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
  c.decoder = *DescribeArchitecture("qwen2");  // Q/K/V biases
  return c;
}

TEST(ModelAccountingTest, Llama31_8B) {
  const ModelConfig config = Llama31_8B();
  ASSERT_TRUE(config.Validate().ok()) << config.Validate();
  const ModelAccounting a = ComputeAccounting(config, 8192, kernels::KvElement::kF16);
  EXPECT_EQ(a.params_per_block, 218112000);
  EXPECT_EQ(a.embedding_params, 525336576);
  EXPECT_EQ(a.output_params, 525336576);
  EXPECT_EQ(a.total_params, 8030261248);  // the published "8.03B"
  EXPECT_EQ(a.non_embedding_params, 6979588096);
  EXPECT_EQ(a.kv_bytes_per_token, 131072);  // 128 KiB per token in fp16
  // 2 * (6,979,588,096 + 525,336,576) + 4 * 32 * 8192 * 4096, worked by hand.
  EXPECT_EQ(a.flops_per_token, 15009849344 + 4294967296);
  EXPECT_EQ(ComputeAccounting(config, 8192, kernels::KvElement::kF32).kv_bytes_per_token, 262144);
  // q8: 128 codes and a 4-byte scale per head row: 2 * 32 layers * 8 heads * 132 bytes.
  EXPECT_EQ(ComputeAccounting(config, 8192, kernels::KvElement::kQ8).kv_bytes_per_token, 67584);
}

TEST(ModelAccountingTest, Qwen25_7B) {
  const ModelConfig config = Qwen25_7B();
  ASSERT_TRUE(config.Validate().ok()) << config.Validate();
  const ModelAccounting a = ComputeAccounting(config, 0, kernels::KvElement::kF16);
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
  const ModelAccounting a = ComputeAccounting(config, 0, kernels::KvElement::kF16);
  EXPECT_EQ(a.output_params, 0);
  EXPECT_EQ(a.total_params, 8030261248 - 525336576);
  EXPECT_EQ(a.non_embedding_params, 6979588096);
  // The LM head still runs with tied weights.
  EXPECT_EQ(a.flops_per_token, 15009849344);
}

// ---------------------------------------------------------------------------------------
// One published model per family, from its config.json shapes. Every figure is worked by
// hand below (the arithmetic is in the comments) and checked against the model card's
// parameter count; the family's description (DescribeArchitecture) says which biases and
// norms exist, so a wrong description shows up as a wrong total.

// Gemma 2 2B: d 2304, 26 layers, 8 heads / 4 KV of 256, ffn 9216, vocab 256000, context
// 8192, window 4096 on every other layer, tied.
TEST(ModelAccountingTest, Gemma2_2B) {
  ModelConfig c;
  c.architecture = "gemma2";
  c.decoder = *DescribeArchitecture("gemma2");
  c.vocab_size = 256000;
  c.embedding_length = 2304;
  c.block_count = 26;
  c.head_count = 8;
  c.head_count_kv = 4;
  c.head_dim = 256;
  c.feed_forward_length = 9216;
  c.rope_dimension_count = 256;
  c.context_length = 8192;
  c.tied_embeddings = true;
  c.decoder.sliding_window = 4096;
  ASSERT_TRUE(c.Validate().ok()) << c.Validate();
  const ModelAccounting a = ComputeAccounting(c, 8192, kernels::KvElement::kF16);
  // q 2304*2048 = 4,718,592; k, v 2 * 2304*1024 = 4,718,592; o 2048*2304 = 4,718,592;
  // gate, up, down 3 * 2304*9216 = 63,700,992; four norms 4 * 2304 = 9,216.
  EXPECT_EQ(a.params_per_block, 77865984);
  EXPECT_EQ(a.embedding_params, 589824000);  // 256000 * 2304
  EXPECT_EQ(a.position_params, 0);
  EXPECT_EQ(a.output_params, 0);
  // 26 * 77,865,984 + 589,824,000 + 2304 (final norm): the published 2,614,341,888.
  EXPECT_EQ(a.total_params, 2614341888);
  EXPECT_EQ(a.non_embedding_params, 2024517888);
  // 2 * (2,024,517,888 + 589,824,000) = 5,228,683,776, plus attention 4 * 2048 * (13 layers
  // * 4096 + 13 layers * 8192 = 159,744) = 1,308,622,848.
  EXPECT_EQ(a.flops_per_token, 5228683776 + 1308622848);
  EXPECT_EQ(a.kv_bytes_per_token, 106496);  // 2 * 26 * 4 * 256 * 2
}

// GPT-2 (124M): d 768, 12 layers, 12 heads of 64, ffn 3072, vocab 50257, context 1024,
// learned positions, LayerNorm with bias, biases everywhere, tied.
TEST(ModelAccountingTest, Gpt2_124M) {
  ModelConfig c;
  c.architecture = "gpt2";
  c.decoder = *DescribeArchitecture("gpt2");
  c.vocab_size = 50257;
  c.embedding_length = 768;
  c.block_count = 12;
  c.head_count = 12;
  c.head_count_kv = 12;
  c.head_dim = 64;
  c.feed_forward_length = 3072;
  c.context_length = 1024;
  c.tied_embeddings = true;
  ASSERT_TRUE(c.Validate().ok()) << c.Validate();
  const ModelAccounting a = ComputeAccounting(c, 1024, kernels::KvElement::kF16);
  // ln_1 1536; c_attn 768*2304 + 2304 = 1,771,776; c_proj 768*768 + 768 = 590,592;
  // ln_2 1536; c_fc 768*3072 + 3072 = 2,362,368; c_proj 3072*768 + 768 = 2,360,064.
  EXPECT_EQ(a.params_per_block, 7087872);
  EXPECT_EQ(a.embedding_params, 38597376);  // wte 50257 * 768
  EXPECT_EQ(a.position_params, 786432);     // wpe 1024 * 768
  EXPECT_EQ(a.output_params, 0);
  // 12 * 7,087,872 + 38,597,376 + 786,432 + 1536 (ln_f): the published 124,439,808.
  EXPECT_EQ(a.total_params, 124439808);
  EXPECT_EQ(a.non_embedding_params, 85056000);  // Kaplan et al.'s N for GPT-2 small
  // 2 * (85,056,000 + 38,597,376) = 247,306,752; attention 4 * 12 * 1024 * 768 = 37,748,736.
  EXPECT_EQ(a.flops_per_token, 247306752 + 37748736);
  EXPECT_EQ(a.kv_bytes_per_token, 36864);  // 2 * 12 * 12 * 64 * 2
}

// Qwen2-0.5B: d 896, 24 layers, 14 heads / 2 KV of 64, ffn 4864, vocab 151936, Q/K/V biases,
// tied.
TEST(ModelAccountingTest, Qwen2_0_5B) {
  ModelConfig c = Qwen25_7B();
  c.vocab_size = 151936;
  c.embedding_length = 896;
  c.block_count = 24;
  c.head_count = 14;
  c.head_count_kv = 2;
  c.head_dim = 64;
  c.feed_forward_length = 4864;
  c.rope_dimension_count = 64;
  c.tied_embeddings = true;
  ASSERT_TRUE(c.Validate().ok()) << c.Validate();
  const ModelAccounting a = ComputeAccounting(c, 0, kernels::KvElement::kF16);
  // q 896*896 + 896 = 803,712; k, v 2 * (896*128 + 128) = 229,632; o 896*896 = 802,816;
  // gate, up, down 3 * 896*4864 = 13,074,432; two norms 1792.
  EXPECT_EQ(a.params_per_block, 14912384);
  // 24 * 14,912,384 + 151936 * 896 (136,134,656) + 896: the published 494,032,768.
  EXPECT_EQ(a.total_params, 494032768);
  EXPECT_EQ(a.non_embedding_params, 357898112);  // model card: 0.36B
  EXPECT_EQ(a.kv_bytes_per_token, 12288);        // 2 * 24 * 2 * 64 * 2
  EXPECT_EQ(a.flops_per_token, 2 * (357898112 + 136134656));
}

// Llama 3.2 1B: d 2048, 16 layers, 32 heads / 8 KV of 64, ffn 8192, vocab 128256, tied,
// rope_freqs (a buffer, not a parameter).
TEST(ModelAccountingTest, Llama32_1B) {
  ModelConfig c = Llama31_8B();
  c.embedding_length = 2048;
  c.block_count = 16;
  c.head_count = 32;
  c.head_count_kv = 8;
  c.head_dim = 64;
  c.feed_forward_length = 8192;
  c.rope_dimension_count = 64;
  c.tied_embeddings = true;
  c.decoder.rope_freq_factors = true;
  ASSERT_TRUE(c.Validate().ok()) << c.Validate();
  const ModelAccounting a = ComputeAccounting(c, 8192, kernels::KvElement::kF16);
  // q 2048*2048 = 4,194,304; k, v 2 * 2048*512 = 2,097,152; o 4,194,304;
  // gate, up, down 3 * 2048*8192 = 50,331,648; two norms 4096.
  EXPECT_EQ(a.params_per_block, 60821504);
  // 16 * 60,821,504 + 128256 * 2048 (262,668,288) + 2048: the published 1,235,814,400.
  EXPECT_EQ(a.total_params, 1235814400);
  EXPECT_EQ(a.non_embedding_params, 973146112);
  // 2 * (973,146,112 + 262,668,288) = 2,471,628,800; attention 4 * 16 * 8192 * 2048.
  EXPECT_EQ(a.flops_per_token, 2471628800 + 1073741824);
  EXPECT_EQ(a.kv_bytes_per_token, 32768);  // 2 * 16 * 8 * 64 * 2
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
      {"head_dim above the kernel limit", [](ModelConfig& c) { c.head_dim = 512; },
       "head_dim 512 exceeds the attention kernel's limit 256"},
      {"zero head_dim", [](ModelConfig& c) { c.head_dim = 0; }, "head_dim"},
      {"odd rope dim", [](ModelConfig& c) { c.rope_dimension_count = 127; }, "rope dimension"},
      {"rope dim too big", [](ModelConfig& c) { c.rope_dimension_count = 256; }, "rope dimension"},
      {"nan eps", [](ModelConfig& c) { c.norm_eps = std::nanf(""); }, "norm_eps"},
      {"zero eps", [](ModelConfig& c) { c.norm_eps = 0.0f; }, "norm_eps"},
      {"zero ffn", [](ModelConfig& c) { c.feed_forward_length = 0; }, "feed_forward_length"},
      {"zero context", [](ModelConfig& c) { c.context_length = 0; }, "context_length"},
      {"bad rope base", [](ModelConfig& c) { c.rope_freq_base = -1.0f; }, "freq_base"},
      {"absurd d", [](ModelConfig& c) { c.embedding_length = int64_t{1} << 40; }, "limit"},
      {"window beyond the context",
       [](ModelConfig& c) { c.decoder.sliding_window = c.context_length + 1; }, "sliding window"},
      {"negative window", [](ModelConfig& c) { c.decoder.sliding_window = -1; }, "sliding window"},
      {"negative soft-cap", [](ModelConfig& c) { c.decoder.attn_softcap = -1; }, "soft-cap"},
      {"nan final soft-cap", [](ModelConfig& c) { c.decoder.final_softcap = std::nanf(""); },
       "final soft-cap"},
      {"nan query scale", [](ModelConfig& c) { c.decoder.query_scale = std::nanf(""); },
       "query scale"},
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
  EXPECT_FLOAT_EQ(config->norm_eps, 1e-5f);
  EXPECT_FALSE(config->tied_embeddings);
  EXPECT_EQ(
      ComputeAccounting(*config, config->context_length, kernels::KvElement::kF16).total_params,
      1049728);  // README
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

// The family fixtures: what general.architecture and the `{arch}.*` keys resolve to, against
// the description in ../shared/models/README.md.
TEST(ModelConfigTest, FamilyModelsFromGguf) {
  if (SharedModel("gemma2-tiny.gguf").empty()) GTEST_SKIP() << "shared family models not found";
  auto open = [](const char* name) {
    auto file = GgufFile::Open(SharedModel(name));
    EXPECT_TRUE(file.ok()) << file.status();
    auto c = ModelConfig::FromGguf(**file);
    EXPECT_TRUE(c.ok()) << name << ": " << c.status();
    return *c;
  };
  {
    const ModelConfig c = open("gemma2-tiny.gguf");
    const DecoderDescription& d = c.decoder;
    EXPECT_EQ(c.head_dim, 32);  // key_length, not 96 / 4
    EXPECT_EQ(c.rope_dimension_count, 32);
    EXPECT_FLOAT_EQ(c.norm_eps, 1e-6f);
    EXPECT_EQ(d.norm, NormKind::kRmsNorm);
    EXPECT_EQ(d.ffn, FfnKind::kGeGlu);
    EXPECT_EQ(d.positions, PositionKind::kRopeNeox);
    EXPECT_TRUE(d.post_attention_norm && d.post_ffn_norm && d.scale_embeddings);
    EXPECT_FALSE(d.qkv_bias || d.fused_qkv || d.rope_freq_factors);
    EXPECT_FLOAT_EQ(d.attn_softcap, 10.0f);
    EXPECT_FLOAT_EQ(d.final_softcap, 30.0f);
    EXPECT_EQ(d.sliding_window, 32);
    EXPECT_EQ(d.WindowOfLayer(0), 32);  // layers 0 and 2 slide
    EXPECT_EQ(d.WindowOfLayer(1), 0);
    EXPECT_EQ(d.WindowOfLayer(2), 32);
    EXPECT_EQ(d.WindowOfLayer(3), 0);
    EXPECT_FLOAT_EQ(c.attention_scale(), 1.0f / std::sqrt(32.0f));
    EXPECT_TRUE(c.tied_embeddings);
    // Per block: q 96*128 + k, v 2 * 96*64 + o 128*96 = 36,864; gate, up, down 3 * 96*256
    // = 73,728; four norms 384. 4 * 110,976 + 32000*96 + 96 (final norm).
    const ModelAccounting a = ComputeAccounting(c, 512, kernels::KvElement::kF16);
    EXPECT_EQ(a.total_params, 4 * 110976 + 3072000 + 96);
    EXPECT_EQ(a.non_embedding_params, 4 * 110976 + 96);  // 444,000
    // 2 * (444,000 + 3,072,000 LM head) = 7,032,000; attention 4 * (q width 4*32 = 128) *
    // positions seen: layers 0 and 2 slide (32 each), 1 and 3 see all 512 -> 1,088.
    EXPECT_EQ(a.flops_per_token, 7032000 + 4 * 128 * 1088);
    // key_length 32, not d/heads 24: 2 (K, V) * 4 layers * 2 KV heads * 32 * 2 bytes.
    EXPECT_EQ(a.kv_bytes_per_token, 1024);
  }
  {
    const ModelConfig c = open("gpt2-tiny.gguf");
    const DecoderDescription& d = c.decoder;
    EXPECT_EQ(c.head_dim, 16);
    EXPECT_EQ(c.head_count_kv, 4);
    EXPECT_EQ(c.rope_dimension_count, 0);  // no RoPE
    EXPECT_FLOAT_EQ(c.norm_eps, 1e-5f);    // gpt2.attention.layer_norm_epsilon
    EXPECT_EQ(d.norm, NormKind::kLayerNorm);
    EXPECT_EQ(d.ffn, FfnKind::kGelu);
    EXPECT_EQ(d.positions, PositionKind::kLearned);
    EXPECT_TRUE(d.fused_qkv && d.qkv_bias && d.attn_output_bias && d.ffn_bias);
    EXPECT_EQ(d.sliding_window, 0);
    EXPECT_FLOAT_EQ(d.attn_softcap, 0.0f);
    EXPECT_TRUE(c.tied_embeddings);
    // Per block: two LayerNorms 256; qkv 64*192 + 192; o 64*64 + 64; up 64*256 + 256;
    // down 256*64 + 64 = 49,984. 2 blocks + wte 50257*64 + wpe 128*64 + final LayerNorm 128.
    const ModelAccounting a = ComputeAccounting(c, 128, kernels::KvElement::kF16);
    EXPECT_EQ(a.total_params, 2 * 49984 + 3216448 + 8192 + 128);
    EXPECT_EQ(a.position_params, 8192);                 // wpe 128 * 64
    EXPECT_EQ(a.non_embedding_params, 2 * 49984 + 128);  // 100,096: no wte, no wpe
    // 2 * (100,096 + 3,216,448 LM head) = 6,633,088; attention 4 * 2 layers * 128 * 64.
    EXPECT_EQ(a.flops_per_token, 6633088 + 65536);
    EXPECT_EQ(a.kv_bytes_per_token, 512);  // 2 * 2 layers * 4 heads * 16 * 2 bytes
  }
  {
    const ModelConfig c = open("qwen2-tiny.gguf");
    EXPECT_EQ(c.decoder.positions, PositionKind::kRopeNeox);
    EXPECT_TRUE(c.decoder.qkv_bias);
    EXPECT_FALSE(c.decoder.attn_output_bias || c.decoder.ffn_bias || c.decoder.rope_freq_factors);
    EXPECT_FLOAT_EQ(c.rope_freq_base, 1e6f);
    EXPECT_TRUE(c.tied_embeddings);
    // Per block: q 64*64 + 64; k, v 2 * (64*32 + 32); o 64*64; 3 * 64*160; norms 128 = 43,264.
    const ModelAccounting a = ComputeAccounting(c, 64, kernels::KvElement::kF16);
    EXPECT_EQ(a.total_params, 2 * 43264 + 151936 * 64 + 64);
    EXPECT_EQ(a.non_embedding_params, 2 * 43264 + 64);  // 86,592, the biases included
    // 2 * (86,592 + 9,723,904 LM head) = 19,620,992; attention 4 * 2 layers * 64 * 64.
    EXPECT_EQ(a.flops_per_token, 19620992 + 32768);
    EXPECT_EQ(a.kv_bytes_per_token, 256);  // 2 * 2 layers * 2 KV heads * 16 * 2 bytes
  }
  {
    const ModelConfig c = open("llama3-tiny.gguf");
    EXPECT_EQ(c.decoder.positions, PositionKind::kRopeNormal);
    EXPECT_TRUE(c.decoder.rope_freq_factors);
    EXPECT_FALSE(c.decoder.qkv_bias);
    EXPECT_FLOAT_EQ(c.rope_freq_base, 5e5f);
    EXPECT_TRUE(c.tied_embeddings);
    // Per block: q, o 2 * 64*64; k, v 2 * 64*32; 3 * 64*192; norms 128 = 49,280.
    const ModelAccounting a = ComputeAccounting(c, 64, kernels::KvElement::kF16);
    EXPECT_EQ(a.total_params, 2 * 49280 + 128256 * 64 + 64);
    EXPECT_EQ(a.non_embedding_params, 2 * 49280 + 64);  // 98,624; rope_freqs is no parameter
    // 2 * (98,624 + 8,208,384 LM head) = 16,614,016; attention 4 * 2 layers * 64 * 64.
    EXPECT_EQ(a.flops_per_token, 16614016 + 32768);
    EXPECT_EQ(a.kv_bytes_per_token, 256);  // 2 * 2 layers * 2 KV heads * 16 * 2 bytes
  }
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
  EXPECT_FLOAT_EQ(c->norm_eps, 1e-5f);        // default
  EXPECT_FALSE(c->tied_embeddings);

  Fixture mha;
  mha.skip_keys = {"llama.attention.head_count_kv"};  // defaults to head_count
  mha.kv_width = 8;
  auto m = Load(mha);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->head_count_kv, 2);
}

TEST(ModelConfigFixtureTest, TiedModelAccepted) {
  Fixture f;
  f.skip_tensors = {"output.weight"};
  auto c = Load(f);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->tied_embeddings);
  EXPECT_EQ(ComputeAccounting(*c, 64, kernels::KvElement::kF16).output_params, 0);
}

// Gemma 2 without its optional keys gets llama.cpp's defaults: soft-caps 50 / 30 and a
// 4096 window (here clamped to the 64-token context), every other layer sliding; with 46
// layers (the 27B) queries scale by 1/sqrt(d_model / heads) instead of 1/sqrt(key_length).
TEST(ModelConfigFixtureTest, Gemma2DefaultsAndQueryScale) {
  Fixture f;
  f.arch = "gemma2";
  auto c = Load(f);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FLOAT_EQ(c->decoder.attn_softcap, 50.0f);
  EXPECT_FLOAT_EQ(c->decoder.final_softcap, 30.0f);
  EXPECT_EQ(c->decoder.sliding_window, 64);
  EXPECT_EQ(c->decoder.sliding_window_pattern, 2);
  EXPECT_FLOAT_EQ(c->attention_scale(), 0.5f);  // head_dim 4

  Fixture big;
  big.arch = "gemma2";
  big.extra = [](GgufWriter& w) {
    w.SetUint32("gemma2.block_count", 46);
    w.SetUint32("gemma2.attention.key_length", 2);  // d / heads = 4
    w.SetUint32("gemma2.attention.sliding_window_pattern", 3);
  };
  auto b = Load(big);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->head_dim, 2);
  EXPECT_FLOAT_EQ(b->attention_scale(), 0.5f);  // 1/sqrt(8 / 2), not 1/sqrt(2)
  EXPECT_EQ(b->decoder.WindowOfLayer(0), 64);
  EXPECT_EQ(b->decoder.WindowOfLayer(1), 64);
  EXPECT_EQ(b->decoder.WindowOfLayer(2), 0);
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
    f.arch = "mamba";
    cases.push_back({"unsupported arch",
                     f,
                     {"unsupported architecture 'mamba' (Quill supports: gemma2, gpt2, llama, "
                      "qwen2)"}});
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
    f.extra = [](GgufWriter& w) { w.SetUint32("llama.attention.head_count", 3); };
    cases.push_back({"heads do not divide d, no key_length",
                     f,
                     {"embedding_length 8 is not a multiple of head_count 3",
                      "'llama.attention.key_length' is absent"}});
  }
  {
    Fixture f;
    f.extra = [](GgufWriter& w) { w.SetUint32("llama.attention.key_length", 3); };
    cases.push_back({"odd key_length under RoPE", f, {"rope dimension count 3", "head_dim 3"}});
  }
  {
    Fixture f;
    f.extra = [](GgufWriter& w) { w.SetUint32("llama.attention.key_length", 0); };
    cases.push_back({"zero key_length", f, {"'llama.attention.key_length' is 0"}});
  }
  {
    Fixture f;
    f.extra = [](GgufWriter& w) { w.SetUint32("llama.attention.key_length", 512); };
    cases.push_back({"key_length above the kernel limit",
                     f,
                     {"'llama.attention.key_length' is 512", "[1, 256]"}});
  }
  {
    Fixture f;
    f.extra = [](GgufWriter& w) {
      w.SetUint32("llama.attention.key_length", 4);
      w.SetUint32("llama.attention.value_length", 8);
    };
    cases.push_back({"value_length differs", f, {"'llama.attention.value_length' is 8"}});
  }
  {
    Fixture f;
    f.arch = "gemma2";
    f.extra = [](GgufWriter& w) { w.SetUint32("gemma2.attention.sliding_window", 65); };
    cases.push_back({"window larger than the context",
                     f,
                     {"'gemma2.attention.sliding_window' is 65", "[1, 64]"}});
  }
  {
    Fixture f;
    f.arch = "gemma2";
    f.extra = [](GgufWriter& w) { w.SetInt32("gemma2.attention.sliding_window", 0); };
    cases.push_back({"zero window", f, {"'gemma2.attention.sliding_window' is 0"}});
  }
  {
    Fixture f;
    f.arch = "gemma2";
    f.extra = [](GgufWriter& w) { w.SetFloat32("gemma2.attn_logit_softcapping", -5.0f); };
    cases.push_back({"negative attention soft-cap", f, {"'gemma2.attn_logit_softcapping' is -5"}});
  }
  {
    Fixture f;
    f.arch = "gemma2";
    f.extra = [](GgufWriter& w) { w.SetString("gemma2.final_logit_softcapping", "30"); };
    cases.push_back({"soft-cap of the wrong type", f, {"'gemma2.final_logit_softcapping'"}});
  }
  {
    Fixture f;
    f.arch = "gemma2";
    f.extra = [](GgufWriter& w) { w.SetInt32("gemma2.attention.sliding_window_pattern", -1); };
    cases.push_back(
        {"negative window pattern", f, {"'gemma2.attention.sliding_window_pattern' is -1"}});
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
