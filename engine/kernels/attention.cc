#include "engine/kernels/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
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
using internal::ReduceAdd512x8;
using internal::ReduceMax512x8;
using internal::TailMask;
using internal::Tanh512;
using internal::UseAvx512;

// Keys are processed in tiles of kTile positions starting at multiples of kTile, whatever
// the query's chunk or batch: the online-softmax rescaling points, and so the rounding,
// depend only on the query's own position.
constexpr int kTile = 64;
constexpr int kMaxHeadDim = kMaxKvHeadDim;
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
  const void* k_cache;  // arenas of KvT (the kernel's element type), laid out as `layout` says
  const void* v_cache;
  KvLayout layout;
  float scale;
  float softcap;  // 0: none
  // Prefetch each next tile's K and V while computing on this one's: for a decode row, whose
  // keys come from memory. A prefill chunk's rows find them in cache.
  bool prefetch;
};

// A q8 cache's element type in the kernels (keys are really offset-binary uint8).
using Q8 = int8_t;
template <typename KvT>
constexpr bool kIsQ8 = std::is_same_v<KvT, Q8>;
// A bf16 cache's element: the bits of a bfloat16 (uint16_t already names f16 bits).
enum class Bf16 : uint16_t {};
template <typename KvT>
constexpr bool kIsBf16 = std::is_same_v<KvT, Bf16>;

// An item's query heads packed for a cache that computes in narrow dot products, 32 bits to
// a word (one dot-product step's broadcast): for q8, head h's codes, 4 to a word, and what
// turns its integer dot with a stored key (codes + 128) into a score; for bf16, head h's
// dimensions rounded to bf16, 2 to a word.
struct PackedQuery {
  // Head h at h * head_dim / 4 (q8) or h * head_dim / 2 (bf16).
  alignas(64) int32_t words[kMaxHeadsPerItem * kMaxHeadDim / 2];
  int32_t bias[kMaxHeadsPerItem];  // q8: 128 * the sum of the codes: the keys' +128 adds that
  float factor[kMaxHeadsPerItem];  // q8: the query's scale * the score scale
};

// Rounds heads [0, n) of the query row q to bf16 pairs in pq (dimension 2e in the low half
// of word e, as a bf16 key stores its pairs).
void RoundQueryBf16(const float* q, int n, int head_dim, PackedQuery* pq) {
  for (int64_t i = 0; i < int64_t{n} * head_dim; i += 2) {
    pq->words[i / 2] =
        static_cast<int32_t>(uint32_t{FloatToBf16(q[i])} | uint32_t{FloatToBf16(q[i + 1])} << 16);
  }
}

// Quantizes heads [0, n) of the query row q into qq.
void QuantizeQuery(const float* q, int n, int head_dim, float scale, PackedQuery* qq) {
  for (int h = 0; h < n; ++h) {
    int8_t* codes = reinterpret_cast<int8_t*>(qq->words + h * head_dim / 4);
    const float q_scale = QuantizeRowQ8(q + static_cast<int64_t>(h) * head_dim, head_dim, codes);
    int32_t sum = 0;
    for (int d = 0; d < head_dim; ++d) sum += codes[d];
    qq->bias[h] = 128 * sum;
    qq->factor[h] = q_scale * scale;
  }
}

// The scale of the q8 value row `row`, the one at position r of its block (and those of
// the block's next slots after it). A KV head's part of a block holds its rows and then
// their scales, so the part starts r rows before `row`.
inline const float* ValueScalesQ8(const Q8* row, const KvLayout& layout, int r) {
  const int64_t hd = layout.head_dim;
  return reinterpret_cast<const float*>(row + (layout.block_size - r) * hd + r * 4);
}

// The first tile of a query whose keys start at `first_key`: tiles always start at
// multiples of kTile, so the rounding depends only on the query's position.
inline int FirstTile(int32_t first_key) { return first_key / kTile * kTile; }

// Lanes [lo, hi) of a 16-lane group, each bound clamped to [0, 16].
inline __mmask16 LaneRange(int lo, int hi) {
  lo = std::max(0, std::min(16, lo));
  hi = std::max(0, std::min(16, hi));
  return static_cast<__mmask16>(TailMask(hi) & ~TailMask(lo));
}

// Where the tile's keys [t0, t0 + count) are for KV head 0: keys[i] is dimension 0 of key
// i in its transposed block (dimension d at keys[i] + d * block_size), values[i] its value
// row. KV head kv's are head_stride() further.
// Consecutive slots of a block are consecutive key columns and value rows, so the slots
// are derived a block at a time (a division per position showed as 2% of decode at depth
// 4096).
template <typename KvT>
void TileSlots(const Item& it, int t0, int count, const KvT** keys, const KvT** values) {
  const int bs = it.layout.block_size;
  const int hd = it.layout.head_dim;
  // A q8 key's 4 dimensions sit side by side, so its next slot's are 4 bytes on; a bf16
  // key's 2 dimensions, 2 elements on.
  constexpr int kKeyStep = kIsQ8<KvT> ? 4 : kIsBf16<KvT> ? 2 : 1;
  for (int i = 0; i < count;) {
    const int pos = t0 + i;
    const int in_block = pos % bs;
    const int64_t slot = int64_t{it.block_table[pos / bs]} * bs + in_block;
    const KvT* key = static_cast<const KvT*>(it.k_cache) + it.layout.KeyIndex(slot, 0, 0);
    const KvT* value = static_cast<const KvT*>(it.v_cache) + it.layout.ValueIndex(slot, 0, 0);
    for (const int end = std::min(count, i + bs - in_block); i < end; ++i) {
      keys[i] = key;
      key += kKeyStep;
      values[i] = value;
      if constexpr (kIsBf16<KvT>) {
        // An even slot's value is the first of a pair, its odd neighbour's the next element
        // (the block size is even, so a slot's parity is its position's).
        value += (t0 + i) % 2 == 0 ? 1 : 2 * hd - 1;
      } else {
        value += hd;
      }
    }
  }
}

