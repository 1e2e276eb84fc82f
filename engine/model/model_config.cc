#include "engine/model/model_config.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/base/status_macros.h"

namespace quill::engine {
namespace {

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
  // An unsupported family is refused before its keys are looked for.
  QUILL_ASSIGN_OR_RETURN(const DecoderDescription traits, DescribeArchitecture(*arch));
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

  // head_dim: attention.key_length when given (Gemma 2: 256 with d_model / heads = 288),
  // else d_model / heads, which must then divide.
  const std::string key_length = prefix + "attention.key_length";
  const std::string value_length = prefix + "attention.value_length";
  if (file.HasKey(key_length)) {
    QUILL_ASSIGN_OR_RETURN(config.head_dim, file.GetInt(key_length));
    if (config.head_dim <= 0 || config.head_dim > kMaxHeadDim) {
      return absl::InvalidArgumentError(absl::StrCat("'", key_length, "' is ", config.head_dim,
                                                     "; it must be in [1, ", kMaxHeadDim, "]"));
    }
  } else if (config.head_count > 0) {
    if (config.embedding_length % config.head_count != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "embedding_length ", config.embedding_length, " is not a multiple of head_count ",
          config.head_count, " and '", key_length, "' is absent"));
    }
    config.head_dim = config.embedding_length / config.head_count;
  }
  if (file.HasKey(value_length)) {
    QUILL_ASSIGN_OR_RETURN(int64_t v, file.GetInt(value_length));
    if (v != config.head_dim) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", value_length, "' is ", v, " but the key head size is ", config.head_dim,
                       "; Quill's KV cache needs key_length == value_length"));
    }
  }
  if (traits.uses_rope()) {
    QUILL_ASSIGN_OR_RETURN(config.rope_dimension_count,
                           OptionalInt(file, prefix + "rope.dimension_count", config.head_dim));
    QUILL_ASSIGN_OR_RETURN(config.rope_freq_base,
                           OptionalFloat(file, prefix + "rope.freq_base", 10000.0f));
  }
  const std::string eps_key = traits.norm == NormKind::kRmsNorm
                                  ? prefix + "attention.layer_norm_rms_epsilon"
                                  : prefix + "attention.layer_norm_epsilon";
  QUILL_ASSIGN_OR_RETURN(config.norm_eps, OptionalFloat(file, eps_key, 1e-5f));

  // The vocabulary size comes from the embedding table.
  const int64_t d = config.embedding_length;
  const GgufTensorInfo* embd = file.FindTensor("token_embd.weight");
  if (embd == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("missing tensor 'token_embd.weight' in ", file.path()));
  }
  if (embd->dims.size() != 2 || embd->dims[0] != d) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor 'token_embd.weight' has shape {", absl::StrJoin(embd->dims, ", "),
                     "}, expected {", d, ", vocab_size} (GGUF order, innermost first)"));
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
  QUILL_ASSIGN_OR_RETURN(config.decoder, ResolveDecoder(file, config));
  QUILL_RETURN_IF_ERROR(config.Validate());
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
  QUILL_RETURN_IF_ERROR(
      CheckPositive("head_dim", head_dim, kMaxHeadDim, "the attention kernel's limit"));
  if (head_count % head_count_kv != 0) {
    return absl::InvalidArgumentError(absl::StrCat("head_count ", head_count,
                                                   " is not a multiple of head_count_kv ",
                                                   head_count_kv));
  }
  if (decoder.uses_rope()) {
    if (rope_dimension_count <= 0 || rope_dimension_count % 2 != 0 ||
        rope_dimension_count > head_dim) {
      return absl::InvalidArgumentError(absl::StrCat("rope dimension count ", rope_dimension_count,
                                                     " must be even, positive and <= head_dim ",
                                                     head_dim));
    }
    if (!std::isfinite(rope_freq_base) || rope_freq_base <= 0.0f) {
      return absl::InvalidArgumentError(
          absl::StrCat("rope freq_base ", rope_freq_base, " must be finite and > 0"));
    }
  }
  if (!std::isfinite(norm_eps) || norm_eps <= 0.0f) {
    return absl::InvalidArgumentError(
        absl::StrCat("norm_eps ", norm_eps, " must be finite and > 0"));
  }
  for (const auto& [what, cap] :
       {std::pair<const char*, float>{"attention soft-cap", decoder.attn_softcap},
        std::pair<const char*, float>{"final soft-cap", decoder.final_softcap}}) {
    if (!std::isfinite(cap) || cap < 0.0f) {
      return absl::InvalidArgumentError(absl::StrCat(what, " ", cap, " must be finite and >= 0"));
    }
  }
  if (decoder.sliding_window < 0 || decoder.sliding_window > context_length) {
    return absl::InvalidArgumentError(absl::StrCat("sliding window ", decoder.sliding_window,
                                                   " must be in [0, context_length ",
                                                   context_length, "]"));
  }
  if (decoder.sliding_window_pattern < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sliding window pattern ", decoder.sliding_window_pattern, " must be >= 0"));
  }
  if (!std::isfinite(decoder.query_scale) || decoder.query_scale < 0.0f) {
    return absl::InvalidArgumentError(
        absl::StrCat("query scale ", decoder.query_scale, " must be finite and >= 0"));
  }
  return absl::OkStatus();
}

