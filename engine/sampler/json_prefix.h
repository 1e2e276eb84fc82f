#pragma once

// A byte-at-a-time recognizer of one JSON object (RFC 8259): it accepts a byte only when
// the bytes so far can still be continued into a valid object, and says when the object
// is complete. JSON mode (OpenAI's response_format json_object) masks every token whose
// bytes it would refuse, so the output is always a prefix of a JSON object.
//
// Bounded so that a model cannot wander without end where JSON allows it (what it writes
// inside strings is its answer): at most kMaxDepth nested containers; between two tokens
// at most one space, or a newline and up to kMaxIndent spaces or tabs (room for compact
// objects and for pretty-printed ones, a line per member, indented); numbers of at most
// kMaxIntegerDigits, kMaxFractionDigits and kMaxExponentDigits digits. Small models wander into
// both: kjv-1m spent ~150 of a forced tool call's ~170 tokens on blanks when any 32 whitespace
// bytes were allowed, the bound before, and with blanks bounded it wrote 200-digit numbers. The
// state is a small value type: copying it to try a token costs a memcpy.

#include <cstdint>

#include "absl/strings/string_view.h"

namespace quill::engine {

class JsonPrefix {
 public:
  static constexpr int kMaxDepth = 32;
  static constexpr int kMaxIndent = 20;
  static constexpr int kMaxIntegerDigits = 18;   // any such integer fits an int64
  static constexpr int kMaxFractionDigits = 17;  // a double's precision
  static constexpr int kMaxExponentDigits = 3;

  // Feeds one byte; false (and the state unspecified) when no valid object continues the
  // bytes with it. Callers that may be refused try a copy.
  bool Accept(uint8_t byte);
  // Feeds every byte; false as soon as one is refused.
  bool Accept(absl::string_view bytes);
  // The object is closed: nothing may follow it.
  bool complete() const { return mode_ == Mode::kDone; }
  // Inside a string, between two characters (not in an escape or a UTF-8 sequence): any
  // whole characters other than '"', '\\' and control characters may follow.
  bool between_string_characters() const { return mode_ == Mode::kString && utf8_left_ == 0; }
  // Where the next byte falls: what a layer that checks more than syntax (JSON Schema,
  // SchemaPrefix) needs to know to follow the same bytes.
  enum class Context : uint8_t {
    kStart,        // before the top-level '{'
    kValue,        // a value starts (or, right after '[', ']' closes the array)
    kKey,          // a key's '"' (or, right after '{', '}' closes the object)
    kColon,        // the ':' after a key
    kAfterValue,   // ',' or the container's close
    kKeyString,    // inside a key (its escapes included)
    kValueString,  // inside a string value (its escapes included)
    kNumber,       // inside a number: a byte that cannot continue it ends it
    kLiteral,      // inside true / false / null
    kDone,
  };
  Context context() const;
  // Inside a string where a '"' closes it (not in an escape).
  bool quote_closes_string() const { return mode_ == Mode::kString; }

 private:
  enum class Mode : uint8_t {
    kStart,              // before the top-level '{'
    kValue,              // a value must start (after ':' or ',' in an array)
    kFirstKeyOrClose,    // after '{'
    kKey,                // after ',' in an object
    kColon,              // after a key
    kFirstValueOrClose,  // after '['
    kAfterValue,         // ',' or the container's close
    kString,
    kEscape,        // after '\' in a string
    kHex,           // hex digits of \uXXXX left: hex_left_
    kLowBackslash,  // a high surrogate's \uXXXX ended: its low half's '\' must follow
    kLowU,          // and its 'u'
    kMinus,         // after a number's '-'
    kZero,          // a number's integer part is "0"
    kInt,           // integer digits
    kFracStart,     // after '.'
    kFrac,          // fraction digits
    kExpStart,      // after 'e' / 'E'
    kExpSign,       // after the exponent's sign
    kExp,           // exponent digits
    kLiteral,       // inside true / false / null
    kDone,
  };

  bool AcceptHexDigit(uint8_t byte);
  bool AcceptStructural(uint8_t byte);
  bool StartValue(uint8_t byte);
  bool Open(uint8_t bracket);
  bool Close(uint8_t bracket);
  // The value just ended: what follows it depends on the container around it.
  void EndValue();
  bool InObject() const { return depth_ > 0 && stack_[depth_ - 1] == '{'; }

  Mode mode_ = Mode::kStart;
  uint8_t depth_ = 0;
  // The whitespace since the last token: 0 none, kAfterSpace one space, else a newline
  // and whitespace_run_ - 1 spaces or tabs.
  static constexpr uint8_t kAfterSpace = 0xFF;
  uint8_t whitespace_run_ = 0;
  uint8_t digits_ = 0;     // in a number: digits of its current part (integer, fraction, exponent)
  uint8_t utf8_left_ = 0;  // continuation bytes the string's current character still needs
  uint8_t utf8_low_ = 0x80;  // the range of the next continuation byte
  uint8_t utf8_high_ = 0xBF;
  uint8_t hex_left_ = 0;
  uint8_t hex_first_ = 0;      // the escape's first hex digit, lowercased
  bool expect_low_ = false;    // this \u escape must be a low surrogate (DC00-DFFF)
  bool pending_high_ = false;  // this \u escape is a high surrogate (D800-DBFF)
  uint8_t literal_ = 0;        // kLiteral: which of kLiterals
  uint8_t literal_pos_ = 0;    // bytes of it matched
  bool string_is_key_ = false;
  char stack_[kMaxDepth] = {};  // '{' or '[' per open container
};

}  // namespace quill::engine
