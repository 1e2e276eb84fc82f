#include "engine/chat/jinja_lexer.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/base/utf8.h"
#include "engine/chat/jinja_error.h"
#include "engine/chat/py_string.h"

namespace quill::engine::chat::jinja {

absl::Status SyntaxError(int line, int column, absl::string_view message) {
  return Error(ErrorKind::kSyntax, absl::StrCat("line ", line, ":", column, ": ", message));
}

namespace {

// Jinja2 turns \r\n and \r into \n and drops one trailing newline before lexing.
std::string Normalize(absl::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Operators, longest first so that "//" wins over "/".
constexpr absl::string_view kOperators[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/",
                                            "*",  "%",  "~",  "[",  "]",  "(",  ")", "{", "}",
                                            ">",  "<",  "=",  ".",  ":",  "|",  ",", ";"};

bool IsNameStart(char c) { return absl::ascii_isalpha(c) || c == '_'; }
bool IsNameChar(char c) { return absl::ascii_isalnum(c) || c == '_'; }

class Lexer {
 public:
  Lexer(absl::string_view source, const LexerOptions& options)
      : src_(Normalize(source)), options_(options) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  absl::StatusOr<std::vector<Token>> Run() {
    while (pos_ < src_.size()) QUILL_RETURN_IF_ERROR(LexRoot());
    Emit(TokenType::kEof, src_.size());
    return std::move(tokens_);
  }

 private:
  void Position(size_t offset, int* line, int* column) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const size_t index = static_cast<size_t>(it - line_starts_.begin()) - 1;
    *line = static_cast<int>(index) + 1;
    *column = static_cast<int>(offset - line_starts_[index]) + 1;
  }

  absl::Status ErrorAt(size_t offset, absl::string_view message) const {
    int line = 0, column = 0;
    Position(offset, &line, &column);
    return SyntaxError(line, column, message);
  }

  Token& Emit(TokenType type, size_t offset, std::string value = "") {
    Token token;
    token.type = type;
    token.value = std::move(value);
    Position(offset, &token.line, &token.column);
    tokens_.push_back(std::move(token));
    return tokens_.back();
  }

  bool StartsWith(size_t at, absl::string_view s) const {
    return src_.compare(at, s.size(), s.data(), s.size()) == 0;
  }

  // Python's \s, for the whitespace that -%} and -}} swallow and that separates tokens.
  size_t SkipSpace(size_t at) const {
    while (at < src_.size()) {
      size_t len = 0;
      if (!py::IsSpace(py::DecodeAt(src_, at, &len))) break;
      at += len;
    }
    return at;
  }

  // Whitespace control on the text before a tag: "-" strips all trailing whitespace;
  // otherwise lstrip_blocks removes the spaces and tabs that start the tag's line (not for
  // {{ }}, and not when the tag says "+").
  void StripBefore(std::string* text, char sign, char kind) const {
    if (sign == '-') {
      size_t begin = 0, end = 0;
      py::StripRange(*text, nullptr, /*left=*/false, /*right=*/true, &begin, &end);
      text->resize(end);
      return;
    }
    if (sign == '+' || !options_.lstrip_blocks || kind == '{') return;
    const size_t newline = text->rfind('\n');
    const size_t line_begin = newline == std::string::npos ? 0 : newline + 1;
    if (line_begin == 0 && !line_starting_) return;
    for (size_t i = line_begin; i < text->size(); ++i) {
      if ((*text)[i] != ' ' && (*text)[i] != '\t') return;
    }
    text->resize(line_begin);
  }

  // After a tag: where its end swallows whitespace, and whether a new line starts there.
  void EndTag(size_t end) {
    pos_ = end;
    line_starting_ = end > 0 && src_[end - 1] == '\n';
  }

  // Parses "{% raw %}" (any whitespace control) at `at`; returns the offset after it or 0.
  size_t MatchRawBegin(size_t at) const {
    size_t i = SkipSpace(at);
    if (!StartsWith(i, "raw")) return 0;
    i = SkipSpace(i + 3);
    if (StartsWith(i, "-%}")) return SkipSpace(i + 3);
    if (StartsWith(i, "%}")) return i + 2;
    return 0;
  }

  absl::Status LexRoot() {
    size_t i = pos_;
    for (;; ++i) {
      i = src_.find('{', i);
      if (i == std::string::npos || i + 1 >= src_.size()) break;
      const char next = src_[i + 1];
      if (next == '{' || next == '%' || next == '#') break;
    }
    if (i == std::string::npos || i + 1 >= src_.size()) {
      Emit(TokenType::kData, pos_, src_.substr(pos_));
      EndTag(src_.size());
      return absl::OkStatus();
    }
    const char kind = src_[i + 1];
    size_t after = i + 2;
    char sign = 0;
    if (after < src_.size() && (src_[after] == '-' || src_[after] == '+')) sign = src_[after++];
    const size_t raw_end = kind == '%' ? MatchRawBegin(after) : 0;

    std::string text = src_.substr(pos_, i - pos_);
    StripBefore(&text, sign, kind);
    if (!text.empty()) Emit(TokenType::kData, pos_, std::move(text));
    line_starting_ = false;
    if (raw_end != 0) {
      EndTag(raw_end);
      return LexRaw(i);
    }
    if (kind == '#') return LexComment(i, after);
    Emit(kind == '{' ? TokenType::kVariableBegin : TokenType::kBlockBegin, i);
    pos_ = after;
    return LexTag(kind, i);
  }

  absl::Status LexComment(size_t begin, size_t after) {
    const size_t close = src_.find("#}", after);
    if (close == std::string::npos) return ErrorAt(begin, "missing end of comment tag");
    const char sign =
        close > after && (src_[close - 1] == '-' || src_[close - 1] == '+') ? src_[close - 1] : 0;
    size_t end = close + 2;
    if (sign == '-') {
      end = SkipSpace(end);
    } else if (sign != '+' && options_.trim_blocks && end < src_.size() && src_[end] == '\n') {
      ++end;
    }
    EndTag(end);
    return absl::OkStatus();
  }

  absl::Status LexRaw(size_t begin) {
    for (size_t i = src_.find("{%", pos_); i != std::string::npos; i = src_.find("{%", i + 1)) {
      size_t j = i + 2;
      char sign = 0;
      if (j < src_.size() && (src_[j] == '-' || src_[j] == '+')) sign = src_[j++];
      j = SkipSpace(j);
      if (!StartsWith(j, "endraw")) continue;
      j = SkipSpace(j + 6);
      size_t end = 0;
      if (StartsWith(j, "+%}")) {
        end = j + 3;
      } else if (StartsWith(j, "-%}")) {
        end = SkipSpace(j + 3);
      } else if (StartsWith(j, "%}")) {
        end = j + 2;
        if (options_.trim_blocks && end < src_.size() && src_[end] == '\n') ++end;
      } else {
        continue;
      }
      std::string text = src_.substr(pos_, i - pos_);
      StripBefore(&text, sign, '%');
      if (!text.empty()) Emit(TokenType::kData, pos_, std::move(text));
      EndTag(end);
      return absl::OkStatus();
    }
    return ErrorAt(begin, "missing end of raw directive");
  }

  // Tokens inside {{ }} or {% %} up to the end tag. End tags only count where brackets
  // are balanced, as in Jinja2 (so "{{ {'a': {'b': 1}} }}" works).
  absl::Status LexTag(char kind, size_t begin) {
    std::vector<char> balance;
    while (true) {
      if (pos_ >= src_.size()) {
        return ErrorAt(begin, kind == '{' ? "unexpected end of template, expected '}}'"
                                          : "unexpected end of template, expected '%}'");
      }
      if (balance.empty()) {
        if (kind == '%') {
          if (StartsWith(pos_, "+%}")) {
            Emit(TokenType::kBlockEnd, pos_);
            EndTag(pos_ + 3);
            return absl::OkStatus();
          }
          if (StartsWith(pos_, "-%}")) {
            Emit(TokenType::kBlockEnd, pos_);
            EndTag(SkipSpace(pos_ + 3));
            return absl::OkStatus();
          }
          if (StartsWith(pos_, "%}")) {
            Emit(TokenType::kBlockEnd, pos_);
            size_t end = pos_ + 2;
            if (options_.trim_blocks && end < src_.size() && src_[end] == '\n') ++end;
            EndTag(end);
            return absl::OkStatus();
          }
        } else {
          if (StartsWith(pos_, "-}}")) {
            Emit(TokenType::kVariableEnd, pos_);
            EndTag(SkipSpace(pos_ + 3));
            return absl::OkStatus();
          }
          if (StartsWith(pos_, "}}")) {
            Emit(TokenType::kVariableEnd, pos_);
            EndTag(pos_ + 2);
            return absl::OkStatus();
          }
        }
      }
      QUILL_RETURN_IF_ERROR(LexTagToken(&balance));
    }
  }

  // (\d+_)*\d+ at `at`: returns the end, or `at` if there is no digit.
  size_t ScanDigits(size_t at) const {
    size_t i = at;
    while (i < src_.size() && absl::ascii_isdigit(src_[i])) {
      ++i;
      if (i + 1 < src_.size() && src_[i] == '_' && absl::ascii_isdigit(src_[i + 1])) ++i;
    }
    return i;
  }

  // Jinja2's float literal: digits with a fraction, an exponent, or both. 0 if none.
  size_t MatchFloat(size_t at) const {
    if (at > 0 && src_[at - 1] == '.') return 0;
    const size_t int_end = ScanDigits(at);
    if (int_end == at) return 0;
    size_t frac_end = 0;
    if (int_end < src_.size() && src_[int_end] == '.') {
      const size_t e = ScanDigits(int_end + 1);
      if (e > int_end + 1) frac_end = e;
    }
    const size_t mantissa_end = frac_end ? frac_end : int_end;
    if (mantissa_end < src_.size() && (src_[mantissa_end] == 'e' || src_[mantissa_end] == 'E')) {
      size_t e = mantissa_end + 1;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
      const size_t exp_end = ScanDigits(e);
      if (exp_end > e) return exp_end;
    }
    return frac_end;
  }

  // Jinja2's integer literal (0b.., 0o.., 0x.., decimal with underscores). Sets *value.
  absl::StatusOr<size_t> MatchInteger(size_t at, int64_t* value) const {
    int base = 10;
    size_t digits_begin = at;
    if (src_[at] == '0' && at + 1 < src_.size()) {
      const char p = absl::ascii_tolower(src_[at + 1]);
      base = p == 'b' ? 2 : p == 'o' ? 8 : p == 'x' ? 16 : 10;
      if (base != 10) digits_begin = at + 2;
    }
    const auto is_digit = [&](char c) {
      if (base == 16) return absl::ascii_isxdigit(c);
      return c >= '0' && c < '0' + base;
    };
    std::string digits;
    size_t i = digits_begin;
    if (base == 10 && src_[at] == '0') {
      // 0(_?0)*
      digits = "0";
      ++i;
      while (i < src_.size()) {
        if (src_[i] == '0') {
          ++i;
        } else if (src_[i] == '_' && i + 1 < src_.size() && src_[i + 1] == '0') {
          i += 2;
        } else {
          break;
        }
      }
    } else {
      while (i < src_.size()) {
        if (is_digit(src_[i])) {
          digits.push_back(src_[i++]);
        } else if (src_[i] == '_' && i + 1 < src_.size() && is_digit(src_[i + 1]) &&
                   (base != 10 || !digits.empty())) {
          ++i;
        } else {
          break;
        }
      }
      if (digits.empty()) {
        // "0x" without digits: just the integer 0, then a name.
        *value = 0;
        return at + 1;
      }
    }
    errno = 0;
    char* end = nullptr;
    const unsigned long long v = std::strtoull(digits.c_str(), &end, base);
    if (errno == ERANGE || v > static_cast<unsigned long long>(INT64_MAX)) {
      return ErrorAt(at, "integer literal does not fit in 64 bits");
    }
    *value = static_cast<int64_t>(v);
    return i;
  }

  // Decodes a string literal body as Python's unicode-escape codec does.
  absl::StatusOr<std::string> Unescape(absl::string_view body, size_t offset) const {
    std::string out;
    out.reserve(body.size());
    for (size_t i = 0; i < body.size(); ++i) {
      if (body[i] != '\\' || i + 1 >= body.size()) {
        out.push_back(body[i]);
        continue;
      }
      const char c = body[++i];
      switch (c) {
        case '\n':
          break;  // line continuation
        case '\\':
        case '\'':
        case '"':
          out.push_back(c);
          break;
        case 'a':
          out.push_back('\a');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'v':
          out.push_back('\v');
          break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t n = c == 'x' ? 2 : c == 'u' ? 4 : 8;
          uint32_t cp = 0;
          for (size_t k = 1; k <= n; ++k) {
            if (i + k >= body.size() || !absl::ascii_isxdigit(body[i + k])) {
              return ErrorAt(offset, absl::StrCat("truncated \\", std::string(1, c),
                                                  " escape in a string literal"));
            }
            const char h = absl::ascii_tolower(body[i + k]);
            cp = cp * 16 + (absl::ascii_isdigit(h) ? h - '0' : h - 'a' + 10);
          }
          if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
            return ErrorAt(offset, "escape outside the Unicode range in a string literal");
          }
          AppendUtf8(cp, &out);
          i += n;
          break;
        }
        case 'N':
          return ErrorAt(offset, "\\N{...} escapes are not supported");
        default:
          if (c >= '0' && c <= '7') {
            uint32_t cp = c - '0';
            for (int k = 0;
                 k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k) {
              cp = cp * 8 + (body[++i] - '0');
            }
            AppendUtf8(cp, &out);
          } else {
            out.push_back('\\');  // unknown escapes stay as they are
            out.push_back(c);
          }
      }
    }
    return out;
  }

