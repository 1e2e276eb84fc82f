#include "engine/kernels/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "engine/base/check.h"
#include "engine/base/float16.h"
#include "engine/kernels/simd_math.h"

namespace quill::engine::kernels {
namespace {

using internal::Exp512;
using internal::ReduceAdd512;
using internal::TailMask;
using internal::Tanh512;
using internal::TransposeReduce16;
using internal::UseAvx512;

// Keys are processed in tiles of kTile positions starting at multiples of kTile, whatever
// the query's chunk or batch: the online-softmax rescaling points, and so the rounding,
// depend only on the query's own position.
constexpr int kTile = 64;
constexpr int kMaxHeadDim = 256;
// Query heads handled by one work item (they share each tile's K/V rows).
constexpr int kMaxHeadsPerItem = 64;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// One work item: one query row and the query heads [head_begin, head_end), which are
// either part of one KV group or several whole groups. Heads are independent: how they
// are grouped into items never changes a result.
struct Item {
  const float* q;  // the query row (all heads)
  float* out;      // its output row
  int head_begin;
  int head_end;
  int group;          // query heads per KV head
  int32_t first_key;  // the query attends to positions [first_key, num_keys)
  int32_t num_keys;
  const int32_t* block_table;
  const void* k_cache;  // arenas of KvT (the kernel's element type)
  const void* v_cache;
  int block_size;
  int64_t kv_row;  // elements per slot (num_kv_heads * head_dim)
  int head_dim;
  float scale;
  float softcap;  // 0: none
};

// The first tile of a query whose keys start at `first_key`: tiles always start at
// multiples of kTile, so the rounding depends only on the query's position.
inline int FirstTile(int32_t first_key) { return first_key / kTile * kTile; }

// Lanes [lo, hi) of a 16-lane group, each bound clamped to [0, 16].
inline __mmask16 LaneRange(int lo, int hi) {
  lo = std::max(0, std::min(16, lo));
  hi = std::max(0, std::min(16, hi));
  return static_cast<__mmask16>(TailMask(hi) & ~TailMask(lo));
}

// Slot rows (all KV heads) of the tile's keys [t0, t0 + count).
template <typename KvT>
void TileRows(const Item& it, int t0, int count, const KvT** k_rows, const KvT** v_rows) {
  for (int i = 0; i < count; ++i) {
    const int pos = t0 + i;
    const int64_t slot = static_cast<int64_t>(it.block_table[pos / it.block_size]) * it.block_size +
                         pos % it.block_size;
    k_rows[i] = static_cast<const KvT*>(it.k_cache) + slot * it.kv_row;
    v_rows[i] = static_cast<const KvT*>(it.v_cache) + slot * it.kv_row;
  }
}

// A cached value widened to f32 (exact for both element types).
inline float KvToFloat(float v) { return v; }
inline float KvToFloat(uint16_t h) { return Fp16ToFloat(h); }

// 16 cached values (lanes outside `m` zero) widened to f32.
QUILL_AVX512_TARGET inline __m512 LoadKv16(const float* p, __mmask16 m) {
  return _mm512_maskz_loadu_ps(m, p);
}
QUILL_AVX512_TARGET inline __m512 LoadKv16(const uint16_t* p, __mmask16 m) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}

// ---- AVX-512 ---------------------------------------------------------------------------

// Every score is an FMA chain over 16-float chunks of head_dim (in order) followed by
// TransposeReduce16, whose tree is the same for every lane; every output chunk is an FMA
// chain over the tile's keys in order. Grouping heads or keys differently below only
// changes which registers hold what, never a result.
//
// kChunks = ceil(head_dim / 16); the last chunk is masked when head_dim % 16 != 0. KvT is
// the cache's element (float or f16 bits); K and V are widened exactly, as they are loaded
// or a tile at a time.
template <int kChunks, typename KvT>
struct Avx512Attention {
  // Heads whose outputs accumulate together in P.V (sharing each V row load): up to 16
  // accumulator registers.
  static constexpr int kPvHeads = std::max(1, std::min(4, 16 / kChunks));

  QUILL_AVX512_TARGET static __mmask16 ChunkMask(int c, __mmask16 last) {
    return c == kChunks - 1 ? last : static_cast<__mmask16>(0xffff);
  }

