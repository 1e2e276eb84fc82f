#pragma once

#include <cstdint>

#include "absl/types/span.h"
#include "engine/kernels/kv_element.h"

namespace quill::engine::kernels {

// Layout of one layer's paged K and V arenas, both made of num_blocks blocks of block_size
// token slots. A sequence's block table maps its logical block i (positions
// [i*block_size, (i+1)*block_size)) to a physical block id; slot = id * block_size + i.
// A block holds its slots' keys (or values) of every KV head, one head's part after another,
// so that attention with one KV head reads each block's part as one run (2 KB for f16, 16
// slots, head_dim 64).
//  - V: [num_blocks][num_kv_heads][block_size][head_dim]. Value rows of all heads side by
//    side ([num_blocks][block_size][num_kv_heads * head_dim]) made a head's rows 128-byte
//    pieces 512 bytes apart, which fall into a quarter of the L1 cache's sets. This layout
//    took 0.79-0.82x the time of that one in quill-attention-bench decode 64 x 512 (f16;
//    f32 0.83-0.85x) and 0.93x in 16 x 512; one sequence at 4,096 keys over 22 layers
//    1.01-1.10x (2 runs), over 128 layers 1.00-1.03x; the other cases 0.98-1.03x.
//  - K: [num_blocks][num_kv_heads][head_dim][block_size], each head's part transposed, so
//    that one K column of a block's keys is contiguous: a score over 16 keys is then one
//    chain of FMAs over head_dim with the keys in lanes, and no cross-lane reduction.
struct KvLayout {
  int block_size = 16;
  int num_kv_heads = 0;
  int head_dim = 0;
  KvElement element = KvElement::kF32;

  int64_t row() const { return int64_t{num_kv_heads} * head_dim; }
  // Elements from one KV head's part of a block to the next's, in K and in V.
  int64_t head_stride() const { return int64_t{block_size} * head_dim; }
  // Element index of dimension d of KV head `kv`'s key in `slot`.
  int64_t KeyIndex(int64_t slot, int kv, int d) const {
    return slot / block_size * block_size * row() + kv * head_stride() + int64_t{d} * block_size +
           slot % block_size;
  }
  // Element index of dimension d of KV head `kv`'s value in `slot`.
  int64_t ValueIndex(int64_t slot, int kv, int d) const {
    return slot / block_size * block_size * row() + kv * head_stride() +
           slot % block_size * head_dim + d;
  }
};

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
// values, widened exactly to f32 as they are read, so an f16 cache gives the bits an f32
// cache of the same (widened) values gives. A tiled online softmax: never
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
