#pragma once

// Loops that use the OpenMP pool only when they are big enough to pay for it.
//
// `#pragma omp parallel for if (small)` still calls into libgomp, which sets up a team of
// one for the loop: ~1.2 us a call (a 2,048-float add: 1.9 us against 0.6 us inline; AMD
// EPYC Zen 5). A one-row decode step makes about a dozen such calls per layer (norms,
// residual adds, RoPE, the activation, quantizing x for the matmuls), so small loops run
// here on the calling thread without entering OpenMP at all.

#include <cstdint>

namespace quill::engine::kernels {

// body(i) for i in [0, n): split statically over the OpenMP team when `parallel`, else in
// order on the calling thread.
template <typename Body>
void ParallelFor(int64_t n, bool parallel, const Body& body) {
  if (!parallel) {
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) body(i);
}

// fn(begin, count) over [0, n) in chunks of kChunk elements (a multiple of 16, so SIMD
// groups never straddle two threads), on the team when `parallel`.
template <typename Fn>
void ForChunks(int64_t n, bool parallel, const Fn& fn) {
  constexpr int64_t kChunk = 4096;
  ParallelFor((n + kChunk - 1) / kChunk, parallel, [&](int64_t c) {
    const int64_t begin = c * kChunk;
    fn(begin, n - begin < kChunk ? n - begin : kChunk);
  });
}

}  // namespace quill::engine::kernels
