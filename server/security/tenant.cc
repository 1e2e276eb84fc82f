#include "server/security/tenant.h"

#include "absl/strings/str_cat.h"
#include "server/security/api_keys.h"

namespace quill::server {

// Mirrors engine::kMaxTenantBytes (the engine validates again; this side names the header).
constexpr size_t kMaxTenantNameBytes = 64;

absl::Status CheckTenantName(absl::string_view field, absl::string_view name) {
  if (name.size() > kMaxTenantNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " is longer than ", kMaxTenantNameBytes, " bytes"));
  }
  for (size_t i = 0; i < name.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(name[i]);
    if (c < 0x20 || c > 0x7e) {
      // Never echo the byte itself: it may be a control character.
      return absl::InvalidArgumentError(
          absl::StrCat(field, " must be printable ASCII (byte ", i, " is not)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Tenant> ResolveTenant(const ApiKeys* keys, absl::string_view authorization,
                                     std::optional<absl::string_view> tenant_header) {
  if (keys != nullptr) return keys->Authenticate(authorization);
  Tenant tenant;
  if (tenant_header.has_value()) {
    if (absl::Status s = CheckTenantName(kTenantHeader, *tenant_header); !s.ok()) return s;
    tenant.name = std::string(*tenant_header);
  }
  return tenant;
}

}  // namespace quill::server
