// The element-wise adds and scales: each output element depends only on its own inputs,
// so splitting across threads can never change a result.
#include "engine/kernels/ops.h"

#include <cstdint>

#include "engine/kernels/ops_internal.h"

namespace quill::engine::kernels {

using internal::kParallelFloats;

void AddInPlace(float* out, const float* x, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= 4 * kParallelFloats)
  for (int64_t i = 0; i < n; ++i) out[i] += x[i];
}

void AddBias(float* x, const float* bias, int rows, int cols) {
#pragma omp parallel for schedule(static) if (int64_t{rows} * cols >= 4 * kParallelFloats && \
                                              rows > 1)
  for (int r = 0; r < rows; ++r) {
    float* row = x + static_cast<int64_t>(r) * cols;
#pragma omp simd
    for (int c = 0; c < cols; ++c) row[c] += bias[c];
  }
}

void Scale(float* x, int64_t n, float s) {
#pragma omp parallel for simd schedule(static) if (n >= 4 * kParallelFloats)
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void AddTableRows(float* out, const float* table, const int32_t* index, int rows, int dim) {
#pragma omp parallel for schedule(static) if (int64_t{rows} * dim >= 4 * kParallelFloats && \
                                              rows > 1)
  for (int r = 0; r < rows; ++r) {
    float* o = out + static_cast<int64_t>(r) * dim;
    const float* t = table + static_cast<int64_t>(index[r]) * dim;
#pragma omp simd
    for (int c = 0; c < dim; ++c) o[c] += t[c];
  }
}

}  // namespace quill::engine::kernels
