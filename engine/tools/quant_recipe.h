#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/gguf/gguf_file.h"

namespace quill::engine::tools {

// What a tool's `--type NAME` writes into a Llama GGUF: llama-quantize's recipe for that
// file type, for the types Quill encodes.
//   f32, f16, bf16, q8_0:    every weight matrix in that type;
//   q4_0, q4_1, q5_0, q5_1,
//   q4_k, q5_k, q6_k:        every matrix in that type except the LM head (output.weight,
//                            or token_embd.weight when tied), which is Q6_K;
//   q4_k_m, q5_k_m:          as q4_k / q5_k, plus Q6_K for attn_v and ffn_down in the layers
//                            llama-quantize gives more bits (the first and last eighth and
//                            every third layer between).
// With `pure`, every matrix is the named type. Norms and other 1-D tensors stay as they are.
struct QuantRecipe {
  std::string name;
  GgmlType base = GgmlType::kF16;
  uint32_t file_type = 1;  // general.file_type (llama_ftype numbering)
  bool mixed_m = false;    // the _M layer mix
  bool pure = false;
};

// INVALID_ARGUMENT naming the accepted types for anything else.
absl::StatusOr<QuantRecipe> ParseQuantRecipe(absl::string_view name, bool pure);
// "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k, q4_k_m, q5_k_m"
const char* QuantRecipeNames();

// The type of weight matrix `tensor` ("blk.3.attn_v.weight", "output.weight", ...) in a
// model of `n_layers` blocks; `has_output` is false when the LM head is tied to token_embd.
GgmlType TensorTypeFor(const QuantRecipe& recipe, absl::string_view tensor, int64_t n_layers,
                       bool has_output);

// llama-quantize's choice of layers that get more bits in the _M mixes.
bool UseMoreBits(int64_t layer, int64_t n_layers);

}  // namespace quill::engine::tools