// A decode row's first pass over a tile's K and V (Item::prefetch) prefetches the same lines
// of the next tile of the same KV head, one beside each it reads, a tile's work ahead. At
// decode a KV cache comes from memory once per layer (the weights evict it between tokens).
// Measured on Zen 5, 2 threads, f16 KV, alternated with the build before (when a tile was
// first widened to f32 copies, and the widening loops prefetched):
// - quill-attention-bench, decode 1 x 4096 over 22 layers: 0.76-0.83x the time per call
//   (6 runs); 64 x 512: 0.83-0.89x; 16 x 512: 0.90-1.0x. With the cache in L1-L3 it costs:
//   1 x 512 1.04-1.18x, 1 x 4096 (one layer) 1.0-1.1x. Prefill (no prefetch): within noise.
// - quill-bench on the TinyLlama-shaped Q4_K_M file, 3 pairs: tg64 at depth 4096 43.3-46.6
//   -> 46.8-52.3 t/s (+8-13% in every pair).
// The same prefetches issued all at once at a tile's start changed nothing; into L2 two
// tiles ahead, or into L1 from a list of the next tile's lines spread over the arithmetic,
// they made decode slower (1.2-1.5x at 22 layers).
inline void PrefetchIntoL1(const void* p) { __builtin_prefetch(p, /*rw=*/0, /*locality=*/3); }

// exp(old_max - new_max): what an online softmax multiplies its earlier sum and outputs by
// when a tile raises the running max. Once a long context's max has settled, most tiles
// leave it unchanged, and exp(0) is exactly 1: skipping the call there (a libm exp per
// head and tile) keeps every bit. Infinite maxima still go through exp (inf - inf is NaN).
inline float RescaleFactor(float old_max, float new_max) {
  if (old_max == new_max && std::isfinite(old_max)) return 1.0f;
  return std::exp(old_max - new_max);
}

// A cached value widened to f32 (exact for both element types).
inline float KvToFloat(float v) { return v; }
inline float KvToFloat(uint16_t h) { return Fp16ToFloat(h); }
inline float KvToFloat(Q8 code) { return code; }  // a q8 value's code: its scale comes apart
inline float KvToFloat(Bf16 b) { return Bf16ToFloat(static_cast<uint16_t>(b)); }

// 16 cached values (lanes outside `m` zero) widened to f32.
QUILL_AVX512_TARGET inline __m512 LoadKv16(const float* p, __mmask16 m) {
  return _mm512_maskz_loadu_ps(m, p);
}
QUILL_AVX512_TARGET inline __m512 LoadKv16(const uint16_t* p, __mmask16 m) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}
QUILL_AVX512_TARGET inline __m512 LoadKv16(const Q8* p, __mmask16 m) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, p)));
}

// x rounded to bf16 (to nearest even) and widened back: a weight a bf16 P.V step takes
// exactly.
QUILL_AVX512_TARGET inline __m512 RoundToBf16(__m512 x) {
  const __m256i b = (__m256i)_mm512_cvtneps_pbh(x);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
}

// ---- AVX-512 ---------------------------------------------------------------------------

// Query heads one pass of the score or P.V loops computes at once, sharing each K or V load
// (and its widening from f16), with their 16 accumulators at most in registers: 8 heads x 2
// groups of keys (or chunks of V) per pass, so that a GQA group of 8 reads and widens each
// element once, in the loop that uses it. Before, 4 heads x 4 groups per pass: an f16 tile
// was first widened into f32 copies, a loop that waited on memory with no arithmetic to
// overlap. quill-attention-bench (Zen 5, 2 threads), alternated with that build, every
// output bit the same: f16 decode 0.75-0.84x the time per call (1 x 4096 over 22 layers
// 0.79-0.80x), prefill 0.80-0.81x; f32 decode 0.71-1.02x, prefill 0.95-0.96x.
constexpr int kMaxBlockHeads = 8;
// Accumulators one pass keeps in registers (of 32), beside its K or V loads and broadcasts.
constexpr int kMaxAccumulators = 16;

// Scores of up to 8 query heads against groups of 16 keys with the keys in lanes: group g's
// column d (this KV head's dimension d) is 16 contiguous values at cols[g] + d * stride.
// Every score is one FMA chain over head_dim in order, from zero, times the scale: the
// portable path's arithmetic, whatever the grouping. For a q8 cache (KvT = Q8), group g's
// dimensions 4e..4e+3 are one 64-byte line at cols[g] + e * 4 * stride, and each score is
// an exact integer dot (VNNI) scaled afterwards.
// The registers a score pass accumulates in: f32 FMAs, or q8's int32 dot products. (A
// specialization, not std::conditional_t: vector types lose their attributes as template
// arguments.)
template <bool kQ8>
struct DotVector {
  using type = __m512;
};
template <>
struct DotVector<true> {
  using type = __m512i;
};

template <typename KvT>
struct KeyScores {
  static constexpr bool kQ8 = kIsQ8<KvT>;
  static constexpr bool kBf16 = kIsBf16<KvT>;
  // A query head's row as the loops read it: f32, or packed words (PackedQuery).
  using Query = std::conditional_t<kQ8 || kBf16, int32_t, float>;
  using Dots = typename DotVector<kQ8>::type;

