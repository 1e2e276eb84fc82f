#pragma once

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace quill::engine {

inline constexpr char32_t kUnicodeReplacementChar = 0xFFFD;

// One step of a strict UTF-8 decoder (Unicode Table 3-7: no overlongs, no surrogates,
// nothing above U+10FFFF).
struct Utf8Char {
  enum class Kind {
    kValid,      // a well-formed character of `length` bytes, value `code_point`
    kInvalid,    // an ill-formed maximal subpart of `length` >= 1 bytes
    kTruncated,  // `length` bytes that are a valid prefix cut off by the end of input
  };
  Kind kind;
  int length;
  char32_t code_point;  // kValid only
};

// Decodes the character starting at text[pos]; requires pos < text.size().
Utf8Char DecodeUtf8Char(absl::string_view text, size_t pos);

// Offset of the first byte that does not start a complete well-formed character, or
// absl::string_view::npos if `text` is valid UTF-8.
size_t FindInvalidUtf8(absl::string_view text);

// True if `text` is well-formed UTF-8 (no overlongs, surrogates or values > U+10FFFF).
bool IsValidUtf8(absl::string_view text);

// Appends the UTF-8 encoding of a code point (<= U+10FFFF, not a surrogate).
void AppendUtf8(char32_t cp, std::string* out);

// Appends `text` to `out` with every ill-formed maximal subpart replaced by U+FFFD (the
// Unicode "best practice" substitution). With hold_back_truncated, a valid but incomplete
// character at the very end is not consumed. Returns the number of bytes consumed.
size_t AppendSanitizedUtf8(absl::string_view text, bool hold_back_truncated, std::string* out);

}  // namespace quill::engine
