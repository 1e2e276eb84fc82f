#include "engine/kernels/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine/base/float16.h"
#include "engine/kernels/kernel_test_util.h"
#include "engine/kernels/reference/reference_kernels.h"
#include "gtest/gtest.h"

namespace quill::engine::kernels {
namespace {

using testing::MaxAbsDiff;
using testing::Path;
using testing::PathName;
using testing::PathTest;
using testing::RandomVector;

constexpr int kBlockSize = 16;

// A paged cache holding several sequences whose blocks are scattered over the pool.
struct PagedCache {
  KvLayout layout;
  std::vector<float> k, v;
  std::vector<std::vector<int32_t>> tables;  // one per sequence
};

PagedCache MakeCache(const std::vector<int>& lengths, int n_kv, int head_dim, uint64_t seed) {
  PagedCache c;
  c.layout = {kBlockSize, n_kv, head_dim};
  int total_blocks = 0;
  for (int len : lengths) total_blocks += (len + kBlockSize - 1) / kBlockSize;
  total_blocks += 3;  // some blocks nobody owns
  std::vector<int32_t> ids(total_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937_64(seed));
  size_t next = 0;
  for (int len : lengths) {
    c.tables.emplace_back();
    for (int b = 0; b < (len + kBlockSize - 1) / kBlockSize; ++b) c.tables.back().push_back(ids[next++]);
  }
  const int64_t floats = int64_t{total_blocks} * kBlockSize * n_kv * head_dim;
  c.k = RandomVector(floats, seed + 1);
  c.v = RandomVector(floats, seed + 2);
  return c;
}

struct Shape {
  int head_dim, n_heads, n_kv;
};

std::string ShapeName(const Shape& s) {
  return "hd" + std::to_string(s.head_dim) + "_h" + std::to_string(s.n_heads) + "_kv" +
         std::to_string(s.n_kv);
}

// Runs one batch; returns out (rows x n_heads x head_dim).
std::vector<float> RunAttention(bool use_reference, const PagedCache& c,
                                const std::vector<float>& q,
                                const std::vector<AttentionSequence>& seqs, int n_heads,
                                const AttentionParams& params) {
  std::vector<float> out(q.size(), std::nanf(""));
  if (use_reference) {
    reference::PagedAttention(q.data(), c.k.data(), c.v.data(), c.layout, seqs, n_heads, params,
                              out.data());
  } else {
    PagedAttention(q.data(), c.k.data(), c.v.data(), c.layout, seqs, n_heads, params, out.data());
  }
  return out;
}

std::vector<float> RunAttention(bool use_reference, const PagedCache& c,
                                const std::vector<float>& q,
                                const std::vector<AttentionSequence>& seqs, int n_heads,
                                float scale) {
  return RunAttention(use_reference, c, q, seqs, n_heads, AttentionParams{scale});
}

// One batch over c's 6 sequences (of `lengths`, the last at least 300 long): each as a
// whole prefill, then a decode row of each, then a prefill chunk in the middle of sequence
// 4 and the last chunk of sequence 5. *rows: the batch's query rows.
std::vector<AttentionSequence> MixedBatch(const PagedCache& c, const std::vector<int>& lengths,
                                          int* rows) {
  std::vector<AttentionSequence> seqs;
  *rows = 0;
  auto add = [&](int i, int first_pos, int num_q) {
    seqs.push_back({c.tables[i].data(), *rows, num_q, first_pos});
    *rows += num_q;
  };
  for (int i = 0; i < 6; ++i) add(i, 0, lengths[i]);
  for (int i = 0; i < 6; ++i) add(i, lengths[i] - 1, 1);
  add(4, 40, 60);
  add(5, 250, 50);
  return seqs;
}

class AttentionTest : public PathTest {};

const std::vector<Shape> kShapes = {
    {32, 4, 2},  {64, 4, 2}, {128, 4, 2},  // GQA
    {64, 8, 1},                            // MQA
    {64, 4, 4},                            // MHA
    {8, 4, 2},   {4, 2, 2},  {24, 6, 3},   // the tiny test models, and a ragged head_dim
    {256, 2, 1},
};

// Each KV head's part of a block is one run of memory, in K and in V, and the heads' parts
// tile the block: attention with one KV head reads a block's part in one sweep. Within a
// block, consecutive slots are 1 apart in K and head_dim apart in V, which the kernel's
// slot table relies on. The correctness tests cannot see this: any one-to-one layout passes
// them.
TEST(KvLayoutTest, EachKvHeadsPartOfABlockIsOneRun) {
  for (const KvLayout& layout : {KvLayout{16, 4, 64}, KvLayout{24, 3, 24}, KvLayout{8, 1, 8}}) {
    const int bs = layout.block_size, hd = layout.head_dim;
    const int64_t block = 3;
    const int64_t block_begin = block * bs * layout.row();
    for (bool keys : {true, false}) {
      SCOPED_TRACE(std::string(keys ? "K" : "V") + " block_size " + std::to_string(bs));
      auto index = [&](int64_t slot, int kv, int d) {
        return keys ? layout.KeyIndex(slot, kv, d) : layout.ValueIndex(slot, kv, d);
      };
      std::vector<int> seen(bs * layout.row(), 0);
      for (int kv = 0; kv < layout.num_kv_heads; ++kv) {
        const int64_t part = block_begin + kv * layout.head_stride();
        for (int i = 0; i < bs; ++i) {
          for (int d = 0; d < hd; ++d) {
            const int64_t at = index(block * bs + i, kv, d);
            ASSERT_GE(at, part);
            ASSERT_LT(at, part + int64_t{bs} * hd);
            ++seen[at - block_begin];
            if (i > 0) {
              EXPECT_EQ(at - index(block * bs + i - 1, kv, d), keys ? 1 : hd);
            }
          }
        }
      }
      EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), static_cast<int64_t>(seen.size()));
    }
  }
}

