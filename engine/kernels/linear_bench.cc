// quill-linear-bench: Linear on TinyLlama-1.1B shapes against a plain oneDNN matmul
// (static M, weights in oneDNN's preferred layout) in the same run.
//
//   OMP_NUM_THREADS=2 quill-linear-bench [--types=bf16,f16,q8_0,f32,q4_0,q4_k,q6_k,...]
//                                         [--ms=1,2,4,8,16,64,512]
//                                         [--precision=fast|exact] [--min_ms=300]
//
// Each weight is instantiated in enough copies (cycled call after call) that the set is
// several times the last-level cache (1 GB: 160 MB still ran partly from cache on a Zen 5
// host, see linear_qblock_bench.cc), so small-m figures are DRAM-bound like a real decode
// step. Times are the best round (one pass over the copies) within --min_ms: the machine
// is shared.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "engine/kernels/linear.h"
#include "engine/kernels/linear_internal.h"
#include "engine/kernels/linear_onednn.h"
#include "engine/quant/quantize.h"
#include "oneapi/dnnl/dnnl.hpp"

ABSL_FLAG(std::string, types, "bf16,f16,q8_0,f32", "weight types to run");
ABSL_FLAG(std::string, ms, "1,2,4,8,16,64,512", "batch sizes (rows of x)");
ABSL_FLAG(std::string, shapes, "qkv,o,gate_up,down,lm_head", "which TinyLlama matrices");
ABSL_FLAG(std::string, precision, "fast", "fast or exact");
ABSL_FLAG(int, min_ms, 300, "minimum measuring time per point (ms)");
ABSL_FLAG(int, working_set_mb, 1024, "cycle weight copies until they total this much");
ABSL_FLAG(bool, baseline, true, "also time a plain oneDNN matmul");
ABSL_FLAG(bool, baseline_huge_pages, true,
          "give the baseline's weights huge pages too, as Linear's (false: oneDNN's allocator)");
ABSL_FLAG(bool, cpu_time, false,
          "time with process CPU time instead of wall time (for compute-bound comparisons on a "
          "shared machine; use with OMP_NUM_THREADS=1, as spinning threads count too)");

