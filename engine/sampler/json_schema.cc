#include "engine/sampler/json_schema.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/sampler/json_prefix.h"
#include "nlohmann/json.hpp"

namespace quill::engine {

namespace {

using nlohmann::json;

// Keywords that constrain values in ways the byte-level recognizer does not keep: a
// request with one is refused rather than answered with values that break it.
const std::set<std::string>& UnsupportedKeywords() {
  static const auto* keywords = new std::set<std::string>{"pattern",
                                                          "minLength",
                                                          "maxLength",
                                                          "minimum",
                                                          "maximum",
                                                          "exclusiveMinimum",
                                                          "exclusiveMaximum",
                                                          "multipleOf",
                                                          "minItems",
                                                          "maxItems",
                                                          "uniqueItems",
                                                          "prefixItems",
                                                          "contains",
                                                          "minContains",
                                                          "maxContains",
                                                          "minProperties",
                                                          "maxProperties",
                                                          "patternProperties",
                                                          "propertyNames",
                                                          "dependentRequired",
                                                          "dependentSchemas",
                                                          "dependencies",
                                                          "if",
                                                          "then",
                                                          "else",
                                                          "not",
                                                          "unevaluatedProperties",
                                                          "unevaluatedItems",
                                                          "additionalItems",
                                                          "$dynamicRef",
                                                          "$recursiveRef"};
  return *keywords;
}

// Keywords that give a schema its values. Any other keyword is an annotation (title,
// description, format, $defs, ...) or unknown, and skipped.
const std::set<std::string>& ValueKeywords() {
  static const auto* keywords = new std::set<std::string>{
      "type",  "properties", "required", "additionalProperties", "items", "enum", "const", "anyOf",
      "oneOf", "allOf",      "$ref"};
  return *keywords;
}

// A JSON pointer token escaped (RFC 6901).
std::string PointerToken(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

constexpr int kMaxSchemaNesting = 64;

}  // namespace

// Builds the node graph in two passes: Compile turns each schema object into a node (an
// anyOf, allOf or $ref into a node with alternatives), then Resolve gives every node the
// concrete node per type, and MinDepths what each needs.
class JsonSchemaCompiler {
 public:
  explicit JsonSchemaCompiler(const json& document) : document_(document) {
    JsonSchema::Node any;  // node 0: any value (true, {})
    for (int t = 0; t < JsonSchema::kNumTypes; ++t) any.by_type[t] = 0;
    any.additional = 0;
    any.items = 0;
    nodes_.push_back(any);
    alternatives_.emplace_back();
  }

  absl::StatusOr<std::shared_ptr<const JsonSchema>> Run() {
    const int32_t root = Compile(document_, "", 0);
    if (!status_.ok()) return status_;
    for (int32_t n = 0; n < static_cast<int32_t>(nodes_.size()) && status_.ok(); ++n) {
      for (int t = 0; t < JsonSchema::kNumTypes && status_.ok(); ++t) Resolve(n, t);
    }
    if (!status_.ok()) return status_;
    MinDepths();
    const JsonSchema::Node& top = nodes_[root];
    if (top.by_type[JsonSchema::kObject] < 0) {
      return absl::InvalidArgumentError(
          "the root must be an object schema (\"type\": \"object\"): the answer "
          "is one JSON object");
    }
    if (nodes_[top.by_type[JsonSchema::kObject]].object_depth > JsonSchema::kMaxDepth) {
      return absl::InvalidArgumentError(absl::StrCat(
          "no object satisfies the schema within ", JsonSchema::kMaxDepth,
          " levels of nesting (its required properties nest without end, or use false)"));
    }
    auto schema = std::make_shared<JsonSchema>();
    schema->nodes_ = std::move(nodes_);
    schema->root_ = root;
    return schema;
  }

 private:
  int32_t Fail(const std::string& where, const std::string& what) {
    if (status_.ok()) {
      status_ = absl::InvalidArgumentError(
          absl::StrCat("at \"", where.empty() ? "/" : where, "\": ", what));
    }
    return 0;
  }