// Decode rows, whole prefills and mid-sequence chunks of sequences of lengths 1..300.
TEST_P(AttentionTest, MatchesReference) {
  const std::vector<int> lengths = {1, 15, 16, 17, 100, 300};
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(ShapeName(s));
    const PagedCache c = MakeCache(lengths, s.n_kv, s.head_dim, s.head_dim * 31 + s.n_heads);
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
    int rows = 0;
    const std::vector<AttentionSequence> seqs = MixedBatch(c, lengths, &rows);
    const std::vector<float> q = RandomVector(int64_t{rows} * s.n_heads * s.head_dim, 77, -2, 2);
    const std::vector<float> got = RunAttention(false, c, q, seqs, s.n_heads, scale);
    // The reference is slow; both path instances share its result.
    static std::map<std::string, std::vector<float>>* cache =
        new std::map<std::string, std::vector<float>>();
    std::vector<float>& want = (*cache)[ShapeName(s)];
    if (want.empty()) want = RunAttention(true, c, q, seqs, s.n_heads, scale);
    EXPECT_LT(MaxAbsDiff(got, want), 2e-6);
  }
}

// Large scores (sharp softmax) stress the running max and rescaling.
TEST_P(AttentionTest, SharpSoftmaxMatchesReference) {
  const Shape s{64, 4, 2};
  PagedCache c = MakeCache({300}, s.n_kv, s.head_dim, 5);
  for (float& x : c.k) x *= 6.0f;
  std::vector<AttentionSequence> seqs = {{c.tables[0].data(), 0, 300, 0}};
  const std::vector<float> q = RandomVector(300 * s.n_heads * s.head_dim, 6, -3, 3);
  const std::vector<float> got = RunAttention(false, c, q, seqs, s.n_heads, 0.125f);
  const std::vector<float> want = RunAttention(true, c, q, seqs, s.n_heads, 0.125f);
  EXPECT_LT(MaxAbsDiff(got, want), 2e-5);
}

// The same query gives the same bits alone, inside a batch of 8 other sequences, in a
// whole prefill, in a chunked prefill, and on one or two threads.
TEST_P(AttentionTest, BatchInvariantBitForBit) {
  for (const Shape& s : {Shape{64, 32, 4}, Shape{128, 4, 2}, Shape{64, 8, 8}, Shape{8, 4, 2}}) {
    SCOPED_TRACE(ShapeName(s));
    const std::vector<int> lengths = {300, 1, 15, 16, 17, 100, 64, 65, 129};
    const PagedCache c = MakeCache(lengths, s.n_kv, s.head_dim, 11);
    const int row = s.n_heads * s.head_dim;
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
    // Query rows for sequence 0 (all 300 positions); other sequences reuse random rows.
    const std::vector<float> q0 = RandomVector(300 * row, 12, -2, 2);

    // (a) Whole prefill of sequence 0.
    std::vector<AttentionSequence> whole = {{c.tables[0].data(), 0, 300, 0}};
    const std::vector<float> ref = RunAttention(false, c, q0, whole, s.n_heads, scale);

    // (b) Chunked prefill: [0, 100), [100, 163), [163, 300).
    std::vector<float> chunked(q0.size());
    for (auto [begin, end] : {std::pair{0, 100}, std::pair{100, 163}, std::pair{163, 300}}) {
      std::vector<float> qc(q0.begin() + begin * row, q0.begin() + end * row);
      std::vector<AttentionSequence> chunk = {{c.tables[0].data(), 0, end - begin, begin}};
      const std::vector<float> out = RunAttention(false, c, qc, chunk, s.n_heads, scale);
      std::copy(out.begin(), out.end(), chunked.begin() + begin * row);
    }
    EXPECT_EQ(std::memcmp(chunked.data(), ref.data(), ref.size() * 4), 0) << "chunked";

    for (int pos : {0, 15, 16, 63, 64, 65, 200, 299}) {
      const std::vector<float> qp(q0.begin() + pos * row, q0.begin() + (pos + 1) * row);
      // (c) Alone, as a decode row.
      std::vector<AttentionSequence> alone = {{c.tables[0].data(), 0, 1, pos}};
      const std::vector<float> one = RunAttention(false, c, qp, alone, s.n_heads, scale);
      EXPECT_EQ(std::memcmp(one.data(), ref.data() + pos * row, row * 4), 0) << "alone " << pos;

      // (d) In the middle of a batch with 8 other sequences (decode rows and a prefill).
      std::vector<AttentionSequence> batch;
      int rows = 0;
      for (int i = 1; i <= 4; ++i) {
        batch.push_back({c.tables[i].data(), rows, 1, lengths[i] - 1});
        rows += 1;
      }
      const int mine = rows;
      batch.push_back({c.tables[0].data(), rows++, 1, pos});
      batch.push_back({c.tables[5].data(), rows, 100, 0});
      rows += 100;
      for (int i = 6; i <= 8; ++i) {
        batch.push_back({c.tables[i].data(), rows, 1, lengths[i] - 1});
        rows += 1;
      }
      std::vector<float> qb = RandomVector(int64_t{rows} * row, 13 + pos, -2, 2);
      std::copy(qp.begin(), qp.end(), qb.begin() + mine * row);
      const std::vector<float> batched = RunAttention(false, c, qb, batch, s.n_heads, scale);
      EXPECT_EQ(std::memcmp(batched.data() + mine * row, ref.data() + pos * row, row * 4), 0)
          << "in batch " << pos;
    }

    // (e) One thread.
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    const std::vector<float> single = RunAttention(false, c, q0, whole, s.n_heads, scale);
    omp_set_num_threads(threads);
    EXPECT_EQ(std::memcmp(single.data(), ref.data(), ref.size() * 4), 0) << "one thread";
  }
}

