#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "engine/gguf/gguf_file.h"

namespace quill::engine {

// Hyperparameters of a Llama-family decoder, read from GGUF metadata and validated.
struct ModelConfig {
  std::string architecture;      // "llama"
  std::string name;              // general.name, may be empty
  int64_t vocab_size = 0;        // rows of token_embd.weight
  int64_t embedding_length = 0;  // d_model
  int64_t block_count = 0;       // layers
  int64_t head_count = 0;
  int64_t head_count_kv = 0;     // == head_count for MHA, 1 for MQA
  int64_t head_dim = 0;          // embedding_length / head_count
  int64_t feed_forward_length = 0;
  int64_t rope_dimension_count = 0;  // defaults to head_dim
  float rope_freq_base = 10000.0f;
  float rms_norm_eps = 1e-5f;
  int64_t context_length = 0;
  bool tied_embeddings = false;  // output.weight absent: the LM head is token_embd.weight
  bool qkv_bias = false;         // only used by the accounting (Qwen2-style); Llama has none

  // Reads `{arch}.*` keys and the tensor table. INVALID_ARGUMENT for an unsupported
  // architecture, a missing key, or shapes that disagree with the metadata (naming both).
  static absl::StatusOr<ModelConfig> FromGguf(const GgufFile& file);
  // Consistency checks on the numbers alone (positive sizes, heads divide d_model, ...).
  absl::Status Validate() const;
};

// The standard parameter / compute accounting (as in the scaling-law papers and the
// model cards): used by `quill-run --info`, GetModelInfo, and tested against published
// figures for Llama 3.1 8B and Qwen2.5-7B.
struct ModelAccounting {
  int64_t params_per_block = 0;     // attention + MLP + the two norms
  int64_t embedding_params = 0;     // token embedding table
  int64_t output_params = 0;        // LM head (0 when tied)
  int64_t total_params = 0;         // everything, incl. final norm
  int64_t non_embedding_params = 0; // total minus embedding (and minus untied LM head)
  int64_t flops_per_token = 0;      // 2 * non-embedding matmul params + LM head, plus attention term
  int64_t kv_bytes_per_token = 0;   // 2 * layers * kv_heads * head_dim * kv_element_bytes
};

// `context` is the attention context the FLOPs term assumes; `kv_element_bytes` is 2 for
// an fp16 cache, 4 for f32.
ModelAccounting ComputeAccounting(const ModelConfig& config, int64_t context,
                                  int kv_element_bytes);

}  // namespace quill::engine
