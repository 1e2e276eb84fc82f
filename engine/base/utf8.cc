#include "engine/base/utf8.h"

#include <cstdint>

namespace quill::engine {

Utf8Char DecodeUtf8Char(absl::string_view text, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t lead = byte(pos);
  if (lead < 0x80) return {Utf8Char::Kind::kValid, 1, lead};

  // Number of continuation bytes and the allowed range of the first one (Table 3-7).
  int needed;
  uint8_t lo = 0x80, hi = 0xBF;
  char32_t cp;
  if (lead >= 0xC2 && lead <= 0xDF) {
    needed = 1;
    cp = lead & 0x1F;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    needed = 2;
    cp = lead & 0x0F;
    if (lead == 0xE0) lo = 0xA0;  // overlongs
    if (lead == 0xED) hi = 0x9F;  // surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    needed = 3;
    cp = lead & 0x07;
    if (lead == 0xF0) lo = 0x90;  // overlongs
    if (lead == 0xF4) hi = 0x8F;  // > U+10FFFF
  } else {
    return {Utf8Char::Kind::kInvalid, 1, 0};  // continuation byte, C0, C1, F5..FF
  }

  int length = 1;
  for (int k = 0; k < needed; ++k) {
    const size_t i = pos + 1 + k;
    if (i >= text.size()) return {Utf8Char::Kind::kTruncated, length, 0};
    const uint8_t b = byte(i);
    if (b < lo || b > hi) return {Utf8Char::Kind::kInvalid, length, 0};
    cp = (cp << 6) | (b & 0x3F);
    ++length;
    lo = 0x80;
    hi = 0xBF;
  }
  return {Utf8Char::Kind::kValid, length, cp};
}

size_t FindInvalidUtf8(absl::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    // ASCII fast path: most prompts are mostly ASCII.
    if (static_cast<uint8_t>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const Utf8Char c = DecodeUtf8Char(text, pos);
    if (c.kind != Utf8Char::Kind::kValid) return pos;
    pos += c.length;
  }
  return absl::string_view::npos;
}

bool IsValidUtf8(absl::string_view text) {
  return FindInvalidUtf8(text) == absl::string_view::npos;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t AppendSanitizedUtf8(absl::string_view text, bool hold_back_truncated, std::string* out) {
  size_t pos = 0;
  while (pos < text.size()) {
    const Utf8Char c = DecodeUtf8Char(text, pos);
    switch (c.kind) {
      case Utf8Char::Kind::kValid:
        out->append(text.data() + pos, c.length);
        break;
      case Utf8Char::Kind::kTruncated:
        if (hold_back_truncated) return pos;
        AppendUtf8(kUnicodeReplacementChar, out);
        break;
      case Utf8Char::Kind::kInvalid:
        AppendUtf8(kUnicodeReplacementChar, out);
        break;
    }
    pos += c.length;
  }
  return pos;
}

}  // namespace quill::engine
