#include "engine/runtime/inbox.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/base/check.h"

namespace quill::engine {

absl::Status Inbox::PushSubmit(std::unique_ptr<Sequence> sequence) {
  absl::MutexLock lock(&mu_);
  if (closed_) return absl::UnavailableError("server shutting down");
  if (live_ids_.contains(sequence->id())) {
    return absl::AlreadyExistsError(
        absl::StrCat("request_id \"", sequence->id(), "\" is already in progress"));
  }
  if (not_admitted_ >= max_queue_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("queue full: ", not_admitted_, " requests waiting (max_queue ",
                     max_queue_, "); retry later"));
  }
  live_ids_.insert(sequence->id());
  ++not_admitted_;
  Command command;
  command.kind = Command::Kind::kSubmit;
  command.sequence = std::move(sequence);
  commands_.push_back(std::move(command));
  return absl::OkStatus();
}

void Inbox::PushCancel(absl::string_view request_id) {
  absl::MutexLock lock(&mu_);
  Command command;
  command.kind = Command::Kind::kCancel;
  command.request_id = std::string(request_id);
  commands_.push_back(std::move(command));
}

Inbox::Drained Inbox::WaitAndDrain(absl::Duration timeout, std::vector<Command>* out) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !commands_.empty() || closed_;
  };
  if (timeout == absl::InfiniteDuration()) {
    mu_.Await(absl::Condition(&ready));
  } else if (timeout > absl::ZeroDuration()) {
    mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  }
  for (Command& command : commands_) out->push_back(std::move(command));
  commands_.clear();
  Drained drained;
  drained.closed = closed_;
  drained.drain_deadline = drain_deadline_;
  return drained;
}

void Inbox::LeftQueue(int n) {
  absl::MutexLock lock(&mu_);
  not_admitted_ -= n;
  QUILL_DCHECK(not_admitted_ >= 0);
}

void Inbox::Forget(const std::string& request_id) {
  absl::MutexLock lock(&mu_);
  live_ids_.erase(request_id);
}

void Inbox::Close(absl::Time drain_deadline) {
  absl::MutexLock lock(&mu_);
  if (closed_) return;
  closed_ = true;
  drain_deadline_ = drain_deadline;
}

bool Inbox::closed() const {
  absl::MutexLock lock(&mu_);
  return closed_;
}

}  // namespace quill::engine
