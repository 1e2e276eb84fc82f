// oneDNN matmul wrapper: static-M buckets over one reordered weight copy.

#include "engine/kernels/linear_onednn.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/base/check.h"
#include "engine/base/status_macros.h"

namespace quill::engine::kernels::linear_internal {

using dnnl::memory;

dnnl::engine& DnnlEngine() {
  static dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

dnnl::stream& DnnlStream() {
  static dnnl::stream* stream = new dnnl::stream(DnnlEngine());
  return *stream;
}

bool OnednnUsesAmx() {
  // oneDNN's ISA values are bit sets, each holding the bits of the ISAs it extends (but
  // avx2_vnni = 0x407 is above avx512_core_amx = 0x3e7 without being AMX): test the bits.
  const unsigned amx = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_amx);
  return (static_cast<unsigned>(dnnl::get_effective_cpu_isa()) & amx) == amx;
}

absl::StatusOr<std::unique_ptr<OnednnMatmul>> OnednnMatmul::Create(
    memory::data_type type, int64_t k, int64_t n, int64_t src_stride, const void* plain,
    std::vector<int> buckets, LinearScratch* scratch) {
  std::unique_ptr<OnednnMatmul> mm(new OnednnMatmul());
  mm->scratch_ = scratch;
  try {
    dnnl::engine& eng = DnnlEngine();
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    std::vector<dnnl::matmul::primitive_desc> pds;
    size_t scratch_bytes = 0;
    for (int rows : buckets) {
      const memory::desc src({rows, k}, type, memory::dims{src_stride, 1});
      const memory::desc wei({k, n}, type, memory::format_tag::any);
      const memory::desc dst({rows, n}, memory::data_type::f32, memory::format_tag::ab);
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, wei, dst), attr, eng);
      if (pds.empty()) {
        mm->weights_desc_ = pd.weights_desc();
        mm->impl_name_ = pd.impl_info_str();
      } else if (pd.weights_desc() != mm->weights_desc_) {
        continue;  // this M wants another layout: leave it out, smaller buckets still serve
      }
      scratch_bytes = std::max(scratch_bytes, pd.scratchpad_desc().get_size());
      mm->bucket_rows_.push_back(rows);
      pds.push_back(pd);
    }
    QUILL_RETURN_IF_ERROR(scratch->Reserve(LinearScratch::kOnednn, scratch_bytes));
    for (const auto& pd : pds) {
      Bucket b;
      b.primitive = dnnl::matmul(pd);
      b.src = memory(pd.src_desc(), eng, DNNL_MEMORY_NONE);
      b.dst = memory(pd.dst_desc(), eng, DNNL_MEMORY_NONE);
      b.scratchpad = memory(pd.scratchpad_desc(), eng, DNNL_MEMORY_NONE);
      b.args = {{DNNL_ARG_SRC, b.src},
                {DNNL_ARG_WEIGHTS, memory()},  // set below, once the packed copy exists
                {DNNL_ARG_DST, b.dst},
                {DNNL_ARG_SCRATCHPAD, b.scratchpad}};
      mm->buckets_.push_back(std::move(b));
    }
    // Pack: the plain [n x k] weight is {k, n} in "ba" order; reorder once into the layout
    // the primitives chose.
    mm->weights_buffer_ = AlignedBuffer<uint8_t>(mm->weights_desc_.get_size(), /*huge_pages=*/true);
    mm->weights_ = memory(mm->weights_desc_, eng, mm->weights_buffer_.data());
    memory plain_mem(memory::desc({k, n}, type, memory::format_tag::ba), eng,
                     const_cast<void*>(plain));
    dnnl::reorder(plain_mem, mm->weights_).execute(DnnlStream(), plain_mem, mm->weights_);
    DnnlStream().wait();
    for (Bucket& b : mm->buckets_) b.args[DNNL_ARG_WEIGHTS] = mm->weights_;
  } catch (const dnnl::error& e) {
    return absl::InternalError(absl::StrCat("oneDNN matmul create failed (k=", k, ", n=", n,
                                            "): ", e.what(), " (status ",
                                            static_cast<int>(e.status), ")"));
  }
  return mm;
}

void OnednnMatmul::RunBucket(size_t b, const void* src, float* dst) {
  Bucket& bucket = buckets_[b];
  bucket.src.set_data_handle(const_cast<void*>(src));
  bucket.dst.set_data_handle(dst);
  // Shared with other Linears, and may have grown since Create(): bound per call.
  bucket.scratchpad.set_data_handle(scratch_->Get(LinearScratch::kOnednn));
  try {
    bucket.primitive.execute(DnnlStream(), bucket.args);
    DnnlStream().wait();
  } catch (const dnnl::error& e) {
    // Shapes and memory were validated at Create(); a failure here is a bug.
    spdlog::critical("oneDNN matmul execute failed: {}", e.what());
    QUILL_CHECK(false);
  }
}

}  // namespace quill::engine::kernels::linear_internal
