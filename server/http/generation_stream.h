#pragma once

// One HTTP generation: the engine's TokenSinks on one side (one per choice: OpenAI's `n`
// runs n engine requests), the connection's ResponseSource on the other (the HTTP
// counterpart of server/generate_reactor.h's StreamChannel).
//
// The engine thread only appends to a choice's pending output under a short lock and
// wakes the connection; the connection's thread pulls and formats (JSON, SSE) whatever
// accumulated, so a slow client gets fewer, larger events and the engine never waits. What
// may accumulate is bounded: a stream's engine request is paused (WouldBlock) once
// kMaxUnsentChunks chunks of its choice wait while the connection is still writing the
// previous event, and resumed when the connection pulls them; and, as a backstop,
// `max_pending_bytes` of text over all choices, beyond which the client counts as gone
// (its requests are cancelled). A body (not streamed) is the whole answer by design,
// bounded by max_tokens, and so is the part of a stream's answer that may be a tool call.
//
// Streaming responses start (HTTP 200, text/event-stream) with the first output; a request
// that fails before any output (e.g. the server drains while it waits) gets a plain HTTP
// error instead, and one that fails later gets an SSE error event. One failed choice fails
// the response: the other choices are cancelled.

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "engine/chat/reasoning.h"
#include "engine/runtime/request.h"
#include "engine/runtime/token_sink.h"
#include "server/http/http_exchange.h"
#include "server/http/openai_response.h"
#include "server/stream_limits.h"

namespace quill::server::http {

class GenerationStream final : public ResponseSource {
 public:
  // `cancel` tells the engine to drop every choice's request (never blocks); called at
  // most once, when the client goes away before the end or a choice fails. `resume` (may
  // be empty) tells the engine choice `index`'s backlog drained (never blocks); called from
  // Next() after WouldBlock(index) said true.
  GenerationStream(ResponseFormat format, bool stream, std::shared_ptr<ResponseChannel> channel,
                   std::function<void()> cancel, int64_t max_pending_bytes = 1 << 20,
                   std::function<void(int index)> resume = nullptr);

  // The engine's sink for choice `index` in [0, format.choices); it keeps `stream` alive.
  static std::shared_ptr<engine::TokenSink> SinkFor(std::shared_ptr<GenerationStream> stream,
                                                    int index);

  // engine::TokenSink of choice `index` (engine thread).
  bool OnChunk(int index, engine::TokenChunk chunk) ABSL_LOCKS_EXCLUDED(mu_);
  void OnFinish(int index, const engine::FinishInfo& info) ABSL_LOCKS_EXCLUDED(mu_);
  // Streams only: true while kMaxUnsentChunks chunks of choice `index` wait.
  bool WouldBlock(int index) ABSL_LOCKS_EXCLUDED(mu_);

  // ResponseSource (connection thread).
  HttpOutput Next() override ABSL_LOCKS_EXCLUDED(mu_);
  void OnClientGone() override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Choice {
    OutputDelta pending;         // streams: since the last event; bodies: all
    int pending_chunks = 0;      // engine chunks in `pending`
    bool reported_full = false;  // WouldBlock() said true
    std::optional<engine::FinishInfo> finish;
    bool finish_sent = false;  // streams: its finish_reason event went out
    bool role_sent = false;    // chat streams: its first event (with the role) went out
    bool content_sent = false;  // streams: some of its content went out
    // With format.reasoning.split: parts the answer's text into thought and content.
    std::optional<engine::chat::ReasoningSplitter> reasoning;
    // Streams: whether `pending` may be or become a tool call (format.tool_calls); then it
    // waits for the end of the answer, and the engine is never paused for it.
    engine::chat::ToolCallHold hold = engine::chat::ToolCallHold::kNo;
    bool held() const { return hold != engine::chat::ToolCallHold::kNo; }
    int completion_tokens = 0;
    LogprobsCursor cursor;
    bool echoed = false;  // with echo: the prompt went into `pending`
  };

  // Adds a chunk's text, split into thought and content, to c's pending output.
  void AppendTextLocked(Choice& c, engine::chat::ReasoningSplitter::Parts parts)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Puts the echoed prompt (text; with logprobs its tokens, `scored` holding the engine's
  // prompt logprobs) at the start of the choice's output.
  void EchoLocked(int index, std::vector<engine::GeneratedToken>* scored)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  HttpOutput NextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  HttpOutput NextStreamLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  HttpOutput NextBodyLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool AllFinishedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The response's usage: every prompt once, the completion tokens of every choice.
  engine::FinishInfo UsageLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int CompletionTokensLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ResponseFormat format_;
  const bool stream_;
  const std::shared_ptr<ResponseChannel> channel_;
  const std::function<void()> cancel_;
  const int64_t max_pending_bytes_;
  const std::function<void(int)> resume_;

  absl::Mutex mu_;
  std::vector<Choice> choices_ ABSL_GUARDED_BY(mu_);
  int64_t pending_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // text in every choice's `pending`
  bool gone_ ABSL_GUARDED_BY(mu_) = false;     // client left or fell too far behind
  bool started_ ABSL_GUARDED_BY(mu_) = false;  // the response head went out
  bool done_ ABSL_GUARDED_BY(mu_) = false;     // the last output went out
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);  // the first choice that failed
};

}  // namespace quill::server::http
