#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Propagates a non-OK absl::Status to the caller.
#define QUILL_RETURN_IF_ERROR(expr)                  \
  do {                                               \
    ::absl::Status quill_status_ = (expr);           \
    if (!quill_status_.ok()) return quill_status_;   \
  } while (0)

#define QUILL_CONCAT_INNER_(a, b) a##b
#define QUILL_CONCAT_(a, b) QUILL_CONCAT_INNER_(a, b)

// QUILL_ASSIGN_OR_RETURN(T value, StatusOrExpr()); returns the error, or binds the value.
#define QUILL_ASSIGN_OR_RETURN(lhs, rexpr) \
  QUILL_ASSIGN_OR_RETURN_IMPL_(QUILL_CONCAT_(quill_statusor_, __LINE__), lhs, rexpr)

#define QUILL_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                 \
  if (!statusor.ok()) return statusor.status();            \
  lhs = std::move(statusor).value()
