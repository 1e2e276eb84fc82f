// quill-linear-qblock-bench: QBlockGemm's decode kernel (RunDecode) against its tiled
// kernel (RunTiled) on TinyLlama-1.1B shapes, in the same process, rounds interleaved
// (decode, tiled, decode, ...) so that load from other processes hits both alike. Prints
// each kernel's best and median round and the ratio of the medians.
//
//   OMP_NUM_THREADS=2 quill-linear-qblock-bench [--types=q4_k,q6_k,q4_0] [--ms=1,2,4,8]
//                                               [--rounds=15] [--working_set_mb=1024]
//                                               [--cpu_time]
//
// Each weight is instantiated in enough copies (cycled call after call) that the set is
// several times the last-level cache, so the figures are DRAM-bound like a real decode
// step. 160 MB was not enough on the Zen 5 host of stop 38: Q6_K gate_up at m=1 took
// 0.25-0.27 ms a call with 160 MB and 0.31-0.34 ms with 1,000 MB, the latter what a decode
// step spends on it (quill-bench --profile: 0.34-0.35 ms). On a shared
// machine, two --cpu_time single-thread processes started together approximate a 2-thread
// decode step (both cores sharing the DRAM) without counting time lost to other work.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "engine/kernels/linear_internal.h"
#include "engine/kernels/linear_q8.h"
#include "engine/kernels/linear_qblock.h"
#include "engine/quant/quantize.h"

ABSL_FLAG(std::string, types, "q4_k,q6_k,q4_0", "weight types to run");
ABSL_FLAG(std::string, ms, "1,2,4,8", "batch sizes (rows of x)");
ABSL_FLAG(int, rounds, 15, "rounds per kernel (one pass over the copies each)");
ABSL_FLAG(int, working_set_mb, 1024, "cycle weight copies until they total this much");
ABSL_FLAG(std::string, shapes, "",
          "extra shapes kxn, comma-separated (e.g. 2048x256 with --working_set_mb=1: weights "
          "in L2, the kernels' compute alone); given, only these run");
ABSL_FLAG(int, prefill_m, 0,
          "if > 0: prefill mode, the tiled kernel at this m against Q8Gemv on Q8_0 weights of "
          "the same shape (rounds interleaved); --ms is ignored");
ABSL_FLAG(bool, cpu_time, false,
          "time with process CPU time instead of wall time (a shared machine; use with "
          "OMP_NUM_THREADS=1, as spinning threads count too)");

