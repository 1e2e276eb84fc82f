#include "server/security/api_keys.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace quill::server {
namespace {

std::array<unsigned char, 32> Sha256(absl::string_view text) {
  std::array<unsigned char, 32> digest;
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest.data());
  return digest;
}

constexpr size_t kMaxNameBytes = 64;  // a tenant name's limit (server/security/tenant.h)
constexpr int kMaxWeight = 1000;      // engine::kMaxTenantWeight

bool IsKeyText(absl::string_view key) {
  for (const char c : key) {
    if (c <= ' ' || c > '~') return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::vector<ApiKeys::Entry>> ApiKeys::Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int error = errno;
    const std::string message =
        absl::StrCat("--api-keys-file ", path, ": ", std::strerror(error));
    return error == EACCES ? absl::PermissionDeniedError(message) : absl::NotFoundError(message);
  }
  std::stringstream text;
  text << in.rdbuf();
  std::vector<Entry> entries;
  absl::flat_hash_map<std::string, int> weights;  // by tenant name: they must agree
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text.str(), '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || absl::StartsWith(line, "#")) continue;
    const auto where = [&] {
      return absl::StrCat("--api-keys-file ", path, " line ", line_number);
    };
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r\f\v"), absl::SkipEmpty());
    const absl::string_view key = fields.front();
    if (!IsKeyText(key)) {
      // Never echo the key itself into the log.
      return absl::InvalidArgumentError(
          absl::StrCat(where(), ": a key must be printable ASCII without spaces"));
    }
    Entry entry;
    entry.digest = Sha256(key);
    bool named = false;
    for (size_t i = 1; i < fields.size(); ++i) {
      absl::string_view field = fields[i];
      if (absl::ConsumePrefix(&field, "name=")) {
        if (field.empty() || !IsKeyText(field) || field.size() > kMaxNameBytes) {
          return absl::InvalidArgumentError(absl::StrCat(
              where(), ": name= must be 1 to ", kMaxNameBytes, " printable ASCII characters"));
        }
        entry.tenant.name = std::string(field);
        named = true;
      } else if (absl::ConsumePrefix(&field, "weight=")) {
        if (!absl::SimpleAtoi(field, &entry.tenant.weight) || entry.tenant.weight < 1 ||
            entry.tenant.weight > kMaxWeight) {
          return absl::InvalidArgumentError(
              absl::StrCat(where(), ": weight= must be an integer in [1, ", kMaxWeight, "]"));
        }
      } else {
        // Only the field's name: the text after the key could be a pasted second key.
        return absl::InvalidArgumentError(
            absl::StrCat(where(), ": after the key only name=NAME and weight=N may follow (field ",
                         i + 1, " is neither)"));
      }
    }
    if (!named)
      entry.tenant.name = absl::BytesToHexString(
          absl::string_view(reinterpret_cast<const char*>(entry.digest.data()), 4));
    auto [it, inserted] = weights.try_emplace(entry.tenant.name, entry.tenant.weight);
    if (!inserted && it->second != entry.tenant.weight) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), ": tenant '", entry.tenant.name, "' was given weight ", it->second,
                       " on an earlier line; keys sharing a name must share the weight"));
    }
    entries.push_back(std::move(entry));
  }
  if (entries.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--api-keys-file ", path, " holds no keys (one per line; '#' starts a comment)"));
  }
  return entries;
}

absl::StatusOr<std::unique_ptr<ApiKeys>> ApiKeys::Load(const std::string& path) {
  std::unique_ptr<ApiKeys> keys(new ApiKeys(path));
  if (absl::Status s = keys->Reload(); !s.ok()) return s;
  return keys;
}

absl::Status ApiKeys::Reload() {
  absl::StatusOr<std::vector<Entry>> entries = Read(path_);
  if (!entries.ok()) return entries.status();
  absl::MutexLock lock(&mu_);
  entries_ = *std::move(entries);
  return absl::OkStatus();
}

size_t ApiKeys::size() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

absl::Status ApiKeys::Check(absl::string_view authorization) const {
  return Authenticate(authorization).status();
}

absl::StatusOr<Tenant> ApiKeys::Authenticate(absl::string_view authorization) const {
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
  // Every digest is compared, whatever matched before, and the match is picked without a
  // branch on the comparison, so the time taken says nothing about which key it was.
  size_t matched = 0;
  int matches = 0;
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < entries_.size(); ++i) {
    const int equal =
        CRYPTO_memcmp(entries_[i].digest.data(), presented.data(), presented.size()) == 0;
    matches |= equal;
    matched |= static_cast<size_t>(-static_cast<int64_t>(equal)) & i;
  }
  if (matches == 0) return absl::UnauthenticatedError("invalid API key");
  return entries_[matched].tenant;
}

}  // namespace quill::server
