// Microbenchmark of PagedAttention at TinyLlama's shape (32 query heads, 4 KV heads,
// head_dim 64, 16-token blocks): decode batches at 512 tokens of context, and one prefill.
// Each case runs on an f32, an f16, a q8 and a bf16 cache (exact mode's KV element, fast
// mode's default and its two opt-ins), rounds of the four interleaved so that the host's
// drift hits all alike.
// Usage: quill-attention-bench [--iters=N] [--cases=...]. Prints microseconds per call and a
// hash of the output bits, equal across builds whose kernels compute the same bits.
#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "engine/base/cpu_features.h"
#include "engine/kernels/attention.h"

ABSL_FLAG(int, iters, 50, "timed calls per case");
ABSL_FLAG(bool, shuffle_blocks, true,
          "scatter each sequence's blocks over the pool (a long-running server's cache); false: "
          "consecutive blocks (a fresh cache's first sequence)");
ABSL_FLAG(int, block, 16, "KV block size in token slots (the engine's: 16)");
ABSL_FLAG(std::string, cases, "",
          "run only these cases, by comma-separated names as printed (e.g. \"decode 1 x 4096\"); "
          "empty: all");

namespace quill::engine::kernels {
namespace {

constexpr int kHeads = 32, kKvHeads = 4, kHeadDim = 64;

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
  void operator()(void* p) const { std::free(p); }
};
std::unique_ptr<void, FreeDeleter> HugeArray(int64_t bytes_wanted) {
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t bytes = (bytes_wanted + kHuge - 1) / kHuge * kHuge;
  void* p = std::aligned_alloc(kHuge, bytes);
  madvise(p, bytes, MADV_HUGEPAGE);
  return std::unique_ptr<void, FreeDeleter>(p);
}

double CpuMicros() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

struct Timing {
  double wall_us;  // median
  double cpu_us;   // mean process CPU time (all threads, including OpenMP spinning)
  uint64_t output_hash;  // of the last call's output bits: equal across builds that agree
};

constexpr KvElement kElements[] = {KvElement::kF32, KvElement::kF16, KvElement::kQ8,
                                   KvElement::kBf16};
constexpr int kNumElements = 4;

// One cache of each element type holding the same values (as each element stores them).
struct Caches {
  std::unique_ptr<void, FreeDeleter> k[kNumElements], v[kNumElements];
};

// Whether --cases selects the case `name`.
bool Selected(absl::string_view name, absl::string_view cases) {
  if (cases.empty()) return true;
  for (absl::string_view part : absl::StrSplit(cases, ',', absl::SkipEmpty())) {
    if (absl::StripAsciiWhitespace(part) == name) return true;
  }
  return false;
}

// FNV-1a over the bits of `values`.
uint64_t HashBits(const std::vector<float>& values) {
  uint64_t h = 14695981039346656037ull;
  for (float v : values) {
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    for (int b = 0; b < 32; b += 8) h = (h ^ ((bits >> b) & 0xff)) * 1099511628211ull;
  }
  return h;
}

std::vector<Timing> TimeCase(const Case& c, int iters) {
  const int kBlock = absl::GetFlag(FLAGS_block);
  const int blocks_per_seq = (c.context + kBlock - 1) / kBlock;
  const int blocks = c.sequences * blocks_per_seq;
  const int64_t slots = int64_t{blocks} * kBlock;
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<float> dist(-1, 1);
  Caches caches;
  int64_t layer_bytes[kNumElements];
  std::vector<float> row(kHeadDim);
  for (int e = 0; e < kNumElements; ++e) {
    const KvLayout layout{kBlock, kKvHeads, kHeadDim, kElements[e]};
    layer_bytes[e] = slots * layout.row() * KvElementBytes(kElements[e]);
    caches.k[e] = HugeArray(layer_bytes[e] * c.layers);
    caches.v[e] = HugeArray(layer_bytes[e] * c.layers);
  }
  for (int layer = 0; layer < c.layers; ++layer) {
    for (int64_t slot = 0; slot < slots; ++slot) {
      for (int kv = 0; kv < kKvHeads; ++kv) {
        for (bool key : {true, false}) {
          for (float& x : row) x = dist(rng);
          for (int e = 0; e < kNumElements; ++e) {
            const KvLayout layout{kBlock, kKvHeads, kHeadDim, kElements[e]};
            char* arena = static_cast<char*>(key ? caches.k[e].get() : caches.v[e].get()) +
                          layer_bytes[e] * layer;
            (key ? StoreKey : StoreValue)(row.data(), layout, arena, slot, kv);
          }
        }
      }
    }
  }
  std::vector<int32_t> ids(blocks);
  std::iota(ids.begin(), ids.end(), 0);
  if (absl::GetFlag(FLAGS_shuffle_blocks)) std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<AttentionSequence> seqs;
  for (int s = 0; s < c.sequences; ++s) {
    seqs.push_back({ids.data() + s * blocks_per_seq, s * c.new_tokens, c.new_tokens,
                    c.context - c.new_tokens});
  }
  const int rows = c.sequences * c.new_tokens;
  std::vector<float> q(int64_t{rows} * kHeads * kHeadDim), out(q.size());
  for (float& x : q) x = dist(rng);
  const float scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  int layer[kNumElements] = {};
  auto call = [&](int e) {
    const KvLayout layout{kBlock, kKvHeads, kHeadDim, kElements[e]};
    const int64_t offset = layer_bytes[e] * layer[e];
    layer[e] = (layer[e] + 1) % c.layers;
    PagedAttention(q.data(), static_cast<const char*>(caches.k[e].get()) + offset,
                   static_cast<const char*>(caches.v[e].get()) + offset, layout, seqs, kHeads,
                   scale, out.data());
  };
  for (int e = 0; e < kNumElements; ++e) call(e);  // warm up caches and the thread pool
  std::vector<double> times[kNumElements];
  double cpu[kNumElements] = {};
  for (int i = 0; i < iters; ++i) {
    for (int e = 0; e < kNumElements; ++e) {
      const double cpu0 = CpuMicros();
      const auto t0 = std::chrono::steady_clock::now();
      call(e);
      times[e].push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      cpu[e] += CpuMicros() - cpu0;
    }
  }
  std::vector<Timing> result;
  for (int e = 0; e < kNumElements; ++e) {
    std::sort(times[e].begin(), times[e].end());
    call(e);
    result.push_back({times[e][times[e].size() / 2], cpu[e] / iters, HashBits(out)});
  }
  return result;
}

}  // namespace
}  // namespace quill::engine::kernels

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  using quill::engine::kernels::Case;
  const int iters = absl::GetFlag(FLAGS_iters);
  std::printf("PagedAttention, 32 q heads / 4 kv heads / head_dim 64, %d threads, %s\n",
              omp_get_max_threads(), quill::engine::HasAvx512Bf16() ? "AVX-512" : "portable");
  for (const Case& c : {Case{"decode 1 x 512", 1, 512, 1}, Case{"decode 16 x 512", 16, 512, 1},
                        Case{"decode 64 x 512", 64, 512, 1}, Case{"decode 1 x 4096", 1, 4096, 1},
                        Case{"decode 1 x 4096 (22 layers)", 1, 4096, 1, 22},
                        Case{"prefill 1 x 512", 1, 512, 512}}) {
    if (!quill::engine::kernels::Selected(c.name, absl::GetFlag(FLAGS_cases))) continue;
    const std::vector<quill::engine::kernels::Timing> timings =
        quill::engine::kernels::TimeCase(c, c.new_tokens > 1 ? std::max(3, iters / 10) : iters);
    // Multiply-adds: q.k and p.v over the attended positions.
    const double pairs = c.new_tokens == 1
                             ? double(c.sequences) * c.context
                             : double(c.sequences) * c.new_tokens * (c.new_tokens + 1) / 2;
    for (int e = 0; e < quill::engine::kernels::kNumElements; ++e) {
      const quill::engine::kernels::Timing& t = timings[e];
      const double gflops = pairs * 32 * 64 * 4 / (t.wall_us * 1e3);
      std::printf("  %-27s kv %s %10.1f us/call (cpu %10.1f us)  %6.1f GFLOP/s  output %016llx\n",
                  c.name,
                  quill::engine::kernels::KvElementName(quill::engine::kernels::kElements[e]),
                  t.wall_us, t.cpu_us, gflops, static_cast<unsigned long long>(t.output_hash));
    }
    if (timings[0].wall_us > 0 && timings[1].wall_us > 0) {
      std::printf("  %-27s f16/f32 time %.2fx, q8/f16 %.2fx, bf16/f16 %.2fx\n", c.name,
                  timings[1].wall_us / timings[0].wall_us, timings[2].wall_us / timings[1].wall_us,
                  timings[3].wall_us / timings[1].wall_us);
    }
  }
  return 0;
}