// Empty batches and sequences without new tokens are fine and write nothing.
TEST_P(AttentionTest, EmptyWork) {
  const PagedCache c = MakeCache({16}, 2, 32, 3);
  std::vector<float> out(4 * 32, 7.0f);
  const std::vector<float> q(4 * 32, 1.0f);
  PagedAttention(q.data(), c.k.data(), c.v.data(), c.layout, {}, 4, 0.1f, out.data());
  const std::vector<AttentionSequence> none = {{c.tables[0].data(), 0, 0, 5}};
  PagedAttention(q.data(), c.k.data(), c.v.data(), c.layout, none, 4, 0.1f, out.data());
  for (float x : out) EXPECT_EQ(x, 7.0f);
}

// Position 0 attends to itself only: the output is its own V row.
TEST_P(AttentionTest, FirstPositionReturnsItsValue) {
  const PagedCache c = MakeCache({1}, 1, 64, 4);
  const std::vector<float> q = RandomVector(2 * 64, 5);
  std::vector<float> out(q.size());
  const std::vector<AttentionSequence> seqs = {{c.tables[0].data(), 0, 1, 0}};
  PagedAttention(q.data(), c.k.data(), c.v.data(), c.layout, seqs, 2, 0.125f, out.data());
  const float* v = c.v.data() + int64_t{c.tables[0][0]} * kBlockSize * 64;
  for (int h = 0; h < 2; ++h) {
    for (int d = 0; d < 64; ++d) EXPECT_FLOAT_EQ(out[h * 64 + d], v[d]);
  }
}

// Soft-capped scores and sliding windows (alone and together), against the reference, on
// odd shapes: windows shorter than a tile, crossing tile and block boundaries, and longer
// than the sequence.
TEST_P(AttentionTest, SoftCapAndWindowMatchReference) {
  const std::vector<int> lengths = {1, 17, 100, 300};
  for (const Shape& s : {Shape{32, 4, 2}, Shape{24, 6, 3}, Shape{64, 8, 1}, Shape{256, 2, 1}}) {
    const PagedCache c = MakeCache(lengths, s.n_kv, s.head_dim, s.head_dim + 7);
    std::vector<AttentionSequence> seqs;
    int rows = 0;
    for (int i = 0; i < 4; ++i) {
      seqs.push_back({c.tables[i].data(), rows, lengths[i], 0});
      rows += lengths[i];
    }
    seqs.push_back({c.tables[3].data(), rows, 1, 299});
    rows += 1;
    seqs.push_back({c.tables[3].data(), rows, 37, 130});
    rows += 37;
    // Large queries so the cap bites (|scores| well past the cap).
    const std::vector<float> q = RandomVector(int64_t{rows} * s.n_heads * s.head_dim, 8, -4, 4);
    for (const AttentionParams params :
         {AttentionParams{0.25f, 10.0f, 0}, AttentionParams{0.25f, 0.0f, 1},
          AttentionParams{0.25f, 0.0f, 5}, AttentionParams{0.25f, 0.0f, 64},
          AttentionParams{0.25f, 0.0f, 100}, AttentionParams{0.25f, 10.0f, 32},
          AttentionParams{0.25f, 50.0f, 1000}}) {
      SCOPED_TRACE(ShapeName(s) + " softcap " + std::to_string(params.softcap) + " window " +
                   std::to_string(params.window));
      const std::vector<float> got = RunAttention(false, c, q, seqs, s.n_heads, params);
      const std::vector<float> want = RunAttention(true, c, q, seqs, s.n_heads, params);
      EXPECT_LT(MaxAbsDiff(got, want), 1e-5);
    }
  }
}

