#include "engine/runtime/sequence.h"

#include <algorithm>
#include <utility>

#include "engine/base/check.h"
#include "engine/kv_cache/prefix_hash.h"

namespace quill::engine {
namespace {

// The first generated token follows BOS directly only for a BOS-only prompt; then the
// SentencePiece leading space of the first piece is not part of the text.
bool StripLeadingSpace(const GenerationRequest& request, const Tokenizer& tokenizer) {
  return request.prompt_ids.size() == 1 && tokenizer.bos_id() >= 0 &&
         request.prompt_ids[0] == tokenizer.bos_id();
}

absl::Duration Between(absl::Time from, absl::Time to) {
  if (from == absl::InfinitePast() || to == absl::InfinitePast()) return absl::ZeroDuration();
  return std::max(absl::ZeroDuration(), to - from);
}

}  // namespace

Sequence::Sequence(KvCache::SeqId kv_id, GenerationRequest request, std::shared_ptr<TokenSink> sink,
                   const Tokenizer& tokenizer, int vocab_size, absl::Time submit,
                   int hash_block_size, int max_draft_tokens, const TokenBytesTable* token_table)
    : submit_time(submit),
      kv_id_(kv_id),
      request_(std::move(request)),
      sink_(std::move(sink)),
      sampler_(request_.sampling, vocab_size),
      detokenizer_(tokenizer, StripLeadingSpace(request_, tokenizer)),
      stop_matcher_(request_.stop) {
  prompt_tokens_ = static_cast<int>(request_.prompt_ids.size());
  if (request_.json_object) {
    QUILL_CHECK(token_table != nullptr &&
                static_cast<int>(token_table->bytes.size()) == vocab_size);
    json_.emplace(*token_table, request_.json_schema);
    masked_logits_.assign(vocab_size, 0.0f);
  }
  if (request_.thought.has_value()) {
    thought_phase_ = request_.thought->opened ? ThoughtPhase::kThinking : ThoughtPhase::kMayOpen;
  }
  tokens_.reserve(request_.prompt_ids.size() + request_.max_tokens);
  tokens_.assign(request_.prompt_ids.begin(), request_.prompt_ids.end());
  top_scratch_.reserve(request_.logprobs);
  vocab_size_ = vocab_size;
  if (request_.prompt_logprobs) prompt_logprobs_.reserve(prompt_tokens_ - 1);
  verify_.assign(1 + std::max(0, max_draft_tokens), 0);
  hash_block_size_ = hash_block_size;
  if (hash_block_size_ > 0) {
    block_hashes_.reserve(tokens_.capacity() / hash_block_size_ + 1);
    ExtendBlockHashes(tokens_, hash_block_size_, &block_hashes_);
  }
}

absl::Span<const uint64_t> Sequence::prompt_lookup_hashes() const {
  // Prompt logprobs need the logits of every prompt position: nothing comes from the cache.
  if (hash_block_size_ <= 0 || request_.prompt_logprobs) return {};
  const size_t max_blocks = static_cast<size_t>(prompt_tokens_ - 1) / hash_block_size_;
  return absl::MakeConstSpan(block_hashes_).subspan(0, std::min(max_blocks, block_hashes_.size()));
}

void Sequence::SetCachedPromptTokens(int n) {
  QUILL_CHECK(n >= 0 && n < prompt_tokens_ && prefilled_tokens_ == 0);
  cached_prompt_tokens_ = n;
  prefilled_tokens_ = n;
  kv_written_ = n;
}

void Sequence::SetKvWritten(int n) {
  kv_written_ = n;
  // Before admission the vector holds every full prompt block, so it only grows once
  // generated tokens fill blocks; the reserved capacity covers that.
  if (hash_block_size_ > 0) {
    ExtendBlockHashes(absl::MakeConstSpan(tokens_).subspan(0, kv_written_), hash_block_size_,
                      &block_hashes_);
  }
}

void Sequence::SetState(SequenceState next) {
  if (!IsValidTransition(state_, next)) {
    spdlog::critical("request {}: illegal state change {} -> {}", request_.request_id,
                     std::string(SequenceStateName(state_)), std::string(SequenceStateName(next)));
    QUILL_CHECK(false);
  }
  state_ = next;
}

int Sequence::ProposeDraft(const NgramDraftOptions& options, int max_tokens) {
  const absl::Span<TokenId> draft = DraftBuffer(max_tokens);
  SetDrafted(draft.empty() ? 0 : ProposeNgramDraft(tokens_, options, draft));
  return num_drafts_;
}

absl::Span<TokenId> Sequence::DraftBuffer(int max_tokens) {
  const int k = std::max(0, std::min(max_tokens, static_cast<int>(verify_.size()) - 1));
  num_drafts_ = 0;
  verify_[0] = tokens_.back();
  return absl::MakeSpan(verify_).subspan(1, k);
}

void Sequence::SetDrafted(int num_drafts) {
  QUILL_DCHECK(num_drafts >= 0 && num_drafts < static_cast<int>(verify_.size()));
  num_drafts_ = num_drafts;
}

absl::Span<const TokenId> Sequence::VerifyInput(int num_drafts) const {
  QUILL_DCHECK(num_drafts <= num_drafts_ && verify_[0] == tokens_.back());
  return absl::MakeConstSpan(verify_).subspan(0, 1 + num_drafts);
}

absl::Span<const TokenId> Sequence::draft() const {
  return absl::MakeConstSpan(verify_).subspan(1, num_drafts_);
}

void Sequence::AddPromptLogprobs(const float* logits, int first, int rows) {
  QUILL_DCHECK(request_.prompt_logprobs && first + rows < prompt_tokens_);
  QUILL_DCHECK(static_cast<int>(prompt_logprobs_.size()) == first);
  for (int r = 0; r < rows; ++r) {
    GeneratedToken token;
    token.id = tokens_[first + r + 1];
    token.logprob = ComputeLogprobs(
        absl::MakeConstSpan(logits + static_cast<size_t>(r) * vocab_size_, vocab_size_), token.id,
        request_.logprobs, &top_scratch_);
    token.top_logprobs = top_scratch_;
    prompt_logprobs_.push_back(std::move(token));
  }
}

GeneratedToken Sequence::SampleNext(absl::Span<const float> logits) {
  GeneratedToken token;
  const absl::Span<const TokenId> tokens = tokens_;
  absl::Span<const float> candidates = logits;
  if (json_.has_value() && thought_phase_ != ThoughtPhase::kThinking) {
    std::copy(logits.begin(), logits.end(), masked_logits_.begin());
    candidates = masked_logits_;
    const int allowed = json_->Mask(absl::MakeSpan(masked_logits_));
    if (thought_phase_ == ThoughtPhase::kMayOpen) {
      // The answer may open a thought instead of the object.
      const TokenId open = request_.thought->open;
      masked_logits_[open] = logits[open];
    } else if (allowed == 0) {
      // The vocabulary cannot continue the object (it lacks the bytes): end the answer.
      token.id = json_->FirstEndOfGeneration();
      return token;
    }
  }
  token.id = sampler_.Sample(candidates, tokens.subspan(0, prompt_tokens_),
                             tokens.subspan(prompt_tokens_));
  if (request_.logprobs > 0) {
    token.logprob = ComputeLogprobs(logits, token.id, request_.logprobs, &top_scratch_);
    token.top_logprobs = top_scratch_;
  }
  return token;
}

bool Sequence::AcceptToken(TokenId id, std::string* text) {
  QUILL_DCHECK(tokens_.size() < tokens_.capacity());
  tokens_.push_back(id);
  ++completion_tokens_;
  if (AdvanceThought(id) && json_.has_value()) json_->Advance(id);
  return stop_matcher_.Push(detokenizer_.Push(id), text);
}

bool Sequence::AdvanceThought(TokenId id) {
  switch (thought_phase_) {
    case ThoughtPhase::kAfter:
      return true;
    case ThoughtPhase::kMayOpen:
      if (id != request_.thought->open) {
        thought_phase_ = ThoughtPhase::kAfter;
        return true;
      }
      thought_phase_ = ThoughtPhase::kThinking;
      ++reasoning_tokens_;
      return false;
    case ThoughtPhase::kThinking:
      ++reasoning_tokens_;
      if (id == request_.thought->close) thought_phase_ = ThoughtPhase::kAfter;
      return false;
  }
  return true;
}

bool Sequence::FlushText(std::string* text) {
  if (stop_matcher_.matched()) return true;
  if (stop_matcher_.Push(detokenizer_.Flush(), text)) return true;
  stop_matcher_.Flush(text);
  return false;
}

bool Sequence::IsStopToken(TokenId id) const {
  return std::find(request_.stop_token_ids.begin(), request_.stop_token_ids.end(), id) !=
         request_.stop_token_ids.end();
}

void Sequence::MarkFinished(FinishReason reason, absl::Status status) {
  if (finish_pending_) return;  // the first reason wins
  finish_pending_ = true;
  finish_reason_ = reason;
  finish_status_ = std::move(status);
}

RequestTimings Sequence::Timings(absl::Time finish_time) const {
  RequestTimings t;
  const bool admitted = admit_time != absl::InfinitePast();
  t.queue_wait = Between(submit_time, admitted ? admit_time : finish_time);
  if (admitted) {
    t.prefill = Between(
        admit_time, prefill_done_time != absl::InfinitePast() ? prefill_done_time : finish_time);
  }
  t.time_to_first_token = Between(submit_time, first_token_time);
  t.decode = Between(first_token_time, finish_time);
  t.total = Between(submit_time, finish_time);
  return t;
}

}  // namespace quill::engine
