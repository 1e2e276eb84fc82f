#include "engine/kernels/parallel_for.h"

#include <omp.h>

#include <atomic>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace quill::engine::kernels {
namespace {

// Every index runs exactly once, inline or on the team.
TEST(ParallelFor, RunsEveryIndexOnce) {
  for (bool parallel : {false, true}) {
    for (int64_t n : {0, 1, 7, 1000}) {
      std::vector<std::atomic<int>> calls(n);
      ParallelFor(n, parallel, [&](int64_t i) { calls[i].fetch_add(1); });
      for (int64_t i = 0; i < n; ++i) {
        EXPECT_EQ(calls[i].load(), 1) << "n=" << n << " i=" << i << " parallel=" << parallel;
      }
    }
  }
}

// Small loops stay on the calling thread outside any OpenMP region (omp_get_level counts
// inactive regions too, such as an `if (false)` one); big ones use the team.
TEST(ParallelFor, InlineWhenNotParallel) {
  std::atomic<int> in_region{0}, other_thread{0};
  ParallelFor(64, /*parallel=*/false, [&](int64_t) {
    if (omp_get_level() != 0) in_region.fetch_add(1);
    if (omp_get_thread_num() != 0) other_thread.fetch_add(1);
  });
  EXPECT_EQ(in_region.load(), 0);
  EXPECT_EQ(other_thread.load(), 0);
  if (omp_get_max_threads() < 2) GTEST_SKIP() << "one OpenMP thread";
  std::atomic<int> regions{0};
  ParallelFor(64, /*parallel=*/true, [&](int64_t) {
    if (omp_in_parallel()) regions.fetch_add(1);
  });
  EXPECT_EQ(regions.load(), 64);
}

// Chunks tile [0, n) in order, each a multiple of 16 long except the last.
TEST(ForChunks, TilesTheRangeInWholeSimdGroups) {
  for (bool parallel : {false, true}) {
    for (int64_t n : {0, 5, 4096, 4097, 3 * 4096 + 33}) {
      std::vector<std::atomic<int>> covered(n);
      std::atomic<int> bad_chunks{0};
      ForChunks(n, parallel, [&](int64_t begin, int64_t count) {
        if (begin % 16 != 0 || (begin + count < n && count % 16 != 0)) bad_chunks.fetch_add(1);
        for (int64_t i = begin; i < begin + count; ++i) covered[i].fetch_add(1);
      });
      EXPECT_EQ(bad_chunks.load(), 0) << "n=" << n;
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(covered[i].load(), 1) << "n=" << n << " i=" << i;
    }
  }
}

}  // namespace
}  // namespace quill::engine::kernels
