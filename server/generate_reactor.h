#pragma once

// One Generate RPC: the gRPC reactor, and the StreamChannel through which the engine
// thread feeds it (DESIGN.md section 6).
//
// The engine holds a std::shared_ptr<StreamChannel> (as its TokenSink); the reactor holds
// another. Every decision about the next gRPC call is made under the channel's mutex, by
// one state machine; the call itself (StartWrite / Finish) is made right after unlocking
// by the thread that made the transition. Rules kept:
//   * one write in flight; chunks arriving meanwhile coalesce into the next message;
//   * Finish never while a write is outstanding, exactly once, and nothing after it;
//   * a successful end rides on the last message (StartWriteAndFinish);
//   * Finish is still issued after OnCancel (gRPC requires it before OnDone).
//   * backpressure: while a write is in flight (a client that does not read keeps it in
//     flight: gRPC completes a write only once HTTP/2 flow control lets it out), at most
//     kMaxUnsentChunks engine chunks coalesce behind it; then WouldBlock() says so and the
//     engine pauses the request, and the write's completion wakes it (`on_drained`).

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/chat/reasoning.h"
#include "engine/runtime/request.h"
#include "engine/runtime/token_sink.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/server_callback.h"
#include "grpcpp/support/status.h"
#include "quill/v1/quill.pb.h"
#include "server/request_codec.h"
#include "server/stream_limits.h"

namespace quill::engine {
class Engine;
}

namespace quill::server {

// gRPC cancels a call when its deadline passes, and its timer and our clock may disagree
// by a little. A cancel (or a vanished client) this close to the deadline is left to the
// engine, which ends the request as kDeadline itself within a step.
inline constexpr absl::Duration kDeadlineSlack = absl::Milliseconds(20);

// How a Chat RPC's answer is read: its tool calls (the last message's tool_calls,
// request_codec's SetToolCalls, read in the content only) and its thought (split off into
// GenerateResponse.reasoning as it comes). Generate's is the default: neither.
struct ChatReading {
  ToolCallReading tools;
  engine::chat::ReasoningSplit reasoning;
};

// The gRPC side of a stream as the channel drives it. Implemented by GenerateReactor
// (and by fakes in tests). Calls follow the rules above; `message` stays untouched until
// OnWriteDone (or the RPC's end).
class StreamWriter {
 public:
  virtual ~StreamWriter() = default;
  virtual void SendMessage(const grpc::ByteBuffer* message) = 0;
  virtual void SendLastMessage(const grpc::ByteBuffer* message, grpc::Status status) = 0;
  virtual void SendStatus(grpc::Status status) = 0;
};

// The engine -> RPC hand-off for one request. OnChunk/OnFinish come from the engine
// thread; OnWriteDone/OnCancel/Detach from gRPC reactions. All methods are thread-safe and
// never block beyond the channel's own short critical sections.
class StreamChannel final : public engine::TokenSink {
 public:
  // `writer` must stay valid until Detach() (the reactor calls Detach from OnDone).
  // `deadline` is the RPC's: a chunk arriving after it is not refused, so that the engine
  // (which knows the deadline too) ends the request as kDeadline rather than kCancelled.
  // `on_drained` (may be empty) is called, on a gRPC thread, each time a write completes
  // after WouldBlock() said true: the reactor resumes the request in the engine.
  // `chat`: a Chat RPC's tool calls and thought.
  StreamChannel(std::string request_id, bool with_logprobs, absl::Time deadline,
                StreamWriter* writer, std::function<void()> on_drained = nullptr,
                ChatReading chat = {});

  // engine::TokenSink (engine thread). OnChunk returns false once the client is gone.
  bool OnChunk(engine::TokenChunk chunk) override ABSL_LOCKS_EXCLUDED(mu_);
  void OnFinish(const engine::FinishInfo& info) override ABSL_LOCKS_EXCLUDED(mu_);
  // True while kMaxUnsentChunks chunks wait behind the write in flight.
  bool WouldBlock() override ABSL_LOCKS_EXCLUDED(mu_);

  // The request never reached the engine: finish the RPC with `status` (not OK).
  void Reject(const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_);

