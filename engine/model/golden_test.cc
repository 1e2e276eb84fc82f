// Golden test: Quill's forward pass against an independent fp32 reference
// (/work/shared/golden/*.json, see its README.md for the contract).

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "engine/kv_cache/kv_cache.h"
#include "engine/model/model.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace quill::engine {
namespace {

namespace fs = std::filesystem;
using kernels::Precision;

std::string SharedDir() {
  const char* dir = std::getenv("QUILL_SHARED_DIR");
  return dir != nullptr ? dir : "";
}

std::vector<fs::path> GoldenFiles(const std::string& shared) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(fs::path(shared) / "golden", ec)) {
    if (entry.path().extension() == ".json") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

TokenId Argmax(const std::vector<float>& x) {
  return static_cast<TokenId>(std::max_element(x.begin(), x.end()) - x.begin());
}

// Runs every case of one golden file in one precision. Returns max|Δ| over the cases
// with last_logits (relative to the case's max(1, max|logit|)).
void CheckFile(const fs::path& json_path, Precision precision) {
  const std::string shared = SharedDir();
  std::ifstream in(json_path);
  ASSERT_TRUE(in.good()) << json_path;
  const nlohmann::json golden = nlohmann::json::parse(in);
  const std::string model_name = golden.at("model").get<std::string>();
  const bool exact = precision == Precision::kExact;
  const bool is_kjv = model_name == "kjv-1m.gguf";
  SCOPED_TRACE(model_name + (exact ? " exact" : " fast"));

  ModelOptions options;
  options.path = (fs::path(shared) / "models" / model_name).string();
  options.precision = precision;
  options.max_batch_tokens = 64;
  auto model_or = Model::Load(options);
  ASSERT_TRUE(model_or.ok()) << model_or.status();
  Model& model = **model_or;
  const int64_t vocab = model.config().vocab_size;
  const int64_t context = model.config().context_length;

  auto cache_or = KvCache::Create(model.MakeKvCacheOptions(
      int64_t{2} * model.config().block_count * model.config().head_count_kv *
          model.config().head_dim * 4 * (context + 16),
      16));
  ASSERT_TRUE(cache_or.ok()) << cache_or.status();
  KvCache& cache = **cache_or;

  double worst_rel = 0;     // max over cases of max|Δ| / max(1, max|logit|)
  double worst_abs = 0;
  int greedy_total = 0, greedy_match = 0;
  std::vector<float> logits(vocab);
  KvCache::SeqId seq = 0;
  for (const nlohmann::json& c : golden.at("cases")) {
    const std::string prompt = c.at("prompt").get<std::string>();
    const std::vector<TokenId> prompt_ids = c.at("prompt_ids").get<std::vector<TokenId>>();
    const std::vector<TokenId> greedy = c.at("greedy_ids").get<std::vector<TokenId>>();
    SCOPED_TRACE("prompt \"" + prompt + "\"");

    auto encoded = model.tokenizer().Encode(prompt, /*add_special=*/true);
    ASSERT_TRUE(encoded.ok()) << encoded.status();
    EXPECT_EQ(*encoded, prompt_ids);

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
      } else {
        EXPECT_EQ(Argmax(logits), Argmax(ref)) << "top-1 differs (max|d| " << max_diff << ")";
      }
    }

    // Greedy continuation.
    std::vector<TokenId> out;
    std::vector<TokenId> history = prompt_ids;
    for (size_t step = 0; step < greedy.size(); ++step) {
      const TokenId next = Argmax(logits);
      out.push_back(next);
      history.push_back(next);
      if (step + 1 == greedy.size()) break;
      BatchEntry e{seq, absl::MakeConstSpan(&history.back(), 1),
                   static_cast<int32_t>(history.size() - 1), true};
      ASSERT_TRUE(model.Forward({&e, 1}, cache, logits.data()).ok());
    }
    greedy_total += static_cast<int>(greedy.size());
    for (size_t i = 0; i < greedy.size() && out[i] == greedy[i]; ++i) ++greedy_match;
    if (exact || is_kjv) {
      EXPECT_EQ(out, greedy) << "greedy continuation differs";
    }
    cache.Release(seq);
  }

  const std::string tag = absl::StrFormat("%s_%s", model_name, exact ? "exact" : "fast");
  ::testing::Test::RecordProperty(tag + "_max_abs_diff", absl::StrFormat("%.3g", worst_abs));
  ::testing::Test::RecordProperty(tag + "_max_rel_diff", absl::StrFormat("%.3g", worst_rel));
  std::cout << absl::StrFormat(
                   "[golden] %-34s %-5s last_logits max|d| %.3g (relative %.3g); greedy "
                   "prefix match %d/%d; kernels: %s\n",
                   model_name, exact ? "exact" : "fast", worst_abs, worst_rel, greedy_match,
                   greedy_total, model.kernel_summary())
            << std::flush;
}

void RunAll(Precision precision) {
  const std::string shared = SharedDir();
  const std::vector<fs::path> files = GoldenFiles(shared);
  if (shared.empty() || files.empty()) {
    GTEST_SKIP() << "shared assets not found at '" << shared << "' (QUILL_SHARED_DIR)";
  }
  for (const fs::path& f : files) CheckFile(f, precision);
}

TEST(GoldenTest, ExactModeMatchesReference) { RunAll(Precision::kExact); }
TEST(GoldenTest, FastModeMatchesReference) { RunAll(Precision::kFast); }

// The llama-quantize Q4_K_M file of ../golden/families (Q4_K with Q6_K tensors).
TEST(GoldenTest, QuantizedQ4KMMatchesReference) {
  const fs::path json = fs::path(SharedDir()) / "golden/families/tinyllama-256-Q4_K_M.json";
  if (SharedDir().empty() || !fs::exists(json)) GTEST_SKIP() << json << " not found";
  CheckFile(json, Precision::kExact);
  CheckFile(json, Precision::kFast);
}

}  // namespace
}  // namespace quill::engine
