#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace quill::engine {

using TokenId = int32_t;

// Content address of a full KV block: a 64-bit hash of every token id from position 0
// through the end of the block, computed as a chain (each block's hash mixes the previous
// block's hash with its own ids). Not cryptographic, and it need not be: the block cache
// also compares a hit's token ids and its parent block, so a collision costs a miss,
// never a wrong answer. Stable within a process only (nothing is persisted).
uint64_t HashBlock(uint64_t parent_hash, absl::Span<const TokenId> tokens);

// The parent hash of a sequence's first block.
inline constexpr uint64_t kRootBlockHash = 0x9e3779b97f4a7c15ull;

// Appends to `hashes` the chained hashes of the full blocks of `tokens` (block_size ids
// each) that it does not hold yet; a partial last block is left out. Allocates only if
// `hashes` lacks capacity.
void ExtendBlockHashes(absl::Span<const TokenId> tokens, int block_size,
                       std::vector<uint64_t>* hashes);

}  // namespace quill::engine
