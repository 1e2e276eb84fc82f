#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/runtime/sequence.h"

namespace quill::engine {

// A message from another thread to the engine thread.
struct Command {
  enum class Kind { kSubmit, kCancel, kResume };
  Kind kind = Kind::kSubmit;
  std::unique_ptr<Sequence> sequence;  // kSubmit
  std::string request_id;              // kCancel, kResume
};

// What admission may hand out: run slots and KV blocks; and how many requests may wait.
struct AdmissionLimits {
  int max_queue = 256;
  // Requests one tenant may have queued; 0 = max_queue (no cap of its own).
  int max_queue_per_tenant = 0;
  int max_running = 64;
  int kv_blocks = 0;
};

// Rates the engine thread measures (0 = not measured yet), behind retry pushback and
// deadline-aware admission.
struct MeasuredRates {
  double requests_finished_per_second = 0.0;
  // Batch tokens per second in steps that prefill: how fast a prompt gets through.
  double prefill_tokens_per_second = 0.0;
};

// The many-writers / one-reader hand-off into the engine thread. It also keeps the facts
// Submit must answer synchronously: which request ids are live, and the admission ledger:
// run slots and KV blocks held (by running requests and by requests promised them at
// submit) and how many requests are queued waiting for them.
//
// Why a ledger here: the engine admits between steps, so a burst that arrives during one
// step would otherwise all count as "waiting" and overflow max_queue while slots and
// blocks sat free. With the ledger a request that fits starts at once (it is promised its
// slot and blocks under this lock) and max_queue bounds only requests that truly wait.
// Promises go only to requests that find nobody queued, and the engine admits promised
// requests first (in arrival order, before its fair queue), so a promise is always
// honoured before any queued request is admitted.
//
// Queued requests are also counted per tenant: for the per-tenant cap, and because the
// engine admits them weighted-fair across tenants, so a request's expected wait depends
// on its tenant's backlog more than on the queue's length.
class Inbox {
 public:
  explicit Inbox(const AdmissionLimits& limits) : limits_(limits) {}

  // UNAVAILABLE once closed; ALREADY_EXISTS for a live id; RESOURCE_EXHAUSTED (with a
  // retry pushback, see retry_pushback.h) when the request does not fit the free run
  // slots and KV blocks and max_queue requests are already queued, or its tenant already
  // has max_queue_per_tenant queued; DEADLINE_EXCEEDED when
  // its deadline cannot cover the expected queue wait plus prefill at the measured rates
  // (or has passed). On OK the request is live and either holds its capacity
  // (sequence->holds_capacity) or is queued.
  absl::Status PushSubmit(std::unique_ptr<Sequence> sequence) ABSL_LOCKS_EXCLUDED(mu_);
  // Never refused (not even when closed or full).
  void PushCancel(absl::string_view request_id) ABSL_LOCKS_EXCLUDED(mu_);
  // A paused request's consumer drained (TokenSink::WouldBlock). Never refused.
  void PushResume(absl::string_view request_id) ABSL_LOCKS_EXCLUDED(mu_);

  struct Drained {
    bool closed = false;
    absl::Time drain_deadline = absl::InfiniteFuture();
  };
  // Engine thread. Waits up to `timeout` for a command or Close() (only until the first
  // time it reports closed: after that only a command or the timeout ends the wait), then
  // moves every pending command into `out` (appending). If it reports closed, no submit
  // can follow.
  Drained WaitAndDrain(absl::Duration timeout, std::vector<Command>* out) ABSL_LOCKS_EXCLUDED(mu_);

  // Engine thread: a queued request of `tenant` was admitted; it now holds a slot and
  // `kv_blocks`.
  void Admitted(const std::string& tenant, int kv_blocks) ABSL_LOCKS_EXCLUDED(mu_);
  // Engine thread: a queued request of `tenant` ended before it was admitted.
  void LeftQueue(const std::string& tenant) ABSL_LOCKS_EXCLUDED(mu_);
  // Engine thread: a request holding a slot and `kv_blocks` ended (its KV is released).
  void Released(int kv_blocks) ABSL_LOCKS_EXCLUDED(mu_);
  // Engine thread: a running request paused (TokenSink::WouldBlock) and gave up its run
  // slot (not its KV blocks); or took one again to resume.
  void SlotReleased() ABSL_LOCKS_EXCLUDED(mu_);
  void SlotRetaken() ABSL_LOCKS_EXCLUDED(mu_);
  // Engine thread: the latest measured rates.
  void SetRates(const MeasuredRates& rates) ABSL_LOCKS_EXCLUDED(mu_);
  int queued() const ABSL_LOCKS_EXCLUDED(mu_);
  int queued(const std::string& tenant) const ABSL_LOCKS_EXCLUDED(mu_);
  // Engine thread: the request ended; its id may be used again.
  void Forget(const std::string& request_id) ABSL_LOCKS_EXCLUDED(mu_);

  // Refuses submits from now on and asks the engine to finish by `drain_deadline`.
  void Close(absl::Time drain_deadline) ABSL_LOCKS_EXCLUDED(mu_);
  bool closed() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // How long until the requests queued now have been served, at the measured rate.
  absl::Duration QueueDrainTime() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // DEADLINE_EXCEEDED if `sequence` cannot reach its first token by its deadline: the
  // wait for the requests the fair queue would admit before it (RequestsAhead) plus
  // itself to finish if it must queue, plus its prompt at the prefill rate. Unmeasured
  // rates count as no time, so only a sure miss is refused.
  absl::Status CheckDeadline(const Sequence& sequence, bool starts_now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Queued requests the engine's fair queue would admit before a new one from `tenant`
  // (weight `weight`): all of the tenant's own, and from every other tenant t about
  // (own + 1) * weight(t) / weight, as many as t has.
  int RequestsAhead(const std::string& tenant, int weight) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DecrementTenant(const std::string& tenant) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  struct TenantQueue {
    int queued = 0;
    int weight = 1;  // of its latest queued request
  };

  const AdmissionLimits limits_;
  mutable absl::Mutex mu_;
  std::vector<Command> commands_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> live_ids_ ABSL_GUARDED_BY(mu_);
  int queued_ ABSL_GUARDED_BY(mu_) = 0;       // accepted, waiting for capacity
  // The same by tenant; tenants with nothing queued are not kept.
  absl::flat_hash_map<std::string, TenantQueue> tenant_queued_ ABSL_GUARDED_BY(mu_);
  int held_slots_ ABSL_GUARDED_BY(mu_) = 0;   // running or promised at submit
  int64_t held_blocks_ ABSL_GUARDED_BY(mu_) = 0;
  MeasuredRates rates_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool close_reported_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time drain_deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
};

}  // namespace quill::engine
