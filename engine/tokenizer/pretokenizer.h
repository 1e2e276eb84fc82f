#pragma once

#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/tokenizer/pcre2_regex.h"
#include "engine/tokenizer/pretokenizer_families.h"

namespace quill::engine {

// Splits text into the words a byte-level BPE merges within, by running a family's
// split patterns (PreTokenizerSpec) in order. Immutable; Split is const and
// thread-safe.
class PreTokenizer {
 public:
  // INTERNAL if one of the spec's patterns does not compile (the specs are constants).
  static absl::StatusOr<PreTokenizer> Create(const PreTokenizerSpec& spec);

  // Calls `word` with the words of `text` (valid UTF-8) in order; they are views into
  // `text` and concatenate back to it. Returns the first error of `word`, or
  // INVALID_ARGUMENT if a regex gives up on the text.
  absl::Status Split(absl::string_view text,
                     absl::FunctionRef<absl::Status(absl::string_view)> word) const;

  // Convenience for tests: the words as a vector.
  absl::StatusOr<std::vector<absl::string_view>> Split(absl::string_view text) const;

  const std::string& name() const { return name_; }
  bool ignore_merges() const { return ignore_merges_; }

 private:
  PreTokenizer(std::string name, std::vector<Pcre2Regex> regexes, bool ignore_merges);
  // Splits `piece` with regexes_[stage] and hands each result to the next stage.
  absl::Status SplitFrom(size_t stage, absl::string_view piece,
                         std::vector<Pcre2Regex::MatchData>& scratch,
                         absl::FunctionRef<absl::Status(absl::string_view)> word) const;

  std::string name_;
  std::vector<Pcre2Regex> regexes_;
  bool ignore_merges_;
};

}  // namespace quill::engine