  int32_t NewNode() {
    if (nodes_.size() >= JsonSchema::kMaxNodes) {
      return Fail("", absl::StrCat("more than ", JsonSchema::kMaxNodes, " schemas"));
    }
    nodes_.emplace_back();
    alternatives_.emplace_back();
    return static_cast<int32_t>(nodes_.size() - 1);
  }

  // A node whose values are those of any of `alternatives` (an alias when one).
  int32_t Union(std::vector<int32_t> alternatives) {
    const int32_t n = NewNode();
    if (!status_.ok()) return 0;
    alternatives_[n] = std::move(alternatives);
    return n;
  }

  int32_t Compile(const json& s, const std::string& where, int nesting) {
    if (!status_.ok()) return 0;
    if (nesting > kMaxSchemaNesting) return Fail(where, "schemas nest too deeply");
    if (s.is_boolean()) {
      if (s.get<bool>()) return 0;
      return Fail(where, "false allows no value");
    }
    if (!s.is_object()) return Fail(where, "a schema must be an object or a boolean");
    bool has_value_keyword = false;
    for (const auto& [key, value] : s.items()) {
      if (UnsupportedKeywords().count(key) != 0) {
        return Fail(where, absl::StrCat("\"", key, "\" is not supported"));
      }
      has_value_keyword = has_value_keyword || ValueKeywords().count(key) != 0;
    }
    if (!has_value_keyword) return 0;  // {} or annotations only: any value
    const auto only = [&](const char* keyword) {
      for (const auto& [key, value] : s.items()) {
        if (key != keyword && ValueKeywords().count(key) != 0) {
          Fail(where, absl::StrCat("\"", keyword, "\" beside \"", key, "\" is not supported"));
          return false;
        }
      }
      return true;
    };
    if (s.contains("$ref")) {
      if (!only("$ref")) return 0;
      return Ref(s["$ref"], where + "/$ref", nesting);
    }
    if (s.contains("allOf")) {
      if (!only("allOf")) return 0;
      const json& all = s["allOf"];
      if (!all.is_array() || all.size() != 1) {
        return Fail(where + "/allOf", "only an allOf of one schema is supported");
      }
      return Union({Compile(all[0], where + "/allOf/0", nesting + 1)});
    }
    for (const char* keyword : {"anyOf", "oneOf"}) {
      if (!s.contains(keyword)) continue;
      if (!only(keyword)) return 0;
      const json& any = s[keyword];
      const std::string at = absl::StrCat(where, "/", keyword);
      if (!any.is_array() || any.empty()) return Fail(at, "must be a non-empty array");
      std::vector<int32_t> alternatives;
      for (size_t i = 0; i < any.size(); ++i) {
        alternatives.push_back(Compile(any[i], absl::StrCat(at, "/", i), nesting + 1));
      }
      return Union(std::move(alternatives));
    }
    if (s.contains("enum") || s.contains("const")) return Literals(s, where);
    return Typed(s, where, nesting);
  }

  int32_t Ref(const json& ref, const std::string& where, int nesting) {
    if (!ref.is_string()) return Fail(where, "must be a string");
    const std::string target = ref.get<std::string>();
    if (const auto it = refs_.find(target); it != refs_.end()) return it->second;
    if (target.empty() || target[0] != '#') {
      return Fail(where, absl::StrCat("only references into this schema (\"#...\") are "
                                      "supported, not \"",
                                      target, "\""));
    }
    const json* value = nullptr;
    try {
      value = &document_.at(json::json_pointer(target.substr(1)));
    } catch (const json::exception&) {
      return Fail(where, absl::StrCat("\"", target, "\" names nothing in the schema"));
    }
    // Allocated before compiling the target, so that a recursive reference finds it.
    const int32_t n = Union({});
    if (!status_.ok()) return 0;
    refs_[target] = n;
    const int32_t compiled = Compile(*value, target.substr(1), nesting + 1);
    alternatives_[n] = {compiled};
    return n;
  }

