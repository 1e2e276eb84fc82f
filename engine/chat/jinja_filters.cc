#include "engine/chat/jinja_filters.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/base/status_macros.h"
#include "engine/base/utf8.h"
#include "engine/chat/jinja_error.h"
#include "engine/chat/jinja_json.h"
#include "engine/chat/jinja_methods.h"
#include "engine/chat/py_string.h"

namespace quill::engine::chat::jinja {

std::string HtmlEscape(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '\'':
        out += "&#39;";
        break;
      case '"':
        out += "&#34;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

namespace {

// ---- helpers ----

absl::StatusOr<StrPtr> SoftStr(const Value& v) { return ToStr(v); }

absl::StatusOr<Value> StrValue(Runtime& rt, StrPtr s, bool markup = false) {
  if (markup && !s->markup) {
    auto copy = std::make_shared<StrData>(*s);
    copy->markup = true;
    s = std::move(copy);
  }
  return rt.NewString(std::move(s));
}

// Jinja2's make_attrgetter: "a.b.0" looked up part by part with item-then-attribute rules.
absl::StatusOr<Value> GetPath(Runtime& rt, const Value& item, const Value& attribute,
                              const std::optional<Value>& default_value = std::nullopt) {
  if (!attribute.is_string()) {
    QUILL_ASSIGN_OR_RETURN(Value v, GetItem(rt, item, attribute));
    if (default_value && v.is_undefined()) return *default_value;
    return v;
  }
  Value v = item;
  for (absl::string_view part : absl::StrSplit(attribute.text(), '.')) {
    Value key = Value::Str(std::string(part));
    if (!part.empty() && std::all_of(part.begin(), part.end(), absl::ascii_isdigit)) {
      int64_t i = 0;
      for (char c : part) i = i * 10 + (c - '0');
      key = Value::Int(i);
    }
    QUILL_ASSIGN_OR_RETURN(v, GetItem(rt, v, key));
    if (default_value && v.is_undefined()) v = *default_value;
  }
  return v;
}

Value IgnoreCase(const Value& v) {
  if (!v.is_string()) return v;
  return Value::String(MakeStr(py::Lower(v.text())));
}

// The sort key of `item`: the listed attributes ("a,b.c") or the item itself, strings
// lowercased unless case-sensitive.
absl::StatusOr<Value> SortKey(Runtime& rt, const Value& item, const std::optional<Value>& attribute,
                              bool case_sensitive, bool multi) {
  if (!attribute || attribute->is_none()) return case_sensitive ? item : IgnoreCase(item);
  if (!multi || !attribute->is_string()) {
    QUILL_ASSIGN_OR_RETURN(Value v, GetPath(rt, item, *attribute));
    return case_sensitive ? v : IgnoreCase(v);
  }
  std::vector<Value> keys;
  for (absl::string_view part : absl::StrSplit(attribute->text(), ',')) {
    QUILL_ASSIGN_OR_RETURN(Value v, GetPath(rt, item, Value::Str(std::string(part))));
    keys.push_back(case_sensitive ? v : IgnoreCase(v));
  }
  return Value::List(rt.heap().New<ListObject>(ListKind::kList, std::move(keys)));
}

// Stable sort by precomputed keys with Python ordering.
absl::StatusOr<std::vector<Value>> SortByKeys(Runtime& rt, std::vector<Value> items,
                                              std::vector<Value> keys, bool reverse) {
  QUILL_RETURN_IF_ERROR(rt.Tick(static_cast<int64_t>(items.size() * 4)));
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  absl::Status status;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (!status.ok()) return false;
    absl::StatusOr<int> c = Compare(keys[a], keys[b]);
    if (!c.ok()) {
      status = c.status();
      return false;
    }
    return reverse ? *c > 0 : *c < 0;
  });
  QUILL_RETURN_IF_ERROR(status);
  std::vector<Value> out;
  out.reserve(items.size());
  for (size_t i : order) out.push_back(std::move(items[i]));
  return out;
}

absl::StatusOr<Value> Generator(Runtime& rt, std::vector<Value> items) {
  return rt.NewList(ListKind::kGenerator, std::move(items));
}

// Python's float(str).
std::optional<double> ParseFloat(absl::string_view text) {
  size_t b = 0, e = 0;
  py::StripRange(text, nullptr, true, true, &b, &e);
  std::string s;
  const absl::string_view t = text.substr(b, e - b);
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '_') {
      if (i == 0 || i + 1 == t.size() || !absl::ascii_isdigit(t[i - 1]) ||
          !absl::ascii_isdigit(t[i + 1])) {
        return std::nullopt;
      }
      continue;
    }
    if (t[i] == 'x' || t[i] == 'X') return std::nullopt;  // no hex floats in Python
    s.push_back(t[i]);
  }
  if (s.empty()) return std::nullopt;
  const std::string lower = absl::AsciiStrToLower(s);
  const absl::string_view body = (lower[0] == '+' || lower[0] == '-')
                                     ? absl::string_view(lower).substr(1)
                                     : absl::string_view(lower);
  if (body == "inf" || body == "infinity" || body == "nan") {
    const double v = body == "nan" ? NAN : INFINITY;
    return lower[0] == '-' ? -v : v;
  }
  if (body.empty() || !(absl::ascii_isdigit(body[0]) || body[0] == '.')) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return std::nullopt;
  return v;
}

