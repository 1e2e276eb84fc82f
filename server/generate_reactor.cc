#include "server/generate_reactor.h"

#include <utility>

#include "engine/base/log_field.h"
#include "engine/runtime/engine.h"
#include "server/request_codec.h"
#include "server/status_codec.h"
#include "spdlog/spdlog.h"

namespace quill::server {

StreamChannel::StreamChannel(std::string request_id, bool with_logprobs, absl::Time deadline,
                             StreamWriter* writer, std::function<void()> on_drained,
                             ChatReading chat)
    : request_id_(std::move(request_id)),
      with_logprobs_(with_logprobs),
      deadline_(deadline),
      on_drained_(std::move(on_drained)),
      tools_(std::move(chat.tools)),
      writer_(writer) {
  pending_.set_request_id(request_id_);
  if (chat.reasoning.split) reasoning_.emplace(chat.reasoning.thought_open);
}

bool StreamChannel::HasPendingLocked() const {
  return pending_.token_ids_size() > 0 || !pending_.text().empty() ||
         !pending_.reasoning().empty() || pending_.logprobs_size() > 0 ||
         pending_.prompt_logprobs_size() > 0;
}

void StreamChannel::AppendAnswerLocked(engine::chat::ReasoningSplitter::Parts parts) {
  pending_.mutable_reasoning()->append(parts.reasoning);
  pending_.mutable_text()->append(parts.content);
  if (tools_.syntax != engine::chat::ToolCallSyntax::kNone) answer_ += parts.content;
}

bool StreamChannel::OnChunk(engine::TokenChunk chunk) {
  Action action;
  {
    absl::MutexLock lock(&mu_);
    if (client_gone_) {
      // At the deadline the engine ends the request itself (as kDeadline, within a
      // step); refusing here would make it count as a cancellation.
      return absl::Now() + kDeadlineSlack >= deadline_;
    }
    if (state_ == State::kFinished) return false;
    // The tokens (and logprobs) as they are; their text as thought and content.
    engine::chat::ReasoningSplitter::Parts parts;
    if (reasoning_.has_value()) {
      parts = reasoning_->Add(chunk.text);
    } else {
      parts.content = std::move(chunk.text);
    }
    chunk.text.clear();
    AppendChunk(chunk, with_logprobs_, &pending_);
    AppendAnswerLocked(std::move(parts));
    ++pending_chunks_;
    if (state_ != State::kIdle) return true;  // a write is in flight: coalesce
    action = NextActionLocked();
  }
  Perform(std::move(action));
  return true;
}

bool StreamChannel::WouldBlock() {
  absl::MutexLock lock(&mu_);
  // A gone client is not waited for: the next OnChunk refuses and the engine cancels.
  if (state_ != State::kWriting || client_gone_ || pending_chunks_ < kMaxUnsentChunks) {
    return false;
  }
  reported_full_ = true;
  return true;
}

void StreamChannel::OnFinish(const engine::FinishInfo& info) {
  Action action;
  bool log_now = false;
  {
    absl::MutexLock lock(&mu_);
    finish_ = info;
    // What the splitter held (a tag's possible start) is known now.
    if (reasoning_.has_value()) AppendAnswerLocked(reasoning_->Finish());
    if (writer_ == nullptr) {
      log_now = true;  // the RPC is already over; nobody else will log it
    } else if (state_ == State::kIdle && !client_gone_) {
      action = NextActionLocked();
    }
    // kWriting: OnWriteDone sends the end. kFinished: the client is gone.
  }
  if (log_now) LogFinishedRequest(request_id_, info);
  Perform(std::move(action));
}

void StreamChannel::Reject(const absl::Status& status) {
  Action action;
  {
    absl::MutexLock lock(&mu_);
    if (state_ != State::kIdle) return;
    action = FinishLocked(ToGrpcStatus(status));
  }
  Perform(std::move(action));
}

bool StreamChannel::OnWriteDone(bool ok) {
  Action action;
  bool gone;
  bool drained = false;
  {
    absl::MutexLock lock(&mu_);
    if (!ok) client_gone_ = true;
    gone = client_gone_;
    if (state_ != State::kWriting) return gone;
    if (client_gone_) {
      action = FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "client went away"));
    } else {
      state_ = State::kIdle;
      action = NextActionLocked();  // the unsent chunks become the next write
      drained = reported_full_;
      reported_full_ = false;
    }
  }
  Perform(std::move(action));
  if (drained && on_drained_) on_drained_();
  return gone;
}

void StreamChannel::OnCancel() {
  Action action;
  {
    absl::MutexLock lock(&mu_);
    client_gone_ = true;
    // With a write in flight, its OnWriteDone issues the Finish.
    if (state_ == State::kIdle) {
      action = FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
    }
  }
  Perform(std::move(action));
}

bool StreamChannel::client_gone() const {
  absl::MutexLock lock(&mu_);
  return client_gone_;
}

void StreamChannel::Detach() {
  std::optional<engine::FinishInfo> finish;
  {
    absl::MutexLock lock(&mu_);
    writer_ = nullptr;
    finish = finish_;
  }
  if (finish.has_value()) LogFinishedRequest(request_id_, *finish);
}

