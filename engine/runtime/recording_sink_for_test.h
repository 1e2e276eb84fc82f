#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/token_sink.h"

namespace quill::engine {

// A TokenSink for tests: records every chunk and the finish, and flags protocol
// violations (a chunk after the finish, a second finish). Optionally blocks inside its
// `gate_chunk`-th OnChunk until Release(), which pins the engine thread mid-step so a test
// can act deterministically, and asks to stop after `accept_chunks` chunks.
class RecordingSink final : public TokenSink {
 public:
  explicit RecordingSink(int gate_chunk = 0, int accept_chunks = -1)
      : gate_chunk_(gate_chunk), accept_chunks_(accept_chunks) {}

  bool OnChunk(TokenChunk chunk) override {
    int n;
    {
      absl::MutexLock lock(&mu_);
      if (finishes_ > 0) violations_ += "chunk after finish; ";
      chunks_.push_back(std::move(chunk));
      n = static_cast<int>(chunks_.size());
    }
    if (n == 1) first_chunk_.Notify();
    if (n == gate_chunk_) {
      gated_.Notify();
      release_.WaitForNotification();
    }
    return accept_chunks_ < 0 || n < accept_chunks_;
  }
  void OnFinish(const FinishInfo& info) override {
    {
      absl::MutexLock lock(&mu_);
      if (finishes_ > 0) violations_ += "second finish; ";
      ++finishes_;
      info_ = info;
    }
    if (!done_.HasBeenNotified()) done_.Notify();
  }

  // Waits for OnFinish (bounded only so a bug cannot hang the suite).
  bool Wait() { return done_.WaitForNotificationWithTimeout(absl::Seconds(120)); }
  void WaitGated() { gated_.WaitForNotification(); }
  void WaitFirstChunk() { first_chunk_.WaitForNotification(); }
  void Release() { release_.Notify(); }

  std::vector<TokenId> ids() {
    absl::MutexLock lock(&mu_);
    std::vector<TokenId> ids;
    for (const TokenChunk& c : chunks_)
      for (const GeneratedToken& t : c.tokens) ids.push_back(t.id);
    return ids;
  }
  std::string text() {
    absl::MutexLock lock(&mu_);
    std::string text;
    for (const TokenChunk& c : chunks_) text += c.text;
    return text;
  }
  std::vector<TokenChunk> chunks() {
    absl::MutexLock lock(&mu_);
    return chunks_;
  }
  FinishInfo info() {
    absl::MutexLock lock(&mu_);
    return info_;
  }
  int finishes() {
    absl::MutexLock lock(&mu_);
    return finishes_;
  }
  bool called() {
    absl::MutexLock lock(&mu_);
    return finishes_ > 0 || !chunks_.empty();
  }
  std::string violations() {
    absl::MutexLock lock(&mu_);
    return violations_;
  }

 private:
  const int gate_chunk_;
  const int accept_chunks_;
  absl::Mutex mu_;
  std::vector<TokenChunk> chunks_ ABSL_GUARDED_BY(mu_);
  FinishInfo info_ ABSL_GUARDED_BY(mu_);
  int finishes_ ABSL_GUARDED_BY(mu_) = 0;
  std::string violations_ ABSL_GUARDED_BY(mu_);
  absl::Notification first_chunk_, gated_, release_, done_;
};

// A consumer that reads only when told: every chunk stays unsent until Read(), and at
// `bound` unsent chunks the sink would block (like the server's channels).
class SlowReaderSink final : public TokenSink {
 public:
  explicit SlowReaderSink(int bound) : bound_(bound) {}
  bool OnChunk(TokenChunk chunk) override {
    {
      absl::MutexLock lock(&mu_);
      ++unsent_;
    }
    return recorded->OnChunk(std::move(chunk));
  }
  void OnFinish(const FinishInfo& info) override { recorded->OnFinish(info); }
  bool WouldBlock() override {
    absl::MutexLock lock(&mu_);
    if (unsent_ < bound_) return false;
    ++times_blocked_;
    return true;
  }
  // How often the engine was told this sink would block (and so paused its request).
  int times_blocked() {
    absl::MutexLock lock(&mu_);
    return times_blocked_;
  }
  bool full() {
    absl::MutexLock lock(&mu_);
    return unsent_ >= bound_;
  }
  // The client reads everything: the sink drains and wakes the engine.
  void Read(Engine& engine, absl::string_view request_id) {
    {
      absl::MutexLock lock(&mu_);
      unsent_ = 0;
    }
    engine.Resume(request_id);
  }

  const std::shared_ptr<RecordingSink> recorded = std::make_shared<RecordingSink>();

 private:
  const int bound_;
  absl::Mutex mu_;
  int unsent_ ABSL_GUARDED_BY(mu_) = 0;
  int times_blocked_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace quill::engine
