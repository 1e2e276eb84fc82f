// llama-quantize's files of one small model (../shared/models/tinyllama-256-*.gguf): they load
// and generate in both precisions, the fast int8 kernels stay close to the exact path,
// corrupted block scales and truncated block data are refused, and the file's pages are let go
// after packing.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/gguf/ggml_types.h"
#include "engine/gguf/gguf_file.h"
#include "engine/kv_cache/kv_cache.h"
#include "engine/model/model.h"
#include "engine/quant/block_layout.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_env.h"

namespace quill::engine {
namespace {

using kernels::Precision;
using ::testing::HasSubstr;

const char* const kFiles[] = {"tinyllama-256-Q4_0.gguf", "tinyllama-256-Q4_K_M.gguf",
                              "tinyllama-256-Q5_K_M.gguf", "tinyllama-256-Q6_K.gguf"};

absl::StatusOr<std::unique_ptr<Model>> Load(const std::string& path, Precision precision) {
  ModelOptions o;
  o.path = path;
  o.precision = precision;
  o.max_batch_tokens = 64;
  return Model::Load(o);
}

std::unique_ptr<KvCache> MakeCache(const Model& model, int64_t tokens) {
  const ModelConfig& c = model.config();
  const int64_t per_token = int64_t{2} * c.block_count * c.head_count_kv * c.head_dim * 4;
  auto cache = KvCache::Create(model.MakeKvCacheOptions(per_token * (tokens + 16), 16));
  EXPECT_TRUE(cache.ok()) << cache.status();
  return cache.ok() ? std::move(*cache) : nullptr;
}

// Prefills `prompt`, then decodes `steps` greedy tokens; returns every step's logits.
std::vector<std::vector<float>> Generate(Model& model, const std::string& prompt, int steps,
                                         std::vector<TokenId>* out) {
  std::vector<std::vector<float>> all;
  auto ids = model.tokenizer().Encode(prompt, /*add_special=*/true);
  EXPECT_TRUE(ids.ok()) << ids.status();
  if (!ids.ok()) return all;
  std::vector<TokenId> history = *ids;
  auto cache = MakeCache(model, history.size() + steps);
  EXPECT_TRUE(cache->Reserve(1, history.size() + steps).ok());
  std::vector<float> logits(model.config().vocab_size);
  BatchEntry e{1, history, 0, true};
  EXPECT_TRUE(model.Forward({&e, 1}, *cache, logits.data()).ok());
  for (int s = 0; s < steps; ++s) {
    all.push_back(logits);
    const TokenId next =
        static_cast<TokenId>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out->push_back(next);
    history.push_back(next);
    BatchEntry d{1, absl::MakeConstSpan(&history.back(), 1),
                 static_cast<int32_t>(history.size() - 1), true};
    EXPECT_TRUE(model.Forward({&d, 1}, *cache, logits.data()).ok());
  }
  return all;
}

TEST(QuantizedModels, AllFourLoadAndGenerateInBothPrecisions) {
  for (const char* name : kFiles) {
    const std::string path = testing::SharedModelPath(name);
    if (path.empty()) GTEST_SKIP() << "shared model " << name << " not found (QUILL_SHARED_DIR)";
    SCOPED_TRACE(name);
    auto exact = Load(path, Precision::kExact);
    ASSERT_TRUE(exact.ok()) << exact.status();
    auto fast = Load(path, Precision::kFast);
    ASSERT_TRUE(fast.ok()) << fast.status();
    constexpr int kSteps = 12;
    std::vector<TokenId> exact_ids, fast_ids;
    const auto exact_logits = Generate(**exact, "The quick brown fox", kSteps, &exact_ids);
    const auto fast_logits = Generate(**fast, "The quick brown fox", kSteps, &fast_ids);
    ASSERT_EQ(exact_ids.size(), static_cast<size_t>(kSteps));
    ASSERT_EQ(fast_ids.size(), static_cast<size_t>(kSteps));
    // The fast path (int8 activations) against the exact one, on the first step (same
    // input): max |d| relative to the largest logit.
    double max_ref = 1.0, max_diff = 0.0;
    for (size_t i = 0; i < exact_logits[0].size(); ++i) {
      ASSERT_TRUE(std::isfinite(exact_logits[0][i]) && std::isfinite(fast_logits[0][i])) << i;
      max_ref = std::max(max_ref, std::fabs(static_cast<double>(exact_logits[0][i])));
      max_diff = std::max(max_diff,
                          std::fabs(static_cast<double>(fast_logits[0][i]) - exact_logits[0][i]));
    }
    int agree = 0;
    while (agree < kSteps && exact_ids[agree] == fast_ids[agree]) ++agree;
    std::cout << absl::StrFormat(
                     "[quantized] %-27s first-step logits max|d| %.3g (relative %.3g); greedy "
                     "prefix agreement %d/%d; fast kernels: %s\n",
                     name, max_diff, max_diff / max_ref, agree, kSteps, (*fast)->kernel_summary())
              << std::flush;
    EXPECT_LT(max_diff / max_ref, 0.03);
    EXPECT_EQ(exact_ids[0], fast_ids[0]);
  }
}

// ---------------------------------------------------------------------------------------
// Corrupted block scales: a clear DATA_LOSS at load naming the tensor, in either precision.

std::vector<uint8_t> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

TEST(QuantizedModels, NonFiniteScalesAreRefused) {
  struct Case {
    const char* file;
    const char* tensor;
    int64_t block;
    uint16_t bits;  // written into the block's d (or dmin, field_m)
    bool field_m;
  };
  int checked = 0;
  for (const Case& c :
       {Case{"tinyllama-256-Q4_K_M.gguf", "blk.0.attn_q.weight", 3, 0x7E00, false},    // NaN d
        Case{"tinyllama-256-Q4_K_M.gguf", "blk.1.ffn_down.weight", 7, 0x7C00, false},  // Q6_K
        Case{"tinyllama-256-Q4_K_M.gguf", "blk.1.ffn_up.weight", 0, 0xFC00, true},     // -inf dmin
        Case{"tinyllama-256-Q4_K_M.gguf", "token_embd.weight", 31999, 0x7E00, false},
        Case{"tinyllama-256-Q4_K_M.gguf", "output.weight", 12, 0x7C01, false},       // sNaN
        Case{"tinyllama-256-Q5_K_M.gguf", "blk.0.attn_q.weight", 5, 0x7E00, false},  // Q5_K
        Case{"tinyllama-256-Q5_K_M.gguf", "blk.0.ffn_gate.weight", 1, 0x7C00, true},
        Case{"tinyllama-256-Q4_0.gguf", "blk.1.attn_k.weight", 9, 0xFC00, false}}) {  // Q4_0
    SCOPED_TRACE(absl::StrCat(c.file, " ", c.tensor));
    const std::string path = testing::SharedModelPath(c.file);
    if (path.empty()) GTEST_SKIP() << "shared model not found (QUILL_SHARED_DIR)";
    auto file = GgufFile::Open(path);
    ASSERT_TRUE(file.ok()) << file.status();
    const GgufTensorInfo* t = (*file)->FindTensor(c.tensor);
    ASSERT_NE(t, nullptr);
    quant::QuantType q;
    ASSERT_TRUE(ToQuantType(t->type, &q));
    const quant::BlockFields f = quant::FieldsOf(q);
    const int64_t field = c.field_m ? f.m : f.d;
    ASSERT_GE(field, 0);
    std::vector<uint8_t> bytes = ReadAll(path);
    quant::StoreU16(bytes.data() + t->file_offset + c.block * quant::BlockBytes(q) + field, c.bits);
    const std::string bad = quill::testing::ScratchPath("nan-scale.gguf");
    std::ofstream(bad, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    for (Precision p : {Precision::kExact, Precision::kFast}) {
      auto m = Load(bad, p);
      ASSERT_FALSE(m.ok());
      EXPECT_EQ(m.status().code(), absl::StatusCode::kDataLoss) << m.status();
      EXPECT_THAT(m.status().message(), HasSubstr(c.tensor));
      EXPECT_THAT(m.status().message(), HasSubstr("NaN or infinite scale"));
    }
    ++checked;
  }
  EXPECT_EQ(checked, 8);
}

// A model file cut short anywhere in its block data is refused with a clean error naming a
// tensor, never read past its end.
TEST(QuantizedModels, TruncatedBlockDataIsRefused) {
  const std::string path = testing::SharedModelPath("tinyllama-256-Q4_K_M.gguf");
  if (path.empty()) GTEST_SKIP() << "shared model not found (QUILL_SHARED_DIR)";
  auto file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const std::vector<uint8_t> bytes = ReadAll(path);
  uint64_t data_start = bytes.size();
  for (const GgufTensorInfo& t : (*file)->tensors())
    data_start = std::min(data_start, t.file_offset);
  uint64_t data_end = 0;
  for (const GgufTensorInfo& t : (*file)->tensors()) {
    data_end = std::max(data_end, t.file_offset + t.size_bytes);
  }
  const uint64_t span = data_end - data_start;
  const std::string cut = quill::testing::ScratchPath("truncated.gguf");
  // Cuts inside the tensor data (past data_end only the padding would go).
  for (uint64_t n : {data_start + 1, data_start + span / 3, data_start + span / 2, data_end - 100,
                     data_end - 1}) {
    SCOPED_TRACE(n);
    std::ofstream(cut, std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(n));
    for (Precision p : {Precision::kExact, Precision::kFast}) {
      auto m = Load(cut, p);
      ASSERT_FALSE(m.ok());
      EXPECT_EQ(m.status().code(), absl::StatusCode::kDataLoss) << m.status();
      EXPECT_THAT(m.status().message(), HasSubstr("extends past the end")) << m.status();
    }
  }
  std::remove(cut.c_str());
}

// ---------------------------------------------------------------------------------------
// After packing, the model file's pages are released: its resident share is a small part of
// the file (the embedding rows that were read), not the whole file next to the packed copy.

int64_t MappedRssBytes(const std::string& path) {
  std::ifstream in("/proc/self/smaps");
  std::string line;
  bool in_file = false;
  int64_t rss = 0;
  const std::string real = std::filesystem::canonical(path).string();
  while (std::getline(in, line)) {
    const std::string first = line.substr(0, line.find(' '));
    if (!first.empty() && first.back() != ':') {  // a mapping's header line
      in_file = line.size() >= real.size() &&
                line.compare(line.size() - real.size(), real.size(), real) == 0;
    } else if (in_file && first == "Rss:") {
      rss += std::stoll(line.substr(4)) * 1024;
    }
  }
  return rss;
}

TEST(QuantizedModels, FilePagesAreReleasedAfterLoad) {
  const std::string path = testing::SharedModelPath("tinyllama-256-Q6_K.gguf");
  if (path.empty()) GTEST_SKIP() << "shared model not found (QUILL_SHARED_DIR)";
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  const int64_t size = f.tellg();
  for (Precision p : {Precision::kExact, Precision::kFast}) {
    auto m = Load(path, p);
    ASSERT_TRUE(m.ok()) << m.status();
    const int64_t after_load = MappedRssBytes(path);
    EXPECT_LT(after_load, size / 100) << "resident after load: " << after_load << " of " << size;
    // Embedding lookups read rows again; the kernel maps whole page-cache folios around
    // each fault, so a few tokens bring back a few MiB, still far from the whole file.
    std::vector<TokenId> ids;
    Generate(**m, "Hello", 4, &ids);
    const int64_t after_generate = MappedRssBytes(path);
    EXPECT_LT(after_generate, size / 2) << "resident after 6 tokens: " << after_generate;
    std::cout << "[file pages] resident after load " << after_load << " B, after 6 tokens "
              << after_generate << " B, file " << size << " B\n";
  }
}

}  // namespace
}  // namespace quill::engine
