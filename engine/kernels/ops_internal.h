#pragma once

#include <cstdint>

// Internal to the element-wise kernels (ops_*.cc).
namespace quill::engine::kernels::internal {

// Below this many floats a call is too small to pay for waking the OpenMP pool.
constexpr int64_t kParallelFloats = int64_t{1} << 15;

}  // namespace quill::engine::kernels::internal