// Python's int(str, base) for base 10 (and 0/2/8/16 prefixes).
std::optional<int64_t> ParseInt(absl::string_view text, int base) {
  size_t b = 0, e = 0;
  py::StripRange(text, nullptr, true, true, &b, &e);
  absl::string_view t = text.substr(b, e - b);
  bool negative = false;
  if (!t.empty() && (t[0] == '+' || t[0] == '-')) {
    negative = t[0] == '-';
    t.remove_prefix(1);
  }
  if (t.size() >= 2 && t[0] == '0') {
    const char p = absl::ascii_tolower(t[1]);
    const int prefix_base = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
    if (prefix_base != 0 && (base == 0 || base == prefix_base)) {
      base = prefix_base;
      t.remove_prefix(2);
      if (!t.empty() && t[0] == '_') t.remove_prefix(1);
    }
  }
  if (base == 0) base = 10;
  if (t.empty()) return std::nullopt;
  unsigned __int128 v = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    const char c = absl::ascii_tolower(t[i]);
    if (c == '_' && i > 0 && i + 1 < t.size() && t[i - 1] != '_') continue;
    int d = absl::ascii_isdigit(c) ? c - '0' : (c >= 'a' && c <= 'z') ? c - 'a' + 10 : 99;
    if (d >= base) return std::nullopt;
    v = v * base + d;
    if (v > static_cast<unsigned __int128>(INT64_MAX) + 1) return std::nullopt;
  }
  if (!negative && v > static_cast<unsigned __int128>(INT64_MAX)) return std::nullopt;
  return negative ? -static_cast<int64_t>(v - 1) - 1 : static_cast<int64_t>(v);
}

// ---- filters ----

absl::StatusOr<Value> FAbs(Runtime& rt, const Value& v, CallArgs& args) {
  QUILL_RETURN_IF_ERROR(BindArgs("abs", args, {}).status());
  if (v.is_float()) return Value::Float(std::fabs(v.as_float()));
  if (v.is_int() || v.is_bool()) {
    if (v.as_int() == INT64_MIN) return Error(ErrorKind::kOverflow, "integer overflow");
    return Value::Int(std::abs(v.as_int()));
  }
  return Error(ErrorKind::kType, absl::StrCat("bad operand type for abs(): '", TypeName(v), "'"));
}

absl::StatusOr<Value> FAttr(Runtime& rt, const Value& v, CallArgs& args) {
  QUILL_ASSIGN_OR_RETURN(auto a, BindArgs("attr", args, {"name"}, 1));
  if (!a[0]->is_string()) return Error(ErrorKind::kType, "attribute name must be string");
  return GetAttrOnly(rt, v, a[0]->text());
}

template <std::string (*F)(absl::string_view)>
absl::StatusOr<Value> FCase(Runtime& rt, const Value& v, CallArgs& args) {
  QUILL_RETURN_IF_ERROR(BindArgs("case filter", args, {}).status());
  QUILL_ASSIGN_OR_RETURN(StrPtr s, SoftStr(v));
  return StrValue(rt, Derived(F(s->text), !s->untrusted.empty()), s->markup);
}

// Jinja2's |title: each word (split on whitespace, - ( { [ <) starts upper-case and
// continues lower-case.
std::string JinjaTitle(absl::string_view s) {
  std::string out;
  bool at_word_start = true;
  for (size_t pos = 0, len = 0; pos < s.size(); pos += len) {
    const uint32_t cp = py::DecodeAt(s, pos, &len);
    const bool separator =
        py::IsSpace(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
    if (separator) {
      out.append(s.data() + pos, len);
      at_word_start = true;
      continue;
    }
    AppendUtf8(at_word_start ? py::ToUpper(cp) : py::ToLower(cp), &out);
    at_word_start = false;
  }
  return out;
}

absl::StatusOr<Value> FCenter(Runtime& rt, const Value& v, CallArgs& args) {
  QUILL_ASSIGN_OR_RETURN(auto a, BindArgs("center", args, {"width"}));
  QUILL_ASSIGN_OR_RETURN(StrPtr s, SoftStr(v));
  CallArgs inner;
  inner.positional.push_back(a[0] ? *a[0] : Value::Int(80));
  return CallMethod(rt, Value::String(s), "center", inner);
}

absl::StatusOr<Value> FLength(Runtime& rt, const Value& v, CallArgs& args) {
  QUILL_RETURN_IF_ERROR(BindArgs("length", args, {}).status());
  QUILL_ASSIGN_OR_RETURN(int64_t n, Length(v));
  return Value::Int(n);
}

absl::StatusOr<Value> FDefault(Runtime& rt, const Value& v, CallArgs& args) {
  QUILL_ASSIGN_OR_RETURN(auto a, BindArgs("default", args, {"default_value", "boolean"}));
  const bool boolean = a[1] && Truthy(*a[1]);
  if (v.is_undefined() || (boolean && !Truthy(v))) {
    return a[0] ? *a[0] : Value::String(EmptyStr());
  }
  return v;
}

absl::StatusOr<Value> FDictsort(Runtime& rt, const Value& v, CallArgs& args) {
  QUILL_ASSIGN_OR_RETURN(auto a, BindArgs("dictsort", args, {"case_sensitive", "by", "reverse"}));
  const bool case_sensitive = a[0] && Truthy(*a[0]);
  const bool reverse = a[2] && Truthy(*a[2]);
  int pos = 0;
  if (a[1]) {
    if (a[1]->is_string() && a[1]->text() == "value") {
      pos = 1;
    } else if (!(a[1]->is_string() && a[1]->text() == "key")) {
      return Error(ErrorKind::kFilterArgument, "You can only sort by either \"key\" or \"value\"");
    }
  }
  if (!v.is_dict()) {
    return Error(ErrorKind::kUndefined,
                 absl::StrCat(py::Repr(ObjectTypeRepr(v)), " has no attribute 'items'"));
  }
  std::vector<Value> items, keys;
  for (const auto& [k, value] : v.dict()->entries) {
    QUILL_ASSIGN_OR_RETURN(Value pair, rt.NewList(ListKind::kTuple, {k, value}));
    items.push_back(pair);
    const Value& key = pos == 0 ? k : value;
    keys.push_back(case_sensitive ? key : IgnoreCase(key));
  }
  QUILL_ASSIGN_OR_RETURN(std::vector<Value> sorted,
                         SortByKeys(rt, std::move(items), std::move(keys), reverse));
  return rt.NewList(ListKind::kList, std::move(sorted));
}

absl::StatusOr<Value> FEscape(Runtime& rt, const Value& v, CallArgs& args) {
  QUILL_RETURN_IF_ERROR(BindArgs("escape", args, {}).status());
  if (v.is_string() && v.str().markup) return v;
  QUILL_ASSIGN_OR_RETURN(StrPtr s, SoftStr(v));
  return StrValue(rt, Derived(HtmlEscape(s->text), !s->untrusted.empty()), true);
}

absl::StatusOr<Value> FForceEscape(Runtime& rt, const Value& v, CallArgs& args) {
  QUILL_RETURN_IF_ERROR(BindArgs("forceescape", args, {}).status());
  QUILL_ASSIGN_OR_RETURN(StrPtr s, SoftStr(v));
  return StrValue(rt, Derived(HtmlEscape(s->text), !s->untrusted.empty()), true);
}

absl::StatusOr<Value> FFirst(Runtime& rt, const Value& v, CallArgs& args) {
  QUILL_RETURN_IF_ERROR(BindArgs("first", args, {}).status());
  QUILL_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(rt, v));
  if (items.empty()) return rt.Undefined("No first item, sequence was empty.");
  return items.front();
}

