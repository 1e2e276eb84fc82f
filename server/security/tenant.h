#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace quill::server {

class ApiKeys;

// Whom a generation request is for: admission is weighted-fair across tenants (the
// engine's fair_queue.h), and --metrics-per-tenant labels by `name`.
struct Tenant {
  std::string name;  // "" = the default tenant
  int weight = 1;    // share of admissions against other tenants with queued work
};

// The header (HTTP) / metadata key (gRPC) naming the tenant when API keys are off.
inline constexpr absl::string_view kTenantHeader = "x-quill-tenant";

// The tenant of a request, and whether it may be served at all:
//  - with API keys (`keys` not null): `authorization` must hold a valid key
//    (UNAUTHENTICATED otherwise), and the tenant is that key's identity (its name from
//    the keys file, else the first 8 hex digits of its SHA-256). `tenant_header` is
//    ignored: a client must not be able to pass itself off as another key's tenant.
//  - without: the tenant is `tenant_header` (printable ASCII, at most 64 bytes, else
//    INVALID_ARGUMENT), or the default tenant "" when it is absent.
absl::StatusOr<Tenant> ResolveTenant(const ApiKeys* keys, absl::string_view authorization,
                                     std::optional<absl::string_view> tenant_header);

// OK for a valid tenant name (printable ASCII, at most 64 bytes); INVALID_ARGUMENT naming
// `field` otherwise.
absl::Status CheckTenantName(absl::string_view field, absl::string_view name);

}  // namespace quill::server
