// Scalar ground truth for the element-wise kernels and attention: plain loops, double
// accumulation, attention by a full softmax per query.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/kernels/reference/reference_kernels.h"

namespace quill::engine::kernels::reference {

void RmsNorm(const float* x, const float* weight, int rows, int dim, float eps, float* out) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + static_cast<int64_t>(r) * dim;
    double sum = 0.0;
    for (int i = 0; i < dim; ++i) sum += static_cast<double>(xr[i]) * xr[i];
    const double scale = 1.0 / std::sqrt(sum / dim + eps);
    float* o = out + static_cast<int64_t>(r) * dim;
    for (int i = 0; i < dim; ++i) o[i] = static_cast<float>(xr[i] * scale * weight[i]);
  }
}

void Rope(float* x, const int32_t* positions, int rows, int n_heads, int head_dim,
          int rope_dim, float freq_base) {
  for (int r = 0; r < rows; ++r) {
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + (static_cast<int64_t>(r) * n_heads + h) * head_dim;
      for (int i = 0; i < rope_dim / 2; ++i) {
        // The angle follows the float32 recipe of the golden references
        // (inv_freq = 1 / base ** (2i / dim), angle = pos * inv_freq); the rotation is double.
        const float inv_freq =
            1.0f / std::pow(freq_base, static_cast<float>(2 * i) / static_cast<float>(rope_dim));
        const float angle = static_cast<float>(positions[r]) * inv_freq;
        const double c = std::cos(static_cast<double>(angle));
        const double s = std::sin(static_cast<double>(angle));
        const double x0 = v[2 * i];
        const double x1 = v[2 * i + 1];
        v[2 * i] = static_cast<float>(x0 * c - x1 * s);
        v[2 * i + 1] = static_cast<float>(x0 * s + x1 * c);
      }
    }
  }
}

void SwiGlu(const float* gate_up, int rows, int ffn, float* out) {
  for (int r = 0; r < rows; ++r) {
    const float* gate = gate_up + static_cast<int64_t>(r) * 2 * ffn;
    const float* up = gate + ffn;
    for (int j = 0; j < ffn; ++j) {
      const double g = gate[j];
      out[static_cast<int64_t>(r) * ffn + j] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[j]);
    }
  }
}

void PagedAttention(const float* q, const float* k_cache, const float* v_cache,
                    const KvLayout& layout, absl::Span<const AttentionSequence> sequences,
                    int n_heads, float scale, float* out) {
  const int hd = layout.head_dim;
  const int group = n_heads / layout.num_kv_heads;
  auto slot_row = [&](const AttentionSequence& s, int pos, int kv_head) {
    const int64_t slot =
        static_cast<int64_t>(s.block_table[pos / layout.block_size]) * layout.block_size +
        pos % layout.block_size;
    return (slot * layout.num_kv_heads + kv_head) * hd;
  };
  for (const AttentionSequence& s : sequences) {
    for (int j = 0; j < s.num_q; ++j) {
      const int last = s.first_pos + j;  // attends to positions [0, last]
      for (int h = 0; h < n_heads; ++h) {
        const int kv = h / group;
        const float* qh = q + (static_cast<int64_t>(s.q_begin + j) * n_heads + h) * hd;
        std::vector<double> scores(last + 1);
        double max_score = -INFINITY;
        for (int t = 0; t <= last; ++t) {
          const float* k = k_cache + slot_row(s, t, kv);
          double dot = 0.0;
          for (int d = 0; d < hd; ++d) dot += static_cast<double>(qh[d]) * k[d];
          scores[t] = dot * scale;
          max_score = std::max(max_score, scores[t]);
        }
        double denom = 0.0;
        for (double& sc : scores) denom += sc = std::exp(sc - max_score);
        float* o = out + (static_cast<int64_t>(s.q_begin + j) * n_heads + h) * hd;
        for (int d = 0; d < hd; ++d) {
          double acc = 0.0;
          for (int t = 0; t <= last; ++t) acc += scores[t] * v_cache[slot_row(s, t, kv) + d];
          o[d] = static_cast<float>(acc / denom);
        }
      }
    }
  }
}

}  // namespace quill::engine::kernels::reference