// Independent of the reference: a window of 1 sees only the query's own key, so the output
// is its own V row; a window covering everything equals no window, bit for bit.
TEST_P(AttentionTest, WindowEdgeCases) {
  const int hd = 40, n_heads = 4, n_kv = 2, len = 150;
  const PagedCache c = MakeCache({len}, n_kv, hd, 21);
  const std::vector<float> q = RandomVector(int64_t{len} * n_heads * hd, 22, -2, 2);
  const std::vector<AttentionSequence> seqs = {{c.tables[0].data(), 0, len, 0}};
  const std::vector<float> own = RunAttention(false, c, q, seqs, n_heads, {0.3f, 0.0f, 1});
  for (int pos : {0, 15, 16, 64, 149}) {
    const int64_t slot = int64_t{c.tables[0][pos / kBlockSize]} * kBlockSize + pos % kBlockSize;
    for (int h = 0; h < n_heads; ++h) {
      const float* v = c.v.data() + c.layout.ValueIndex(slot, h / (n_heads / n_kv), 0);
      const float* o = own.data() + (int64_t{pos} * n_heads + h) * hd;
      for (int d = 0; d < hd; ++d) ASSERT_EQ(o[d], v[d]) << pos << " " << h << " " << d;
    }
  }
  const std::vector<float> all = RunAttention(false, c, q, seqs, n_heads, {0.3f, 0.0f, 0});
  const std::vector<float> wide = RunAttention(false, c, q, seqs, n_heads, {0.3f, 0.0f, len});
  EXPECT_EQ(std::memcmp(all.data(), wide.data(), all.size() * 4), 0);
}

// Batch invariance with a window and a soft-cap: a query gives the same bits alone, chunked,
// and inside a batch.
TEST_P(AttentionTest, WindowAndSoftCapBatchInvariantBitForBit) {
  const Shape s{32, 4, 2};
  const AttentionParams params{0.2f, 10.0f, 32};
  const std::vector<int> lengths = {200, 17, 100};
  const PagedCache c = MakeCache(lengths, s.n_kv, s.head_dim, 31);
  const int row = s.n_heads * s.head_dim;
  const std::vector<float> q0 = RandomVector(200 * row, 32, -3, 3);
  const std::vector<AttentionSequence> whole = {{c.tables[0].data(), 0, 200, 0}};
  const std::vector<float> ref = RunAttention(false, c, q0, whole, s.n_heads, params);
  std::vector<float> chunked(q0.size());
  for (auto [begin, end] : {std::pair{0, 31}, std::pair{31, 97}, std::pair{97, 200}}) {
    std::vector<float> qc(q0.begin() + begin * row, q0.begin() + end * row);
    std::vector<AttentionSequence> chunk = {{c.tables[0].data(), 0, end - begin, begin}};
    const std::vector<float> out = RunAttention(false, c, qc, chunk, s.n_heads, params);
    std::copy(out.begin(), out.end(), chunked.begin() + begin * row);
  }
  EXPECT_EQ(std::memcmp(chunked.data(), ref.data(), ref.size() * 4), 0) << "chunked";
  for (int pos : {0, 31, 32, 33, 63, 64, 95, 199}) {
    const std::vector<float> qp(q0.begin() + pos * row, q0.begin() + (pos + 1) * row);
    std::vector<AttentionSequence> batch = {{c.tables[1].data(), 0, 17, 0},
                                            {c.tables[0].data(), 17, 1, pos},
                                            {c.tables[2].data(), 18, 1, 99}};
    std::vector<float> qb = RandomVector(19 * row, 40 + pos, -3, 3);
    std::copy(qp.begin(), qp.end(), qb.begin() + 17 * row);
    const std::vector<float> batched = RunAttention(false, c, qb, batch, s.n_heads, params);
    EXPECT_EQ(std::memcmp(batched.data() + 17 * row, ref.data() + pos * row, row * 4), 0)
        << "in batch " << pos;
  }
}

