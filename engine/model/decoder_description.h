#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/gguf/gguf_file.h"

namespace quill::engine {

struct ModelConfig;

enum class NormKind {
  kRmsNorm,    // x / rms(x) * w
  kLayerNorm,  // (x - mean) / std * w + b
};

enum class FfnKind {
  kSwiGlu,  // down(silu(gate(x)) * up(x))
  kGeGlu,   // down(gelu_tanh(gate(x)) * up(x))
  kGelu,    // down(gelu_tanh(up(x))), no gate
};

enum class PositionKind {
  kRopeNormal,  // RoPE on adjacent pairs (GGUF "normal": Llama as converted)
  kRopeNeox,    // RoPE on halves (NEOX rotate-half: Qwen2, Gemma 2)
  kLearned,     // learned absolute position embeddings (position_embd.weight), no RoPE
};

// How a decoder-only transformer computes, beyond its sizes: resolved once from
// general.architecture and the file's metadata (ResolveDecoder), then read by the loader
// (which tensors exist, with which shapes) and the forward pass (which kernels run). These
// are the only places an architecture's behaviour is decided; nothing tests its name.
// The defaults describe Llama.
struct DecoderDescription {
  NormKind norm = NormKind::kRmsNorm;
  FfnKind ffn = FfnKind::kSwiGlu;
  PositionKind positions = PositionKind::kRopeNormal;
  bool fused_qkv = false;            // one attn_qkv.weight holding [q | k | v]
  bool qkv_bias = false;             // attn_q/k/v.bias (attn_qkv.bias when fused)
  bool attn_output_bias = false;     // attn_output.bias
  bool ffn_bias = false;             // ffn_up.bias and ffn_down.bias (ffn_gate.bias if gated)
  bool post_attention_norm = false;  // post_attention_norm.weight on the attention output
  bool post_ffn_norm = false;        // post_ffw_norm.weight on the FFN output
  bool scale_embeddings = false;     // token embeddings x sqrt(d_model) (Gemma)
  bool rope_freq_factors = false;    // rope_freqs.weight divides the RoPE frequencies
  float attn_softcap = 0.0f;         // > 0: scores = cap * tanh(scores / cap)
  float final_softcap = 0.0f;        // > 0: logits = cap * tanh(logits / cap)
  int64_t sliding_window = 0;        // > 0: sliding layers see only the last this-many positions
  int sliding_window_pattern = 0;    // 0: every layer slides; n: layer l iff l % n < n - 1
  float query_scale = 0.0f;          // scores = query_scale * q.k (resolved: never 0)

  bool gated_ffn() const { return ffn != FfnKind::kGelu; }
  bool uses_rope() const { return positions != PositionKind::kLearned; }
  bool has_norm_bias() const { return norm == NormKind::kLayerNorm; }
  // The attention window of `layer`: sliding_window, or 0 (every earlier position).
  int64_t WindowOfLayer(int64_t layer) const;
};

// "gemma2, gpt2, llama, qwen2".
std::string SupportedArchitectures();

// The fixed traits of a family, before its metadata is read. INVALID_ARGUMENT naming the
// supported architectures for any other name.
absl::StatusOr<DecoderDescription> DescribeArchitecture(absl::string_view architecture);

// The family's traits completed from `file`: the `{arch}.*` keys the family reads (soft-caps,
// sliding window), the optional tensors that switch a feature on (rope_freqs.weight), and
// the query scale for `config`'s head sizes. `config` must already hold the architecture and
// the sizes. INVALID_ARGUMENT (naming the key) for a key of the wrong type or value.
absl::StatusOr<DecoderDescription> ResolveDecoder(const GgufFile& file, const ModelConfig& config);

// One line for logs and --info, e.g. "RMSNorm, SwiGLU, RoPE neox, QKV bias, window 4096/2".
std::string DecoderSummary(const DecoderDescription& d);

}  // namespace quill::engine
