#include "server/metrics/process_metrics.h"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace quill::server {

absl::StatusOr<int64_t> ParseStatmResidentBytes(absl::string_view statm, int64_t page_size) {
  std::vector<absl::string_view> fields =
      absl::StrSplit(statm, absl::ByAnyChar(" \n"), absl::SkipEmpty());
  int64_t pages = 0;
  if (fields.size() < 2 || !absl::SimpleAtoi(fields[1], &pages) || pages < 0) {
    return absl::InvalidArgumentError(absl::StrCat("malformed statm: '", statm, "'"));
  }
  return pages * page_size;
}

absl::StatusOr<int64_t> ReadResidentMemoryBytes() {
  std::ifstream in("/proc/self/statm");
  if (!in) return absl::UnavailableError("cannot open /proc/self/statm");
  std::stringstream text;
  text << in.rdbuf();
  return ParseStatmResidentBytes(text.str(), sysconf(_SC_PAGESIZE));
}

}  // namespace quill::server