// An f16 cache: the attention of its values is, bit for bit, the attention an f32 cache of
// the same values (widened) gives, so every f32 property above holds for it too. Decode
// rows, whole and chunked prefills, a window and a soft-cap, ragged head_dims.
TEST_P(AttentionTest, F16CacheGivesTheBitsOfItsWidenedValues) {
  for (const Shape& s : {Shape{64, 32, 4}, Shape{24, 6, 3}, Shape{128, 4, 2}, Shape{8, 4, 2}}) {
    SCOPED_TRACE(ShapeName(s));
    const std::vector<int> lengths = {300, 1, 17, 100};
    const PagedCache c = MakeCache(lengths, s.n_kv, s.head_dim, 21);
    std::vector<uint16_t> k16(c.k.size()), v16(c.v.size());
    StoreKvRow(c.k.data(), static_cast<int64_t>(c.k.size()), KvElement::kF16, k16.data(), 0);
    StoreKvRow(c.v.data(), static_cast<int64_t>(c.v.size()), KvElement::kF16, v16.data(), 0);
    PagedCache widened = c;
    for (size_t i = 0; i < c.k.size(); ++i) {
      widened.k[i] = Fp16ToFloat(k16[i]);
      widened.v[i] = Fp16ToFloat(v16[i]);
    }
    KvLayout layout16 = c.layout;
    layout16.element = KvElement::kF16;

    std::vector<AttentionSequence> seqs;
    int rows = 0;
    auto add = [&](int i, int first_pos, int num_q) {
      seqs.push_back({c.tables[i].data(), rows, num_q, first_pos});
      rows += num_q;
    };
    add(0, 0, 300);
    add(1, 0, 1);
    add(2, 16, 1);
    add(3, 37, 63);
    const int row = s.n_heads * s.head_dim;
    const std::vector<float> q = RandomVector(int64_t{rows} * row, 22, -2, 2);
    for (const AttentionParams& params :
         {AttentionParams{0.125f}, AttentionParams{0.2f, 30.0f, 50}}) {
      std::vector<float> want(q.size()), got(q.size(), std::nanf(""));
      PagedAttention(q.data(), widened.k.data(), widened.v.data(), widened.layout, seqs, s.n_heads,
                     params, want.data());
      PagedAttention(q.data(), k16.data(), v16.data(), layout16, seqs, s.n_heads, params,
                     got.data());
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0)
          << "window " << params.window;
    }
  }
}

// `c`'s sequences (of `lengths`) in a cache of another block size: the same K and V at
// every position, the blocks shuffled, and every slot no sequence owns NaN (lanes past a
// sequence's last key read such slots and must not leak into a result).
PagedCache Relayout(const PagedCache& c, const std::vector<int>& lengths, int block_size) {
  PagedCache r;
  r.layout = c.layout;
  r.layout.block_size = block_size;
  int total_blocks = 3;
  for (int len : lengths) total_blocks += (len + block_size - 1) / block_size;
  std::vector<int32_t> ids(total_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937_64(block_size));
  r.k.assign(int64_t{total_blocks} * block_size * c.layout.row(), std::nanf(""));
  r.v = r.k;
  size_t next = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    r.tables.emplace_back();
    for (int b = 0; b < (lengths[i] + block_size - 1) / block_size; ++b) {
      r.tables.back().push_back(ids[next++]);
    }
    for (int pos = 0; pos < lengths[i]; ++pos) {
      const int64_t from = int64_t{c.tables[i][pos / kBlockSize]} * kBlockSize + pos % kBlockSize;
      const int64_t to = int64_t{r.tables[i][pos / block_size]} * block_size + pos % block_size;
      for (int kv = 0; kv < c.layout.num_kv_heads; ++kv) {
        for (int d = 0; d < c.layout.head_dim; ++d) {
          r.k[r.layout.KeyIndex(to, kv, d)] = c.k[c.layout.KeyIndex(from, kv, d)];
          r.v[r.layout.ValueIndex(to, kv, d)] = c.v[c.layout.ValueIndex(from, kv, d)];
        }
      }
    }
  }
  return r;
}

// The block size decides where keys live (contiguous lanes in blocks of a multiple of 16
// slots, gathered otherwise), never a result: the same sequences give the same bits with
// blocks of 8, 16, 24, 32 and 48 slots, in f32 and in f16, for GQA groups of 8 and 2 and
// lone heads.
TEST_P(AttentionTest, BlockSizeNeverChangesTheBits) {
  for (const Shape& s : {Shape{64, 32, 4}, Shape{24, 6, 3}, Shape{64, 4, 4}, Shape{8, 4, 2}}) {
    SCOPED_TRACE(ShapeName(s));
    const std::vector<int> lengths = {300, 1, 17, 100};
    const PagedCache base = MakeCache(lengths, s.n_kv, s.head_dim, 41);
    const int row = s.n_heads * s.head_dim;
    const int rows = 300 + 1 + 1 + 63;
    const std::vector<float> q = RandomVector(int64_t{rows} * row, 42, -2, 2);
    auto run = [&](const PagedCache& c, KvElement element) {
      const std::vector<AttentionSequence> seqs = {{c.tables[0].data(), 0, 300, 0},
                                                   {c.tables[1].data(), 300, 1, 0},
                                                   {c.tables[2].data(), 301, 1, 16},
                                                   {c.tables[3].data(), 302, 63, 37}};
      std::vector<float> out(q.size(), std::nanf(""));
      KvLayout layout = c.layout;
      layout.element = element;
      if (element == KvElement::kF32) {
        PagedAttention(q.data(), c.k.data(), c.v.data(), layout, seqs, s.n_heads, 0.125f,
                       out.data());
      } else {
        std::vector<uint16_t> k16(c.k.size()), v16(c.v.size());
        StoreKvRow(c.k.data(), static_cast<int64_t>(c.k.size()), element, k16.data(), 0);
        StoreKvRow(c.v.data(), static_cast<int64_t>(c.v.size()), element, v16.data(), 0);
        PagedAttention(q.data(), k16.data(), v16.data(), layout, seqs, s.n_heads, 0.125f,
                       out.data());
      }
      return out;
    };
    for (const KvElement element : {KvElement::kF32, KvElement::kF16}) {
      const std::vector<float> want = run(Relayout(base, lengths, 16), element);
      for (const float x : want) ASSERT_FALSE(std::isnan(x));
      for (int block_size : {8, 24, 32, 48}) {
        const std::vector<float> got = run(Relayout(base, lengths, block_size), element);
        EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0)
            << KvElementName(element) << " blocks of " << block_size;
      }
    }
  }
}

