#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/node_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/kv_cache/kv_cache.h"
#include "engine/runtime/step_model.h"

namespace quill::engine {

// Speculative drafting with a draft model (--draft-model): a smaller model of the same
// vocabulary proposes the next k tokens of a sequence greedily, and the target verifies
// them as it verifies n-gram drafts. A greedy (deterministic) draft keeps verification
// lossless under sampling too: the engine accepts a draft token exactly when the target's
// own sample picks it, which is the standard accept/reject rule for a one-hot proposal.
//
// The draft model keeps its own paged KV cache, with a sequence under the target's SeqId.
// What it holds is tracked per sequence: after a round, the history it has seen plus the
// drafts it fed itself; at the next round the drafts the target accepted stay valid, the
// rest is overwritten, and only the tokens since then are fed (the first round prefills
// the whole prompt). All sequences of a round share each of its k forward calls.
// Engine thread only; allocates only when it first sees a sequence.
class ModelDrafter {
 public:
  // INVALID_ARGUMENT when the vocabularies differ (size or any token's text).
  // `kv_tokens` and `block_size` size the draft KV pool (the target pool's token capacity,
  // so that every sequence the target holds fits); `max_sequences` and `max_draft_tokens`
  // bound one round (a proposal's draft.size() <= max_draft_tokens).
  static absl::StatusOr<std::unique_ptr<ModelDrafter>> Create(std::unique_ptr<StepModel> draft,
                                                              const StepModel& target,
                                                              int64_t kv_tokens, int block_size,
                                                              int max_sequences,
                                                              int max_draft_tokens);

  // One sequence's part of a round: its history (prompt and output so far, ending with the
  // token the target decodes next), the positions it may ever use (its KV reservation),
  // and where its drafts go (draft.size() = the most it wants). `drafted` is set to the
  // number written: 0 when the sequence cannot draft this round (no draft KV left, past
  // the draft model's context, or a long catch-up still under way).
  struct Proposal {
    KvCache::SeqId seq = 0;
    absl::Span<const TokenId> history;
    int64_t reserve_tokens = 0;
    absl::Span<TokenId> draft;
    int drafted = 0;
  };
  void Propose(absl::Span<Proposal> proposals);

  // The sequence ended: frees its draft KV.
  void Release(KvCache::SeqId seq);

  const StepModel& draft_model() const { return *draft_; }
  int64_t kv_bytes() const { return kv_->total_bytes(); }
  int kv_blocks_used() const { return kv_->num_used_blocks(); }

 private:
  struct SeqState {
    int64_t base = 0;          // history positions [0, base) were fed
    std::vector<TokenId> fed;  // drafts fed after them, at positions base, base + 1, ...
    bool usable = true;        // false: no draft KV could be reserved
  };
  // Drafting rows in the current round.
  struct Active {
    Proposal* proposal;
    SeqState* state;
    int64_t next_pos;  // position of the next input token
  };

  ModelDrafter(std::unique_ptr<StepModel> draft, std::unique_ptr<KvCache> kv, int max_sequences,
               int max_draft_tokens);
  // How many leading positions of `history` the draft KV holds correctly (never the last,
  // which is the next input).
  int64_t ValidPositions(const SeqState& state, absl::Span<const TokenId> history) const;
  TokenId ArgMax(const float* logits) const;

  std::unique_ptr<StepModel> draft_;
  std::unique_ptr<KvCache> kv_;
  int vocab_size_ = 0;
  int max_batch_tokens_ = 0;
  int context_length_ = 0;
  int max_draft_tokens_ = 0;  // most drafts one proposal asks for
  // Node-based: rounds hold pointers to states while new sequences are inserted.
  absl::node_hash_map<KvCache::SeqId, SeqState> states_;
  std::vector<Active> active_;
  std::vector<BatchEntry> batch_;
  std::vector<float> logits_;  // one row per sequence of a round
};

}  // namespace quill::engine
