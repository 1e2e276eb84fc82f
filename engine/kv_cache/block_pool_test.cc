// Unit tests of the content addressing (prefix_hash) and the block pool's reference
// counts, cache index and LRU eviction.

#include "engine/kv_cache/block_pool.h"

#include <algorithm>
#include <vector>

#include "engine/kv_cache/prefix_hash.h"
#include "gtest/gtest.h"

namespace quill::engine {
namespace {

constexpr int kBs = 4;

TEST(PrefixHashTest, ChainCoversEveryEarlierToken) {
  const std::vector<TokenId> a = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  std::vector<uint64_t> ha;
  ExtendBlockHashes(a, kBs, &ha);
  ASSERT_EQ(ha.size(), 2u);  // the partial third block is not hashed
  EXPECT_EQ(ha[0], HashBlock(kRootBlockHash, absl::MakeConstSpan(a).subspan(0, 4)));
  EXPECT_EQ(ha[1], HashBlock(ha[0], absl::MakeConstSpan(a).subspan(4, 4)));

  // Same second block after a different first block: both hashes differ.
  std::vector<TokenId> b = a;
  b[0] = 99;
  std::vector<uint64_t> hb;
  ExtendBlockHashes(b, kBs, &hb);
  EXPECT_NE(hb[0], ha[0]);
  EXPECT_NE(hb[1], ha[1]);

  // Extending continues the chain without recomputing.
  std::vector<TokenId> longer = a;
  longer.insert(longer.end(), {11, 12});
  std::vector<uint64_t> hl = ha;
  ExtendBlockHashes(longer, kBs, &hl);
  ASSERT_EQ(hl.size(), 3u);
  EXPECT_EQ(hl[2], HashBlock(ha[1], absl::MakeConstSpan(longer).subspan(8, 4)));

  // Order and swaps within a block matter; so does the parent.
  EXPECT_NE(HashBlock(7, std::vector<TokenId>{1, 2, 3, 4}),
            HashBlock(7, std::vector<TokenId>{2, 1, 3, 4}));
  EXPECT_NE(HashBlock(7, std::vector<TokenId>{1, 2, 3, 4}),
            HashBlock(8, std::vector<TokenId>{1, 2, 3, 4}));
  EXPECT_NE(HashBlock(7, std::vector<TokenId>{0, 0, 0}),
            HashBlock(7, std::vector<TokenId>{0, 0, 0, 0}));
}

TEST(PrefixHashTest, NoCollisionsAmongManySmallBlocks) {
  // All 4-token blocks over a 12-id alphabet under one parent: 20736 distinct hashes.
  std::vector<uint64_t> hashes;
  for (int i = 0; i < 12 * 12 * 12 * 12; ++i) {
    const std::vector<TokenId> t = {i % 12, i / 12 % 12, i / 144 % 12, i / 1728};
    hashes.push_back(HashBlock(kRootBlockHash, t));
  }
  std::sort(hashes.begin(), hashes.end());
  EXPECT_EQ(std::unique(hashes.begin(), hashes.end()), hashes.end());
}

TEST(BlockPoolTest, RefcountsAndFreeList) {
  BlockPool pool(3, kBs);
  EXPECT_EQ(pool.num_available(), 3);
  const int32_t a = pool.Allocate();
  const int32_t b = pool.Allocate();
  const int32_t c = pool.Allocate();
  EXPECT_EQ(a, 0);  // handed out in order
  EXPECT_EQ(b, 1);
  EXPECT_EQ(c, 2);
  EXPECT_EQ(pool.Allocate(), -1);
  EXPECT_EQ(pool.num_in_use(), 3);
  pool.Release(b);  // never registered: straight back to the free list
  EXPECT_EQ(pool.num_cached(), 0);
  EXPECT_EQ(pool.num_available(), 1);
  EXPECT_EQ(pool.Allocate(), b);
  pool.Release(a);
  pool.Release(b);
  pool.Release(c);
  EXPECT_EQ(pool.num_in_use(), 0);
  EXPECT_EQ(pool.num_available(), 3);
}

TEST(BlockPoolTest, RegisteredBlockIsSharedAndSurvivesRelease) {
  BlockPool pool(2, kBs);
  const std::vector<TokenId> ids = {5, 6, 7, 8};
  const int32_t a = pool.Allocate();
  const uint64_t id = pool.Register(a, /*hash=*/42, /*parent=*/0, ids);
  EXPECT_NE(id, 0u);
  EXPECT_EQ(pool.content_id(a), id);
  EXPECT_EQ(pool.Lookup(42, 0, ids), a);
  EXPECT_EQ(pool.Lookup(42, 1, ids), -1);                               // wrong parent
  EXPECT_EQ(pool.Lookup(42, 0, std::vector<TokenId>{5, 6, 7, 9}), -1);  // wrong ids
  EXPECT_EQ(pool.Lookup(43, 0, ids), -1);

  pool.Acquire(a);  // a second holder
  EXPECT_EQ(pool.refcount(a), 2);
  pool.Release(a);
  pool.Release(a);
  EXPECT_EQ(pool.refcount(a), 0);
  // Free but still cached, and counted as available.
  EXPECT_EQ(pool.num_in_use(), 0);
  EXPECT_EQ(pool.num_cached(), 1);
  EXPECT_EQ(pool.num_evictable(), 1);
  EXPECT_EQ(pool.num_available(), 2);
  EXPECT_EQ(pool.Lookup(42, 0, ids), a);
  pool.Acquire(a);  // reused from the cache
  EXPECT_EQ(pool.num_evictable(), 0);
  EXPECT_EQ(pool.num_in_use(), 1);
  pool.Release(a);
}

TEST(BlockPoolTest, CollisionIsAMissAndDuplicateNamesTheFirst) {
  BlockPool pool(3, kBs);
  const std::vector<TokenId> x = {1, 1, 1, 1};
  const std::vector<TokenId> y = {2, 2, 2, 2};
  const int32_t a = pool.Allocate();
  const int32_t b = pool.Allocate();
  const int32_t c = pool.Allocate();
  const uint64_t ida = pool.Register(a, 7, 0, x);
  // Same hash, different ids: a forced collision is refused and never returned.
  EXPECT_EQ(pool.Register(b, 7, 0, y), 0u);
  EXPECT_FALSE(pool.is_cached(b));
  EXPECT_EQ(pool.Lookup(7, 0, y), -1);
  // The same content computed twice: the copy stays private, children chain to the first.
  EXPECT_EQ(pool.Register(c, 7, 0, x), ida);
  EXPECT_FALSE(pool.is_cached(c));
  EXPECT_EQ(pool.num_cached(), 1);
  pool.Release(a);
  pool.Release(b);
  pool.Release(c);
  EXPECT_EQ(pool.num_evictable(), 1);
  EXPECT_EQ(pool.num_available(), 3);
}

TEST(BlockPoolTest, EvictsLeastRecentlyReleasedAfterTheFreeList) {
  BlockPool pool(4, kBs);
  std::vector<int32_t> blocks;
  for (int i = 0; i < 3; ++i) {
    blocks.push_back(pool.Allocate());
    pool.Register(blocks[i], 100 + i, 0, std::vector<TokenId>{i, i, i, i});
  }
  pool.Release(blocks[1]);
  pool.Release(blocks[0]);
  pool.Release(blocks[2]);  // LRU order now: 1, 0, 2
  EXPECT_EQ(pool.num_available(), 4);
  // Touching 1 again makes it the newest: order 0, 2, 1.
  pool.Acquire(blocks[1]);
  pool.Release(blocks[1]);

  const int32_t fresh = pool.Allocate();  // the never-registered block comes first
  EXPECT_EQ(fresh, 3);
  EXPECT_EQ(pool.num_cached(), 3);
  EXPECT_EQ(pool.Allocate(), blocks[0]);  // then the oldest cached block, now uncached
  EXPECT_EQ(pool.Lookup(100, 0, std::vector<TokenId>{0, 0, 0, 0}), -1);
  EXPECT_EQ(pool.Allocate(), blocks[2]);
  EXPECT_EQ(pool.Lookup(101, 0, std::vector<TokenId>{1, 1, 1, 1}), blocks[1]);
  EXPECT_EQ(pool.Allocate(), blocks[1]);
  EXPECT_EQ(pool.Allocate(), -1);
  EXPECT_EQ(pool.num_cached(), 0);
  for (int32_t b : {fresh, blocks[0], blocks[1], blocks[2]}) pool.Release(b);
  EXPECT_EQ(pool.num_available(), 4);
  EXPECT_EQ(pool.num_evictable(), 0);  // evicted blocks come back uncached
}

TEST(BlockPoolTest, HeldBlocksAreNeverEvicted) {
  BlockPool pool(2, kBs);
  const int32_t a = pool.Allocate();
  pool.Register(a, 1, 0, std::vector<TokenId>{1, 2, 3, 4});
  const int32_t b = pool.Allocate();
  EXPECT_EQ(pool.Allocate(), -1);  // a is cached but held
  EXPECT_EQ(pool.Lookup(1, 0, std::vector<TokenId>{1, 2, 3, 4}), a);
  pool.Release(a);
  pool.Release(b);
}

}  // namespace
}  // namespace quill::engine
