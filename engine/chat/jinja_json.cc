#include "engine/chat/jinja_json.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/base/status_macros.h"
#include "engine/chat/jinja_error.h"
#include "engine/chat/py_string.h"

namespace quill::engine::chat::jinja {
namespace {

template <typename Json>
absl::StatusOr<Value> Convert(const Json& json, Heap& heap, bool untrusted, int depth) {
  if (depth > kMaxValueDepth) {
    return Error(ErrorKind::kLimit,
                 absl::StrCat("JSON nested deeper than ", kMaxValueDepth, " levels"));
  }
  const auto str = [&](const std::string& s) {
    return Value::String(untrusted ? MakeUntrustedStr(s) : MakeStr(s));
  };
  switch (json.type()) {
    case nlohmann::json::value_t::null:
      return Value::None();
    case nlohmann::json::value_t::boolean:
      return Value::Bool(json.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value::Int(json.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const uint64_t u = json.template get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Value::Float(static_cast<double>(u));
      }
      return Value::Int(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float:
      return Value::Float(json.template get<double>());
    case nlohmann::json::value_t::string:
      return str(json.template get_ref<const std::string&>());
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& item : json) {
        QUILL_ASSIGN_OR_RETURN(Value v, Convert(item, heap, untrusted, depth + 1));
        items.push_back(std::move(v));
      }
      return Value::List(heap.New<ListObject>(ListKind::kList, std::move(items)));
    }
    case nlohmann::json::value_t::object: {
      DictObject* dict = heap.New<DictObject>();
      dict->entries.reserve(json.size());
      for (auto it = json.begin(); it != json.end(); ++it) {
        QUILL_ASSIGN_OR_RETURN(Value v, Convert(it.value(), heap, untrusted, depth + 1));
        // JSON object keys are unique after parsing, so no lookup is needed.
        dict->entries.emplace_back(str(it.key()), std::move(v));
      }
      return Value::Dict(dict);
    }
    default:
      return Error(ErrorKind::kType, "JSON value of an unsupported type (binary or discarded)");
  }
}

void AppendJsonString(absl::string_view s, bool ensure_ascii, std::string* out) {
  out->push_back('"');
  for (size_t pos = 0, len = 0; pos < s.size(); pos += len) {
    const uint32_t cp = py::DecodeAt(s, pos, &len);
    switch (cp) {
      case '"':
        *out += "\\\"";
        continue;
      case '\\':
        *out += "\\\\";
        continue;
      case '\n':
        *out += "\\n";
        continue;
      case '\r':
        *out += "\\r";
        continue;
      case '\t':
        *out += "\\t";
        continue;
      case '\b':
        *out += "\\b";
        continue;
      case '\f':
        *out += "\\f";
        continue;
      default:
        break;
    }
    if (cp < 0x20 || (ensure_ascii && cp >= 0x7F)) {
      if (cp >= 0x10000) {
        const uint32_t v = cp - 0x10000;
        absl::StrAppendFormat(out, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else {
        absl::StrAppendFormat(out, "\\u%04x", cp);
      }
    } else {
      out->append(s.data() + pos, len);
    }
  }
  out->push_back('"');
}

class JsonWriter {
 public:
  explicit JsonWriter(const JsonDumpOptions& options) : options_(options) {
    item_sep_ = options.item_separator.value_or(options.indent ? "," : ", ");
    key_sep_ = options.key_separator.value_or(": ");
  }

  absl::Status Write(const Value& v, int depth) {
    if (depth > kMaxValueDepth) {
      return Error(ErrorKind::kValue, "Circular reference detected (or nesting too deep)");
    }
    switch (v.type()) {
      case ValueType::kNone:
        out_ += "null";
        return absl::OkStatus();
      case ValueType::kBool:
        out_ += v.as_bool() ? "true" : "false";
        return absl::OkStatus();
      case ValueType::kInt:
        absl::StrAppend(&out_, v.as_int());
        return absl::OkStatus();
      case ValueType::kFloat:
        AppendFloat(v.as_float());
        return absl::OkStatus();
      case ValueType::kString:
        AppendJsonString(v.text(), options_.ensure_ascii, &out_);
        return absl::OkStatus();
      case ValueType::kList:
        if (v.list()->kind == ListKind::kList || v.list()->kind == ListKind::kTuple) {
          return WriteList(v.list()->items, depth);
        }
        break;
      case ValueType::kDict:
        return WriteDict(*v.dict(), depth);
      default:
        break;
    }
    return Error(ErrorKind::kType,
                 absl::StrCat("Object of type ", TypeName(v), " is not JSON serializable"));
  }

  std::string& out() { return out_; }

 private:
  void AppendFloat(double f) {
    if (std::isnan(f)) {
      out_ += "NaN";
    } else if (std::isinf(f)) {
      out_ += f > 0 ? "Infinity" : "-Infinity";
    } else {
      out_ += FormatFloat(f);
    }
  }

  void NewlineIndent(int level) {
    if (!options_.indent) return;
    out_.push_back('\n');
    for (int i = 0; i < level; ++i) out_ += *options_.indent;
  }

  absl::Status WriteList(const std::vector<Value>& items, int depth) {
    if (items.empty()) {
      out_ += "[]";
      return absl::OkStatus();
    }
    out_.push_back('[');
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out_ += item_sep_;
      NewlineIndent(depth + 1);
      QUILL_RETURN_IF_ERROR(Write(items[i], depth + 1));
    }
    NewlineIndent(depth);
    out_.push_back(']');
    return absl::OkStatus();
  }

  absl::Status WriteKey(const Value& key) {
    switch (key.type()) {
      case ValueType::kString:
        AppendJsonString(key.text(), options_.ensure_ascii, &out_);
        return absl::OkStatus();
      case ValueType::kFloat:
        out_.push_back('"');
        AppendFloat(key.as_float());
        out_.push_back('"');
        return absl::OkStatus();
      case ValueType::kBool:
        out_ += key.as_bool() ? "\"true\"" : "\"false\"";
        return absl::OkStatus();
      case ValueType::kNone:
        out_ += "\"null\"";
        return absl::OkStatus();
      case ValueType::kInt:
        absl::StrAppend(&out_, "\"", key.as_int(), "\"");
        return absl::OkStatus();
      default:
        return Error(
            ErrorKind::kType,
            absl::StrCat("keys must be str, int, float, bool or None, not ", TypeName(key)));
    }
  }

  absl::Status WriteDict(const DictObject& dict, int depth) {
    if (dict.entries.empty()) {
      out_ += "{}";
      return absl::OkStatus();
    }
    std::vector<const std::pair<Value, Value>*> entries;
    entries.reserve(dict.entries.size());
    for (const auto& entry : dict.entries) entries.push_back(&entry);
    if (options_.sort_keys) {
      absl::Status status;
      std::stable_sort(entries.begin(), entries.end(), [&](const auto* a, const auto* b) {
        absl::StatusOr<int> c = Compare(a->first, b->first);
        if (!c.ok()) {
          status.Update(c.status());
          return false;
        }
        return *c < 0;
      });
      QUILL_RETURN_IF_ERROR(status);
    }
    out_.push_back('{');
    for (size_t i = 0; i < entries.size(); ++i) {
      if (i > 0) out_ += item_sep_;
      NewlineIndent(depth + 1);
      QUILL_RETURN_IF_ERROR(WriteKey(entries[i]->first));
      out_ += key_sep_;
      QUILL_RETURN_IF_ERROR(Write(entries[i]->second, depth + 1));
    }
    NewlineIndent(depth);
    out_.push_back('}');
    return absl::OkStatus();
  }

  const JsonDumpOptions& options_;
  std::string item_sep_;
  std::string key_sep_;
  std::string out_;
};

}  // namespace

absl::StatusOr<Value> FromJson(const nlohmann::ordered_json& json, Heap& heap, bool untrusted) {
  return Convert(json, heap, untrusted, 0);
}

absl::StatusOr<Value> FromJson(const nlohmann::json& json, Heap& heap, bool untrusted) {
  return Convert(json, heap, untrusted, 0);
}

absl::StatusOr<StrPtr> DumpJson(const Value& value, const JsonDumpOptions& options) {
  JsonWriter writer(options);
  QUILL_RETURN_IF_ERROR(writer.Write(value, 0));
  return Derived(std::move(writer.out()), HasUntrusted(value));
}

}  // namespace quill::engine::chat::jinja
