#include "engine/model/model_config.h"

#include <cmath>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/base/status_macros.h"

namespace quill::engine {
namespace {

constexpr char kArchitecture[] = "llama";

// Caps that keep every product in the accounting (and in the loader's shape arithmetic)
// far from int64 overflow; real models are orders of magnitude below them.
constexpr int64_t kMaxEmbeddingLength = int64_t{1} << 20;
constexpr int64_t kMaxBlockCount = 4096;
constexpr int64_t kMaxFeedForwardLength = int64_t{1} << 24;
constexpr int64_t kMaxContextLength = int64_t{1} << 24;
constexpr int64_t kMaxVocabSize = int64_t{1} << 24;

// A required integer key; a missing key is INVALID_ARGUMENT (the file is not a usable
// model), a wrong type keeps the reader's INVALID_ARGUMENT.
absl::StatusOr<int64_t> RequiredInt(const GgufFile& file, const std::string& key) {
  absl::StatusOr<int64_t> value = file.GetInt(key);
  if (absl::IsNotFound(value.status())) {
    return absl::InvalidArgumentError(
        absl::StrCat("missing required key '", key, "' in ", file.path()));
  }
  return value;
}

absl::StatusOr<int64_t> OptionalInt(const GgufFile& file, const std::string& key,
                                    int64_t fallback) {
  if (!file.HasKey(key)) return fallback;
  return file.GetInt(key);
}

absl::StatusOr<float> OptionalFloat(const GgufFile& file, const std::string& key,
                                    float fallback) {
  if (!file.HasKey(key)) return fallback;
  return file.GetFloat(key);
}

std::string ShapeString(const std::vector<int64_t>& dims) {
  return absl::StrCat("{", absl::StrJoin(dims, ", "), "}");
}

absl::Status CheckTensor(const GgufFile& file, const std::string& name,
                         const std::vector<int64_t>& expected) {
  const GgufTensorInfo* tensor = file.FindTensor(name);
  if (tensor == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("missing tensor '", name, "' (expected shape ",
                                                   ShapeString(expected), ") in ", file.path()));
  }
  if (tensor->dims != expected) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has shape ",
                                                   ShapeString(tensor->dims), ", expected ",
                                                   ShapeString(expected), " (GGUF order, innermost first)"));
  }
  return absl::OkStatus();
}

