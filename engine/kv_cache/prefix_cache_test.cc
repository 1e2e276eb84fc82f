// Prefix caching through KvCache: matching, attaching, registering, and a randomized
// workload after which the pool is exactly as it started.

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "engine/kv_cache/kv_cache.h"
#include "engine/kv_cache/prefix_hash.h"
#include "gtest/gtest.h"

namespace quill::engine {
namespace {

constexpr int kBs = 4;
constexpr int kHeadDim = 4;

std::unique_ptr<KvCache> MakeCache(int num_blocks) {
  KvCacheOptions o;
  o.num_layers = 1;
  o.num_kv_heads = 1;
  o.head_dim = kHeadDim;
  o.block_size_tokens = kBs;
  o.budget_bytes = int64_t{2} * kHeadDim * sizeof(float) * kBs * num_blocks;
  auto cache = KvCache::Create(o);
  EXPECT_TRUE(cache.ok()) << cache.status();
  return cache.ok() ? std::move(cache).value() : nullptr;
}

// A fingerprint of tokens [0, p], computed here independently of prefix_hash: real K/V
// at position p depends on every earlier token, so a block shared after a different
// prefix must show up as a mismatch.
float PrefixFingerprint(const std::vector<TokenId>& tokens, int p) {
  uint32_t h = 17;
  for (int i = 0; i <= p; ++i) h = (h * 31 + static_cast<uint32_t>(tokens[i]) + 1) % (1u << 20);
  return static_cast<float>(h);  // exact: below 2^24
}

// Stands in for Forward: position p of `seq` gets {token, p, prefix fingerprint} in its
// V row.
void Write(KvCache& cache, KvCache::SeqId seq, const std::vector<TokenId>& tokens, int from,
           int to) {
  for (int p = from; p < to; ++p) {
    float* row =
        static_cast<float*>(cache.v_data(0)) + cache.layout().ValueIndex(cache.Slot(seq, p), 0, 0);
    row[0] = static_cast<float>(tokens[p]);
    row[1] = static_cast<float>(p);
    row[2] = PrefixFingerprint(tokens, p);
  }
}

// The V rows `seq` sees at [0, n) are exactly what `tokens` would have written.
void ExpectContent(KvCache& cache, KvCache::SeqId seq, const std::vector<TokenId>& tokens, int n) {
  for (int p = 0; p < n; ++p) {
    const float* row =
        static_cast<float*>(cache.v_data(0)) + cache.layout().ValueIndex(cache.Slot(seq, p), 0, 0);
    ASSERT_EQ(row[0], static_cast<float>(tokens[p])) << "seq " << seq << " pos " << p;
    ASSERT_EQ(row[1], static_cast<float>(p)) << "seq " << seq << " pos " << p;
    ASSERT_EQ(row[2], PrefixFingerprint(tokens, p)) << "seq " << seq << " pos " << p;
  }
}

std::vector<uint64_t> Hashes(const std::vector<TokenId>& tokens) {
  std::vector<uint64_t> h;
  ExtendBlockHashes(tokens, kBs, &h);
  return h;
}

TEST(PrefixCacheTest, SecondSequenceSharesTheFullBlocks) {
  auto cache = MakeCache(8);
  const std::vector<TokenId> a = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};  // 2 full blocks + 2
  const std::vector<uint64_t> ha = Hashes(a);
  EXPECT_EQ(cache->MatchPrefix(ha, a).blocks, 0);
  EXPECT_EQ(cache->AttachPrefix(1, ha, a), 0);
  ASSERT_TRUE(cache->Reserve(1, 12).ok());
  Write(*cache, 1, a, 0, 10);
  cache->CacheFullBlocks(1, ha, a);
  EXPECT_EQ(cache->num_cached_blocks(), 2);

  // Same first 8 ids, different tail.
  std::vector<TokenId> b = a;
  b[9] = 77;
  const std::vector<uint64_t> hb = Hashes(b);
  const KvCache::PrefixMatch m = cache->MatchPrefix(hb, b);
  EXPECT_EQ(m.blocks, 2);
  EXPECT_EQ(m.evictable_blocks, 0);  // held by sequence 1
  EXPECT_EQ(cache->AttachPrefix(2, hb, b), 2);
  ASSERT_TRUE(cache->Reserve(2, 12).ok());
  EXPECT_EQ(cache->block_table(2)[0], cache->block_table(1)[0]);
  EXPECT_EQ(cache->block_table(2)[1], cache->block_table(1)[1]);
  EXPECT_NE(cache->block_table(2)[2], cache->block_table(1)[2]);
  EXPECT_EQ(cache->block_refcount(cache->block_table(1)[0]), 2);
  EXPECT_EQ(cache->num_used_blocks(), 4);  // 2 shared + 1 each
  Write(*cache, 2, b, 8, 10);
  ExpectContent(*cache, 2, b, 10);
  ExpectContent(*cache, 1, a, 10);  // sequence 2 wrote nothing into shared blocks

