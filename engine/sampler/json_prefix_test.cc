#include "engine/sampler/json_prefix.h"

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace quill::engine {
namespace {

// Feeds `text` byte by byte; returns how many bytes were accepted.
size_t AcceptedBytes(absl::string_view text, JsonPrefix* json) {
  for (size_t i = 0; i < text.size(); ++i) {
    if (!json->Accept(static_cast<uint8_t>(text[i]))) return i;
  }
  return text.size();
}

const std::vector<std::string>& ValidObjects() {
  static const auto* objects = new std::vector<std::string>{
      "{}",
      "\n\t{ }",
      R"({"a":1})",
      R"({"a": [1, -2.5, 3e10, 0, -0.0e-3, 1E+2], "b": {"c": null, "d": true, "e": false}})",
      R"({"s": "quote \" backslash \\ slash \/ \b\f\n\r\t \u00e9\uD83D\uDE00"})",
      "{\"utf8\": \"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"}",
      R"({"nested": [[[]], [{}], {"x": [{"y": []}]}]})",
      "{\n  \"pretty\": [\n    1,\n    2\n  ]\n}",
      R"({"": "", "k": ""})",
      R"({"big": -123456789012345678.12345678901234567E-200, "e": 0.5})",  // at bounds
  };
  return *objects;
}

TEST(JsonPrefixTest, ValidObjectsAreAcceptedAndCompleteOnlyAtTheirEnd) {
  for (const std::string& text : ValidObjects()) {
    ASSERT_TRUE(nlohmann::json::accept(text)) << text;  // the reference agrees they are JSON
    JsonPrefix json;
    for (size_t i = 0; i < text.size(); ++i) {
      EXPECT_FALSE(json.complete()) << text << " at " << i;
      ASSERT_TRUE(json.Accept(static_cast<uint8_t>(text[i]))) << text << " at " << i;
    }
    EXPECT_TRUE(json.complete()) << text;
    // Nothing follows the object, not even whitespace (only the end of generation).
    JsonPrefix after = json;
    EXPECT_FALSE(after.Accept(' ')) << text;
  }
}

TEST(JsonPrefixTest, RefusesTheFirstByteThatNoObjectCanContinue) {
  struct Case {
    std::string text;
    size_t accepted;  // bytes before the refused one
  };
  const Case cases[] = {
      {"[1]", 0},           // the top level must be an object
      {"\"x\"", 0},         //
      {"{1: 2}", 1},        // keys are strings
      {R"({"a" 1})", 5},    // ':' missing
      {R"({"a":})", 5},     // a value missing
      {R"({"a":01})", 6},   // no leading zeros
      {R"({"a":-})", 6},    // a digit must follow '-'
      {R"({"a":1.})", 7},   // and '.'
      {R"({"a":1e})", 7},   // and 'e'
      {R"({"a":tru})", 8},  // literals are whole words
      {R"({"a":nul })", 8},
      {R"({"a":[1,]})", 8},  // no trailing commas
      {R"({"a":1,})", 7},
      {R"({"a":[}})", 6},    // brackets must match
      {R"({"a":"\x"})", 7},  // unknown escape
      {R"({"a":"\u12G4"})", 10},
      {"{\"a\":\"\n\"}", 6},     // raw control characters in a string
      {"{\"a\":\"\xc3(\"}", 7},  // a UTF-8 character cut short
      {"{\"a\":\"\x80\"}", 6},   // a stray continuation byte
      // Overlong forms, UTF-16 surrogates and code points past U+10FFFF, refused at the
      // first continuation byte that makes them so (RFC 3629).
      {"{\"a\":\"\xe0\x9f\xbf\"}", 7},
      {"{\"a\":\"\xed\xa0\x80\"}", 7},
      {"{\"a\":\"\xf0\x8f\xbf\xbf\"}", 7},
      {"{\"a\":\"\xf4\x90\x80\x80\"}", 7},
      {"{\"a\":\"\xe2\x82\x01\"}", 8},
      {R"({"a":1}})", 7},          // nothing after the object
      {R"({"a":"\uDC00"})", 9},    // a lone low surrogate
      {R"({"a":"\uD800x"})", 12},  // a high one without its low half
      {R"({"a":"\uD800\u0041"})", 14},
  };
  for (const Case& c : cases) {
    JsonPrefix json;
    EXPECT_EQ(AcceptedBytes(c.text, &json), c.accepted) << c.text;
  }
}

TEST(JsonPrefixTest, DepthAndWhitespaceRunsAreBounded) {
  JsonPrefix deep;
  std::string text = "{\"a\":";
  for (int i = 1; i < JsonPrefix::kMaxDepth; ++i) text += "[";
  EXPECT_EQ(AcceptedBytes(text, &deep), text.size());
  EXPECT_FALSE(deep.Accept('['));  // container kMaxDepth + 1

  // Between tokens: nothing, one space, or a newline and up to kMaxIndent spaces or tabs.
  const std::string indent = "\n" + std::string(JsonPrefix::kMaxIndent - 1, ' ') + "\t";
  for (const std::string& run : {std::string(), std::string(" "), std::string("\n"), indent}) {
    JsonPrefix fits;
    const std::string text = "{" + run + "\"k\"" + run + ":" + run + "1" + run + "}";
    EXPECT_EQ(AcceptedBytes(text, &fits), text.size()) << text;
    EXPECT_TRUE(fits.complete()) << text;
    JsonPrefix before_top;  // before the object too
    EXPECT_EQ(AcceptedBytes(run + "{}", &before_top), run.size() + 2) << text;
  }
  const struct {
    std::string run;
    size_t accepted;  // of the run, before the refused byte
  } refused[] = {{"  ", 1},
                 {" \n", 1},
                 {"\n\n", 1},
                 {"\t", 0},
                 {"\r\n", 0},
                 {"\n\r", 1},
                 {indent + " ", indent.size()}};
  for (const auto& r : refused) {
    JsonPrefix json;
    EXPECT_EQ(AcceptedBytes("{\"k\":" + r.run + "1}", &json), 5 + r.accepted) << r.run.size();
  }
}