// ---- q8 cache ----

// c's K and V stored in the element's arena (every slot, owned or not), with the layout.
struct StoredCache {
  KvLayout layout;
  std::vector<uint8_t> k, v;
};

StoredCache Store(const PagedCache& c, KvElement element) {
  StoredCache stored;
  stored.layout = c.layout;
  stored.layout.element = element;
  const KvLayout& from = c.layout;
  const int64_t slots = static_cast<int64_t>(c.k.size()) / from.row();
  const int64_t bytes = slots * stored.layout.row() * KvElementBytes(element);
  stored.k.assign(bytes, 0xEE);
  stored.v.assign(bytes, 0xEE);
  std::vector<float> key(from.head_dim), value(from.head_dim);
  for (int64_t slot = 0; slot < slots; ++slot) {
    for (int kv = 0; kv < from.num_kv_heads; ++kv) {
      for (int d = 0; d < from.head_dim; ++d) {
        key[d] = c.k[from.KeyIndex(slot, kv, d)];
        value[d] = c.v[from.ValueIndex(slot, kv, d)];
      }
      StoreKey(key.data(), stored.layout, stored.k.data(), slot, kv);
      StoreValue(value.data(), stored.layout, stored.v.data(), slot, kv);
    }
  }
  return stored;
}

// What a q8 cache holds, decoded from its bytes as kv_element.h lays them out: code *
// scale, with keys offset by 128.
PagedCache Dequantized(const PagedCache& c, const StoredCache& q8) {
  PagedCache d = c;
  const KvLayout& l = q8.layout;
  const int64_t slots = static_cast<int64_t>(c.k.size()) / c.layout.row();
  for (int64_t slot = 0; slot < slots; ++slot) {
    for (int kv = 0; kv < l.num_kv_heads; ++kv) {
      float k_scale, v_scale;
      std::memcpy(&k_scale, q8.k.data() + l.ScaleIndex(slot, kv), 4);
      std::memcpy(&v_scale, q8.v.data() + l.ScaleIndex(slot, kv), 4);
      for (int i = 0; i < l.head_dim; ++i) {
        d.k[c.layout.KeyIndex(slot, kv, i)] = (q8.k[l.KeyIndex(slot, kv, i)] - 128) * k_scale;
        d.v[c.layout.ValueIndex(slot, kv, i)] =
            static_cast<int8_t>(q8.v[l.ValueIndex(slot, kv, i)]) * v_scale;
      }
    }
  }
  return d;
}

// Each query head replaced by its q8 row's values (code * scale), as a q8 score sees it.
std::vector<float> DequantizedQueries(const std::vector<float>& q, int head_dim) {
  std::vector<float> out(q.size());
  std::vector<int8_t> codes(head_dim);
  for (size_t h = 0; h < q.size(); h += head_dim) {
    const float scale = QuantizeRowQ8(q.data() + h, head_dim, codes.data());
    for (int d = 0; d < head_dim; ++d) out[h + d] = codes[d] * scale;
  }
  return out;
}

std::vector<float> RunStored(const StoredCache& c, const std::vector<float>& q,
                             const std::vector<AttentionSequence>& seqs, int n_heads,
                             const AttentionParams& params) {
  std::vector<float> out(q.size(), std::nanf(""));
  PagedAttention(q.data(), c.k.data(), c.v.data(), c.layout, seqs, n_heads, params, out.data());
  return out;
}

// What a cache of some element holds, in c's layout and as floats: its K and V (from the
// stored cache; unowned slots may be NaN) and a query as its scores take it.
struct HeldValues {
  std::function<PagedCache(const PagedCache& c, const StoredCache& stored)> cache;
  std::function<std::vector<float>(const std::vector<float>& q, int head_dim)> queries;
};

