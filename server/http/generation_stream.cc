#include "server/http/generation_stream.h"

#include <utility>

#include "server/http/openai_error.h"
#include "spdlog/spdlog.h"

namespace quill::server::http {

GenerationStream::GenerationStream(ResponseFormat format, bool stream,
                                   std::shared_ptr<ResponseChannel> channel,
                                   std::function<void()> cancel, int64_t max_pending_bytes,
                                   std::function<void()> resume)
    : format_(std::move(format)),
      stream_(stream),
      channel_(std::move(channel)),
      cancel_(std::move(cancel)),
      max_pending_bytes_(max_pending_bytes),
      resume_(std::move(resume)) {}

bool GenerationStream::OnChunk(engine::TokenChunk chunk) {
  bool cancel = false;
  {
    absl::MutexLock lock(&mu_);
    if (gone_) return false;
    pending_.text += chunk.text;
    pending_.num_tokens += static_cast<int>(chunk.tokens.size());
    ++pending_chunks_;
    completion_tokens_ += static_cast<int>(chunk.tokens.size());
    if (format_.logprobs) {
      for (engine::GeneratedToken& t : chunk.tokens) pending_.tokens.push_back(std::move(t));
    }
    // A stream's client that lets this much pile up is not reading: drop it rather than
    // buffer without end. (A body accumulates the whole answer by design.)
    if (stream_ && static_cast<int64_t>(pending_.text.size()) > max_pending_bytes_) {
      spdlog::info("http client fell {} bytes behind; cancelling {}", pending_.text.size(),
                   format_.id);
      gone_ = true;
      cancel = !cancelled_;
      cancelled_ = true;
    }
  }
  if (cancel) {
    channel_->Wake();  // Next() ends the response
    return false;
  }
  channel_->Wake();
  return true;
}

bool GenerationStream::WouldBlock() {
  absl::MutexLock lock(&mu_);
  if (!stream_ || gone_ || pending_chunks_ < kMaxUnsentChunks) return false;
  reported_full_ = true;
  return true;
}

void GenerationStream::OnFinish(const engine::FinishInfo& info) {
  {
    absl::MutexLock lock(&mu_);
    finish_ = info;
  }
  channel_->Wake();
}

void GenerationStream::OnClientGone() {
  bool cancel = false;
  {
    absl::MutexLock lock(&mu_);
    gone_ = true;
    cancel = !cancelled_ && !finish_.has_value();
    cancelled_ = true;
  }
  if (cancel) cancel_();
}

HttpOutput GenerationStream::Next() {
  HttpOutput out;
  bool drained = false;
  {
    absl::MutexLock lock(&mu_);
    out = NextLocked();
    drained = reported_full_ && pending_chunks_ < kMaxUnsentChunks;
    if (drained) reported_full_ = false;
  }
  if (drained && resume_) resume_();
  return out;
}

HttpOutput GenerationStream::NextLocked() {
  if (done_) return HttpOutput();
  if (gone_) {
    // Fell too far behind (or left): end the response and the connection.
    done_ = true;
    HttpOutput out;
    out.last = true;
    out.close = true;
    return out;
  }
  // A failure before any output is a plain HTTP error, for streams too.
  if (!started_ && finish_.has_value() && !finish_->status.ok() && pending_.num_tokens == 0 &&
      pending_.text.empty()) {
    done_ = true;
    HttpOutput out;
    out.head = std::make_unique<HttpResponseHead>(OpenAiErrorResponse(finish_->status, &out.body));
    out.last = true;
    return out;
  }
  return stream_ ? NextStreamLocked() : NextBodyLocked();
}

HttpOutput GenerationStream::NextBodyLocked() {
  HttpOutput out;
  if (!finish_.has_value()) return out;
  done_ = true;
  out.last = true;
  if (!finish_->status.ok()) {
    out.head = std::make_unique<HttpResponseHead>(OpenAiErrorResponse(finish_->status, &out.body));
    return out;
  }
  out.head = std::make_unique<HttpResponseHead>();
  out.body = CompleteBody(format_, pending_, *finish_);
  return out;
}

HttpOutput GenerationStream::NextStreamLocked() {
  HttpOutput out;
  const bool has_delta = pending_.num_tokens > 0 || !pending_.text.empty();
  if (!has_delta && !finish_.has_value()) return out;
  const bool first = !started_;
  if (first) {
    started_ = true;
    out.head = std::make_unique<HttpResponseHead>();
    out.head->content_type = "text/event-stream";
    out.head->stream = true;
  }
  // Chat's first event carries the role even when the answer is empty.
  if (has_delta || (first && format_.endpoint == Endpoint::kChatCompletions)) {
    out.body = StreamDeltaEvent(format_, pending_, first, completion_tokens_, &cursor_);
    pending_ = OutputDelta();
    pending_chunks_ = 0;
  }
  if (finish_.has_value()) {
    out.body += finish_->status.ok() ? StreamEndEvents(format_, *finish_)
                                     : StreamErrorEvents(finish_->status);
    out.last = true;
    done_ = true;
  }
  return out;
}

}  // namespace quill::server::http
