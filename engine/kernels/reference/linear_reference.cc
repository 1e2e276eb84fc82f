// Scalar ground truth for Linear: weights widened exactly, products and sums in double.

#include <vector>

#include "engine/kernels/linear.h"
#include "engine/kernels/reference/reference_kernels.h"

namespace quill::engine::kernels::reference {

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

}  // namespace quill::engine::kernels::reference
