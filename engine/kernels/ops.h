#pragma once

#include <cstdint>

namespace quill::engine::kernels {

// Element-wise and normalization kernels. All are batch-invariant: each output row depends
// only on its own input row, with a fixed operation order. AVX-512 where the CPU has it,
// portable code otherwise; reference/reference_kernels.h holds the scalar ground truth.

// out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight. `out` may alias `x`.
void RmsNorm(const float* x, const float* weight, int rows, int dim, float eps, float* out);

// Rotary position embedding in place, GGUF/ggml "normal" layout: within each head the
// pairs (2i, 2i+1) for i < rope_dim/2 rotate by angle pos * base^(-2i/rope_dim); dims past
// rope_dim are untouched. x: rows x n_heads x head_dim; positions: one per row.
void Rope(float* x, const int32_t* positions, int rows, int n_heads, int head_dim,
          int rope_dim, float freq_base);

// SwiGLU on a fused gate|up matmul output: for each row, gate_up holds `2*ffn` floats
// (gate first, then up); out[r][j] = silu(gate[j]) * up[j]. out: rows x ffn.
void SwiGlu(const float* gate_up, int rows, int ffn, float* out);

// out[i] += x[i] for n floats (the residual connection).
void AddInPlace(float* out, const float* x, int64_t n);

}  // namespace quill::engine::kernels