  // Dot products of query heads q0 and q1 with 8 keys: lanes 0-7 for q0, 8-15 for q1.
  QUILL_AVX512_TARGET static __m512 Dots2x8(const float* q0, const float* q1,
                                            const KvT* const* k_rows, int64_t offset,
                                            __mmask16 last) {
    __m512 dot[16];
    for (int i = 0; i < 16; ++i) dot[i] = _mm512_setzero_ps();
    for (int c = 0; c < kChunks; ++c) {
      const __mmask16 m = ChunkMask(c, last);
      const __m512 qa = _mm512_maskz_loadu_ps(m, q0 + 16 * c);
      const __m512 qb = _mm512_maskz_loadu_ps(m, q1 + 16 * c);
      for (int i = 0; i < 8; ++i) {
        const __m512 k = LoadKv16(k_rows[i] + offset + 16 * c, m);
        dot[i] = _mm512_fmadd_ps(qa, k, dot[i]);
        dot[8 + i] = _mm512_fmadd_ps(qb, k, dot[8 + i]);
      }
    }
    return TransposeReduce16(dot);
  }

  // Dot products of one query head with 16 keys.
  QUILL_AVX512_TARGET static __m512 Dots1x16(const float* q, const KvT* const* k_rows,
                                             int64_t offset, __mmask16 last) {
    __m512 dot[16];
    for (int i = 0; i < 16; ++i) dot[i] = _mm512_setzero_ps();
    for (int c = 0; c < kChunks; ++c) {
      const __mmask16 m = ChunkMask(c, last);
      const __m512 qc = _mm512_maskz_loadu_ps(m, q + 16 * c);
      for (int i = 0; i < 16; ++i) {
        dot[i] = _mm512_fmadd_ps(qc, LoadKv16(k_rows[i] + offset + 16 * c, m), dot[i]);
      }
    }
    return TransposeReduce16(dot);
  }

  // score * scale, soft-capped when softcap > 0 (cap * tanh(score / cap)).
  QUILL_AVX512_TARGET static __m512 Finish(__m512 dots, __m512 scale, float softcap) {
    const __m512 s = _mm512_mul_ps(dots, scale);
    if (softcap <= 0.0f) return s;
    return _mm512_mul_ps(_mm512_set1_ps(softcap),
                         Tanh512(_mm512_mul_ps(s, _mm512_set1_ps(1.0f / softcap))));
  }