  int32_t Literals(const json& s, const std::string& where) {
    if (s.contains("enum") && s.contains("const")) {
      return Fail(where, "\"enum\" beside \"const\" is not supported");
    }
    std::vector<json> values;
    std::string at = where;
    if (s.contains("const")) {
      values.push_back(s["const"]);
      at += "/const";
    } else {
      at += "/enum";
      const json& list = s["enum"];
      if (!list.is_array() || list.empty()) return Fail(at, "must be a non-empty array");
      values.assign(list.begin(), list.end());
    }
    if (values.size() > JsonSchema::kMaxLiterals) {
      return Fail(at, absl::StrCat("more than ", JsonSchema::kMaxLiterals, " values"));
    }
    for (const auto& [key, value] : s.items()) {
      if (key != "enum" && key != "const" && key != "type" && ValueKeywords().count(key) != 0) {
        return Fail(where, absl::StrCat("\"", key, "\" beside enum or const is not supported"));
      }
    }
    const int32_t n = NewNode();
    if (!status_.ok()) return 0;
    for (const json& value : values) {
      if (value.is_object() || value.is_array()) {
        return Fail(at, "only strings, numbers, booleans and null are supported as values");
      }
      const std::string text = value.dump();
      // A number longer than JSON mode writes would be a dead end (e.g. a 20-digit integer).
      if (JsonPrefix member; value.is_number() && !member.Accept("{\"v\":" + text + "}")) {
        return Fail(at, absl::StrCat(text, " has more digits than JSON mode writes (",
                                     JsonPrefix::kMaxIntegerDigits, " integer, ",
                                     JsonPrefix::kMaxFractionDigits, " fraction, ",
                                     JsonPrefix::kMaxExponentDigits, " exponent)"));
      }
      if (std::find(nodes_[n].literals.begin(), nodes_[n].literals.end(), text) ==
          nodes_[n].literals.end()) {
        nodes_[n].literals.push_back(text);
      }
      nodes_[n].by_type[TypeOf(value)] = n;
    }
    return n;
  }

  static JsonSchema::Type TypeOf(const json& value) {
    if (value.is_string()) return JsonSchema::kString;
    if (value.is_number()) return JsonSchema::kNumber;
    if (value.is_boolean()) return JsonSchema::kBoolean;
    if (value.is_null()) return JsonSchema::kNull;
    return value.is_array() ? JsonSchema::kArray : JsonSchema::kObject;
  }

  int32_t Typed(const json& s, const std::string& where, int nesting) {
    std::vector<std::string> types;
    if (s.contains("type")) {
      const json& type = s["type"];
      if (type.is_string()) {
        types.push_back(type.get<std::string>());
      } else if (type.is_array() && !type.empty()) {
        for (const json& t : type) {
          if (!t.is_string()) return Fail(where + "/type", "must be a string or strings");
          types.push_back(t.get<std::string>());
        }
      } else {
        return Fail(where + "/type", "must be a string or a non-empty array of strings");
      }
    } else {
      if (s.contains("properties") || s.contains("required") ||
          s.contains("additionalProperties")) {
        types.push_back("object");
      }
      if (s.contains("items")) types.push_back("array");
    }
    const int32_t n = NewNode();
    if (!status_.ok()) return 0;
    for (const std::string& type : types) {
      if (type == "object") {
        nodes_[n].by_type[JsonSchema::kObject] = n;
        Object(n, s, where, nesting);
      } else if (type == "array") {
        nodes_[n].by_type[JsonSchema::kArray] = n;
        int32_t items = 0;
        if (s.contains("items")) {
          const json& schema = s["items"];
          items = schema.is_boolean() && !schema.get<bool>()
                      ? -1
                      : Compile(schema, where + "/items", nesting + 1);
        }
        nodes_[n].items = items;
      } else if (type == "string") {
        nodes_[n].by_type[JsonSchema::kString] = n;
      } else if (type == "number") {
        nodes_[n].by_type[JsonSchema::kNumber] = n;
        nodes_[n].integer_only = false;
      } else if (type == "integer") {
        // Beside "number" it adds nothing.
        if (nodes_[n].by_type[JsonSchema::kNumber] < 0) nodes_[n].integer_only = true;
        nodes_[n].by_type[JsonSchema::kNumber] = n;
      } else if (type == "boolean") {
        nodes_[n].by_type[JsonSchema::kBoolean] = n;
      } else if (type == "null") {
        nodes_[n].by_type[JsonSchema::kNull] = n;
      } else {
        return Fail(where + "/type", absl::StrCat("unknown type \"", type, "\""));
      }
    }
    return n;
  }

