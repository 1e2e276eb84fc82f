#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "engine/kv_cache/kv_cache.h"
#include "engine/runtime/draft_backoff.h"
#include "engine/runtime/ngram_drafter.h"
#include "engine/runtime/request.h"
#include "engine/runtime/sequence_state.h"
#include "engine/runtime/stop_matcher.h"
#include "engine/runtime/token_sink.h"
#include "engine/sampler/json_constraint.h"
#include "engine/sampler/sampler.h"
#include "engine/tokenizer/tokenizer.h"

namespace quill::engine {

// One request inside the engine. Built on the submitting thread, then owned and touched
// only by the engine thread. State changes go through SetState(), which rejects illegal
// moves (a bug) by aborting.
class Sequence {
 public:
  // `hash_block_size` > 0 turns on the block hashes for prefix caching (the KV block
  // size); they are computed here, on the submitting thread, for the prompt.
  // `max_draft_tokens` sizes the speculative-decoding buffer (0 = never drafts).
  // `token_table` (the vocabulary's bytes, which must outlive the sequence) is needed for
  // JSON mode (request.json_object).
  Sequence(KvCache::SeqId kv_id, GenerationRequest request, std::shared_ptr<TokenSink> sink,
           const Tokenizer& tokenizer, int vocab_size, absl::Time submit_time,
           int hash_block_size = 0, int max_draft_tokens = 0,
           const TokenBytesTable* token_table = nullptr);
  Sequence(const Sequence&) = delete;
  Sequence& operator=(const Sequence&) = delete;

  SequenceState state() const { return state_; }
  void SetState(SequenceState next);

  KvCache::SeqId kv_id() const { return kv_id_; }
  const GenerationRequest& request() const { return request_; }
  const std::string& id() const { return request_.request_id; }
  TokenSink& sink() { return *sink_; }

  int prompt_tokens() const { return prompt_tokens_; }
  int prefilled_tokens() const { return prefilled_tokens_; }
  void AddPrefilled(int n) { prefilled_tokens_ += n; }
  int completion_tokens() const { return completion_tokens_; }
  // Of completion_tokens, those of the thought (request().thought; 0 without one).
  int reasoning_tokens() const { return reasoning_tokens_; }

  // Prefix caching. Chained hashes of the full blocks of tokens() whose K/V is written
  // (of the whole prompt's full blocks before admission); capacity reserved up front.
  absl::Span<const uint64_t> block_hashes() const { return block_hashes_; }
  // The prompt blocks worth looking up: all full ones but never the last prompt token,
  // which must be computed to give logits.
  absl::Span<const uint64_t> prompt_lookup_hashes() const;
  // At admission: the first `n` prompt tokens came from the cache.
  void SetCachedPromptTokens(int n);
  int cached_prompt_tokens() const { return cached_prompt_tokens_; }
  // After a forward step: K/V is now written for positions [0, n); extends the hashes.
  void SetKvWritten(int n);
  int kv_written() const { return kv_written_; }
  // Prompt followed by every generated token; capacity reserved up front, so spans
  // into it stay valid.
  absl::Span<const TokenId> tokens() const { return tokens_; }
  // KV positions the request can ever need, reserved at admission.
  int64_t kv_tokens_reserved() const { return prompt_tokens_ + request_.max_tokens; }
  // One token to make, sampled from the prompt's last logits: it never decodes.
  bool ends_at_prefill() const { return request_.max_tokens == 1; }

  // Speculative decoding. Proposes up to `max_tokens` (<= max_draft_tokens) draft tokens
  // by n-gram lookup over tokens(); returns how many.
  int ProposeDraft(const NgramDraftOptions& options, int max_tokens);
  // For another drafter (a draft model): where up to `max_tokens` (<= max_draft_tokens)
  // drafts go, then how many it wrote.
  absl::Span<TokenId> DraftBuffer(int max_tokens);
  void SetDrafted(int num_drafts);
  // The verification input: the last token followed by the first `num_drafts` drafts.
  absl::Span<const TokenId> VerifyInput(int num_drafts) const;
  absl::Span<const TokenId> draft() const;  // the proposed drafts
  DraftBackoff& draft_backoff() { return draft_backoff_; }

