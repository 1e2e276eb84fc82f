#pragma once

#include <array>
#include <cstdint>

namespace quill::engine {

// The GPT-2 byte-level alphabet: every byte is written as one printable code point so a
// BPE vocabulary never contains raw control bytes or spaces. Printable Latin-1 bytes
// ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) map to themselves; the other 68 bytes map,
// in increasing order, to U+0100, U+0101, ...
const std::array<char32_t, 256>& ByteToUnicode();

// The inverse: the byte of a code point of the alphabet, or -1.
int UnicodeToByte(char32_t cp);

}  // namespace quill::engine