  // Heads [0, kHeads) x groups [g0, g0 + kGroups). Prefetches column d of next_cols[g0,
  // next_groups) (the next tile's groups) as it reads column d. Inlined by force: called
  // on its own, GCC stored the f32 accumulators to the stack on every step of the d loop
  // (f32 decode 1.4x slower).
  template <int kHeads, int kGroups>
  [[gnu::always_inline]] QUILL_AVX512_TARGET static void Block(
      const Query* q, int head_dim, const KvT* const* cols, int64_t stride, int g0,
      const KvT* const* next_cols, int next_groups, Dots (*dots)[kTile / 16]) {
    Dots acc[kHeads][kGroups];
    for (int h = 0; h < kHeads; ++h) {
      for (int g = 0; g < kGroups; ++g) acc[h][g] = Dots{};
    }
    // Groups the next tile lacks prefetch this tile's lines again (in L1 already), so the d
    // loop has no branch.
    const KvT* prefetch[kGroups];
    for (int g = 0; g < kGroups; ++g) {
      prefetch[g] = g0 + g < next_groups ? next_cols[g0 + g] : cols[g0 + g];
    }
    if constexpr (kQ8) {
      const int words = head_dim / 4;
      for (int e = 0; e < words; ++e) {
        for (int g = 0; g < kGroups; ++g) PrefetchIntoL1(prefetch[g] + e * 4 * stride);
        __m512i k[kGroups];
        for (int g = 0; g < kGroups; ++g) {
          k[g] = _mm512_loadu_si512(cols[g0 + g] + e * 4 * stride);
        }
        for (int h = 0; h < kHeads; ++h) {
          const __m512i qe = _mm512_set1_epi32(q[h * words + e]);
          for (int g = 0; g < kGroups; ++g) acc[h][g] = _mm512_dpbusd_epi32(acc[h][g], k[g], qe);
        }
      }
    } else if constexpr (kBf16) {
      // Group g's dimensions 2e, 2e+1 are one 64-byte line at cols[g] + e * 2 * stride.
      const int words = head_dim / 2;
      for (int e = 0; e < words; ++e) {
        for (int g = 0; g < kGroups; ++g) PrefetchIntoL1(prefetch[g] + e * 2 * stride);
        __m512bh k[kGroups];
        for (int g = 0; g < kGroups; ++g) {
          k[g] = (__m512bh)_mm512_loadu_si512(cols[g0 + g] + e * 2 * stride);
        }
        for (int h = 0; h < kHeads; ++h) {
          const __m512bh qe = (__m512bh)_mm512_set1_epi32(q[h * words + e]);
          for (int g = 0; g < kGroups; ++g) acc[h][g] = _mm512_dpbf16_ps(acc[h][g], k[g], qe);
        }
      }
    } else {
      for (int d = 0; d < head_dim; ++d) {
        for (int g = 0; g < kGroups; ++g) PrefetchIntoL1(prefetch[g] + d * stride);
        __m512 k[kGroups];
        for (int g = 0; g < kGroups; ++g) k[g] = LoadKv16(cols[g0 + g] + d * stride, 0xffff);
        for (int h = 0; h < kHeads; ++h) {
          const __m512 qd = _mm512_set1_ps(q[h * head_dim + d]);
          for (int g = 0; g < kGroups; ++g) acc[h][g] = _mm512_fmadd_ps(qd, k[g], acc[h][g]);
        }
      }
    }
    for (int h = 0; h < kHeads; ++h) {
      for (int g = 0; g < kGroups; ++g) dots[h][g0 + g] = acc[h][g];
    }
  }

  // kHeads heads against the tile's `groups` groups, as many groups per pass as
  // kMaxAccumulators allow (the pack kGroups counts them).
  template <int kHeads, int... kGroups>
  QUILL_AVX512_TARGET static void Heads(int groups, std::integer_sequence<int, kGroups...>,
                                        const Query* q, int head_dim, const KvT* const* cols,
                                        int64_t stride, const KvT* const* next_cols,
                                        int next_groups, Dots (*dots)[kTile / 16]) {
    constexpr int kPass = sizeof...(kGroups);
    for (int g0 = 0; g0 < groups; g0 += kPass) {
      const int n = std::min(kPass, groups - g0);
      ((n == kGroups + 1 ? Block<kHeads, kGroups + 1>(q, head_dim, cols, stride, g0, next_cols,
                                                      next_groups, dots)
                         : void()),
       ...);
    }
  }

  template <int... kHeads>
  QUILL_AVX512_TARGET static void HeadsN(int n, std::integer_sequence<int, kHeads...>, int groups,
                                         const Query* q, int head_dim, const KvT* const* cols,
                                         int64_t stride, const KvT* const* next_cols,
                                         int next_groups, Dots (*dots)[kTile / 16]) {
    ((n == kHeads + 1
          ? Heads<kHeads + 1>(
                groups,
                std::make_integer_sequence<int,
                                           std::min(kTile / 16, kMaxAccumulators / (kHeads + 1))>{},
                q, head_dim, cols, stride, next_cols, next_groups, dots)
          : void()),
     ...);
  }

  // score * scale, soft-capped when softcap > 0 (cap * tanh(score / cap)).
  QUILL_AVX512_TARGET static __m512 Finish(__m512 dots, __m512 scale, float softcap) {
    const __m512 s = _mm512_mul_ps(dots, scale);
    if (softcap <= 0.0f) return s;
    return _mm512_mul_ps(_mm512_set1_ps(softcap),
                         Tanh512(_mm512_mul_ps(s, _mm512_set1_ps(1.0f / softcap))));
  }

  // scores[h][0, 16 * groups) for `num_heads` heads starting at q (for q8 and bf16: qq's
  // heads from `first`): scaled (and capped) dots for keys [skip, count), -inf elsewhere.
  // The first 8 heads' passes prefetch the same columns of next_cols[0, next_groups).
  QUILL_AVX512_TARGET static void Scores(const float* q, const PackedQuery* qq, int first,
                                         int num_heads, int head_dim, const KvT* const* cols,
                                         int64_t stride, int skip, int count, int groups,
                                         const KvT* const* next_cols, int next_groups,
                                         float scale_value, float softcap, float (*scores)[kTile]) {
    const __m512 neg_inf = _mm512_set1_ps(kNegInf);
    Dots dots[kMaxBlockHeads][kTile / 16];
    for (int h = 0; h < num_heads; h += kMaxBlockHeads) {
      const int n = std::min(kMaxBlockHeads, num_heads - h);
      const Query* qh;
      if constexpr (kQ8) {
        qh = qq->words + (first + h) * head_dim / 4;
      } else if constexpr (kBf16) {
        qh = qq->words + (first + h) * head_dim / 2;
      } else {
        qh = q + static_cast<int64_t>(h) * head_dim;
      }
      HeadsN(n, std::make_integer_sequence<int, kMaxBlockHeads>{}, groups, qh, head_dim, cols,
             stride, next_cols, h == 0 ? next_groups : 0, dots);
      for (int j = 0; j < n; ++j) {
        for (int g = 0; g < groups; ++g) {
          __m512 s;
          if constexpr (kQ8) {
            // (dot * key scale) * (query scale * scale), as the portable path rounds it.
            const __m512 dot = _mm512_cvtepi32_ps(
                _mm512_sub_epi32(dots[j][g], _mm512_set1_epi32(qq->bias[first + h + j])));
            const __m512 key_scales = _mm512_loadu_ps(
                reinterpret_cast<const float*>(cols[g] + int64_t{stride} * head_dim));
            s = Finish(_mm512_mul_ps(dot, key_scales), _mm512_set1_ps(qq->factor[first + h + j]),
                       softcap);
          } else {
            s = Finish(dots[j][g], _mm512_set1_ps(scale_value), softcap);
          }
          _mm512_store_ps(scores[h + j] + 16 * g,
                          _mm512_mask_mov_ps(neg_inf, LaneRange(skip - 16 * g, count - 16 * g), s));
        }
      }
    }
  }
};