  // scores[h][0, padded) for `num_heads` heads starting at q: scaled (and capped) dots for
  // keys [skip, count), -inf elsewhere.
  QUILL_AVX512_TARGET static void Scores(const float* q, int num_heads, int head_dim,
                                         const KvT* const* k_rows, int64_t offset, int skip,
                                         int count, int padded, __mmask16 last, float scale_value,
                                         float softcap, float (*scores)[kTile]) {
    const __m512 scale = _mm512_set1_ps(scale_value);
    const __m512 neg_inf = _mm512_set1_ps(kNegInf);
    int h = 0;
    for (; h + 2 <= num_heads; h += 2) {
      const float* q0 = q + static_cast<int64_t>(h) * head_dim;
      for (int g = 0; g < padded; g += 8) {
        const __mmask16 valid8 =
            LaneRange(skip - g, std::min(count - g, 8)) & static_cast<__mmask16>(0xff);
        const __m512 s = _mm512_mask_mov_ps(
            neg_inf, static_cast<__mmask16>(valid8 | (valid8 << 8)),
            Finish(Dots2x8(q0, q0 + head_dim, k_rows + g, offset, last), scale, softcap));
        _mm256_store_ps(scores[h] + g, _mm512_castps512_ps256(s));
        _mm256_store_ps(scores[h + 1] + g,
                        _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1)));
      }
    }
    for (; h < num_heads; ++h) {
      const float* qh = q + static_cast<int64_t>(h) * head_dim;
      for (int g = 0; g < padded; g += 16) {
        const __m512 s =
            _mm512_mask_mov_ps(neg_inf, LaneRange(skip - g, count - g),
                               Finish(Dots1x16(qh, k_rows + g, offset, last), scale, softcap));
        _mm512_store_ps(scores[h] + g, s);
      }
    }
  }

  // Online softmax step for one head: scores become weights exp(s - new max); returns the
  // factor that rescales what was accumulated before (0 on the first tile).
  QUILL_AVX512_TARGET static float Softmax(float* scores, int skip, int count, int padded,
                                           float* running_max, float* running_sum) {
    __m512 tile_max = _mm512_set1_ps(kNegInf);
    for (int g = 0; g < padded; g += 16) {
      tile_max = _mm512_max_ps(tile_max, _mm512_load_ps(scores + g));
    }
    const float new_max = std::max(*running_max, _mm512_reduce_max_ps(tile_max));
    const float alpha = std::exp(*running_max - new_max);
    *running_max = new_max;
    const __m512 vmax = _mm512_set1_ps(new_max);
    __m512 sum = _mm512_setzero_ps();
    for (int g = 0; g < padded; g += 16) {
      const __m512 p = _mm512_maskz_mov_ps(LaneRange(skip - g, count - g),
                                           Exp512(_mm512_sub_ps(_mm512_load_ps(scores + g), vmax)));
      _mm512_store_ps(scores + g, p);
      sum = _mm512_add_ps(sum, p);
    }
    *running_sum = std::fma(*running_sum, alpha, ReduceAdd512(sum));
    return alpha;
  }

  // acc[h] = acc[h] * alpha[h] + sum_i weights[h][i] * V_i, for kHeads heads at once.
  template <int kHeads>
  QUILL_AVX512_TARGET static void WeightedValues(const KvT* const* v_rows, int64_t offset, int skip,
                                                 int count, __mmask16 last, float (*weights)[kTile],
                                                 const float* alpha, float (*acc)[kChunks * 16]) {
    __m512 o[kHeads][kChunks];
    for (int h = 0; h < kHeads; ++h) {
      const __m512 a = _mm512_set1_ps(alpha[h]);
      for (int c = 0; c < kChunks; ++c) o[h][c] = _mm512_mul_ps(_mm512_load_ps(acc[h] + 16 * c), a);
    }
    for (int i = skip; i < count; ++i) {
      __m512 p[kHeads];
      for (int h = 0; h < kHeads; ++h) p[h] = _mm512_set1_ps(weights[h][i]);
      for (int c = 0; c < kChunks; ++c) {
        const __m512 v = LoadKv16(v_rows[i] + offset + 16 * c, ChunkMask(c, last));
        for (int h = 0; h < kHeads; ++h) o[h][c] = _mm512_fmadd_ps(p[h], v, o[h][c]);
      }
    }
    for (int h = 0; h < kHeads; ++h) {
      for (int c = 0; c < kChunks; ++c) _mm512_store_ps(acc[h] + 16 * c, o[h][c]);
    }
  }

  template <int... kHeads>
  QUILL_AVX512_TARGET static void WeightedValuesN(int n, std::integer_sequence<int, kHeads...>,
                                                  const KvT* const* v_rows, int64_t offset,
                                                  int skip, int count, __mmask16 last,
                                                  float (*weights)[kTile], const float* alpha,
                                                  float (*acc)[kChunks * 16]) {
    ((n == kHeads + 1
          ? WeightedValues<kHeads + 1>(v_rows, offset, skip, count, last, weights, alpha, acc)
          : void()),
     ...);
  }

  // The scores, softmax step and P.V of query heads [first, first + n) of the item (one
  // KV head's group, or a run of it) over one tile.
  QUILL_AVX512_TARGET static void HeadTile(const float* q, int first, int n,
                                           const KvT* const* k_rows, const KvT* const* v_rows,
                                           int64_t offset, int skip, int count, int padded,
                                           __mmask16 last, const Item& it, float (*scores)[kTile],
                                           float* alpha, float* running_max, float* running_sum,
                                           float (*acc)[kChunks * 16]) {
    Scores(q, n, it.head_dim, k_rows, offset, skip, count, padded, last, it.scale, it.softcap,
           scores + first);
    for (int j = first; j < first + n; ++j) {
      alpha[j] = Softmax(scores[j], skip, count, padded, &running_max[j], &running_sum[j]);
    }
    for (int j = first; j < first + n; j += kPvHeads) {
      WeightedValuesN(std::min(kPvHeads, first + n - j),
                      std::make_integer_sequence<int, kPvHeads>{}, v_rows, offset, skip, count,
                      last, scores + j, alpha + j, acc + j);
    }
  }

  // rows[i] + offset, i in [begin, end), widened to f32 into out[i] (exact).
  QUILL_AVX512_TARGET static void Widen(const KvT* const* rows, int64_t offset, int begin, int end,
                                        __mmask16 last, float (*out)[kChunks * 16]) {
    for (int i = begin; i < end; ++i) {
      for (int c = 0; c < kChunks; ++c) {
        _mm512_store_ps(out[i] + 16 * c, LoadKv16(rows[i] + offset + 16 * c, ChunkMask(c, last)));
      }
    }
  }

  QUILL_AVX512_TARGET static void Attend(const Item& it) {
    const int num_heads = it.head_end - it.head_begin;
    const int hd = it.head_dim;
    alignas(64) float scores[kMaxHeadsPerItem][kTile];
    alignas(64) float acc[kMaxHeadsPerItem][kChunks * 16];
    float running_max[kMaxHeadsPerItem];
    float running_sum[kMaxHeadsPerItem];
    float alpha[kMaxHeadsPerItem];
    const KvT* k_rows[kTile];
    const KvT* v_rows[kTile];
    const __mmask16 last = TailMask(hd - (kChunks - 1) * 16);
    // f16 caches: each tile's K and V rows of one KV head, widened once for all the query
    // heads that read them (widening on every load cost one conversion per head pair: a
    // 4,096-key decode over 22 layers ran 8-14% faster, quill-attention-bench). A lone head
    // reads its rows directly.
    using Wide = Avx512Attention<kChunks, float>;
    alignas(64) float wide_k[std::is_same_v<KvT, float> ? 1 : kTile][kChunks * 16];
    alignas(64) float wide_v[std::is_same_v<KvT, float> ? 1 : kTile][kChunks * 16];
    const float* wide_k_rows[kTile];
    const float* wide_v_rows[kTile];
    if constexpr (!std::is_same_v<KvT, float>) {
      for (int i = 0; i < kTile; ++i) {
        wide_k_rows[i] = wide_k[i];
        wide_v_rows[i] = wide_v[i];
      }
    }

    for (int h = 0; h < num_heads; ++h) {
      running_max[h] = kNegInf;
      running_sum[h] = 0.0f;
      for (int c = 0; c < kChunks; ++c) _mm512_store_ps(acc[h] + 16 * c, _mm512_setzero_ps());
    }
    for (int t0 = FirstTile(it.first_key); t0 < it.num_keys; t0 += kTile) {
      const int count = std::min(kTile, it.num_keys - t0);
      const int skip = std::max(0, it.first_key - t0);  // keys before the window
      const int padded = (count + 15) / 16 * 16;
      TileRows(it, t0, count, k_rows, v_rows);
      // Lanes past the last key compute on a valid row and are masked out.
      for (int i = count; i < padded; ++i) k_rows[i] = k_rows[0];

      // One KV head (and the item's query heads that read it) at a time.
      for (int h = it.head_begin; h < it.head_end;) {
        const int kv = h / it.group;
        const int end = std::min(it.head_end, (kv + 1) * it.group);
        const int first = h - it.head_begin;
        const int n = end - h;
        const int64_t offset = static_cast<int64_t>(kv) * hd;
        const float* q = it.q + static_cast<int64_t>(h) * hd;
        if (!std::is_same_v<KvT, float> && n >= 2) {
          // Widen this KV head's rows of the tile once; its n query heads then read f32.
          Widen(k_rows, offset, 0, padded, last, wide_k);
          Widen(v_rows, offset, skip, count, last, wide_v);
          Wide::HeadTile(q, first, n, wide_k_rows, wide_v_rows, 0, skip, count, padded, last, it,
                         scores, alpha, running_max, running_sum, acc);
        } else {
          HeadTile(q, first, n, k_rows, v_rows, offset, skip, count, padded, last, it, scores,
                   alpha, running_max, running_sum, acc);
        }
        h = end;
      }
    }

    for (int h = 0; h < num_heads; ++h) {
      const __m512 denom = _mm512_set1_ps(running_sum[h]);
      float* out = it.out + static_cast<int64_t>(it.head_begin + h) * hd;
      for (int c = 0; c < kChunks; ++c) {
        _mm512_mask_storeu_ps(out + 16 * c, ChunkMask(c, last),
                              _mm512_div_ps(_mm512_load_ps(acc[h] + 16 * c), denom));
      }
    }
  }
};

