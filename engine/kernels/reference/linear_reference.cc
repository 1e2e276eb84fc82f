// Scalar ground truth for Linear: weights widened exactly, products and sums in double; and
// the block-type kernels' int8 arithmetic written plainly.

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/kernels/linear.h"
#include "engine/kernels/linear_internal.h"
#include "engine/kernels/reference/reference_kernels.h"
#include "engine/quant/block_layout.h"

namespace quill::engine::kernels::reference {
namespace {

// x row -> int8 per 32 values, as the kernel: d = max|x| / 127, q = nearest-even of
// x * (127 / max|x|), clamped to [-127, 127].
void QuantizeRow(const float* x, int64_t k, int8_t* q, float* d) {
  for (int64_t b = 0; b < k / 32; ++b) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[32 * b + j]));
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    d[b] = amax / 127.0f;
    for (int j = 0; j < 32; ++j) {
      const float v = x[32 * b + j] * id;
      // The kernel's conversion gives INT_MIN for NaN and out-of-range values.
      const long r = std::fabs(v) < 2e9f ? std::lrint(v) : -2147483647L - 1;
      q[32 * b + j] = static_cast<int8_t>(std::clamp<long>(r, -127, 127));
    }
  }
}

struct GroupScales {
  float ws = 0.0f;  // multiplies the integer dot product
  float wm = 0.0f;  // multiplies d_x * sum(xq) (min types)
};

// Scale of group g (of `group` values) of a GGUF block.
GroupScales ScalesOf(quant::QuantType type, const uint8_t* block, int g) {
  const quant::BlockFields f = quant::FieldsOf(type);
  const float d = Fp16ToFloat(quant::LoadU16(block + f.d));
  GroupScales s;
  switch (type) {
    case quant::QuantType::kQ4_K:
    case quant::QuantType::kQ5_K: {
      uint8_t sc, m;
      quant::UnpackScaleMin(block + f.scales, g, &sc, &m);
      s.ws = d * static_cast<float>(sc);
      s.wm = -(Fp16ToFloat(quant::LoadU16(block + f.m)) * static_cast<float>(m));
      break;
    }
    case quant::QuantType::kQ6_K:
      s.ws = d * static_cast<float>(static_cast<int8_t>(block[f.scales + g]));
      break;
    default:
      s.ws = d;
      if (f.m >= 0) s.wm = Fp16ToFloat(quant::LoadU16(block + f.m));
      break;
  }
  return s;
}

}  // namespace

void Linear(const WeightView& w, const float* x, int m, float* y) {
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t n = 0; n < w.rows; ++n) {
    DequantizeRow(w, n, row.data());
    for (int i = 0; i < m; ++i) {
      const float* xi = x + static_cast<int64_t>(i) * w.cols;
      double sum = 0.0;
      for (int64_t k = 0; k < w.cols; ++k) sum += static_cast<double>(xi[k]) * row[k];
      y[static_cast<int64_t>(i) * w.rows + n] = static_cast<float>(sum);
    }
  }
}

void QBlockLinear(const WeightView& w, const float* x, int m, float* y) {
  quant::QuantType type;
  if (!linear_internal::ToQuantType(w.type, &type)) return;
  const int64_t k = w.cols;
  const int sb_k = quant::BlockElements(type);
  const int group = type == quant::QuantType::kQ6_K ? 16 : 32;
  const bool has_min = quant::FieldsOf(type).m >= 0;
  const int offset = type == quant::QuantType::kQ4_0   ? 8
                     : type == quant::QuantType::kQ5_0 ? 16
                     : type == quant::QuantType::kQ6_K ? 32
                                                       : 0;
  const int64_t row_bytes = linear_internal::RowBytes(w.type, k);
  std::vector<int8_t> xq(k);
  std::vector<float> xd(k / 32);
  std::vector<uint8_t> q(sb_k);
  for (int i = 0; i < m; ++i) {
    QuantizeRow(x + static_cast<int64_t>(i) * k, k, xq.data(), xd.data());
    for (int64_t n = 0; n < w.rows; ++n) {
      const uint8_t* row = static_cast<const uint8_t*>(w.data) + n * row_bytes;
      float f = 0.0f;
      for (int64_t sb = 0; sb < k / sb_k; ++sb) {
        const uint8_t* block = row + sb * quant::BlockBytes(type);
        quant::UnpackQuants(type, block, q.data());
        for (int g = 0; g < sb_k / group; ++g) {
          const int64_t k0 = sb * sb_k + g * group;
          int32_t dot = 0, sum = 0;
          for (int j = 0; j < group; ++j) {
            dot += q[g * group + j] * xq[k0 + j];
            sum += xq[k0 + j];
          }
          const float dx = xd[k0 / 32];
          const GroupScales s = ScalesOf(type, block, g);
          f = std::fma(static_cast<float>(dot - offset * sum), s.ws * dx, f);
          if (has_min) f = std::fma(s.wm, dx * static_cast<float>(sum), f);
        }
      }
      y[static_cast<int64_t>(i) * w.rows + n] = f;
    }
  }
}

}  // namespace quill::engine::kernels::reference
