#pragma once

#include <cstddef>

namespace quill::engine::unicode_tables {

// An inclusive range of code points. Tables are sorted, non-overlapping and
// non-adjacent, so a binary search finds membership.
struct CodepointRange {
  char32_t first;
  char32_t last;
};

// Generated into unicode_tables.cc by scripts/gen_unicode_tables.py.
extern const CodepointRange kLetterRanges[];
extern const size_t kLetterRangesSize;
extern const CodepointRange kNumberRanges[];
extern const size_t kNumberRangesSize;
extern const CodepointRange kWhitespaceRanges[];
extern const size_t kWhitespaceRangesSize;

}  // namespace quill::engine::unicode_tables
