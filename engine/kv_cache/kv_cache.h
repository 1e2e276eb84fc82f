#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/kernels/attention.h"
#include "engine/kv_cache/block_pool.h"

namespace quill::engine {

struct KvCacheOptions {
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int block_size_tokens = 16;
  // f16 in fast mode, or q8 or bf16 there on request (kv_element.h); both need
  // block_size_tokens % 16 == 0, and head_dim % 4 == 0 (q8) or % 2 == 0 (bf16).
  kernels::KvElement element = kernels::KvElement::kF32;
  int64_t budget_bytes = 0;  // K and V of all layers; num_blocks = budget / block_bytes

  // 2 (K and V) * layers * kv_heads * a head's row (head_dim * 4 bytes for f32, * 2 for
  // f16 and bf16, head_dim + a 4-byte scale for q8).
  int64_t bytes_per_token() const {
    return int64_t{2} * num_layers * num_kv_heads * kernels::KvRowBytes(element, head_dim);
  }
  // The budget of the fewest whole blocks that hold `tokens` tokens.
  int64_t BudgetForTokens(int64_t tokens) const {
    return (tokens + block_size_tokens - 1) / block_size_tokens * block_size_tokens *
           bytes_per_token();
  }
};

// The paged KV cache: a fixed pool of blocks allocated once at startup from a byte budget,
// and one block table per sequence. Plan, then commit: CanReserve() answers without
// changing anything; Reserve() grows a sequence; Release() is the only way blocks return.
//
// Prefix caching (optional; nothing is cached unless CacheFullBlocks is called): full
// blocks are registered under their content address and shared between sequences (see
// BlockPool). A new sequence starts with AttachPrefix(), which puts the longest cached
// chain matching its prompt at the front of its table; it must then write K/V only at
// positions past that prefix. Released cached blocks stay cached until evicted, and
// count as free.
// Owned and used by one thread (the engine thread); not thread-safe.
class KvCache {
 public:
  using SeqId = int64_t;

  // INVALID_ARGUMENT if a dimension is not positive or the budget holds less than one block.
  static absl::StatusOr<std::unique_ptr<KvCache>> Create(const KvCacheOptions& options);

  int64_t bytes_per_token() const;  // options().bytes_per_token()
  int64_t block_bytes() const;  // bytes_per_token * block_size
  int block_size() const;
  int num_blocks() const;
  int num_used_blocks() const;    // held by at least one sequence
  int num_free_blocks() const;    // free, including cached blocks no sequence holds
  int num_cached_blocks() const;  // registered in the prefix cache (held or not)
  int64_t total_bytes() const;
  int64_t used_bytes() const;                 // num_used_blocks * block_bytes
  int BlocksForTokens(int64_t tokens) const;  // ceil(tokens / block_size)

  // Blocks `seq` would need in addition to what it holds to store `num_tokens` tokens.
  int AdditionalBlocksNeeded(SeqId seq, int64_t num_tokens) const;
  bool CanReserve(SeqId seq, int64_t num_tokens) const;
  // Grows `seq`'s block table to hold `num_tokens` tokens (creating the sequence if new).
  // RESOURCE_EXHAUSTED (and no change) if the pool has too few free blocks.
  absl::Status Reserve(SeqId seq, int64_t num_tokens);
  // Returns all of `seq`'s blocks to the pool. Unknown ids are a no-op.
  void Release(SeqId seq);

  // The longest chain of cached blocks equal to the first blocks of `tokens`, whose
  // chained hashes (prefix_hash.h) are `block_hashes` (one per full block to try).
  // Changes nothing.
  struct PrefixMatch {
    int blocks = 0;
    int evictable_blocks = 0;  // of those, held by no sequence (taking them uses free blocks)
  };
  PrefixMatch MatchPrefix(absl::Span<const uint64_t> block_hashes,
                          absl::Span<const TokenId> tokens) const;
  // Creates `seq` (which must be unknown) holding the blocks MatchPrefix would return;
  // returns how many. Reserve() then grows it past them.
  int AttachPrefix(SeqId seq, absl::Span<const uint64_t> block_hashes,
                   absl::Span<const TokenId> tokens);
  // Registers `seq`'s blocks [already registered, block_hashes.size()) in the prefix
  // cache. Each must be full with its K/V written: block_hashes are the chained hashes
  // of the full blocks of `tokens` whose K/V is in the cache.
  void CacheFullBlocks(SeqId seq, absl::Span<const uint64_t> block_hashes,
                       absl::Span<const TokenId> tokens);
  // Holders of a physical block (for tests).
  int block_refcount(int32_t block) const;

  bool Contains(SeqId seq) const;
  int64_t capacity_tokens(SeqId seq) const;  // 0 for an unknown sequence
  // Physical block ids; valid until the next Reserve/Release of this sequence.
  absl::Span<const int32_t> block_table(SeqId seq) const;

  const kernels::KvLayout& layout() const;
  // A layer's K or V arena of layout().element values, laid out as layout() says
  // (kernels::StoreKvStrided writes a key, kernels::StoreKvRow a value).
  void* k_data(int layer);
  void* v_data(int layer);
  // The slot (block id * block_size + offset in the block) holding position `pos` of
  // `seq`; layout().KeyIndex and ValueIndex locate its K and V. `pos` must be
  // < capacity_tokens(seq).
  int64_t Slot(SeqId seq, int64_t pos) const;

  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

 private:
  // Frees an arena from std::aligned_alloc.
  struct ArenaDeleter {
    void operator()(void* p) const;
  };
  using Arena = std::unique_ptr<void, ArenaDeleter>;

  KvCache(const KvCacheOptions& options, int num_blocks);
  // Allocates and zero-fills the arenas; RESOURCE_EXHAUSTED if memory runs out.
  absl::Status AllocateArenas();
  // A sequence's blocks and how far its chain is registered in the prefix cache.
  struct SeqBlocks {
    std::vector<int32_t> table;
    int num_registered = 0;        // leading blocks registered (or attached)
    uint64_t last_content_id = 0;  // content id of block num_registered - 1 (0 = root)
    bool chain_broken = false;     // a hash collision stopped registration
  };

  // An empty table with generous capacity, recycled from released sequences when possible.
  std::vector<int32_t> TakeTable();
  SeqBlocks& FindOrCreate(SeqId seq);

  KvCacheOptions options_;
  kernels::KvLayout layout_;
  int num_blocks_ = 0;
  int64_t arena_elements_ = 0;   // per layer, K or V
  std::vector<Arena> k_arenas_;  // one per layer
  std::vector<Arena> v_arenas_;  // one per layer
  BlockPool pool_;
  absl::flat_hash_map<SeqId, SeqBlocks> tables_;
  std::vector<std::vector<int32_t>> spare_tables_;  // cleared tables kept for reuse
};

}  // namespace quill::engine
