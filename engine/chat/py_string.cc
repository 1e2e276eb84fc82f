#include "engine/chat/py_string.h"

#include "absl/strings/str_format.h"
#include "engine/base/utf8.h"

namespace quill::engine::chat::py {

uint32_t DecodeAt(absl::string_view s, size_t pos, size_t* length) {
  const Utf8Char c = DecodeUtf8Char(s, pos);
  if (c.kind == Utf8Char::Kind::kValid) {
    *length = c.length;
    return c.code_point;
  }
  *length = 1;
  return static_cast<uint8_t>(s[pos]);
}

bool IsAscii(absl::string_view s) {
  for (char c : s) {
    if (static_cast<uint8_t>(c) >= 0x80) return false;
  }
  return true;
}

size_t CodePointCount(absl::string_view s) {
  size_t count = 0;
  for (size_t pos = 0, len = 0; pos < s.size(); pos += len) {
    if (static_cast<uint8_t>(s[pos]) < 0x80) {
      len = 1;
    } else {
      DecodeAt(s, pos, &len);
    }
    ++count;
  }
  return count;
}

std::vector<size_t> CodePointOffsets(absl::string_view s) {
  std::vector<size_t> offsets;
  offsets.reserve(s.size() + 1);
  for (size_t pos = 0, len = 0; pos < s.size(); pos += len) {
    offsets.push_back(pos);
    DecodeAt(s, pos, &len);
  }
  offsets.push_back(s.size());
  return offsets;
}

bool IsSpace(uint32_t cp) {
  if (cp < 0x80) return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20);
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

namespace {

bool InChars(uint32_t cp, const std::string& chars) {
  for (size_t pos = 0, len = 0; pos < chars.size(); pos += len) {
    if (DecodeAt(chars, pos, &len) == cp) return true;
  }
  return false;
}

// Start of the code point that ends at byte `end` (end > 0).
size_t PreviousStart(absl::string_view s, size_t end) {
  size_t start = end - 1;
  // At most three continuation bytes back; a lone continuation byte is its own point.
  for (int i = 0; i < 3 && start > 0 && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80; ++i) {
    --start;
  }
  size_t len = 0;
  DecodeAt(s, start, &len);
  return start + len == end ? start : end - 1;
}

}  // namespace

void StripRange(absl::string_view s, const std::string* chars, bool left, bool right, size_t* begin,
                size_t* end) {
  const auto strip = [&](uint32_t cp) { return chars ? InChars(cp, *chars) : IsSpace(cp); };
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e) {
      size_t len = 0;
      if (!strip(DecodeAt(s, b, &len))) break;
      b += len;
    }
  }
  if (right) {
    while (e > b) {
      const size_t start = PreviousStart(s, e);
      size_t len = 0;
      if (!strip(DecodeAt(s, start, &len))) break;
      e = start;
    }
  }
  *begin = b;
  *end = e;
}

uint32_t ToUpper(uint32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') ? cp - 32 : cp;
  if (cp == 0xB5) return 0x39C;
  if ((cp >= 0xE0 && cp <= 0xFE && cp != 0xF7)) return cp - 32;
  if (cp == 0xFF) return 0x178;
  if (cp >= 0x100 && cp <= 0x17F) {
    if (cp == 0x131) return 'I';
    if (cp == 0x17F) return 'S';
    if ((cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E)) {
      return (cp % 2 == 0) ? cp - 1 : cp;
    }
    if (cp == 0x130 || cp == 0x138 || cp == 0x149 || cp == 0x178) return cp;
    return (cp % 2 == 1) ? cp - 1 : cp;
  }
  if (cp >= 0x3B1 && cp <= 0x3C9) return cp == 0x3C2 ? 0x3A3 : cp - 32;
  if (cp == 0x3AC) return 0x386;
  if (cp >= 0x3AD && cp <= 0x3AF) return cp - 37;
  if (cp == 0x3CC) return 0x38C;
  if (cp == 0x3CD || cp == 0x3CE) return cp - 63;
  if (cp >= 0x430 && cp <= 0x44F) return cp - 32;
  if (cp >= 0x450 && cp <= 0x45F) return cp - 80;
  if ((cp >= 0x460 && cp <= 0x481) || (cp >= 0x48A && cp <= 0x4BF) ||
      (cp >= 0x4D0 && cp <= 0x52F)) {
    return (cp % 2 == 1) ? cp - 1 : cp;
  }
  if (cp >= 0x4C1 && cp <= 0x4CE) return (cp % 2 == 0) ? cp - 1 : cp;
  if (cp == 0x4CF) return 0x4C0;
  return cp;
}

