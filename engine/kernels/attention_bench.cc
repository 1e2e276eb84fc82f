// Microbenchmark of PagedAttention at TinyLlama's shape (32 query heads, 4 KV heads,
// head_dim 64, 16-token blocks): decode batches at 512 tokens of context, and one prefill.
// Usage: quill-attention-bench [--iters=N]. Prints microseconds per call.
#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "engine/base/cpu_features.h"
#include "engine/kernels/attention.h"

ABSL_FLAG(int, iters, 50, "timed calls per case");

namespace quill::engine::kernels {
namespace {

constexpr int kHeads = 32, kKvHeads = 4, kHeadDim = 64, kBlock = 16;

struct Case {
  const char* name;
  int sequences;
  int context;  // positions per sequence, including the new ones
  int new_tokens;
  // Separate caches (one per model layer) that the calls go through in turn, so that the
  // K/V come from memory as in a real decode step rather than from the last level cache.
  int layers = 1;
};

// 2 MiB-aligned and, where the kernel allows, backed by huge pages (as KvCache does).
struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};
std::unique_ptr<float[], FreeDeleter> HugeArray(int64_t n) {
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t bytes = (n * sizeof(float) + kHuge - 1) / kHuge * kHuge;
  float* p = static_cast<float*>(std::aligned_alloc(kHuge, bytes));
  madvise(p, bytes, MADV_HUGEPAGE);
  return std::unique_ptr<float[], FreeDeleter>(p);
}

double CpuMicros() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

struct Timing {
  double wall_us;  // median
  double cpu_us;   // mean process CPU time (all threads, including OpenMP spinning)
};

Timing TimeCase(const Case& c, int iters) {
  const int blocks_per_seq = (c.context + kBlock - 1) / kBlock;
  const int blocks = c.sequences * blocks_per_seq;
  const int64_t layer_floats = int64_t{blocks} * kBlock * kKvHeads * kHeadDim;
  const int64_t cache_floats = layer_floats * c.layers;
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<float> dist(-1, 1);
  auto k = HugeArray(cache_floats);
  auto v = HugeArray(cache_floats);
  for (int64_t i = 0; i < cache_floats; ++i) k[i] = dist(rng);
  for (int64_t i = 0; i < cache_floats; ++i) v[i] = dist(rng);
  std::vector<int32_t> ids(blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<AttentionSequence> seqs;
  for (int s = 0; s < c.sequences; ++s) {
    seqs.push_back({ids.data() + s * blocks_per_seq, s * c.new_tokens, c.new_tokens,
                    c.context - c.new_tokens});
  }
  const int rows = c.sequences * c.new_tokens;
  std::vector<float> q(int64_t{rows} * kHeads * kHeadDim), out(q.size());
  for (float& x : q) x = dist(rng);
  const KvLayout layout{kBlock, kKvHeads, kHeadDim};
  const float scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  int layer = 0;
  auto call = [&] {
    const int64_t offset = layer_floats * layer;
    layer = (layer + 1) % c.layers;
    PagedAttention(q.data(), k.get() + offset, v.get() + offset, layout, seqs, kHeads, scale,
                   out.data());
  };
  call();  // warm up caches and the thread pool
  std::vector<double> times;
  const double cpu0 = CpuMicros();
  for (int i = 0; i < iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    call();
    times.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  const double cpu = (CpuMicros() - cpu0) / iters;
  std::sort(times.begin(), times.end());
  return {times[times.size() / 2], cpu};
}

}  // namespace
}  // namespace quill::engine::kernels

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  using quill::engine::kernels::Case;
  const int iters = absl::GetFlag(FLAGS_iters);
  std::printf("PagedAttention, 32 q heads / 4 kv heads / head_dim 64, %d threads, %s\n",
              omp_get_max_threads(), quill::engine::HasAvx512Bf16() ? "AVX-512" : "portable");
  for (const Case& c :
       {Case{"decode 1 x 512", 1, 512, 1}, Case{"decode 16 x 512", 16, 512, 1},
        Case{"decode 64 x 512", 64, 512, 1}, Case{"decode 1 x 4096", 1, 4096, 1},
        Case{"decode 1 x 4096, 22 layers", 1, 4096, 1, 22}, Case{"prefill 1 x 512", 1, 512, 512}}) {
    const quill::engine::kernels::Timing t =
        quill::engine::kernels::TimeCase(c, c.new_tokens > 1 ? std::max(3, iters / 10) : iters);
    // Multiply-adds: q.k and p.v over the attended positions.
    const double pairs = c.new_tokens == 1
                             ? double(c.sequences) * c.context
                             : double(c.sequences) * c.new_tokens * (c.new_tokens + 1) / 2;
    const double gflops = pairs * 32 * 64 * 4 / (t.wall_us * 1e3);
    std::printf("  %-27s %10.1f us/call (cpu %10.1f us)  %6.1f GFLOP/s\n", c.name, t.wall_us,
                t.cpu_us, gflops);
  }
  return 0;
}
