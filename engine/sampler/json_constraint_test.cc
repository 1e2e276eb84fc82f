#include "engine/sampler/json_constraint.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "gtest/gtest.h"

namespace quill::engine {
namespace {

// A toy vocabulary: id 0 ends generation, 1 is another control token, then pieces.
TokenBytesTable Table() {
  std::vector<std::string> bytes = {"",  "",  "{",   "}",   "\"",  "a", ":",
                                    " ", "1", "{\"", "\"}", "x\"", "]"};
  std::vector<uint8_t> ends(bytes.size(), 0);
  ends[0] = 1;
  return TokenBytesTable::Make(std::move(bytes), std::move(ends));
}

std::vector<int> Allowed(const JsonConstraint& constraint, size_t vocab) {
  std::vector<float> logits(vocab, 0.5f);
  const int count = constraint.Mask(absl::MakeSpan(logits));
  std::vector<int> allowed;
  for (size_t id = 0; id < vocab; ++id) {
    if (!std::isinf(logits[id])) {
      EXPECT_EQ(logits[id], 0.5f);  // allowed logits are left as they were
      allowed.push_back(static_cast<int>(id));
    }
  }
  EXPECT_EQ(count, static_cast<int>(allowed.size()));
  return allowed;
}

TEST(JsonConstraintTest, MasksTokensTheObjectCannotTakeAndEndsWithEndOfGeneration) {
  const TokenBytesTable table = Table();
  JsonConstraint json(table);
  const size_t vocab = table.bytes.size();
  // Start: '{', whitespace, or '{"' (a multi-byte token checked whole).
  EXPECT_EQ(Allowed(json, vocab), (std::vector<int>{2, 7, 9}));
  json.Advance(9);  // {"
  // In a key: any string byte, or the closing quote, but not the quote then '}' (the
  // colon must come first).
  EXPECT_EQ(Allowed(json, vocab), (std::vector<int>{2, 3, 4, 5, 6, 7, 8, 9, 11, 12}));
  json.Advance(5);  // a
  json.Advance(4);  // "
  json.Advance(6);  // :
  json.Advance(8);  // 1
  EXPECT_FALSE(json.complete());
  // After a number in an object: more digits, whitespace, or the close ('}' or '"}' no).
  EXPECT_EQ(Allowed(json, vocab), (std::vector<int>{3, 7, 8}));
  json.Advance(3);
  EXPECT_TRUE(json.complete());
  // Complete: only the end of generation (not the other control token).
  EXPECT_EQ(Allowed(json, vocab), (std::vector<int>{0}));
}

// Adds each byte of the objects as a piece of its own (to advance by), unless it is one.
void AddEachByte(const std::vector<std::string>& objects, std::vector<std::string>* pieces) {
  for (const std::string& object : objects) {
    for (char c : object) {
      if (std::find(pieces->begin(), pieces->end(), std::string(1, c)) == pieces->end()) {
        pieces->push_back(std::string(1, c));
      }
    }
  }
}

template <typename Recognizer>
Recognizer MakeRecognizer(const JsonSchema* schema) {
  if constexpr (std::is_same_v<Recognizer, SchemaPrefix>) {
    return SchemaPrefix(*schema);
  } else {
    return JsonPrefix();
  }
}

// Over every prefix of each object, the mask allows exactly the tokens whose bytes the
// object accepts (trying each token alone), and counts them.
// With a schema, against SchemaPrefix; without, against JsonPrefix.
template <typename Recognizer = JsonPrefix>
void ExpectMaskEqualsTryingEveryToken(const std::vector<std::string>& pieces,
                                      const std::vector<std::string>& objects,
                                      std::shared_ptr<const JsonSchema> schema = nullptr) {
  std::vector<uint8_t> ends(pieces.size(), 0);
  ends[0] = 1;
  const TokenBytesTable table = TokenBytesTable::Make(pieces, ends);
  size_t states = 0, expected_states = 0;
  for (const std::string& object : objects) {
    expected_states += object.size() + 1;
    JsonConstraint constraint(table, schema);
    Recognizer state = MakeRecognizer<Recognizer>(schema.get());
    for (size_t i = 0; i <= object.size(); ++i) {
      std::vector<float> logits(pieces.size(), 1.0f);
      const int allowed = constraint.Mask(absl::MakeSpan(logits));
      int expected = 0;
      for (size_t id = 0; id < pieces.size(); ++id) {
        Recognizer next = state;
        const bool ok = pieces[id].empty() ? state.complete() && ends[id] != 0
                                           : !state.complete() && next.Accept(pieces[id]);
        ASSERT_EQ(!std::isinf(logits[id]), ok) << object.substr(0, i) << " | " << pieces[id];
        expected += ok ? 1 : 0;
      }
      EXPECT_EQ(allowed, expected);
      ++states;
      if (i == object.size()) break;
      ASSERT_TRUE(state.Accept(static_cast<uint8_t>(object[i])));
      const auto one = std::find(pieces.begin(), pieces.end(), std::string(1, object[i]));
      ASSERT_NE(one, pieces.end());
      constraint.Advance(static_cast<int32_t>(one - pieces.begin()));
    }
    EXPECT_TRUE(constraint.complete());
  }
  EXPECT_EQ(states, expected_states);  // every prefix checked, none skipped
}

// The trie's walk (a refused prefix refuses its subtree, plain string text is taken)
// decides exactly what trying each token's bytes decides: over every prefix of varied
// objects, and a vocabulary of pieces with cut and stray UTF-8, escapes, quotes,
// whitespace runs and subtrees that are plain text but for one piece (plus each object
// byte alone, to advance by).
TEST(JsonConstraintTest, MaskEqualsTryingEveryToken) {
  const std::vector<std::string> objects = {
      "{\"key\": \"caf\xc3\xa9 \\u00e9 \\n the\", \"n\": [-0.5e+3, 12, true, null], \"o\": {}}",
      "{ \"a\" : [ { } , [ ] ] ,\"\xf0\x9f\x98\x80\":false}",
      "{\n" + std::string(19, ' ') + "\t}",  // at the whitespace run's bound
  };
  std::vector<std::string> pieces = {"", "\\", "\\n", "\\u00", "-0.5e+3", "nul", "\"}",
                                     "\":", "\", \"", "caf\xc3\xa9", "\xc3", "\xa9", "\xe2\x82",
                                     "\x80", "\x01", "\t\"", "E+", "\"a\": [", "}]}", " the",
                                     "\n  ", "\xf0\x9f\x98\x80",
                                     // Subtrees of plain text but for one piece, which a
                                     // string refuses: a stray continuation byte, a
                                     // control character, a bad escape.
                                     "v", "vo", "v\xa9", "z", "zo", "z\x01", "q", "qo", "q\\q"};
  // Pieces longer than the walk's recursion, tried byte by byte past it.
  for (const std::string& piece : {std::string(70, 'a') + "\"", "\"" + std::string(100, 'b'),
                                   std::string(31, ' ') + std::string(40, 'c'),
                                   std::string(70, 'a') + "\xa9", std::string(70, 'a')}) {
    pieces.push_back(piece);
  }
  AddEachByte(objects, &pieces);
  ExpectMaskEqualsTryingEveryToken(pieces, objects);
}

// The trie's walk on a vocabulary of every string of up to 3 symbols over JSON's
// structural bytes, escapes, digits, letters, whitespace and cut UTF-8 (each shared prefix
// a node with many children, every token a prefix of others), with duplicated pieces.
TEST(JsonConstraintTest, MaskEqualsTryingEveryTokenOfAnExhaustiveVocabulary) {
  const std::vector<std::string> symbols = {"{", "}",  "[",  "]", "\"",   ":",    ",",
                                            " ", "\n", "\\", "u", "0",    "1",    "-",
                                            "e", ".",  "a",  "t", "\xc3", "\xa9", "\x01"};
  std::vector<std::string> pieces = {""};
  for (const std::string& a : symbols) {
    pieces.push_back(a);
    for (const std::string& b : symbols) {
      pieces.push_back(a + b);
      for (const std::string& c : symbols) pieces.push_back(a + b + c);
    }
  }
  for (const char* twice : {"{\"", "\"a", " ", "\xc3\xa9", "1"}) pieces.push_back(twice);
  const std::vector<std::string> objects = {
      "{\"a\": [1, -0.1e1, true], \"t\\u00e9\xc3\xa9\": {\"\": \"e\\n\"}}",
      "{\n\"ta\":[[],{},\"\"],\"u\":-1}",
  };
  AddEachByte(objects, &pieces);
  ExpectMaskEqualsTryingEveryToken(pieces, objects);
}

// With a schema the walk keeps it too: property names (plain text in a key is not taken
// unchecked where the schema names the keys), enums, integers, required properties.
TEST(JsonConstraintTest, MaskWithASchemaEqualsTryingEveryToken) {
  const auto schema = JsonSchema::Compile(R"({
    "type": "object",
    "properties": {
      "name": {"type": "string"},
      "nat": {"type": "integer"},
      "kind": {"enum": ["cat", "cab", 12, null]},
      "list": {"type": "array", "items": {"type": ["boolean", "number"]}},
      "o": {"type": "object", "additionalProperties": {"type": "string"}}
    },
    "required": ["name", "kind"],
    "additionalProperties": false
  })");
  ASSERT_TRUE(schema.ok()) << schema.status();
  const std::vector<std::string> objects = {
      R"({"name": "the cat", "kind": "cab", "nat": -3, "list": [true, 1.5e3]})",
      R"({"kind":12,"o":{"any key":"v","x":""},"name":""})",
      R"({"kind": null, "name": "na", "list": []})",
  };
  std::vector<std::string> pieces = {"",     "na",   "name",   "\"name\"", "nat",  "\"na",
                                     "me",   "ca",   "cat",    "\"cat\"",  "b",    "12",
                                     "1",    "2",    ".5",     "e3",       "true", "tr",
                                     "null", "\": ", "\", \"", " the",     "any",  "key",
                                     " key", "ki",   "kind",   "nd",       "list", "[]"};
  AddEachByte(objects, &pieces);
  ExpectMaskEqualsTryingEveryToken<SchemaPrefix>(pieces, objects, *schema);
}

}  // namespace
}  // namespace quill::engine
