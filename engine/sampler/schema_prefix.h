#pragma once

// A byte-at-a-time recognizer of one JSON object that satisfies a JsonSchema: JsonPrefix
// keeps the syntax, and this layer follows the same bytes to keep the schema (types,
// property names, required properties, enums, integers). It accepts a byte only when some
// valid document continues the bytes with it, so a mask built on it never leads into a
// dead end: a container is opened, a property named or an array item begun only where the
// nesting bound leaves room for the least value the schema allows there.
//
// The same interface as JsonPrefix, for JsonConstraint's walk. A value type (the schema
// is shared and must outlive it); copying it to try a byte costs a memcpy of ~600 bytes.

#include <cstdint>

#include "absl/strings/string_view.h"
#include "engine/sampler/json_prefix.h"
#include "engine/sampler/json_schema.h"

namespace quill::engine {

class SchemaPrefix {
 public:
  explicit SchemaPrefix(const JsonSchema& schema) : schema_(&schema) {}

  bool Accept(uint8_t byte);
  bool Accept(absl::string_view bytes);
  bool complete() const { return json_.complete(); }
  // Inside a string value that takes any text: until it closes, only the syntax changes.
  bool in_free_string() const {
    return literal_node_ < 0 && json_.context() == JsonPrefix::Context::kValueString;
  }
  const JsonPrefix& syntax() const { return json_; }
  // Between two characters of a string that takes any text (not an enum value, nor a key
  // the schema names): plain text may follow unchecked.
  bool between_string_characters() const {
    return json_.between_string_characters() && literal_node_ < 0 &&
           (json_.context() == JsonPrefix::Context::kValueString || key_any_);
  }

 private:
  struct Frame {
    int32_t node;   // the object or array node the container follows
    uint64_t seen;  // an object's properties written so far (bit i: properties[i])
  };

  bool StartValue(int32_t node, uint8_t byte);
  bool StartKey();
  bool KeyByte(uint8_t byte, bool closes);
  bool AfterValue(uint8_t byte);
  bool LiteralByte(uint8_t byte);
  // Whether a value of `node` fits in the nesting left inside the innermost container.
  bool Fits(int32_t node) const;
  const JsonSchema::Node& Top() const { return schema_->node(frames_[depth_ - 1].node); }

  const JsonSchema* schema_;
  JsonPrefix json_;
  Frame frames_[JsonPrefix::kMaxDepth] = {};
  int depth_ = 0;
  int32_t value_node_ = -1;  // the node of the value that starts next
  // The key being written: the named properties it may still be (bit i: properties[i]),
  // its bytes so far, and whether a key the schema does not name is allowed.
  uint64_t key_match_ = 0;
  uint32_t key_pos_ = 0;
  bool key_any_ = false;
  // An enum / const value being written: its node, the literals it may still be, bytes.
  int32_t literal_node_ = -1;
  uint64_t literal_match_ = 0;
  uint32_t literal_pos_ = 0;
  bool integer_only_ = false;  // the number being written
};

}  // namespace quill::engine