  void Object(int32_t n, const json& s, const std::string& where, int nesting) {
    std::vector<JsonSchema::Property> properties;
    std::vector<std::string> names;
    if (s.contains("properties")) {
      const json& list = s["properties"];
      if (!list.is_object()) {
        Fail(where + "/properties", "must be an object");
        return;
      }
      for (const auto& [name, schema] : list.items()) {
        JsonSchema::Property property;
        const std::string quoted = json(name).dump();
        property.key = quoted.substr(1, quoted.size() - 2);
        property.node = Compile(schema, where + "/properties/" + PointerToken(name), nesting + 1);
        properties.push_back(std::move(property));
        names.push_back(name);
      }
    }
    uint64_t required = 0;
    if (s.contains("required")) {
      const json& list = s["required"];
      if (!list.is_array()) {
        Fail(where + "/required", "must be an array of property names");
        return;
      }
      for (const json& name : list) {
        if (!name.is_string()) {
          Fail(where + "/required", "must be an array of property names");
          return;
        }
        auto it = std::find(names.begin(), names.end(), name.get<std::string>());
        if (it == names.end()) {  // required but not described: any value
          JsonSchema::Property property;
          const std::string quoted = name.dump();
          property.key = quoted.substr(1, quoted.size() - 2);
          property.node = 0;
          properties.push_back(std::move(property));
          names.push_back(name.get<std::string>());
          it = names.end() - 1;
        }
        if (it - names.begin() < 64) required |= uint64_t{1} << (it - names.begin());
      }
    }
    if (properties.size() > JsonSchema::kMaxProperties) {
      Fail(where + "/properties",
           absl::StrCat("more than ", JsonSchema::kMaxProperties, " properties"));
      return;
    }
    int32_t additional = s.contains("properties") ? -1 : 0;
    if (s.contains("additionalProperties")) {
      const json& schema = s["additionalProperties"];
      if (schema.is_boolean()) {
        additional = schema.get<bool>() ? 0 : -1;
      } else {
        additional = Compile(schema, where + "/additionalProperties", nesting + 1);
      }
    }
    if (!status_.ok()) return;
    nodes_[n].properties = std::move(properties);
    nodes_[n].required = required;
    nodes_[n].additional = additional;
  }

  // The node values of type t follow at node n: n's own for a plain node, else the one
  // alternative (resolved in turn) that allows t.
  int32_t Resolve(int32_t n, int t) {
    if (alternatives_[n].empty() || !status_.ok()) return nodes_[n].by_type[t];
    const auto key = std::make_pair(n, t);
    if (const auto it = resolved_.find(key); it != resolved_.end()) {
      if (it->second == kResolving) {
        return Fail("", "a $ref or anyOf refers to itself with nothing in between");
      }
      return it->second;
    }
    resolved_[key] = kResolving;
    int32_t found = -1;
    for (int32_t alternative : alternatives_[n]) {
      const int32_t r = Resolve(alternative, t);
      if (!status_.ok()) return 0;
      if (r < 0 || r == found) continue;
      if (found < 0) {
        found = r;
      } else if (const int32_t wider = Wider(found, r, t); wider >= 0) {
        found = wider;
      } else {
        return Fail("", absl::StrCat("anyOf/oneOf alternatives that are both ", kTypeNames[t],
                                     " are not supported: alternatives must differ in JSON "
                                     "type (object, array, string, number, boolean, null)"));
      }
    }
    resolved_[key] = found;
    nodes_[n].by_type[t] = found;
    return found;
  }

