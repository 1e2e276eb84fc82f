// Golden test: Quill's forward pass against independent references, one test per golden
// file and precision (/work/shared/golden/*.json and golden/families/*.json; see
// golden/README.md for the contract):
//   exact mode: prompt_ids (tokenizing `prompt`), every greedy_ids, and every last_logits
//               within max|d| <= 1e-3 * max(1, max|logit|);
//   fast mode:  kjv-1m's greedy_ids, and elsewhere the top-1 token of every last_logits,
//               with max|d| printed so regressions are visible;
//   fast mode with a q8 KV cache (--kv-cache-type=q8, lossy by design): kjv-1m's
//               greedy_ids, and elsewhere max|d| <= 0.1 * max(1, max|logit|). The
//               random-weight fixtures' tiny heads and flat logits turn the 8-bit keys' and
//               values' rounding into top-1 flips (gpt2-tiny: one of 6), so top-1 is
//               reported there (greedy prefix match), not required;
//   fast mode with a bf16 KV cache (--kv-cache-type=bf16): fast mode's contract.
// The forward pass is fed the golden prompt_ids, so the logits check does not depend on
// the tokenizer; the tokenizer is checked against prompt_ids separately.

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/kv_cache/kv_cache.h"
#include "engine/model/model.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace quill::engine {
namespace {

namespace fs = std::filesystem;
using kernels::Precision;

// Golden files, relative to $QUILL_SHARED_DIR/golden. One line per file: a family or a
// weight type that loads is folded in here.
const char* const kGoldenFiles[] = {
    "kjv-1m.json",
    "llama-2-tiny-random.json",
    "micro-random-gpt2vocab-f16.json",
    "mini-random-bf16.json",
    "mini-random-q8_0.json",
    "families/gemma2-tiny.json",
    "families/gemma2-tiny-bf16.json",
    "families/gpt2-tiny.json",
    "families/llama3-tiny.json",
    "families/qwen2-tiny.json",
    "families/tinyllama-256-Q4_K_M.json",  // llama-quantize Q4_K_M: Q4_K with Q6_K tensors
};

std::string SharedDir() {
  const char* dir = std::getenv("QUILL_SHARED_DIR");
  return dir != nullptr ? dir : "";
}

TokenId Argmax(const std::vector<float>& x) {
  return static_cast<TokenId>(std::max_element(x.begin(), x.end()) - x.begin());
}

struct GoldenCase {
  const char* file;
  Precision precision;
  // Fast mode with this KV cache element instead of its own (f16).
  std::optional<kernels::KvElement> kv = std::nullopt;
  bool kv_q8() const { return kv == kernels::KvElement::kQ8; }
};

std::string CaseName(const ::testing::TestParamInfo<GoldenCase>& info) {
  std::string name = fs::path(info.param.file).stem().string();
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name + (info.param.precision == Precision::kExact ? "_exact" : "_fast") +
         (info.param.kv ? std::string("_kv") + kernels::KvElementName(*info.param.kv) : "");
}

class GoldenTest : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(GoldenTest, MatchesReference) {
  const std::string shared = SharedDir();
  const fs::path json_path = fs::path(shared) / "golden" / GetParam().file;
  if (shared.empty() || !fs::exists(json_path)) {
    GTEST_SKIP() << "shared assets not found at '" << json_path.string() << "' (QUILL_SHARED_DIR)";
  }
  const Precision precision = GetParam().precision;
  std::ifstream in(json_path);
  ASSERT_TRUE(in.good()) << json_path;
  const nlohmann::json golden = nlohmann::json::parse(in);
  const std::string model_name = golden.at("model").get<std::string>();
  const bool exact = precision == Precision::kExact;
  const bool is_kjv = model_name == "kjv-1m.gguf";

  ModelOptions options;
  options.path = (fs::path(shared) / "models" / model_name).string();
  options.precision = precision;
  options.kv_element = GetParam().kv;
  options.max_batch_tokens = 64;
  auto model_or = Model::Load(options);
  ASSERT_TRUE(model_or.ok()) << model_or.status();
  Model& model = **model_or;
  const int64_t vocab = model.config().vocab_size;
  const int64_t context = model.config().context_length;

  auto cache_or = KvCache::Create(model.MakeKvCacheOptions(
      int64_t{2} * model.config().block_count * model.config().head_count_kv *
          model.config().head_dim * 4 * (std::min<int64_t>(context, 1024) + 16),
      16));
  ASSERT_TRUE(cache_or.ok()) << cache_or.status();
  KvCache& cache = **cache_or;

