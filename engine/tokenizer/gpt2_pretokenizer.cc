#include "engine/tokenizer/gpt2_pretokenizer.h"

#include <cstdint>

#include "engine/tokenizer/unicode.h"
#include "engine/tokenizer/utf8.h"

namespace quill::engine {
namespace {

// The classes the regex distinguishes; kOther is [^\s\p{L}\p{N}].
enum class CharClass : uint8_t { kOther, kLetter, kNumber, kSpace };

CharClass Classify(char32_t cp) {
  if (IsUnicodeLetter(cp)) return CharClass::kLetter;
  if (IsUnicodeNumber(cp)) return CharClass::kNumber;
  if (IsUnicodeWhitespace(cp)) return CharClass::kSpace;
  return CharClass::kOther;
}

bool IsContractionSuffix1(char32_t c) { return c == 's' || c == 't' || c == 'm' || c == 'd'; }

bool IsContractionSuffix2(char32_t a, char32_t b) {
  return (a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l');
}

// End (exclusive, in code points) of the regex match starting at code point i.
size_t MatchEnd(const std::vector<char32_t>& cps, const std::vector<CharClass>& cls, size_t i) {
  const size_t n = cps.size();
  // 's|'t|'re|'ve|'m|'ll|'d (case-sensitive, as in the regex).
  if (cps[i] == '\'' && i + 1 < n) {
    if (IsContractionSuffix1(cps[i + 1])) return i + 2;
    if (i + 2 < n && IsContractionSuffix2(cps[i + 1], cps[i + 2])) return i + 3;
  }
  // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional ASCII space, then a run of
  // one class. A space itself is kSpace, so `start` is where the run begins.
  size_t start = i;
  if (cps[i] == ' ' && i + 1 < n && cls[i + 1] != CharClass::kSpace) start = i + 1;
  if (cls[start] != CharClass::kSpace) {
    const CharClass run = cls[start];
    size_t end = start + 1;
    while (end < n && cls[end] == run) ++end;
    return end;
  }
  // Whitespace run [i, end).
  size_t end = i + 1;
  while (end < n && cls[end] == CharClass::kSpace) ++end;
  // `\s+(?!\S)`: at the end of the text the whole run; before a non-space, the run
  // minus its last character (which then prefixes the next word), if that is not empty.
  if (end == n) return end;
  if (end - i >= 2) return end - 1;
  // `\s+`: a single whitespace character before a non-space.
  return end;
}

}  // namespace

std::vector<absl::string_view> Gpt2PreTokenize(absl::string_view text) {
  std::vector<char32_t> cps;
  std::vector<CharClass> cls;
  std::vector<size_t> offsets;  // byte offset of each code point, plus text.size()
  cps.reserve(text.size());
  cls.reserve(text.size());
  offsets.reserve(text.size() + 1);
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Char c = DecodeUtf8Char(text, pos);
    // The caller guarantees valid UTF-8; an invalid byte would still advance by its length.
    const char32_t cp = c.kind == Utf8Char::Kind::kValid ? c.code_point : kUnicodeReplacementChar;
    cps.push_back(cp);
    cls.push_back(Classify(cp));
    offsets.push_back(pos);
    pos += c.length;
  }
  offsets.push_back(text.size());

  std::vector<absl::string_view> words;
  for (size_t i = 0; i < cps.size();) {
    const size_t end = MatchEnd(cps, cls, i);
    words.push_back(text.substr(offsets[i], offsets[end] - offsets[i]));
    i = end;
  }
  return words;
}

}  // namespace quill::engine