// Every output chunk is an FMA chain over the tile's keys in order. Grouping heads or keys
// differently below only changes which registers hold what, never a result.
//
// A head's dimensions as chunks of 16 lanes, the last one masked when head_dim % 16 != 0.
// A run-time value rather than a template parameter: only a P.V pass's width needs to be
// known at compile time. The kernel templated on the chunk count (1 to 16, for each of 3
// element types) took 44 s to compile with GCC -O3 and 79 s under ASan, against 14 and 29
// s now, for the same passes (quill-attention-bench: every output bit the same, times within
// the host's noise at head_dim 64 and 128).
struct HeadChunks {
  int count;  // ceil(head_dim / 16)
  __mmask16 last;

  explicit HeadChunks(int head_dim)
      : count((head_dim + 15) / 16), last(TailMask(head_dim - (count - 1) * 16)) {}
  __mmask16 Mask(int c) const { return c == count - 1 ? last : static_cast<__mmask16>(0xffff); }
};

// Accumulators of one query head: up to kMaxHeadDim values.
using HeadAcc = float[kMaxHeadDim];

// KvT is the cache's element (float, f16 bits or q8 codes); K and V are widened exactly as
// they are loaded (or, for block sizes that are not a multiple of 16, gathered into f32 a
// tile at a time).
template <typename KvT>
struct Avx512Attention {
  // Online softmax step for heads [0, n) (n <= kMaxBlockHeads): each head's scores become
  // weights exp(s - new max), and alpha[j] the factor that rescales what head j accumulated
  // before (0 on the first tile). The heads' horizontal max and sum reductions run
  // together (Reduce512x8), and each step for all heads before the next, so their latency
  // chains overlap; each head's arithmetic is the same as one head alone.
  QUILL_AVX512_TARGET static void Softmax(float (*scores)[kTile], int n, int skip, int count,
                                          int padded, float* running_max, float* running_sum,
                                          float* alpha) {
    static_assert(kMaxBlockHeads == 8);
    __m512 lanes[kMaxBlockHeads];
    for (int j = 0; j < kMaxBlockHeads; ++j) {
      __m512 tile_max = _mm512_set1_ps(kNegInf);  // heads past n: ignored
      if (j < n) {
        for (int g = 0; g < padded; g += 16) {
          tile_max = _mm512_max_ps(tile_max, _mm512_load_ps(scores[j] + g));
        }
      }
      lanes[j] = tile_max;
    }
    float tile_max[kMaxBlockHeads];
    ReduceMax512x8(lanes, tile_max);
    float new_max[kMaxBlockHeads];
    for (int j = 0; j < n; ++j) {
      new_max[j] = std::max(running_max[j], tile_max[j]);
      alpha[j] = RescaleFactor(running_max[j], new_max[j]);
      running_max[j] = new_max[j];
    }
    for (int j = 0; j < kMaxBlockHeads; ++j) {
      __m512 sum = _mm512_setzero_ps();
      if (j < n) {
        const __m512 vmax = _mm512_set1_ps(new_max[j]);
        for (int g = 0; g < padded; g += 16) {
          __m512 p =
              _mm512_maskz_mov_ps(LaneRange(skip - g, count - g),
                                  Exp512(_mm512_sub_ps(_mm512_load_ps(scores[j] + g), vmax)));
          // A bf16 cache weighs its values by bf16 weights: the sum is of those, so that
          // the output stays a weighted mean.
          if constexpr (kIsBf16<KvT>) p = RoundToBf16(p);
          _mm512_store_ps(scores[j] + g, p);
          sum = _mm512_add_ps(sum, p);
        }
      }
      lanes[j] = sum;
    }
    float tile_sum[kMaxBlockHeads];
    ReduceAdd512x8(lanes, tile_sum);
    for (int j = 0; j < n; ++j) running_sum[j] = std::fma(running_sum[j], alpha[j], tile_sum[j]);
  }

  // acc[h] = acc[h] * alpha[h] + sum_i weights[h][i] * V_i over chunks [c0, c0 + kChunksPerPass)
  // of kHeads heads at once, the last of them masked by `last` if kMaskLast. Prefetches the
  // same bytes of next_rows[i] + offset, i < next_count, as it reads V_i's. (Masks known at
  // compile time: an unmasked f32 load folds into its FMA; a run-time mask on every chunk
  // made f32 P.V 1.5x slower.)
  template <int kHeads, int kChunksPerPass, bool kMaskLast>
  [[gnu::always_inline]] QUILL_AVX512_TARGET static void WeightedValues(
      const KvT* const* v_rows, int64_t offset, int c0, int skip, int count, __mmask16 last,
      float (*weights)[kTile], const float* alpha, HeadAcc* acc, const KvT* const* next_rows,
      int next_count) {
    constexpr int kBytes = kChunksPerPass * 16 * sizeof(KvT);
    __m512 o[kHeads][kChunksPerPass];
    for (int h = 0; h < kHeads; ++h) {
      const __m512 a = _mm512_set1_ps(alpha[h]);
      for (int c = 0; c < kChunksPerPass; ++c) {
        o[h][c] = _mm512_mul_ps(_mm512_load_ps(acc[h] + 16 * (c0 + c)), a);
      }
    }
    for (int i = skip; i < count; ++i) {
      if (i < next_count) {
        const char* next = reinterpret_cast<const char*>(next_rows[i] + offset + 16 * c0);
        for (int b = 0; b < kBytes; b += 64) PrefetchIntoL1(next + b);
      }
      __m512 p[kHeads];
      for (int h = 0; h < kHeads; ++h) p[h] = _mm512_set1_ps(weights[h][i]);
      for (int c = 0; c < kChunksPerPass; ++c) {
        const __mmask16 mask =
            kMaskLast && c == kChunksPerPass - 1 ? last : static_cast<__mmask16>(0xffff);
        const __m512 v = LoadKv16(v_rows[i] + offset + 16 * (c0 + c), mask);
        for (int h = 0; h < kHeads; ++h) o[h][c] = _mm512_fmadd_ps(p[h], v, o[h][c]);
      }
    }
    for (int h = 0; h < kHeads; ++h) {
      for (int c = 0; c < kChunksPerPass; ++c) _mm512_store_ps(acc[h] + 16 * (c0 + c), o[h][c]);
    }
  }

