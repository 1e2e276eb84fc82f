#pragma once

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace quill::server {

// Longest status message sent to a client; longer ones are cut (with a marker) so that a
// runaway message (e.g. one that quotes a huge prompt) cannot blow the trailer limits.
inline constexpr size_t kMaxStatusMessageBytes = 1024;

// absl::Status -> grpc::Status: the same code (both follow google.rpc.Code) and the
// message, truncated to kMaxStatusMessageBytes on a UTF-8 boundary. The only place in
// Quill where a grpc::Status is built from an absl::Status.
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace quill::server
