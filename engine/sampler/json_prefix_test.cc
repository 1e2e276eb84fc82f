#include "engine/sampler/json_prefix.h"

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
      " \n{ }",
      R"({"a":1})",
      R"({"a": [1, -2.5, 3e10, 0, -0.0e-3, 1E+2], "b": {"c": null, "d": true, "e": false}})",
      R"({"s": "quote \" backslash \\ slash \/ \b\f\n\r\t \u00e9\uD83D\uDE00"})",
      "{\"utf8\": \"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"}",
      R"({"nested": [[[]], [{}], {"x": [{"y": []}]}]})",
      "{\n  \"pretty\": [\n    1,\n    2\n  ]\n}",
      R"({"": "", "k": ""})",
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

  JsonPrefix spaces;
  const std::string run(JsonPrefix::kMaxWhitespaceRun, ' ');
  EXPECT_EQ(AcceptedBytes("{" + run, &spaces), run.size() + 1);
  EXPECT_FALSE(spaces.Accept('\n'));
  JsonPrefix reset;  // a token between two runs starts a new one
  const std::string two_runs = "{" + run + "\"k\"" + run + ":" + run + "1" + run + "}";
  EXPECT_EQ(AcceptedBytes(two_runs, &reset), two_runs.size());
  EXPECT_TRUE(reset.complete());
}

// ASCII mutations of the valid objects (a byte replaced, inserted or deleted): a string is
// accepted whole and complete exactly when nlohmann's parser takes it as an object
// without trailing whitespace.
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
      reference = nlohmann::json::parse(text).is_object();
    }
    ASSERT_EQ(ours, reference) << text;
    agreed_valid += ours ? 1 : 0;
  }
  EXPECT_GT(agreed_valid, 100);  // the mutations also produce valid objects
}

}  // namespace
}  // namespace quill::engine
