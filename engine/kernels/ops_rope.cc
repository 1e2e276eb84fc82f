// Rotary position embedding: the GGUF "normal" (adjacent pairs) and NEOX (rotate-half)
// layouts, with optional per-frequency divisors (Llama 3.1+ rope_freqs).
#include <cmath>
#include <cstdint>

#include "engine/base/check.h"
#include "engine/kernels/ops.h"
#include "engine/kernels/parallel_for.h"

namespace quill::engine::kernels {
namespace {

// The largest rope_dim supported (the cos/sin table of a row lives on the stack).
constexpr int kMaxRopeDim = 1024;

// inv_freq[i] = 1 / base^(2i / rope_dim) [/ factor[i]], each step in float32: the recipe the
// golden references used (PyTorch float32 `1 / base ** (arange(0, dim, 2) / dim)`).
void InvFreq(const RopeSpec& spec, float* inv_freq) {
  for (int i = 0; i < spec.rope_dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(spec.rope_dim);
    inv_freq[i] = 1.0f / std::pow(spec.freq_base, exponent);
    if (spec.freq_factors != nullptr) inv_freq[i] /= spec.freq_factors[i];
  }
}

// Rotates pair i of every head: elements (2i, 2i+1), or (i, i + half) for NEOX.
template <bool kNeox>
void RotateHeads(float* x, int n_heads, int head_dim, int half, const float* cos_t,
                 const float* sin_t) {
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim;
    for (int i = 0; i < half; ++i) {
      const int a = kNeox ? i : 2 * i;
      const int b = kNeox ? i + half : 2 * i + 1;
      const float x0 = v[a];
      const float x1 = v[b];
      v[a] = x0 * cos_t[i] - x1 * sin_t[i];
      v[b] = x0 * sin_t[i] + x1 * cos_t[i];
    }
  }
}

void RopeRow(float* x, int32_t pos, int n_heads, int head_dim, int rope_dim, RopeLayout layout,
             const float* inv_freq) {
  const int half = rope_dim / 2;
  float cos_t[kMaxRopeDim / 2];
  float sin_t[kMaxRopeDim / 2];
  for (int i = 0; i < half; ++i) {
    // The angle is rounded to float32 before cos/sin, as in the reference recipe.
    const float angle = static_cast<float>(pos) * inv_freq[i];
    cos_t[i] = std::cos(angle);
    sin_t[i] = std::sin(angle);
  }
  if (layout == RopeLayout::kNeox) {
    RotateHeads<true>(x, n_heads, head_dim, half, cos_t, sin_t);
  } else {
    RotateHeads<false>(x, n_heads, head_dim, half, cos_t, sin_t);
  }
}

}  // namespace

void Rope(float* x, const int32_t* positions, int rows, int n_heads, int head_dim,
          const RopeSpec& spec) {
  const int rope_dim = spec.rope_dim;
  QUILL_CHECK(rope_dim >= 0 && rope_dim <= head_dim && rope_dim <= kMaxRopeDim &&
              rope_dim % 2 == 0);
  float inv_freq[kMaxRopeDim / 2];
  InvFreq(spec, inv_freq);
  const int64_t row_floats = static_cast<int64_t>(n_heads) * head_dim;
  // cos/sin dominate the cost: parallel once a call has a few thousand of them.
  ParallelFor(rows, int64_t{rows} * rope_dim >= 4096 && rows > 1, [&](int64_t r) {
    RopeRow(x + r * row_floats, positions[r], n_heads, head_dim, rope_dim, spec.layout, inv_freq);
  });
}

}  // namespace quill::engine::kernels
