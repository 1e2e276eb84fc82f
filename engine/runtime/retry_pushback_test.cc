#include "engine/runtime/retry_pushback.h"

#include "gtest/gtest.h"

namespace quill::engine {
namespace {

TEST(RetryPushbackTest, RoundTripsClampedMilliseconds) {
  const absl::Status status =
      WithRetryPushback(absl::ResourceExhaustedError("full"), absl::Milliseconds(1234.7));
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(status.message(), "full");
  EXPECT_EQ(RetryPushbackOf(status), absl::Milliseconds(1234));
  EXPECT_EQ(RetryPushbackOf(WithRetryPushback(absl::ResourceExhaustedError("x"),
                                              absl::ZeroDuration())),
            kMinRetryPushback);
  EXPECT_EQ(RetryPushbackOf(WithRetryPushback(absl::ResourceExhaustedError("x"),
                                              absl::InfiniteDuration())),
            kMaxRetryPushback);
}

TEST(RetryPushbackTest, AbsentOrMalformedIsNone) {
  EXPECT_EQ(RetryPushbackOf(absl::ResourceExhaustedError("x")), std::nullopt);
  absl::Status bad = absl::ResourceExhaustedError("x");
  bad.SetPayload(kRetryPushbackPayload, absl::Cord("soon"));
  EXPECT_EQ(RetryPushbackOf(bad), std::nullopt);
}

}  // namespace
}  // namespace quill::engine