absl::StatusOr<Value> FLast(Runtime& rt, const Value& v, CallArgs& args) {
  QUILL_RETURN_IF_ERROR(BindArgs("last", args, {}).status());
  if (v.is_list() && v.list()->kind == ListKind::kGenerator) {
    return Error(ErrorKind::kType, "'generator' object is not reversible");
  }
  QUILL_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(rt, v));
  if (items.empty()) return rt.Undefined("No last item, sequence was empty.");
  return items.back();
}

absl::StatusOr<Value> FFloat(Runtime& rt, const Value& v, CallArgs& args) {
  QUILL_ASSIGN_OR_RETURN(auto a, BindArgs("float", args, {"default"}));
  if (v.is_number()) return Value::Float(v.as_float());
  if (v.is_string()) {
    if (std::optional<double> f = ParseFloat(v.text())) return Value::Float(*f);
  }
  return a[0] ? *a[0] : Value::Float(0.0);
}

absl::StatusOr<Value> FInt(Runtime& rt, const Value& v, CallArgs& args) {
  QUILL_ASSIGN_OR_RETURN(auto a, BindArgs("int", args, {"default", "base"}));
  const Value fallback = a[0] ? *a[0] : Value::Int(0);
  int base = 10;
  if (a[1]) {
    QUILL_ASSIGN_OR_RETURN(int64_t b, ToIndex(*a[1], "base"));
    base = static_cast<int>(b);
  }
  const auto from_float = [&](double f) -> Value {
    if (!std::isfinite(f) || std::fabs(f) >= 9.2e18) return fallback;
    return Value::Int(static_cast<int64_t>(std::trunc(f)));
  };
  if (v.is_int() || v.is_bool()) return Value::Int(v.as_int());
  if (v.is_float()) return from_float(v.as_float());
  if (v.is_string()) {
    if (std::optional<int64_t> i = ParseInt(v.text(), base)) return Value::Int(*i);
    // "42.23"|int is 42: Jinja2 falls back to int(float(value)).
    if (std::optional<double> f = ParseFloat(v.text())) return from_float(*f);
  }
  return fallback;
}

absl::StatusOr<Value> FIndent(Runtime& rt, const Value& v, CallArgs& args) {
  QUILL_ASSIGN_OR_RETURN(auto a, BindArgs("indent", args, {"width", "first", "blank"}));
  std::string indention = "    ";
  if (a[0]) {
    if (a[0]->is_string()) {
      indention = a[0]->text();
    } else {
      QUILL_ASSIGN_OR_RETURN(int64_t width, ToIndex(*a[0], "indent width"));
      QUILL_RETURN_IF_ERROR(rt.Charge(std::max<int64_t>(0, width)));
      indention = std::string(static_cast<size_t>(std::max<int64_t>(0, width)), ' ');
    }
  }
  const bool first = a[1] && Truthy(*a[1]);
  const bool blank = a[2] && Truthy(*a[2]);
  QUILL_ASSIGN_OR_RETURN(StrPtr s, SoftStr(v));
  const std::string text = s->text + "\n";  // Jinja2's quirk for splitlines()
  const auto lines = py::SplitLines(text);
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    const absl::string_view line =
        absl::string_view(text).substr(lines[i].first, lines[i].second - lines[i].first);
    if (i > 0) {
      out.push_back('\n');
      if (blank || !line.empty()) out += indention;
    }
    out.append(line.data(), line.size());
    QUILL_RETURN_IF_ERROR(rt.Charge(static_cast<int64_t>(line.size() + indention.size())));
  }
  if (first) out = indention + out;
  return StrValue(rt,
                  Derived(std::move(out), !s->untrusted.empty() || (a[0] && HasUntrusted(*a[0]))),
                  s->markup);
}

