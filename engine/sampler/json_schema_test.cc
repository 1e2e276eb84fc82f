#include "engine/sampler/json_schema.h"

#include <random>
#include <regex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/sampler/schema_prefix.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace quill::engine {
namespace {

using nlohmann::json;

std::shared_ptr<const JsonSchema> MustCompile(const json& schema) {
  auto compiled = JsonSchema::Compile(schema.dump());
  EXPECT_TRUE(compiled.ok()) << compiled.status() << "\n" << schema.dump();
  return compiled.ok() ? *compiled : nullptr;
}

// A validator of the supported keywords over parsed values, written apart from the
// byte-level recognizer: the oracle the random documents are checked against.
bool Valid(const json& schema, const json& value, const json& root) {
  if (schema.is_boolean()) return schema.get<bool>();
  if (schema.contains("$ref")) {
    return Valid(root.at(json::json_pointer(schema["$ref"].get<std::string>().substr(1))), value,
                 root);
  }
  for (const char* keyword : {"anyOf", "oneOf"}) {
    if (!schema.contains(keyword)) continue;
    int matches = 0;
    for (const json& alternative : schema[keyword]) matches += Valid(alternative, value, root);
    if (matches == 0 || (std::string(keyword) == "oneOf" && matches != 1)) return false;
  }
  if (schema.contains("allOf")) {
    for (const json& part : schema["allOf"]) {
      if (!Valid(part, value, root)) return false;
    }
  }
  if (schema.contains("enum")) {
    bool found = false;
    for (const json& option : schema["enum"]) found = found || option == value;
    if (!found) return false;
  }
  if (schema.contains("const") && schema["const"] != value) return false;
  if (schema.contains("type")) {
    std::vector<std::string> types;
    if (schema["type"].is_string()) {
      types.push_back(schema["type"]);
    } else {
      for (const json& t : schema["type"]) types.push_back(t);
    }
    bool typed = false;
    for (const std::string& t : types) {
      typed = typed || (t == "object" && value.is_object()) || (t == "array" && value.is_array()) ||
              (t == "string" && value.is_string()) || (t == "number" && value.is_number()) ||
              (t == "integer" && (value.is_number_integer())) ||
              (t == "boolean" && value.is_boolean()) || (t == "null" && value.is_null());
    }
    if (!typed) return false;
  }
  if (value.is_object()) {
    if (schema.contains("required")) {
      for (const json& name : schema["required"]) {
        if (!value.contains(name.get<std::string>())) return false;
      }
    }
    const json properties = schema.value("properties", json::object());
    for (const auto& [key, item] : value.items()) {
      if (properties.contains(key)) {
        if (!Valid(properties[key], item, root)) return false;
      } else if (schema.contains("additionalProperties")) {
        if (!Valid(schema["additionalProperties"], item, root)) return false;
      } else if (schema.contains("properties")) {
        return false;  // Quill's reading: no other keys where properties are named
      }
    }
  }
  if (value.is_array() && schema.contains("items")) {
    for (const json& item : value) {
      if (!Valid(schema["items"], item, root)) return false;
    }
  }
  return true;
}

const json kPerson = json::parse(R"({
  "type": "object",
  "title": "Person",
  "properties": {
    "name": {"type": "string", "description": "full name", "format": "name"},
    "age": {"type": "integer"},
    "height": {"type": ["number", "null"]},
    "tags": {"type": "array", "items": {"type": "string"}},
    "kind": {"enum": ["cat", "dog", 1, null, true]},
    "address": {"anyOf": [{"$ref": "#/$defs/Address"}, {"type": "null"}]},
    "na\"me": {"const": "q\\uote\""},
    "code": {"enum": [12, -3.5]}
  },
  "required": ["name", "age", "kind"],
  "additionalProperties": false,
  "$defs": {
    "Address": {
      "type": "object",
      "properties": {"street": {"type": "string"}, "zip": {"type": ["string", "integer"]}},
      "required": ["street"]
    }
  }
})");

const json kTree = json::parse(R"({
  "$ref": "#/$defs/node",
  "$defs": {
    "node": {
      "type": "object",
      "properties": {
        "value": {"type": "number"},
        "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}
      },
      "required": ["value", "children"]
    }
  }
})");

const json kOtherKeys = json::parse(R"({
  "type": "object",
  "properties": {"a": {"type": "boolean"}},
  "additionalProperties": {"type": "integer"}
})");

// Objects required inside objects, `levels` of them in all.
json Nested(int levels) {
  json schema = {{"type", "object"}};
  for (int i = 1; i < levels; ++i) {
    schema = {{"type", "object"}, {"properties", {{"x", schema}}}, {"required", {"x"}}};
  }
  return schema;
}

// Feeds `text` byte by byte; the index of the first refused byte, or -1.
int FirstRefused(const JsonSchema& schema, const std::string& text) {
  SchemaPrefix prefix(schema);
  for (size_t i = 0; i < text.size(); ++i) {
    if (!prefix.Accept(static_cast<uint8_t>(text[i]))) return static_cast<int>(i);
  }
  return prefix.complete() ? -1 : static_cast<int>(text.size());
}

