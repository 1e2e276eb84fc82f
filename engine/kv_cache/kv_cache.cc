#include "engine/kv_cache/kv_cache.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/base/check.h"
#include "engine/base/status_macros.h"

namespace quill::engine {
namespace {

constexpr size_t kArenaAlignment = 64;  // one cache line; also a full AVX-512 vector
// Arenas of at least one huge page are aligned to it and offered to transparent huge pages:
// attention reads scattered blocks, and 4 KiB pages would cost a TLB miss every few rows.
constexpr size_t kHugePage = size_t{2} << 20;
// Block-table capacity reserved up front (capped by the pool size) so Reserve rarely
// reallocates: 1024 blocks of 16 tokens cover a 16k-token context.
constexpr int kInitialTableCapacity = 1024;

}  // namespace

void KvCache::ArenaDeleter::operator()(void* p) const { std::free(p); }

absl::StatusOr<std::unique_ptr<KvCache>> KvCache::Create(const KvCacheOptions& options) {
  if (options.num_layers <= 0 || options.num_kv_heads <= 0 || options.head_dim <= 0 ||
      options.block_size_tokens <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv cache dimensions must be positive: num_layers=", options.num_layers,
                     " num_kv_heads=", options.num_kv_heads, " head_dim=", options.head_dim,
                     " block_size_tokens=", options.block_size_tokens));
  }
  // q8 and bf16 attention reads 16 keys of a block as one line, and packs 4 (q8) or 2
  // (bf16) dimensions of a key side by side.
  const int packed_dims = options.element == kernels::KvElement::kQ8     ? 4
                          : options.element == kernels::KvElement::kBf16 ? 2
                                                                         : 0;
  if (packed_dims > 0 &&
      (options.block_size_tokens % 16 != 0 || options.head_dim % packed_dims != 0 ||
       options.head_dim > kernels::kMaxKvHeadDim)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a ", kernels::KvElementName(options.element),
        " kv cache needs blocks of a multiple of 16 tokens and a head size that is a multiple "
        "of ",
        packed_dims, " (at most ", kernels::kMaxKvHeadDim,
        "): block_size_tokens=", options.block_size_tokens, " head_dim=", options.head_dim));
  }
  // Everything in int64: layers * heads * head_dim * block size can exceed int32.
  const int64_t block_bytes = options.bytes_per_token() * options.block_size_tokens;
  if (options.budget_bytes < block_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("kv cache budget of ", options.budget_bytes,
                                                   " bytes holds less than one block of ",
                                                   block_bytes, " bytes"));
  }
  const int64_t blocks =
      std::min<int64_t>(options.budget_bytes / block_bytes, std::numeric_limits<int32_t>::max());
  std::unique_ptr<KvCache> cache(new KvCache(options, static_cast<int>(blocks)));
  QUILL_RETURN_IF_ERROR(cache->AllocateArenas());
  return cache;
}

KvCache::KvCache(const KvCacheOptions& options, int num_blocks)
    : options_(options), num_blocks_(num_blocks), pool_(num_blocks, options.block_size_tokens) {
  layout_.block_size = options.block_size_tokens;
  layout_.num_kv_heads = options.num_kv_heads;
  layout_.head_dim = options.head_dim;
  layout_.element = options.element;
  arena_elements_ = static_cast<int64_t>(num_blocks) * options.block_size_tokens * layout_.row();
}

KvCache::~KvCache() = default;

absl::Status KvCache::AllocateArenas() {
  const size_t raw =
      static_cast<size_t>(arena_elements_) * kernels::KvElementBytes(options_.element);
  const size_t alignment = raw >= kHugePage ? kHugePage : kArenaAlignment;
  const size_t bytes = (raw + alignment - 1) / alignment * alignment;
  k_arenas_.reserve(options_.num_layers);
  v_arenas_.reserve(options_.num_layers);
  for (int layer = 0; layer < options_.num_layers; ++layer) {
    for (std::vector<Arena>* arenas : {&k_arenas_, &v_arenas_}) {
      Arena arena(std::aligned_alloc(alignment, bytes));
      if (arena == nullptr) {
        return absl::ResourceExhaustedError(
            absl::StrCat("kv cache: cannot allocate ", bytes, " bytes for layer ", layer));
      }
      // Advice only: without THP support this fails harmlessly and 4 KiB pages are used.
      if (alignment == kHugePage) madvise(arena.get(), bytes, MADV_HUGEPAGE);
      // Touch every page now so the resident size matches total_bytes() from the start.
      std::memset(arena.get(), 0, bytes);
      arenas->push_back(std::move(arena));
    }
  }
  return absl::OkStatus();
}

