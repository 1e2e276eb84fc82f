#pragma once

namespace quill::engine {

// Unicode character classes used by the GPT-2 pre-tokenizer regex, from the generated
// tables (Unicode version of the generator's Python). All are pure functions.

// General category L* (\p{L}).
bool IsUnicodeLetter(char32_t cp);
// General category N* (\p{N}).
bool IsUnicodeNumber(char32_t cp);
// Property White_Space (\s in a Unicode regex).
bool IsUnicodeWhitespace(char32_t cp);

}  // namespace quill::engine
