#pragma once

// One HTTP generation: the engine's TokenSink on one side, the connection's ResponseSource
// on the other (the HTTP counterpart of server/generate_reactor.h's StreamChannel).
//
// The engine thread only appends to `pending_` under a short lock and wakes the
// connection; the connection's thread pulls and formats (JSON, SSE) whatever accumulated,
// so a slow client gets fewer, larger events and the engine never waits. What may
// accumulate is bounded: a stream's engine request is paused (WouldBlock) once
// kMaxUnsentChunks chunks wait while the connection is still writing the previous event,
// and resumed when the connection pulls them; and, as a backstop, `max_pending_bytes` of
// text, beyond which the client counts as gone (its request is cancelled). A body (not
// streamed) is the whole answer by design, bounded by max_tokens.
//
// Streaming responses start (HTTP 200, text/event-stream) with the first output; a request
// that fails before any output (e.g. the server drains while it waits) gets a plain HTTP
// error instead, and one that fails later gets an SSE error event.

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "engine/runtime/request.h"
#include "engine/runtime/token_sink.h"
#include "server/http/http_exchange.h"
#include "server/http/openai_response.h"
#include "server/stream_limits.h"

namespace quill::server::http {

class GenerationStream final : public engine::TokenSink, public ResponseSource {
 public:
  // `cancel` tells the engine to drop the request (never blocks); called at most once,
  // when the client goes away before the end. `resume` (may be empty) tells the engine
  // the backlog drained (never blocks); called from Next() after WouldBlock() said true.
  GenerationStream(ResponseFormat format, bool stream, std::shared_ptr<ResponseChannel> channel,
                   std::function<void()> cancel, int64_t max_pending_bytes = 1 << 20,
                   std::function<void()> resume = nullptr);

  // engine::TokenSink (engine thread).
  bool OnChunk(engine::TokenChunk chunk) override ABSL_LOCKS_EXCLUDED(mu_);
  void OnFinish(const engine::FinishInfo& info) override ABSL_LOCKS_EXCLUDED(mu_);
  // Streams only: true while kMaxUnsentChunks chunks wait for the connection.
  bool WouldBlock() override ABSL_LOCKS_EXCLUDED(mu_);

  // ResponseSource (connection thread).
  HttpOutput Next() override ABSL_LOCKS_EXCLUDED(mu_);
  void OnClientGone() override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  HttpOutput NextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  HttpOutput NextStreamLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  HttpOutput NextBodyLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ResponseFormat format_;
  const bool stream_;
  const std::shared_ptr<ResponseChannel> channel_;
  const std::function<void()> cancel_;
  const int64_t max_pending_bytes_;
  const std::function<void()> resume_;

  absl::Mutex mu_;
  OutputDelta pending_ ABSL_GUARDED_BY(mu_);  // streams: since the last event; bodies: all
  int pending_chunks_ ABSL_GUARDED_BY(mu_) = 0;      // engine chunks in pending_
  bool reported_full_ ABSL_GUARDED_BY(mu_) = false;  // WouldBlock() said true
  std::optional<engine::FinishInfo> finish_ ABSL_GUARDED_BY(mu_);
  int completion_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  bool gone_ ABSL_GUARDED_BY(mu_) = false;     // client left or fell too far behind
  bool started_ ABSL_GUARDED_BY(mu_) = false;  // the response head went out
  bool done_ ABSL_GUARDED_BY(mu_) = false;     // the last output went out
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  LogprobsCursor cursor_ ABSL_GUARDED_BY(mu_);
};

}  // namespace quill::server::http