int64_t KvCache::bytes_per_token() const { return options_.bytes_per_token(); }
int64_t KvCache::block_bytes() const { return bytes_per_token() * options_.block_size_tokens; }
int KvCache::block_size() const { return options_.block_size_tokens; }
int KvCache::num_blocks() const { return num_blocks_; }
int KvCache::num_used_blocks() const { return pool_.num_in_use(); }
int KvCache::num_free_blocks() const { return pool_.num_available(); }
int KvCache::num_cached_blocks() const { return pool_.num_cached(); }
int KvCache::block_refcount(int32_t block) const { return pool_.refcount(block); }
int64_t KvCache::total_bytes() const { return block_bytes() * num_blocks_; }
int64_t KvCache::used_bytes() const { return block_bytes() * num_used_blocks(); }

int KvCache::BlocksForTokens(int64_t tokens) const {
  if (tokens <= 0) return 0;
  const int64_t bs = options_.block_size_tokens;
  const int64_t blocks = (tokens + bs - 1) / bs;
  return static_cast<int>(std::min<int64_t>(blocks, std::numeric_limits<int>::max()));
}

int KvCache::AdditionalBlocksNeeded(SeqId seq, int64_t num_tokens) const {
  const auto it = tables_.find(seq);
  const int held = it == tables_.end() ? 0 : static_cast<int>(it->second.table.size());
  return std::max(0, BlocksForTokens(num_tokens) - held);
}

bool KvCache::CanReserve(SeqId seq, int64_t num_tokens) const {
  return num_tokens >= 0 && AdditionalBlocksNeeded(seq, num_tokens) <= num_free_blocks();
}

absl::Status KvCache::Reserve(SeqId seq, int64_t num_tokens) {
  if (num_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv cache: cannot reserve ", num_tokens, " tokens for sequence ", seq));
  }
  const int needed = AdditionalBlocksNeeded(seq, num_tokens);
  if (needed > num_free_blocks()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("kv cache: sequence ", seq, " needs ", needed, " more blocks for ", num_tokens,
                     " tokens; ", num_free_blocks(), " of ", num_blocks_, " free"));
  }
  std::vector<int32_t>& table = FindOrCreate(seq).table;
  for (int i = 0; i < needed; ++i) {
    const int32_t block = pool_.Allocate();
    QUILL_CHECK(block >= 0);  // counted above
    table.push_back(block);
  }
  return absl::OkStatus();
}

void KvCache::Release(SeqId seq) {
  const auto it = tables_.find(seq);
  if (it == tables_.end()) return;
  std::vector<int32_t>& table = it->second.table;
  // Reverse order: a sequence that immediately re-reserves gets its free blocks back in
  // order, and a released chain's tail becomes older in the LRU than its head, so
  // eviction shortens cached prefixes from the end instead of orphaning their tails.
  for (auto b = table.rbegin(); b != table.rend(); ++b) pool_.Release(*b);
  table.clear();
  spare_tables_.push_back(std::move(table));
  tables_.erase(it);
}

KvCache::SeqBlocks& KvCache::FindOrCreate(SeqId seq) {
  auto it = tables_.find(seq);
  if (it == tables_.end()) {
    SeqBlocks blocks;
    blocks.table = TakeTable();
    it = tables_.emplace(seq, std::move(blocks)).first;
  }
  return it->second;
}

