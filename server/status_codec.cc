#include "server/status_codec.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace quill::server {
namespace {

// Every absl::StatusCode has a grpc::StatusCode with the same number (both are
// google.rpc.Code); anything else (a code from the future) is UNKNOWN.
grpc::StatusCode ToGrpcCode(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk: return grpc::StatusCode::OK;
    case absl::StatusCode::kCancelled: return grpc::StatusCode::CANCELLED;
    case absl::StatusCode::kUnknown: return grpc::StatusCode::UNKNOWN;
    case absl::StatusCode::kInvalidArgument: return grpc::StatusCode::INVALID_ARGUMENT;
    case absl::StatusCode::kDeadlineExceeded: return grpc::StatusCode::DEADLINE_EXCEEDED;
    case absl::StatusCode::kNotFound: return grpc::StatusCode::NOT_FOUND;
    case absl::StatusCode::kAlreadyExists: return grpc::StatusCode::ALREADY_EXISTS;
    case absl::StatusCode::kPermissionDenied: return grpc::StatusCode::PERMISSION_DENIED;
    case absl::StatusCode::kResourceExhausted: return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case absl::StatusCode::kFailedPrecondition: return grpc::StatusCode::FAILED_PRECONDITION;
    case absl::StatusCode::kAborted: return grpc::StatusCode::ABORTED;
    case absl::StatusCode::kOutOfRange: return grpc::StatusCode::OUT_OF_RANGE;
    case absl::StatusCode::kUnimplemented: return grpc::StatusCode::UNIMPLEMENTED;
    case absl::StatusCode::kInternal: return grpc::StatusCode::INTERNAL;
    case absl::StatusCode::kUnavailable: return grpc::StatusCode::UNAVAILABLE;
    case absl::StatusCode::kDataLoss: return grpc::StatusCode::DATA_LOSS;
    case absl::StatusCode::kUnauthenticated: return grpc::StatusCode::UNAUTHENTICATED;
    default: return grpc::StatusCode::UNKNOWN;
  }
}

// Cuts `message` to at most `limit` bytes without splitting a UTF-8 character.
std::string Truncate(absl::string_view message, size_t limit) {
  if (message.size() <= limit) return std::string(message);
  constexpr absl::string_view kMarker = "...[truncated]";
  size_t cut = limit - kMarker.size();
  // Step back over continuation bytes (10xxxxxx) to the start of a character.
  while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80) --cut;
  return absl::StrCat(message.substr(0, cut), kMarker);
}

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(ToGrpcCode(status.code()),
                      Truncate(status.message(), kMaxStatusMessageBytes));
}

}  // namespace quill::server
