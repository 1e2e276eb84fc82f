#pragma once

#include <cstdint>

#include "absl/types/span.h"
#include "engine/kernels/attention.h"
#include "engine/kernels/linear.h"
#include "engine/kernels/ops.h"

// Implemented in reference/linear_reference.cc (Linear) and reference/ops_reference.cc (the rest).
// Plain scalar ground truth for every optimized kernel. Written for clarity, not speed;
// tests compare the fast kernels against these. Accumulation is in double where it helps
// the reference be the more accurate side.
namespace quill::engine::kernels::reference {

// y[m x N] = x[m x K] * W^T with W widened exactly to f32.
void Linear(const WeightView& w, const float* x, int m, float* y);
// The fast kernel's arithmetic for the block types Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K
// (linear_qblock.h), written plainly over the GGUF blocks: x quantized to int8 per 32,
// integer dot products per weight group, then the documented float steps in order. The
// fast kernel must match it bit for bit.
void QBlockLinear(const WeightView& w, const float* x, int m, float* y);
void RmsNorm(const float* x, const float* weight, int rows, int dim, float eps, float* out);
void LayerNorm(const float* x, const float* weight, const float* bias, int rows, int dim, float eps,
               float* out);
void Rope(float* x, const int32_t* positions, int rows, int n_heads, int head_dim,
          const RopeSpec& spec);
void SwiGlu(const float* gate_up, int rows, int ffn, float* out);
void GeGlu(const float* gate_up, int rows, int ffn, float* out);
void Gelu(const float* x, int64_t n, float* out);  // the tanh form, as written
void SoftCap(float* x, int64_t n, float cap);
void AddBias(float* x, const float* bias, int rows, int cols);
void Scale(float* x, int64_t n, float s);
void AddTableRows(float* out, const float* table, const int32_t* index, int rows, int dim);
// Causal GQA attention by materializing scores per query (what the tiled kernel must match),
// in double. The caches are floats in `layout` (an f32 or f16 layout, not q8).
void PagedAttention(const float* q, const float* k_cache, const float* v_cache,
                    const KvLayout& layout, absl::Span<const AttentionSequence> sequences,
                    int n_heads, const AttentionParams& params, float* out);

}  // namespace quill::engine::kernels::reference