  // The bf16 cache's P.V: acc[h] = acc[h] * alpha[h] + sum over the key pairs of the tile of
  // (weight, weight') . (value, value') over chunks [c0, c0 + kChunksPerPass) (16 dimensions
  // of a pair: one 64-byte line at pair_rows[2j] + offset + 32 * chunk), the last chunk
  // masked by `last` (lanes of both keys) if kMaskLast. weights[h][j] holds the bits of pair
  // j of bf16 weights (HeadTile packs them); keys outside [skip, count) weigh 0, and the value
  // of a last key's missing partner (count odd: a slot not written yet, maybe NaN) is read
  // as 0. Prefetches as WeightedValues does, a pair's line at a time.
  template <int kHeads, int kChunksPerPass, bool kMaskLast>
  [[gnu::always_inline]] QUILL_AVX512_TARGET static void WeightedPairs(
      const KvT* const* pair_rows, int64_t offset, int c0, int skip, int count, __mmask32 last,
      float (*weights)[kTile], const float* alpha, HeadAcc* acc, const KvT* const* next_rows,
      int next_count) {
    constexpr int kBytes = kChunksPerPass * 64;
    __m512 o[kHeads][kChunksPerPass];
    for (int h = 0; h < kHeads; ++h) {
      const __m512 a = _mm512_set1_ps(alpha[h]);
      for (int c = 0; c < kChunksPerPass; ++c) {
        o[h][c] = _mm512_mul_ps(_mm512_load_ps(acc[h] + 16 * (c0 + c)), a);
      }
    }
    for (int j = skip / 2; 2 * j < count; ++j) {
      // A last key of odd `count` is a pair alone: its partner's lanes load as 0.
      const __mmask32 whole = 2 * j + 1 < count ? 0xffffffffu : 0x55555555u;
      if (2 * j < next_count) {
        const char* next = reinterpret_cast<const char*>(next_rows[2 * j] + offset + 32 * c0);
        for (int b = 0; b < kBytes; b += 64) PrefetchIntoL1(next + b);
      }
      __m512bh p[kHeads];
      // (A float load and broadcast keep the word's bits.)
      for (int h = 0; h < kHeads; ++h) {
        p[h] = (__m512bh)_mm512_castps_si512(_mm512_set1_ps(weights[h][j]));
      }
      const KvT* row = pair_rows[2 * j] + offset + 32 * c0;
      for (int c = 0; c < kChunksPerPass; ++c) {
        const __mmask32 mask = kMaskLast && c == kChunksPerPass - 1 ? whole & last : whole;
        const __m512bh v =
            (__m512bh)(mask == 0xffffffffu ? _mm512_loadu_si512(row + 32 * c)
                                           : _mm512_maskz_loadu_epi16(mask, row + 32 * c));
        for (int h = 0; h < kHeads; ++h) o[h][c] = _mm512_dpbf16_ps(o[h][c], v, p[h]);
      }
    }
    for (int h = 0; h < kHeads; ++h) {
      for (int c = 0; c < kChunksPerPass; ++c) _mm512_store_ps(acc[h] + 16 * (c0 + c), o[h][c]);
    }
  }

  // P.V of kHeads heads, in passes over the keys of as many chunks as kMaxAccumulators allow
  // (the pack kWidths counts them): each V element is loaded (and widened) once per pass.
  template <int kHeads, int... kWidths>
  QUILL_AVX512_TARGET static void HeadsValues(std::integer_sequence<int, kWidths...>,
                                              const KvT* const* v_rows, int64_t offset, int skip,
                                              int count, HeadChunks chunks, float (*weights)[kTile],
                                              const float* alpha, HeadAcc* acc,
                                              const KvT* const* next_rows, int next_count) {
    constexpr int kPass = sizeof...(kWidths);
    // A partial last chunk (head_dim % 16 != 0, rare) gets a pass of its own.
    const bool partial = chunks.last != 0xffff;
    const int full = chunks.count - partial;
    for (int c0 = 0; c0 < full; c0 += kPass) {
      const int width = std::min(kPass, full - c0);
      ((width == kWidths + 1
            ? ValuesPass<kHeads, kWidths + 1, false>(v_rows, offset, c0, skip, count, chunks.last,
                                                     weights, alpha, acc, next_rows, next_count)
            : void()),
       ...);
    }
    if (partial) {
      ValuesPass<kHeads, 1, true>(v_rows, offset, full, skip, count, chunks.last, weights, alpha,
                                  acc, next_rows, next_count);
    }
  }