  absl::Status LexTagToken(std::vector<char>* balance) {
    const size_t at = pos_;
    const char c = src_[at];
    size_t len = 0;
    if (py::IsSpace(py::DecodeAt(src_, at, &len))) {
      pos_ = SkipSpace(at);
      return absl::OkStatus();
    }
    if (absl::ascii_isdigit(c)) {
      if (const size_t end = MatchFloat(at); end != 0) {
        std::string text;
        for (size_t i = at; i < end; ++i) {
          if (src_[i] != '_') text.push_back(src_[i]);
        }
        Token& token = Emit(TokenType::kFloat, at, text);
        token.float_value = std::strtod(text.c_str(), nullptr);
        pos_ = end;
        return absl::OkStatus();
      }
      int64_t value = 0;
      QUILL_ASSIGN_OR_RETURN(size_t end, MatchInteger(at, &value));
      Token& token = Emit(TokenType::kInteger, at, src_.substr(at, end - at));
      token.int_value = value;
      pos_ = end;
      return absl::OkStatus();
    }
    if (IsNameStart(c)) {
      size_t end = at + 1;
      while (end < src_.size() && IsNameChar(src_[end])) ++end;
      Emit(TokenType::kName, at, src_.substr(at, end - at));
      pos_ = end;
      return absl::OkStatus();
    }
    if (c == '\'' || c == '"') {
      size_t i = at + 1;
      while (i < src_.size() && src_[i] != c) i += src_[i] == '\\' ? 2 : 1;
      if (i >= src_.size()) return ErrorAt(at, "unterminated string literal");
      QUILL_ASSIGN_OR_RETURN(std::string value,
                             Unescape(absl::string_view(src_).substr(at + 1, i - at - 1), at));
      Emit(TokenType::kString, at, std::move(value));
      pos_ = i + 1;
      return absl::OkStatus();
    }
    for (absl::string_view op : kOperators) {
      if (!StartsWith(at, op)) continue;
      if (op == "(" || op == "[" || op == "{") {
        balance->push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
      } else if (op == ")" || op == "]" || op == "}") {
        if (balance->empty()) return ErrorAt(at, absl::StrCat("unexpected '", op, "'"));
        const char expected = balance->back();
        balance->pop_back();
        if (expected != op[0]) {
          return ErrorAt(
              at, absl::StrCat("unexpected '", op, "', expected '", std::string(1, expected), "'"));
        }
      }
      Emit(TokenType::kOperator, at, std::string(op));
      pos_ = at + op.size();
      return absl::OkStatus();
    }
    return ErrorAt(at, absl::StrCat("unexpected char ", py::Repr(src_.substr(at, len))));
  }

  const std::string src_;
  const LexerOptions options_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  bool line_starting_ = true;
};

}  // namespace

absl::StatusOr<std::vector<Token>> Lex(absl::string_view source, const LexerOptions& options) {
  return Lexer(source, options).Run();
}

}  // namespace quill::engine::chat::jinja
