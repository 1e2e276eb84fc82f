// ThreadSanitizer annotations for Debian's (uninstrumented) Abseil synchronization.
//
// TSan learns about a lock only from instrumented code or from the annotations Abseil
// makes when it is itself built with -fsanitize=thread. Debian's libabsl_synchronization
// is not, so TSan would see neither absl::Mutex nor absl::Notification establish any
// happens-before edge and report every access they protect as a race. Test binaries of a
// QUILL_SANITIZE=thread build are linked with `-Wl,--wrap=<symbol>` for each entry point
// below: calls from Quill's (instrumented) code reach these wrappers, which tell TSan what
// the real function does (lock, unlock, wait = unlock + lock, notify = release,
// wait for notification = acquire) and call it. The work the real function does inside
// (absl::Condition evaluation included) runs inside TSan's ignore window, where it is
// correct because absl holds the real lock; Quill's code outside is checked in full.
//
// Limits (tests/tsan/README.md): calls made inside libabsl itself are not seen (none of
// Quill's data is touched there); Await and CondVar waits are annotated as exclusive
// (Quill takes no reader locks). The wrapped symbols are listed once, by the QUILL_WRAP
// lines of this file, which CMake reads to build the --wrap options.

#include <sanitizer/tsan_interface.h>

#include <atomic>
#include <type_traits>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

// The mangled names below spell Abseil's inline namespace; fail loudly if it changes.
static_assert(std::is_same_v<absl::debian3::Mutex, absl::Mutex>,
              "Abseil's inline namespace is no longer debian3: update the --wrap names");

namespace {

using absl::Condition;
using absl::CondVar;
using absl::Duration;
using absl::Mutex;
using absl::Notification;
using absl::Time;

// absl::Notification is {Mutex mutex_; std::atomic<bool> notified_yet_;}. HasBeenNotified()
// is inline (instrumented) and acquire-loads notified_yet_, so Notify() must release there.
struct NotificationLayout {
  Mutex mutex;
  std::atomic<bool> notified_yet;
};
static_assert(sizeof(NotificationLayout) == sizeof(Notification), "absl::Notification changed");

void* NotifiedFlag(const Notification* n) {
  const auto* layout = reinterpret_cast<const NotificationLayout*>(n);
  return const_cast<std::atomic<bool>*>(&layout->notified_yet);
}

void Locked(Mutex* mu) {
  __tsan_mutex_pre_lock(mu, 0);
  __tsan_mutex_post_lock(mu, 0, 0);
}

}  // namespace

#define QUILL_REAL(ret, sym, ...) extern "C" ret __real_##sym(__VA_ARGS__)
#define QUILL_WRAP(ret, sym, ...) extern "C" ret __wrap_##sym(__VA_ARGS__)

// ---- Mutex: lock / unlock -------------------------------------------------------------

QUILL_REAL(void, _ZN4absl7debian35Mutex4LockEv, Mutex*);
QUILL_WRAP(void, _ZN4absl7debian35Mutex4LockEv, Mutex* mu) {
  __tsan_mutex_pre_lock(mu, 0);
  __real__ZN4absl7debian35Mutex4LockEv(mu);
  __tsan_mutex_post_lock(mu, 0, 0);
}

QUILL_REAL(bool, _ZN4absl7debian35Mutex7TryLockEv, Mutex*);
QUILL_WRAP(bool, _ZN4absl7debian35Mutex7TryLockEv, Mutex* mu) {
  __tsan_mutex_pre_lock(mu, __tsan_mutex_try_lock);
  const bool locked = __real__ZN4absl7debian35Mutex7TryLockEv(mu);
  __tsan_mutex_post_lock(mu, __tsan_mutex_try_lock | (locked ? 0 : __tsan_mutex_try_lock_failed),
                         0);
  return locked;
}

QUILL_REAL(void, _ZN4absl7debian35Mutex6UnlockEv, Mutex*);
QUILL_WRAP(void, _ZN4absl7debian35Mutex6UnlockEv, Mutex* mu) {
  // Waiters' conditions are evaluated inside the real Unlock: inside the ignore window.
  __tsan_mutex_pre_unlock(mu, 0);
  __real__ZN4absl7debian35Mutex6UnlockEv(mu);
  __tsan_mutex_post_unlock(mu, 0);
}

QUILL_REAL(void, _ZN4absl7debian35Mutex10ReaderLockEv, Mutex*);
QUILL_WRAP(void, _ZN4absl7debian35Mutex10ReaderLockEv, Mutex* mu) {
  __tsan_mutex_pre_lock(mu, __tsan_mutex_read_lock);
  __real__ZN4absl7debian35Mutex10ReaderLockEv(mu);
  __tsan_mutex_post_lock(mu, __tsan_mutex_read_lock, 0);
}

QUILL_REAL(void, _ZN4absl7debian35Mutex12ReaderUnlockEv, Mutex*);
QUILL_WRAP(void, _ZN4absl7debian35Mutex12ReaderUnlockEv, Mutex* mu) {
  __tsan_mutex_pre_unlock(mu, __tsan_mutex_read_lock);
  __real__ZN4absl7debian35Mutex12ReaderUnlockEv(mu);
  __tsan_mutex_post_unlock(mu, __tsan_mutex_read_lock);
}

QUILL_REAL(void, _ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE, Mutex*, const Condition&);
QUILL_WRAP(void, _ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE, Mutex* mu,
           const Condition& cond) {
  __tsan_mutex_pre_lock(mu, 0);
  __real__ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE(mu, cond);
  __tsan_mutex_post_lock(mu, 0, 0);
}

QUILL_REAL(bool, _ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE,
           Mutex*, const Condition&, Duration);