absl::StatusOr<Value> FJoin(Runtime& rt, const Value& v, CallArgs& args) {
  QUILL_ASSIGN_OR_RETURN(auto a, BindArgs("join", args, {"d", "attribute"}));
  StrPtr sep = EmptyStr();
  if (a[0]) {
    QUILL_ASSIGN_OR_RETURN(sep, SoftStr(*a[0]));
  }
  QUILL_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(rt, v));
  auto out = std::make_shared<StrData>();
  for (size_t i = 0; i < items.size(); ++i) {
    Value item = items[i];
    if (a[1] && !a[1]->is_none()) {
      QUILL_ASSIGN_OR_RETURN(item, GetPath(rt, item, *a[1]));
    }
    QUILL_ASSIGN_OR_RETURN(StrPtr s, SoftStr(item));
    if (i > 0) {
      out->untrusted.Append(sep->untrusted, out->text.size());
      out->text += sep->text;
    }
    out->untrusted.Append(s->untrusted, out->text.size());
    out->text += s->text;
    QUILL_RETURN_IF_ERROR(rt.Charge(static_cast<int64_t>(s->text.size() + sep->text.size())));
  }
  return rt.NewString(std::move(out));
}

absl::StatusOr<Value> FList(Runtime& rt, const Value& v, CallArgs& args) {
  QUILL_RETURN_IF_ERROR(BindArgs("list", args, {}).status());
  QUILL_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(rt, v));
  return rt.NewList(ListKind::kList, std::move(items));
}

absl::StatusOr<Value> FItems(Runtime& rt, const Value& v, CallArgs& args) {
  QUILL_RETURN_IF_ERROR(BindArgs("items", args, {}).status());
  if (v.is_undefined()) return Generator(rt, {});
  if (!v.is_dict()) return Error(ErrorKind::kType, "Can only get item pairs from a mapping.");
  std::vector<Value> items;
  for (const auto& [k, value] : v.dict()->entries) {
    QUILL_ASSIGN_OR_RETURN(Value pair, rt.NewList(ListKind::kTuple, {k, value}));
    items.push_back(std::move(pair));
  }
  return Generator(rt, std::move(items));
}

absl::StatusOr<Value> FMap(Runtime& rt, const Value& v, CallArgs& args) {
  if (!Truthy(v)) return Generator(rt, {});
  QUILL_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(rt, v));
  std::vector<Value> out;
  out.reserve(items.size());
  if (args.positional.empty()) {
    std::optional<Value> attribute, default_value;
    for (const auto& [k, value] : args.keywords) {
      if (k == "attribute") {
        attribute = value;
      } else if (k == "default") {
        default_value = value;
      } else {
        return Error(ErrorKind::kFilterArgument,
                     absl::StrCat("Unexpected keyword argument ", py::Repr(k)));
      }
    }
    if (!attribute) return Error(ErrorKind::kFilterArgument, "map requires a filter argument");
    for (const Value& item : items) {
      QUILL_ASSIGN_OR_RETURN(Value x, GetPath(rt, item, *attribute, default_value));
      out.push_back(std::move(x));
    }
    return Generator(rt, std::move(out));
  }
  const Value name = args.positional[0];
  if (!name.is_string())
    return Error(ErrorKind::kFilterArgument, "map: filter name must be a string");
  const FilterDef* filter = FindFilter(name.text());
  if (filter == nullptr) {
    return Error(ErrorKind::kRuntime, absl::StrCat("No filter named ", py::Repr(name.text()), "."));
  }
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keywords = args.keywords;
  for (const Value& item : items) {
    CallArgs call = rest;
    QUILL_ASSIGN_OR_RETURN(Value x, ApplyFilter(rt, *filter, item, call));
    out.push_back(std::move(x));
  }
  return Generator(rt, std::move(out));
}

template <bool kMax>
absl::StatusOr<Value> FMinMax(Runtime& rt, const Value& v, CallArgs& args) {
  QUILL_ASSIGN_OR_RETURN(auto a,
                         BindArgs(kMax ? "max" : "min", args, {"case_sensitive", "attribute"}));
  const bool case_sensitive = a[0] && Truthy(*a[0]);
  QUILL_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(rt, v));
  if (items.empty()) return rt.Undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  QUILL_ASSIGN_OR_RETURN(Value best_key, SortKey(rt, items[0], a[1], case_sensitive, false));
  for (size_t i = 1; i < items.size(); ++i) {
    QUILL_ASSIGN_OR_RETURN(Value key, SortKey(rt, items[i], a[1], case_sensitive, false));
    QUILL_ASSIGN_OR_RETURN(int c, Compare(key, best_key, kMax ? ">" : "<"));
    if (kMax ? c > 0 : c < 0) {
      best = i;
      best_key = key;
    }
  }
  return items[best];
}

// select/reject/selectattr/rejectattr.
template <bool kSelect, bool kAttr>
absl::StatusOr<Value> FSelect(Runtime& rt, const Value& v, CallArgs& args) {
  if (!Truthy(v)) return Generator(rt, {});
  size_t next = 0;
  std::optional<Value> attribute;
  if (kAttr) {
    if (args.positional.empty()) {
      return Error(ErrorKind::kFilterArgument, "Missing parameter for attribute name");
    }
    attribute = args.positional[next++];
  }
  const TestDef* test = nullptr;
  if (next < args.positional.size()) {
    const Value& name = args.positional[next++];
    if (!name.is_string() || (test = FindTest(name.text())) == nullptr) {
      QUILL_ASSIGN_OR_RETURN(StrPtr n, SoftStr(name));
      return Error(ErrorKind::kRuntime, absl::StrCat("No test named ", py::Repr(n->text), "."));
    }
  }
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + next, args.positional.end());
  rest.keywords = args.keywords;
  QUILL_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(rt, v));
  std::vector<Value> out;
  for (const Value& item : items) {
    Value x = item;
    if (attribute) {
      QUILL_ASSIGN_OR_RETURN(x, GetPath(rt, item, *attribute));
    }
    bool pass = false;
    if (test) {
      CallArgs call = rest;
      QUILL_ASSIGN_OR_RETURN(pass, ApplyTest(rt, *test, x, call));
    } else {
      pass = Truthy(x);
    }
    if (pass == kSelect) out.push_back(item);
  }
  QUILL_RETURN_IF_ERROR(rt.Tick(static_cast<int64_t>(items.size())));
  return Generator(rt, std::move(out));
}