using AttendFn = void (*)(const Item&);

template <typename KvT, int... kChunks>
AttendFn PickAvx512(int chunks, std::integer_sequence<int, kChunks...>) {
  AttendFn fn = nullptr;
  ((fn = (chunks == kChunks + 1) ? &Avx512Attention<kChunks + 1, KvT>::Attend : fn), ...);
  return fn;
}

// ---- Portable --------------------------------------------------------------------------

// The same tiles and online softmax in scalar code; each dot product and output sum runs in
// a fixed order, so it too is batch-invariant.
template <typename KvT>
void AttendPortable(const Item& it) {
  float scores[kTile];
  const KvT* k_rows[kTile];
  const KvT* v_rows[kTile];
  float acc[kMaxHeadDim];
  const int hd = it.head_dim;
  for (int h = it.head_begin; h < it.head_end; ++h) {
    const float* q = it.q + static_cast<int64_t>(h) * hd;
    const int64_t offset = static_cast<int64_t>(h / it.group) * hd;
    float running_max = kNegInf;
    float running_sum = 0.0f;
    std::fill(acc, acc + hd, 0.0f);
    for (int t0 = FirstTile(it.first_key); t0 < it.num_keys; t0 += kTile) {
      const int count = std::min(kTile, it.num_keys - t0);
      const int skip = std::max(0, it.first_key - t0);  // keys before the window
      TileRows(it, t0, count, k_rows, v_rows);
      float tile_max = kNegInf;
      for (int i = skip; i < count; ++i) {
        const KvT* k = k_rows[i] + offset;
        float dot = 0.0f;
        for (int d = 0; d < hd; ++d) dot = std::fma(q[d], KvToFloat(k[d]), dot);
        scores[i] = dot * it.scale;
        if (it.softcap > 0.0f) scores[i] = it.softcap * std::tanh(scores[i] / it.softcap);
        tile_max = std::max(tile_max, scores[i]);
      }
      const float new_max = std::max(running_max, tile_max);
      const float alpha = std::exp(running_max - new_max);
      running_max = new_max;
      float sum = 0.0f;
      for (int i = skip; i < count; ++i) {
        scores[i] = std::exp(scores[i] - new_max);
        sum += scores[i];
      }
      running_sum = std::fma(running_sum, alpha, sum);
      for (int d = 0; d < hd; ++d) acc[d] *= alpha;
      for (int i = skip; i < count; ++i) {
        const KvT* v = v_rows[i] + offset;
        for (int d = 0; d < hd; ++d) acc[d] = std::fma(scores[i], KvToFloat(v[d]), acc[d]);
      }
    }
    float* out = it.out + static_cast<int64_t>(h) * hd;
    for (int d = 0; d < hd; ++d) out[d] = acc[d] / running_sum;
  }
}

