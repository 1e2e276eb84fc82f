#include "engine/tokenizer/pcre2_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"

namespace quill::engine {
namespace {

// Unicode White_Space, as class members (no brackets).
constexpr absl::string_view kWhiteSpaceMembers =
    "\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}"
    "\\x{3000}";

std::string Pcre2ErrorMessage(int code) {
  PCRE2_UCHAR buffer[256];
  const int n = pcre2_get_error_message(code, buffer, sizeof(buffer));
  if (n < 0) return absl::StrCat("PCRE2 error ", code);
  return std::string(reinterpret_cast<const char*>(buffer), n);
}

// Length of the UTF-8 character whose lead byte is `lead` (the subject is valid UTF-8).
size_t Utf8Length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

}  // namespace

struct Pcre2Regex::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

std::string RewriteWhitespaceClasses(absl::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char next = pattern[++i];
      if (next == 's') {
        absl::StrAppend(&out, in_class ? "" : "[", kWhiteSpaceMembers, in_class ? "" : "]");
      } else if (next == 'S' && !in_class) {
        absl::StrAppend(&out, "[^", kWhiteSpaceMembers, "]");
      } else {
        // Any other escape (and \S inside a class, which no published pattern uses) is
        // PCRE2's own.
        out.push_back(c);
        out.push_back(next);
      }
      continue;
    }
    out.push_back(c);
    if (!in_class && c == '[') {
      in_class = true;
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out.push_back(pattern[++i]);
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out.push_back(pattern[++i]);
    } else if (in_class && c == ']') {
      in_class = false;
    }
  }
  return out;
}

absl::StatusOr<Pcre2Regex> Pcre2Regex::Compile(absl::string_view pattern) {
  const std::string rewritten = RewriteWhitespaceClasses(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()), rewritten.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &error, &offset,
                                   /*ccontext=*/nullptr);
  if (code == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("regex '", pattern, "' does not compile: ", Pcre2ErrorMessage(error),
                     " (at offset ", offset, " of '", rewritten, "')"));
  }
  auto holder = std::make_unique<Code>();
  holder->code = code;
  // JIT is an optimisation: without it (a build without JIT support) pcre2_match
  // interprets the same pattern with the same results.
  const bool jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return Pcre2Regex(std::string(pattern), std::move(holder), jit);
}

struct Pcre2Regex::MatchData::Data {
  pcre2_match_data* match = nullptr;
  ~Data() { pcre2_match_data_free(match); }
};

Pcre2Regex::MatchData::MatchData(std::unique_ptr<Data> data) : data_(std::move(data)) {}
Pcre2Regex::MatchData::MatchData(MatchData&&) noexcept = default;
Pcre2Regex::MatchData::~MatchData() = default;

Pcre2Regex::MatchData Pcre2Regex::NewMatchData() const {
  auto data = std::make_unique<MatchData::Data>();
  // A match data for at most one capture pair: only the whole match is read.
  data->match = pcre2_match_data_create(1, nullptr);
  return MatchData(std::move(data));
}

Pcre2Regex::Pcre2Regex(std::string pattern, std::unique_ptr<Code> code, bool jit)
    : pattern_(std::move(pattern)), code_(std::move(code)), jit_(jit) {}
Pcre2Regex::Pcre2Regex(Pcre2Regex&&) noexcept = default;
Pcre2Regex& Pcre2Regex::operator=(Pcre2Regex&&) noexcept = default;
Pcre2Regex::~Pcre2Regex() = default;

absl::Status Pcre2Regex::Split(absl::string_view subject, MatchData& scratch,
                               absl::FunctionRef<absl::Status(absl::string_view)> piece) const {
  pcre2_match_data* match = scratch.data_->match;
  if (match == nullptr) return absl::ResourceExhaustedError("out of memory for regex match data");
  const auto* data = reinterpret_cast<PCRE2_SPTR>(subject.data());
  size_t emitted = 0;  // end of the last piece passed on
  size_t start = 0;    // where the next search begins
  while (start < subject.size()) {
    // The caller guarantees valid UTF-8 (Encode checks it once for the whole text).
    // pcre2_jit_match skips pcre2_match's argument checks, which cost a measurable share
    // for the many short pieces of the multi-pattern families.
    const int rc = jit_ ? pcre2_jit_match(code_->code, data, subject.size(), start,
                                          PCRE2_NO_UTF_CHECK, match, /*mcontext=*/nullptr)
                        : pcre2_match(code_->code, data, subject.size(), start, PCRE2_NO_UTF_CHECK,
                                      match, /*mcontext=*/nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      return absl::InvalidArgumentError(absl::StrCat("pre-tokenizer regex '", pattern_,
                                                     "' failed at byte ", start, ": ",
                                                     Pcre2ErrorMessage(rc)));
    }
    // rc == 0 only says the one-pair ovector had no room for capture groups; pair 0,
    // the whole match, is always set.
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
    const size_t begin = ovector[0];
    const size_t end = ovector[1];
    if (end == begin) {
      if (begin >= subject.size()) break;
      start = begin + Utf8Length(static_cast<unsigned char>(subject[begin]));
      continue;
    }
    if (begin > emitted) QUILL_RETURN_IF_ERROR(piece(subject.substr(emitted, begin - emitted)));
    QUILL_RETURN_IF_ERROR(piece(subject.substr(begin, end - begin)));
    emitted = start = end;
  }
  if (emitted < subject.size()) QUILL_RETURN_IF_ERROR(piece(subject.substr(emitted)));
  return absl::OkStatus();
}

}  // namespace quill::engine
