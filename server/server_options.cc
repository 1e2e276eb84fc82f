#include "server/server_options.h"

#include <sys/stat.h>

#include <cmath>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace quill::server {
namespace {

bool FileExists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string Dirname(absl::string_view path) {
  const size_t slash = path.rfind('/');
  if (slash == absl::string_view::npos) return ".";
  if (slash == 0) return "/";
  return std::string(path.substr(0, slash));
}

}  // namespace

absl::StatusOr<int64_t> ParseByteSize(absl::string_view text) {
  const std::string original(text);
  std::string s = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  struct Unit {
    const char* suffix;
    double factor;
  };
  // Longest suffixes first so that "mib" is not read as "b".
  static constexpr Unit kUnits[] = {
      {"kib", 1024.0}, {"mib", 1048576.0}, {"gib", 1073741824.0}, {"tib", 1099511627776.0},
      {"kb", 1e3},     {"mb", 1e6},        {"gb", 1e9},           {"tb", 1e12},
      {"k", 1024.0},   {"m", 1048576.0},   {"g", 1073741824.0},   {"t", 1099511627776.0},
      {"b", 1.0},
  };
  double factor = 1.0;
  for (const Unit& unit : kUnits) {
    if (absl::EndsWith(s, unit.suffix)) {
      factor = unit.factor;
      s.resize(s.size() - strlen(unit.suffix));
      break;
    }
  }
  s = std::string(absl::StripAsciiWhitespace(s));
  double value = 0;
  if (s.empty() || !absl::SimpleAtod(s, &value) || !std::isfinite(value) || value < 0 ||
      s.find_first_not_of("0123456789.") != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", original, "' is not a byte size (e.g. 268435456, 512MiB, 2GiB, 1.5G, 500MB)"));
  }
  const double bytes = value * factor;
  if (bytes > static_cast<double>(std::numeric_limits<int64_t>::max() / 2)) {
    return absl::InvalidArgumentError(absl::StrCat("'", original, "' is too large"));
  }
  return static_cast<int64_t>(std::llround(bytes));
}

std::string FormatByteSize(int64_t bytes) {
  static constexpr struct {
    const char* suffix;
    int64_t factor;
  } kUnits[] = {{"TiB", int64_t{1} << 40}, {"GiB", int64_t{1} << 30}, {"MiB", int64_t{1} << 20},
                {"KiB", int64_t{1} << 10}};
  for (const auto& unit : kUnits) {
    if (bytes > 0 && bytes % unit.factor == 0) return absl::StrCat(bytes / unit.factor, unit.suffix);
  }
  return absl::StrCat(bytes, "B");
}

std::string HumanBytes(int64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  return unit == 0 ? absl::StrCat(bytes, "B") : absl::StrFormat("%.2f%s", value, kUnits[unit]);
}

absl::StatusOr<engine::kernels::Precision> ParsePrecision(absl::string_view text) {
  const std::string s = absl::AsciiStrToLower(text);
  if (s == "fast") return engine::kernels::Precision::kFast;
  if (s == "exact") return engine::kernels::Precision::kExact;
  return absl::InvalidArgumentError(
      absl::StrCat("precision must be 'fast' or 'exact', got '", text, "'"));
}

absl::StatusOr<std::optional<engine::kernels::KvElement>> ParseKvCacheType(absl::string_view text) {
  const std::string s = absl::AsciiStrToLower(text);
  if (s == "auto") return std::nullopt;
  engine::kernels::KvElement element;
  if (engine::kernels::KvElementFromName(s, &element)) return element;
  return absl::InvalidArgumentError(
      absl::StrCat("kv cache type must be 'auto', 'f32', 'f16', 'bf16' or 'q8', got '", text, "'"));
}

absl::string_view PrecisionName(engine::kernels::Precision precision) {
  return precision == engine::kernels::Precision::kExact ? "exact" : "fast";
}

std::vector<std::string> DefaultModelCandidates(absl::string_view exe_path,
                                                absl::string_view env_model) {
  std::vector<std::string> candidates;
  if (!env_model.empty()) candidates.emplace_back(env_model);
  if (!exe_path.empty()) {
    const std::string dir = Dirname(exe_path);
    candidates.push_back(absl::StrCat(dir, "/../share/quill/models/kjv-1m.gguf"));
    candidates.push_back(absl::StrCat(dir, "/../../models/kjv-1m.gguf"));
  }
  candidates.push_back("./models/kjv-1m.gguf");
  return candidates;
}

absl::StatusOr<std::string> ResolveDefaultModel(absl::string_view exe_path,
                                                absl::string_view env_model) {
  const std::vector<std::string> candidates = DefaultModelCandidates(exe_path, env_model);
  for (const std::string& path : candidates) {
    if (FileExists(path)) return path;
  }
  return absl::NotFoundError(absl::StrCat("no --model given and the built-in model is not at ",
                                          absl::StrJoin(candidates, ", ")));
}

bool IsLoopbackHost(absl::string_view host) {
  if (absl::StartsWith(host, "[") && absl::EndsWith(host, "]")) {
    host = host.substr(1, host.size() - 2);
  }
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

std::string JoinHostPort(absl::string_view host, int port) {
  if (absl::StrContains(host, ':') && !absl::StartsWith(host, "[")) {
    return absl::StrCat("[", host, "]:", port);
  }
  return absl::StrCat(host, ":", port);
}

}  // namespace quill::server
