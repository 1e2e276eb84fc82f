#include "engine/tools/quant_recipe.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/gguf/gguf_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_env.h"

namespace quill::engine::tools {
namespace {

using ::testing::HasSubstr;

// llama-quantize's own files: every weight matrix has the type the recipe gives it.
TEST(QuantRecipe, MatchesLlamaQuantizeFiles) {
  const struct {
    const char* file;
    const char* recipe;
  } cases[] = {{"tinyllama-256-Q4_0.gguf", "q4_0"},
               {"tinyllama-256-Q4_K_M.gguf", "q4_k_m"},
               {"tinyllama-256-Q5_K_M.gguf", "q5_k_m"},
               {"tinyllama-256-Q6_K.gguf", "q6_k"}};
  for (const auto& c : cases) {
    const std::string path = testing::SharedModelPath(c.file);
    if (path.empty()) GTEST_SKIP() << "shared model " << c.file << " not found";
    SCOPED_TRACE(c.file);
    auto file = GgufFile::Open(path);
    ASSERT_TRUE(file.ok()) << file.status();
    auto recipe = ParseQuantRecipe(c.recipe, /*pure=*/false);
    ASSERT_TRUE(recipe.ok()) << recipe.status();
    EXPECT_EQ(static_cast<int64_t>(recipe->file_type), *(*file)->GetUint("general.file_type"));
    const int64_t layers = *(*file)->GetUint("llama.block_count");
    int matrices = 0;
    for (const GgufTensorInfo& t : (*file)->tensors()) {
      if (t.dims.size() < 2) continue;
      ++matrices;
      EXPECT_EQ(GgmlTypeName(TensorTypeFor(*recipe, t.name, layers, true)), GgmlTypeName(t.type))
          << t.name;
    }
    EXPECT_EQ(matrices, 16);
  }
}

TEST(QuantRecipe, MoreBitsLayersOfTinyLlama) {
  // 22 layers: n/8 = 2 and 7n/8 = 19, so layers 0, 1, 19, 20, 21 and 2 + 3i + 2.
  std::vector<int> layers;
  for (int i = 0; i < 22; ++i)
    if (UseMoreBits(i, 22)) layers.push_back(i);
  EXPECT_THAT(layers, ::testing::ElementsAre(0, 1, 4, 7, 10, 13, 16, 19, 20, 21));
}

TEST(QuantRecipe, PureTiedAndFloatTypes) {
  auto q4 = ParseQuantRecipe("Q4_K_M", /*pure=*/true);
  ASSERT_TRUE(q4.ok());
  EXPECT_EQ(TensorTypeFor(*q4, "output.weight", 22, true), GgmlType::kQ4_K);
  EXPECT_EQ(TensorTypeFor(*q4, "blk.0.attn_v.weight", 22, true), GgmlType::kQ4_K);
  auto q40 = ParseQuantRecipe("q4_0", false);
  ASSERT_TRUE(q40.ok());
  EXPECT_EQ(TensorTypeFor(*q40, "token_embd.weight", 22, /*has_output=*/false), GgmlType::kQ6_K);
  EXPECT_EQ(TensorTypeFor(*q40, "token_embd.weight", 22, /*has_output=*/true), GgmlType::kQ4_0);
  auto q8 = ParseQuantRecipe("q8_0", false);
  ASSERT_TRUE(q8.ok());
  EXPECT_EQ(TensorTypeFor(*q8, "output.weight", 22, true), GgmlType::kQ8_0);
  auto bad = ParseQuantRecipe("q3_k", false);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("q4_k_m"));
}

}  // namespace
}  // namespace quill::engine::tools
