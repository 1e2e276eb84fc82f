#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "server/security/tenant.h"

namespace quill::server {

// The API keys a client may present (`authorization: Bearer KEY` on gRPC and HTTP), read
// from a file of one key per line. Blank lines and lines starting with '#' are ignored;
// surrounding whitespace is trimmed. Only SHA-256 digests of the keys are kept, and a
// presented key is hashed and compared with every digest in constant time, so neither
// the time taken nor which key matched reveals anything about the keys.
//
// A key may be followed, after whitespace, by `name=NAME` and/or `weight=N`:
//     sk-3f9a...  name=team-search weight=2
// NAME (printable ASCII without spaces, at most 64 bytes) is the key's tenant; without
// it the tenant is the first 8 hex digits of the key's SHA-256 (never the key itself).
// N in [1, 1000] is the tenant's admission weight (default 1). A key line without
// fields reads as before; keys cannot contain whitespace, so nothing is ambiguous. Two
// keys may share a name (one tenant, e.g. while rotating keys); their weights must agree.
class ApiKeys {
 public:
  // INVALID_ARGUMENT (naming the file and line) for a file without keys or with a key that
  // is not printable ASCII without spaces; NOT_FOUND / PERMISSION_DENIED if unreadable.
  static absl::StatusOr<std::unique_ptr<ApiKeys>> Load(const std::string& path);

  // Re-reads the file (SIGHUP). On error the keys in force stay as they were.
  absl::Status Reload() ABSL_LOCKS_EXCLUDED(mu_);

  // OK if `authorization` (the header's value) is "Bearer <a key in the file>";
  // UNAUTHENTICATED naming what is wrong (missing, not Bearer, unknown key) otherwise.
  absl::Status Check(absl::string_view authorization) const ABSL_LOCKS_EXCLUDED(mu_);
  // Check, returning the key's tenant on success.
  absl::StatusOr<Tenant> Authenticate(absl::string_view authorization) const
      ABSL_LOCKS_EXCLUDED(mu_);

  const std::string& path() const { return path_; }
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using Digest = std::array<unsigned char, 32>;
  struct Entry {
    Digest digest;
    Tenant tenant;
  };
  explicit ApiKeys(std::string path) : path_(std::move(path)) {}
  static absl::StatusOr<std::vector<Entry>> Read(const std::string& path);

  const std::string path_;
  mutable absl::Mutex mu_;
  std::vector<Entry> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace quill::server