// `element`'s cache computes attention over the values it holds: the reference (in double)
// over the held keys, values and queries agrees within `tolerance`, for every shape, with
// soft-caps and windows (odd and even first keys), for decode rows, whole prefills and
// chunks. The cache's unowned slots are NaN (a bf16 pair reads one beside a last key at an
// odd count: lengths 1, 15, 17).
void ExpectMatchesReferenceOnHeldValues(KvElement element, const std::vector<Shape>& shapes,
                                        const HeldValues& held, double tolerance) {
  const std::vector<int> lengths = {1, 15, 16, 17, 100, 300};
  for (const Shape& s : shapes) {
    SCOPED_TRACE(ShapeName(s));
    const PagedCache c = Relayout(
        MakeCache(lengths, s.n_kv, s.head_dim, s.head_dim * 13 + s.n_heads), lengths, kBlockSize);
    const StoredCache stored = Store(c, element);
    const PagedCache held_cache = held.cache(c, stored);
    int rows = 0;
    const std::vector<AttentionSequence> seqs = MixedBatch(c, lengths, &rows);
    const std::vector<float> q = RandomVector(int64_t{rows} * s.n_heads * s.head_dim, 78, -2, 2);
    const std::vector<float> held_q = held.queries(q, s.head_dim);
    for (const AttentionParams params :
         {AttentionParams{0.125f}, AttentionParams{0.25f, 10.0f, 0},
          AttentionParams{0.25f, 0.0f, 5}, AttentionParams{0.2f, 30.0f, 70}}) {
      SCOPED_TRACE("softcap " + std::to_string(params.softcap) + " window " +
                   std::to_string(params.window));
      const std::vector<float> got = RunStored(stored, q, seqs, s.n_heads, params);
      // The reference is slow; both path instances share its result.
      static std::map<std::string, std::vector<float>>* cache =
          new std::map<std::string, std::vector<float>>();
      std::vector<float>& want =
          (*cache)[std::string(KvElementName(element)) + "/" + ShapeName(s) + "/" +
                   std::to_string(params.softcap) + "/" + std::to_string(params.window)];
      if (want.empty()) want = RunAttention(true, held_cache, held_q, seqs, s.n_heads, params);
      EXPECT_LT(MaxAbsDiff(got, want), tolerance);
    }
  }
}

// A q8 cache agrees to rounding with the reference over the dequantized keys, values and
// queries, for GQA, MQA and MHA.
TEST_P(AttentionTest, Q8MatchesReferenceOnItsDequantizedValues) {
  ExpectMatchesReferenceOnHeldValues(
      KvElement::kQ8,
      {Shape{64, 32, 4}, Shape{32, 4, 2}, Shape{128, 4, 2}, Shape{64, 8, 1}, Shape{64, 4, 4},
       Shape{8, 4, 2}, Shape{4, 2, 2}, Shape{24, 6, 3}, Shape{256, 2, 1}},
      {Dequantized, DequantizedQueries}, 1e-5);
}

// Quantizing is the only difference from the f16 cache: on the same random K, V and queries
// the outputs differ by little (the outputs are averages of values in [-1, 1]).
TEST_P(AttentionTest, Q8StaysCloseToF16) {
  const Shape s{64, 32, 4};
  const std::vector<int> lengths = {1000};
  const PagedCache c = MakeCache(lengths, s.n_kv, s.head_dim, 5);
  const std::vector<AttentionSequence> seqs = {{c.tables[0].data(), 0, 1, 999}};
  const std::vector<float> q = RandomVector(int64_t{s.n_heads} * s.head_dim, 6, -2, 2);
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  const StoredCache f16 = Store(c, KvElement::kF16);
  const StoredCache q8 = Store(c, KvElement::kQ8);
  const std::vector<float> want = RunStored(f16, q, seqs, s.n_heads, {scale});
  const std::vector<float> got = RunStored(q8, q, seqs, s.n_heads, {scale});
  const double diff = MaxAbsDiff(got, want);
  EXPECT_LT(diff, 2e-3);
  EXPECT_GT(diff, 0.0);  // it did quantize
}

// The same query gives the same bits alone, inside a batch with other sequences' decode
// rows and a prefill, in a whole and in a chunked prefill, and on one thread; and the
// block size (any multiple of 16) never changes them. Unowned slots hold NaN rows, which
// lanes past a sequence's last key read and must not leak (nor, for bf16, the NaN partner
// of a last key at an odd count: the positions tried are odd and even).
void ExpectStoredCacheBatchInvariant(KvElement element) {
  for (const Shape& s : {Shape{64, 32, 4}, Shape{128, 4, 2}, Shape{8, 4, 2}}) {
    SCOPED_TRACE(ShapeName(s));
    const std::vector<int> lengths = {300, 1, 17, 100};
    const PagedCache base = MakeCache(lengths, s.n_kv, s.head_dim, 51);
    const int row = s.n_heads * s.head_dim;
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
    const std::vector<float> q0 = RandomVector(300 * row, 52, -2, 2);
    const PagedCache c = Relayout(base, lengths, 16);
    const StoredCache stored = Store(c, element);
    const AttentionParams params{scale};

    const std::vector<AttentionSequence> whole = {{c.tables[0].data(), 0, 300, 0}};
    const std::vector<float> ref = RunStored(stored, q0, whole, s.n_heads, params);
    for (const float x : ref) ASSERT_FALSE(std::isnan(x));

    std::vector<float> chunked(q0.size());
    for (auto [begin, end] : {std::pair{0, 100}, std::pair{100, 163}, std::pair{163, 300}}) {
      const std::vector<float> qc(q0.begin() + begin * row, q0.begin() + end * row);
      const std::vector<AttentionSequence> chunk = {{c.tables[0].data(), 0, end - begin, begin}};
      const std::vector<float> out = RunStored(stored, qc, chunk, s.n_heads, params);
      std::copy(out.begin(), out.end(), chunked.begin() + begin * row);
    }
    EXPECT_EQ(std::memcmp(chunked.data(), ref.data(), ref.size() * 4), 0) << "chunked";

    for (int pos : {0, 15, 16, 64, 65, 299}) {
      const std::vector<float> qp(q0.begin() + pos * row, q0.begin() + (pos + 1) * row);
      const std::vector<AttentionSequence> alone = {{c.tables[0].data(), 0, 1, pos}};
      const std::vector<float> one = RunStored(stored, qp, alone, s.n_heads, params);
      EXPECT_EQ(std::memcmp(one.data(), ref.data() + pos * row, row * 4), 0) << "alone " << pos;

      const std::vector<AttentionSequence> batch = {{c.tables[1].data(), 0, 1, 0},
                                                    {c.tables[0].data(), 1, 1, pos},
                                                    {c.tables[3].data(), 2, 100, 0},
                                                    {c.tables[2].data(), 102, 1, 16}};
      std::vector<float> qb = RandomVector(103 * row, 53 + pos, -2, 2);
      std::copy(qp.begin(), qp.end(), qb.begin() + row);
      const std::vector<float> batched = RunStored(stored, qb, batch, s.n_heads, params);
      EXPECT_EQ(std::memcmp(batched.data() + row, ref.data() + pos * row, row * 4), 0)
          << "in batch " << pos;
    }

    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    const std::vector<float> single = RunStored(stored, q0, whole, s.n_heads, params);
    omp_set_num_threads(threads);
    EXPECT_EQ(std::memcmp(single.data(), ref.data(), ref.size() * 4), 0) << "one thread";

    for (int block_size : {32, 48}) {
      const PagedCache other = Relayout(base, lengths, block_size);
      const StoredCache other_stored = Store(other, element);
      const std::vector<AttentionSequence> seqs = {{other.tables[0].data(), 0, 300, 0}};
      const std::vector<float> got = RunStored(other_stored, q0, seqs, s.n_heads, params);
      EXPECT_EQ(std::memcmp(got.data(), ref.data(), ref.size() * 4), 0)
          << "blocks of " << block_size;
    }
  }
}

