#pragma once

// A JSON Schema compiled for constrained decoding (OpenAI's response_format json_schema):
// the subset whose every constraint can be kept byte by byte with no dead end, so that
// SchemaPrefix can refuse exactly the bytes no valid document continues.
//
// Kept: type (one or a list; "integer" refuses a fraction or exponent), properties,
// required, additionalProperties (false, true or a schema; absent means none when the
// schema names properties, any otherwise), items, enum and const of scalars, anyOf / oneOf
// whose alternatives differ in JSON type (oneOf read as anyOf: such alternatives cannot
// both match, except integer beside number or an enum beside its own type, where the
// wider is kept), allOf of one schema, $ref
// to "#" pointers ($defs, definitions; recursion allowed), true / {}.
// Ignored, as annotations: title, description, default, examples, format (an annotation
// by default in JSON Schema 2020-12), $schema, $id, $comment, deprecated, readOnly,
// writeOnly, and unknown keywords. Refused with INVALID_ARGUMENT naming the keyword and
// where it is: the constraints it cannot keep (pattern, minLength, minimum, minItems, ...).
// The root must be an object schema (the answer is one JSON object, as in JSON mode).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace quill::engine {

class JsonSchema {
 public:
  // JSON value types; a number node may take integers only.
  enum Type : uint8_t { kObject, kArray, kString, kNumber, kBoolean, kNull, kNumTypes };
  static constexpr int kMaxProperties = 64;  // per object schema
  static constexpr int kMaxLiterals = 64;    // per enum
  static constexpr int kMaxNodes = 4096;
  // The nesting a document may reach (JsonPrefix's bound).
  static constexpr int kMaxDepth = 32;
  // A node's min_depth when no finite value satisfies it.
  static constexpr int kUnsatisfiable = 1 << 20;

  struct Property {
    std::string key;  // as JSON writes it between its quotes (escaped)
    int32_t node = -1;
  };

  struct Node {
    // For each Type, the node that values of that type follow (itself, or the alternative
    // of an anyOf that has that type); -1 where the type is not allowed.
    int32_t by_type[kNumTypes] = {-1, -1, -1, -1, -1, -1};
    // What a node that values follow requires of them:
    bool integer_only = false;          // a number: no fraction or exponent
    std::vector<std::string> literals;  // enum / const: the values' compact JSON, nothing else
    std::vector<Property> properties;   // an object's named properties
    uint64_t required = 0;              // bit i: properties[i] is required
    int32_t additional = -1;            // the node of other keys' values; -1: none allowed
    int32_t items = -1;                 // an array's items; -1: only []
    // Containers a value of this node needs at least (kUnsatisfiable: no value exists),
    // and an object value of it (1 + its required properties' deepest need).
    int min_depth = kUnsatisfiable;
    int object_depth = kUnsatisfiable;
  };

  // Compiles a schema (JSON text). INVALID_ARGUMENT says what is wrong and where (a JSON
  // pointer into the schema), worded to follow the name of the field that carried it.
  static absl::StatusOr<std::shared_ptr<const JsonSchema>> Compile(absl::string_view text);

  const Node& node(int32_t index) const { return nodes_[index]; }
  int32_t root() const { return root_; }

 private:
  friend class JsonSchemaCompiler;
  std::vector<Node> nodes_;
  int32_t root_ = 0;
};

}  // namespace quill::engine
