#include "server/http/generation_stream.h"

#include <algorithm>
#include <utility>

#include "server/http/openai_error.h"
#include "spdlog/spdlog.h"

namespace quill::server::http {
namespace {

// One choice's engine request reports to the shared stream under its index.
class ChoiceSink final : public engine::TokenSink {
 public:
  ChoiceSink(std::shared_ptr<GenerationStream> stream, int index)
      : stream_(std::move(stream)), index_(index) {}
  bool OnChunk(engine::TokenChunk chunk) override {
    return stream_->OnChunk(index_, std::move(chunk));
  }
  void OnFinish(const engine::FinishInfo& info) override { stream_->OnFinish(index_, info); }
  bool WouldBlock() override { return stream_->WouldBlock(index_); }

 private:
  const std::shared_ptr<GenerationStream> stream_;
  const int index_;
};

// Anything to send: text, tokens, or an echoed prompt's tokens (a BOS-only prompt echoes
// no text).
bool HasOutput(const OutputDelta& delta) {
  return delta.num_tokens > 0 || !delta.text.empty() || !delta.reasoning.empty() ||
         !delta.echoed.empty();
}

}  // namespace

GenerationStream::GenerationStream(ResponseFormat format, bool stream,
                                   std::shared_ptr<ResponseChannel> channel,
                                   std::function<void()> cancel, int64_t max_pending_bytes,
                                   std::function<void(int)> resume)
    : format_(std::move(format)),
      stream_(stream),
      channel_(std::move(channel)),
      cancel_(std::move(cancel)),
      max_pending_bytes_(max_pending_bytes),
      resume_(std::move(resume)),
      choices_(std::max(format_.choices, 1)) {
  if (format_.reasoning.split) {
    for (Choice& c : choices_) c.reasoning.emplace(format_.reasoning.thought_open);
  }
}

std::shared_ptr<engine::TokenSink> GenerationStream::SinkFor(
    std::shared_ptr<GenerationStream> stream, int index) {
  return std::make_shared<ChoiceSink>(std::move(stream), index);
}

bool GenerationStream::OnChunk(int index, engine::TokenChunk chunk) {
  bool cancel = false;
  {
    absl::MutexLock lock(&mu_);
    // Once a choice failed the response is over for the others too.
    if (gone_ || done_ || !failure_.ok()) return false;
    Choice& c = choices_[index];
    const size_t unsent_before = c.pending.text.size();
    if (!format_.echo.empty() && !c.echoed) EchoLocked(index, &chunk.prompt_logprobs);
    AppendTextLocked(c, c.reasoning.has_value()
                            ? c.reasoning->Add(chunk.text)
                            : engine::chat::ReasoningSplitter::Parts{"", std::move(chunk.text)});
    c.pending.num_tokens += static_cast<int>(chunk.tokens.size());
    ++c.pending_chunks;
    c.completion_tokens += static_cast<int>(chunk.tokens.size());
    if (format_.logprobs) {
      for (engine::GeneratedToken& t : chunk.tokens) c.pending.tokens.push_back(std::move(t));
    }
    // A json_object call is the whole content, so it may start only while none was sent.
    // Once a call has opened it is held to the end, so it need not be asked again.
    if (stream_ && c.hold != engine::chat::ToolCallHold::kCall) {
      c.hold = engine::chat::HoldForToolCall(format_.tool_calls.syntax, c.pending.text,
                                             c.pending.text.size() - unsent_before,
                                             /*at_start=*/!c.content_sent);
    }
    // A stream's client that lets this much pile up is not reading: drop it rather than
    // buffer without end. (A body, or what may be a tool call, accumulates by design.)
    if (stream_ && !c.held() && pending_bytes_ > max_pending_bytes_) {
      spdlog::info("http client fell {} bytes behind; cancelling {}", pending_bytes_, format_.id);
      gone_ = true;
      cancel = !cancelled_;
      cancelled_ = true;
    }
  }
  channel_->Wake();  // with `cancel`, Next() ends the response
  return !cancel;
}

void GenerationStream::AppendTextLocked(Choice& c, engine::chat::ReasoningSplitter::Parts parts) {
  pending_bytes_ += static_cast<int64_t>(parts.reasoning.size() + parts.content.size());
  c.pending.reasoning += parts.reasoning;
  c.pending.text += parts.content;
}

void GenerationStream::EchoLocked(int index, std::vector<engine::GeneratedToken>* scored) {
  Choice& c = choices_[index];
  const ResponseFormat::Echo& echo = format_.echo[index / std::max(format_.n, 1)];
  c.echoed = true;
  c.pending.text += echo.text;
  pending_bytes_ += static_cast<int64_t>(echo.text.size());
  if (!format_.logprobs) return;
  engine::GeneratedToken first;
  first.id = echo.first_token;
  c.pending.echoed.push_back(std::move(first));
  if (scored == nullptr) return;
  for (engine::GeneratedToken& t : *scored) c.pending.echoed.push_back(std::move(t));
}

bool GenerationStream::WouldBlock(int index) {
  absl::MutexLock lock(&mu_);
  Choice& c = choices_[index];
  // What may be a tool call is held until complete, so its chunks never wait to be sent.
  if (!stream_ || gone_ || c.held() || c.pending_chunks < kMaxUnsentChunks) return false;
  c.reported_full = true;
  return true;
}

void GenerationStream::OnFinish(int index, const engine::FinishInfo& info) {
  bool cancel_others = false;
  {
    absl::MutexLock lock(&mu_);
    Choice& c = choices_[index];
    c.finish = info;
    // An answer without output (e.g. end of generation at once) still echoes the prompt.
    if (!format_.echo.empty() && !c.echoed && info.status.ok()) EchoLocked(index, nullptr);
    // What the splitter held (a tag's start, leading blanks) is known now.
    if (c.reasoning.has_value()) AppendTextLocked(c, c.reasoning->Finish());
    // One failed choice fails the response: the others need not run on (and finish
    // cancelled, which is not the failure to report).
    if (!info.status.ok() && failure_.ok()) {
      failure_ = info.status;
      cancel_others = choices_.size() > 1 && !cancelled_ && !AllFinishedLocked();
      cancelled_ = cancelled_ || cancel_others;
    }
  }
  if (cancel_others) cancel_();
  channel_->Wake();
}

void GenerationStream::OnClientGone() {
  bool cancel = false;
  {
    absl::MutexLock lock(&mu_);
    gone_ = true;
    cancel = !cancelled_ && !AllFinishedLocked();
    cancelled_ = true;
  }
  if (cancel) cancel_();
}

HttpOutput GenerationStream::Next() {
  HttpOutput out;
  std::vector<int> drained;
  {
    absl::MutexLock lock(&mu_);
    out = NextLocked();
    for (size_t i = 0; i < choices_.size(); ++i) {
      Choice& c = choices_[i];
      if (c.reported_full && c.pending_chunks < kMaxUnsentChunks) {
        c.reported_full = false;
        drained.push_back(static_cast<int>(i));
      }
    }
  }
  if (resume_) {
    for (int index : drained) resume_(index);
  }
  return out;
}

bool GenerationStream::AllFinishedLocked() const {
  return std::all_of(choices_.begin(), choices_.end(),
                     [](const Choice& c) { return c.finish.has_value(); });
}

int GenerationStream::CompletionTokensLocked() const {
  int total = 0;
  for (const Choice& c : choices_) total += c.completion_tokens;
  return total;
}

engine::FinishInfo GenerationStream::UsageLocked() const {
  engine::FinishInfo usage;
  usage.prompt_tokens = format_.prompt_tokens;
  const size_t n = std::max(format_.n, 1);
  for (size_t first = 0; first < choices_.size(); first += n) {
    // A prompt counts once, so its cached part is what each of its choices found cached.
    std::optional<int> cached;
    for (size_t i = first; i < std::min(first + n, choices_.size()); ++i) {
      const Choice& c = choices_[i];
      if (!c.finish.has_value()) {
        usage.completion_tokens += c.completion_tokens;
        continue;
      }
      usage.completion_tokens += c.finish->completion_tokens;
      if (c.finish->reasoning_tokens.has_value()) {
        usage.reasoning_tokens = usage.reasoning_tokens.value_or(0) + *c.finish->reasoning_tokens;
      }
      cached =
          std::min(cached.value_or(c.finish->cached_prompt_tokens), c.finish->cached_prompt_tokens);
    }
    usage.cached_prompt_tokens += cached.value_or(0);
  }
  return usage;
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
  const bool any_output = std::any_of(choices_.begin(), choices_.end(),
                                      [](const Choice& c) { return HasOutput(c.pending); });
  if (!started_ && !failure_.ok() && (!stream_ || !any_output)) {
    done_ = true;
    HttpOutput out;
    out.head = std::make_unique<HttpResponseHead>(OpenAiErrorResponse(failure_, &out.body));
    out.last = true;
    return out;
  }
  return stream_ ? NextStreamLocked() : NextBodyLocked();
}

HttpOutput GenerationStream::NextBodyLocked() {
  HttpOutput out;
  if (!AllFinishedLocked()) return out;
  done_ = true;
  out.last = true;
  out.head = std::make_unique<HttpResponseHead>();
  std::vector<FinishedChoice> finished;
  finished.reserve(choices_.size());
  for (Choice& c : choices_) finished.push_back({std::move(c.pending), c.finish->reason});
  out.body = CompleteBody(format_, finished, UsageLocked());
  return out;
}

HttpOutput GenerationStream::NextStreamLocked() {
  const bool chat = format_.endpoint == Endpoint::kChatCompletions;
  std::string body;
  for (size_t i = 0; i < choices_.size(); ++i) {
    Choice& c = choices_[i];
    const int index = static_cast<int>(i);
    if (c.held()) {  // calls go whole once the answer is complete
      if (c.finish.has_value() && c.finish->status.ok() && !c.finish_sent) {
        body += StreamHeldAnswerEvents(format_, index, c.pending, /*first=*/!c.role_sent,
                                       c.finish->reason, CompletionTokensLocked(), UsageLocked(),
                                       &c.cursor);
        pending_bytes_ -= static_cast<int64_t>(c.pending.text.size() + c.pending.reasoning.size());
        c.pending = OutputDelta();
        c.pending_chunks = 0;
        c.role_sent = true;
        c.finish_sent = true;
      }
      continue;
    }
    const bool has_delta = HasOutput(c.pending);
    // Chat's first event of a choice carries the role even when the answer is empty.
    if (has_delta || (chat && !c.role_sent && c.finish.has_value())) {
      body += StreamDeltaEvent(format_, index, c.pending, /*first=*/!c.role_sent,
                               CompletionTokensLocked(), &c.cursor);
      c.role_sent = true;
      c.content_sent = c.content_sent || !c.pending.text.empty();
      pending_bytes_ -= static_cast<int64_t>(c.pending.text.size() + c.pending.reasoning.size());
      c.pending = OutputDelta();
      c.pending_chunks = 0;
    }
    if (c.finish.has_value() && c.finish->status.ok() && !c.finish_sent) {
      body += StreamFinishEvent(format_, index, c.finish->reason, UsageLocked());
      c.finish_sent = true;
    }
  }
  bool last = false;
  if (!failure_.ok()) {
    body += StreamErrorEvents(failure_);
    last = true;
  } else if (AllFinishedLocked()) {
    body += StreamDoneEvents(format_, UsageLocked());
    last = true;
  }
  HttpOutput out;
  if (body.empty()) return out;
  if (!started_) {
    started_ = true;
    out.head = std::make_unique<HttpResponseHead>();
    out.head->content_type = "text/event-stream";
    out.head->stream = true;
  }
  out.body = std::move(body);
  out.last = last;
  done_ = last;
  return out;
}

}  // namespace quill::server::http