TEST_P(AttentionTest, Q8BatchInvariantBitForBit) {
  ExpectStoredCacheBatchInvariant(KvElement::kQ8);
}

// ---- bf16 cache ----

TEST_P(AttentionTest, Bf16BatchInvariantBitForBit) {
  ExpectStoredCacheBatchInvariant(KvElement::kBf16);
}

// A bf16 cache computes attention over the values it holds, with the query rounded to bf16
// as well: the reference (in double) over the rounded keys, values and queries agrees to
// within what rounding the softmax weights to bf16 can move a weighted mean of values in
// [-1, 1] (weights w_i (1 + e_i) / (1 + sum w e), |e_i| <= 2^-9, move it by at most
// 2 * 2^-9 / (1 - 2^-9) < 4e-3; measured up to 1.7e-3), for GQA, MQA and MHA and head sizes
// of whole, partial (24) and lone partial (4) 16-lane chunks.
TEST_P(AttentionTest, Bf16MatchesReferenceOnItsRoundedValues) {
  const auto rounded = [](std::vector<float> x) {
    for (float& v : x) v = Bf16ToFloat(FloatToBf16(v));
    return x;
  };
  const HeldValues held{[&](const PagedCache& c, const StoredCache&) {
                          PagedCache r = c;
                          r.k = rounded(c.k);
                          r.v = rounded(c.v);
                          return r;
                        },
                        [&](const std::vector<float>& q, int) { return rounded(q); }};
  ExpectMatchesReferenceOnHeldValues(
      KvElement::kBf16,
      {Shape{64, 32, 4}, Shape{128, 4, 2}, Shape{64, 8, 1}, Shape{64, 4, 4}, Shape{4, 2, 2},
       Shape{24, 6, 3}, Shape{256, 2, 1}},
      held, 4e-3);
}

// Rounding to bf16 is the difference from the f16 cache: on the same random K, V and
// queries the outputs differ by little, and not by nothing.
TEST_P(AttentionTest, Bf16StaysCloseToF16) {
  const Shape s{64, 32, 4};
  const std::vector<int> lengths = {1000};
  const PagedCache c = MakeCache(lengths, s.n_kv, s.head_dim, 7);
  const std::vector<AttentionSequence> seqs = {{c.tables[0].data(), 0, 1, 999}};
  const std::vector<float> q = RandomVector(int64_t{s.n_heads} * s.head_dim, 8, -2, 2);
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  const std::vector<float> want = RunStored(Store(c, KvElement::kF16), q, seqs, s.n_heads, {scale});
  const std::vector<float> got = RunStored(Store(c, KvElement::kBf16), q, seqs, s.n_heads, {scale});
  const double diff = MaxAbsDiff(got, want);
  EXPECT_LT(diff, 2e-3);
  EXPECT_GT(diff, 0.0);  // it did round
}

INSTANTIATE_TEST_SUITE_P(Paths, AttentionTest, ::testing::Values(Path::kAvx512, Path::kPortable),
                         [](const ::testing::TestParamInfo<Path>& info) {
                           return std::string(PathName(info.param));
                         });

}  // namespace
}  // namespace quill::engine::kernels
