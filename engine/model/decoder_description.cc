#include "engine/model/decoder_description.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/base/status_macros.h"
#include "engine/model/model_config.h"

namespace quill::engine {
namespace {

// A family: its fixed traits plus which optional `{arch}.*` keys it reads, with the
// defaults llama.cpp uses when a file omits them.
struct Family {
  const char* name;
  DecoderDescription traits;
  bool reads_softcaps = false;        // attn_logit_softcapping, final_logit_softcapping
  bool reads_sliding_window = false;  // attention.sliding_window(_pattern)
  // Gemma 2 27B scales queries by 1/sqrt(d_model / heads) instead of 1/sqrt(head_dim)
  // (gemma_pytorch config: query_pre_attn_scalar); llama.cpp recognises it by its 46 layers.
  int64_t width_query_scale_layers = 0;
};

DecoderDescription Llama() { return DecoderDescription(); }

DecoderDescription Qwen2() {
  DecoderDescription d;
  d.positions = PositionKind::kRopeNeox;
  d.qkv_bias = true;
  return d;
}

DecoderDescription Gemma2() {
  DecoderDescription d;
  d.ffn = FfnKind::kGeGlu;
  d.positions = PositionKind::kRopeNeox;
  d.post_attention_norm = true;
  d.post_ffn_norm = true;
  d.scale_embeddings = true;
  d.attn_softcap = 50.0f;  // the Gemma 2 values, used when the keys are absent
  d.final_softcap = 30.0f;
  d.sliding_window = 4096;
  d.sliding_window_pattern = 2;  // layers 0, 2, 4, ... slide
  return d;
}

DecoderDescription Gpt2() {
  DecoderDescription d;
  d.norm = NormKind::kLayerNorm;
  d.ffn = FfnKind::kGelu;
  d.positions = PositionKind::kLearned;
  d.fused_qkv = true;
  d.qkv_bias = true;
  d.attn_output_bias = true;
  d.ffn_bias = true;
  return d;
}

// Sorted by name. A new family is one entry here (plus any kernels it needs).
const std::vector<Family>& Families() {
  static const std::vector<Family>* families = new std::vector<Family>{
      {"gemma2", Gemma2(), /*reads_softcaps=*/true, /*reads_sliding_window=*/true,
       /*width_query_scale_layers=*/46},
      {"gpt2", Gpt2()},
      {"llama", Llama()},
      {"qwen2", Qwen2()},
  };
  return *families;
}

const Family* FindFamily(absl::string_view name) {
  for (const Family& f : Families()) {
    if (name == f.name) return &f;
  }
  return nullptr;
}

absl::StatusOr<float> OptionalFloat(const GgufFile& file, const std::string& key, float fallback) {
  if (!file.HasKey(key)) return fallback;
  return file.GetFloat(key);
}

absl::Status CheckCap(const std::string& key, float cap) {
  if (!std::isfinite(cap) || cap <= 0.0f) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", key, "' is ", cap, "; a soft-cap must be finite and > 0"));
  }
  return absl::OkStatus();
}

const char* NormName(NormKind k) { return k == NormKind::kRmsNorm ? "RMSNorm" : "LayerNorm"; }

const char* FfnName(FfnKind k) {
  switch (k) {
    case FfnKind::kSwiGlu:
      return "SwiGLU";
    case FfnKind::kGeGlu:
      return "GEGLU";
    case FfnKind::kGelu:
      return "GELU";
  }
  return "?";
}

const char* PositionName(PositionKind k) {
  switch (k) {
    case PositionKind::kRopeNormal:
      return "RoPE normal";
    case PositionKind::kRopeNeox:
      return "RoPE neox";
    case PositionKind::kLearned:
      return "learned positions";
  }
  return "?";
}

}  // namespace

int64_t DecoderDescription::WindowOfLayer(int64_t layer) const {
  if (sliding_window <= 0) return 0;
  const int64_t n = sliding_window_pattern;
  return n == 0 || layer % n < n - 1 ? sliding_window : 0;
}

std::string SupportedArchitectures() {
  std::vector<std::string> names;
  for (const Family& f : Families()) names.push_back(f.name);
  return absl::StrJoin(names, ", ");
}

