#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/runtime/sequence.h"

namespace quill::engine {

// A message from another thread to the engine thread.
struct Command {
  enum class Kind { kSubmit, kCancel };
  Kind kind = Kind::kSubmit;
  std::unique_ptr<Sequence> sequence;  // kSubmit
  std::string request_id;              // kCancel
};

// The many-writers / one-reader hand-off into the engine thread. It also keeps the two
// facts Submit must answer synchronously: which request ids are live, and how many
// accepted requests are not yet admitted (queued here or waiting in the engine).
class Inbox {
 public:
  explicit Inbox(int max_queue) : max_queue_(max_queue) {}

  // UNAVAILABLE once closed; ALREADY_EXISTS for a live id; RESOURCE_EXHAUSTED when
  // max_queue requests are already waiting. On OK the request is live and queued.
  absl::Status PushSubmit(std::unique_ptr<Sequence> sequence) ABSL_LOCKS_EXCLUDED(mu_);
  // Never refused (not even when closed or full).
  void PushCancel(absl::string_view request_id) ABSL_LOCKS_EXCLUDED(mu_);

  struct Drained {
    bool closed = false;
    absl::Time drain_deadline = absl::InfiniteFuture();
  };
  // Engine thread. Waits up to `timeout` for a command or Close(), then moves every
  // pending command into `out` (appending). If it reports closed, no submit can follow.
  Drained WaitAndDrain(absl::Duration timeout, std::vector<Command>* out)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Engine thread: `n` accepted requests left the waiting queue (admitted or finished).
  void LeftQueue(int n) ABSL_LOCKS_EXCLUDED(mu_);
  // Engine thread: the request ended; its id may be used again.
  void Forget(const std::string& request_id) ABSL_LOCKS_EXCLUDED(mu_);

  // Refuses submits from now on and asks the engine to finish by `drain_deadline`.
  void Close(absl::Time drain_deadline) ABSL_LOCKS_EXCLUDED(mu_);
  bool closed() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const int max_queue_;
  mutable absl::Mutex mu_;
  std::vector<Command> commands_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> live_ids_ ABSL_GUARDED_BY(mu_);
  int not_admitted_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time drain_deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
};

}  // namespace quill::engine
