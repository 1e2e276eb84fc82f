#include "engine/kernels/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "engine/base/check.h"
#include "engine/kernels/simd_math.h"

namespace quill::engine::kernels {
namespace {

using internal::Exp512;
using internal::ReduceAdd512;
using internal::TailMask;
using internal::TransposeReduce16;
using internal::UseAvx512;

// Keys are processed in tiles of kTile positions starting at multiples of kTile, whatever
// the query's chunk or batch: the online-softmax rescaling points, and so the rounding,
// depend only on the query's own position.
constexpr int kTile = 64;
constexpr int kMaxHeadDim = 256;
// Query heads of one KV group handled by one work item (they share the K/V tile loads).
constexpr int kMaxHeadsPerItem = 8;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// One work item: one query row, one KV head, a run of the query heads that read it.
struct Item {
  const float* q;       // first query head of the run
  float* out;           // its output
  int num_heads;        // heads in the run, <= kMaxHeadsPerItem
  int32_t num_keys;     // the query attends to positions [0, num_keys)
  const int32_t* block_table;
  const float* k_cache;  // offset to the KV head
  const float* v_cache;
  int block_size;
  int64_t kv_row;  // floats between consecutive slots (num_kv_heads * head_dim)
  int head_dim;
  float scale;
};

// Fills row pointers for the tile's valid keys [t0, t0 + count).
void TileRows(const Item& it, int t0, int count, const float** k_rows, const float** v_rows) {
  for (int i = 0; i < count; ++i) {
    const int pos = t0 + i;
    const int64_t slot =
        static_cast<int64_t>(it.block_table[pos / it.block_size]) * it.block_size +
        pos % it.block_size;
    k_rows[i] = it.k_cache + slot * it.kv_row;
    v_rows[i] = it.v_cache + slot * it.kv_row;
  }
}

// ---- AVX-512 ---------------------------------------------------------------------------

// kChunks = ceil(head_dim / 16); the last chunk is masked when head_dim % 16 != 0.
template <int kChunks>
QUILL_AVX512_TARGET void AttendAvx512(const Item& it) {
  alignas(64) float scores[kTile];
  alignas(64) float acc_out[kMaxHeadsPerItem][kChunks * 16];
  float running_max[kMaxHeadsPerItem];
  float running_sum[kMaxHeadsPerItem];
  const float* k_rows[kTile];
  const float* v_rows[kTile];
  const __mmask16 last_mask = TailMask(it.head_dim - (kChunks - 1) * 16);
  auto chunk_mask = [&](int c) { return c == kChunks - 1 ? last_mask : __mmask16(0xffff); };

  for (int h = 0; h < it.num_heads; ++h) {
    running_max[h] = kNegInf;
    running_sum[h] = 0.0f;
    for (int c = 0; c < kChunks; ++c) _mm512_store_ps(acc_out[h] + 16 * c, _mm512_setzero_ps());
  }
  const __m512 scale = _mm512_set1_ps(it.scale);

  for (int t0 = 0; t0 < it.num_keys; t0 += kTile) {
    const int count = std::min(kTile, it.num_keys - t0);
    const int padded = (count + 15) / 16 * 16;
    TileRows(it, t0, count, k_rows, v_rows);
    // Lanes past the last key compute on a valid row and are masked out below.
    for (int i = count; i < padded; ++i) k_rows[i] = k_rows[0];

    for (int h = 0; h < it.num_heads; ++h) {
      const float* q = it.q + static_cast<int64_t>(h) * it.head_dim;
      // Scores for 16 keys at a time: one accumulator per key, then one transpose-reduce.
      __m512 tile_max = _mm512_set1_ps(kNegInf);
      for (int g = 0; g < padded; g += 16) {
        __m512 dot[16];
        for (int i = 0; i < 16; ++i) dot[i] = _mm512_setzero_ps();
        for (int c = 0; c < kChunks; ++c) {
          const __m512 qc = _mm512_maskz_loadu_ps(chunk_mask(c), q + 16 * c);
          for (int i = 0; i < 16; ++i) {
            dot[i] = _mm512_fmadd_ps(
                qc, _mm512_maskz_loadu_ps(chunk_mask(c), k_rows[g + i] + 16 * c), dot[i]);
          }
        }
        const __mmask16 valid = TailMask(count - g);
        const __m512 s = _mm512_mask_mov_ps(_mm512_set1_ps(kNegInf), valid,
                                            _mm512_mul_ps(TransposeReduce16(dot), scale));
        _mm512_store_ps(scores + g, s);
        tile_max = _mm512_max_ps(tile_max, s);
      }

      // Online softmax: rescale what came before to the new running max.
      const float new_max = std::max(running_max[h], _mm512_reduce_max_ps(tile_max));
      const float alpha = std::exp(running_max[h] - new_max);  // 0 on the first tile
      running_max[h] = new_max;
      const __m512 vmax = _mm512_set1_ps(new_max);
      __m512 sum = _mm512_setzero_ps();
      for (int g = 0; g < padded; g += 16) {
        const __m512 p = _mm512_maskz_mov_ps(
            TailMask(count - g), Exp512(_mm512_sub_ps(_mm512_load_ps(scores + g), vmax)));
        _mm512_store_ps(scores + g, p);
        sum = _mm512_add_ps(sum, p);
      }
      running_sum[h] = std::fma(running_sum[h], alpha, ReduceAdd512(sum));

      __m512 o[kChunks];
      const __m512 valpha = _mm512_set1_ps(alpha);
      for (int c = 0; c < kChunks; ++c) {
        o[c] = _mm512_mul_ps(_mm512_load_ps(acc_out[h] + 16 * c), valpha);
      }
      for (int i = 0; i < count; ++i) {
        const __m512 p = _mm512_set1_ps(scores[i]);
        for (int c = 0; c < kChunks; ++c) {
          o[c] = _mm512_fmadd_ps(p, _mm512_maskz_loadu_ps(chunk_mask(c), v_rows[i] + 16 * c), o[c]);
        }
      }
      for (int c = 0; c < kChunks; ++c) _mm512_store_ps(acc_out[h] + 16 * c, o[c]);
    }
  }

  for (int h = 0; h < it.num_heads; ++h) {
    const __m512 denom = _mm512_set1_ps(running_sum[h]);
    float* out = it.out + static_cast<int64_t>(h) * it.head_dim;
    for (int c = 0; c < kChunks; ++c) {
      _mm512_mask_storeu_ps(out + 16 * c, chunk_mask(c),
                            _mm512_div_ps(_mm512_load_ps(acc_out[h] + 16 * c), denom));
    }
  }
}

using AttendFn = void (*)(const Item&);

template <int... kChunks>
AttendFn PickAvx512(int chunks, std::integer_sequence<int, kChunks...>) {
  AttendFn fn = nullptr;
  ((fn = (chunks == kChunks + 1) ? &AttendAvx512<kChunks + 1> : fn), ...);
  return fn;
}

// ---- Portable --------------------------------------------------------------------------

// The same tiles and online softmax in scalar code; each dot product and output sum runs in
// a fixed order, so it too is batch-invariant.
void AttendPortable(const Item& it) {
  float scores[kTile];
  const float* k_rows[kTile];
  const float* v_rows[kTile];
  float acc_out[kMaxHeadDim];
  const int hd = it.head_dim;
  for (int h = 0; h < it.num_heads; ++h) {
    const float* q = it.q + static_cast<int64_t>(h) * hd;
    float running_max = kNegInf;
    float running_sum = 0.0f;
    std::fill(acc_out, acc_out + hd, 0.0f);
    for (int t0 = 0; t0 < it.num_keys; t0 += kTile) {
      const int count = std::min(kTile, it.num_keys - t0);
      TileRows(it, t0, count, k_rows, v_rows);
      float tile_max = kNegInf;
      for (int i = 0; i < count; ++i) {
        float dot = 0.0f;
        for (int d = 0; d < hd; ++d) dot = std::fma(q[d], k_rows[i][d], dot);
        scores[i] = dot * it.scale;
        tile_max = std::max(tile_max, scores[i]);
      }
      const float new_max = std::max(running_max, tile_max);
      const float alpha = std::exp(running_max - new_max);
      running_max = new_max;
      float sum = 0.0f;
      for (int i = 0; i < count; ++i) {
        scores[i] = std::exp(scores[i] - new_max);
        sum += scores[i];
      }
      running_sum = std::fma(running_sum, alpha, sum);
      for (int d = 0; d < hd; ++d) acc_out[d] *= alpha;
      for (int i = 0; i < count; ++i) {
        for (int d = 0; d < hd; ++d) acc_out[d] = std::fma(scores[i], v_rows[i][d], acc_out[d]);
      }
    }
    float* out = it.out + static_cast<int64_t>(h) * hd;
    for (int d = 0; d < hd; ++d) out[d] = acc_out[d] / running_sum;
  }
}

}  // namespace

void PagedAttention(const float* q, const float* k_cache, const float* v_cache,
                    const KvLayout& layout, absl::Span<const AttentionSequence> sequences,
                    int n_heads, float scale, float* out) {
  const int hd = layout.head_dim;
  const int n_kv = layout.num_kv_heads;
  QUILL_CHECK(hd > 0 && hd <= kMaxHeadDim && n_kv > 0 && n_heads % n_kv == 0 &&
              layout.block_size > 0);
  const int group = n_heads / n_kv;

  // Work items: (sequence, query, KV head, run of heads). The run length only groups work;
  // it never changes a result, so it is free to shrink until both threads have work.
  thread_local std::vector<int64_t> first_item;  // per sequence; grows, never shrinks
  first_item.resize(sequences.size() + 1);
  int64_t num_queries = 0;
  for (const AttentionSequence& s : sequences) num_queries += s.num_q;
  const int threads = omp_get_max_threads();
  int run = std::min(group, kMaxHeadsPerItem);
  auto runs_per_kv = [&](int r) { return (group + r - 1) / r; };
  while (run > 1 && num_queries * n_kv * runs_per_kv(run) < 4 * threads) run = (run + 1) / 2;
  const int64_t items_per_query = int64_t{n_kv} * runs_per_kv(run);
  first_item[0] = 0;
  for (size_t s = 0; s < sequences.size(); ++s) {
    first_item[s + 1] = first_item[s] + sequences[s].num_q * items_per_query;
  }
  const int64_t total = first_item[sequences.size()];
  if (total == 0) return;

  AttendFn attend = &AttendPortable;
  if (UseAvx512()) {
    attend = PickAvx512((hd + 15) / 16, std::make_integer_sequence<int, kMaxHeadDim / 16>{});
  }
  const int64_t* starts = first_item.data();
  const int64_t row = static_cast<int64_t>(n_heads) * hd;

#pragma omp parallel for schedule(dynamic, 1) if (total > 1)
  for (int64_t index = 0; index < total; ++index) {
    const size_t s = std::upper_bound(starts, starts + sequences.size() + 1, index) - starts - 1;
    const AttentionSequence& seq = sequences[s];
    const int64_t local = index - starts[s];
    const int64_t j = local / items_per_query;
    const int kv = static_cast<int>((local % items_per_query) / runs_per_kv(run));
    const int first_head = kv * group + static_cast<int>(local % runs_per_kv(run)) * run;
    const int64_t offset = (seq.q_begin + j) * row + static_cast<int64_t>(first_head) * hd;
    Item it;
    it.q = q + offset;
    it.out = out + offset;
    it.num_heads = std::min(run, (kv + 1) * group - first_head);
    it.num_keys = seq.first_pos + static_cast<int32_t>(j) + 1;
    it.block_table = seq.block_table;
    it.k_cache = k_cache + static_cast<int64_t>(kv) * hd;
    it.v_cache = v_cache + static_cast<int64_t>(kv) * hd;
    it.block_size = layout.block_size;
    it.kv_row = static_cast<int64_t>(n_kv) * hd;
    it.head_dim = hd;
    it.scale = scale;
    attend(it);
  }
}

}  // namespace quill::engine::kernels