  // Of two nodes that both take values of scalar type t, one that takes every value either
  // takes (merging two enums into a new node); -1 when neither does.
  int32_t Wider(int32_t a, int32_t b, int t) {
    if (t == JsonSchema::kObject || t == JsonSchema::kArray) return -1;
    const bool a_enum = !nodes_[a].literals.empty();
    const bool b_enum = !nodes_[b].literals.empty();
    if (a_enum && b_enum) return MergeLiterals(a, b, t);
    const auto covers = [&](int32_t plain, int32_t other) {
      if (t != JsonSchema::kNumber || !nodes_[plain].integer_only) return true;
      return !nodes_[other].literals.empty() ? false : nodes_[other].integer_only;
    };
    if (!a_enum && covers(a, b)) return a;
    if (!b_enum && covers(b, a)) return b;
    return -1;
  }

  // A node of the literals of type t from two enum / const nodes.
  int32_t MergeLiterals(int32_t a, int32_t b, int t) {
    const int32_t n = NewNode();
    if (!status_.ok()) return 0;
    for (int32_t from : {a, b}) {
      for (const std::string& text : nodes_[from].literals) {
        if (TypeOf(json::parse(text)) != t) continue;
        auto& literals = nodes_[n].literals;
        if (std::find(literals.begin(), literals.end(), text) == literals.end()) {
          literals.push_back(text);
        }
      }
    }
    if (nodes_[n].literals.size() > JsonSchema::kMaxLiterals) {
      return Fail("", absl::StrCat("more than ", JsonSchema::kMaxLiterals, " values in an anyOf"));
    }
    nodes_[n].by_type[t] = n;
    return n;
  }

  // Each node's least nesting: scalars need none, an array one (it may be empty), an
  // object one more than its deepest required property; iterated to the fixed point.
  void MinDepths() {
    bool changed = true;
    while (changed) {
      changed = false;
      for (size_t index = 0; index < nodes_.size(); ++index) {
        JsonSchema::Node& node = nodes_[index];
        int object_depth = JsonSchema::kUnsatisfiable;
        if (node.by_type[JsonSchema::kObject] == static_cast<int32_t>(index)) {
          int deepest = 0;
          for (size_t i = 0; i < node.properties.size(); ++i) {
            if ((node.required >> i & 1) != 0) {
              deepest = std::max(deepest, nodes_[node.properties[i].node].min_depth);
            }
          }
          object_depth = std::min(JsonSchema::kUnsatisfiable, 1 + deepest);
        }
        if (object_depth < node.object_depth) {
          node.object_depth = object_depth;
          changed = true;
        }
        int least = JsonSchema::kUnsatisfiable;
        for (int t = 0; t < JsonSchema::kNumTypes; ++t) {
          const int32_t c = node.by_type[t];
          if (c < 0) continue;
          if (t == JsonSchema::kObject) {
            least = std::min(least, nodes_[c].object_depth);
          } else {
            least = std::min(least, t == JsonSchema::kArray ? 1 : 0);
          }
        }
        if (least < node.min_depth) {
          node.min_depth = least;
          changed = true;
        }
      }
    }
  }

  static constexpr int32_t kResolving = -2;
  static constexpr const char* kTypeNames[JsonSchema::kNumTypes] = {"object", "array",   "string",
                                                                    "number", "boolean", "null"};

  const json& document_;
  std::vector<JsonSchema::Node> nodes_;
  std::vector<std::vector<int32_t>> alternatives_;  // by node: an anyOf's, or a $ref's target
  std::map<std::string, int32_t> refs_;
  std::map<std::pair<int32_t, int>, int32_t> resolved_;
  absl::Status status_;
};

absl::StatusOr<std::shared_ptr<const JsonSchema>> JsonSchema::Compile(absl::string_view text) {
  const json document = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (document.is_discarded()) return absl::InvalidArgumentError("is not valid JSON");
  return JsonSchemaCompiler(document).Run();
}

}  // namespace quill::engine
