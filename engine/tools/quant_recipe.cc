#include "engine/tools/quant_recipe.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace quill::engine::tools {
namespace {

struct Row {
  const char* name;
  GgmlType base;
  uint32_t file_type;
  bool mixed_m;
};

// llama_ftype numbers: pure q4_k / q5_k are written as Q4_K_S / Q5_K_S, their nearest kin.
constexpr Row kRecipes[] = {
    {"f32", GgmlType::kF32, 0, false},     {"f16", GgmlType::kF16, 1, false},
    {"bf16", GgmlType::kBF16, 32, false},  {"q8_0", GgmlType::kQ8_0, 7, false},
    {"q4_0", GgmlType::kQ4_0, 2, false},   {"q4_1", GgmlType::kQ4_1, 3, false},
    {"q5_0", GgmlType::kQ5_0, 8, false},   {"q5_1", GgmlType::kQ5_1, 9, false},
    {"q4_k", GgmlType::kQ4_K, 14, false},  {"q5_k", GgmlType::kQ5_K, 16, false},
    {"q6_k", GgmlType::kQ6_K, 18, false},  {"q4_k_m", GgmlType::kQ4_K, 15, true},
    {"q5_k_m", GgmlType::kQ5_K, 17, true},
};

// N of "blk.N.", or -1.
int64_t LayerOf(absl::string_view tensor) {
  if (!absl::ConsumePrefix(&tensor, "blk.")) return -1;
  int64_t layer;
  const size_t dot = tensor.find('.');
  if (dot == absl::string_view::npos || !absl::SimpleAtoi(tensor.substr(0, dot), &layer)) return -1;
  return layer;
}

}  // namespace

absl::StatusOr<QuantRecipe> ParseQuantRecipe(absl::string_view name, bool pure) {
  const std::string lower = absl::AsciiStrToLower(name);
  for (const Row& row : kRecipes) {
    if (lower != row.name) continue;
    QuantRecipe r;
    r.name = row.name;
    r.base = row.base;
    r.file_type = row.file_type;
    r.mixed_m = row.mixed_m && !pure;
    r.pure = pure;
    return r;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("type '", name, "' is not one of ", QuantRecipeNames()));
}

const char* QuantRecipeNames() {
  return "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k, q4_k_m, q5_k_m";
}

bool UseMoreBits(int64_t layer, int64_t n_layers) {
  return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

GgmlType TensorTypeFor(const QuantRecipe& recipe, absl::string_view tensor, int64_t n_layers,
                       bool has_output) {
  const GgmlType base = recipe.base;
  const bool float_or_q8 = base == GgmlType::kF32 || base == GgmlType::kF16 ||
                           base == GgmlType::kBF16 || base == GgmlType::kQ8_0;
  if (recipe.pure || float_or_q8) return base;
  const bool head = tensor == "output.weight" || (!has_output && tensor == "token_embd.weight");
  if (head) return GgmlType::kQ6_K;
  if (recipe.mixed_m &&
      (absl::EndsWith(tensor, ".attn_v.weight") || absl::EndsWith(tensor, ".ffn_down.weight"))) {
    const int64_t layer = LayerOf(tensor);
    if (layer >= 0 && UseMoreBits(layer, n_layers)) return GgmlType::kQ6_K;
  }
  return base;
}

}  // namespace quill::engine::tools