  // One P.V pass: over keys, or over key pairs for a bf16 cache (whose masks cover both
  // keys' lanes of each dimension).
  template <int kHeads, int kChunksPerPass, bool kMaskLast>
  [[gnu::always_inline]] QUILL_AVX512_TARGET static void ValuesPass(
      const KvT* const* v_rows, int64_t offset, int c0, int skip, int count, __mmask16 last,
      float (*weights)[kTile], const float* alpha, HeadAcc* acc, const KvT* const* next_rows,
      int next_count) {
    if constexpr (kIsBf16<KvT>) {
      const int lanes = __builtin_popcount(last);  // `last` is a run of low lanes
      const __mmask32 pair_last = lanes >= 16 ? 0xffffffffu : (1u << (2 * lanes)) - 1;
      WeightedPairs<kHeads, kChunksPerPass, kMaskLast>(v_rows, offset, c0, skip, count, pair_last,
                                                       weights, alpha, acc, next_rows, next_count);
    } else {
      WeightedValues<kHeads, kChunksPerPass, kMaskLast>(v_rows, offset, c0, skip, count, last,
                                                        weights, alpha, acc, next_rows, next_count);
    }
  }

  template <int... kHeads>
  QUILL_AVX512_TARGET static void HeadsValuesN(int n, std::integer_sequence<int, kHeads...>,
                                               const KvT* const* v_rows, int64_t offset, int skip,
                                               int count, HeadChunks chunks,
                                               float (*weights)[kTile], const float* alpha,
                                               HeadAcc* acc, const KvT* const* next_rows,
                                               int next_count) {
    ((n == kHeads + 1
          ? HeadsValues<kHeads + 1>(
                std::make_integer_sequence<int, std::max(1, kMaxAccumulators / (kHeads + 1))>{},
                v_rows, offset, skip, count, chunks, weights, alpha, acc, next_rows, next_count)
          : void()),
     ...);
  }

