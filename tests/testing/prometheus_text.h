#pragma once

// A strict parser of the Prometheus text exposition format (version 0.0.4), for tests that
// scrape /metrics: every line must be a comment, blank, or a well-formed sample of a
// declared family, and histograms must be self-consistent.

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace quill::testing {

using Labels = std::map<std::string, std::string>;

struct PromSample {
  std::string name;  // full sample name (e.g. quill_ttft_seconds_bucket)
  Labels labels;
  double value = 0;
};

struct PromFamily {
  std::string name;
  std::string help;
  std::string type;  // counter, gauge, histogram, summary, untyped
  std::vector<PromSample> samples;
};

class PromText {
 public:
  // INVALID_ARGUMENT naming the line for anything malformed: bad names, label syntax or
  // escapes, values, samples outside their family, duplicate TYPE, histogram buckets that
  // are not cumulative or whose +Inf bucket differs from _count.
  static absl::StatusOr<PromText> Parse(absl::string_view text);

  const std::map<std::string, PromFamily>& families() const { return families_; }
  const PromFamily* Family(const std::string& name) const;

  // The sample `name` whose labels are exactly `labels`.
  std::optional<double> Value(const std::string& name, const Labels& labels = {}) const;
  // Histogram `family`'s _count (labels must match exactly, without "le").
  std::optional<double> HistogramCount(const std::string& family, const Labels& labels = {}) const;
  std::optional<double> HistogramSum(const std::string& family, const Labels& labels = {}) const;

 private:
  std::map<std::string, PromFamily> families_;
};

}  // namespace quill::testing
