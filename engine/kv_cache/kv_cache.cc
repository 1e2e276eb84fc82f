#include "engine/kv_cache/kv_cache.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <utility>

#include <sys/mman.h>

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

void KvCache::ArenaDeleter::operator()(float* p) const { std::free(p); }

absl::StatusOr<std::unique_ptr<KvCache>> KvCache::Create(const KvCacheOptions& options) {
  if (options.num_layers <= 0 || options.num_kv_heads <= 0 || options.head_dim <= 0 ||
      options.block_size_tokens <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kv cache dimensions must be positive: num_layers=", options.num_layers,
        " num_kv_heads=", options.num_kv_heads, " head_dim=", options.head_dim,
        " block_size_tokens=", options.block_size_tokens));
  }
  // Everything in int64: layers * heads * head_dim * block size can exceed int32.
  const int64_t bytes_per_token = int64_t{2} * options.num_layers * options.num_kv_heads *
                                  options.head_dim * static_cast<int64_t>(sizeof(float));
  const int64_t block_bytes = bytes_per_token * options.block_size_tokens;
  if (options.budget_bytes < block_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kv cache budget of ", options.budget_bytes, " bytes holds less than one block of ",
        block_bytes, " bytes"));
  }
  const int64_t blocks = std::min<int64_t>(options.budget_bytes / block_bytes,
                                           std::numeric_limits<int32_t>::max());
  std::unique_ptr<KvCache> cache(new KvCache(options, static_cast<int>(blocks)));
  QUILL_RETURN_IF_ERROR(cache->AllocateArenas());
  return cache;
}

KvCache::KvCache(const KvCacheOptions& options, int num_blocks)
    : options_(options), num_blocks_(num_blocks) {
  layout_.block_size = options.block_size_tokens;
  layout_.num_kv_heads = options.num_kv_heads;
  layout_.head_dim = options.head_dim;
  arena_floats_ = static_cast<int64_t>(num_blocks) * options.block_size_tokens *
                  options.num_kv_heads * options.head_dim;
  // Popped from the back: block 0 is handed out first.
  free_blocks_.resize(num_blocks);
  for (int i = 0; i < num_blocks; ++i) free_blocks_[i] = num_blocks - 1 - i;
}

KvCache::~KvCache() = default;

absl::Status KvCache::AllocateArenas() {
  const size_t raw = static_cast<size_t>(arena_floats_) * sizeof(float);
  const size_t alignment = raw >= kHugePage ? kHugePage : kArenaAlignment;
  const size_t bytes = (raw + alignment - 1) / alignment * alignment;
  k_arenas_.reserve(options_.num_layers);
  v_arenas_.reserve(options_.num_layers);
  for (int layer = 0; layer < options_.num_layers; ++layer) {
    for (std::vector<Arena>* arenas : {&k_arenas_, &v_arenas_}) {
      Arena arena(static_cast<float*>(std::aligned_alloc(alignment, bytes)));
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

int64_t KvCache::bytes_per_token() const {
  return int64_t{2} * options_.num_layers * options_.num_kv_heads * options_.head_dim *
         static_cast<int64_t>(sizeof(float));
}
int64_t KvCache::block_bytes() const { return bytes_per_token() * options_.block_size_tokens; }
int KvCache::block_size() const { return options_.block_size_tokens; }
int KvCache::num_blocks() const { return num_blocks_; }
int KvCache::num_used_blocks() const {
  return num_blocks_ - static_cast<int>(free_blocks_.size());
}
int KvCache::num_free_blocks() const { return static_cast<int>(free_blocks_.size()); }
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
  const int held = it == tables_.end() ? 0 : static_cast<int>(it->second.size());
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
    return absl::ResourceExhaustedError(absl::StrCat(
        "kv cache: sequence ", seq, " needs ", needed, " more blocks for ", num_tokens,
        " tokens; ", num_free_blocks(), " of ", num_blocks_, " free"));
  }
  auto it = tables_.find(seq);
  if (it == tables_.end()) it = tables_.emplace(seq, TakeTable()).first;
  std::vector<int32_t>& table = it->second;
  for (int i = 0; i < needed; ++i) {
    table.push_back(free_blocks_.back());
    free_blocks_.pop_back();
  }
  return absl::OkStatus();
}

void KvCache::Release(SeqId seq) {
  const auto it = tables_.find(seq);
  if (it == tables_.end()) return;
  std::vector<int32_t>& table = it->second;
  // Reverse order, so a sequence that immediately re-reserves gets its blocks back in order.
  for (auto b = table.rbegin(); b != table.rend(); ++b) free_blocks_.push_back(*b);
  table.clear();
  spare_tables_.push_back(std::move(table));
  tables_.erase(it);
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
  return static_cast<int64_t>(it->second.size()) * options_.block_size_tokens;
}

absl::Span<const int32_t> KvCache::block_table(SeqId seq) const {
  const auto it = tables_.find(seq);
  if (it == tables_.end()) return {};
  return it->second;
}

const kernels::KvLayout& KvCache::layout() const { return layout_; }

float* KvCache::k_data(int layer) {
  QUILL_DCHECK(layer >= 0 && layer < options_.num_layers);
  return k_arenas_[layer].get();
}

float* KvCache::v_data(int layer) {
  QUILL_DCHECK(layer >= 0 && layer < options_.num_layers);
  return v_arenas_[layer].get();
}

int64_t KvCache::SlotOffset(SeqId seq, int64_t pos) const {
  const auto it = tables_.find(seq);
  QUILL_DCHECK(it != tables_.end());
  QUILL_DCHECK(pos >= 0 && pos < capacity_tokens(seq));
  const int64_t bs = options_.block_size_tokens;
  const int64_t block = it->second[pos / bs];
  return (block * bs + pos % bs) * options_.num_kv_heads * options_.head_dim;
}

}  // namespace quill::engine
