#pragma once

// Python `str` semantics on UTF-8 byte strings: what chat templates rely on (code-point
// length and indexing, whitespace, case mapping, repr). Strings from outside may hold
// invalid UTF-8; every function here then treats each bad byte as one code point and never
// fails or reads out of bounds.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace quill::engine::chat::py {

// Decodes the code point at s[pos] (pos < s.size()); sets *length to its byte count.
// An invalid or truncated sequence decodes as the single byte's value (length 1).
uint32_t DecodeAt(absl::string_view s, size_t pos, size_t* length);

bool IsAscii(absl::string_view s);
// Number of code points (Python len()).
size_t CodePointCount(absl::string_view s);
// Byte offset of every code point, plus s.size() at the end (size CodePointCount + 1).
std::vector<size_t> CodePointOffsets(absl::string_view s);

// str.isspace() for one code point.
bool IsSpace(uint32_t cp);
// Byte range [*begin, *end) left after str.strip()/lstrip()/rstrip(chars); `chars` null
// strips whitespace.
void StripRange(absl::string_view s, const std::string* chars, bool left, bool right, size_t* begin,
                size_t* end);

// Simple (one-to-one) case mappings for ASCII, Latin-1, Latin Extended-A, Greek and
// Cyrillic; other code points are left alone.
uint32_t ToUpper(uint32_t cp);
uint32_t ToLower(uint32_t cp);
bool IsCased(uint32_t cp);
bool IsAlpha(uint32_t cp);
bool IsDigit(uint32_t cp);

std::string Upper(absl::string_view s);
std::string Lower(absl::string_view s);
std::string Capitalize(absl::string_view s);  // str.capitalize()
std::string Title(absl::string_view s);       // str.title()
bool IsLower(absl::string_view s);            // str.islower()
bool IsUpper(absl::string_view s);            // str.isupper()

// repr(str): quoted with ' (or " when the text has ' but no "), escapes as Python does.
std::string Repr(absl::string_view s);

// Byte offsets where str.splitlines() breaks, as [begin, end) line ranges without the
// line terminators (\n, \r, \r\n, \v, \f, \x1c-\x1e, \x85, U+2028, U+2029).
std::vector<std::pair<size_t, size_t>> SplitLines(absl::string_view s);

}  // namespace quill::engine::chat::py
