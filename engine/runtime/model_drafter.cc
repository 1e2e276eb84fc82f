#include "engine/runtime/model_drafter.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/base/check.h"
#include "engine/base/status_macros.h"
#include "spdlog/spdlog.h"

namespace quill::engine {
namespace {

// Same ids must mean the same text, or the target would verify drafts of other words.
absl::Status CheckSameVocabulary(const Tokenizer& draft, const Tokenizer& target) {
  if (draft.vocab_size() != target.vocab_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the draft model's vocabulary has ", draft.vocab_size(), " tokens and the target's ",
        target.vocab_size(), ": speculative drafting needs the same vocabulary"));
  }
  for (TokenId id = 0; id < target.vocab_size(); ++id) {
    if (draft.token_text(id) != target.token_text(id)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the draft model's token ", id, " is \"", draft.token_text(id), "\" and the target's \"",
          target.token_text(id), "\": speculative drafting needs the same vocabulary"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ModelDrafter>> ModelDrafter::Create(
    std::unique_ptr<StepModel> draft, const StepModel& target, int64_t kv_tokens, int block_size,
    int max_sequences, int max_draft_tokens) {
  if (draft == nullptr) return absl::InvalidArgumentError("draft model must not be null");
  QUILL_RETURN_IF_ERROR(CheckSameVocabulary(draft->tokenizer(), target.tokenizer()));
  if (max_sequences > draft->max_batch_tokens()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the draft model takes ", draft->max_batch_tokens(), " tokens per step, fewer than the ",
        max_sequences, " sequences that may draft at once"));
  }
  KvCacheOptions kv_options = draft->MakeKvCacheOptions(int64_t{1}, block_size);
  kv_options = draft->MakeKvCacheOptions(kv_options.BudgetForTokens(kv_tokens), block_size);
  QUILL_ASSIGN_OR_RETURN(std::unique_ptr<KvCache> kv, KvCache::Create(kv_options));
  spdlog::info("draft model kv cache: blocks={} block_size_tokens={} bytes={}", kv->num_blocks(),
               kv->block_size(), kv->total_bytes());
  return std::unique_ptr<ModelDrafter>(
      new ModelDrafter(std::move(draft), std::move(kv), max_sequences, max_draft_tokens));
}

ModelDrafter::ModelDrafter(std::unique_ptr<StepModel> draft, std::unique_ptr<KvCache> kv,
                           int max_sequences, int max_draft_tokens)
    : draft_(std::move(draft)),
      kv_(std::move(kv)),
      vocab_size_(draft_->vocab_size()),
      max_batch_tokens_(draft_->max_batch_tokens()),
      context_length_(draft_->context_length()),
      max_draft_tokens_(max_draft_tokens) {
  active_.reserve(max_sequences);
  batch_.reserve(max_sequences);
  logits_.assign(static_cast<size_t>(max_sequences) * vocab_size_, 0.0f);
}

int64_t ModelDrafter::ValidPositions(const SeqState& state,
                                     absl::Span<const TokenId> history) const {
  // The fed drafts hold for as long as they match what the target emitted; the last
  // history token is the next input, so it never counts as seen.
  int64_t valid = state.base;
  for (TokenId fed : state.fed) {
    if (valid + 1 >= static_cast<int64_t>(history.size()) || history[valid] != fed) break;
    ++valid;
  }
  return std::min<int64_t>(valid, static_cast<int64_t>(history.size()) - 1);
}

TokenId ModelDrafter::ArgMax(const float* logits) const {
  return static_cast<TokenId>(std::max_element(logits, logits + vocab_size_) - logits);
}

void ModelDrafter::Propose(absl::Span<Proposal> proposals) {
  // Round 0: each sequence catches up from what its draft KV holds to its last token, and
  // the last row's logits give its first draft. Catch-ups share max_batch_tokens; a
  // sequence whose catch-up does not fit takes a chunk and drafts in a later step.
  active_.clear();
  batch_.clear();
  int budget = max_batch_tokens_;
  for (Proposal& p : proposals) {
    p.drafted = 0;
    if (p.draft.empty()) continue;
    auto [it, inserted] = states_.try_emplace(p.seq);
    SeqState& state = it->second;
    if (inserted) {
      state.fed.reserve(max_draft_tokens_);  // spans into it stay valid within a round
      state.usable =
          p.reserve_tokens <= context_length_ && kv_->Reserve(p.seq, p.reserve_tokens).ok();
      if (!state.usable) {
        spdlog::debug("draft model: sequence {} does not draft (no draft KV or past its context)",
                      p.seq);
      }
    }
    if (!state.usable || budget == 0) continue;
    const int64_t valid = ValidPositions(state, p.history);
    const int64_t last = static_cast<int64_t>(p.history.size()) - 1;
    const int64_t catch_up = std::min<int64_t>(last + 1 - valid, budget);
    BatchEntry entry;
    entry.seq = p.seq;
    entry.first_pos = static_cast<int32_t>(valid);
    entry.tokens = p.history.subspan(valid, catch_up);
    budget -= static_cast<int>(catch_up);
    state.base = valid + catch_up;
    state.fed.clear();
    // Whole catch-up: its last row gives the first draft. A chunk: no logits, no drafts.
    entry.want_logits = valid + catch_up == last + 1;
    batch_.push_back(entry);
    if (entry.want_logits) active_.push_back({&p, &state, last + 1});
  }
  if (batch_.empty()) return;
  if (!draft_->Forward(batch_, *kv_, logits_.data()).ok()) {
    // Drafting is an optimization: a failed draft step only means no drafts. Forget what
    // the draft KV holds so the next round starts over.
    for (Proposal& p : proposals) {
      auto it = states_.find(p.seq);
      if (it != states_.end()) it->second.base = 0;
    }
    spdlog::warn("draft model: forward step failed; no drafts this step");
    return;
  }

  // Rounds 1..k-1: every sequence still drafting feeds its newest draft (one token per
  // entry) and reads the next from the logits.
  while (true) {
    batch_.clear();
    size_t row = 0;
    size_t kept = 0;
    for (Active& a : active_) {
      const TokenId next = ArgMax(logits_.data() + row++ * vocab_size_);
      Proposal& p = *a.proposal;
      p.draft[p.drafted++] = next;
      // Another round only if the sequence wants more drafts and its reservation has room
      // for the K/V of the token fed to produce it.
      if (p.drafted == static_cast<int>(p.draft.size()) || a.next_pos >= p.reserve_tokens) {
        continue;
      }
      a.state->fed.push_back(next);
      BatchEntry entry;
      entry.seq = p.seq;
      entry.first_pos = static_cast<int32_t>(a.next_pos);
      entry.tokens = absl::MakeConstSpan(a.state->fed).subspan(a.state->fed.size() - 1, 1);
      entry.want_logits = true;
      batch_.push_back(entry);
      ++a.next_pos;
      active_[kept++] = a;
    }
    active_.resize(kept);
    if (batch_.empty()) return;
    if (!draft_->Forward(batch_, *kv_, logits_.data()).ok()) {
      for (Active& a : active_) a.state->fed.clear();  // keep the drafts made so far
      spdlog::warn("draft model: forward step failed; drafts cut short");
      return;
    }
  }
}

void ModelDrafter::Release(KvCache::SeqId seq) {
  if (states_.erase(seq) > 0) kv_->Release(seq);
}

}  // namespace quill::engine