TEST(JsonSchemaTest, AcceptsDocumentsThatSatisfyTheSchema) {
  const auto person = MustCompile(kPerson);
  ASSERT_NE(person, nullptr);
  for (
      const char* text : {
          R"({"name": "Ann", "age": 31, "kind": "cat"})",
          R"({"kind":null,"age":-0,"name":"","height":1.5e3,"tags":[],"address":null})",
          R"({"name":"B","age":7,"kind":1,"tags":["x","y\n"],"address":{"street":"Main","zip":12}})",
          R"({"name":"C","age":7,"kind":true,"na\"me":"q\\uote\"","height":null})",
      }) {
    EXPECT_EQ(FirstRefused(*person, text), -1) << text;
  }
  const auto tree = MustCompile(kTree);
  EXPECT_EQ(FirstRefused(*tree, R"({"value":1,"children":[{"children":[],"value":2.5}]})"), -1);
  const auto other = MustCompile(kOtherKeys);
  EXPECT_EQ(FirstRefused(*other, R"({"a":true,"b":3,"ab":-4})"), -1);
  const auto any = MustCompile(json{{"type", "object"}});
  EXPECT_EQ(FirstRefused(*any, R"({"x":[1,{"y":null}],"z":"w"})"), -1);
}

TEST(JsonSchemaTest, RefusesTheFirstByteThatBreaksTheSchema) {
  const auto person = MustCompile(kPerson);
  ASSERT_NE(person, nullptr);
  // '|' marks the byte refused (the marker is taken out before feeding).
  const char* cases[] = {
      R"({"n|om": 1})",                                  // no property starts "no"
      R"({"name": |5})",                                 // a string expected
      R"({"age": 1|.5})",                                // an integer: no fraction
      R"({"age": 1|e3})",                                // nor exponent
      R"({"kind": "c|ow"})",                             // not in the enum
      R"({"kind": "ca|"})",                              // only "cat" starts so
      R"({"kind": 1|2})",                                // 1, not 12
      R"({"kind": |false})",                             // true is, false is not
      R"({"name": "a", "na|me")",                        // not twice: only na\"me is left
      R"({"name": "a"|})",                               // age and kind are required
      R"({"name":"a","age":1,"kind":1,"address":{|}})",  // street is required
      R"({"name":"a","age":1,"kind":1,"address":|true})",
      R"({"name":"a","age":1,"kind":1,"tags":[|1]})",
      R"({"name":"a","age":1,"kind":1,"code":1|})",  // 12 or -3.5, not 1
      R"({"name":"a","age":1,"kind":1,"code":-3|})",
      R"({"na\"me": "q\\uote|"})",  // the const ends q\\uote\"
  };
  for (std::string text : cases) {
    const size_t marker = text.find('|');
    text.erase(marker, 1);
    EXPECT_EQ(FirstRefused(*person, text), static_cast<int>(marker)) << text;
  }
  const auto other = MustCompile(kOtherKeys);
  EXPECT_EQ(FirstRefused(*other, R"({"b": true})"), 6);       // other keys take integers
  EXPECT_EQ(FirstRefused(*other, R"({"a": true, "a")"), 14);  // "a" again
}

TEST(JsonSchemaTest, NestingStaysWithinTheBound) {
  // 32 levels of required objects fit exactly; the walk may not open a 33rd.
  const auto deepest = MustCompile(Nested(JsonSchema::kMaxDepth));
  ASSERT_NE(deepest, nullptr);
  std::string text;
  for (int i = 1; i < JsonSchema::kMaxDepth; ++i) text += R"({"x":)";
  text += "{}" + std::string(JsonSchema::kMaxDepth - 1, '}');
  EXPECT_EQ(FirstRefused(*deepest, text), -1);
  auto too_deep = JsonSchema::Compile(Nested(JsonSchema::kMaxDepth + 1).dump());
  EXPECT_EQ(too_deep.status().code(), absl::StatusCode::kInvalidArgument);
  // Optional nesting is cut where it would not fit: an array of trees at depth 31 may
  // only be empty, since a tree needs a level of its own.
  const auto tree = MustCompile(kTree);
  std::string deep;
  for (int i = 0; i < 15; ++i) deep += R"({"value":0,"children":[)";
  deep += R"({"value":0,"children":[)";  // depth 32 inside this array
  EXPECT_EQ(FirstRefused(*tree, deep + "{"), static_cast<int>(deep.size()));
  EXPECT_EQ(FirstRefused(*tree, deep + "]"), static_cast<int>(deep.size()) + 1);  // incomplete
  // An item that may be a string or a deep object: at depth 31 only the string fits.
  json items = {
      {"type", "object"},
      {"properties",
       {{"a", {{"type", "array"}, {"items", {{"anyOf", {Nested(3), {{"type", "string"}}}}}}}}}},
      {"required", {"a"}}};
  json chain = items;
  for (int i = 0; i < 29; ++i) {
    chain = {{"type", "object"}, {"properties", {{"x", chain}}}, {"required", {"x"}}};
  }
  const auto mixed = MustCompile(chain);
  ASSERT_NE(mixed, nullptr);
  std::string path;
  for (int i = 0; i < 29; ++i) path += R"({"x":)";
  path += R"({"a":[)";  // depth 31: the array's items start here
  EXPECT_EQ(FirstRefused(*mixed, path + "{"), static_cast<int>(path.size()));
  EXPECT_EQ(FirstRefused(*mixed, path + "\"s\"]"), static_cast<int>(path.size()) + 4);
}