absl::StatusOr<Value> FReplace(Runtime& rt, const Value& v, CallArgs& args) {
  QUILL_ASSIGN_OR_RETURN(auto a, BindArgs("replace", args, {"old", "new", "count"}, 2));
  QUILL_ASSIGN_OR_RETURN(StrPtr s, SoftStr(v));
  QUILL_ASSIGN_OR_RETURN(StrPtr from, SoftStr(*a[0]));
  QUILL_ASSIGN_OR_RETURN(StrPtr to, SoftStr(*a[1]));
  CallArgs inner;
  inner.positional = {Value::String(from), Value::String(to)};
  if (a[2] && !a[2]->is_none()) inner.positional.push_back(*a[2]);
  return CallMethod(rt, Value::String(s), "replace", inner);
}

absl::StatusOr<Value> FReverse(Runtime& rt, const Value& v, CallArgs& args) {
  QUILL_RETURN_IF_ERROR(BindArgs("reverse", args, {}).status());
  if (v.is_string()) {
    const Value minus_one = Value::Int(-1);
    return GetSlice(rt, v, nullptr, nullptr, &minus_one);
  }
  if (v.is_list() && v.list()->kind == ListKind::kGenerator) {
    return Error(ErrorKind::kType, "'generator' object is not reversible");
  }
  QUILL_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(rt, v));
  std::reverse(items.begin(), items.end());
  return Generator(rt, std::move(items));  // a reverse iterator, like reversed()
}

absl::StatusOr<Value> FRound(Runtime& rt, const Value& v, CallArgs& args) {
  QUILL_ASSIGN_OR_RETURN(auto a, BindArgs("round", args, {"precision", "method"}));
  int64_t precision = 0;
  if (a[0]) {
    QUILL_ASSIGN_OR_RETURN(precision, ToIndex(*a[0], "precision"));
  }
  std::string method = "common";
  if (a[1]) {
    if (!a[1]->is_string())
      return Error(ErrorKind::kFilterArgument, "method must be common, ceil or floor");
    method = a[1]->text();
  }
  if (method != "common" && method != "ceil" && method != "floor") {
    return Error(ErrorKind::kFilterArgument, "method must be common, ceil or floor");
  }
  if (!v.is_number()) {
    return Error(ErrorKind::kType,
                 absl::StrCat("type ", TypeName(v), " doesn't define __round__ method"));
  }
  if (method == "common" && !v.is_float()) return Value::Int(v.as_int());
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = v.as_float() * scale;
  double r = method == "ceil"    ? std::ceil(x)
             : method == "floor" ? std::floor(x)
                                 : std::nearbyint(x);
  return Value::Float(r / scale);
}

absl::StatusOr<Value> FSafe(Runtime& rt, const Value& v, CallArgs& args) {
  QUILL_RETURN_IF_ERROR(BindArgs("safe", args, {}).status());
  QUILL_ASSIGN_OR_RETURN(StrPtr s, SoftStr(v));
  return StrValue(rt, s, true);
}

absl::StatusOr<Value> FSort(Runtime& rt, const Value& v, CallArgs& args) {
  QUILL_ASSIGN_OR_RETURN(auto a,
                         BindArgs("sort", args, {"reverse", "case_sensitive", "attribute"}));
  const bool reverse = a[0] && Truthy(*a[0]);
  const bool case_sensitive = a[1] && Truthy(*a[1]);
  QUILL_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(rt, v));
  std::vector<Value> keys;
  keys.reserve(items.size());
  for (const Value& item : items) {
    QUILL_ASSIGN_OR_RETURN(Value key, SortKey(rt, item, a[2], case_sensitive, true));
    keys.push_back(std::move(key));
  }
  QUILL_ASSIGN_OR_RETURN(std::vector<Value> sorted,
                         SortByKeys(rt, std::move(items), std::move(keys), reverse));
  return rt.NewList(ListKind::kList, std::move(sorted));
}

absl::StatusOr<Value> FString(Runtime& rt, const Value& v, CallArgs& args) {
  QUILL_RETURN_IF_ERROR(BindArgs("string", args, {}).status());
  if (v.is_string()) return v;
  QUILL_ASSIGN_OR_RETURN(StrPtr s, SoftStr(v));
  return rt.NewString(std::move(s));
}

absl::StatusOr<Value> FSum(Runtime& rt, const Value& v, CallArgs& args) {
  QUILL_ASSIGN_OR_RETURN(auto a, BindArgs("sum", args, {"attribute", "start"}));
  Value total = a[1] ? *a[1] : Value::Int(0);
  QUILL_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(rt, v));
  for (const Value& item : items) {
    Value x = item;
    if (a[0] && !a[0]->is_none()) {
      QUILL_ASSIGN_OR_RETURN(x, GetPath(rt, item, *a[0]));
    }
    if (!total.is_number() || !x.is_number()) {
      return Error(ErrorKind::kType, absl::StrCat("unsupported operand type(s) for +: '",
                                                  TypeName(total), "' and '", TypeName(x), "'"));
    }
    if (total.is_float() || x.is_float()) {
      total = Value::Float(total.as_float() + x.as_float());
    } else {
      int64_t r = 0;
      if (__builtin_add_overflow(total.as_int(), x.as_int(), &r)) {
        return Error(ErrorKind::kOverflow, "integer overflow");
      }
      total = Value::Int(r);
    }
  }
  return total;
}