namespace quill::engine::kernels {
namespace {

using linear_internal::QBlockGemm;

struct Shape {
  const char* name;
  int64_t k, n;
};
constexpr Shape kShapes[] = {{"qkv", 2048, 2560}, {"gate_up", 2048, 11264}, {"down", 5632, 2048}};

double Now() {
  if (absl::GetFlag(FLAGS_cpu_time)) {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::vector<uint8_t> MakeWeights(WeightType type, int64_t n, int64_t k, uint32_t seed) {
  quant::QuantType q;
  linear_internal::ToQuantType(type, &q);
  const int64_t row_bytes = linear_internal::RowBytes(type, k);
  std::vector<uint8_t> bytes(n * row_bytes);
  std::vector<float> row(k);
  uint32_t s = seed * 2654435761u + 1;
  for (int64_t r = 0; r < n; ++r) {
    for (float& v : row) {
      s ^= s << 13;
      s ^= s >> 17;
      s ^= s << 5;
      v = (s >> 8) * (2.0f / 16777216.0f) - 1.0f;
    }
    if (!quant::Quantize(q, row.data(), k / quant::BlockElements(q), bytes.data() + r * row_bytes)
             .ok())
      std::abort();
  }
  return bytes;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void RunShape(WeightType type, const Shape& shape, const std::vector<int>& ms) {
  const std::vector<uint8_t> bytes = MakeWeights(type, shape.n, shape.k, 7);
  const WeightView view{type, bytes.data(), shape.n, shape.k};
  const int copies = std::max<int64_t>(2, int64_t{absl::GetFlag(FLAGS_working_set_mb)} * (1 << 20) /
                                              static_cast<int64_t>(bytes.size()));
  std::vector<std::unique_ptr<QBlockGemm>> gemms;
  for (int c = 0; c < copies; ++c)
    gemms.push_back(std::make_unique<QBlockGemm>(absl::MakeConstSpan(&view, 1),
                                                 linear_internal::kQBlockDecodeMaxRows));
  std::vector<float> x(linear_internal::kQBlockDecodeMaxRows * shape.k),
      y(linear_internal::kQBlockDecodeMaxRows * shape.n);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37) % 101) / 50.0f - 1.0f;
  for (int m : ms) {
    std::vector<double> t[2];
    for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
      for (int kernel = 0; kernel < 2; ++kernel) {
        const double t0 = Now();
        for (auto& g : gemms) {
          if (kernel == 0) {
            g->RunDecode(x.data(), m, y.data(), shape.n);
          } else {
            g->RunTiled(x.data(), m, y.data(), shape.n);
          }
        }
        t[kernel].push_back((Now() - t0) / copies * 1e3);
      }
    }
    const double gb = static_cast<double>(bytes.size()) / 1e9;
    const double med[2] = {Median(t[0]), Median(t[1])};
    std::printf(
        "%-5s %-8s m=%d | decode best %.4f med %.4f ms (%.1f GB/s) | tiled best %.4f med "
        "%.4f ms (%.1f GB/s) | tiled/decode %.2fx\n",
        linear_internal::WeightTypeName(type), shape.name, m,
        *std::min_element(t[0].begin(), t[0].end()), med[0], gb / med[0] * 1e3,
        *std::min_element(t[1].begin(), t[1].end()), med[1], gb / med[1] * 1e3, med[1] / med[0]);
    std::fflush(stdout);
  }
}

// Prefill: RunTiled at m rows against Q8Gemv (the Q8_0 kernel) of the same shape. The
// weights of one call stay in the caches, as in a prompt step.
void RunPrefillShape(WeightType type, const Shape& shape, int m) {
  const std::vector<uint8_t> bytes = MakeWeights(type, shape.n, shape.k, 7);
  const std::vector<uint8_t> bytes8 = MakeWeights(WeightType::kQ8_0, shape.n, shape.k, 7);
  const WeightView view{type, bytes.data(), shape.n, shape.k};
  const WeightView view8{WeightType::kQ8_0, bytes8.data(), shape.n, shape.k};
  QBlockGemm gemm(absl::MakeConstSpan(&view, 1), m);
  LinearScratch scratch8;
  if (!linear_internal::Q8Gemv::ReserveScratch(shape.k, m, scratch8).ok()) std::abort();
  linear_internal::Q8Gemv q8(absl::MakeConstSpan(&view8, 1), m, &scratch8);
  std::vector<float> x(static_cast<size_t>(m) * shape.k), y(static_cast<size_t>(m) * shape.n);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37) % 101) / 50.0f - 1.0f;
  std::vector<double> t[2];
  for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
    for (int kernel = 0; kernel < 2; ++kernel) {
      const double t0 = Now();
      if (kernel == 0) {
        gemm.RunTiled(x.data(), m, y.data(), shape.n);
      } else {
        q8.Run(x.data(), m, y.data(), shape.n);
      }
      t[kernel].push_back((Now() - t0) * 1e3);
    }
  }
  const double gflop = 2.0 * m * shape.k * shape.n / 1e9;
  const double med[2] = {Median(t[0]), Median(t[1])};
  std::printf(
      "%-5s %5lldx%-5lld m=%d | tiled best %.4f med %.4f ms (%.0f GFLOP/s) | q8_0 best %.4f med "
      "%.4f ms (%.0f GFLOP/s) | q8_0/tiled %.2fx\n",
      linear_internal::WeightTypeName(type), static_cast<long long>(shape.k),
      static_cast<long long>(shape.n), m, *std::min_element(t[0].begin(), t[0].end()), med[0],
      gflop / med[0] * 1e3, *std::min_element(t[1].begin(), t[1].end()), med[1],
      gflop / med[1] * 1e3, med[1] / med[0]);
  std::fflush(stdout);
}

WeightType ParseType(const std::string& s) {
  for (WeightType t : {WeightType::kQ4_0, WeightType::kQ4_1, WeightType::kQ5_0, WeightType::kQ5_1,
                       WeightType::kQ4_K, WeightType::kQ5_K, WeightType::kQ6_K}) {
    if (s == linear_internal::WeightTypeName(t)) return t;
  }
  std::fprintf(stderr, "unknown type %s\n", s.c_str());
  std::exit(2);
}

}  // namespace
}  // namespace quill::engine::kernels

int main(int argc, char** argv) {
  using namespace quill::engine::kernels;
  absl::ParseCommandLine(argc, argv);
  if (!linear_internal::QBlockKernelAvailable()) {
    std::printf("no AVX512-VNNI: nothing to compare\n");
    return 0;
  }
  std::vector<int> ms;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_ms), ',')) {
    int m;
    if (absl::SimpleAtoi(s, &m) && m >= 1 && m <= linear_internal::kQBlockDecodeMaxRows)
      ms.push_back(m);
  }
  for (absl::string_view name : absl::StrSplit(absl::GetFlag(FLAGS_types), ',')) {
    const WeightType type = ParseType(std::string(name));
    const int prefill_m = absl::GetFlag(FLAGS_prefill_m);
    const auto run = [&](const Shape& shape) {
      if (prefill_m > 0) {
        RunPrefillShape(type, shape, prefill_m);
      } else {
        RunShape(type, shape, ms);
      }
    };
    if (absl::GetFlag(FLAGS_shapes).empty()) {
      for (const Shape& shape : kShapes) run(shape);
      continue;
    }
    for (absl::string_view kn : absl::StrSplit(absl::GetFlag(FLAGS_shapes), ',')) {
      const std::vector<std::string> parts = absl::StrSplit(kn, 'x');
      int64_t k, n;
      if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &k) || !absl::SimpleAtoi(parts[1], &n) ||
          k % 256 != 0 || n < 1) {
        std::fprintf(stderr, "bad shape %s (k x n, k a multiple of 256)\n",
                     std::string(kn).c_str());
        return 2;
      }
      run(Shape{"custom", k, n});
    }
  }
  return 0;
}
