// Scalar ground truth for the element-wise kernels and attention: plain loops, double
// accumulation, formulas as the papers write them, attention by a full softmax per query.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/base/check.h"
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

void LayerNorm(const float* x, const float* weight, const float* bias, int rows, int dim, float eps,
               float* out) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + static_cast<int64_t>(r) * dim;
    double mean = 0.0;
    for (int i = 0; i < dim; ++i) mean += xr[i];
    mean /= dim;
    double var = 0.0;
    for (int i = 0; i < dim; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    var /= dim;
    const double scale = 1.0 / std::sqrt(var + eps);
    float* o = out + static_cast<int64_t>(r) * dim;
    for (int i = 0; i < dim; ++i) {
      o[i] = static_cast<float>((xr[i] - mean) * scale * weight[i] + (bias ? bias[i] : 0.0));
    }
  }
}

void Rope(float* x, const int32_t* positions, int rows, int n_heads, int head_dim,
          const RopeSpec& spec) {
  const int half = spec.rope_dim / 2;
  for (int r = 0; r < rows; ++r) {
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + (static_cast<int64_t>(r) * n_heads + h) * head_dim;
      for (int i = 0; i < half; ++i) {
        // The angle follows the float32 recipe of the golden references
        // (inv_freq = 1 / base ** (2i / dim) / factor, angle = pos * inv_freq); the rotation
        // is double.
        float inv_freq = 1.0f / std::pow(spec.freq_base, static_cast<float>(2 * i) /
                                                             static_cast<float>(spec.rope_dim));
        if (spec.freq_factors != nullptr) inv_freq /= spec.freq_factors[i];
        const float angle = static_cast<float>(positions[r]) * inv_freq;
        const double c = std::cos(static_cast<double>(angle));
        const double s = std::sin(static_cast<double>(angle));
        const int a = spec.layout == RopeLayout::kNeox ? i : 2 * i;
        const int b = spec.layout == RopeLayout::kNeox ? i + half : 2 * i + 1;
        const double x0 = v[a];
        const double x1 = v[b];
        v[a] = static_cast<float>(x0 * c - x1 * s);
        v[b] = static_cast<float>(x0 * s + x1 * c);
      }
    }
  }
}

namespace {

double SiluD(double g) { return g / (1.0 + std::exp(-g)); }

// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as PyTorch's approximate="tanh" writes it,
// in long double so that 1 + tanh (which cancels for x << 0) stays accurate in double.
double GeluD(double x) {
  const long double k = std::sqrt(2.0L / 3.14159265358979323846264338327950288L);
  const long double lx = x;
  return static_cast<double>(0.5L * lx * (1.0L + std::tanh(k * (lx + 0.044715L * lx * lx * lx))));
}

}  // namespace

void SwiGlu(const float* gate_up, int rows, int ffn, float* out) {
  for (int r = 0; r < rows; ++r) {
    const float* gate = gate_up + static_cast<int64_t>(r) * 2 * ffn;
    const float* up = gate + ffn;
    for (int j = 0; j < ffn; ++j) {
      out[static_cast<int64_t>(r) * ffn + j] = static_cast<float>(SiluD(gate[j]) * up[j]);
    }
  }
}

void GeGlu(const float* gate_up, int rows, int ffn, float* out) {
  for (int r = 0; r < rows; ++r) {
    const float* gate = gate_up + static_cast<int64_t>(r) * 2 * ffn;
    const float* up = gate + ffn;
    for (int j = 0; j < ffn; ++j) {
      out[static_cast<int64_t>(r) * ffn + j] = static_cast<float>(GeluD(gate[j]) * up[j]);
    }
  }
}

void Gelu(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(GeluD(x[i]));
}

void SoftCap(float* x, int64_t n, float cap) {
  for (int64_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(cap * std::tanh(static_cast<double>(x[i]) / cap));
  }
}

void AddBias(float* x, const float* bias, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) x[static_cast<int64_t>(r) * cols + c] += bias[c];
  }
}

void Scale(float* x, int64_t n, float s) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void AddTableRows(float* out, const float* table, const int32_t* index, int rows, int dim) {
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < dim; ++c) {
      out[static_cast<int64_t>(r) * dim + c] += table[static_cast<int64_t>(index[r]) * dim + c];
    }
  }
}

void PagedAttention(const float* q, const float* k_cache, const float* v_cache,
                    const KvLayout& layout, absl::Span<const AttentionSequence> sequences,
                    int n_heads, const AttentionParams& params, float* out) {
  const int hd = layout.head_dim;
  const int group = n_heads / layout.num_kv_heads;
  QUILL_CHECK(layout.element != KvElement::kQ8);  // the caches are floats
  auto slot = [&](const AttentionSequence& s, int pos) {
    return static_cast<int64_t>(s.block_table[pos / layout.block_size]) * layout.block_size +
           pos % layout.block_size;
  };
  // Each row's slots are looked up once, and P.V runs key by key over a row of
  // accumulators: every sum still adds the same terms in the same order (d, then t
  // ascending), in a fraction of the index arithmetic (under ASan the tests spent most
  // of their attention time here).
  std::vector<int64_t> slots;
  std::vector<double> scores;
  std::vector<double> acc(hd);
  for (const AttentionSequence& s : sequences) {
    for (int j = 0; j < s.num_q; ++j) {
      const int last = s.first_pos + j;  // attends to positions [first, last]
      const int first = params.window > 0 ? std::max(0, last - params.window + 1) : 0;
      slots.resize(last + 1 - first);
      for (int t = first; t <= last; ++t) slots[t - first] = slot(s, t);
      for (int h = 0; h < n_heads; ++h) {
        const int kv = h / group;
        const float* qh = q + (static_cast<int64_t>(s.q_begin + j) * n_heads + h) * hd;
        scores.assign(slots.size(), 0.0);
        double max_score = -INFINITY;
        for (size_t i = 0; i < slots.size(); ++i) {
          // A float cache's key dimensions are block_size apart (KvLayout::KeyIndex).
          const float* k = k_cache + layout.KeyIndex(slots[i], kv, 0);
          double dot = 0.0;
          for (int d = 0; d < hd; ++d) {
            dot += static_cast<double>(qh[d]) * k[int64_t{d} * layout.block_size];
          }
          double score = dot * params.scale;
          if (params.softcap > 0) score = params.softcap * std::tanh(score / params.softcap);
          scores[i] = score;
          max_score = std::max(max_score, score);
        }
        double denom = 0.0;
        for (double& sc : scores) denom += sc = std::exp(sc - max_score);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (size_t i = 0; i < slots.size(); ++i) {
          const float* v = v_cache + layout.ValueIndex(slots[i], kv, 0);
          for (int d = 0; d < hd; ++d) acc[d] += scores[i] * v[d];
        }
        float* o = out + (static_cast<int64_t>(s.q_begin + j) * n_heads + h) * hd;
        for (int d = 0; d < hd; ++d) o[d] = static_cast<float>(acc[d] / denom);
      }
    }
  }
}

}  // namespace quill::engine::kernels::reference