float ModelConfig::attention_scale() const {
  if (decoder.query_scale > 0.0f) return decoder.query_scale;
  return 1.0f / std::sqrt(static_cast<float>(head_dim));
}

ModelAccounting ComputeAccounting(const ModelConfig& config, int64_t context,
                                  kernels::KvElement kv_element) {
  const DecoderDescription& dd = config.decoder;
  const int64_t d = config.embedding_length;
  const int64_t q_width = config.head_count * config.head_dim;
  const int64_t kv_width = config.head_count_kv * config.head_dim;
  const int64_t ffn = config.feed_forward_length;
  const int64_t vocab = config.vocab_size;
  const int64_t norm = dd.has_norm_bias() ? 2 * d : d;  // weight (+ bias)

  int64_t attention = d * q_width + 2 * d * kv_width + q_width * d;  // wq, wk, wv, wo
  if (dd.qkv_bias) attention += q_width + 2 * kv_width;
  if (dd.attn_output_bias) attention += d;
  int64_t mlp = (dd.gated_ffn() ? 3 : 2) * d * ffn;  // [gate,] up, down
  if (dd.ffn_bias) mlp += (dd.gated_ffn() ? 2 * ffn : ffn) + d;
  const int64_t norms = 2 + (dd.post_attention_norm ? 1 : 0) + (dd.post_ffn_norm ? 1 : 0);

  ModelAccounting a;
  a.params_per_block = attention + mlp + norms * norm;
  a.embedding_params = vocab * d;
  a.position_params = dd.positions == PositionKind::kLearned ? config.context_length * d : 0;
  a.output_params = config.tied_embeddings ? 0 : vocab * d;
  a.total_params = config.block_count * a.params_per_block + a.embedding_params +
                   a.position_params + a.output_params + norm;  // + final norm
  a.non_embedding_params =
      a.total_params - a.embedding_params - a.position_params - a.output_params;
  // 2 FLOPs per multiply-add for every weight a token meets. The LM head matmul always
  // runs (tied or not); embedding lookups are free. Attention adds QK^T and AV over the
  // positions each layer sees: 2 * 2 * (heads * head_dim) per position.
  int64_t attended = 0;
  for (int64_t l = 0; l < config.block_count; ++l) {
    const int64_t window = dd.WindowOfLayer(l);
    attended += window > 0 ? std::min(context, window) : context;
  }
  a.flops_per_token = 2 * (a.non_embedding_params + vocab * d) + 4 * attended * q_width;
  a.kv_bytes_per_token = 2 * config.block_count * config.head_count_kv *
                         kernels::KvRowBytes(kv_element, static_cast<int>(config.head_dim));
  return a;
}

}  // namespace quill::engine