namespace quill::engine::kernels {
namespace {

using linear_internal::AlignedBuffer;

struct Shape {
  const char* name;
  int64_t k, n;
  int per_step;  // uses in one decode step of TinyLlama-1.1B (22 layers)
};

constexpr Shape kShapes[] = {{"qkv", 2048, 2560, 22},
                             {"o", 2048, 2048, 22},
                             {"gate_up", 2048, 11264, 22},
                             {"down", 5632, 2048, 22},
                             {"lm_head", 2048, 32000, 1}};
// Copies of one weight at most: the smallest (o in Q4_K, 2.4 MB) needs ~430 for 1 GB.
constexpr int kMaxCopies = 512;

double Now() {
  if (absl::GetFlag(FLAGS_cpu_time)) {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

uint32_t Xorshift(uint32_t& s) {
  s ^= s << 13;
  s ^= s >> 17;
  s ^= s << 5;
  return s;
}

float Uniform(uint32_t& s) { return (Xorshift(s) >> 8) * (2.0f / 16777216.0f) - 1.0f; }

// Random weights in their GGUF encoding.
std::vector<uint8_t> MakeWeights(WeightType type, int64_t n, int64_t k, uint32_t seed) {
  std::vector<uint8_t> bytes(n * linear_internal::RowBytes(type, k));
  uint32_t s = seed * 2654435761u + 1;
  uint8_t* p = bytes.data();
  const int64_t count = n * k;
  switch (type) {
    case WeightType::kF32:
      for (int64_t i = 0; i < count; ++i, p += 4) {
        const float v = Uniform(s);
        std::memcpy(p, &v, 4);
      }
      break;
    case WeightType::kF16:
    case WeightType::kBF16:
      for (int64_t i = 0; i < count; ++i, p += 2) {
        const uint16_t v =
            type == WeightType::kF16 ? FloatToFp16(Uniform(s)) : FloatToBf16(Uniform(s));
        std::memcpy(p, &v, 2);
      }
      break;
    case WeightType::kQ8_0:
      for (int64_t b = 0; b < count / 32; ++b) {
        const uint16_t d = FloatToFp16(0.01f + 0.005f * Uniform(s));
        std::memcpy(p, &d, 2);
        p += 2;
        for (int j = 0; j < 32; ++j) *p++ = static_cast<uint8_t>(Xorshift(s) % 255);
      }
      break;
    default: {
      // Block types: uniform values through the reference quantizer, a row at a time.
      quant::QuantType q;
      linear_internal::ToQuantType(type, &q);
      std::vector<float> row(k);
      for (int64_t r = 0; r < n; ++r, p += linear_internal::RowBytes(type, k)) {
        for (float& v : row) v = Uniform(s);
        if (!quant::Quantize(q, row.data(), k / quant::BlockElements(q), p).ok()) std::abort();
      }
      break;
    }
  }
  return bytes;
}

// Best-of timing (the machine is shared): rounds of `round_calls` calls (one pass over the
// weight copies) for at least min_ms in total; returns the fastest round's ms per call.
template <typename F>
double TimeCalls(F&& call, int round_calls, int min_ms) {
  call(0);
  call(1);  // warm up (page faults, OpenMP pool)
  int i = 0, rounds = 0;
  double best = 1e30;
  const double start = Now();
  do {
    const double t0 = Now();
    for (int c = 0; c < round_calls; ++c) call(i++);
    best = std::min(best, (Now() - t0) / round_calls * 1e3);
    ++rounds;
  } while ((Now() - start) * 1e3 < min_ms || rounds < 3);
  return best;
}

// A plain oneDNN matmul of exactly m rows with weights reordered to its preferred layout.
class Baseline {
 public:
  Baseline(bool bf16, int64_t k, int64_t n, int m, const void* plain, int copies) {
    using dnnl::memory;
    auto& eng = linear_internal::DnnlEngine();
    const auto type = bf16 ? memory::data_type::bf16 : memory::data_type::f32;
    memory::desc src({m, k}, type, memory::format_tag::ab);
    memory::desc wei({k, n}, type, memory::format_tag::any);
    memory::desc dst({m, n}, memory::data_type::f32, memory::format_tag::ab);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, wei, dst), eng);
    prim_ = dnnl::matmul(pd);
    impl_ = pd.impl_info_str();
    memory plain_mem(memory::desc({k, n}, type, memory::format_tag::ba), eng,
                     const_cast<void*>(plain));
    for (int c = 0; c < copies; ++c) {
      if (absl::GetFlag(FLAGS_baseline_huge_pages)) {
        buffers_.emplace_back(pd.weights_desc().get_size(), /*huge_pages=*/true);
        weights_.emplace_back(pd.weights_desc(), eng, buffers_.back().data());
      } else {
        weights_.emplace_back(pd.weights_desc(), eng);
      }
      dnnl::reorder(plain_mem, weights_.back())
          .execute(linear_internal::DnnlStream(), plain_mem, weights_.back());
    }
    src_ = memory(pd.src_desc(), eng);
    dst_ = memory(pd.dst_desc(), eng);
    std::memset(src_.get_data_handle(), 0, pd.src_desc().get_size());
  }
  void Run(int copy) {
    prim_.execute(linear_internal::DnnlStream(),
                  {{DNNL_ARG_SRC, src_},
                   {DNNL_ARG_WEIGHTS, weights_[copy % weights_.size()]},
                   {DNNL_ARG_DST, dst_}});
    linear_internal::DnnlStream().wait();
  }
  const std::string& impl() const { return impl_; }

 private:
  dnnl::matmul prim_;
  std::vector<AlignedBuffer<uint8_t>> buffers_;
  std::vector<dnnl::memory> weights_;
  dnnl::memory src_, dst_;
  std::string impl_;
};

WeightType ParseType(const std::string& s) {
  for (WeightType t : {WeightType::kF32, WeightType::kF16, WeightType::kQ8_0, WeightType::kQ4_0,
                       WeightType::kQ4_1, WeightType::kQ5_0, WeightType::kQ5_1, WeightType::kQ4_K,
                       WeightType::kQ5_K, WeightType::kQ6_K}) {
    if (s == linear_internal::WeightTypeName(t)) return t;
  }
  return WeightType::kBF16;
}

// Bytes per weight the small-m path streams.
double StreamedBytesPerWeight(WeightType type, Precision precision, const std::string& kernel) {
  if (precision == Precision::kExact) return 4.0;
  if (kernel.find("int8-vnni") != std::string::npos) {
    return static_cast<double>(linear_internal::RowBytes(type, 256)) / 256.0;  // stored blocks
  }
  if (kernel.find("bf16") != std::string::npos) return 2.0;
  return 4.0;
}

int Main() {
  const Precision precision =
      absl::GetFlag(FLAGS_precision) == "exact" ? Precision::kExact : Precision::kFast;
  std::vector<int> ms;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_ms), ',')) {
    int m;
    if (absl::SimpleAtoi(s, &m)) ms.push_back(m);
  }
  const int max_m = *std::max_element(ms.begin(), ms.end());
  const std::vector<std::string> shapes = absl::StrSplit(absl::GetFlag(FLAGS_shapes), ',');
  const int min_ms = absl::GetFlag(FLAGS_min_ms);

  for (absl::string_view type_name : absl::StrSplit(absl::GetFlag(FLAGS_types), ',')) {
    const WeightType type = ParseType(std::string(type_name));
    std::printf("\n== %s weights, %s ==\n", linear_internal::WeightTypeName(type),
                precision == Precision::kExact ? "exact" : "fast");
    std::printf("%-8s %4s | %9s %8s %7s | %9s %8s %7s | %6s | %s\n", "shape", "m", "ms", "GFLOP/s",
                "GB/s", "dnnl ms", "GFLOP/s", "GB/s", "speedup", "kernel / baseline");
    std::vector<double> step_ms(ms.size(), 0.0), step_base_ms(ms.size(), 0.0);
    double step_bytes = 0;
    for (const Shape& shape : kShapes) {
      if (std::find(shapes.begin(), shapes.end(), shape.name) == shapes.end()) continue;
      const std::vector<uint8_t> bytes = MakeWeights(type, shape.n, shape.k, 1);
      const WeightView view{type, bytes.data(), shape.n, shape.k};
      std::vector<std::unique_ptr<Linear>> copies;
      auto first = Linear::Create({view}, precision, max_m);
      if (!first.ok()) {
        std::printf("create failed: %s\n", first.status().ToString().c_str());
        return 1;
      }
      const std::string kernel = (*first)->kernel_name();
      const double streamed = StreamedBytesPerWeight(type, precision, kernel) * shape.k * shape.n;
      step_bytes += streamed * shape.per_step;
      const int n_copies = std::clamp<int>(
          static_cast<int>(absl::GetFlag(FLAGS_working_set_mb) * 1e6 / streamed + 0.999), 1,
          kMaxCopies);
      copies.push_back(std::move(*first));
      for (int c = 1; c < n_copies; ++c)
        copies.push_back(*Linear::Create({view}, precision, max_m));

      // Baseline input: the same weights as oneDNN sees them in our fast path.
      const bool base_bf16 = type != WeightType::kF32 && kernel.find("f32") == std::string::npos;
      AlignedBuffer<uint16_t> plain16(base_bf16 ? shape.n * shape.k : 0);
      AlignedBuffer<float> plain32(base_bf16 ? 0 : shape.n * shape.k);
      if (base_bf16) {
        linear_internal::ConvertPartsToBf16({view}, plain16.data(), shape.k);
      } else {
        linear_internal::WidenPartsToF32({view}, plain32.data(), shape.k);
      }
      const void* plain = base_bf16 ? static_cast<const void*>(plain16.data()) : plain32.data();
      const int base_copies =
          std::clamp<int>(static_cast<int>(absl::GetFlag(FLAGS_working_set_mb) * 1e6 /
                                               ((base_bf16 ? 2.0 : 4.0) * shape.k * shape.n) +
                                           0.999),
                          1, kMaxCopies);

      AlignedBuffer<float> x(static_cast<size_t>(max_m) * shape.k),
          y(static_cast<size_t>(max_m) * shape.n);
      uint32_t s = 7;
      for (size_t i = 0; i < x.size(); ++i) x.data()[i] = Uniform(s);
      for (size_t mi = 0; mi < ms.size(); ++mi) {
        const int m = ms[mi];
        const double t =
            TimeCalls([&](int i) { copies[i % copies.size()]->Run(x.data(), m, y.data()); },
                      static_cast<int>(copies.size()), min_ms);
        const double flops = 2.0 * m * shape.k * shape.n;
        step_ms[mi] += t * shape.per_step;
        double tb = 0;
        std::string impl = "-";
        if (absl::GetFlag(FLAGS_baseline)) {
          Baseline base(base_bf16, shape.k, shape.n, m, plain, base_copies);
          tb = TimeCalls([&](int i) { base.Run(i); }, base_copies, min_ms);
          impl = base.impl();
          step_base_ms[mi] += tb * shape.per_step;
        }
        const double bb = (base_bf16 ? 2.0 : 4.0) * shape.k * shape.n;
        std::printf("%-8s %4d | %9.3f %8.1f %7.1f | %9.3f %8.1f %7.1f | %6.2fx | %s / %s\n",
                    shape.name, m, t, flops / t / 1e6, streamed / t / 1e6, tb,
                    tb > 0 ? flops / tb / 1e6 : 0.0, tb > 0 ? bb / tb / 1e6 : 0.0,
                    tb > 0 ? tb / t : 0.0, kernel.c_str(), impl.c_str());
        std::fflush(stdout);
      }
    }
    if (shapes.size() == 5) {
      std::printf(
          "TinyLlama-1.1B forward (22 layers + lm_head), weights streamed %.2f GB per step:\n",
          step_bytes / 1e9);
      for (size_t mi = 0; mi < ms.size(); ++mi) {
        std::printf("  m=%4d: %8.2f ms (%.1f GB/s)  oneDNN: %8.2f ms  speedup %.2fx\n", ms[mi],
                    step_ms[mi], step_bytes / step_ms[mi] / 1e6, step_base_ms[mi],
                    step_ms[mi] > 0 && step_base_ms[mi] > 0 ? step_base_ms[mi] / step_ms[mi] : 0.0);
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace quill::engine::kernels

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return quill::engine::kernels::Main();
}
