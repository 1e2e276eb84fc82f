#include "server/status_codec.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace quill::server {
namespace {

struct Case {
  absl::Status status;
  grpc::StatusCode code;
};

TEST(StatusCodecTest, EveryCodeMapsToTheSameGrpcCodeWithTheMessage) {
  const Case cases[] = {
      {absl::CancelledError("c"), grpc::StatusCode::CANCELLED},
      {absl::UnknownError("u"), grpc::StatusCode::UNKNOWN},
      {absl::InvalidArgumentError("max_tokens must be >= 1"), grpc::StatusCode::INVALID_ARGUMENT},
      {absl::DeadlineExceededError("d"), grpc::StatusCode::DEADLINE_EXCEEDED},
      {absl::NotFoundError("n"), grpc::StatusCode::NOT_FOUND},
      {absl::AlreadyExistsError("a"), grpc::StatusCode::ALREADY_EXISTS},
      {absl::PermissionDeniedError("p"), grpc::StatusCode::PERMISSION_DENIED},
      {absl::ResourceExhaustedError("queue full"), grpc::StatusCode::RESOURCE_EXHAUSTED},
      {absl::FailedPreconditionError("f"), grpc::StatusCode::FAILED_PRECONDITION},
      {absl::AbortedError("ab"), grpc::StatusCode::ABORTED},
      {absl::OutOfRangeError("o"), grpc::StatusCode::OUT_OF_RANGE},
      {absl::UnimplementedError("un"), grpc::StatusCode::UNIMPLEMENTED},
      {absl::InternalError("i"), grpc::StatusCode::INTERNAL},
      {absl::UnavailableError("server shutting down"), grpc::StatusCode::UNAVAILABLE},
      {absl::DataLossError("dl"), grpc::StatusCode::DATA_LOSS},
      {absl::UnauthenticatedError("ua"), grpc::StatusCode::UNAUTHENTICATED},
  };
  for (const Case& c : cases) {
    const grpc::Status got = ToGrpcStatus(c.status);
    EXPECT_EQ(got.error_code(), c.code) << c.status;
    EXPECT_EQ(got.error_message(), std::string(c.status.message())) << c.status;
  }
}

TEST(StatusCodecTest, OkIsOkWithoutMessage) {
  const grpc::Status got = ToGrpcStatus(absl::OkStatus());
  EXPECT_TRUE(got.ok());
  EXPECT_EQ(got.error_message(), "");
}

TEST(StatusCodecTest, UnknownFutureCodeBecomesUnknown) {
  const grpc::Status got = ToGrpcStatus(absl::Status(static_cast<absl::StatusCode>(42), "x"));
  EXPECT_EQ(got.error_code(), grpc::StatusCode::UNKNOWN);
}

TEST(StatusCodecTest, LongMessagesAreTruncatedOnACharacterBoundary) {
  // 'é' is two bytes; an odd prefix length puts a naive cut in the middle of one.
  std::string message = "x";
  while (message.size() < 3 * kMaxStatusMessageBytes) message += "\xC3\xA9";
  const grpc::Status got = ToGrpcStatus(absl::InvalidArgumentError(message));
  const std::string& text = got.error_message();
  EXPECT_LE(text.size(), kMaxStatusMessageBytes);
  EXPECT_THAT(text, ::testing::EndsWith("...[truncated]"));
  const std::string body = text.substr(0, text.size() - std::string("...[truncated]").size());
  // The kept part is an exact prefix made of whole characters.
  EXPECT_EQ(message.compare(0, body.size(), body), 0);
  EXPECT_EQ((body.size() - 1) % 2, 0u);
}

TEST(StatusCodecTest, MessageAtTheLimitIsKept) {
  const std::string message(kMaxStatusMessageBytes, 'm');
  EXPECT_EQ(ToGrpcStatus(absl::InternalError(message)).error_message(), message);
}

}  // namespace
}  // namespace quill::server
