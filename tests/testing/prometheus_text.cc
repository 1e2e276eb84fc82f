#include "tests/testing/prometheus_text.h"

#include <cmath>
#include <cstdlib>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace quill::testing {
namespace {

bool IsNameStart(char c) { return absl::ascii_isalpha(c) || c == '_' || c == ':'; }
bool IsNameChar(char c) { return IsNameStart(c) || absl::ascii_isdigit(c); }
bool IsLabelStart(char c) { return absl::ascii_isalpha(c) || c == '_'; }
bool IsLabelChar(char c) { return IsLabelStart(c) || absl::ascii_isdigit(c); }

bool IsMetricName(absl::string_view s) {
  if (s.empty() || !IsNameStart(s[0])) return false;
  for (char c : s) {
    if (!IsNameChar(c)) return false;
  }
  return true;
}

// Like Prometheus (Go's ParseFloat): Inf and NaN in any case ("Nan" from prometheus-cpp).
bool ParseValue(absl::string_view s, double* out) {
  if (absl::EqualsIgnoreCase(s, "+Inf") || absl::EqualsIgnoreCase(s, "Inf")) {
    *out = INFINITY;
    return true;
  }
  if (absl::EqualsIgnoreCase(s, "-Inf")) {
    *out = -INFINITY;
    return true;
  }
  if (absl::EqualsIgnoreCase(s, "NaN")) {
    *out = NAN;
    return true;
  }
  return absl::SimpleAtod(s, out) && std::isfinite(*out);
}

// Parses `{a="x",b="y"}` at the start of `*rest`, consuming it.
absl::Status ParseLabels(absl::string_view* rest, Labels* labels) {
  absl::string_view s = *rest;
  s.remove_prefix(1);  // '{'
  while (true) {
    if (!s.empty() && s[0] == '}') {
      s.remove_prefix(1);
      break;
    }
    size_t i = 0;
    if (s.empty() || !IsLabelStart(s[0])) return absl::InvalidArgumentError("bad label name");
    while (i < s.size() && IsLabelChar(s[i])) ++i;
    std::string name(s.substr(0, i));
    s.remove_prefix(i);
    if (!absl::ConsumePrefix(&s, "=\"")) return absl::InvalidArgumentError("expected =\"");
    std::string value;
    bool closed = false;
    while (!s.empty()) {
      const char c = s[0];
      s.remove_prefix(1);
      if (c == '"') {
        closed = true;
        break;
      }
      if (c == '\\') {
        if (s.empty()) return absl::InvalidArgumentError("dangling escape");
        const char e = s[0];
        s.remove_prefix(1);
        if (e == 'n') value += '\n';
        else if (e == '\\') value += '\\';
        else if (e == '"') value += '"';
        else return absl::InvalidArgumentError("bad escape in label value");
      } else if (c == '\n') {
        return absl::InvalidArgumentError("newline in label value");
      } else {
        value += c;
      }
    }
    if (!closed) return absl::InvalidArgumentError("unterminated label value");
    if (!labels->emplace(name, value).second) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate label ", name));
    }
    if (absl::ConsumePrefix(&s, ",")) continue;
    if (!s.empty() && s[0] == '}') continue;
    return absl::InvalidArgumentError("expected , or }");
  }
  *rest = s;
  return absl::OkStatus();
}

// The family a sample named `sample` belongs to, given the declared families.
std::string FamilyOf(const std::string& sample, const std::map<std::string, PromFamily>& families) {
  if (families.count(sample)) return sample;
  for (const char* suffix : {"_bucket", "_sum", "_count", "_total", "_created"}) {
    if (absl::EndsWith(sample, suffix)) {
      std::string base = sample.substr(0, sample.size() - strlen(suffix));
      if (families.count(base)) return base;
    }
  }
  return "";
}