// ---- Work split ------------------------------------------------------------------------

// How a query row's heads are cut into items: `span` consecutive heads, never straddling
// a KV group partially (span is a multiple of the group, or the group is cut into runs).
struct HeadSplit {
  int n_heads;
  int group;
  int span;

  int ItemsPerQuery() const {
    if (span >= group) return (n_heads + span - 1) / span;
    return (n_heads / group) * ((group + span - 1) / span);
  }
  std::pair<int, int> Heads(int index) const {
    if (span >= group) {
      const int begin = index * span;
      return {begin, std::min(n_heads, begin + span)};
    }
    const int runs = (group + span - 1) / span;
    const int kv = index / runs;
    const int begin = kv * group + (index % runs) * span;
    return {begin, std::min((kv + 1) * group, begin + span)};
  }
};

// The widest split (most heads sharing each K/V row read) that still gives every thread
// an item. Whole KV groups are halved down to one group per item for that; a group is
// cut into runs only while there are fewer items than threads, because its runs each read
// the group's K/V rows again (at decode, from memory: a long context's decode step is
// bound by those reads). Wider items also read longer runs of each slot row: one decode
// query at 4,096 keys over 22 layers ran 6-8% faster as 2 items of 2 KV heads than as 4
// of 1 (quill-attention-bench, f16, 2 threads).
HeadSplit ChooseSplit(int n_heads, int group, int64_t num_queries, int threads) {
  HeadSplit split{n_heads, group, 0};
  if (group <= kMaxHeadsPerItem) {
    split.span = std::min(n_heads, kMaxHeadsPerItem) / group * group;
  } else {
    split.span = kMaxHeadsPerItem;
  }
  while (split.span > group && num_queries * split.ItemsPerQuery() < threads) {
    split.span = std::max(group, split.span / group / 2 * group);
  }
  while (split.span > 1 && num_queries * split.ItemsPerQuery() < threads) {
    split.span = (split.span + 1) / 2;
  }
  return split;
}

}  // namespace

