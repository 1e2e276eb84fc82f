#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace quill::engine {

// A compiled PCRE2 pattern (UTF-8 mode, Unicode properties, JIT when available), the
// only user of pcre2.h. Immutable after Compile(); Split is const and thread-safe (each
// call allocates its own match data, PCRE2's compiled code is read-only).
//
// Pattern syntax is PCRE2's, with one rewrite: \s and \S mean Unicode White_Space
// (U+0009..U+000D, U+0020, U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029,
// U+202F, U+205F, U+3000), as in the Rust/Oniguruma regexes that define the published
// pre-tokenizer patterns and in llama.cpp. PCRE2's own \s misses U+0085. `$` matches
// only at the very end of the subject (PCRE2_DOLLAR_ENDONLY, ECMAScript's meaning).
class Pcre2Regex {
 public:
  // INVALID_ARGUMENT with PCRE2's message and offset if `pattern` does not compile.
  static absl::StatusOr<Pcre2Regex> Compile(absl::string_view pattern);

  Pcre2Regex(Pcre2Regex&&) noexcept;
  Pcre2Regex& operator=(Pcre2Regex&&) noexcept;
  ~Pcre2Regex();

  // Scratch space for Split (PCRE2 match data). One per thread; reusable across calls.
  class MatchData {
   public:
    MatchData(MatchData&&) noexcept;
    ~MatchData();

   private:
    friend class Pcre2Regex;
    struct Data;
    explicit MatchData(std::unique_ptr<Data> data);
    std::unique_ptr<Data> data_;
  };
  MatchData NewMatchData() const;

  // Calls `piece` with the successive leftmost matches in `subject` (valid UTF-8,
  // matched as a whole: ^, $ and lookarounds see its ends) and the unmatched text
  // between them, in order, so that the pieces concatenate back to `subject`. An empty
  // match is skipped (the search resumes one character later). Stops at the first
  // error `piece` returns, and returns it. INVALID_ARGUMENT if PCRE2 gives up (a match,
  // depth or heap limit), naming the byte offset.
  absl::Status Split(absl::string_view subject, MatchData& scratch,
                     absl::FunctionRef<absl::Status(absl::string_view)> piece) const;

  const std::string& pattern() const { return pattern_; }
  bool jit() const { return jit_; }

 private:
  struct Code;
  Pcre2Regex(std::string pattern, std::unique_ptr<Code> code, bool jit);

  std::string pattern_;  // as given (before the \s rewrite), for messages
  std::unique_ptr<Code> code_;
  bool jit_ = false;
};

// The rewrite Compile applies, exposed for tests: \s and \S (outside and inside
// character classes) become explicit White_Space classes; everything else is unchanged.
std::string RewriteWhitespaceClasses(absl::string_view pattern);

}  // namespace quill::engine
