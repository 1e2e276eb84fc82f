// The element-wise adds and scales: each output element depends only on its own inputs,
// so splitting across threads can never change a result.
#include "engine/kernels/ops.h"

#include <cstdint>

#include "engine/kernels/ops_internal.h"
#include "engine/kernels/parallel_for.h"

namespace quill::engine::kernels {

using internal::kParallelFloats;

void AddInPlace(float* out, const float* x, int64_t n) {
  ForChunks(n, n >= 4 * kParallelFloats, [&](int64_t begin, int64_t count) {
#pragma omp simd
    for (int64_t i = begin; i < begin + count; ++i) out[i] += x[i];
  });
}

void AddBias(float* x, const float* bias, int rows, int cols) {
  ParallelFor(rows, int64_t{rows} * cols >= 4 * kParallelFloats && rows > 1, [&](int64_t r) {
    float* row = x + r * cols;
#pragma omp simd
    for (int c = 0; c < cols; ++c) row[c] += bias[c];
  });
}

void Scale(float* x, int64_t n, float s) {
  ForChunks(n, n >= 4 * kParallelFloats, [&](int64_t begin, int64_t count) {
#pragma omp simd
    for (int64_t i = begin; i < begin + count; ++i) x[i] *= s;
  });
}

void AddTableRows(float* out, const float* table, const int32_t* index, int rows, int dim) {
  ParallelFor(rows, int64_t{rows} * dim >= 4 * kParallelFloats && rows > 1, [&](int64_t r) {
    float* o = out + r * dim;
    const float* t = table + static_cast<int64_t>(index[r]) * dim;
#pragma omp simd
    for (int c = 0; c < dim; ++c) o[c] += t[c];
  });
}

}  // namespace quill::engine::kernels
