#include "server/security/api_keys.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace quill::server {
namespace {

std::array<unsigned char, 32> Sha256(absl::string_view text) {
  std::array<unsigned char, 32> digest;
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest.data());
  return digest;
}

bool IsKeyText(absl::string_view key) {
  for (const char c : key) {
    if (c <= ' ' || c > '~') return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::vector<ApiKeys::Digest>> ApiKeys::Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int error = errno;
    const std::string message =
        absl::StrCat("--api-keys-file ", path, ": ", std::strerror(error));
    return error == EACCES ? absl::PermissionDeniedError(message) : absl::NotFoundError(message);
  }
  std::stringstream text;
  text << in.rdbuf();
  std::vector<Digest> digests;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text.str(), '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || absl::StartsWith(line, "#")) continue;
    if (!IsKeyText(line)) {
      // Never echo the key itself into the log.
      return absl::InvalidArgumentError(
          absl::StrCat("--api-keys-file ", path, " line ", line_number,
                       ": a key must be printable ASCII without spaces"));
    }
    digests.push_back(Sha256(line));
  }
  if (digests.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--api-keys-file ", path, " holds no keys (one per line; '#' starts a comment)"));
  }
  return digests;
}

absl::StatusOr<std::unique_ptr<ApiKeys>> ApiKeys::Load(const std::string& path) {
  std::unique_ptr<ApiKeys> keys(new ApiKeys(path));
  if (absl::Status s = keys->Reload(); !s.ok()) return s;
  return keys;
}

absl::Status ApiKeys::Reload() {
  absl::StatusOr<std::vector<Digest>> digests = Read(path_);
  if (!digests.ok()) return digests.status();
  absl::MutexLock lock(&mu_);
  digests_ = *std::move(digests);
  return absl::OkStatus();
}

size_t ApiKeys::size() const {
  absl::MutexLock lock(&mu_);
  return digests_.size();
}

absl::Status ApiKeys::Check(absl::string_view authorization) const {
  if (authorization.empty()) {
    return absl::UnauthenticatedError(
        "missing API key: send the header 'authorization: Bearer <key>'");
  }
  constexpr absl::string_view kScheme = "bearer ";
  if (authorization.size() <= kScheme.size() ||
      !absl::StartsWithIgnoreCase(authorization, kScheme)) {
    return absl::UnauthenticatedError("the authorization header must be 'Bearer <key>'");
  }
  const Digest presented = Sha256(absl::StripAsciiWhitespace(authorization.substr(kScheme.size())));
  int matches = 0;
  absl::MutexLock lock(&mu_);
  // Every digest is compared, whatever matched before.
  for (const Digest& digest : digests_) {
    matches |= CRYPTO_memcmp(digest.data(), presented.data(), digest.size()) == 0;
  }
  if (matches == 0) return absl::UnauthenticatedError("invalid API key");
  return absl::OkStatus();
}

}  // namespace quill::server
