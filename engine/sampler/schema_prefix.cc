#include "engine/sampler/schema_prefix.h"

namespace quill::engine {

namespace {

using Context = JsonPrefix::Context;

bool IsWhitespace(uint8_t b) { return b == ' ' || b == '\t' || b == '\n' || b == '\r'; }

JsonSchema::Type TypeStartedBy(uint8_t b) {
  switch (b) {
    case '{':
      return JsonSchema::kObject;
    case '[':
      return JsonSchema::kArray;
    case '"':
      return JsonSchema::kString;
    case 't':
    case 'f':
      return JsonSchema::kBoolean;
    case 'n':
      return JsonSchema::kNull;
    default:
      return JsonSchema::kNumber;  // '-' or a digit (JsonPrefix refuses anything else)
  }
}

}  // namespace

bool SchemaPrefix::Accept(absl::string_view bytes) {
  for (char c : bytes) {
    if (!Accept(static_cast<uint8_t>(c))) return false;
  }
  return true;
}

bool SchemaPrefix::Accept(uint8_t b) {
  const Context context = json_.context();
  const bool closes = json_.quote_closes_string();
  if (!json_.Accept(b)) return false;
  switch (context) {
    case Context::kStart:
      if (IsWhitespace(b)) return true;
      value_node_ = schema_->root();
      return StartValue(value_node_, b);  // '{'
    case Context::kValue:
      if (IsWhitespace(b)) return true;
      if (b == ']') {  // an empty array closes
        --depth_;
        return true;
      }
      return StartValue(value_node_, b);
    case Context::kKey:
      if (IsWhitespace(b)) return true;
      if (b == '}') {  // an empty object closes: nothing may be required
        if (Top().required != 0) return false;
        --depth_;
        return true;
      }
      return StartKey();  // '"'
    case Context::kColon:
      return true;
    case Context::kAfterValue:
      return AfterValue(b);
    case Context::kKeyString:
      return KeyByte(b, closes);
    case Context::kValueString:
    case Context::kLiteral:
      if (literal_node_ < 0) return true;
      if (!LiteralByte(b)) return false;
      if (json_.context() == Context::kAfterValue || json_.complete()) literal_node_ = -1;
      return true;
    case Context::kNumber: {
      const bool continues =
          (b >= '0' && b <= '9') || b == '.' || b == 'e' || b == 'E' || b == '+' || b == '-';
      if (literal_node_ >= 0) {
        if (continues) return LiteralByte(b);
        // The number ended before this byte: it must be one of the literals whole.
        bool whole = false;
        const auto& literals = schema_->node(literal_node_).literals;
        for (size_t i = 0; i < literals.size(); ++i) {
          whole = whole || ((literal_match_ >> i & 1) != 0 && literals[i].size() == literal_pos_);
        }
        literal_node_ = -1;
        return whole && AfterValue(b);
      }
      if (continues) return !integer_only_ || (b != '.' && b != 'e' && b != 'E');
      return AfterValue(b);
    }
    case Context::kDone:
      break;
  }
  return false;
}

bool SchemaPrefix::Fits(int32_t node) const {
  return node >= 0 && depth_ + schema_->node(node).min_depth <= JsonSchema::kMaxDepth;
}

bool SchemaPrefix::StartValue(int32_t node, uint8_t b) {
  if (node < 0) return false;
  const JsonSchema::Type type = TypeStartedBy(b);
  const int32_t follows = schema_->node(node).by_type[type];
  if (follows < 0) return false;
  const JsonSchema::Node& n = schema_->node(follows);
  if (!n.literals.empty()) {
    literal_node_ = follows;
    literal_match_ = 0;
    for (size_t i = 0; i < n.literals.size(); ++i) {
      if (static_cast<uint8_t>(n.literals[i][0]) == b) literal_match_ |= uint64_t{1} << i;
    }
    literal_pos_ = 1;
    return literal_match_ != 0;
  }
  switch (type) {
    case JsonSchema::kObject:
      if (depth_ + n.object_depth > JsonSchema::kMaxDepth) return false;
      frames_[depth_++] = Frame{follows, 0};
      return true;
    case JsonSchema::kArray:
      if (depth_ + 1 > JsonSchema::kMaxDepth) return false;
      frames_[depth_++] = Frame{follows, 0};
      value_node_ = Fits(n.items) ? n.items : -1;
      return true;
    case JsonSchema::kNumber:
      integer_only_ = n.integer_only;
      return true;
    default:
      return true;
  }
}

bool SchemaPrefix::LiteralByte(uint8_t b) {
  const auto& literals = schema_->node(literal_node_).literals;
  uint64_t match = 0;
  for (size_t i = 0; i < literals.size(); ++i) {
    if ((literal_match_ >> i & 1) != 0 && literals[i].size() > literal_pos_ &&
        static_cast<uint8_t>(literals[i][literal_pos_]) == b) {
      match |= uint64_t{1} << i;
    }
  }
  literal_match_ = match;
  ++literal_pos_;
  return match != 0;
}

bool SchemaPrefix::StartKey() {
  const JsonSchema::Node& object = Top();
  const uint64_t seen = frames_[depth_ - 1].seen;
  key_any_ = Fits(object.additional);
  key_match_ = 0;
  for (size_t i = 0; i < object.properties.size(); ++i) {
    // With other keys allowed, every name is followed, to refuse writing one twice.
    if (key_any_ || ((seen >> i & 1) == 0 && Fits(object.properties[i].node))) {
      key_match_ |= uint64_t{1} << i;
    }
  }
  key_pos_ = 0;
  return key_any_ || key_match_ != 0;
}

bool SchemaPrefix::KeyByte(uint8_t b, bool closes) {
  const JsonSchema::Node& object = Top();
  if (closes && b == '"') {
    Frame& frame = frames_[depth_ - 1];
    for (size_t i = 0; i < object.properties.size(); ++i) {
      if ((key_match_ >> i & 1) == 0 || object.properties[i].key.size() != key_pos_) continue;
      // The key names property i: written once, and only where its value fits.
      if ((frame.seen >> i & 1) != 0 || !Fits(object.properties[i].node)) return false;
      frame.seen |= uint64_t{1} << i;
      value_node_ = object.properties[i].node;
      key_any_ = false;
      return true;
    }
    value_node_ = object.additional;
    const bool other_key_allowed = key_any_;
    key_any_ = false;
    return other_key_allowed;
  }
  uint64_t match = 0;
  for (size_t i = 0; i < object.properties.size(); ++i) {
    const std::string& key = object.properties[i].key;
    if ((key_match_ >> i & 1) != 0 && key.size() > key_pos_ &&
        static_cast<uint8_t>(key[key_pos_]) == b) {
      match |= uint64_t{1} << i;
    }
  }
  key_match_ = match;
  ++key_pos_;
  return key_any_ || match != 0;
}

bool SchemaPrefix::AfterValue(uint8_t b) {
  if (IsWhitespace(b)) return true;
  const JsonSchema::Node& container = Top();
  switch (b) {
    case ',':
      if (json_.context() == Context::kValue) {  // in an array: another item
        value_node_ = Fits(container.items) ? container.items : -1;
        return value_node_ >= 0;
      }
      {
        // Another key: only if one may still be written.
        const uint64_t seen = frames_[depth_ - 1].seen;
        if (Fits(container.additional)) return true;
        for (size_t i = 0; i < container.properties.size(); ++i) {
          if ((seen >> i & 1) == 0 && Fits(container.properties[i].node)) return true;
        }
        return false;
      }
    case '}':
      if ((frames_[depth_ - 1].seen & container.required) != container.required) return false;
      --depth_;
      return true;
    default:  // ']'
      --depth_;
      return true;
  }
}

}  // namespace quill::engine
