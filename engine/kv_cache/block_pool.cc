#include "engine/kv_cache/block_pool.h"

#include <algorithm>

#include "engine/base/check.h"

namespace quill::engine {

BlockPool::BlockPool(int num_blocks, int block_size)
    : block_size_(block_size),
      refcount_(num_blocks, 0),
      content_id_(num_blocks, 0),
      hash_(num_blocks, 0),
      parent_content_id_(num_blocks, 0),
      tokens_(static_cast<size_t>(num_blocks) * block_size, 0),
      lru_prev_(num_blocks, kNone),
      lru_next_(num_blocks, kNone) {
  // Popped from the back: block 0 is handed out first.
  free_.resize(num_blocks);
  for (int i = 0; i < num_blocks; ++i) free_[i] = num_blocks - 1 - i;
  // Every block can be registered at once, so the index never rehashes on the hot path.
  index_.reserve(num_blocks);
}

int32_t BlockPool::Allocate() {
  int32_t block;
  if (!free_.empty()) {
    block = free_.back();
    free_.pop_back();
  } else if (num_evictable_ > 0) {
    block = Evict();
  } else {
    return kNone;
  }
  QUILL_DCHECK(refcount_[block] == 0);
  refcount_[block] = 1;
  ++num_in_use_;
  return block;
}

int32_t BlockPool::Evict() {
  const int32_t block = lru_head_;
  QUILL_DCHECK(block != kNone && refcount_[block] == 0 && content_id_[block] != 0);
  LruUnlink(block);
  --num_evictable_;
  index_.erase(hash_[block]);
  content_id_[block] = 0;
  return block;
}

void BlockPool::Acquire(int32_t block) {
  QUILL_DCHECK(content_id_[block] != 0);
  if (refcount_[block]++ == 0) {
    LruUnlink(block);
    --num_evictable_;
    ++num_in_use_;
  }
}

void BlockPool::Release(int32_t block) {
  QUILL_CHECK(refcount_[block] > 0);
  if (--refcount_[block] > 0) return;
  --num_in_use_;
  if (content_id_[block] != 0) {
    LruPushNewest(block);
    ++num_evictable_;
  } else {
    free_.push_back(block);
  }
}

bool BlockPool::SameContent(int32_t block, uint64_t parent_content_id,
                            absl::Span<const TokenId> tokens) const {
  if (parent_content_id_[block] != parent_content_id) return false;
  if (tokens.size() != static_cast<size_t>(block_size_)) return false;
  const TokenId* ids = tokens_.data() + static_cast<size_t>(block) * block_size_;
  return std::equal(tokens.begin(), tokens.end(), ids);
}

int32_t BlockPool::Lookup(uint64_t hash, uint64_t parent_content_id,
                          absl::Span<const TokenId> tokens) const {
  const auto it = index_.find(hash);
  if (it == index_.end()) return kNone;
  return SameContent(it->second, parent_content_id, tokens) ? it->second : kNone;
}

uint64_t BlockPool::Register(int32_t block, uint64_t hash, uint64_t parent_content_id,
                             absl::Span<const TokenId> tokens) {
  QUILL_DCHECK(refcount_[block] > 0 && content_id_[block] == 0);
  QUILL_DCHECK(tokens.size() == static_cast<size_t>(block_size_));
  const auto it = index_.find(hash);
  if (it != index_.end()) {
    // Computed twice (two requests prefilled the same prefix at once): keep the first.
    return SameContent(it->second, parent_content_id, tokens) ? content_id_[it->second] : 0;
  }
  index_.emplace(hash, block);
  content_id_[block] = next_content_id_++;
  hash_[block] = hash;
  parent_content_id_[block] = parent_content_id;
  std::copy(tokens.begin(), tokens.end(),
            tokens_.begin() + static_cast<ptrdiff_t>(block) * block_size_);
  return content_id_[block];
}

void BlockPool::LruUnlink(int32_t block) {
  const int32_t prev = lru_prev_[block];
  const int32_t next = lru_next_[block];
  (prev == kNone ? lru_head_ : lru_next_[prev]) = next;
  (next == kNone ? lru_tail_ : lru_prev_[next]) = prev;
  lru_prev_[block] = lru_next_[block] = kNone;
}

void BlockPool::LruPushNewest(int32_t block) {
  lru_prev_[block] = lru_tail_;
  lru_next_[block] = kNone;
  (lru_tail_ == kNone ? lru_head_ : lru_next_[lru_tail_]) = block;
  lru_tail_ = block;
}

}  // namespace quill::engine