TEST(JsonSchemaTest, RefusesWhatItCannotKeepNamingTheKeywordAndWhere) {
  struct Case {
    std::string schema;
    std::string message;  // a part of the error
  };
  const Case cases[] = {
      {R"({"type":"object","properties":{"s":{"type":"string","pattern":"^a"}}})",
       "\"/properties/s\": \"pattern\" is not supported"},
      {R"({"type":"object","properties":{"n":{"type":"integer","minimum":0}}})", "\"minimum\""},
      {R"({"type":"array"})", "root must be an object"},
      {R"({"type":"object","properties":{"a":false}})", "false allows no value"},
      {R"({"type":"object","properties":{"a":{"anyOf":[{"type":"object"},{"properties":{"x":{}}}]}}})",
       "both object"},
      {R"({"type":"object","properties":{"a":{"$ref":"#/$defs/missing"}}})", "names nothing"},
      {R"({"type":"object","properties":{"a":{"$ref":"http://x/y"}}})", "only references"},
      {R"({"$defs":{"a":{"$ref":"#/$defs/a"}},"type":"object","properties":{"p":{"$ref":"#/$defs/a"}}})",
       "refers to itself"},
      {R"({"type":"object","properties":{"a":{"type":"str"}}})", "unknown type"},
      {R"({"type":"object","properties":{"a":{"enum":[[1]]}}})", "only strings, numbers"},
      // Longer than JSON mode writes a number: a dead end.
      {R"({"type":"object","properties":{"a":{"enum":[1, 12345678901234567890]}}})",
       "\"/properties/a/enum\": 12345678901234567890 has more digits than JSON mode writes"},
      {R"({"$ref":"#/$defs/n","$defs":{"n":{"type":"object","properties":{"n":{"$ref":"#/$defs/n"}},"required":["n"]}}})",
       "no object satisfies"},
      {"{not json", "not valid JSON"},
  };
  for (const Case& c : cases) {
    const auto compiled = JsonSchema::Compile(c.schema);
    ASSERT_FALSE(compiled.ok()) << c.schema;
    EXPECT_EQ(compiled.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(compiled.status().message().find(c.message), std::string::npos)
        << compiled.status() << " lacks " << c.message;
  }
}

// Random documents written byte by byte from what the recognizer accepts: at every state
// some byte is accepted (no dead end), and every finished document parses and satisfies
// the schema by the independent validator.
TEST(JsonSchemaTest, EveryAcceptedPrefixContinuesIntoAValidDocument) {
  for (const json& schema :
       {kPerson, kTree, kOtherKeys, Nested(JsonSchema::kMaxDepth), json{{"type", "object"}}}) {
    const auto compiled = MustCompile(schema);
    ASSERT_NE(compiled, nullptr);
    std::mt19937 random(7);
    int finished = 0;
    for (int walk = 0; walk < 150; ++walk) {
      SchemaPrefix prefix(*compiled);
      std::string text;
      while (!prefix.complete() && text.size() < 20000) {
        std::vector<uint8_t> accepted;
        std::vector<uint8_t> closers;
        for (int b = 0; b < 256; ++b) {
          SchemaPrefix next = prefix;
          if (!next.Accept(static_cast<uint8_t>(b))) continue;
          accepted.push_back(static_cast<uint8_t>(b));
          if (b == '"' || b == '}' || b == ']' || b == ',')
            closers.push_back(static_cast<uint8_t>(b));
        }
        ASSERT_FALSE(accepted.empty()) << "dead end after: " << text;
        // Lean towards closing so that walks end, more as they grow.
        const bool close = !closers.empty() && random() % 100 < 30 + text.size() / 40;
        const auto& pool = close ? closers : accepted;
        const uint8_t b = pool[random() % pool.size()];
        ASSERT_TRUE(prefix.Accept(b));
        text.push_back(static_cast<char>(b));
      }
      if (!prefix.complete()) continue;
      ++finished;
      // Exponents shrunk to one digit: nlohmann refuses numbers beyond a double's range.
      const std::string shrunk = std::regex_replace(text, std::regex("([eE][+-]?)[0-9]+"), "$011");
      const json value = json::parse(shrunk, nullptr, /*allow_exceptions=*/false);
      ASSERT_FALSE(value.is_discarded()) << text;
      EXPECT_TRUE(Valid(schema, value, schema)) << schema.dump() << "\n" << text;
    }
    EXPECT_GT(finished, 100) << schema.dump();
  }
}

}  // namespace
}  // namespace quill::engine
