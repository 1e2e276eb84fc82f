#include "engine/chat/jinja_value.h"

#include <charconv>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/chat/jinja_error.h"
#include "engine/chat/py_string.h"

namespace quill::engine::chat::jinja {

Provenance Provenance::Whole(size_t size) {
  Provenance p;
  if (size > 0) p.ranges_.push_back({0, size});
  return p;
}

void Provenance::Add(size_t begin, size_t end) {
  if (begin >= end) return;
  if (!ranges_.empty() && ranges_.back().end >= begin) {
    ranges_.back().end = std::max(ranges_.back().end, end);
    return;
  }
  ranges_.push_back({begin, end});
}

void Provenance::Append(const Provenance& other, size_t offset) {
  for (const ByteRange& r : other.ranges_) Add(r.begin + offset, r.end + offset);
}

Provenance Provenance::Slice(size_t begin, size_t end) const {
  Provenance p;
  for (const ByteRange& r : ranges_) {
    if (r.end <= begin) continue;
    if (r.begin >= end) break;
    p.Add(std::max(r.begin, begin) - begin, std::min(r.end, end) - begin);
  }
  return p;
}

StrPtr MakeStr(std::string text) {
  auto s = std::make_shared<StrData>();
  s->text = std::move(text);
  return s;
}

StrPtr MakeStr(std::string text, Provenance untrusted) {
  auto s = std::make_shared<StrData>();
  s->text = std::move(text);
  s->untrusted = std::move(untrusted);
  return s;
}

StrPtr MakeUntrustedStr(std::string text) {
  Provenance p = Provenance::Whole(text.size());
  return MakeStr(std::move(text), std::move(p));
}

const StrPtr& EmptyStr() {
  static const StrPtr* empty = new StrPtr(MakeStr(""));
  return *empty;
}

Value Value::Bool(bool b) {
  Value v(ValueType::kBool);
  v.b_ = b;
  return v;
}

Value Value::Int(int64_t i) {
  Value v(ValueType::kInt);
  v.i_ = i;
  return v;
}

Value Value::Float(double f) {
  Value v(ValueType::kFloat);
  v.f_ = f;
  return v;
}

Value Value::String(StrPtr s) {
  Value v(ValueType::kString);
  v.str_ = std::move(s);
  return v;
}

Value Value::Undefined(const UndefinedInfo* info) {
  Value v(ValueType::kUndefined);
  v.obj_ = const_cast<UndefinedInfo*>(info);
  return v;
}

#define QUILL_JINJA_OBJECT_FACTORY(Name, Type, Enum) \
  Value Value::Name(Type* object) {                  \
    Value v(ValueType::Enum);                        \
    v.obj_ = object;                                 \
    return v;                                        \
  }
QUILL_JINJA_OBJECT_FACTORY(List, ListObject, kList)
QUILL_JINJA_OBJECT_FACTORY(Dict, DictObject, kDict)
QUILL_JINJA_OBJECT_FACTORY(Namespace, NamespaceObject, kNamespace)
QUILL_JINJA_OBJECT_FACTORY(Loop, LoopObject, kLoop)
QUILL_JINJA_OBJECT_FACTORY(Callable, CallableObject, kCallable)
#undef QUILL_JINJA_OBJECT_FACTORY

const void* Value::identity() const {
  switch (type_) {
    case ValueType::kList:
    case ValueType::kDict:
    case ValueType::kNamespace:
    case ValueType::kLoop:
    case ValueType::kCallable:
      return obj_;
    default:
      return nullptr;
  }
}

namespace {

bool IsHashableKeyEqual(const Value& a, const Value& b) {
  if (a.is_string() || b.is_string()) {
    return a.is_string() && b.is_string() && a.text() == b.text();
  }
  if (a.is_number() && b.is_number()) return a.as_float() == b.as_float();
  if (a.is_none() || b.is_none()) return a.is_none() && b.is_none();
  absl::StatusOr<bool> eq = Equals(a, b);
  return eq.ok() && *eq;
}

}  // namespace

int64_t DictObject::Find(const Value& key) const {
  if (key.is_string()) return FindStr(key.text());
  for (size_t i = 0; i < entries.size(); ++i) {
    if (IsHashableKeyEqual(entries[i].first, key)) return static_cast<int64_t>(i);
  }
  return -1;
}

int64_t DictObject::FindStr(absl::string_view key) const {
  for (size_t i = 0; i < entries.size(); ++i) {
    const Value& k = entries[i].first;
    if (k.is_string() && k.text() == key) return static_cast<int64_t>(i);
  }
  return -1;
}

void DictObject::Set(Value key, Value value) {
  const int64_t i = Find(key);
  if (i >= 0) {
    entries[i].second = std::move(value);
  } else {
    entries.emplace_back(std::move(key), std::move(value));
  }
}

const Value* NamespaceObject::Find(absl::string_view name) const {
  for (const auto& [key, value] : attrs) {
    if (key == name) return &value;
  }
  return nullptr;
}

void NamespaceObject::Set(absl::string_view name, Value value) {
  for (auto& [key, existing] : attrs) {
    if (key == name) {
      existing = std::move(value);
      return;
    }
  }
  attrs.emplace_back(std::string(name), std::move(value));
}

bool Truthy(const Value& v) {
  switch (v.type()) {
    case ValueType::kUndefined:
    case ValueType::kNone:
      return false;
    case ValueType::kBool:
      return v.as_bool();
    case ValueType::kInt:
      return v.as_int() != 0;
    case ValueType::kFloat:
      return v.as_float() != 0.0;
    case ValueType::kString:
      return !v.text().empty();
    case ValueType::kList:
      // A generator object is always true in Python.
      return v.list()->kind == ListKind::kGenerator || !v.list()->items.empty();
    case ValueType::kDict:
      return !v.dict()->entries.empty();
    default:
      return true;
  }
}

std::string TypeName(const Value& v) {
  switch (v.type()) {
    case ValueType::kUndefined:
      return "Undefined";
    case ValueType::kNone:
      return "NoneType";
    case ValueType::kBool:
      return "bool";
    case ValueType::kInt:
      return "int";
    case ValueType::kFloat:
      return "float";
    case ValueType::kString:
      return v.str().markup ? "Markup" : "str";
    case ValueType::kList:
      switch (v.list()->kind) {
        case ListKind::kList:
          return "list";
        case ListKind::kTuple:
          return "tuple";
        case ListKind::kGenerator:
          return "generator";
        case ListKind::kDictKeys:
          return "dict_keys";
        case ListKind::kDictValues:
          return "dict_values";
        case ListKind::kDictItems:
          return "dict_items";
      }
      return "list";
    case ValueType::kDict:
      return "dict";
    case ValueType::kNamespace:
      return "Namespace";
    case ValueType::kLoop:
      return "LoopContext";
    case ValueType::kCallable:
      switch (v.callable()->kind) {
        case CallableObject::Kind::kMacro:
          return "Macro";
        case CallableObject::Kind::kBuiltin:
          return "function";
        default:
          return "builtin_function_or_method";
      }
  }
  return "object";
}

std::string ObjectTypeRepr(const Value& v) {
  if (v.is_none()) return "None";
  switch (v.type()) {
    case ValueType::kNamespace:
      return "jinja2.utils.Namespace object";
    case ValueType::kLoop:
      return "jinja2.runtime.LoopContext object";
    case ValueType::kCallable:
      if (v.callable()->kind == CallableObject::Kind::kMacro) return "jinja2.runtime.Macro object";
      break;
    case ValueType::kUndefined:
      return "jinja2.runtime.Undefined object";
    case ValueType::kString:
      if (v.str().markup) return "markupsafe.Markup object";
      break;
    default:
      break;
  }
  return absl::StrCat(TypeName(v), " object");
}

std::string FormatFloat(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::scientific);
  const absl::string_view sci(buf, result.ptr - buf);  // "-1.2345e+17", "1e-05"
  std::string out;
  size_t pos = 0;
  if (sci[0] == '-') {
    out.push_back('-');
    pos = 1;
  }
  const size_t e = sci.find('e');
  std::string digits;
  for (size_t i = pos; i < e; ++i) {
    if (sci[i] != '.') digits.push_back(sci[i]);
  }
  int exponent = 0;
  std::from_chars(sci.data() + e + (sci[e + 1] == '+' ? 2 : 1), sci.data() + sci.size(), exponent);
  const int ndigits = static_cast<int>(digits.size());
  const int decpt = exponent + 1;  // digits before the decimal point
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0.";
      out.append(-decpt, '0');
      out += digits;
    } else if (decpt >= ndigits) {
      out += digits;
      out.append(decpt - ndigits, '0');
      out += ".0";
    } else {
      out += digits.substr(0, decpt);
      out += ".";
      out += digits.substr(decpt);
    }
    return out;
  }
  out.push_back(digits[0]);
  if (ndigits > 1) {
    out.push_back('.');
    out += digits.substr(1);
  }
  const int exp10 = decpt - 1;
  absl::StrAppend(&out, "e", exp10 < 0 ? "-" : "+", std::abs(exp10) < 10 ? "0" : "",
                  std::abs(exp10));
  return out;
}