absl::Status CheckPositive(const char* what, int64_t value, int64_t max,
                           const char* max_name = "the limit") {
  if (value <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, " must be positive, got ", value));
  }
  if (value > max) {
    return absl::InvalidArgumentError(absl::StrCat(what, " ", value, " exceeds ", max_name, " ", max));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> ModelConfig::FromGguf(const GgufFile& file) {
  ModelConfig config;
  absl::StatusOr<std::string> arch = file.GetString("general.architecture");
  if (absl::IsNotFound(arch.status())) {
    return absl::InvalidArgumentError(
        absl::StrCat("missing required key 'general.architecture' in ", file.path()));
  }
  QUILL_RETURN_IF_ERROR(arch.status());
  if (*arch != kArchitecture) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported architecture '", *arch,
                                                   "' (Quill supports: llama)"));
  }
  config.architecture = *arch;
  if (file.HasKey("general.name")) {
    QUILL_ASSIGN_OR_RETURN(config.name, file.GetString("general.name"));
  }

  const std::string prefix = absl::StrCat(*arch, ".");
  QUILL_ASSIGN_OR_RETURN(config.embedding_length, RequiredInt(file, prefix + "embedding_length"));
  QUILL_ASSIGN_OR_RETURN(config.block_count, RequiredInt(file, prefix + "block_count"));
  QUILL_ASSIGN_OR_RETURN(config.head_count, RequiredInt(file, prefix + "attention.head_count"));
  QUILL_ASSIGN_OR_RETURN(config.head_count_kv,
                         OptionalInt(file, prefix + "attention.head_count_kv", config.head_count));
  QUILL_ASSIGN_OR_RETURN(config.feed_forward_length,
                         RequiredInt(file, prefix + "feed_forward_length"));
  QUILL_ASSIGN_OR_RETURN(config.context_length, RequiredInt(file, prefix + "context_length"));
  if (config.head_count > 0) config.head_dim = config.embedding_length / config.head_count;
  QUILL_ASSIGN_OR_RETURN(config.rope_dimension_count,
                         OptionalInt(file, prefix + "rope.dimension_count", config.head_dim));
  QUILL_ASSIGN_OR_RETURN(config.rope_freq_base,
                         OptionalFloat(file, prefix + "rope.freq_base", 10000.0f));
  QUILL_ASSIGN_OR_RETURN(config.rms_norm_eps,
                         OptionalFloat(file, prefix + "attention.layer_norm_rms_epsilon", 1e-5f));
  // Quill derives head_dim from d_model; a file that says otherwise is not supported.
  for (const char* key : {"attention.key_length", "attention.value_length"}) {
    if (!file.HasKey(prefix + key)) continue;
    QUILL_ASSIGN_OR_RETURN(int64_t length, file.GetInt(prefix + key));
    if (length != config.head_dim) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", prefix, key, "' is ", length, " but embedding_length / head_count is ",
          config.head_dim, "; Quill supports only head_dim = embedding_length / head_count"));
    }
  }

  // The vocabulary size comes from the embedding table.
  const int64_t d = config.embedding_length;
  const GgufTensorInfo* embd = file.FindTensor("token_embd.weight");
  if (embd == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("missing tensor 'token_embd.weight' in ", file.path()));
  }
  if (embd->dims.size() != 2 || embd->dims[0] != d) {
    return absl::InvalidArgumentError(absl::StrCat("tensor 'token_embd.weight' has shape ",
                                                   ShapeString(embd->dims), ", expected {", d,
                                                   ", vocab_size} (GGUF order, innermost first)"));
  }
  config.vocab_size = embd->dims[1];
  if (file.HasKey(prefix + "vocab_size")) {
    QUILL_ASSIGN_OR_RETURN(int64_t declared, file.GetInt(prefix + "vocab_size"));
    if (declared != config.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("'", prefix, "vocab_size' is ", declared,
                                                     " but token_embd.weight has ",
                                                     config.vocab_size, " rows"));
    }
  }
  if (file.HasKey("tokenizer.ggml.tokens")) {
    QUILL_ASSIGN_OR_RETURN(uint64_t tokens, file.GetArrayLength("tokenizer.ggml.tokens"));
    if (tokens != static_cast<uint64_t>(config.vocab_size)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the tokenizer has ", tokens, " tokens but token_embd.weight has ", config.vocab_size,
          " rows"));
    }
  }
  config.tied_embeddings = file.FindTensor("output.weight") == nullptr;
  QUILL_RETURN_IF_ERROR(config.Validate());

  // Every tensor the forward pass needs, with the shape the metadata implies.
  const int64_t vocab = config.vocab_size;
  const int64_t q_width = config.head_count * config.head_dim;
  const int64_t kv_width = config.head_count_kv * config.head_dim;
  const int64_t ffn = config.feed_forward_length;
  QUILL_RETURN_IF_ERROR(CheckTensor(file, "output_norm.weight", {d}));
  if (!config.tied_embeddings) QUILL_RETURN_IF_ERROR(CheckTensor(file, "output.weight", {d, vocab}));
  for (int64_t i = 0; i < config.block_count; ++i) {
    const std::string blk = absl::StrCat("blk.", i, ".");
    QUILL_RETURN_IF_ERROR(CheckTensor(file, blk + "attn_norm.weight", {d}));
    QUILL_RETURN_IF_ERROR(CheckTensor(file, blk + "attn_q.weight", {d, q_width}));
    QUILL_RETURN_IF_ERROR(CheckTensor(file, blk + "attn_k.weight", {d, kv_width}));
    QUILL_RETURN_IF_ERROR(CheckTensor(file, blk + "attn_v.weight", {d, kv_width}));
    QUILL_RETURN_IF_ERROR(CheckTensor(file, blk + "attn_output.weight", {q_width, d}));
    QUILL_RETURN_IF_ERROR(CheckTensor(file, blk + "ffn_norm.weight", {d}));
    QUILL_RETURN_IF_ERROR(CheckTensor(file, blk + "ffn_gate.weight", {d, ffn}));
    QUILL_RETURN_IF_ERROR(CheckTensor(file, blk + "ffn_up.weight", {d, ffn}));
    QUILL_RETURN_IF_ERROR(CheckTensor(file, blk + "ffn_down.weight", {ffn, d}));
  }
  return config;
}

