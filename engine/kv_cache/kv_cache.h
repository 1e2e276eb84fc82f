#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/kernels/attention.h"

namespace quill::engine {

struct KvCacheOptions {
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int block_size_tokens = 16;
  int64_t budget_bytes = 0;  // K and V of all layers; num_blocks = budget / block_bytes
};

// The paged KV cache: a fixed pool of blocks allocated once at startup from a byte budget,
// and one block table per sequence. Plan, then commit: CanReserve() answers without
// changing anything; Reserve() grows a sequence; Release() is the only way blocks return.
// Owned and used by one thread (the engine thread); not thread-safe.
class KvCache {
 public:
  using SeqId = int64_t;

  // INVALID_ARGUMENT if a dimension is not positive or the budget holds less than one block.
  static absl::StatusOr<std::unique_ptr<KvCache>> Create(const KvCacheOptions& options);

  // 2 (K and V) * layers * kv_heads * head_dim * sizeof(float).
  int64_t bytes_per_token() const;
  int64_t block_bytes() const;  // bytes_per_token * block_size
  int block_size() const;
  int num_blocks() const;
  int num_used_blocks() const;
  int num_free_blocks() const;
  int64_t total_bytes() const;
  int64_t used_bytes() const;  // num_used_blocks * block_bytes
  int BlocksForTokens(int64_t tokens) const;  // ceil(tokens / block_size)

  // Blocks `seq` would need in addition to what it holds to store `num_tokens` tokens.
  int AdditionalBlocksNeeded(SeqId seq, int64_t num_tokens) const;
  bool CanReserve(SeqId seq, int64_t num_tokens) const;
  // Grows `seq`'s block table to hold `num_tokens` tokens (creating the sequence if new).
  // RESOURCE_EXHAUSTED (and no change) if the pool has too few free blocks.
  absl::Status Reserve(SeqId seq, int64_t num_tokens);
  // Returns all of `seq`'s blocks to the pool. Unknown ids are a no-op.
  void Release(SeqId seq);

  bool Contains(SeqId seq) const;
  int64_t capacity_tokens(SeqId seq) const;  // 0 for an unknown sequence
  // Physical block ids; valid until the next Reserve/Release of this sequence.
  absl::Span<const int32_t> block_table(SeqId seq) const;

  const kernels::KvLayout& layout() const;
  float* k_data(int layer);
  float* v_data(int layer);
  // Where position `pos` of `seq` lives in a layer's arena, in floats from its start
  // (row of num_kv_heads * head_dim floats). `pos` must be < capacity_tokens(seq).
  int64_t SlotOffset(SeqId seq, int64_t pos) const;

  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

 private:
  // Frees an arena from std::aligned_alloc.
  struct ArenaDeleter {
    void operator()(float* p) const;
  };
  using Arena = std::unique_ptr<float[], ArenaDeleter>;

  KvCache(const KvCacheOptions& options, int num_blocks);
  // Allocates and zero-fills the arenas; RESOURCE_EXHAUSTED if memory runs out.
  absl::Status AllocateArenas();
  // An empty table with generous capacity, recycled from released sequences when possible.
  std::vector<int32_t> TakeTable();

  KvCacheOptions options_;
  kernels::KvLayout layout_;
  int num_blocks_ = 0;
  int64_t arena_floats_ = 0;        // per layer, K or V
  std::vector<Arena> k_arenas_;     // one per layer
  std::vector<Arena> v_arenas_;     // one per layer
  std::vector<int32_t> free_blocks_;  // LIFO stack of free physical block ids
  absl::flat_hash_map<SeqId, std::vector<int32_t>> tables_;
  std::vector<std::vector<int32_t>> spare_tables_;  // cleared tables kept for reuse
};

}  // namespace quill::engine
