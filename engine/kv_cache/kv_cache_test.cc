#include "engine/kv_cache/kv_cache.h"

#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace quill::engine {
namespace {

KvCacheOptions SmallOptions(int blocks) {
  KvCacheOptions o;
  o.num_layers = 3;
  o.num_kv_heads = 2;
  o.head_dim = 8;
  o.block_size_tokens = 16;
  // bytes per token = 2 * 3 * 2 * 8 * 4 = 384; block = 6144 bytes.
  o.budget_bytes = int64_t{6144} * blocks + 100;  // a partial block's worth is ignored
  return o;
}

std::unique_ptr<KvCache> MakeCache(int blocks) {
  auto cache = KvCache::Create(SmallOptions(blocks));
  EXPECT_TRUE(cache.ok()) << cache.status();
  return cache.ok() ? std::move(cache).value() : nullptr;
}

TEST(KvCacheTest, ByteAccounting) {
  auto cache = MakeCache(10);
  ASSERT_NE(cache, nullptr);
  EXPECT_EQ(cache->bytes_per_token(), 2 * 3 * 2 * 8 * 4);
  EXPECT_EQ(cache->block_bytes(), 384 * 16);
  EXPECT_EQ(cache->block_size(), 16);
  EXPECT_EQ(cache->num_blocks(), 10);
  EXPECT_EQ(cache->num_free_blocks(), 10);
  EXPECT_EQ(cache->num_used_blocks(), 0);
  EXPECT_EQ(cache->total_bytes(), 10 * 6144);
  EXPECT_EQ(cache->used_bytes(), 0);
  EXPECT_EQ(cache->layout().block_size, 16);
  EXPECT_EQ(cache->layout().num_kv_heads, 2);
  EXPECT_EQ(cache->layout().head_dim, 8);

  ASSERT_TRUE(cache->Reserve(7, 17).ok());
  EXPECT_EQ(cache->num_used_blocks(), 2);
  EXPECT_EQ(cache->used_bytes(), 2 * 6144);
  EXPECT_EQ(cache->capacity_tokens(7), 32);
}

TEST(KvCacheTest, F16ElementsHalveTheBytesAndDoubleTheBlocks) {
  KvCacheOptions o = SmallOptions(10);
  o.element = kernels::KvElement::kF16;
  auto cache = KvCache::Create(o);
  ASSERT_TRUE(cache.ok()) << cache.status();
  EXPECT_EQ((*cache)->bytes_per_token(), 2 * 3 * 2 * 8 * 2);
  EXPECT_EQ((*cache)->block_bytes(), 192 * 16);
  EXPECT_EQ((*cache)->num_blocks(), 20);  // the f32 cache's budget holds 10
  EXPECT_EQ((*cache)->layout().element, kernels::KvElement::kF16);
  // The last element of the last slot is inside the arena (ASan checks the write).
  const int64_t elements = int64_t{20} * 16 * 2 * 8;
  static_cast<uint16_t*>((*cache)->k_data(2))[elements - 1] = 0x3c00;
  static_cast<uint16_t*>((*cache)->v_data(2))[elements - 1] = 0x3c00;
}

// Options `o` with each (block size, head size) of `shapes` are refused as invalid.
void ExpectRefused(const KvCacheOptions& o, std::initializer_list<std::pair<int, int>> shapes) {
  for (const auto& [block_size, head_dim] : shapes) {
    KvCacheOptions bad = o;
    bad.block_size_tokens = block_size;
    bad.head_dim = head_dim;
    bad.budget_bytes = int64_t{1} << 24;
    const auto refused = KvCache::Create(bad);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument)
        << kernels::KvElementName(o.element) << " " << block_size << " " << head_dim;
  }
}

