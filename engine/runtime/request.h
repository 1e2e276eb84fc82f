#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "engine/sampler/sampler.h"
#include "engine/tokenizer/tokenizer.h"

namespace quill::engine {

class JsonSchema;  // engine/sampler/json_schema.h

// Plain structs that cross the engine boundary. The server converts protos to and from
// these; the engine never sees a proto.

// kStalled: the consumer stopped reading and the request stayed paused (see
// TokenSink::WouldBlock) for EngineOptions::stall_timeout.
enum class FinishReason {
  kLength,
  kStop,
  kEos,
  kCancelled,
  kDeadline,
  kError,
  kShutdown,
  kStalled
};

// "length", "stop", "eos", "cancelled", "deadline", "error", "shutdown", "stalled".
absl::string_view FinishReasonName(FinishReason reason);

// OK if every byte of `value` is printable ASCII (0x20..0x7E); otherwise INVALID_ARGUMENT
// naming `field` and the first offending byte. Request ids (and other client-chosen names)
// end up in log lines and responses, where a newline could forge a line.
absl::Status CheckPrintableAscii(absl::string_view field, absl::string_view value);

// A reasoning model's chat whose thought tags are single tokens: the answer's thought runs
// from its start when the prompt opened it (`opened`), or from an answer's first token that
// is `open`, to the first `close` (tags included). The engine counts its tokens
// (FinishInfo::reasoning_tokens); in JSON mode the mask leaves the thought free and the
// object follows it (at the first token, `open` may come instead of what begins the
// object). An answer that never closes its thought is all thought, and holds no object.
struct ThoughtTokens {
  TokenId open = -1;
  TokenId close = -1;
  bool opened = false;  // the prompt opened the thought (DeepSeek R1's templates do)
};

struct GenerationRequest {
  std::string request_id;           // unique among live requests
  std::vector<TokenId> prompt_ids;  // already tokenized (BOS included where the vocab wants it)
  int max_tokens = 16;
  SamplingParams sampling;
  std::vector<std::string> stop;  // stop strings, matched on the generated text
  std::vector<TokenId> stop_token_ids;
  bool ignore_eos = false;
  int logprobs = 0;  // top alternatives per token (0 = none)
  // The logprob of every prompt token after the first (with `logprobs` alternatives),
  // delivered with the first TokenChunk. Such a prompt is computed in full, never taken
  // from the prefix cache (whose blocks carry no logits), in steps of at most
  // kPromptLogitRowsPerStep tokens.
  bool prompt_logprobs = false;
  // Opts out of speculative decoding (EngineOptions::spec_tokens); the output is the same
  // either way, only the speed differs.
  bool disable_speculation = false;
  // JSON mode (OpenAI's response_format json_object): the output is one JSON object. Each
  // step, tokens that would break it are masked out before sampling (logprobs still come
  // from the raw logits); once it closes, only end-of-generation tokens may follow. It
  // never speculates, and cannot be combined with ignore_eos. At max_tokens the object may
  // be unfinished (finish reason "length"), as with OpenAI.
  bool json_object = false;
  // With json_object: the object also satisfies this schema (OpenAI's response_format
  // json_schema), kept by the same mask.
  std::shared_ptr<const JsonSchema> json_schema;
  // A reasoning model's thought, when its tags are single tokens (ThoughtTokens).
  std::optional<ThoughtTokens> thought;
  absl::Time deadline = absl::InfiniteFuture();
  // Opaque to the engine: copied into FinishInfo so that its observer can tell front ends
  // apart (the server's metrics label requests "grpc" or "http").
  std::string frontend;
  // Whose request this is (the server's API key name, or x-quill-tenant): waiting requests
  // are admitted weighted-fair across tenants (fair_queue.h), FIFO within one. "" is the
  // default tenant. Printable ASCII, at most kMaxTenantBytes.
  std::string tenant;
  // The tenant's share of admissions relative to other tenants with queued requests, in
  // [1, kMaxTenantWeight].
  int tenant_weight = 1;
};

inline constexpr size_t kMaxTenantBytes = 64;
inline constexpr int kMaxTenantWeight = 1000;
// Rows of logits one step computes for prompt logprobs, over all requests: the engine's
// logits buffer holds this many rows of the vocabulary beyond the decoders'.
inline constexpr int kPromptLogitRowsPerStep = 64;

struct GeneratedToken {
  TokenId id = 0;
  float logprob = 0.0f;                    // of the chosen token (raw-logit log-softmax)
  std::vector<TokenLogprob> top_logprobs;  // `logprobs` alternatives, empty when 0
};

// What one engine step produced for one request.
struct TokenChunk {
  std::vector<GeneratedToken> tokens;
  // The text these tokens complete: valid UTF-8, never half a character; text held back
  // because it might begin a stop string comes in a later chunk (or never, if it stops).
  std::string text;
  // With GenerationRequest::prompt_logprobs, in the request's first chunk only: prompt
  // tokens 1 .. P-1 (id, logprob given the tokens before, alternatives).
  std::vector<GeneratedToken> prompt_logprobs;
};

struct RequestTimings {
  absl::Duration queue_wait;           // submitted -> admitted to the running set
  absl::Duration prefill;              // admitted -> prompt fully processed
  absl::Duration time_to_first_token;  // submitted -> first token emitted
  absl::Duration decode;               // first token -> finish
  absl::Duration total;                // submitted -> finish
};

struct FinishInfo {
  FinishReason reason = FinishReason::kLength;
  // OK for length/stop/eos; CANCELLED, DEADLINE_EXCEEDED (deadline, stalled), UNAVAILABLE
  // (shutdown) or INTERNAL otherwise, with a message.
  absl::Status status;
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_prompt_tokens = 0;  // prompt tokens whose K/V came from the prefix cache
  // With GenerationRequest::thought: of completion_tokens, those of the thought.
  std::optional<int> reasoning_tokens;
  RequestTimings timings;
  std::string frontend;  // GenerationRequest::frontend
  std::string tenant;    // GenerationRequest::tenant
};

}  // namespace quill::engine