absl::Status CheckHistogram(const PromFamily& family) {
  // Group bucket samples by their labels without "le".
  std::map<Labels, std::vector<std::pair<double, double>>> buckets;
  std::map<Labels, double> counts;
  for (const PromSample& s : family.samples) {
    if (s.name == family.name + "_bucket") {
      auto le = s.labels.find("le");
      if (le == s.labels.end()) return absl::InvalidArgumentError(s.name + " without le");
      double bound;
      if (!ParseValue(le->second, &bound)) return absl::InvalidArgumentError("bad le");
      Labels rest = s.labels;
      rest.erase("le");
      buckets[rest].push_back({bound, s.value});
    } else if (s.name == family.name + "_count") {
      counts[s.labels] = s.value;
    }
  }
  for (const auto& [labels, list] : buckets) {
    double previous_bound = -INFINITY, previous_count = 0;
    for (const auto& [bound, count] : list) {
      if (bound <= previous_bound) {
        return absl::InvalidArgumentError(family.name + ": bucket bounds not increasing");
      }
      if (count < previous_count) {
        return absl::InvalidArgumentError(family.name + ": buckets not cumulative");
      }
      previous_bound = bound;
      previous_count = count;
    }
    if (list.empty() || !std::isinf(list.back().first)) {
      return absl::InvalidArgumentError(family.name + ": no +Inf bucket");
    }
    auto count = counts.find(labels);
    if (count == counts.end() || count->second != list.back().second) {
      return absl::InvalidArgumentError(family.name + ": +Inf bucket != _count");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PromText> PromText::Parse(absl::string_view text) {
  PromText out;
  int line_number = 0;
  auto error = [&](absl::string_view what, absl::string_view line) {
    return absl::InvalidArgumentError(
        absl::StrCat("line ", line_number, ": ", what, ": '", line, "'"));
  };
  std::set<std::string> typed;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    if (line[0] == '#') {
      std::vector<absl::string_view> parts = absl::StrSplit(line, absl::MaxSplits(' ', 3));
      if (parts.size() >= 3 && (parts[1] == "HELP" || parts[1] == "TYPE")) {
        const std::string name(parts[2]);
        if (!IsMetricName(name)) return error("bad metric name", line);
        PromFamily& family = out.families_[name];
        family.name = name;
        const std::string arg = parts.size() == 4 ? std::string(parts[3]) : "";
        if (parts[1] == "HELP") {
          family.help = arg;
        } else {
          static const std::set<std::string> kTypes = {"counter", "gauge", "histogram",
                                                       "summary", "untyped"};
          if (!kTypes.count(arg)) return error("bad type", line);
          if (!typed.insert(name).second) return error("second TYPE line", line);
          if (!family.samples.empty()) return error("TYPE after samples", line);
          family.type = arg;
        }
      }
      continue;  // other comments are allowed
    }
    absl::string_view rest = line;
    size_t i = 0;
    while (i < rest.size() && IsNameChar(rest[i])) ++i;
    PromSample sample;
    sample.name = std::string(rest.substr(0, i));
    if (!IsMetricName(sample.name)) return error("bad sample name", line);
    rest.remove_prefix(i);
    if (!rest.empty() && rest[0] == '{') {
      if (absl::Status s = ParseLabels(&rest, &sample.labels); !s.ok()) {
        return error(s.message(), line);
      }
    }
    if (!absl::ConsumePrefix(&rest, " ")) return error("expected a space before the value", line);
    std::vector<absl::string_view> fields = absl::StrSplit(rest, ' ', absl::SkipEmpty());
    if (fields.empty() || fields.size() > 2) return error("expected value [timestamp]", line);
    if (!ParseValue(fields[0], &sample.value)) return error("bad value", line);
    if (fields.size() == 2) {
      int64_t ts;
      if (!absl::SimpleAtoi(fields[1], &ts)) return error("bad timestamp", line);
    }
    const std::string family_name = FamilyOf(sample.name, out.families_);
    if (family_name.empty()) return error("sample of an undeclared family", line);
    PromFamily& family = out.families_[family_name];
    if (family.type == "counter" && sample.value < 0) return error("negative counter", line);
    family.samples.push_back(std::move(sample));
  }
  for (const auto& [name, family] : out.families_) {
    if (family.type == "histogram") {
      if (absl::Status s = CheckHistogram(family); !s.ok()) return s;
    }
  }
  return out;
}

const PromFamily* PromText::Family(const std::string& name) const {
  auto it = families_.find(name);
  return it == families_.end() ? nullptr : &it->second;
}

std::optional<double> PromText::Value(const std::string& name, const Labels& labels) const {
  const std::string family = FamilyOf(name, families_);
  auto it = families_.find(family);
  if (it == families_.end()) return std::nullopt;
  for (const PromSample& s : it->second.samples) {
    if (s.name == name && s.labels == labels) return s.value;
  }
  return std::nullopt;
}

std::optional<double> PromText::HistogramCount(const std::string& family,
                                               const Labels& labels) const {
  return Value(family + "_count", labels);
}

std::optional<double> PromText::HistogramSum(const std::string& family,
                                             const Labels& labels) const {
  return Value(family + "_sum", labels);
}

}  // namespace quill::testing