QUILL_WRAP(bool, _ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE,
           Mutex* mu, const Condition& cond, Duration timeout) {
  __tsan_mutex_pre_lock(mu, 0);
  const bool met =
      __real__ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE(
          mu, cond, timeout);
  __tsan_mutex_post_lock(mu, 0, 0);
  return met;
}

QUILL_REAL(bool, _ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE,
           Mutex*, const Condition&, Time);
QUILL_WRAP(bool, _ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE,
           Mutex* mu, const Condition& cond, Time deadline) {
  __tsan_mutex_pre_lock(mu, 0);
  const bool met =
      __real__ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE(
          mu, cond, deadline);
  __tsan_mutex_post_lock(mu, 0, 0);
  return met;
}

// ---- Mutex: waits (release, block, reacquire) ------------------------------------------

QUILL_REAL(void, _ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE, Mutex*, const Condition&);
QUILL_WRAP(void, _ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE, Mutex* mu,
           const Condition& cond) {
  __tsan_mutex_pre_unlock(mu, 0);
  __real__ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE(mu, cond);
  __tsan_mutex_post_unlock(mu, 0);
  Locked(mu);
}

QUILL_REAL(bool, _ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE,
           Mutex*, const Condition&, Duration);
QUILL_WRAP(bool, _ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE,
           Mutex* mu, const Condition& cond, Duration timeout) {
  __tsan_mutex_pre_unlock(mu, 0);
  const bool met =
      __real__ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE(
          mu, cond, timeout);
  __tsan_mutex_post_unlock(mu, 0);
  Locked(mu);
  return met;
}

QUILL_REAL(bool, _ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE, Mutex*,
           const Condition&, Time);
QUILL_WRAP(bool, _ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE,
           Mutex* mu, const Condition& cond, Time deadline) {
  __tsan_mutex_pre_unlock(mu, 0);
  const bool met =
      __real__ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE(
          mu, cond, deadline);
  __tsan_mutex_post_unlock(mu, 0);
  Locked(mu);
  return met;
}

QUILL_REAL(void, _ZN4absl7debian37CondVar4WaitEPNS0_5MutexE, CondVar*, Mutex*);
QUILL_WRAP(void, _ZN4absl7debian37CondVar4WaitEPNS0_5MutexE, CondVar* cv, Mutex* mu) {
  __tsan_mutex_pre_unlock(mu, 0);
  __real__ZN4absl7debian37CondVar4WaitEPNS0_5MutexE(cv, mu);
  __tsan_mutex_post_unlock(mu, 0);
  Locked(mu);
}

QUILL_REAL(bool, _ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE, CondVar*,
           Mutex*, Duration);
QUILL_WRAP(bool, _ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE,
           CondVar* cv, Mutex* mu, Duration timeout) {
  __tsan_mutex_pre_unlock(mu, 0);
  const bool timed_out =
      __real__ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE(cv, mu,
                                                                                   timeout);
  __tsan_mutex_post_unlock(mu, 0);
  Locked(mu);
  return timed_out;
}

QUILL_REAL(void, _ZN4absl7debian35MutexD1Ev, Mutex*);
QUILL_WRAP(void, _ZN4absl7debian35MutexD1Ev, Mutex* mu) {
  __tsan_mutex_destroy(mu, 0);
  __real__ZN4absl7debian35MutexD1Ev(mu);
}

QUILL_REAL(void, _ZN4absl7debian35MutexD2Ev, Mutex*);
QUILL_WRAP(void, _ZN4absl7debian35MutexD2Ev, Mutex* mu) {
  __tsan_mutex_destroy(mu, 0);
  __real__ZN4absl7debian35MutexD2Ev(mu);
}

// ---- Notification: Notify releases, a successful wait acquires -------------------------

QUILL_REAL(void, _ZN4absl7debian312Notification6NotifyEv, Notification*);
QUILL_WRAP(void, _ZN4absl7debian312Notification6NotifyEv, Notification* n) {
  __tsan_release(n);
  __tsan_release(NotifiedFlag(n));
  __real__ZN4absl7debian312Notification6NotifyEv(n);
}

QUILL_REAL(void, _ZNK4absl7debian312Notification19WaitForNotificationEv, const Notification*);
QUILL_WRAP(void, _ZNK4absl7debian312Notification19WaitForNotificationEv,
           const Notification* n) {
  __real__ZNK4absl7debian312Notification19WaitForNotificationEv(n);
  __tsan_acquire(const_cast<Notification*>(n));
}

QUILL_REAL(bool, _ZNK4absl7debian312Notification30WaitForNotificationWithTimeoutENS0_8DurationE,
           const Notification*, Duration);
QUILL_WRAP(bool, _ZNK4absl7debian312Notification30WaitForNotificationWithTimeoutENS0_8DurationE,
           const Notification* n, Duration timeout) {
  const bool notified =
      __real__ZNK4absl7debian312Notification30WaitForNotificationWithTimeoutENS0_8DurationE(
          n, timeout);
  if (notified) __tsan_acquire(const_cast<Notification*>(n));
  return notified;
}

QUILL_REAL(bool, _ZNK4absl7debian312Notification31WaitForNotificationWithDeadlineENS0_4TimeE,
           const Notification*, Time);
QUILL_WRAP(bool, _ZNK4absl7debian312Notification31WaitForNotificationWithDeadlineENS0_4TimeE,
           const Notification* n, Time deadline) {
  const bool notified =
      __real__ZNK4absl7debian312Notification31WaitForNotificationWithDeadlineENS0_4TimeE(
          n, deadline);
  if (notified) __tsan_acquire(const_cast<Notification*>(n));
  return notified;
}
