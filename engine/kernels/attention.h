#pragma once

#include <cstdint>

#include "absl/types/span.h"
#include "engine/kernels/kv_element.h"

namespace quill::engine::kernels {

// KvLayout (the paged arenas' layout) is in kv_element.h, beside what the arenas store.

// One sequence's slice of the step's batch.
struct AttentionSequence {
  const int32_t* block_table = nullptr;  // physical block ids covering [0, first_pos + num_q)
  int32_t q_begin = 0;    // first row of q/out belonging to this sequence
  int32_t num_q = 0;      // its new tokens this step (a prefill chunk, or 1 for decode)
  int32_t first_pos = 0;  // absolute position of its first new token
};

// How scores are formed and which keys a query sees.
struct AttentionParams {
  float scale = 1.0f;    // score = scale * q.k
  float softcap = 0.0f;  // > 0: score = softcap * tanh(score / softcap) (Gemma 2)
  int32_t window = 0;    // > 0: a query at position p sees only [p - window + 1, p] (sliding)
};

// Causal grouped-query attention over the paged cache. The K/V of the new tokens must
// already be in the cache. Query row (q_begin + j) at position p = first_pos + j attends
// to positions [0, p] (or the window's last positions); query head h reads KV head
// h / (n_heads / num_kv_heads).
// q, out: rows x n_heads x head_dim f32 (head_dim <= 256); the caches hold layout.element
// values. f32 and f16 are widened exactly to f32 as they are read, so an f16 cache gives
// the bits an f32 cache of the same (widened) values gives. With q8 (block_size % 16 == 0,
// head_dim % 4 == 0) each query head is quantized as a q8 row (QuantizeRowQ8) and a score
// is (the integer dot of the codes) * key scale * (query scale * scale); P.V weighs each
// value's codes by probability * value scale. A tiled online softmax: never
// materializes the T x T score matrix, allocates nothing, and each output depends only on
// its own query and the cache (fixed tile boundaries at absolute positions, whatever the
// window), so it is batch-invariant. Parallel over (sequence, head, query tile) on the
// OpenMP pool.
void PagedAttention(const float* q, const void* k_cache, const void* v_cache,
                    const KvLayout& layout, absl::Span<const AttentionSequence> sequences,
                    int n_heads, const AttentionParams& params, float* out);

// Plain scaled attention (no soft-cap, no window).
inline void PagedAttention(const float* q, const void* k_cache, const void* v_cache,
                           const KvLayout& layout, absl::Span<const AttentionSequence> sequences,
                           int n_heads, float scale, float* out) {
  PagedAttention(q, k_cache, v_cache, layout, sequences, n_heads, AttentionParams{scale}, out);
}

}  // namespace quill::engine::kernels
