#pragma once

// Static-M oneDNN matmul buckets sharing one packed weight copy (internal to Linear).

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/kernels/linear_internal.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace quill::engine::kernels::linear_internal {

// The process-wide CPU engine and stream (created on first use).
dnnl::engine& DnnlEngine();
dnnl::stream& DnnlStream();
// Whether oneDNN's matmuls run on AMX tiles on this CPU.
bool OnednnUsesAmx();

// y[M x n] = src[M x k] * W^T for a fixed set of M ("buckets"), each a static-M primitive
// (oneDNN picks brgemm for static shapes, ~4x faster than its runtime-M gemm in bf16).
// All buckets must agree on the packed weight layout, so one copy serves them all.
class OnednnMatmul {
 public:
  // `plain` is the row-major [n x k] weight in `type` (f32 or bf16); src rows (type `type`)
  // have stride `src_stride` elements. Throws nothing: oneDNN errors become INTERNAL. The
  // primitives' scratchpad is `scratch`'s kOnednn buffer (which must outlive this).
  static absl::StatusOr<std::unique_ptr<OnednnMatmul>> Create(dnnl::memory::data_type type,
                                                              int64_t k, int64_t n,
                                                              int64_t src_stride, const void* plain,
                                                              std::vector<int> buckets,
                                                              LinearScratch* scratch);

  const std::vector<int>& buckets() const { return bucket_rows_; }
  // Runs the matmul of exactly buckets()[b] rows; dst row stride is n.
  void RunBucket(size_t b, const void* src, float* dst);

  const dnnl::memory::desc& weights_desc() const { return weights_desc_; }
  const void* packed_weights() const { return weights_buffer_.data(); }
  int64_t packed_bytes() const { return static_cast<int64_t>(weights_desc_.get_size()); }
  const std::string& impl_name() const { return impl_name_; }

 private:
  struct Bucket {
    dnnl::matmul primitive;
    dnnl::memory src, dst, scratchpad;
    std::unordered_map<int, dnnl::memory> args;  // built once: execute() gets a ready map
  };
  OnednnMatmul() = default;

  std::vector<int> bucket_rows_;
  std::vector<Bucket> buckets_;
  dnnl::memory::desc weights_desc_;
  AlignedBuffer<uint8_t> weights_buffer_;  // huge-page backed storage of weights_
  dnnl::memory weights_;
  LinearScratch* scratch_ = nullptr;
  std::string impl_name_;
};

}  // namespace quill::engine::kernels::linear_internal
