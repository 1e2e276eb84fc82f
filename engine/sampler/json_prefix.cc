#include "engine/sampler/json_prefix.h"

namespace quill::engine {
namespace {

constexpr absl::string_view kLiterals[] = {"true", "false", "null"};

bool IsWhitespace(uint8_t b) { return b == ' ' || b == '\t' || b == '\n' || b == '\r'; }
bool IsDigit(uint8_t b) { return b >= '0' && b <= '9'; }
bool IsHex(uint8_t b) { return IsDigit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F'); }

// Continuation bytes a UTF-8 lead byte announces; -1 for a byte that cannot start a
// character (a continuation byte, an overlong lead, or beyond U+10FFFF).
int Utf8Continuations(uint8_t b) {
  if (b < 0x80) return 0;
  if (b >= 0xC2 && b <= 0xDF) return 1;
  if (b >= 0xE0 && b <= 0xEF) return 2;
  if (b >= 0xF0 && b <= 0xF4) return 3;
  return -1;
}

}  // namespace

JsonPrefix::Context JsonPrefix::context() const {
  switch (mode_) {
    case Mode::kStart:
      return Context::kStart;
    case Mode::kValue:
    case Mode::kFirstValueOrClose:
      return Context::kValue;
    case Mode::kFirstKeyOrClose:
    case Mode::kKey:
      return Context::kKey;
    case Mode::kColon:
      return Context::kColon;
    case Mode::kAfterValue:
      return Context::kAfterValue;
    case Mode::kString:
    case Mode::kEscape:
    case Mode::kHex:
    case Mode::kLowBackslash:
    case Mode::kLowU:
      return string_is_key_ ? Context::kKeyString : Context::kValueString;
    case Mode::kMinus:
    case Mode::kZero:
    case Mode::kInt:
    case Mode::kFracStart:
    case Mode::kFrac:
    case Mode::kExpStart:
    case Mode::kExpSign:
    case Mode::kExp:
      return Context::kNumber;
    case Mode::kLiteral:
      return Context::kLiteral;
    case Mode::kDone:
      break;
  }
  return Context::kDone;
}

bool JsonPrefix::Accept(absl::string_view bytes) {
  for (char c : bytes) {
    if (!Accept(static_cast<uint8_t>(c))) return false;
  }
  return true;
}

bool JsonPrefix::Accept(uint8_t b) {
  switch (mode_) {
    case Mode::kString:
      if (utf8_left_ > 0) {
        if (b < utf8_low_ || b > utf8_high_) return false;
        --utf8_left_;
        utf8_low_ = 0x80;
        utf8_high_ = 0xBF;
        return true;
      }
      if (b == '"') {
        if (string_is_key_) {
          mode_ = Mode::kColon;
          whitespace_run_ = 0;
        } else {
          EndValue();
        }
        return true;
      }
      if (b == '\\') {
        mode_ = Mode::kEscape;
        return true;
      }
      if (b < 0x20) return false;  // control characters must be escaped
      {
        const int continuations = Utf8Continuations(b);
        if (continuations < 0) return false;
        utf8_left_ = static_cast<uint8_t>(continuations);
        // The first continuation byte's range excludes overlong forms (E0, F0), UTF-16
        // surrogates (ED) and code points past U+10FFFF (F4).
        utf8_low_ = b == 0xE0 ? 0xA0 : b == 0xF0 ? 0x90 : 0x80;
        utf8_high_ = b == 0xED ? 0x9F : b == 0xF4 ? 0x8F : 0xBF;
      }
      return true;
    case Mode::kEscape:
      if (b == 'u') {
        mode_ = Mode::kHex;
        hex_left_ = 4;
        expect_low_ = false;
        return true;
      }
      if (b != '"' && b != '\\' && b != '/' && b != 'b' && b != 'f' && b != 'n' && b != 'r' &&
          b != 't') {
        return false;
      }
      mode_ = Mode::kString;
      return true;
    case Mode::kHex:
      return AcceptHexDigit(b);
    case Mode::kLowBackslash:
      if (b != '\\') return false;
      mode_ = Mode::kLowU;
      return true;
    case Mode::kLowU:
      if (b != 'u') return false;
      mode_ = Mode::kHex;
      hex_left_ = 4;
      expect_low_ = true;
      return true;
    case Mode::kLiteral: {
      const absl::string_view literal = kLiterals[literal_];
      if (b != static_cast<uint8_t>(literal[literal_pos_])) return false;
      if (++literal_pos_ == literal.size()) EndValue();
      return true;
    }
    case Mode::kMinus:
      if (!IsDigit(b)) return false;
      mode_ = b == '0' ? Mode::kZero : Mode::kInt;
      digits_ = 1;
      return true;
    case Mode::kZero:
    case Mode::kInt:
      if (IsDigit(b) && mode_ == Mode::kInt) return digits_++ < kMaxIntegerDigits;
      if (b == '.') {
        mode_ = Mode::kFracStart;
        return true;
      }
      if (b == 'e' || b == 'E') {
        mode_ = Mode::kExpStart;
        return true;
      }
      EndValue();  // the number ended before this byte
      return AcceptStructural(b);
    case Mode::kFracStart:
      if (!IsDigit(b)) return false;
      mode_ = Mode::kFrac;
      digits_ = 1;
      return true;
    case Mode::kFrac:
      if (IsDigit(b)) return digits_++ < kMaxFractionDigits;
      if (b == 'e' || b == 'E') {
        mode_ = Mode::kExpStart;
        return true;
      }
      EndValue();
      return AcceptStructural(b);
    case Mode::kExpStart:
      if (b == '+' || b == '-') {
        mode_ = Mode::kExpSign;
        return true;
      }
      if (!IsDigit(b)) return false;
      mode_ = Mode::kExp;
      digits_ = 1;
      return true;
    case Mode::kExpSign:
      if (!IsDigit(b)) return false;
      mode_ = Mode::kExp;
      digits_ = 1;
      return true;
    case Mode::kExp:
      if (IsDigit(b)) return digits_++ < kMaxExponentDigits;
      EndValue();
      return AcceptStructural(b);
    default:
      return AcceptStructural(b);
  }
}

// Surrogates are checked digit by digit, so that no accepted prefix is a dead end: a high
// surrogate (D800-DBFF) must be followed at once by a low one (DC00-DFFF), which may not
// stand alone.
bool JsonPrefix::AcceptHexDigit(uint8_t b) {
  if (!IsHex(b)) return false;
  const uint8_t digit = static_cast<uint8_t>(b >= 'A' && b <= 'F' ? b - 'A' + 'a' : b);
  const int position = 4 - hex_left_;  // 0-3
  if (position == 0) {
    if (expect_low_ && digit != 'd') return false;
    hex_first_ = digit;
  } else if (position == 1 && hex_first_ == 'd') {
    const bool low = digit >= 'c';  // DC-DF
    if (low != expect_low_) {
      // A lone low surrogate; or a low one needed and D0-DB given.
      return false;
    }
    if (!expect_low_ && digit >= '8') pending_high_ = true;  // D8-DB
  }
  if (--hex_left_ > 0) return true;
  if (pending_high_) {
    pending_high_ = false;
    mode_ = Mode::kLowBackslash;
  } else {
    mode_ = Mode::kString;
  }
  return true;
}

// Bytes between tokens: whitespace, brackets, ':' and ',', and value starts.
bool JsonPrefix::AcceptStructural(uint8_t b) {
  if (mode_ == Mode::kDone) return false;
  if (IsWhitespace(b)) {
    if (whitespace_run_ == 0) {
      if (b != ' ' && b != '\n') return false;
      whitespace_run_ = b == ' ' ? kAfterSpace : 1;
      return true;
    }
    if (whitespace_run_ == kAfterSpace || whitespace_run_ > kMaxIndent) return false;
    if (b != ' ' && b != '\t') return false;
    ++whitespace_run_;
    return true;
  }
  whitespace_run_ = 0;
  switch (mode_) {
    case Mode::kStart:
      return b == '{' && Open(b);
    case Mode::kValue:
      return StartValue(b);
    case Mode::kFirstKeyOrClose:
      if (b == '}') return Close(b);
      [[fallthrough]];
    case Mode::kKey:
      if (b != '"') return false;
      mode_ = Mode::kString;
      string_is_key_ = true;
      return true;
    case Mode::kColon:
      if (b != ':') return false;
      mode_ = Mode::kValue;
      return true;
    case Mode::kFirstValueOrClose:
      if (b == ']') return Close(b);
      return StartValue(b);
    case Mode::kAfterValue:
      if (b == ',') {
        mode_ = InObject() ? Mode::kKey : Mode::kValue;
        return true;
      }
      return (b == '}' || b == ']') && Close(b);
    default:
      return false;
  }
}

bool JsonPrefix::StartValue(uint8_t b) {
  if (b == '{' || b == '[') return Open(b);
  if (b == '"') {
    mode_ = Mode::kString;
    string_is_key_ = false;
    return true;
  }
  if (b == '-') {
    mode_ = Mode::kMinus;
    return true;
  }
  if (IsDigit(b)) {
    mode_ = b == '0' ? Mode::kZero : Mode::kInt;
    digits_ = 1;
    return true;
  }
  for (uint8_t i = 0; i < 3; ++i) {
    if (b == static_cast<uint8_t>(kLiterals[i][0])) {
      mode_ = Mode::kLiteral;
      literal_ = i;
      literal_pos_ = 1;
      return true;
    }
  }
  return false;
}

bool JsonPrefix::Open(uint8_t bracket) {
  if (depth_ >= kMaxDepth) return false;
  stack_[depth_++] = static_cast<char>(bracket);
  mode_ = bracket == '{' ? Mode::kFirstKeyOrClose : Mode::kFirstValueOrClose;
  return true;
}

bool JsonPrefix::Close(uint8_t bracket) {
  const char open = bracket == '}' ? '{' : '[';
  if (depth_ == 0 || stack_[depth_ - 1] != open) return false;
  --depth_;
  EndValue();
  return true;
}

void JsonPrefix::EndValue() {
  whitespace_run_ = 0;
  mode_ = depth_ == 0 ? Mode::kDone : Mode::kAfterValue;
}

}  // namespace quill::engine