KvCache::PrefixMatch KvCache::MatchPrefix(absl::Span<const uint64_t> block_hashes,
                                          absl::Span<const TokenId> tokens) const {
  PrefixMatch match;
  const size_t bs = options_.block_size_tokens;
  uint64_t parent = 0;
  for (size_t b = 0; b < block_hashes.size() && (b + 1) * bs <= tokens.size(); ++b) {
    const int32_t block = pool_.Lookup(block_hashes[b], parent, tokens.subspan(b * bs, bs));
    if (block < 0) break;
    ++match.blocks;
    if (pool_.refcount(block) == 0) ++match.evictable_blocks;
    parent = pool_.content_id(block);
  }
  return match;
}

int KvCache::AttachPrefix(SeqId seq, absl::Span<const uint64_t> block_hashes,
                          absl::Span<const TokenId> tokens) {
  QUILL_CHECK(!tables_.contains(seq));
  SeqBlocks& blocks = FindOrCreate(seq);
  const size_t bs = options_.block_size_tokens;
  for (size_t b = 0; b < block_hashes.size() && (b + 1) * bs <= tokens.size(); ++b) {
    const int32_t block =
        pool_.Lookup(block_hashes[b], blocks.last_content_id, tokens.subspan(b * bs, bs));
    if (block < 0) break;
    pool_.Acquire(block);
    blocks.table.push_back(block);
    blocks.last_content_id = pool_.content_id(block);
    ++blocks.num_registered;
  }
  return blocks.num_registered;
}

void KvCache::CacheFullBlocks(SeqId seq, absl::Span<const uint64_t> block_hashes,
                              absl::Span<const TokenId> tokens) {
  const auto it = tables_.find(seq);
  if (it == tables_.end()) return;
  SeqBlocks& blocks = it->second;
  const size_t bs = options_.block_size_tokens;
  while (!blocks.chain_broken && static_cast<size_t>(blocks.num_registered) < block_hashes.size()) {
    const size_t b = blocks.num_registered;
    QUILL_DCHECK(b < blocks.table.size() && (b + 1) * bs <= tokens.size());
    const uint64_t id = pool_.Register(blocks.table[b], block_hashes[b], blocks.last_content_id,
                                       tokens.subspan(b * bs, bs));
    if (id == 0) {
      blocks.chain_broken = true;
      break;
    }
    blocks.last_content_id = id;
    ++blocks.num_registered;
  }
}

std::vector<int32_t> KvCache::TakeTable() {
  if (!spare_tables_.empty()) {
    std::vector<int32_t> table = std::move(spare_tables_.back());
    spare_tables_.pop_back();
    return table;
  }
  std::vector<int32_t> table;
  table.reserve(std::min(num_blocks_, kInitialTableCapacity));
  return table;
}

bool KvCache::Contains(SeqId seq) const { return tables_.contains(seq); }

int64_t KvCache::capacity_tokens(SeqId seq) const {
  const auto it = tables_.find(seq);
  if (it == tables_.end()) return 0;
  return static_cast<int64_t>(it->second.table.size()) * options_.block_size_tokens;
}

absl::Span<const int32_t> KvCache::block_table(SeqId seq) const {
  const auto it = tables_.find(seq);
  if (it == tables_.end()) return {};
  return it->second.table;
}

const kernels::KvLayout& KvCache::layout() const { return layout_; }

void* KvCache::k_data(int layer) {
  QUILL_DCHECK(layer >= 0 && layer < options_.num_layers);
  return k_arenas_[layer].get();
}

void* KvCache::v_data(int layer) {
  QUILL_DCHECK(layer >= 0 && layer < options_.num_layers);
  return v_arenas_[layer].get();
}

int64_t KvCache::Slot(SeqId seq, int64_t pos) const {
  const auto it = tables_.find(seq);
  QUILL_DCHECK(it != tables_.end());
  QUILL_DCHECK(pos >= 0 && pos < capacity_tokens(seq));
  const int64_t bs = options_.block_size_tokens;
  const int64_t block = it->second.table[pos / bs];
  return block * bs + pos % bs;
}

}  // namespace quill::engine
