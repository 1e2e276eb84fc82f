#pragma once

#include <cstdint>

namespace quill::engine::kernels {

// Element-wise and normalization kernels. All are batch-invariant: each output row depends
// only on its own input row, with a fixed operation order. AVX-512 where the CPU has it,
// portable code otherwise; reference/reference_kernels.h holds the scalar ground truth.
// Implemented by concept: ops_norm.cc, ops_rope.cc, ops_activation.cc, ops.cc (adds).

// ---- Normalization (ops_norm.cc) ----

// out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight. `out` may alias `x`.
void RmsNorm(const float* x, const float* weight, int rows, int dim, float eps, float* out);

// out[r] = (x[r] - mean(x[r])) / sqrt(var(x[r]) + eps) * weight + bias (biased variance,
// as torch.nn.LayerNorm). `bias` may be null (no bias). `out` may alias `x`.
void LayerNorm(const float* x, const float* weight, const float* bias, int rows, int dim, float eps,
               float* out);

// ---- Rotary position embedding (ops_rope.cc) ----

enum class RopeLayout {
  kNormal,  // GGUF/ggml "normal": pairs (2i, 2i+1) rotate together (Llama as converted)
  kNeox,    // NEOX / rotate-half: pairs (i, i + rope_dim/2) (Qwen2, Gemma 2, ...)
};

struct RopeSpec {
  int rope_dim = 0;  // leading dims of each head that rotate (even, <= head_dim, <= 1024)
  float freq_base = 10000.0f;
  RopeLayout layout = RopeLayout::kNormal;
  // rope_dim/2 divisors of the frequencies (Llama 3.1+ `rope_freqs.weight`), or null.
  const float* freq_factors = nullptr;
};

// In place. Pair i of each head rotates by angle pos * base^(-2i/rope_dim) / factor[i];
// dims past rope_dim are untouched. x: rows x n_heads x head_dim; positions: one per row.
void Rope(float* x, const int32_t* positions, int rows, int n_heads, int head_dim,
          const RopeSpec& spec);

// The "normal" layout without frequency factors (the original Llama call).
inline void Rope(float* x, const int32_t* positions, int rows, int n_heads, int head_dim,
                 int rope_dim, float freq_base) {
  Rope(x, positions, rows, n_heads, head_dim, RopeSpec{rope_dim, freq_base});
}

// ---- Activations (ops_activation.cc) ----

// SwiGLU on a fused gate|up matmul output: for each row, gate_up holds `2*ffn` floats
// (gate first, then up); out[r][j] = silu(gate[j]) * up[j]. out: rows x ffn.
void SwiGlu(const float* gate_up, int rows, int ffn, float* out);

// GEGLU, the same layout: out[r][j] = gelu(gate[j]) * up[j] with the tanh GELU below.
void GeGlu(const float* gate_up, int rows, int ffn, float* out);

// The tanh approximation of GELU (PyTorch approximate="tanh", GPT-2's gelu_new):
// out[i] = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), computed as the equal
// x / (1 + exp(-2 sqrt(2/pi) (x + 0.044715 x^3))), which does not cancel for x < 0.
// `out` may alias `x`.
void Gelu(const float* x, int64_t n, float* out);

// Soft-capping (Gemma 2): x[i] = cap * tanh(x[i] / cap), for cap > 0.
void SoftCap(float* x, int64_t n, float cap);

// ---- Adds (ops.cc) ----

// out[i] += x[i] for n floats (the residual connection).
void AddInPlace(float* out, const float* x, int64_t n);

// x[r][c] += bias[c] for rows x cols floats (a projection's bias).
void AddBias(float* x, const float* bias, int rows, int cols);

// x[i] *= s for n floats (e.g. Gemma's embedding scale).
void Scale(float* x, int64_t n, float s);

// out[r] += table[index[r]] for rows of `dim` floats (learned position embeddings).
void AddTableRows(float* out, const float* table, const int32_t* index, int rows, int dim);

}  // namespace quill::engine::kernels