uint32_t ToLower(uint32_t cp) {
  if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
  if ((cp >= 0xC0 && cp <= 0xDE && cp != 0xD7)) return cp + 32;
  if (cp == 0x178) return 0xFF;
  if (cp >= 0x100 && cp <= 0x17F) {
    if (cp == 0x130) return 'i';
    if ((cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E)) {
      return (cp % 2 == 1) ? cp + 1 : cp;
    }
    if (cp == 0x131 || cp == 0x138 || cp == 0x149 || cp == 0x17F) return cp;
    return (cp % 2 == 0) ? cp + 1 : cp;
  }
  if (cp >= 0x391 && cp <= 0x3A9 && cp != 0x3A2) return cp + 32;
  if (cp == 0x386) return 0x3AC;
  if (cp >= 0x388 && cp <= 0x38A) return cp + 37;
  if (cp == 0x38C) return 0x3CC;
  if (cp == 0x38E || cp == 0x38F) return cp + 63;
  if (cp >= 0x410 && cp <= 0x42F) return cp + 32;
  if (cp >= 0x400 && cp <= 0x40F) return cp + 80;
  if ((cp >= 0x460 && cp <= 0x481) || (cp >= 0x48A && cp <= 0x4BF) ||
      (cp >= 0x4D0 && cp <= 0x52F)) {
    return (cp % 2 == 0) ? cp + 1 : cp;
  }
  if (cp >= 0x4C1 && cp <= 0x4CE) return (cp % 2 == 1) ? cp + 1 : cp;
  if (cp == 0x4C0) return 0x4CF;
  return cp;
}

bool IsCased(uint32_t cp) {
  return ToUpper(cp) != cp || ToLower(cp) != cp || cp == 0xDF || cp == 0x138 || cp == 0x149;
}

bool IsAlpha(uint32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
  if (cp == 0xAA || cp == 0xB5 || cp == 0xBA) return true;
  if (cp >= 0xC0 && cp <= 0x24F) return cp != 0xD7 && cp != 0xF7;
  if (IsCased(cp)) return true;
  return (cp >= 0x5D0 && cp <= 0x5EA) || (cp >= 0x620 && cp <= 0x64A) ||
         (cp >= 0x904 && cp <= 0x939) || (cp >= 0x3041 && cp <= 0x30FF) ||
         (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x4E00 && cp <= 0x9FFF) ||
         (cp >= 0xAC00 && cp <= 0xD7A3);
}

bool IsDigit(uint32_t cp) {
  return (cp >= '0' && cp <= '9') || (cp >= 0x660 && cp <= 0x669) || (cp >= 0xFF10 && cp <= 0xFF19);
}

namespace {

template <typename F>
std::string MapCodePoints(absl::string_view s, F f) {
  std::string out;
  out.reserve(s.size());
  for (size_t pos = 0, len = 0; pos < s.size(); pos += len) {
    const uint32_t cp = DecodeAt(s, pos, &len);
    if (len == 1 && cp >= 0x80) {
      out.push_back(s[pos]);  // an invalid byte stays as it was
    } else {
      AppendUtf8(f(pos, cp), &out);
    }
  }
  return out;
}

}  // namespace

std::string Upper(absl::string_view s) {
  return MapCodePoints(s, [](size_t, uint32_t cp) { return ToUpper(cp); });
}

std::string Lower(absl::string_view s) {
  return MapCodePoints(s, [](size_t, uint32_t cp) { return ToLower(cp); });
}

