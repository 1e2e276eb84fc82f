#pragma once

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "engine/kv_cache/prefix_hash.h"

namespace quill::engine {

// The physical KV blocks and who holds them: a reference count per block, a free list,
// and the prefix cache. A full block can be registered under its content address
// (prefix_hash.h); from then on it is immutable, other sequences whose prompts start with
// the same tokens may share it, and when its last holder lets go it is not freed but
// kept, evictable, in LRU order until an allocation needs it. Blocks that were never
// registered (partial blocks, the ones being written) go straight back to the free list,
// so a block being written is never shared.
//
// Identity of a cached block is its hash, its token ids and its parent's content id (a
// number given to each registration and never reused), so a lookup only succeeds when
// every token from position 0 matches: a hash collision is a miss.
//
// Sized once; nothing allocates after construction. One thread only (the engine thread).
class BlockPool {
 public:
  BlockPool(int num_blocks, int block_size);
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  int num_blocks() const { return static_cast<int>(refcount_.size()); }
  int block_size() const { return block_size_; }
  // Blocks an allocation can get: never-registered free blocks plus evictable cached ones.
  int num_available() const { return static_cast<int>(free_.size()) + num_evictable_; }
  int num_in_use() const { return num_in_use_; }                      // refcount > 0
  int num_cached() const { return static_cast<int>(index_.size()); }  // registered
  int num_evictable() const { return num_evictable_; }                // registered with refcount 0
  int refcount(int32_t block) const { return refcount_[block]; }
  bool is_cached(int32_t block) const { return content_id_[block] != 0; }
  // 0 if the block is not registered.
  uint64_t content_id(int32_t block) const { return content_id_[block]; }

  // A block for one holder (refcount 1): from the free list, else the least recently
  // used evictable cached block (which leaves the cache). -1 if none is available.
  int32_t Allocate();
  // Adds a holder to a cached block (taking it off the LRU list if it was evictable).
  void Acquire(int32_t block);
  // Removes a holder. At zero a cached block becomes the most recently used evictable
  // block; an unregistered one returns to the free list.
  void Release(int32_t block);

  // The cached block with content address `hash` whose parent has content id
  // `parent_content_id` (0 for a first block) and whose ids equal `tokens`; -1 if none.
  int32_t Lookup(uint64_t hash, uint64_t parent_content_id, absl::Span<const TokenId> tokens) const;
  // Registers `block` (held, full, its K/V written) under `hash`. Returns the content id
  // its children must name as parent: the block's new one, or that of an identical block
  // already cached (this one then stays private). Returns 0 if a different block holds
  // `hash` (a collision): the caller stops registering that chain.
  uint64_t Register(int32_t block, uint64_t hash, uint64_t parent_content_id,
                    absl::Span<const TokenId> tokens);

 private:
  static constexpr int32_t kNone = -1;
  bool SameContent(int32_t block, uint64_t parent_content_id,
                   absl::Span<const TokenId> tokens) const;
  void LruUnlink(int32_t block);
  void LruPushNewest(int32_t block);
  // Removes an evictable block from the cache and hands it out.
  int32_t Evict();

  const int block_size_;
  std::vector<int32_t> refcount_;
  std::vector<int32_t> free_;  // LIFO stack of never-registered free blocks
  int num_in_use_ = 0;
  int num_evictable_ = 0;
  uint64_t next_content_id_ = 1;
  // Per block, meaningful while registered.
  std::vector<uint64_t> content_id_;
  std::vector<uint64_t> hash_;
  std::vector<uint64_t> parent_content_id_;
  std::vector<TokenId> tokens_;  // block_size ids per block
  // Evictable blocks as an intrusive doubly linked list, oldest at lru_head_.
  std::vector<int32_t> lru_prev_;
  std::vector<int32_t> lru_next_;
  int32_t lru_head_ = kNone;
  int32_t lru_tail_ = kNone;
  absl::flat_hash_map<uint64_t, int32_t> index_;  // hash -> block; reserved for all blocks
};

}  // namespace quill::engine
