#include "engine/runtime/inbox.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/base/check.h"
#include "engine/base/status_macros.h"
#include "engine/runtime/retry_pushback.h"

namespace quill::engine {

absl::Status Inbox::PushSubmit(std::unique_ptr<Sequence> sequence) {
  absl::MutexLock lock(&mu_);
  if (closed_) return absl::UnavailableError("server shutting down");
  if (live_ids_.contains(sequence->id())) {
    return absl::AlreadyExistsError(
        absl::StrCat("request_id \"", sequence->id(), "\" is already in progress"));
  }
  const bool fits = queued_ == 0 && held_slots_ < limits_.max_running &&
                    held_blocks_ + sequence->kv_blocks <= limits_.kv_blocks;
  const std::string& tenant = sequence->request().tenant;
  const auto retry_in = [](absl::Duration pushback) {
    return absl::FormatDuration(absl::Trunc(
        std::clamp(pushback, kMinRetryPushback, kMaxRetryPushback), absl::Milliseconds(1)));
  };
  if (!fits && queued_ >= limits_.max_queue) {
    const absl::Duration pushback = QueueDrainTime();
    return WithRetryPushback(
        absl::ResourceExhaustedError(absl::StrCat(
            "queue full: ", queued_, " requests waiting for a run slot or KV blocks (max_queue ",
            limits_.max_queue, "); retry in about ", retry_in(pushback))),
        pushback);
  }
  const auto own = tenant_queued_.find(tenant);
  const int own_queued = own == tenant_queued_.end() ? 0 : own->second.queued;
  if (!fits && limits_.max_queue_per_tenant > 0 && own_queued >= limits_.max_queue_per_tenant) {
    // Fair admission serves this tenant about once per round, so its own backlog is what
    // a retry waits for (a lower bound: other tenants' turns come in between).
    const absl::Duration pushback =
        rates_.requests_finished_per_second > 0.0
            ? absl::Seconds(own_queued / rates_.requests_finished_per_second)
            : absl::Seconds(1);
    return WithRetryPushback(
        absl::ResourceExhaustedError(absl::StrCat("tenant queue full: this tenant has ", own_queued,
                                                  " requests waiting (max_queue_per_tenant ",
                                                  limits_.max_queue_per_tenant,
                                                  "); retry in about ", retry_in(pushback))),
        pushback);
  }
  QUILL_RETURN_IF_ERROR(CheckDeadline(*sequence, fits));
  live_ids_.insert(sequence->id());
  if (fits) {
    ++held_slots_;
    held_blocks_ += sequence->kv_blocks;
    sequence->holds_capacity = true;
  } else {
    ++queued_;
    TenantQueue& queue = tenant_queued_[tenant];
    ++queue.queued;
    queue.weight = std::clamp(sequence->request().tenant_weight, 1, kMaxTenantWeight);
  }
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

void Inbox::PushResume(absl::string_view request_id) {
  absl::MutexLock lock(&mu_);
  Command command;
  command.kind = Command::Kind::kResume;
  command.request_id = std::string(request_id);
  commands_.push_back(std::move(command));
}

Inbox::Drained Inbox::WaitAndDrain(absl::Duration timeout, std::vector<Command>* out) {
  absl::MutexLock lock(&mu_);
  // Why close wakes only once: a draining engine whose requests are all paused must be
  // able to sleep until its next timer instead of spinning on a condition that stays true.
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !commands_.empty() || (closed_ && !close_reported_);
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
  close_reported_ = closed_;
  drained.drain_deadline = drain_deadline_;
  return drained;
}

void Inbox::DecrementTenant(const std::string& tenant) {
  auto it = tenant_queued_.find(tenant);
  QUILL_DCHECK(it != tenant_queued_.end());
  if (it != tenant_queued_.end() && --it->second.queued <= 0) tenant_queued_.erase(it);
}

void Inbox::Admitted(const std::string& tenant, int kv_blocks) {
  absl::MutexLock lock(&mu_);
  --queued_;
  DecrementTenant(tenant);
  ++held_slots_;
  held_blocks_ += kv_blocks;
  QUILL_DCHECK(queued_ >= 0);
}

void Inbox::LeftQueue(const std::string& tenant) {
  absl::MutexLock lock(&mu_);
  --queued_;
  DecrementTenant(tenant);
  QUILL_DCHECK(queued_ >= 0);
}

void Inbox::Released(int kv_blocks) {
  absl::MutexLock lock(&mu_);
  --held_slots_;
  held_blocks_ -= kv_blocks;
  QUILL_DCHECK(held_slots_ >= 0 && held_blocks_ >= 0);
}

void Inbox::SlotReleased() {
  absl::MutexLock lock(&mu_);
  --held_slots_;
  QUILL_DCHECK(held_slots_ >= 0);
}

void Inbox::SlotRetaken() {
  absl::MutexLock lock(&mu_);
  ++held_slots_;
}

void Inbox::SetRates(const MeasuredRates& rates) {
  absl::MutexLock lock(&mu_);
  rates_ = rates;
}

int Inbox::queued() const {
  absl::MutexLock lock(&mu_);
  return queued_;
}

int Inbox::queued(const std::string& tenant) const {
  absl::MutexLock lock(&mu_);
  auto it = tenant_queued_.find(tenant);
  return it == tenant_queued_.end() ? 0 : it->second.queued;
}

int Inbox::RequestsAhead(const std::string& tenant, int weight) const {
  weight = std::clamp(weight, 1, kMaxTenantWeight);
  const auto own = tenant_queued_.find(tenant);
  const int64_t own_queued = own == tenant_queued_.end() ? 0 : own->second.queued;
  int64_t ahead = own_queued;
  for (const auto& [name, queue] : tenant_queued_) {
    if (name == tenant) continue;
    // Rounded up: on a tie the earlier arrival goes first.
    const int64_t turns = ((own_queued + 1) * queue.weight + weight - 1) / weight;
    ahead += std::min<int64_t>(queue.queued, turns);
  }
  return static_cast<int>(ahead);
}

absl::Status Inbox::CheckDeadline(const Sequence& sequence, bool starts_now) const {
  const absl::Time deadline = sequence.request().deadline;
  if (deadline == absl::InfiniteFuture()) return absl::OkStatus();
  absl::Duration wait = absl::ZeroDuration();
  int ahead = 0;
  if (!starts_now) {
    ahead = RequestsAhead(sequence.request().tenant, sequence.request().tenant_weight);
  }
  if (!starts_now && rates_.requests_finished_per_second > 0.0) {
    wait = absl::Seconds((ahead + 1) / rates_.requests_finished_per_second);
  }
  absl::Duration prefill = absl::ZeroDuration();
  if (rates_.prefill_tokens_per_second > 0.0) {
    prefill = absl::Seconds(sequence.prompt_tokens() / rates_.prefill_tokens_per_second);
  }
  const absl::Duration left = deadline - sequence.submit_time;
  if (left > wait + prefill) return absl::OkStatus();
  const auto ms = [](absl::Duration d) {
    return absl::FormatDuration(absl::Trunc(d, absl::Milliseconds(1)));
  };
  return absl::DeadlineExceededError(absl::StrCat(
      "deadline: ", ms(left), " left cannot cover the expected queue wait (", ms(wait), ", ", ahead,
      " of ", queued_, " queued ahead) plus prefill (", ms(prefill), ", ", sequence.prompt_tokens(),
      " tokens) at the measured rates; refused without queueing"));
}

absl::Duration Inbox::QueueDrainTime() const {
  // Nothing measured yet (a burst at start-up): a second is a modest first guess.
  if (rates_.requests_finished_per_second <= 0.0) return absl::Seconds(1);
  return absl::Seconds(queued_ / rates_.requests_finished_per_second);
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