std::string Capitalize(absl::string_view s) {
  return MapCodePoints(
      s, [](size_t pos, uint32_t cp) { return pos == 0 ? ToUpper(cp) : ToLower(cp); });
}

std::string Title(absl::string_view s) {
  bool previous_cased = false;
  return MapCodePoints(s, [&](size_t, uint32_t cp) {
    const uint32_t mapped = previous_cased ? ToLower(cp) : ToUpper(cp);
    previous_cased = IsCased(cp);
    return mapped;
  });
}

bool IsLower(absl::string_view s) {
  bool any_cased = false;
  for (size_t pos = 0, len = 0; pos < s.size(); pos += len) {
    const uint32_t cp = DecodeAt(s, pos, &len);
    if (ToLower(cp) != cp) return false;
    if (IsCased(cp)) any_cased = true;
  }
  return any_cased;
}

bool IsUpper(absl::string_view s) {
  bool any_cased = false;
  for (size_t pos = 0, len = 0; pos < s.size(); pos += len) {
    const uint32_t cp = DecodeAt(s, pos, &len);
    if (ToUpper(cp) != cp || cp == 0xDF) return false;
    if (IsCased(cp)) any_cased = true;
  }
  return any_cased;
}

namespace {

// str.isprintable() for non-ASCII code points, as far as Quill needs it: separators,
// format and private-use characters are escaped by repr().
bool IsPrintableNonAscii(uint32_t cp) {
  if (cp <= 0xA0 || cp == 0xAD) return false;
  if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) ||
      (cp >= 0x205F && cp <= 0x206F) || cp == 0x3000 || cp == 0xFEFF ||
      (cp >= 0xFFF9 && cp <= 0xFFFB) || cp == 0xFFFE || cp == 0xFFFF) {
    return false;
  }
  if (cp >= 0xD800 && cp <= 0xF8FF) return false;    // surrogates and private use
  if (cp >= 0xE0000 && cp <= 0xE007F) return false;  // tag characters
  return cp < 0xF0000;                               // planes 15-16 are private use
}

}  // namespace

std::string Repr(absl::string_view s) {
  const bool has_single = s.find('\'') != absl::string_view::npos;
  const bool has_double = s.find('"') != absl::string_view::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back(quote);
  for (size_t pos = 0, len = 0; pos < s.size(); pos += len) {
    const uint32_t cp = DecodeAt(s, pos, &len);
    if (cp == static_cast<uint32_t>(quote) || cp == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp < 0x20 || cp == 0x7F) {
      absl::StrAppendFormat(&out, "\\x%02x", cp);
    } else if (cp < 0x7F) {
      out.push_back(static_cast<char>(cp));
    } else if (len == 1 || !IsPrintableNonAscii(cp)) {
      if (cp <= 0xFF) {
        absl::StrAppendFormat(&out, "\\x%02x", cp);
      } else if (cp <= 0xFFFF) {
        absl::StrAppendFormat(&out, "\\u%04x", cp);
      } else {
        absl::StrAppendFormat(&out, "\\U%08x", cp);
      }
    } else {
      out.append(s.data() + pos, len);
    }
  }
  out.push_back(quote);
  return out;
}

std::vector<std::pair<size_t, size_t>> SplitLines(absl::string_view s) {
  std::vector<std::pair<size_t, size_t>> lines;
  size_t start = 0;
  for (size_t pos = 0, len = 0; pos < s.size(); pos += len) {
    const uint32_t cp = DecodeAt(s, pos, &len);
    const bool is_break = cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C ||
                          (cp >= 0x1C && cp <= 0x1E) || (cp == 0x85 && len == 2) || cp == 0x2028 ||
                          cp == 0x2029;
    if (!is_break) continue;
    lines.emplace_back(start, pos);
    if (cp == '\r' && pos + 1 < s.size() && s[pos + 1] == '\n') len = 2;
    start = pos + len;
  }
  if (start < s.size()) lines.emplace_back(start, s.size());
  return lines;
}

}  // namespace quill::engine::chat::py