namespace {

absl::Status TooDeep() {
  return Error(ErrorKind::kLimit,
               absl::StrCat("value nested deeper than ", kMaxValueDepth, " levels"));
}

absl::Status AppendRepr(const Value& v, int depth, std::string* out);

absl::Status AppendSequence(const std::vector<Value>& items, int depth, std::string* out) {
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) *out += ", ";
    QUILL_RETURN_IF_ERROR(AppendRepr(items[i], depth + 1, out));
  }
  return absl::OkStatus();
}

absl::Status AppendDict(const std::vector<std::pair<Value, Value>>& entries, int depth,
                        std::string* out) {
  *out += "{";
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i > 0) *out += ", ";
    QUILL_RETURN_IF_ERROR(AppendRepr(entries[i].first, depth + 1, out));
    *out += ": ";
    QUILL_RETURN_IF_ERROR(AppendRepr(entries[i].second, depth + 1, out));
  }
  *out += "}";
  return absl::OkStatus();
}

// str(v) for everything but strings and undefined, which ToStr handles.
absl::Status AppendStr(const Value& v, int depth, std::string* out) {
  if (depth > kMaxValueDepth) return TooDeep();
  switch (v.type()) {
    case ValueType::kNone:
      *out += "None";
      return absl::OkStatus();
    case ValueType::kBool:
      *out += v.as_bool() ? "True" : "False";
      return absl::OkStatus();
    case ValueType::kInt:
      absl::StrAppend(out, v.as_int());
      return absl::OkStatus();
    case ValueType::kFloat:
      *out += FormatFloat(v.as_float());
      return absl::OkStatus();
    case ValueType::kString:
      *out += v.text();
      return absl::OkStatus();
    case ValueType::kUndefined:
      return absl::OkStatus();
    case ValueType::kList: {
      const ListObject& list = *v.list();
      switch (list.kind) {
        case ListKind::kList:
          *out += "[";
          QUILL_RETURN_IF_ERROR(AppendSequence(list.items, depth, out));
          *out += "]";
          break;
        case ListKind::kTuple:
          *out += "(";
          QUILL_RETURN_IF_ERROR(AppendSequence(list.items, depth, out));
          *out += list.items.size() == 1 ? ",)" : ")";
          break;
        case ListKind::kGenerator:
          *out += "<generator object>";
          break;
        case ListKind::kDictKeys:
        case ListKind::kDictValues:
        case ListKind::kDictItems:
          absl::StrAppend(out, TypeName(v), "([");
          QUILL_RETURN_IF_ERROR(AppendSequence(list.items, depth, out));
          *out += "])";
          break;
      }
      return absl::OkStatus();
    }
    case ValueType::kDict:
      return AppendDict(v.dict()->entries, depth, out);
    case ValueType::kNamespace: {
      *out += "<Namespace {";
      const auto& attrs = v.ns()->attrs;
      for (size_t i = 0; i < attrs.size(); ++i) {
        if (i > 0) *out += ", ";
        *out += py::Repr(attrs[i].first);
        *out += ": ";
        QUILL_RETURN_IF_ERROR(AppendRepr(attrs[i].second, depth + 1, out));
      }
      *out += "}>";
      return absl::OkStatus();
    }
    case ValueType::kLoop: {
      const LoopObject& loop = *v.loop();
      absl::StrAppend(out, "<LoopContext ", loop.index0 + 1, "/", loop.items.size(), ">");
      return absl::OkStatus();
    }
    case ValueType::kCallable:
      if (v.callable()->kind == CallableObject::Kind::kMacro) {
        absl::StrAppend(out, "<Macro ", py::Repr(v.callable()->name), ">");
      } else {
        absl::StrAppend(out, "<built-in function ", v.callable()->name, ">");
      }
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::Status AppendRepr(const Value& v, int depth, std::string* out) {
  if (depth > kMaxValueDepth) return TooDeep();
  if (v.is_string()) {
    if (v.str().markup) {
      absl::StrAppend(out, "Markup(", py::Repr(v.text()), ")");
    } else {
      *out += py::Repr(v.text());
    }
    return absl::OkStatus();
  }
  if (v.is_undefined()) {
    *out += "Undefined";
    return absl::OkStatus();
  }
  return AppendStr(v, depth, out);
}

}  // namespace

absl::StatusOr<StrPtr> ToStr(const Value& v) {
  if (v.is_string()) return v.str_ptr();
  if (v.is_undefined()) return EmptyStr();
  std::string out;
  QUILL_RETURN_IF_ERROR(AppendStr(v, 0, &out));
  return Derived(std::move(out), HasUntrusted(v));
}

absl::StatusOr<std::string> Repr(const Value& v) {
  std::string out;
  QUILL_RETURN_IF_ERROR(AppendRepr(v, 0, &out));
  return out;
}

bool HasUntrusted(const Value& v, int depth) {
  if (depth > kMaxValueDepth) return true;
  switch (v.type()) {
    case ValueType::kString:
      return !v.str().untrusted.empty();
    case ValueType::kList:
      for (const Value& item : v.list()->items) {
        if (HasUntrusted(item, depth + 1)) return true;
      }
      return false;
    case ValueType::kDict:
      for (const auto& [key, value] : v.dict()->entries) {
        if (HasUntrusted(key, depth + 1) || HasUntrusted(value, depth + 1)) return true;
      }
      return false;
    case ValueType::kNamespace:
      for (const auto& [key, value] : v.ns()->attrs) {
        if (HasUntrusted(value, depth + 1)) return true;
      }
      return false;
    default:
      return false;
  }
}

namespace {

bool NumbersEqual(const Value& a, const Value& b) {
  if (!a.is_float() && !b.is_float()) return a.as_int() == b.as_int();
  if (a.is_float() && b.is_float()) return a.as_float() == b.as_float();
  // int vs float: exact, as Python compares them.
  const double f = a.is_float() ? a.as_float() : b.as_float();
  const int64_t i = a.is_float() ? b.as_int() : a.as_int();
  if (!std::isfinite(f) || f != std::floor(f)) return false;
  if (f < -9.2233720368547758e18 || f >= 9.2233720368547758e18) return false;
  return static_cast<int64_t>(f) == i;
}

absl::StatusOr<bool> EqualsAt(const Value& a, const Value& b, int depth) {
  if (depth > kMaxValueDepth) return TooDeep();
  if (a.is_number() && b.is_number()) return NumbersEqual(a, b);
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case ValueType::kUndefined:
    case ValueType::kNone:
      return true;
    case ValueType::kString:
      return a.text() == b.text();
    case ValueType::kList: {
      const ListObject& x = *a.list();
      const ListObject& y = *b.list();
      if (&x == &y) return true;
      const bool x_seq = x.kind == ListKind::kList || x.kind == ListKind::kTuple;
      if (!x_seq || x.kind != y.kind || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i) {
        QUILL_ASSIGN_OR_RETURN(bool eq, EqualsAt(x.items[i], y.items[i], depth + 1));
        if (!eq) return false;
      }
      return true;
    }
    case ValueType::kDict: {
      const DictObject& x = *a.dict();
      const DictObject& y = *b.dict();
      if (&x == &y) return true;
      if (x.entries.size() != y.entries.size()) return false;
      for (const auto& [key, value] : x.entries) {
        const int64_t j = y.Find(key);
        if (j < 0) return false;
        QUILL_ASSIGN_OR_RETURN(bool eq, EqualsAt(value, y.entries[j].second, depth + 1));
        if (!eq) return false;
      }
      return true;
    }
    default:
      return a.identity() == b.identity();
  }
}

absl::StatusOr<int> CompareAt(const Value& a, const Value& b, absl::string_view op, int depth) {
  if (depth > kMaxValueDepth) return TooDeep();
  if (a.is_number() && b.is_number()) {
    if (!a.is_float() && !b.is_float()) {
      return a.as_int() < b.as_int() ? -1 : (a.as_int() > b.as_int() ? 1 : 0);
    }
    const double x = a.as_float(), y = b.as_float();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.text().compare(b.text());  // UTF-8 byte order is code point order
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list() && a.list()->kind == b.list()->kind &&
      (a.list()->kind == ListKind::kList || a.list()->kind == ListKind::kTuple)) {
    const auto& x = a.list()->items;
    const auto& y = b.list()->items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      QUILL_ASSIGN_OR_RETURN(bool eq, EqualsAt(x[i], y[i], depth + 1));
      if (!eq) return CompareAt(x[i], y[i], op, depth + 1);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  return Error(ErrorKind::kType, absl::StrCat("'", op, "' not supported between instances of '",
                                              TypeName(a), "' and '", TypeName(b), "'"));
}

}  // namespace

absl::StatusOr<bool> Equals(const Value& a, const Value& b) { return EqualsAt(a, b, 0); }

absl::StatusOr<int> Compare(const Value& a, const Value& b, absl::string_view op) {
  return CompareAt(a, b, op, 0);
}

StrPtr Concat(const StrData& a, const StrData& b) {
  auto s = std::make_shared<StrData>();
  s->text.reserve(a.text.size() + b.text.size());
  s->text = a.text;
  s->text += b.text;
  s->untrusted = a.untrusted;
  s->untrusted.Append(b.untrusted, a.text.size());
  return s;
}

StrPtr Substr(const StrData& s, size_t begin, size_t end) {
  if (begin == 0 && end == s.text.size() && !s.markup) {
    // Nothing cut: share the text (the caller holds it through a Value anyway).
    return MakeStr(s.text, s.untrusted);
  }
  return MakeStr(s.text.substr(begin, end - begin), s.untrusted.Slice(begin, end));
}

StrPtr Derived(std::string text, bool any_untrusted) {
  if (!any_untrusted) return MakeStr(std::move(text));
  return MakeUntrustedStr(std::move(text));
}

}  // namespace quill::engine::chat::jinja