void PagedAttention(const float* q, const void* k_cache, const void* v_cache,
                    const KvLayout& layout, absl::Span<const AttentionSequence> sequences,
                    int n_heads, const AttentionParams& params, float* out) {
  const int hd = layout.head_dim;
  const int n_kv = layout.num_kv_heads;
  QUILL_CHECK(hd > 0 && hd <= kMaxHeadDim && n_kv > 0 && n_heads % n_kv == 0 &&
              layout.block_size > 0 && params.window >= 0 && params.softcap >= 0.0f);

  int64_t num_queries = 0;
  for (const AttentionSequence& s : sequences) num_queries += s.num_q;
  if (num_queries == 0) return;
  const HeadSplit split = ChooseSplit(n_heads, n_heads / n_kv, num_queries, omp_get_max_threads());
  const int items_per_query = split.ItemsPerQuery();

  // First item of each sequence; the vector only grows, so steady state allocates nothing.
  thread_local std::vector<int64_t> first_item;
  first_item.resize(sequences.size() + 1);
  first_item[0] = 0;
  for (size_t s = 0; s < sequences.size(); ++s) {
    first_item[s + 1] = first_item[s] + int64_t{sequences[s].num_q} * items_per_query;
  }
  const int64_t total = first_item[sequences.size()];
  const int64_t* starts = first_item.data();

  const bool f16 = layout.element == KvElement::kF16;
  AttendFn attend = f16 ? &AttendPortable<uint16_t> : &AttendPortable<float>;
  if (UseAvx512()) {
    constexpr auto kChunkCounts = std::make_integer_sequence<int, kMaxHeadDim / 16>{};
    const int chunks = (hd + 15) / 16;
    attend =
        f16 ? PickAvx512<uint16_t>(chunks, kChunkCounts) : PickAvx512<float>(chunks, kChunkCounts);
  }
  const int64_t row = static_cast<int64_t>(n_heads) * hd;

#pragma omp parallel for schedule(dynamic, 1) if (total > 1)
  for (int64_t index = 0; index < total; ++index) {
    const size_t s = std::upper_bound(starts, starts + sequences.size() + 1, index) - starts - 1;
    const AttentionSequence& seq = sequences[s];
    const int64_t local = index - starts[s];
    const int64_t j = local / items_per_query;
    const auto [head_begin, head_end] = split.Heads(static_cast<int>(local % items_per_query));
    Item it;
    it.q = q + (seq.q_begin + j) * row;
    it.out = out + (seq.q_begin + j) * row;
    it.head_begin = head_begin;
    it.head_end = head_end;
    it.group = split.group;
    it.num_keys = seq.first_pos + static_cast<int32_t>(j) + 1;
    it.first_key = params.window > 0 ? std::max(0, it.num_keys - params.window) : 0;
    it.block_table = seq.block_table;
    it.k_cache = k_cache;
    it.v_cache = v_cache;
    it.block_size = layout.block_size;
    it.kv_row = static_cast<int64_t>(n_kv) * hd;
    it.head_dim = hd;
    it.scale = params.scale;
    it.softcap = params.softcap;
    attend(it);
  }
}

}  // namespace quill::engine::kernels