absl::StatusOr<Value> FTrim(Runtime& rt, const Value& v, CallArgs& args) {
  QUILL_ASSIGN_OR_RETURN(auto a, BindArgs("trim", args, {"chars"}));
  QUILL_ASSIGN_OR_RETURN(StrPtr s, SoftStr(v));
  CallArgs inner;
  if (a[0]) inner.positional.push_back(*a[0]);
  QUILL_ASSIGN_OR_RETURN(Value r, CallMethod(rt, Value::String(s), "strip", inner));
  return StrValue(rt, r.str_ptr(), s->markup);
}

absl::StatusOr<Value> FTruncate(Runtime& rt, const Value& v, CallArgs& args) {
  QUILL_ASSIGN_OR_RETURN(auto a,
                         BindArgs("truncate", args, {"length", "killwords", "end", "leeway"}));
  int64_t length = 255, leeway = 5;
  if (a[0]) {
    QUILL_ASSIGN_OR_RETURN(length, ToIndex(*a[0], "length"));
  }
  if (a[3] && !a[3]->is_none()) {
    QUILL_ASSIGN_OR_RETURN(leeway, ToIndex(*a[3], "leeway"));
  }
  const bool killwords = a[1] && Truthy(*a[1]);
  StrPtr end = MakeStr("...");
  if (a[2]) {
    QUILL_ASSIGN_OR_RETURN(end, SoftStr(*a[2]));
  }
  QUILL_ASSIGN_OR_RETURN(StrPtr s, SoftStr(v));
  const std::vector<size_t> off = py::CodePointOffsets(s->text);
  const int64_t n = static_cast<int64_t>(off.size()) - 1;
  const int64_t end_len = static_cast<int64_t>(py::CodePointCount(end->text));
  if (length < end_len) {
    return Error(ErrorKind::kValue, absl::StrCat("expected length >= ", end_len, ", got ", length));
  }
  if (n <= length + leeway) return Value::String(s);
  const int64_t keep = length - end_len;
  size_t cut = off[std::min(keep, n)];
  if (!killwords) {
    const size_t space = s->text.rfind(' ', cut == 0 ? 0 : cut - 1);
    if (space != std::string::npos && space < cut) cut = space;
  }
  return rt.NewString(Concat(*Substr(*s, 0, cut), *end));
}

absl::StatusOr<Value> FUnique(Runtime& rt, const Value& v, CallArgs& args) {
  QUILL_ASSIGN_OR_RETURN(auto a, BindArgs("unique", args, {"case_sensitive", "attribute"}));
  const bool case_sensitive = a[0] && Truthy(*a[0]);
  QUILL_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(rt, v));
  std::vector<Value> out, seen;
  QUILL_RETURN_IF_ERROR(rt.Tick(static_cast<int64_t>(items.size() * items.size() / 16)));
  for (const Value& item : items) {
    QUILL_ASSIGN_OR_RETURN(Value key, SortKey(rt, item, a[1], case_sensitive, false));
    if (key.is_list() || key.is_dict()) {
      return Error(ErrorKind::kType, absl::StrCat("unhashable type: '", TypeName(key), "'"));
    }
    bool found = false;
    for (const Value& s : seen) {
      QUILL_ASSIGN_OR_RETURN(bool eq, Equals(s, key));
      if (eq) {
        found = true;
        break;
      }
    }
    if (found) continue;
    seen.push_back(key);
    out.push_back(item);
  }
  return Generator(rt, std::move(out));
}

absl::StatusOr<Value> FWordcount(Runtime& rt, const Value& v, CallArgs& args) {
  QUILL_RETURN_IF_ERROR(BindArgs("wordcount", args, {}).status());
  QUILL_ASSIGN_OR_RETURN(StrPtr s, SoftStr(v));
  int64_t words = 0;
  bool in_word = false;
  for (size_t pos = 0, len = 0; pos < s->text.size(); pos += len) {
    const uint32_t cp = py::DecodeAt(s->text, pos, &len);
    const bool word = py::IsAlpha(cp) || py::IsDigit(cp) || cp == '_';
    if (word && !in_word) ++words;
    in_word = word;
  }
  return Value::Int(words);
}

// Hugging Face's tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None,
// sort_keys=False).
absl::StatusOr<Value> FToJson(Runtime& rt, const Value& v, CallArgs& args) {
  QUILL_ASSIGN_OR_RETURN(
      auto a, BindArgs("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"}));
  JsonDumpOptions options;
  options.ensure_ascii = a[0] && Truthy(*a[0]);
  options.sort_keys = a[3] && Truthy(*a[3]);
  if (a[1] && !a[1]->is_none()) {
    if (a[1]->is_string()) {
      options.indent = a[1]->text();
    } else {
      QUILL_ASSIGN_OR_RETURN(int64_t n, ToIndex(*a[1], "indent"));
      options.indent = std::string(static_cast<size_t>(std::clamp<int64_t>(n, 0, 1024)), ' ');
    }
  }
  if (a[2] && !a[2]->is_none()) {
    QUILL_ASSIGN_OR_RETURN(std::vector<Value> seps, Iterate(rt, *a[2]));
    if (seps.size() != 2 || !seps[0].is_string() || !seps[1].is_string()) {
      return Error(ErrorKind::kValue, "separators must be a pair of strings");
    }
    options.item_separator = seps[0].text();
    options.key_separator = seps[1].text();
  }
  QUILL_ASSIGN_OR_RETURN(StrPtr json, DumpJson(v, options));
  QUILL_RETURN_IF_ERROR(rt.Tick(static_cast<int64_t>(json->text.size() / 64)));
  return rt.NewString(std::move(json));
}

// ---- tests ----

