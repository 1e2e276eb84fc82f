#include "engine/tokenizer/unicode.h"

#include <algorithm>
#include <cstddef>

#include "engine/tokenizer/unicode_tables.h"

namespace quill::engine {
namespace {

using unicode_tables::CodepointRange;

bool InRanges(const CodepointRange* ranges, size_t size, char32_t cp) {
  // First range whose last code point is >= cp; cp is inside iff that range starts <= cp.
  const CodepointRange* end = ranges + size;
  const CodepointRange* it = std::lower_bound(
      ranges, end, cp, [](const CodepointRange& r, char32_t value) { return r.last < value; });
  return it != end && it->first <= cp;
}

}  // namespace

bool IsUnicodeLetter(char32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return InRanges(unicode_tables::kLetterRanges, unicode_tables::kLetterRangesSize, cp);
}

bool IsUnicodeNumber(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return InRanges(unicode_tables::kNumberRanges, unicode_tables::kNumberRangesSize, cp);
}

bool IsUnicodeWhitespace(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= '\t' && cp <= '\r');
  return InRanges(unicode_tables::kWhitespaceRanges, unicode_tables::kWhitespaceRangesSize, cp);
}

}  // namespace quill::engine