  // Prompt logprobs (request().prompt_logprobs): `rows` logits rows of a prompt chunk
  // starting at prompt position `first`; row r scores the prompt token at first + r + 1.
  void AddPromptLogprobs(const float* logits, int first, int rows);
  // What AddPromptLogprobs gathered, for the first chunk (empty after).
  std::vector<GeneratedToken> TakePromptLogprobs() { return std::exchange(prompt_logprobs_, {}); }

  // Samples the next token from this sequence's logits row, with logprobs if asked.
  GeneratedToken SampleNext(absl::Span<const float> logits);
  // Records a generated token as output: appends it to the history, counts it, and
  // appends its releasable text to `text`. Returns true if a stop string matched.
  bool AcceptToken(TokenId id, std::string* text);
  // End of output (not by stop string): flushes held UTF-8 bytes and stop-string
  // lookahead into `text`. Returns true if the flushed text completed a stop string.
  bool FlushText(std::string* text);

  bool IsStopToken(TokenId id) const;

  // Finish bookkeeping: set once by MarkFinished, acted on by the engine's EndMarked.
  void MarkFinished(FinishReason reason, absl::Status status);
  bool finish_pending() const { return finish_pending_; }
  FinishReason finish_reason() const { return finish_reason_; }
  const absl::Status& finish_status() const { return finish_status_; }

  // Admission bookkeeping (see Inbox): the KV blocks admission reserves, and whether the
  // request holds a run slot and those blocks in the inbox's ledger (promised at submit,
  // or admitted from the queue).
  int kv_blocks = 0;
  bool holds_capacity = false;
  // Admission was held back at least once for prompt blocks a request ahead was prefilling.
  bool awaited_shared_prefix = false;

  // Backpressure (see TokenSink::WouldBlock): since when the request has been paused
  // because its consumer stopped reading; absl::InfinitePast() = not paused.
  absl::Time paused_since = absl::InfinitePast();
  bool paused() const { return paused_since != absl::InfinitePast(); }
  // Paused, but its consumer has drained: it rejoins as soon as a run slot is free.
  bool resume_ready = false;

  // Timings (absl::InfinitePast() = not reached).
  absl::Time submit_time;
  absl::Time admit_time = absl::InfinitePast();
  absl::Time prefill_done_time = absl::InfinitePast();
  absl::Time first_token_time = absl::InfinitePast();
  absl::Time last_token_time = absl::InfinitePast();
  RequestTimings Timings(absl::Time finish_time) const;

 private:
  KvCache::SeqId kv_id_;
  GenerationRequest request_;
  std::shared_ptr<TokenSink> sink_;
  SequenceState state_ = SequenceState::kWaiting;
  Sampler sampler_;
  IncrementalDetokenizer detokenizer_;
  StopStringMatcher stop_matcher_;
  std::vector<TokenId> tokens_;
  std::vector<TokenLogprob> top_scratch_;
  // Where the answer is with respect to its thought (request.thought): at its first token
  // (which may open one), in it, or past it (or without one).
  enum class ThoughtPhase { kMayOpen, kThinking, kAfter };
  ThoughtPhase thought_phase_ = ThoughtPhase::kAfter;
  int reasoning_tokens_ = 0;
  // JSON mode: the object so far, and the logits it masks (sized once).
  std::optional<JsonConstraint> json_;
  // The accepted token `id` moves the answer through its thought; returns whether `id` is
  // part of the answer after the thought.
  bool AdvanceThought(TokenId id);
  std::vector<float> masked_logits_;
  std::vector<GeneratedToken> prompt_logprobs_;  // capacity reserved up front
  int vocab_size_ = 0;
  std::vector<TokenId> verify_;  // [last token, drafts...], sized once
  int num_drafts_ = 0;
  DraftBackoff draft_backoff_;
  int hash_block_size_ = 0;
  std::vector<uint64_t> block_hashes_;
  int cached_prompt_tokens_ = 0;
  int kv_written_ = 0;
  int prompt_tokens_ = 0;
  int prefilled_tokens_ = 0;
  int completion_tokens_ = 0;
  bool finish_pending_ = false;
  FinishReason finish_reason_ = FinishReason::kLength;
  absl::Status finish_status_;
};

}  // namespace quill::engine