absl::StatusOr<int64_t> ModOf(Runtime& rt, const Value& v, const Value& divisor) {
  if (v.is_undefined()) return rt.UndefinedError(v);
  if (!(v.is_int() || v.is_bool()) || !(divisor.is_int() || divisor.is_bool())) {
    if (v.is_number() && divisor.is_number()) {
      if (divisor.as_float() == 0) return Error(ErrorKind::kZeroDivision, "float modulo");
      const double m = std::fmod(v.as_float(), divisor.as_float());
      return m == 0 ? 0 : 1;  // only zero-ness and parity matter to the tests
    }
    return Error(ErrorKind::kType, absl::StrCat("unsupported operand type(s) for %: '", TypeName(v),
                                                "' and '", TypeName(divisor), "'"));
  }
  if (divisor.as_int() == 0) {
    return Error(ErrorKind::kZeroDivision, "integer division or modulo by zero");
  }
  const int64_t r = v.as_int() % divisor.as_int();
  return (r != 0 && ((r < 0) != (divisor.as_int() < 0))) ? r + divisor.as_int() : r;
}

absl::StatusOr<bool> TOdd(Runtime& rt, const Value& v, CallArgs& args) {
  QUILL_RETURN_IF_ERROR(BindArgs("odd", args, {}).status());
  QUILL_ASSIGN_OR_RETURN(int64_t m, ModOf(rt, v, Value::Int(2)));
  return m == 1;
}

absl::StatusOr<bool> TEven(Runtime& rt, const Value& v, CallArgs& args) {
  QUILL_RETURN_IF_ERROR(BindArgs("even", args, {}).status());
  QUILL_ASSIGN_OR_RETURN(int64_t m, ModOf(rt, v, Value::Int(2)));
  return m == 0;
}

absl::StatusOr<bool> TDivisibleBy(Runtime& rt, const Value& v, CallArgs& args) {
  QUILL_ASSIGN_OR_RETURN(auto a, BindArgs("divisibleby", args, {"num"}, 1));
  QUILL_ASSIGN_OR_RETURN(int64_t m, ModOf(rt, v, *a[0]));
  return m == 0;
}

