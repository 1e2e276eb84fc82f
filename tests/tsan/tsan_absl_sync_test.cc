// Runs only in a QUILL_SANITIZE=thread build. Every access below is ordered by an
// absl::Mutex or absl::Notification, so TSan must stay silent: without the annotations in
// absl_tsan_annotations.cc it reports each of these as a data race (Debian's Abseil is not
// instrumented), which would make every TSan finding in Quill's tests suspect.

#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace quill::testing {
namespace {

TEST(TsanAbslSyncTest, MutexOrdersPlainAccesses) {
  absl::Mutex mu;
  int counter = 0;  // plain int: only the mutex orders the increments
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) {
        absl::MutexLock lock(&mu);
        ++counter;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(counter, 4000);
}

TEST(TsanAbslSyncTest, AwaitAndTimedAwaitOrderTheHandOff) {
  absl::Mutex mu;
  int stage = 0;
  int payload = 0;
  std::thread producer([&] {
    payload = 42;  // written before the mutex hands stage over
    absl::MutexLock lock(&mu);
    stage = 1;
  });
  {
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(+[](int* s) { return *s == 1; }, &stage));
  }
  EXPECT_EQ(payload, 42);
  producer.join();

  std::thread second([&] {
    payload = 7;
    absl::MutexLock lock(&mu);
    stage = 2;
  });
  {
    absl::MutexLock lock(&mu);
    while (!mu.AwaitWithTimeout(absl::Condition(+[](int* s) { return *s == 2; }, &stage),
                                absl::Milliseconds(1))) {
    }
  }
  EXPECT_EQ(payload, 7);
  second.join();
}

TEST(TsanAbslSyncTest, NotificationPublishesWhatWasWrittenBeforeIt) {
  int payload = 0;
  absl::Notification ready;
  std::thread producer([&] {
    payload = 1;
    ready.Notify();
  });
  ready.WaitForNotification();
  EXPECT_EQ(payload, 1);
  producer.join();

  int polled = 0;
  absl::Notification flag;
  std::thread setter([&] {
    polled = 2;
    flag.Notify();
  });
  while (!flag.HasBeenNotified()) std::this_thread::yield();  // inline acquire load
  EXPECT_EQ(polled, 2);
  setter.join();

  int timed = 0;
  absl::Notification done;
  std::thread finisher([&] {
    timed = 3;
    done.Notify();
  });
  while (!done.WaitForNotificationWithTimeout(absl::Milliseconds(1))) {
  }
  EXPECT_EQ(timed, 3);
  finisher.join();
}

}  // namespace
}  // namespace quill::testing