  // The scores, softmax step and P.V of query heads [first, first + n) of the item (one
  // KV head's group, or a run of it) over one tile: its keys' columns for this KV head at
  // key_cols[g] + d * key_stride (group g of 16 keys), its value rows at v_rows[i] + offset.
  // The passes of the first 8 heads prefetch the next tile's keys and values, next_cols[g]
  // (its (next_count + 15) / 16 groups) and next_rows[i] + offset (i < next_count).
  // For a q8 or bf16 cache, qq holds the item's packed heads; t0 is the tile's first
  // position.
  QUILL_AVX512_TARGET static void HeadTile(const float* q, const PackedQuery* qq, int t0, int first,
                                           int n, const KvT* const* key_cols, int64_t key_stride,
                                           const KvT* const* v_rows, int64_t offset, int skip,
                                           int count, int padded, HeadChunks chunks, const Item& it,
                                           const KvT* const* next_cols, const KvT* const* next_rows,
                                           int next_count, float (*scores)[kTile], float* alpha,
                                           float* running_max, float* running_sum, HeadAcc* acc) {
    KeyScores<KvT>::Scores(q, qq, first, n, it.layout.head_dim, key_cols, key_stride, skip, count,
                           padded / 16, next_cols, (next_count + 15) / 16, it.scale, it.softcap,
                           scores + first);
    for (int j = first; j < first + n; j += kMaxBlockHeads) {
      Softmax(scores + j, std::min(kMaxBlockHeads, first + n - j), skip, count, padded,
              running_max + j, running_sum + j, alpha + j);
    }
    if constexpr (kIsQ8<KvT>) {
      // P.V weighs each value's codes by its probability times its scale.
      const int bs = it.layout.block_size;
      for (int g = 0; 16 * g < padded; ++g) {
        const int r = (t0 + 16 * g) % bs;
        const __m512 value_scales =
            _mm512_loadu_ps(ValueScalesQ8(v_rows[16 * g] + offset, it.layout, r));
        for (int j = first; j < first + n; ++j) {
          _mm512_store_ps(scores[j] + 16 * g,
                          _mm512_mul_ps(_mm512_load_ps(scores[j] + 16 * g), value_scales));
        }
      }
    }
    if constexpr (kIsBf16<KvT>) {
      // P.V takes each pair of (already bf16) weights as one word: packed in place, word j
      // of row h from weights 2j and 2j + 1, each 64-byte store after the loads it covers.
      for (int j = first; j < first + n; ++j) {
        for (int g = 0; g < padded; g += 32) {
          const __m512 lo = _mm512_load_ps(scores[j] + g);
          const __m512 hi =
              g + 16 < padded ? _mm512_load_ps(scores[j] + g + 16) : _mm512_setzero_ps();
          _mm512_store_si512(scores[j] + g / 2, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
        }
      }
    }
    for (int j = first; j < first + n; j += kMaxBlockHeads) {
      HeadsValuesN(std::min(kMaxBlockHeads, first + n - j),
                   std::make_integer_sequence<int, kMaxBlockHeads>{}, v_rows, offset, skip, count,
                   chunks, scores + j, alpha + j, acc + j, next_rows, j == first ? next_count : 0);
    }
  }

  // rows[i] + offset, i in [begin, end), widened to f32 into out[i] (exact).
  QUILL_AVX512_TARGET static void WidenRows(const KvT* const* rows, int64_t offset, int begin,
                                            int end, HeadChunks chunks, HeadAcc* out) {
    for (int i = begin; i < end; ++i) {
      for (int c = 0; c < chunks.count; ++c) {
        _mm512_store_ps(out[i] + 16 * c, LoadKv16(rows[i] + offset + 16 * c, chunks.Mask(c)));
      }
    }
  }

  // The keys of the KV head at `offset` (dimension d at keys[i] + offset + d * stride) of
  // the tile's first `groups` groups of 16 keys, gathered one by one and widened to f32 into
  // out[d][16 * g + lane] (exact; lanes past `count` get 0).
  QUILL_AVX512_TARGET static void GatherKeys(const KvT* const* keys, int64_t stride, int64_t offset,
                                             int head_dim, int groups, int count,
                                             float (*out)[kTile]) {
    for (int d = 0; d < head_dim; ++d) {
      for (int i = 0; i < 16 * groups; ++i) {
        out[d][i] = i < count ? KvToFloat(keys[i][offset + d * stride]) : 0.0f;
      }
    }
  }

  QUILL_AVX512_TARGET static void Attend(const Item& it) {
    const int num_heads = it.head_end - it.head_begin;
    const int hd = it.layout.head_dim;
    alignas(64) float scores[kMaxHeadsPerItem][kTile];
    alignas(64) HeadAcc acc[kMaxHeadsPerItem];
    float running_max[kMaxHeadsPerItem];
    float running_sum[kMaxHeadsPerItem];
    float alpha[kMaxHeadsPerItem];
    // Slots of this tile and of the next, whose K and V lines a decode row prefetches while
    // it computes on this tile's.
    const KvT* key_slots[2][kTile];
    const KvT* value_slots[2][kTile];
    const KvT** keys = key_slots[0];
    const KvT** v_rows = value_slots[0];
    const KvT** next_keys = key_slots[1];
    const KvT** next_v_rows = value_slots[1];
    const HeadChunks chunks(hd);
    const int64_t bs = it.layout.block_size;
    // Blocks of a multiple of 16 slots hold each group of 16 keys contiguously, which the
    // kernels read in place. Other block sizes have each tile's K and V of a KV head
    // gathered into f32 copies first.
    const bool contiguous = bs % 16 == 0;
    using Wide = Avx512Attention<float>;
    alignas(64) float wide_k[kMaxHeadDim][kTile];
    alignas(64) HeadAcc wide_v[kTile];
    const float* wide_cols[kTile / 16];
    const float* wide_v_rows[kTile];
    for (int g = 0; g < kTile / 16; ++g) wide_cols[g] = wide_k[0] + 16 * g;
    for (int i = 0; i < kTile; ++i) wide_v_rows[i] = wide_v[i];
    const KvT* head_cols[kTile / 16];
    const KvT* next_head_cols[kTile / 16];

    for (int h = 0; h < num_heads; ++h) {
      running_max[h] = kNegInf;
      running_sum[h] = 0.0f;
      for (int c = 0; c < chunks.count; ++c) _mm512_store_ps(acc[h] + 16 * c, _mm512_setzero_ps());
    }
    PackedQuery packed_query;
    if constexpr (kIsQ8<KvT>) {
      QuantizeQuery(it.q + static_cast<int64_t>(it.head_begin) * hd, num_heads, hd, it.scale,
                    &packed_query);
    } else if constexpr (kIsBf16<KvT>) {
      RoundQueryBf16(it.q + static_cast<int64_t>(it.head_begin) * hd, num_heads, hd, &packed_query);
    }
    const int first_tile = FirstTile(it.first_key);
    TileSlots(it, first_tile, std::min(kTile, it.num_keys - first_tile), keys, v_rows);
    for (int t0 = first_tile; t0 < it.num_keys; t0 += kTile) {
      const int count = std::min(kTile, it.num_keys - t0);
      const int skip = std::max(0, it.first_key - t0);  // keys before the window
      const int padded = (count + 15) / 16 * 16;
      const int groups = padded / 16;
      const int next_count = std::clamp(it.num_keys - t0 - kTile, 0, kTile);
      TileSlots(it, t0 + kTile, next_count, next_keys, next_v_rows);
      // What of the next tile the compute loops prefetch: nothing without it.prefetch.
      const int prefetch_keys = it.prefetch && contiguous ? next_count : 0;

      // One KV head (and the item's query heads that read it) at a time.
      for (int h = it.head_begin; h < it.head_end;) {
        const int kv = h / it.group;
        const int end = std::min(it.head_end, (kv + 1) * it.group);
        const int first = h - it.head_begin;
        const int n = end - h;
        const int64_t offset = kv * it.layout.head_stride();
        const float* q = it.q + static_cast<int64_t>(h) * hd;
        if (contiguous) {
          // Lanes past the last key compute on valid slots of its block and are masked out.
          for (int g = 0; g < groups; ++g) head_cols[g] = keys[16 * g] + offset;
          for (int g = 0; 16 * g < prefetch_keys; ++g) {
            next_head_cols[g] = next_keys[16 * g] + offset;
            if constexpr (kIsQ8<KvT>) {
              // The next tile's key and value scales: a line per 16 keys each.
              const int r = (t0 + kTile + 16 * g) % bs;
              PrefetchIntoL1(next_head_cols[g] + bs * hd);
              PrefetchIntoL1(ValueScalesQ8(next_v_rows[16 * g] + offset, it.layout, r));
            }
          }
          HeadTile(q, &packed_query, t0, first, n, head_cols, bs, v_rows, offset, skip, count,
                   padded, chunks, it, next_head_cols, next_v_rows, prefetch_keys, scores, alpha,
                   running_max, running_sum, acc);
        } else if constexpr (!kIsQ8<KvT> && !kIsBf16<KvT>) {  // both need blocks of 16k slots
          GatherKeys(keys, bs, offset, hd, groups, count, wide_k);
          WidenRows(v_rows, offset, skip, count, chunks, wide_v);
          Wide::HeadTile(q, nullptr, t0, first, n, wide_cols, kTile, wide_v_rows, 0, skip, count,
                         padded, chunks, it, nullptr, nullptr, 0, scores, alpha, running_max,
                         running_sum, acc);
        }
        h = end;
      }
      std::swap(keys, next_keys);
      std::swap(v_rows, next_v_rows);
    }

    for (int h = 0; h < num_heads; ++h) {
      const __m512 denom = _mm512_set1_ps(running_sum[h]);
      float* out = it.out + static_cast<int64_t>(it.head_begin + h) * hd;
      for (int c = 0; c < chunks.count; ++c) {
        _mm512_mask_storeu_ps(out + 16 * c, chunks.Mask(c),
                              _mm512_div_ps(_mm512_load_ps(acc[h] + 16 * c), denom));
      }
    }
  }
};

using AttendFn = void (*)(const Item&);

// ---- Portable --------------------------------------------------------------------------

// The same tiles and online softmax in scalar code; each dot product and output sum runs in
// a fixed order, so it too is batch-invariant. Its scores are the AVX-512 path's bits (the
// same FMA chain over head_dim, or for q8 the same integer dot and scalings); exp and tanh
// differ. For bf16 it rounds the query and the weights as the AVX-512 path does, but sums
// in its own order (one product at a time).
template <typename KvT>
void AttendPortable(const Item& it) {
  float scores[kTile];
  const KvT* keys[kTile];
  const KvT* v_rows[kTile];
  float acc[kMaxHeadDim];
  int8_t q_codes[kMaxHeadDim];
  float q_bf16[kMaxHeadDim];
  const int hd = it.layout.head_dim;
  const int bs = it.layout.block_size;
  for (int h = it.head_begin; h < it.head_end; ++h) {
    const float* q = it.q + static_cast<int64_t>(h) * hd;
    const int64_t offset = h / it.group * it.layout.head_stride();
    float q_factor = 0.0f;  // q8: the query's scale * the score scale
    if constexpr (kIsQ8<KvT>) q_factor = QuantizeRowQ8(q, hd, q_codes) * it.scale;
    if constexpr (kIsBf16<KvT>) {
      for (int d = 0; d < hd; ++d) q_bf16[d] = Bf16ToFloat(FloatToBf16(q[d]));
      q = q_bf16;
    }
    float running_max = kNegInf;
    float running_sum = 0.0f;
    std::fill(acc, acc + hd, 0.0f);
    for (int t0 = FirstTile(it.first_key); t0 < it.num_keys; t0 += kTile) {
      const int count = std::min(kTile, it.num_keys - t0);
      const int skip = std::max(0, it.first_key - t0);  // keys before the window
      TileSlots(it, t0, count, keys, v_rows);
      float tile_max = kNegInf;
      for (int i = skip; i < count; ++i) {
        const KvT* k = keys[i] + offset;
        if constexpr (kIsQ8<KvT>) {
          int32_t dot = 0;
          for (int d = 0; d < hd; ++d) {
            dot += q_codes[d] * (static_cast<uint8_t>(k[d / 4 * 4 * bs + d % 4]) - 128);
          }
          float key_scale;
          std::memcpy(&key_scale, k + int64_t{bs} * hd, sizeof key_scale);
          scores[i] = static_cast<float>(dot) * key_scale * q_factor;
        } else if constexpr (kIsBf16<KvT>) {
          float dot = 0.0f;
          for (int d = 0; d < hd; ++d) {
            dot = std::fma(q[d], KvToFloat(k[d / 2 * 2 * bs + d % 2]), dot);
          }
          scores[i] = dot * it.scale;
        } else {
          float dot = 0.0f;
          for (int d = 0; d < hd; ++d) dot = std::fma(q[d], KvToFloat(k[d * bs]), dot);
          scores[i] = dot * it.scale;
        }
        if (it.softcap > 0.0f) scores[i] = it.softcap * std::tanh(scores[i] / it.softcap);
        tile_max = std::max(tile_max, scores[i]);
      }
      const float new_max = std::max(running_max, tile_max);
      const float alpha = RescaleFactor(running_max, new_max);
      running_max = new_max;
      float sum = 0.0f;
      for (int i = skip; i < count; ++i) {
        scores[i] = std::exp(scores[i] - new_max);
        if constexpr (kIsBf16<KvT>) scores[i] = Bf16ToFloat(FloatToBf16(scores[i]));
        sum += scores[i];
      }
      running_sum = std::fma(running_sum, alpha, sum);
      for (int d = 0; d < hd; ++d) acc[d] *= alpha;
      for (int i = skip; i < count; ++i) {
        const KvT* v = v_rows[i] + offset;
        float weight = scores[i];
        if constexpr (kIsQ8<KvT>) {
          const int r = (t0 + i) % bs;
          weight *= *ValueScalesQ8(v, it.layout, r);
        }
        // A bf16 value's dimensions are 2 apart (beside its pair partner's).
        constexpr int kStep = kIsBf16<KvT> ? 2 : 1;
        for (int d = 0; d < hd; ++d) acc[d] = std::fma(weight, KvToFloat(v[d * kStep]), acc[d]);
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
// of 1 (quill-attention-bench, f16, 2 threads). Splitting that query's keys instead (each
// thread all 32 heads over half the keys, reading whole blocks; a timing-only throwaway
// without the merge) took 0.92-0.95x the time, before paying for a merge step and a
// rounding change. Built whole later (every query's keys cut into 512-key partitions at
// fixed positions, each its own online softmax, the states merged in position order, so a
// row's bits never depend on the split; attention_test bit-exact), it took 0.88-0.91x the
// time at 4,096 keys over 22 layers in consecutive blocks, but 1.06x with the keys in
// cache, 1.06-1.12x for a q8 cache (the merges cost what the reads saved), and quill-bench
// --depth 4096 --profile on Q4_K_M showed no gain (attention's time over 128 decode steps
// 528-545 ms against 427-596, 3 alternated runs): not kept.
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

  AttendFn attend = nullptr;
  switch (layout.element) {
    case KvElement::kF32:
      attend = UseAvx512() ? &Avx512Attention<float>::Attend : &AttendPortable<float>;
      break;
    case KvElement::kF16:
      attend = UseAvx512() ? &Avx512Attention<uint16_t>::Attend : &AttendPortable<uint16_t>;
      break;
    case KvElement::kQ8:
      QUILL_CHECK(layout.block_size % 16 == 0 && hd % 4 == 0);
      attend = UseAvx512() ? &Avx512Attention<Q8>::Attend : &AttendPortable<Q8>;
      break;
    case KvElement::kBf16:
      QUILL_CHECK(layout.block_size % 16 == 0 && hd % 2 == 0);
      attend = UseAvx512() ? &Avx512Attention<Bf16>::Attend : &AttendPortable<Bf16>;
      break;
  }
  const int64_t row = static_cast<int64_t>(n_heads) * hd;

  const auto attend_item = [&](int64_t index) {
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
    it.layout = layout;
    it.scale = params.scale;
    it.softcap = params.softcap;
    it.prefetch = seq.num_q == 1;
    attend(it);
  };
  // One item (a decode row whose heads need no split) runs inline: an OpenMP region with
  // an if clause still enters libgomp (parallel_for.h).
  if (total == 1) {
    attend_item(0);
    return;
  }
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t index = 0; index < total; ++index) attend_item(index);
}

}  // namespace quill::engine::kernels