  // A different first block: no match at all even though block 2's ids are equal.
  std::vector<TokenId> c = a;
  c[0] = 50;
  EXPECT_EQ(cache->MatchPrefix(Hashes(c), c).blocks, 0);

  cache->Release(1);
  cache->Release(2);
  EXPECT_EQ(cache->num_used_blocks(), 0);
  EXPECT_EQ(cache->num_free_blocks(), 8);
  EXPECT_EQ(cache->num_cached_blocks(), 2);  // kept for the next request
  const KvCache::PrefixMatch later = cache->MatchPrefix(ha, a);
  EXPECT_EQ(later.blocks, 2);
  EXPECT_EQ(later.evictable_blocks, 2);
}

TEST(PrefixCacheTest, PartialAndUnwrittenBlocksAreNotCached) {
  auto cache = MakeCache(4);
  const std::vector<TokenId> a = {1, 2, 3, 4, 5, 6};
  std::vector<uint64_t> ha = Hashes(a);  // one full block
  cache->AttachPrefix(1, {}, a);
  ASSERT_TRUE(cache->Reserve(1, 8).ok());
  // Only 3 positions written: nothing is full yet, so nothing is registered.
  cache->CacheFullBlocks(1, absl::MakeConstSpan(ha).subspan(0, 3 / kBs), a);
  EXPECT_EQ(cache->num_cached_blocks(), 0);
  cache->CacheFullBlocks(1, ha, a);
  EXPECT_EQ(cache->num_cached_blocks(), 1);
  cache->Release(1);
  EXPECT_EQ(cache->num_cached_blocks(), 1);
  EXPECT_EQ(cache->num_free_blocks(), 4);
}

TEST(PrefixCacheTest, EvictionMakesRoomAndDropsTailsFirst) {
  auto cache = MakeCache(4);
  const std::vector<TokenId> a = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};  // 3 blocks
  const std::vector<uint64_t> ha = Hashes(a);
  cache->AttachPrefix(1, {}, a);
  ASSERT_TRUE(cache->Reserve(1, 12).ok());
  Write(*cache, 1, a, 0, 12);
  cache->CacheFullBlocks(1, ha, a);
  cache->Release(1);
  EXPECT_EQ(cache->num_cached_blocks(), 3);

  // Needs 2 blocks: the free one, then the chain's tail.
  const std::vector<TokenId> other = {40, 41, 42, 43, 44, 45, 46, 47};
  ASSERT_TRUE(cache->CanReserve(2, 8));
  ASSERT_TRUE(cache->Reserve(2, 8).ok());
  EXPECT_EQ(cache->num_cached_blocks(), 2);
  EXPECT_EQ(cache->MatchPrefix(ha, a).blocks, 2);  // the head survives
  ASSERT_TRUE(cache->Reserve(2, 16).ok());         // all 4 blocks now
  EXPECT_EQ(cache->MatchPrefix(ha, a).blocks, 0);
  EXPECT_EQ(cache->num_free_blocks(), 0);
  EXPECT_FALSE(cache->CanReserve(3, 1));
  cache->Release(2);
  EXPECT_EQ(cache->num_free_blocks(), 4);
  EXPECT_EQ(cache->num_cached_blocks(), 0);
}