  double worst_rel = 0;  // max over cases of max|d| / max(1, max|logit|)
  double worst_abs = 0;
  int greedy_total = 0, greedy_match = 0, prompts_match = 0, cases = 0;
  std::vector<float> logits(vocab);
  KvCache::SeqId seq = 0;
  for (const nlohmann::json& c : golden.at("cases")) {
    const std::string prompt = c.at("prompt").get<std::string>();
    const std::vector<TokenId> prompt_ids = c.at("prompt_ids").get<std::vector<TokenId>>();
    const std::vector<TokenId> greedy = c.at("greedy_ids").get<std::vector<TokenId>>();
    SCOPED_TRACE("prompt \"" + prompt + "\"");
    ++cases;

    auto encoded = model.tokenizer().Encode(prompt, /*add_special=*/true);
    ASSERT_TRUE(encoded.ok()) << encoded.status();
    EXPECT_EQ(*encoded, prompt_ids) << "tokenizer";
    prompts_match += *encoded == prompt_ids;

    ++seq;
    const int64_t total = static_cast<int64_t>(prompt_ids.size() + greedy.size());
    ASSERT_LE(total, context);
    ASSERT_TRUE(cache.Reserve(seq, total).ok());
    // Prefill in chunks of max_batch_tokens.
    const size_t chunk = options.max_batch_tokens;
    for (size_t b = 0; b < prompt_ids.size(); b += chunk) {
      const size_t n = std::min(chunk, prompt_ids.size() - b);
      BatchEntry e{seq, absl::MakeConstSpan(prompt_ids.data() + b, n), static_cast<int32_t>(b),
                   b + n == prompt_ids.size()};
      ASSERT_TRUE(model.Forward({&e, 1}, cache, logits.data()).ok());
    }

    if (c.contains("last_logits")) {
      const std::vector<float> ref = c.at("last_logits").get<std::vector<float>>();
      ASSERT_EQ(static_cast<int64_t>(ref.size()), vocab);
      double max_ref = 1.0, max_diff = 0.0;
      for (int64_t i = 0; i < vocab; ++i) {
        max_ref = std::max(max_ref, std::fabs(static_cast<double>(ref[i])));
        max_diff = std::max(max_diff, std::fabs(static_cast<double>(logits[i]) - ref[i]));
      }
      worst_abs = std::max(worst_abs, max_diff);
      worst_rel = std::max(worst_rel, max_diff / max_ref);
      if (exact) {
        EXPECT_LE(max_diff, 1e-3 * max_ref) << "last_logits differ";
      } else if (GetParam().kv_q8()) {
        EXPECT_LE(max_diff, 0.1 * max_ref) << "last_logits differ";
      } else {
        EXPECT_EQ(Argmax(logits), Argmax(ref)) << "top-1 differs (max|d| " << max_diff << ")";
      }
    }

    // Greedy continuation, each step fed the golden id so one miss does not cascade.
    std::vector<TokenId> out;
    for (size_t step = 0; step < greedy.size(); ++step) {
      out.push_back(Argmax(logits));
      if (step + 1 == greedy.size()) break;
      BatchEntry e{seq, absl::MakeConstSpan(&greedy[step], 1),
                   static_cast<int32_t>(prompt_ids.size() + step), true};
      ASSERT_TRUE(model.Forward({&e, 1}, cache, logits.data()).ok());
    }
    greedy_total += static_cast<int>(greedy.size());
    for (size_t i = 0; i < greedy.size() && out[i] == greedy[i]; ++i) ++greedy_match;
    if (exact || is_kjv) {
      EXPECT_EQ(out, greedy) << "greedy continuation differs";
    }
    cache.Release(seq);
  }

  const std::string mode = exact ? "exact"
                           : GetParam().kv
                               ? std::string("fast, kv ") + kernels::KvElementName(*GetParam().kv)
                               : "fast";
  const std::string tag = absl::StrFormat("%s_%s", model_name, mode);
  RecordProperty(tag + "_max_abs_diff", absl::StrFormat("%.3g", worst_abs));
  RecordProperty(tag + "_max_rel_diff", absl::StrFormat("%.3g", worst_rel));
  std::cout << absl::StrFormat(
                   "[golden] %-30s %-11s prompt_ids %d/%d; last_logits max|d| %.3g (relative "
                   "%.3g); greedy prefix match %d/%d; kernels: %s\n",
                   model_name, mode, prompts_match, cases, worst_abs, worst_rel, greedy_match,
                   greedy_total, model.kernel_summary())
            << std::flush;
}

std::vector<GoldenCase> AllCases() {
  std::vector<GoldenCase> cases;
  for (Precision p : {Precision::kExact, Precision::kFast}) {
    for (const char* file : kGoldenFiles) cases.push_back({file, p});
  }
  for (kernels::KvElement kv : {kernels::KvElement::kQ8, kernels::KvElement::kBf16}) {
    for (const char* file : kGoldenFiles) cases.push_back({file, Precision::kFast, kv});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Files, GoldenTest, ::testing::ValuesIn(AllCases()), CaseName);

// Every file of the table exists, and the golden files on disk that the table does not run
// yet are listed (work still to come, e.g. a weight type not supported yet).
TEST(GoldenTableTest, TableFilesExistAndOthersAreListed) {
  const std::string shared = SharedDir();
  if (shared.empty() || !fs::exists(fs::path(shared) / "golden")) {
    GTEST_SKIP() << "shared assets not found (QUILL_SHARED_DIR)";
  }
  const fs::path root = fs::path(shared) / "golden";
  std::set<std::string> table(std::begin(kGoldenFiles), std::end(kGoldenFiles));
  for (const std::string& file : table) EXPECT_TRUE(fs::exists(root / file)) << file;
  for (const char* dir : {"", "families"}) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(root / dir, ec)) {
      if (entry.path().extension() != ".json") continue;
      const std::string rel = (fs::path(dir) / entry.path().filename()).string();
      if (table.count(rel) == 0) std::cout << "[golden] not in the table yet: " << rel << "\n";
    }
  }
}

}  // namespace
}  // namespace quill::engine