TEST(JsonPrefixTest, NumbersAreBoundedPartByPart) {
  const std::string integer(JsonPrefix::kMaxIntegerDigits, '7');
  const std::string fraction(JsonPrefix::kMaxFractionDigits, '3');
  const std::string exponent(JsonPrefix::kMaxExponentDigits, '1');
  for (const std::string& number :
       {integer, "-" + integer, "0." + fraction, integer + "." + fraction + "e-" + exponent,
        "1E" + exponent, "1e+" + exponent}) {
    JsonPrefix json;
    const std::string text = "{\"n\":" + number + "}";
    EXPECT_EQ(AcceptedBytes(text, &json), text.size()) << number;
    EXPECT_TRUE(json.complete()) << number;
  }
  for (const std::string& number : {integer + "7", "-" + integer + "7", "0." + fraction + "3",
                                    "1e" + exponent + "1", "1.5E-" + exponent + "1"}) {
    JsonPrefix json;
    const std::string text = "{\"n\":" + number;
    EXPECT_EQ(AcceptedBytes(text, &json), text.size() - 1) << number;  // the last digit
  }
}

// The maximal runs of bytes in `chars` outside the strings of `text` (a JSON text).
std::vector<std::string> RunsOutsideStrings(const std::string& text, const std::string& chars) {
  std::vector<std::string> runs;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    if (in_string) {
      if (text[i] == '\\') {
        ++i;  // the escaped byte
      } else if (text[i] == '"') {
        in_string = false;
      }
      continue;
    }
    if (text[i] == '"') in_string = true;
    const size_t end = std::min(text.find_first_not_of(chars, i), text.size());
    if (end == i) continue;
    runs.push_back(text.substr(i, end - i));
    i = end - 1;
  }
  return runs;
}

// Whether every number in `text` (a JSON text) has parts of the lengths JsonPrefix allows.
bool NumbersFit(const std::string& text) {
  for (const std::string& number : RunsOutsideStrings(text, "0123456789.eE+-")) {
    if (number[0] != '-' && (number[0] < '0' || number[0] > '9')) continue;  // in a literal
    const size_t exp = std::min(number.find_first_of("eE"), number.size());
    const size_t sign = number[0] == '-' ? 1 : 0;
    const size_t dot = std::min(number.find('.'), exp);
    const size_t integer = dot - sign;
    const size_t fraction = dot == exp ? 0 : exp - dot - 1;
    size_t exponent = exp == number.size() ? 0 : number.size() - exp - 1;
    if (exponent > 0 && (number[exp + 1] == '+' || number[exp + 1] == '-')) --exponent;
    if (integer > JsonPrefix::kMaxIntegerDigits || fraction > JsonPrefix::kMaxFractionDigits ||
        exponent > JsonPrefix::kMaxExponentDigits) {
      return false;
    }
  }
  return true;
}

// Whether every whitespace run between the tokens of `text` (a JSON text) has the form
// JsonPrefix allows: " ", or "\n" and at most kMaxIndent spaces or tabs.
bool WhitespaceFits(const std::string& text) {
  for (const std::string& run : RunsOutsideStrings(text, " \n\t\r")) {
    const bool fits = run == " " || (run[0] == '\n' && run.size() <= 1 + JsonPrefix::kMaxIndent &&
                                     run.find_first_not_of(" \t", 1) == std::string::npos);
    if (!fits) return false;
  }
  return true;
}

// ASCII mutations of the valid objects (a byte replaced, inserted or deleted): a string is
// accepted whole and complete exactly when nlohmann's parser takes it as an object
// without trailing whitespace, and its whitespace runs and numbers are within the bounds.
TEST(JsonPrefixTest, AgreesWithNlohmannOnMutatedObjects) {
  std::mt19937_64 rng(7);
  const std::string alphabet = "{}[]:,\"\\ \n0123456789-+.eEtrufalsn\x01xu";
  int agreed_valid = 0;
  for (int round = 0; round < 20000; ++round) {
    std::string text = ValidObjects()[rng() % ValidObjects().size()];
    if (text.find('\xc3') != std::string::npos || text.find('\xe2') != std::string::npos) continue;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits && !text.empty(); ++e) {
      const size_t at = rng() % text.size();
      const char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 3) {
        case 0:
          text[at] = c;
          break;
        case 1:
          text.insert(text.begin() + static_cast<std::ptrdiff_t>(at), c);
          break;
        default:
          text.erase(at, 1);
          break;
      }
    }
    JsonPrefix json;
    const bool ours = AcceptedBytes(text, &json) == text.size() && json.complete();
    bool reference = false;
    if (nlohmann::json::accept(text) && !text.empty() && text.back() == '}') {
      reference =
          nlohmann::json::parse(text).is_object() && WhitespaceFits(text) && NumbersFit(text);
    }
    ASSERT_EQ(ours, reference) << text;
    agreed_valid += ours ? 1 : 0;
  }
  EXPECT_GT(agreed_valid, 100);  // the mutations also produce valid objects
}

}  // namespace
}  // namespace quill::engine