absl::Status ModelConfig::Validate() const {
  QUILL_RETURN_IF_ERROR(CheckPositive("vocab_size", vocab_size, kMaxVocabSize));
  QUILL_RETURN_IF_ERROR(CheckPositive("embedding_length", embedding_length, kMaxEmbeddingLength));
  QUILL_RETURN_IF_ERROR(CheckPositive("block_count", block_count, kMaxBlockCount));
  QUILL_RETURN_IF_ERROR(CheckPositive("head_count", head_count, embedding_length, "embedding_length"));
  QUILL_RETURN_IF_ERROR(CheckPositive("head_count_kv", head_count_kv, head_count, "head_count"));
  QUILL_RETURN_IF_ERROR(
      CheckPositive("feed_forward_length", feed_forward_length, kMaxFeedForwardLength));
  QUILL_RETURN_IF_ERROR(CheckPositive("context_length", context_length, kMaxContextLength));
  if (head_count % head_count_kv != 0) {
    return absl::InvalidArgumentError(absl::StrCat("head_count ", head_count,
                                                   " is not a multiple of head_count_kv ",
                                                   head_count_kv));
  }
  if (embedding_length % head_count != 0) {
    return absl::InvalidArgumentError(absl::StrCat("embedding_length ", embedding_length,
                                                   " is not a multiple of head_count ", head_count));
  }
  if (head_dim != embedding_length / head_count) {
    return absl::InvalidArgumentError(absl::StrCat("head_dim ", head_dim,
                                                   " != embedding_length / head_count = ",
                                                   embedding_length / head_count));
  }
  if (rope_dimension_count <= 0 || rope_dimension_count % 2 != 0 || rope_dimension_count > head_dim) {
    return absl::InvalidArgumentError(absl::StrCat("rope dimension count ", rope_dimension_count,
                                                   " must be even, positive and <= head_dim ",
                                                   head_dim));
  }
  if (!std::isfinite(rope_freq_base) || rope_freq_base <= 0.0f) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope freq_base ", rope_freq_base, " must be finite and > 0"));
  }
  if (!std::isfinite(rms_norm_eps) || rms_norm_eps <= 0.0f) {
    return absl::InvalidArgumentError(
        absl::StrCat("rms_norm_eps ", rms_norm_eps, " must be finite and > 0"));
  }
  return absl::OkStatus();
}

ModelAccounting ComputeAccounting(const ModelConfig& config, int64_t context,
                                  int kv_element_bytes) {
  const int64_t d = config.embedding_length;
  const int64_t q_width = config.head_count * config.head_dim;
  const int64_t kv_width = config.head_count_kv * config.head_dim;
  const int64_t vocab = config.vocab_size;
  ModelAccounting a;
  a.params_per_block = d * q_width             // wq
                       + 2 * d * kv_width      // wk, wv
                       + q_width * d           // wo
                       + 3 * d * config.feed_forward_length  // gate, up, down
                       + 2 * d;                // attention and MLP RMSNorm weights
  if (config.qkv_bias) a.params_per_block += q_width + 2 * kv_width;
  a.embedding_params = vocab * d;
  a.output_params = config.tied_embeddings ? 0 : vocab * d;
  a.total_params = config.block_count * a.params_per_block + a.embedding_params +
                   a.output_params + d;  // + final norm
  a.non_embedding_params = a.total_params - a.embedding_params - a.output_params;
  // 2 FLOPs per multiply-add for every weight a token meets. The LM head matmul always
  // runs (tied or not); the embedding lookup is free. Attention adds QK^T and AV over
  // `context` positions: 2 * 2 * layers * context * (heads * head_dim).
  a.flops_per_token = 2 * (a.non_embedding_params + vocab * d) +
                      4 * config.block_count * context * q_width;
  a.kv_bytes_per_token = 2 * config.block_count * kv_width * kv_element_bytes;
  return a;
}

}  // namespace quill::engine
