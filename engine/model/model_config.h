#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "engine/gguf/gguf_file.h"
#include "engine/kernels/kv_element.h"
#include "engine/model/decoder_description.h"

namespace quill::engine {

// The largest head_dim the attention kernel takes.
inline constexpr int64_t kMaxHeadDim = 256;

// Sizes and hyperparameters of a decoder-only transformer, read from GGUF metadata and
// validated, plus the description of how its family computes (`decoder`). Reads metadata
// only (and token_embd.weight's shape, which gives the vocabulary size); the loader checks
// every tensor against it.
struct ModelConfig {
  std::string architecture;      // general.architecture: "llama", "qwen2", "gemma2", "gpt2"
  std::string name;              // general.name, may be empty
  int64_t vocab_size = 0;        // rows of token_embd.weight
  int64_t embedding_length = 0;  // d_model
  int64_t block_count = 0;       // layers
  int64_t head_count = 0;
  int64_t head_count_kv = 0;     // == head_count for MHA, 1 for MQA
  int64_t head_dim = 0;          // attention.key_length, else embedding_length / head_count
  int64_t feed_forward_length = 0;
  int64_t rope_dimension_count = 0;  // defaults to head_dim (0 without RoPE)
  float rope_freq_base = 10000.0f;
  float norm_eps = 1e-5f;  // RMSNorm or LayerNorm epsilon, whichever the family uses
  int64_t context_length = 0;
  bool tied_embeddings = false;  // output.weight absent: the LM head is token_embd.weight
  DecoderDescription decoder;    // defaults: Llama

  // Reads `{arch}.*` keys. INVALID_ARGUMENT for an unsupported architecture, a missing key,
  // a key of the wrong type, or numbers that disagree (naming the key).
  static absl::StatusOr<ModelConfig> FromGguf(const GgufFile& file);
  // Consistency checks on the numbers alone (positive sizes, heads divide, head_dim within
  // the kernel's limit, window within the context, ...).
  absl::Status Validate() const;
  // The factor on q.k: decoder.query_scale, or 1/sqrt(head_dim) when that is 0.
  float attention_scale() const;
};

// The standard parameter / compute accounting (as in the scaling-law papers and the
// model cards): used by `quill-run --info`, GetModelInfo, and tested against published
// figures (Llama 3.1 8B, Llama 3.2 1B, Qwen2.5-7B, Qwen2-0.5B, Gemma 2 2B, GPT-2).
struct ModelAccounting {
  int64_t params_per_block = 0;     // attention + MLP + their norms and biases
  int64_t embedding_params = 0;     // token embedding table
  int64_t position_params = 0;      // learned position table (0 with RoPE)
  int64_t output_params = 0;        // LM head (0 when tied)
  int64_t total_params = 0;         // everything, incl. final norm
  int64_t non_embedding_params = 0;  // total minus token and position embeddings and untied head
  int64_t flops_per_token = 0;       // 2 * non-embedding params + LM head, plus attention term
  int64_t kv_bytes_per_token = 0;    // 2 * layers * kv_heads * KvRowBytes(kv_element, head_dim)
};

// `context` is the attention context the FLOPs term assumes (a sliding-window layer sees
// at most its window); `kv_element` is what the KV cache stores.
ModelAccounting ComputeAccounting(const ModelConfig& config, int64_t context,
                                  kernels::KvElement kv_element);

}  // namespace quill::engine