#define QUILL_SIMPLE_TEST(Name, expr)                                      \
  absl::StatusOr<bool> Name(Runtime& rt, const Value& v, CallArgs& args) { \
    QUILL_RETURN_IF_ERROR(BindArgs(#Name, args, {}).status());             \
    return (expr);                                                         \
  }
QUILL_SIMPLE_TEST(TDefined, !v.is_undefined())
QUILL_SIMPLE_TEST(TUndefined, v.is_undefined())
QUILL_SIMPLE_TEST(TNone, v.is_none())
QUILL_SIMPLE_TEST(TBoolean, v.is_bool())
QUILL_SIMPLE_TEST(TFalse, v.is_bool() && !v.as_bool())
QUILL_SIMPLE_TEST(TTrue, v.is_bool() && v.as_bool())
QUILL_SIMPLE_TEST(TInteger, v.is_int())
QUILL_SIMPLE_TEST(TFloat, v.is_float())
QUILL_SIMPLE_TEST(TString, v.is_string())
QUILL_SIMPLE_TEST(TMapping, v.is_dict())
QUILL_SIMPLE_TEST(TNumber, v.is_number())
QUILL_SIMPLE_TEST(TEscaped, v.is_string() && v.str().markup)
// len() and __getitem__: str, list, tuple, dict, and Jinja2's Undefined (which defines both).
QUILL_SIMPLE_TEST(TSequence, v.is_string() || v.is_dict() || v.is_undefined() ||
                                 (v.is_list() && (v.list()->kind == ListKind::kList ||
                                                  v.list()->kind == ListKind::kTuple)))
// iter() works: also on Undefined, generators and the loop object.
QUILL_SIMPLE_TEST(TIterable, v.is_string() || v.is_dict() || v.is_undefined() || v.is_list() ||
                                 v.type() == ValueType::kLoop)
// Undefined defines __call__ (it raises), so Python's callable() is true for it.
QUILL_SIMPLE_TEST(TCallable, v.type() == ValueType::kCallable || v.is_undefined())
#undef QUILL_SIMPLE_TEST

absl::StatusOr<bool> TLower(Runtime& rt, const Value& v, CallArgs& args) {
  QUILL_RETURN_IF_ERROR(BindArgs("lower", args, {}).status());
  QUILL_ASSIGN_OR_RETURN(StrPtr s, SoftStr(v));
  return py::IsLower(s->text);
}

absl::StatusOr<bool> TUpper(Runtime& rt, const Value& v, CallArgs& args) {
  QUILL_RETURN_IF_ERROR(BindArgs("upper", args, {}).status());
  QUILL_ASSIGN_OR_RETURN(StrPtr s, SoftStr(v));
  return py::IsUpper(s->text);
}

absl::StatusOr<bool> TFilter(Runtime& rt, const Value& v, CallArgs& args) {
  QUILL_RETURN_IF_ERROR(BindArgs("filter", args, {}).status());
  if (!v.is_string()) return false;
  const FilterDef* f = FindFilter(v.text());
  return f != nullptr && f->fn != nullptr;
}

absl::StatusOr<bool> TTest(Runtime& rt, const Value& v, CallArgs& args) {
  QUILL_RETURN_IF_ERROR(BindArgs("test", args, {}).status());
  return v.is_string() && FindTest(v.text()) != nullptr;
}

absl::StatusOr<bool> TSameAs(Runtime& rt, const Value& v, CallArgs& args) {
  QUILL_ASSIGN_OR_RETURN(auto a, BindArgs("sameas", args, {"other"}, 1));
  const Value& o = *a[0];
  if (v.identity() != nullptr || o.identity() != nullptr) return v.identity() == o.identity();
  if (v.type() != o.type()) return false;
  if (v.is_string()) return v.str_ptr() == o.str_ptr();
  QUILL_ASSIGN_OR_RETURN(bool eq, Equals(v, o));
  return eq;
}

absl::StatusOr<bool> TIn(Runtime& rt, const Value& v, CallArgs& args) {
  QUILL_ASSIGN_OR_RETURN(auto a, BindArgs("in", args, {"seq"}, 1));
  return Contains(rt, *a[0], v);
}

template <int kOp>  // 0 ==, 1 !=, 2 >, 3 >=, 4 <, 5 <=
absl::StatusOr<bool> TCompare(Runtime& rt, const Value& v, CallArgs& args) {
  QUILL_ASSIGN_OR_RETURN(auto a, BindArgs("compare", args, {"other"}, 1));
  if (kOp <= 1) {
    QUILL_ASSIGN_OR_RETURN(bool eq, Equals(v, *a[0]));
    return kOp == 0 ? eq : !eq;
  }
  if (v.is_undefined()) return rt.UndefinedError(v);
  if (a[0]->is_undefined()) return rt.UndefinedError(*a[0]);
  static constexpr absl::string_view kNames[] = {"==", "!=", ">", ">=", "<", "<="};
  QUILL_ASSIGN_OR_RETURN(int c, Compare(v, *a[0], kNames[kOp]));
  switch (kOp) {
    case 2:
      return c > 0;
    case 3:
      return c >= 0;
    case 4:
      return c < 0;
    default:
      return c <= 0;
  }
}

constexpr FilterDef kFilters[] = {
    {"abs", FAbs},
    {"attr", FAttr},
    {"batch", nullptr},
    {"capitalize", FCase<py::Capitalize>},
    {"center", FCenter},
    {"count", FLength},
    {"d", FDefault},
    {"default", FDefault},
    {"dictsort", FDictsort},
    {"e", FEscape},
    {"escape", FEscape},
    {"filesizeformat", nullptr},
    {"first", FFirst},
    {"float", FFloat},
    {"forceescape", FForceEscape},
    {"format", nullptr},
    {"groupby", nullptr},
    {"indent", FIndent},
    {"int", FInt},
    {"items", FItems},
    {"join", FJoin},
    {"last", FLast},
    {"length", FLength},
    {"list", FList},
    {"lower", FCase<py::Lower>},
    {"map", FMap},
    {"max", FMinMax<true>},
    {"min", FMinMax<false>},
    {"pprint", nullptr},
    {"random", nullptr},
    {"reject", FSelect<false, false>},
    {"rejectattr", FSelect<false, true>},
    {"replace", FReplace},
    {"reverse", FReverse},
    {"round", FRound},
    {"safe", FSafe},
    {"select", FSelect<true, false>},
    {"selectattr", FSelect<true, true>},
    {"slice", nullptr},
    {"sort", FSort},
    {"string", FString},
    {"striptags", nullptr},
    {"sum", FSum},
    {"title", FCase<JinjaTitle>},
    {"tojson", FToJson},
    {"trim", FTrim},
    {"truncate", FTruncate},
    {"unique", FUnique},
    {"upper", FCase<py::Upper>},
    {"urlencode", nullptr},
    {"urlize", nullptr},
    {"wordcount", FWordcount},
    {"wordwrap", nullptr},
    {"xmlattr", nullptr},
};

constexpr TestDef kTests[] = {
    {"odd", TOdd},
    {"even", TEven},
    {"divisibleby", TDivisibleBy},
    {"defined", TDefined},
    {"undefined", TUndefined},
    {"filter", TFilter},
    {"test", TTest},
    {"none", TNone},
    {"boolean", TBoolean},
    {"false", TFalse},
    {"true", TTrue},
    {"integer", TInteger},
    {"float", TFloat},
    {"lower", TLower},
    {"upper", TUpper},
    {"string", TString},
    {"mapping", TMapping},
    {"number", TNumber},
    {"sequence", TSequence},
    {"iterable", TIterable},
    {"callable", TCallable},
    {"sameas", TSameAs},
    {"escaped", TEscaped},
    {"in", TIn},
    {"==", TCompare<0>},
    {"eq", TCompare<0>},
    {"equalto", TCompare<0>},
    {"!=", TCompare<1>},
    {"ne", TCompare<1>},
    {">", TCompare<2>},
    {"gt", TCompare<2>},
    {"greaterthan", TCompare<2>},
    {">=", TCompare<3>},
    {"ge", TCompare<3>},
    {"<", TCompare<4>},
    {"lt", TCompare<4>},
    {"lessthan", TCompare<4>},
    {"<=", TCompare<5>},
    {"le", TCompare<5>},
};

}  // namespace

const FilterDef* FindFilter(absl::string_view name) {
  for (const FilterDef& f : kFilters) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

const TestDef* FindTest(absl::string_view name) {
  for (const TestDef& t : kTests) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

absl::StatusOr<Value> ApplyFilter(Runtime& rt, const FilterDef& filter, const Value& value,
                                  CallArgs& args) {
  if (filter.fn == nullptr) {
    return Error(ErrorKind::kUnsupported,
                 absl::StrCat("the '", filter.name, "' filter is not supported"));
  }
  QUILL_RETURN_IF_ERROR(rt.Tick());
  return filter.fn(rt, value, args);
}

absl::StatusOr<bool> ApplyTest(Runtime& rt, const TestDef& test, const Value& value,
                               CallArgs& args) {
  QUILL_RETURN_IF_ERROR(rt.Tick());
  return test.fn(rt, value, args);
}

}  // namespace quill::engine::chat::jinja