// q8: head_dim codes and a 4-byte scale per head row; blocks of 16k slots and heads of a
// multiple of 4 only.
TEST(KvCacheTest, Q8RowsAreCodesAndAScale) {
  KvCacheOptions o = SmallOptions(10);
  o.element = kernels::KvElement::kQ8;
  auto cache = KvCache::Create(o);
  ASSERT_TRUE(cache.ok()) << cache.status();
  EXPECT_EQ((*cache)->bytes_per_token(), 2 * 3 * 2 * (8 + 4));
  EXPECT_EQ((*cache)->layout().element, kernels::KvElement::kQ8);
  // The last byte of the last slot (its scale's) is inside the arena (ASan checks the write).
  const int64_t bytes = int64_t{(*cache)->num_blocks()} * 16 * (*cache)->layout().row();
  static_cast<uint8_t*>((*cache)->k_data(2))[bytes - 1] = 1;
  static_cast<uint8_t*>((*cache)->v_data(2))[bytes - 1] = 1;

  ExpectRefused(o, {{8, 8}, {24, 8}, {16, 6}, {16, 260}});
}

// bf16: f16's bytes; blocks of 16k slots and even heads only (its V pairs slots, its K
// pairs dimensions).
TEST(KvCacheTest, Bf16RowsAreTwoBytesPerValue) {
  KvCacheOptions o = SmallOptions(10);
  o.element = kernels::KvElement::kBf16;
  auto cache = KvCache::Create(o);
  ASSERT_TRUE(cache.ok()) << cache.status();
  EXPECT_EQ((*cache)->bytes_per_token(), 2 * 3 * 2 * 8 * 2);
  EXPECT_EQ((*cache)->layout().element, kernels::KvElement::kBf16);
  ExpectRefused(o, {{8, 8}, {24, 8}, {16, 7}, {16, 258}});
}

TEST(KvCacheTest, BlocksForTokens) {
  auto cache = MakeCache(4);
  ASSERT_NE(cache, nullptr);
  EXPECT_EQ(cache->BlocksForTokens(0), 0);
  EXPECT_EQ(cache->BlocksForTokens(1), 1);
  EXPECT_EQ(cache->BlocksForTokens(16), 1);
  EXPECT_EQ(cache->BlocksForTokens(17), 2);
  EXPECT_EQ(cache->BlocksForTokens(100), 7);
}

