// Microbenchmark of the element-wise kernels at TinyLlama's shapes (d_model 2048, 32 heads
// of 64, 4 KV heads, ffn 5632) for decode-sized and prefill-sized row counts.
// Usage: quill-ops-bench [--iters=N]. Prints microseconds per call (median) and GB/s of
// the bytes each call must read and write.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "engine/base/cpu_features.h"
#include "engine/kernels/ops.h"

ABSL_FLAG(int, iters, 200, "timed calls per case");

namespace {

double MedianMicros(int iters, const std::function<void()>& call) {
  call();
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    call();
    times.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

std::vector<float> Random(int64_t n) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-2, 2);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  namespace k = quill::engine::kernels;
  const int iters = absl::GetFlag(FLAGS_iters);
  constexpr int kDim = 2048, kHeads = 32, kKvHeads = 4, kHeadDim = 64, kFfn = 5632;
  std::printf("ops at TinyLlama shapes, %d threads, %s\n", omp_get_max_threads(),
              quill::engine::HasAvx512Bf16() ? "AVX-512" : "portable");
  for (int rows : {1, 64, 512}) {
    const std::vector<float> w = Random(kDim);
    std::vector<float> x = Random(int64_t{rows} * kDim), y = Random(int64_t{rows} * kDim),
                       out(x.size());
    std::vector<float> q = Random(int64_t{rows} * kHeads * kHeadDim);
    std::vector<float> gate_up = Random(int64_t{rows} * 2 * kFfn), ffn_out(int64_t{rows} * kFfn);
    std::vector<int32_t> pos(rows);
    for (int r = 0; r < rows; ++r) pos[r] = 100 + r;
    auto report = [&](const char* name, double bytes, const std::function<void()>& call) {
      const double us = MedianMicros(iters, call);
      std::printf("  rows %4d  %-12s %9.1f us  %6.1f GB/s\n", rows, name, us, bytes / us / 1e3);
    };
    const double row_bytes = 4.0 * rows * kDim;
    report("RmsNorm", 2 * row_bytes, [&] {
      k::RmsNorm(x.data(), w.data(), rows, kDim, 1e-5f, out.data());
    });
    report("AddInPlace", 3 * row_bytes, [&] { k::AddInPlace(x.data(), y.data(), int64_t{rows} * kDim); });
    report("Rope q", 2.0 * q.size() * 4, [&] {
      k::Rope(q.data(), pos.data(), rows, kHeads, kHeadDim, kHeadDim, 10000.0f);
    });
    report("Rope k", 2.0 * rows * kKvHeads * kHeadDim * 4, [&] {
      k::Rope(q.data(), pos.data(), rows, kKvHeads, kHeadDim, kHeadDim, 10000.0f);
    });
    report("SwiGlu", 3.0 * rows * kFfn * 4, [&] {
      k::SwiGlu(gate_up.data(), rows, kFfn, ffn_out.data());
    });
    // The kernels the other families add (Gemma 2, GPT-2, Qwen2) at the same shapes.
    report("LayerNorm", 2 * row_bytes,
           [&] { k::LayerNorm(x.data(), w.data(), y.data(), rows, kDim, 1e-5f, out.data()); });
    report("Rope q neox", 2.0 * q.size() * 4, [&] {
      k::Rope(q.data(), pos.data(), rows, kHeads, kHeadDim,
              k::RopeSpec{kHeadDim, 10000.0f, k::RopeLayout::kNeox});
    });
    report("GeGlu", 3.0 * rows * kFfn * 4,
           [&] { k::GeGlu(gate_up.data(), rows, kFfn, ffn_out.data()); });
    report("Gelu", 2.0 * rows * kFfn * 4,
           [&] { k::Gelu(gate_up.data(), int64_t{rows} * kFfn, ffn_out.data()); });
    report("AddBias", 2 * row_bytes, [&] { k::AddBias(x.data(), w.data(), rows, kDim); });
    report("SoftCap", 2.0 * rows * kFfn * 4,
           [&] { k::SoftCap(ffn_out.data(), int64_t{rows} * kFfn, 30.0f); });
  }
  return 0;
}