// Random prompts built from a few shared prefixes; sequences start (reusing what is
// cached), prefill in chunks, decode, and finish or are cancelled at random. Throughout,
// every sequence sees exactly its own tokens, refcounts equal the number of tables
// holding each block, and at the end the pool is back to all-free with no holders.
TEST(PrefixCacheTest, RandomizedWorkloadReturnsThePoolToItsInitialState) {
  constexpr int kBlocks = 48;
  auto cache = MakeCache(kBlocks);
  std::mt19937 rng(12345);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };

  std::vector<std::vector<TokenId>> prefixes;
  for (int i = 0; i < 4; ++i) {
    std::vector<TokenId> p(uniform(3, 14));
    for (TokenId& t : p) t = uniform(0, 5);  // tiny alphabet: many equal blocks
    prefixes.push_back(p);
  }
  struct Live {
    std::vector<TokenId> tokens;  // prompt, then generated
    std::vector<uint64_t> hashes;
    int prompt = 0;
    int written = 0;
    int total = 0;
  };
  std::map<KvCache::SeqId, Live> live;
  KvCache::SeqId next_id = 1;
  int hits = 0;

  for (int step = 0; step < 4000; ++step) {
    const int op = uniform(0, 9);
    if (op <= 2 && live.size() < 10) {  // start a sequence
      Live s;
      s.tokens = prefixes[uniform(0, 3)];
      if (uniform(0, 1) == 0) {  // sometimes two shared prefixes back to back
        const auto& more = prefixes[uniform(0, 3)];
        s.tokens.insert(s.tokens.end(), more.begin(), more.end());
      }
      for (int n = uniform(1, 6); n > 0; --n) s.tokens.push_back(uniform(0, 5));
      s.prompt = static_cast<int>(s.tokens.size());
      s.total = s.prompt + uniform(1, 8);
      ExtendBlockHashes(s.tokens, kBs, &s.hashes);
      const int max_blocks = (s.prompt - 1) / kBs;  // the last prompt token is computed
      const auto try_hashes =
          absl::MakeConstSpan(s.hashes).subspan(0, std::min<size_t>(max_blocks, s.hashes.size()));
      const KvCache::PrefixMatch m = cache->MatchPrefix(try_hashes, s.tokens);
      const int needed = cache->BlocksForTokens(s.total) - m.blocks + m.evictable_blocks;
      if (needed > cache->num_free_blocks()) continue;
      const KvCache::SeqId id = next_id++;
      ASSERT_EQ(cache->AttachPrefix(id, try_hashes, s.tokens), m.blocks);
      const int free_before = cache->num_free_blocks();
      ASSERT_TRUE(cache->Reserve(id, s.total).ok());
      ASSERT_EQ(free_before - cache->num_free_blocks(), cache->BlocksForTokens(s.total) - m.blocks);
      s.written = m.blocks * kBs;
      hits += m.blocks;
      ExpectContent(*cache, id, s.tokens, s.written);
      live.emplace(id, std::move(s));
    } else if (op <= 6 && !live.empty()) {  // advance: a prefill chunk or one decode token
      auto it = std::next(live.begin(), uniform(0, static_cast<int>(live.size()) - 1));
      Live& s = it->second;
      if (s.written >= s.total) continue;
      int upto =
          s.written < s.prompt ? std::min(s.prompt, s.written + uniform(1, 7)) : s.written + 1;
      while (static_cast<int>(s.tokens.size()) < upto) s.tokens.push_back(uniform(0, 5));
      Write(*cache, it->first, s.tokens, s.written, upto);
      s.written = upto;
      // Hash only the tokens whose K/V is written.
      ExtendBlockHashes(absl::MakeConstSpan(s.tokens).subspan(0, s.written), kBs, &s.hashes);
      cache->CacheFullBlocks(it->first, absl::MakeConstSpan(s.hashes).subspan(0, s.written / kBs),
                             s.tokens);
      ExpectContent(*cache, it->first, s.tokens, s.written);
    } else if (!live.empty()) {  // finish or cancel
      auto it = std::next(live.begin(), uniform(0, static_cast<int>(live.size()) - 1));
      cache->Release(it->first);
      live.erase(it);
    }

    // Refcounts equal table membership; used + free = all.
    std::vector<int> holders(kBlocks, 0);
    for (const auto& [id, s] : live) {
      for (int32_t b : cache->block_table(id)) ++holders[b];
    }
    int used = 0;
    for (int b = 0; b < kBlocks; ++b) {
      ASSERT_EQ(cache->block_refcount(b), holders[b]) << "block " << b << " step " << step;
      used += holders[b] > 0;
    }
    ASSERT_EQ(cache->num_used_blocks(), used);
    ASSERT_EQ(cache->num_used_blocks() + cache->num_free_blocks(), kBlocks);
  }
  EXPECT_GT(hits, 100);  // the workload really exercised sharing

  for (const auto& [id, s] : live) cache->Release(id);
  EXPECT_EQ(cache->num_used_blocks(), 0);
  EXPECT_EQ(cache->num_free_blocks(), kBlocks);
  for (int b = 0; b < kBlocks; ++b) EXPECT_EQ(cache->block_refcount(b), 0);
  // And the whole pool can be taken again (evicting every cached block).
  ASSERT_TRUE(cache->Reserve(next_id, int64_t{kBlocks} * kBs).ok());
  EXPECT_EQ(cache->num_cached_blocks(), 0);
  cache->Release(next_id);
  EXPECT_EQ(cache->num_free_blocks(), kBlocks);
}

}  // namespace
}  // namespace quill::engine
