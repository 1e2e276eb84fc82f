#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/gguf/gguf_file.h"
#include "engine/kernels/linear.h"
#include "engine/model/model_config.h"

namespace quill::engine {

// One block's weights, packed for the forward pass. Vectors a family does not have are
// empty (a bias, a norm bias, a post-norm).
struct LayerWeights {
  std::vector<float> attn_norm, attn_norm_bias;
  std::unique_ptr<kernels::Linear> qkv;  // [q | k | v] rows
  std::vector<float> qkv_bias;           // [q | k | v]
  std::unique_ptr<kernels::Linear> o;
  std::vector<float> o_bias;
  std::vector<float> post_attn_norm;
  std::vector<float> ffn_norm, ffn_norm_bias;
  std::unique_ptr<kernels::Linear> up;  // [gate | up] rows when gated, else up
  std::vector<float> up_bias;           // [gate | up] or up
  std::unique_ptr<kernels::Linear> down;
  std::vector<float> down_bias;
  std::vector<float> post_ffn_norm;
  int32_t window = 0;  // attention window of this layer (0: every earlier position)
};

// Every weight of a model, bound from a GGUF file and packed once for one precision.
struct ModelWeights {
  kernels::WeightView token_embedding;  // token_embd.weight, read row by row (points into the file)
  std::vector<float> position_embedding;  // context_length x d_model (learned positions only)
  std::vector<float> rope_freq_factors;   // rope_dim / 2 (rope_freqs.weight only)
  std::vector<LayerWeights> layers;
  std::vector<float> output_norm, output_norm_bias;
  std::unique_ptr<kernels::Linear> lm_head;  // output.weight, or token_embd.weight when tied

  // Run-time scratch every Linear above shares (they run one at a time).
  std::shared_ptr<kernels::LinearScratch> linear_scratch;

  int64_t bytes = 0;  // packed matmul weights plus the f32 vectors (heap copies)
  // token_embd.weight's bytes in the file: rows are read from the mapping as a batch looks
  // them up, so up to this much of the file stays resident (not in `bytes`).
  int64_t mapped_bytes = 0;
  std::string type_name;       // matmul weight types of the blocks, e.g. "BF16" or "F16+Q8_0"
  std::string kernel_summary;  // which matmul kernels were chosen
  int row_multiple = 1;        // the largest Linear::row_multiple() of the layers' matmuls
  int blocked_from_rows = 1;   // the largest Linear::blocked_from_rows() of those
};

// The loader: checks every tensor of `file` against `config` (its sizes and decoder
// description) and packs it. The one place that knows tensor names and shapes. Returns
// INVALID_ARGUMENT naming the tensor for a missing tensor, a wrong shape or type, or a tensor
// the description has no use for; INTERNAL for a packing failure. The file must outlive the
// result (the token embedding stays in the mapping).
// `layer_packed` (may be empty) is called after each transformer layer is packed, with the
// number of layers done and the packed bytes held so far.
absl::StatusOr<ModelWeights> LoadWeights(
    const GgufFile& file, const ModelConfig& config, kernels::Precision precision, int max_tokens,
    const std::function<void(int64_t layers_done, int64_t bytes)>& layer_packed = nullptr);

}  // namespace quill::engine