absl::StatusOr<DecoderDescription> DescribeArchitecture(absl::string_view architecture) {
  const Family* family = FindFamily(architecture);
  if (family == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported architecture '", architecture,
                                                   "' (Quill supports: ", SupportedArchitectures(),
                                                   ")"));
  }
  return family->traits;
}

absl::StatusOr<DecoderDescription> ResolveDecoder(const GgufFile& file, const ModelConfig& config) {
  const Family* family = FindFamily(config.architecture);
  if (family == nullptr) return DescribeArchitecture(config.architecture).status();
  DecoderDescription d = family->traits;
  const std::string prefix = config.architecture + ".";

  if (family->reads_softcaps) {
    const std::string attn_key = prefix + "attn_logit_softcapping";
    const std::string final_key = prefix + "final_logit_softcapping";
    QUILL_ASSIGN_OR_RETURN(d.attn_softcap, OptionalFloat(file, attn_key, d.attn_softcap));
    QUILL_ASSIGN_OR_RETURN(d.final_softcap, OptionalFloat(file, final_key, d.final_softcap));
    QUILL_RETURN_IF_ERROR(CheckCap(attn_key, d.attn_softcap));
    QUILL_RETURN_IF_ERROR(CheckCap(final_key, d.final_softcap));
  }
  if (family->reads_sliding_window) {
    const std::string key = prefix + "attention.sliding_window";
    if (file.HasKey(key)) {
      QUILL_ASSIGN_OR_RETURN(d.sliding_window, file.GetInt(key));
      if (d.sliding_window <= 0 || d.sliding_window > config.context_length) {
        return absl::InvalidArgumentError(
            absl::StrCat("'", key, "' is ", d.sliding_window, "; it must be in [1, ",
                         config.context_length, "] (the context length)"));
      }
    } else {
      // The family default can exceed a short context, where it never bites.
      d.sliding_window = std::min<int64_t>(d.sliding_window, config.context_length);
    }
    const std::string pattern_key = prefix + "attention.sliding_window_pattern";
    if (file.HasKey(pattern_key)) {
      QUILL_ASSIGN_OR_RETURN(int64_t pattern, file.GetInt(pattern_key));
      if (pattern < 0 || pattern > config.block_count) {
        return absl::InvalidArgumentError(absl::StrCat(
            "'", pattern_key, "' is ", pattern, "; it must be in [0, ", config.block_count, "]"));
      }
      d.sliding_window_pattern = static_cast<int>(pattern);
    }
  }
  d.rope_freq_factors = d.uses_rope() && file.FindTensor("rope_freqs.weight") != nullptr;

  int64_t scale_dim = config.head_dim;
  if (family->width_query_scale_layers > 0 &&
      config.block_count == family->width_query_scale_layers && config.head_count > 0) {
    scale_dim = config.embedding_length / config.head_count;
  }
  d.query_scale = scale_dim > 0 ? 1.0f / std::sqrt(static_cast<float>(scale_dim)) : 0.0f;
  return d;
}

std::string DecoderSummary(const DecoderDescription& d) {
  std::vector<std::string> parts = {NormName(d.norm), FfnName(d.ffn), PositionName(d.positions)};
  if (d.rope_freq_factors) parts.push_back("rope_freqs");
  if (d.fused_qkv) parts.push_back("fused QKV");
  std::vector<std::string> biases;
  if (d.qkv_bias) biases.push_back("qkv");
  if (d.attn_output_bias) biases.push_back("o");
  if (d.ffn_bias) biases.push_back("ffn");
  if (!biases.empty()) parts.push_back(absl::StrCat("biases ", absl::StrJoin(biases, "+")));
  if (d.post_attention_norm || d.post_ffn_norm) parts.push_back("post-norms");
  if (d.scale_embeddings) parts.push_back("embeddings x sqrt(d)");
  if (d.attn_softcap > 0) parts.push_back(absl::StrCat("attention soft-cap ", d.attn_softcap));
  if (d.final_softcap > 0) parts.push_back(absl::StrCat("final soft-cap ", d.final_softcap));
  if (d.sliding_window > 0) {
    parts.push_back(absl::StrCat("sliding window ", d.sliding_window,
                                 d.sliding_window_pattern > 0
                                     ? absl::StrCat(" (pattern ", d.sliding_window_pattern, ")")
                                     : std::string(" (every layer)")));
  }
  return absl::StrJoin(parts, ", ");
}

}  // namespace quill::engine