  // Reactions. OnWriteDone returns true when the client is gone (the caller then tells the
  // engine to cancel).
  bool OnWriteDone(bool ok) ABSL_LOCKS_EXCLUDED(mu_);
  void OnCancel() ABSL_LOCKS_EXCLUDED(mu_);
  // From OnDone: the writer is gone. The request's log line is written by whichever of
  // Detach() and OnFinish() comes last.
  void Detach() ABSL_LOCKS_EXCLUDED(mu_);

  bool client_gone() const ABSL_LOCKS_EXCLUDED(mu_);

  const std::string& request_id() const { return request_id_; }

 private:
  enum class State { kIdle, kWriting, kFinished };
  enum class ActionKind { kNone, kWrite, kWriteAndFinish, kFinish };
  struct Action {
    ActionKind kind = ActionKind::kNone;
    grpc::Status status;
    StreamWriter* writer = nullptr;
  };

  // Decides the next gRPC call; in kIdle only. Moves pending output into to_send_.
  Action NextActionLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Action FinishLocked(grpc::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Performs `action` outside the lock. Only the thread that produced the action touches
  // to_send_/wire_ until the write completes, because the state is kWriting/kFinished.
  void Perform(Action action);
  bool HasPendingLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds an answer's next thought and content to pending_ (and the content to answer_).
  void AppendAnswerLocked(engine::chat::ReasoningSplitter::Parts parts)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string request_id_;
  const bool with_logprobs_;
  const absl::Time deadline_;
  const std::function<void()> on_drained_;
  const ToolCallReading tools_;

  mutable absl::Mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kIdle;
  quill::v1::GenerateResponse pending_ ABSL_GUARDED_BY(mu_);  // coalesced, not yet sent
  int pending_chunks_ ABSL_GUARDED_BY(mu_) = 0;               // engine chunks in pending_
  bool reported_full_ ABSL_GUARDED_BY(mu_) = false;           // WouldBlock() said true
  std::optional<engine::FinishInfo> finish_ ABSL_GUARDED_BY(mu_);
  std::string answer_ ABSL_GUARDED_BY(mu_);  // with tools_: the whole answer's content
  // With a ChatReading's reasoning.split: parts each chunk's text into thought and content.
  std::optional<engine::chat::ReasoningSplitter> reasoning_ ABSL_GUARDED_BY(mu_);
  bool client_gone_ ABSL_GUARDED_BY(mu_) = false;
  // Owned by gRPC (the reactor); null after Detach() from OnDone.
  StreamWriter* writer_ ABSL_GUARDED_BY(mu_);

  // The message being sent; owned by whichever thread holds the kWriting transition.
  quill::v1::GenerateResponse to_send_;
  grpc::ByteBuffer wire_;
};

// The reactor of one Generate RPC. Created by GenerationService::Generate; deletes itself
// in OnDone. Reactions never block and reach the engine only through Cancel().
class GenerateReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer>,
                              public StreamWriter {
 public:
  // `engine` must outlive every RPC (the server shuts gRPC down before destroying it).
  GenerateReactor(engine::Engine* engine, std::string request_id, bool with_logprobs,
                  absl::Time deadline, ChatReading chat = {});

  // The sink handed to Engine::Submit.
  std::shared_ptr<StreamChannel> channel() const { return channel_; }

  // Ends the RPC at once with `status` (validation, queue full, draining).
  void Reject(const absl::Status& status);
  // Engine::Submit accepted the request: from now on a client cancel is sent to the
  // engine. (Before this, the id may belong to someone else's live request.)
  void MarkSubmitted();

  // grpc::ServerWriteReactor
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

  // StreamWriter
  void SendMessage(const grpc::ByteBuffer* message) override;
  void SendLastMessage(const grpc::ByteBuffer* message, grpc::Status status) override;
  void SendStatus(grpc::Status status) override;

 private:
  engine::Engine* const engine_;
  const std::string request_id_;
  const absl::Time deadline_;
  std::atomic<bool> submitted_{false};
  std::shared_ptr<StreamChannel> channel_;

  void CancelInEngine();
};

// One log line per finished request.
void LogFinishedRequest(absl::string_view request_id, const engine::FinishInfo& info);

}  // namespace quill::server