TEST(KvCacheTest, CreateRejectsBadOptions) {
  KvCacheOptions o = SmallOptions(4);
  o.head_dim = 0;
  EXPECT_EQ(KvCache::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = SmallOptions(4);
  o.num_layers = -1;
  EXPECT_EQ(KvCache::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = SmallOptions(4);
  o.block_size_tokens = 0;
  EXPECT_EQ(KvCache::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = SmallOptions(4);
  o.budget_bytes = 6143;  // less than one block
  EXPECT_EQ(KvCache::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(KvCacheTest, ArenasAreZeroedAndWritable) {
  auto cache = MakeCache(3);
  ASSERT_NE(cache, nullptr);
  const int64_t floats = int64_t{3} * 16 * 2 * 8;
  for (int layer = 0; layer < 3; ++layer) {
    float* k = static_cast<float*>(cache->k_data(layer));
    float* v = static_cast<float*>(cache->v_data(layer));
    ASSERT_NE(k, nullptr);
    ASSERT_NE(v, nullptr);
    EXPECT_NE(k, v);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(k) % 64, 0u);
    for (int64_t i = 0; i < floats; ++i) {
      ASSERT_EQ(k[i], 0.0f);
      ASSERT_EQ(v[i], 0.0f);
    }
    k[floats - 1] = 1.0f;  // the last slot is inside the arena
    v[floats - 1] = 1.0f;
  }
}

TEST(KvCacheTest, LargeArenasAreHugePageAligned) {
  KvCacheOptions o;
  o.num_layers = 2;
  o.num_kv_heads = 1;
  o.head_dim = 64;
  o.block_size_tokens = 16;
  o.budget_bytes = int64_t{8} << 20;  // 2 MiB per arena
  auto cache = KvCache::Create(o);
  ASSERT_TRUE(cache.ok()) << cache.status();
  EXPECT_EQ((*cache)->num_blocks(), 512);
  for (int layer = 0; layer < 2; ++layer) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>((*cache)->k_data(layer)) % (2 << 20), 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>((*cache)->v_data(layer)) % (2 << 20), 0u);
  }
}

TEST(KvCacheTest, SlotFollowsBlockTable) {
  auto cache = MakeCache(8);
  ASSERT_NE(cache, nullptr);
  ASSERT_TRUE(cache->Reserve(1, 5).ok());   // seq 1 takes one block
  ASSERT_TRUE(cache->Reserve(2, 40).ok());  // seq 2 takes three
  ASSERT_TRUE(cache->Reserve(1, 20).ok());  // seq 1 grows to two blocks
  const auto table = cache->block_table(2);
  ASSERT_EQ(table.size(), 3u);
  for (int64_t pos : {0, 1, 15, 16, 31, 32, 39}) {
    EXPECT_EQ(cache->Slot(2, pos), table[pos / 16] * 16 + pos % 16) << pos;
  }
  // Every (sequence, position) maps to a distinct slot.
  std::set<int64_t> slots;
  for (int64_t pos = 0; pos < cache->capacity_tokens(1); ++pos) slots.insert(cache->Slot(1, pos));
  for (int64_t pos = 0; pos < cache->capacity_tokens(2); ++pos) slots.insert(cache->Slot(2, pos));
  EXPECT_EQ(slots.size(), 5u * 16);
  for (int64_t s : slots) {
    EXPECT_GE(s, 0);
    EXPECT_LT(s, int64_t{8} * 16);
  }
}

TEST(KvCacheTest, CanReserveDoesNotMutate) {
  auto cache = MakeCache(4);
  ASSERT_NE(cache, nullptr);
  EXPECT_TRUE(cache->CanReserve(3, 64));
  EXPECT_FALSE(cache->CanReserve(3, 65));
  EXPECT_FALSE(cache->Contains(3));
  EXPECT_EQ(cache->num_free_blocks(), 4);
  EXPECT_EQ(cache->AdditionalBlocksNeeded(3, 33), 3);
  ASSERT_TRUE(cache->Reserve(3, 16).ok());
  EXPECT_EQ(cache->AdditionalBlocksNeeded(3, 16), 0);
  EXPECT_EQ(cache->AdditionalBlocksNeeded(3, 10), 0);
  EXPECT_EQ(cache->AdditionalBlocksNeeded(3, 17), 1);
  EXPECT_TRUE(cache->CanReserve(3, 64));
  EXPECT_FALSE(cache->CanReserve(4, 64));
  EXPECT_EQ(cache->num_free_blocks(), 3);
  EXPECT_EQ(cache->capacity_tokens(3), 16);
  EXPECT_FALSE(cache->Contains(4));
}

TEST(KvCacheTest, ReserveIsAllOrNothing) {
  auto cache = MakeCache(5);
  ASSERT_NE(cache, nullptr);
  ASSERT_TRUE(cache->Reserve(1, 48).ok());  // 3 blocks
  const std::vector<int32_t> before(cache->block_table(1).begin(), cache->block_table(1).end());
  // Needs 3 more, only 2 free.
  const absl::Status grow = cache->Reserve(1, 96);
  EXPECT_EQ(grow.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(cache->num_free_blocks(), 2);
  EXPECT_THAT(cache->block_table(1), ::testing::ElementsAreArray(before));
  EXPECT_EQ(cache->capacity_tokens(1), 48);
  // A new sequence that does not fit is not created.
  EXPECT_EQ(cache->Reserve(2, 33).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_FALSE(cache->Contains(2));
  EXPECT_EQ(cache->num_free_blocks(), 2);
  // Exactly the rest fits.
  EXPECT_TRUE(cache->Reserve(2, 32).ok());
  EXPECT_EQ(cache->num_free_blocks(), 0);
  EXPECT_EQ(cache->Reserve(3, 1).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(cache->Reserve(3, 0).ok());  // zero tokens need no blocks
  EXPECT_EQ(cache->capacity_tokens(3), 0);
  EXPECT_EQ(cache->Reserve(3, -1).code(), absl::StatusCode::kInvalidArgument);
}

TEST(KvCacheTest, ReleaseReturnsEverythingAndUnknownIsNoop) {
  auto cache = MakeCache(6);
  ASSERT_NE(cache, nullptr);
  cache->Release(42);  // unknown: no-op
  ASSERT_TRUE(cache->Reserve(1, 50).ok());
  ASSERT_TRUE(cache->Reserve(2, 20).ok());
  EXPECT_EQ(cache->num_free_blocks(), 0);
  cache->Release(1);
  EXPECT_FALSE(cache->Contains(1));
  EXPECT_EQ(cache->capacity_tokens(1), 0);
  EXPECT_TRUE(cache->block_table(1).empty());
  EXPECT_EQ(cache->num_free_blocks(), 4);
  cache->Release(1);  // twice: still a no-op
  EXPECT_EQ(cache->num_free_blocks(), 4);
  cache->Release(2);
  EXPECT_EQ(cache->num_free_blocks(), 6);
  EXPECT_EQ(cache->num_used_blocks(), 0);
  EXPECT_EQ(cache->used_bytes(), 0);
}

// Many rounds of random growth and release against a model of the expected holdings.
TEST(KvCacheTest, RandomAllocateReleaseNeverDoubleAllocates) {
  constexpr int kBlocks = 64;
  auto cache = MakeCache(kBlocks);
  ASSERT_NE(cache, nullptr);
  std::mt19937_64 rng(12345);
  std::map<KvCache::SeqId, int64_t> tokens;  // the model: live sequence -> reserved tokens
  KvCache::SeqId next_id = 100;
  int exhausted = 0;
  for (int round = 0; round < 5000; ++round) {
    const int action = static_cast<int>(rng() % 10);
    if (action < 5 || tokens.empty()) {
      // Grow an existing sequence or start a new one.
      KvCache::SeqId seq = next_id;
      if (!tokens.empty() && rng() % 2 == 0) {
        auto it = tokens.begin();
        std::advance(it, rng() % tokens.size());
        seq = it->first;
      }
      const int64_t current = tokens.count(seq) ? tokens[seq] : 0;
      const int64_t want = current + static_cast<int64_t>(rng() % 200);
      const int needed = cache->AdditionalBlocksNeeded(seq, want);
      const int free_before = cache->num_free_blocks();
      ASSERT_EQ(cache->CanReserve(seq, want), needed <= free_before);
      ASSERT_EQ(cache->num_free_blocks(), free_before);
      const absl::Status status = cache->Reserve(seq, want);
      if (needed <= free_before) {
        ASSERT_TRUE(status.ok()) << status;
        tokens[seq] = want;
        if (seq == next_id) ++next_id;
        ASSERT_EQ(cache->num_free_blocks(), free_before - needed);
      } else {
        ASSERT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
        ASSERT_EQ(cache->num_free_blocks(), free_before);
        ++exhausted;
      }
    } else {
      auto it = tokens.begin();
      std::advance(it, rng() % tokens.size());
      cache->Release(it->first);
      tokens.erase(it);
    }
    // Invariants: tables are disjoint, sized as the model says, and account for all blocks.
    std::set<int32_t> seen;
    int held = 0;
    for (const auto& [seq, n] : tokens) {
      ASSERT_TRUE(cache->Contains(seq));
      const auto table = cache->block_table(seq);
      ASSERT_EQ(static_cast<int>(table.size()), cache->BlocksForTokens(n));
      ASSERT_GE(cache->capacity_tokens(seq), n);
      for (int32_t b : table) {
        ASSERT_GE(b, 0);
        ASSERT_LT(b, kBlocks);
        ASSERT_TRUE(seen.insert(b).second) << "block " << b << " allocated twice";
      }
      held += static_cast<int>(table.size());
    }
    ASSERT_EQ(cache->num_used_blocks(), held);
    ASSERT_EQ(cache->num_free_blocks(), kBlocks - held);
  }
  EXPECT_GT(exhausted, 0) << "the test should also exercise exhaustion";
  for (const auto& [seq, n] : tokens) cache->Release(seq);
  EXPECT_EQ(cache->num_free_blocks(), kBlocks);
  EXPECT_EQ(cache->num_used_blocks(), 0);
  // The whole pool is usable again by one sequence.
  EXPECT_TRUE(cache->Reserve(1, int64_t{kBlocks} * 16).ok());
  std::set<int32_t> all(cache->block_table(1).begin(), cache->block_table(1).end());
  EXPECT_EQ(all.size(), static_cast<size_t>(kBlocks));
}

}  // namespace
}  // namespace quill::engine
