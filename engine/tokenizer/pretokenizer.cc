#include "engine/tokenizer/pretokenizer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"

namespace quill::engine {

absl::StatusOr<PreTokenizer> PreTokenizer::Create(const PreTokenizerSpec& spec) {
  std::vector<Pcre2Regex> regexes;
  regexes.reserve(spec.patterns.size());
  for (const std::string& pattern : spec.patterns) {
    absl::StatusOr<Pcre2Regex> regex = Pcre2Regex::Compile(pattern);
    if (!regex.ok()) {
      return absl::InternalError(
          absl::StrCat("pre-tokenizer '", spec.name, "': ", regex.status().message()));
    }
    regexes.push_back(*std::move(regex));
  }
  return PreTokenizer(spec.name, std::move(regexes), spec.ignore_merges);
}

PreTokenizer::PreTokenizer(std::string name, std::vector<Pcre2Regex> regexes, bool ignore_merges)
    : name_(std::move(name)), regexes_(std::move(regexes)), ignore_merges_(ignore_merges) {}

absl::Status PreTokenizer::Split(absl::string_view text,
                                 absl::FunctionRef<absl::Status(absl::string_view)> word) const {
  if (text.empty()) return absl::OkStatus();
  if (regexes_.empty()) return word(text);
  std::vector<Pcre2Regex::MatchData> scratch;
  scratch.reserve(regexes_.size());
  for (const Pcre2Regex& regex : regexes_) scratch.push_back(regex.NewMatchData());
  return SplitFrom(0, text, scratch, word);
}

absl::Status PreTokenizer::SplitFrom(
    size_t stage, absl::string_view piece, std::vector<Pcre2Regex::MatchData>& scratch,
    absl::FunctionRef<absl::Status(absl::string_view)> word) const {
  if (stage + 1 == regexes_.size()) return regexes_[stage].Split(piece, scratch[stage], word);
  // Each further pattern sees every piece of the previous one as a subject of its own;
  // pieces flow through depth first, so nothing is collected in between.
  return regexes_[stage].Split(piece, scratch[stage], [&](absl::string_view sub) {
    return SplitFrom(stage + 1, sub, scratch, word);
  });
}

absl::StatusOr<std::vector<absl::string_view>> PreTokenizer::Split(absl::string_view text) const {
  std::vector<absl::string_view> words;
  QUILL_RETURN_IF_ERROR(Split(text, [&](absl::string_view w) {
    words.push_back(w);
    return absl::OkStatus();
  }));
  return words;
}

}  // namespace quill::engine