StreamChannel::Action StreamChannel::FinishLocked(grpc::Status status) {
  state_ = State::kFinished;
  Action action;
  action.kind = ActionKind::kFinish;
  action.status = std::move(status);
  action.writer = writer_;
  return action;
}

StreamChannel::Action StreamChannel::NextActionLocked() {
  Action action;
  if (state_ != State::kIdle || writer_ == nullptr) return action;
  if (finish_.has_value()) {
    if (finish_->status.ok()) {
      // Last tokens (if any) and the final fields go out together with the OK status.
      SetFinalFields(*finish_, &pending_);
      SetToolCalls(tools_, answer_, request_id_, &pending_);
      to_send_.Clear();
      to_send_.Swap(&pending_);
      state_ = State::kFinished;
      action.kind = ActionKind::kWriteAndFinish;
      action.writer = writer_;
      return action;
    }
    // Tokens streamed before a failure still reach the client; then the status.
    if (!HasPendingLocked()) return FinishLocked(ToGrpcStatus(finish_->status));
  }
  if (!HasPendingLocked()) return action;
  to_send_.Clear();
  to_send_.Swap(&pending_);
  pending_.set_request_id(request_id_);
  pending_chunks_ = 0;
  state_ = State::kWriting;
  action.kind = ActionKind::kWrite;
  action.writer = writer_;
  return action;
}

void StreamChannel::Perform(Action action) {
  if (action.kind == ActionKind::kNone || action.writer == nullptr) return;
  switch (action.kind) {
    case ActionKind::kWrite:
      wire_ = SerializeResponse(to_send_);
      action.writer->SendMessage(&wire_);
      break;
    case ActionKind::kWriteAndFinish:
      wire_ = SerializeResponse(to_send_);
      action.writer->SendLastMessage(&wire_, grpc::Status::OK);
      break;
    case ActionKind::kFinish:
      action.writer->SendStatus(std::move(action.status));
      break;
    case ActionKind::kNone:
      break;
  }
}

GenerateReactor::GenerateReactor(engine::Engine* engine, std::string request_id, bool with_logprobs,
                                 absl::Time deadline, ChatReading chat)
    : engine_(engine),
      request_id_(std::move(request_id)),
      deadline_(deadline),
      channel_(std::make_shared<StreamChannel>(
          request_id_, with_logprobs, deadline, this,
          [engine, id = request_id_] {
            // The engine outlives every RPC.
            if (engine != nullptr) engine->Resume(id);
          },
          std::move(chat))) {}

void GenerateReactor::Reject(const absl::Status& status) { channel_->Reject(status); }

void GenerateReactor::MarkSubmitted() {
  submitted_.store(true);
  // A cancel that raced with Submit saw submitted_ == false and did not reach the engine.
  if (channel_->client_gone()) CancelInEngine();
}

void GenerateReactor::CancelInEngine() {
  // At the deadline the engine ends the request itself, as kDeadline.
  if (submitted_.load() && absl::Now() + kDeadlineSlack < deadline_) {
    engine_->Cancel(request_id_);
  }
}

void GenerateReactor::OnWriteDone(bool ok) {
  if (channel_->OnWriteDone(ok)) CancelInEngine();
}

void GenerateReactor::OnCancel() {
  channel_->OnCancel();
  CancelInEngine();
}

void GenerateReactor::OnDone() {
  channel_->Detach();
  delete this;
}

void GenerateReactor::SendMessage(const grpc::ByteBuffer* message) { StartWrite(message); }

void GenerateReactor::SendLastMessage(const grpc::ByteBuffer* message, grpc::Status status) {
  StartWriteAndFinish(message, grpc::WriteOptions(), std::move(status));
}

void GenerateReactor::SendStatus(grpc::Status status) { Finish(std::move(status)); }

void LogFinishedRequest(absl::string_view request_id, const engine::FinishInfo& info) {
  const auto ms = [](absl::Duration d) { return absl::ToDoubleMilliseconds(d); };
  // Client-supplied text (the id, and status messages that may quote input) is escaped.
  if (info.status.ok()) {
    spdlog::info(
        "finished request_id={} reason={} prompt_tokens={} completion_tokens={} queue_ms={:.1f} "
        "ttft_ms={:.1f} total_ms={:.1f}",
        LogField(request_id), std::string(engine::FinishReasonName(info.reason)),
        info.prompt_tokens, info.completion_tokens, ms(info.timings.queue_wait),
        ms(info.timings.time_to_first_token), ms(info.timings.total));
  } else {
    spdlog::info(
        "finished request_id={} reason={} prompt_tokens={} completion_tokens={} queue_ms={:.1f} "
        "ttft_ms={:.1f} total_ms={:.1f} status={}",
        LogField(request_id), std::string(engine::FinishReasonName(info.reason)),
        info.prompt_tokens, info.completion_tokens, ms(info.timings.queue_wait),
        ms(info.timings.time_to_first_token), ms(info.timings.total),
        LogField(info.status.ToString()));
  }
}

}  // namespace quill::server
