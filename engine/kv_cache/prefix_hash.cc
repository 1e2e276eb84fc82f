#include "engine/kv_cache/prefix_hash.h"

#include "absl/numeric/int128.h"

namespace quill::engine {
namespace {

// wyhash's 64x64 -> 128-bit multiply-and-fold: every input bit reaches every output bit
// in one step, and it is cheap enough to run over whole prompts at submit time.
inline uint64_t Mum(uint64_t a, uint64_t b) {
  const absl::uint128 product = absl::uint128(a) * b;
  return absl::Uint128Low64(product) ^ absl::Uint128High64(product);
}

constexpr uint64_t kSecret0 = 0xa0761d6478bd642full;
constexpr uint64_t kSecret1 = 0xe7037ed1a0b428dbull;
constexpr uint64_t kSecret2 = 0x8ebc6af09c88c6e3ull;

}  // namespace

uint64_t HashBlock(uint64_t parent_hash, absl::Span<const TokenId> tokens) {
  uint64_t h = parent_hash ^ kSecret0;
  size_t i = 0;
  for (; i + 1 < tokens.size(); i += 2) {
    const uint64_t pair = static_cast<uint32_t>(tokens[i]) |
                          (static_cast<uint64_t>(static_cast<uint32_t>(tokens[i + 1])) << 32);
    h = Mum(h ^ kSecret1, pair ^ kSecret2);
  }
  if (i < tokens.size()) h = Mum(h ^ kSecret1, static_cast<uint32_t>(tokens[i]) ^ kSecret0);
  // The length goes in last so blocks of different sizes never share a hash by padding.
  return Mum(h ^ kSecret2, static_cast<uint64_t>(tokens.size()) ^ kSecret1);
}

void ExtendBlockHashes(absl::Span<const TokenId> tokens, int block_size,
                       std::vector<uint64_t>* hashes) {
  const size_t full = tokens.size() / static_cast<size_t>(block_size);
  while (hashes->size() < full) {
    const size_t b = hashes->size();
    const uint64_t parent = b == 0 ? kRootBlockHash : (*hashes)[b - 1];
    hashes->push_back(HashBlock(parent, tokens.subspan(b * block_size, block_size)));
  }
}

}  // namespace quill::engine
