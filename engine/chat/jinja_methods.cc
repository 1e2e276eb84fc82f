#include "engine/chat/jinja_methods.h"

#include <algorithm>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/base/utf8.h"
#include "engine/chat/jinja_error.h"
#include "engine/chat/py_string.h"

namespace quill::engine::chat::jinja {
namespace {

enum class Safety { kNone, kSafe, kUnsafe, kUnsupported };

// Python's methods of each builtin type. Unsafe ones mutate (the sandbox refuses them);
// unsupported ones exist in Python but not here (calling them fails clearly).
Safety StrMethodSafety(absl::string_view name) {
  static constexpr absl::string_view kSupported[] = {
      "capitalize", "casefold", "center",     "count",      "endswith",     "find",
      "format",     "index",    "isalnum",    "isalpha",    "isascii",      "isdecimal",
      "isdigit",    "islower",  "isnumeric",  "isspace",    "isupper",      "join",
      "ljust",      "lower",    "lstrip",     "partition",  "removeprefix", "removesuffix",
      "replace",    "rfind",    "rindex",     "rjust",      "rpartition",   "rsplit",
      "rstrip",     "split",    "splitlines", "startswith", "strip",        "swapcase",
      "title",      "upper",    "zfill"};
  static constexpr absl::string_view kUnsupported[] = {"encode",       "expandtabs",  "format_map",
                                                       "isidentifier", "isprintable", "istitle",
                                                       "maketrans",    "translate"};
  for (absl::string_view m : kSupported) {
    if (m == name) return Safety::kSafe;
  }
  for (absl::string_view m : kUnsupported) {
    if (m == name) return Safety::kUnsupported;
  }
  return Safety::kNone;
}

Safety DictMethodSafety(absl::string_view name) {
  if (name == "get" || name == "items" || name == "keys" || name == "values" || name == "copy") {
    return Safety::kSafe;
  }
  if (name == "clear" || name == "pop" || name == "popitem" || name == "setdefault" ||
      name == "update") {
    return Safety::kUnsafe;
  }
  if (name == "fromkeys") return Safety::kUnsupported;
  return Safety::kNone;
}

Safety ListMethodSafety(const ListObject& list, absl::string_view name) {
  if (list.kind == ListKind::kTuple) {
    return (name == "count" || name == "index") ? Safety::kSafe : Safety::kNone;
  }
  if (list.kind != ListKind::kList) return Safety::kNone;
  if (name == "count" || name == "index" || name == "copy" || name == "pop" || name == "clear") {
    return Safety::kSafe;
  }
  if (name == "append" || name == "extend" || name == "insert" || name == "remove" ||
      name == "reverse" || name == "sort") {
    return Safety::kUnsafe;
  }
  return Safety::kNone;
}

Safety MethodSafety(const Value& obj, absl::string_view name) {
  switch (obj.type()) {
    case ValueType::kString:
      return StrMethodSafety(name);
    case ValueType::kDict:
      return DictMethodSafety(name);
    case ValueType::kList:
      return ListMethodSafety(*obj.list(), name);
    case ValueType::kLoop:
      return (name == "cycle" || name == "changed") ? Safety::kSafe : Safety::kNone;
    default:
      return Safety::kNone;
  }
}

Value Unsafe(Runtime& rt, const Value& obj, absl::string_view name) {
  return rt.Undefined(absl::StrCat("access to attribute ", py::Repr(name), " of ",
                                   py::Repr(TypeName(obj)), " object is unsafe."),
                      /*security=*/true);
}

// Python attributes of a value (methods, namespace attributes, loop fields); nullopt if
// it has none of that name.
std::optional<Value> LookupAttribute(Runtime& rt, const Value& obj, absl::string_view name) {
  if (absl::StartsWith(name, "__")) return Unsafe(rt, obj, name);
  const Safety safety = MethodSafety(obj, name);
  if (safety == Safety::kUnsafe) return Unsafe(rt, obj, name);
  if (safety != Safety::kNone) {
    return Value::Callable(rt.heap().New<MethodObject>(name, obj));
  }
  if (obj.type() == ValueType::kNamespace) {
    if (const Value* v = obj.ns()->Find(name)) return *v;
    return std::nullopt;
  }
  if (obj.type() == ValueType::kLoop) {
    const LoopObject& loop = *obj.loop();
    const int64_t index0 = static_cast<int64_t>(loop.index0);
    const int64_t length = static_cast<int64_t>(loop.items.size());
    if (name == "index") return Value::Int(index0 + 1);
    if (name == "index0") return Value::Int(index0);
    if (name == "revindex") return Value::Int(length - index0);
    if (name == "revindex0") return Value::Int(length - index0 - 1);
    if (name == "first") return Value::Bool(index0 == 0);
    if (name == "last") return Value::Bool(index0 == length - 1);
    if (name == "length") return Value::Int(length);
    if (name == "depth") return Value::Int(1);
    if (name == "depth0") return Value::Int(0);
    if (name == "previtem") {
      if (index0 == 0) return rt.Undefined("there is no previous item");
      return loop.items[index0 - 1];
    }
    if (name == "nextitem") {
      if (index0 + 1 >= length) return rt.Undefined("there is no next item");
      return loop.items[index0 + 1];
    }
  }
  return std::nullopt;
}

void AppendSlice(const StrData& src, size_t begin, size_t end, std::string* text,
                 Provenance* prov) {
  prov->Append(src.untrusted.Slice(begin, end), text->size());
  text->append(src.text, begin, end - begin);
}

// Python's slice.indices(): the positions a slice visits in a sequence of `length`.
absl::StatusOr<std::vector<int64_t>> SliceIndices(int64_t length, const Value* start,
                                                  const Value* stop, const Value* step) {
  const auto given = [](const Value* v) { return v != nullptr && !v->is_none(); };
  int64_t st = 1;
  if (given(step)) {
    QUILL_ASSIGN_OR_RETURN(st, ToIndex(*step, "slice indices"));
    if (st == 0) return Error(ErrorKind::kValue, "slice step cannot be zero");
  }
  const auto adjust = [&](const Value* v, bool is_start) -> absl::StatusOr<int64_t> {
    if (!given(v)) {
      if (is_start) return st < 0 ? length - 1 : 0;
      return st < 0 ? -1 : length;
    }
    QUILL_ASSIGN_OR_RETURN(int64_t i, ToIndex(*v, "slice indices"));
    if (i < 0) {
      i += length;
      if (i < 0) i = st < 0 ? -1 : 0;
    } else if (i >= length) {
      i = st < 0 ? length - 1 : length;
    }
    return i;
  };
  QUILL_ASSIGN_OR_RETURN(int64_t b, adjust(start, true));
  QUILL_ASSIGN_OR_RETURN(int64_t e, adjust(stop, false));
  std::vector<int64_t> out;
  if (st > 0) {
    for (int64_t i = b; i < e; i += st) out.push_back(i);
  } else {
    for (int64_t i = b; i > e; i += st) out.push_back(i);
  }
  return out;
}

absl::StatusOr<std::string> RequireStr(const Value& v, absl::string_view what) {
  if (!v.is_string()) {
    return Error(ErrorKind::kType, absl::StrCat(what, " must be str, not ", TypeName(v)));
  }
  return v.text();
}

// Code point index of byte offset `byte` in s.
int64_t CodePointIndex(absl::string_view s, size_t byte) {
  return static_cast<int64_t>(py::CodePointCount(s.substr(0, byte)));
}

// Byte range of the code-point range [start, end) (Python str.find's optional bounds).
absl::Status CodePointBounds(const std::string& s, const std::optional<Value>& start,
                             const std::optional<Value>& end, size_t* b, size_t* e) {
  const std::vector<size_t> offsets = py::CodePointOffsets(s);
  const int64_t n = static_cast<int64_t>(offsets.size()) - 1;
  const auto clamp = [&](const std::optional<Value>& v, int64_t dflt) -> absl::StatusOr<int64_t> {
    if (!v.has_value() || v->is_none()) return dflt;
    QUILL_ASSIGN_OR_RETURN(int64_t i, ToIndex(*v, "slice indices"));
    if (i < 0) i = std::max<int64_t>(0, i + n);
    return std::min(i, n);
  };
  QUILL_ASSIGN_OR_RETURN(int64_t cb, clamp(start, 0));
  QUILL_ASSIGN_OR_RETURN(int64_t ce, clamp(end, n));
  *b = offsets[cb];
  *e = std::max(offsets[cb], offsets[ce]);
  return absl::OkStatus();
}

absl::StatusOr<Value> StrSplit(Runtime& rt, const Value& self, CallArgs& args, bool right) {
  const StrData& s = self.str();
  QUILL_ASSIGN_OR_RETURN(auto a, BindArgs(right ? "rsplit" : "split", args, {"sep", "maxsplit"}));
  int64_t maxsplit = -1;
  if (a[1]) {
    QUILL_ASSIGN_OR_RETURN(maxsplit, ToIndex(*a[1], "maxsplit"));
  }
  std::vector<std::pair<size_t, size_t>> pieces;
  const std::string& t = s.text;
  if (!a[0] || a[0]->is_none()) {
    // Runs of whitespace separate; leading and trailing whitespace never make pieces.
    if (!right) {
      size_t pos = 0;
      while (true) {
        while (pos < t.size()) {
          size_t len = 0;
          if (!py::IsSpace(py::DecodeAt(t, pos, &len))) break;
          pos += len;
        }
        if (pos >= t.size()) break;
        if (maxsplit >= 0 && static_cast<int64_t>(pieces.size()) == maxsplit) {
          pieces.emplace_back(pos, t.size());
          break;
        }
        size_t end = pos;
        while (end < t.size()) {
          size_t len = 0;
          if (py::IsSpace(py::DecodeAt(t, end, &len))) break;
          end += len;
        }
        pieces.emplace_back(pos, end);
        pos = end;
      }
    } else {
      const std::vector<size_t> off = py::CodePointOffsets(t);
      const auto space_at = [&](size_t i) {  // code point index
        size_t len = 0;
        return py::IsSpace(py::DecodeAt(t, off[i], &len));
      };
      int64_t i = static_cast<int64_t>(off.size()) - 1;  // one past the last code point
      while (true) {
        while (i > 0 && space_at(i - 1)) --i;
        if (i == 0) break;
        if (maxsplit >= 0 && static_cast<int64_t>(pieces.size()) == maxsplit) {
          pieces.emplace_back(0, off[i]);
          break;
        }
        int64_t j = i;
        while (j > 0 && !space_at(j - 1)) --j;
        pieces.emplace_back(off[j], off[i]);
        i = j;
      }
      std::reverse(pieces.begin(), pieces.end());
    }
  } else {
    QUILL_ASSIGN_OR_RETURN(std::string sep, RequireStr(*a[0], "separator"));
    if (sep.empty()) return Error(ErrorKind::kValue, "empty separator");
    if (!right) {
      size_t pos = 0;
      while (true) {
        const size_t hit = (maxsplit >= 0 && static_cast<int64_t>(pieces.size()) == maxsplit)
                               ? std::string::npos
                               : t.find(sep, pos);
        if (hit == std::string::npos) {
          pieces.emplace_back(pos, t.size());
          break;
        }
        pieces.emplace_back(pos, hit);
        pos = hit + sep.size();
      }
    } else {
      size_t end = t.size();
      while (true) {
        size_t hit = std::string::npos;
        if (!(maxsplit >= 0 && static_cast<int64_t>(pieces.size()) == maxsplit) &&
            end >= sep.size()) {
          hit = t.rfind(sep, end - sep.size());
        }
        if (hit == std::string::npos) {
          pieces.emplace_back(0, end);
          break;
        }
        pieces.emplace_back(hit + sep.size(), end);
        end = hit;
      }
      std::reverse(pieces.begin(), pieces.end());
    }
  }
  QUILL_RETURN_IF_ERROR(rt.Tick(static_cast<int64_t>(pieces.size())));
  std::vector<Value> items;
  items.reserve(pieces.size());
  for (const auto& [b, e] : pieces) items.push_back(Value::String(Substr(s, b, e)));
  QUILL_RETURN_IF_ERROR(rt.Charge(static_cast<int64_t>(t.size())));
  return rt.NewList(ListKind::kList, std::move(items));
}

// str.format(): {} {0} {name} with .attr / [key] accessors and !r/!s conversions; format
// specs are not supported.
absl::StatusOr<Value> StrFormat(Runtime& rt, const Value& self, CallArgs& args) {
  const std::string& f = self.text();
  std::string out;
  bool untrusted = !self.str().untrusted.empty();
  size_t auto_index = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    const char c = f[i];
    if (c == '}') {
      if (i + 1 < f.size() && f[i + 1] == '}') {
        out.push_back('}');
        ++i;
        continue;
      }
      return Error(ErrorKind::kValue, "Single '}' encountered in format string");
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < f.size() && f[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    const size_t close = f.find('}', i);
    if (close == std::string::npos) {
      return Error(ErrorKind::kValue, "Single '{' encountered in format string");
    }
    std::string field = f.substr(i + 1, close - i - 1);
    i = close;
    char conversion = 0;
    if (const size_t colon = field.find(':'); colon != std::string::npos) {
      if (colon + 1 < field.size()) {
        return Error(ErrorKind::kUnsupported, "format specs in str.format() are not supported");
      }
      field.resize(colon);
    }
    if (const size_t bang = field.find('!'); bang != std::string::npos) {
      if (bang + 2 != field.size()) return Error(ErrorKind::kValue, "bad conversion in format");
      conversion = field[bang + 1];
      field.resize(bang);
    }
    size_t name_end = std::min(field.find('.'), field.find('['));
    const std::string head = field.substr(0, name_end);
    Value v;
    if (head.empty()) {
      if (auto_index >= args.positional.size()) {
        return Error(ErrorKind::kIndex, "Replacement index out of range for positional args");
      }
      v = args.positional[auto_index++];
    } else if (std::all_of(head.begin(), head.end(),
                           [](char ch) { return ch >= '0' && ch <= '9'; })) {
      const size_t index = std::stoul(head);
      if (index >= args.positional.size()) {
        return Error(ErrorKind::kIndex, "Replacement index out of range for positional args");
      }
      v = args.positional[index];
    } else {
      bool found = false;
      for (const auto& [k, kv] : args.keywords) {
        if (k == head) {
          v = kv;
          found = true;
        }
      }
      if (!found) return Error(ErrorKind::kKey, py::Repr(head));
    }
    // Accessors: .attr and [key].
    size_t p = name_end;
    while (p < field.size()) {
      if (field[p] == '.') {
        size_t q = std::min(field.find('.', p + 1), field.find('[', p + 1));
        if (q == std::string::npos) q = field.size();
        QUILL_ASSIGN_OR_RETURN(v, GetAttr(rt, v, field.substr(p + 1, q - p - 1)));
        p = q;
      } else if (field[p] == '[') {
        const size_t q = field.find(']', p);
        if (q == std::string::npos) return Error(ErrorKind::kValue, "Missing ']' in format string");
        const std::string key = field.substr(p + 1, q - p - 1);
        Value k =
            std::all_of(key.begin(), key.end(), [](char ch) { return ch >= '0' && ch <= '9'; }) &&
                    !key.empty()
                ? Value::Int(std::stoll(key))
                : Value::Str(key);
        QUILL_ASSIGN_OR_RETURN(v, GetItem(rt, v, k));
        p = q + 1;
      } else {
        return Error(ErrorKind::kValue, "bad field in format string");
      }
    }
    if (v.is_undefined()) return rt.UndefinedError(v);
    untrusted = untrusted || HasUntrusted(v);
    if (conversion == 'r' || conversion == 'a') {
      QUILL_ASSIGN_OR_RETURN(std::string r, Repr(v));
      out += r;
    } else {
      QUILL_ASSIGN_OR_RETURN(StrPtr s, ToStr(v));
      out += s->text;
    }
  }
  return rt.NewString(Derived(std::move(out), untrusted));
}

absl::StatusOr<Value> StrJustify(Runtime& rt, const Value& self, absl::string_view name,
                                 CallArgs& args) {
  const bool zfill = name == "zfill";
  QUILL_ASSIGN_OR_RETURN(auto a, BindArgs(name, args, {"width", "fillchar"}, 1));
  if (zfill && a[1]) return Error(ErrorKind::kType, "zfill() takes exactly one argument");
  QUILL_ASSIGN_OR_RETURN(int64_t width, ToIndex(*a[0], "width"));
  std::string fill = " ";
  if (a[1]) {
    QUILL_ASSIGN_OR_RETURN(fill, RequireStr(*a[1], "fillchar"));
    if (py::CodePointCount(fill) != 1) {
      return Error(ErrorKind::kType, "The fill character must be exactly one character long");
    }
  }
  const std::string& t = self.text();
  const int64_t len = static_cast<int64_t>(py::CodePointCount(t));
  if (width <= len) return self;
  const int64_t pad = width - len;
  // Bounded before multiplying, so a huge width cannot overflow.
  QUILL_RETURN_IF_ERROR(rt.Charge(std::min(pad, rt.limits().max_output_bytes + 1) *
                                  static_cast<int64_t>(fill.size())));
  int64_t left = 0;
  if (name == "rjust") {
    left = pad;
  } else if (name == "center") {
    left = pad / 2 + (pad & width & 1);  // CPython's rounding
  } else if (zfill) {
    left = pad;
    fill = "0";
  }
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  size_t body = 0;
  if (zfill && !t.empty() && (t[0] == '+' || t[0] == '-')) {
    out.insert(out.begin(), t[0]);
    body = 1;
  }
  out.append(t, body, std::string::npos);
  for (int64_t i = left; i < pad; ++i) out += fill;
  return rt.NewString(Derived(std::move(out), !self.str().untrusted.empty()));
}

absl::StatusOr<Value> StrMethod(Runtime& rt, const Value& self, absl::string_view name,
                                CallArgs& args) {
  const StrData& s = self.str();
  const std::string& t = s.text;
  const bool untrusted = !s.untrusted.empty();
  QUILL_RETURN_IF_ERROR(rt.Tick(static_cast<int64_t>(t.size() / 64)));
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    QUILL_ASSIGN_OR_RETURN(auto a, BindArgs(name, args, {"chars"}));
    std::optional<std::string> chars;
    if (a[0] && !a[0]->is_none()) {
      if (!a[0]->is_string())
        return Error(ErrorKind::kType, absl::StrCat(name, " arg must be None or str"));
      chars = a[0]->text();
    }
    size_t b = 0, e = 0;
    py::StripRange(t, chars ? &*chars : nullptr, name != "rstrip", name != "lstrip", &b, &e);
    return Value::String(Substr(s, b, e));
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" ||
      name == "swapcase" || name == "casefold") {
    QUILL_RETURN_IF_ERROR(BindArgs(name, args, {}).status());
    std::string out;
    if (name == "upper") {
      out = py::Upper(t);
    } else if (name == "lower" || name == "casefold") {
      out = py::Lower(t);
    } else if (name == "title") {
      out = py::Title(t);
    } else if (name == "capitalize") {
      out = py::Capitalize(t);
    } else {
      for (size_t pos = 0, len = 0; pos < t.size(); pos += len) {
        const uint32_t cp = py::DecodeAt(t, pos, &len);
        const uint32_t up = py::ToUpper(cp);
        AppendUtf8(up != cp ? up : py::ToLower(cp), &out);
      }
    }
    return rt.NewString(Derived(std::move(out), untrusted));
  }
  if (name == "startswith" || name == "endswith") {
    QUILL_ASSIGN_OR_RETURN(auto a, BindArgs(name, args, {"prefix", "start", "end"}, 1));
    size_t b = 0, e = 0;
    QUILL_RETURN_IF_ERROR(CodePointBounds(t, a[1], a[2], &b, &e));
    const absl::string_view range = absl::string_view(t).substr(b, e - b);
    std::vector<Value> candidates;
    if (a[0]->is_list() && a[0]->list()->kind == ListKind::kTuple) {
      candidates = a[0]->list()->items;
    } else {
      candidates.push_back(*a[0]);
    }
    for (const Value& c : candidates) {
      if (!c.is_string()) {
        return Error(
            ErrorKind::kType,
            absl::StrCat(name, " first arg must be str or a tuple of str, not ", TypeName(c)));
      }
      if (name == "startswith" ? absl::StartsWith(range, c.text())
                               : absl::EndsWith(range, c.text())) {
        return Value::Bool(true);
      }
    }
    return Value::Bool(false);
  }
  if (name == "split" || name == "rsplit") return StrSplit(rt, self, args, name == "rsplit");
  if (name == "splitlines") {
    QUILL_ASSIGN_OR_RETURN(auto a, BindArgs(name, args, {"keepends"}));
    const bool keepends = a[0] && Truthy(*a[0]);
    std::vector<Value> items;
    const auto lines = py::SplitLines(t);
    for (size_t i = 0; i < lines.size(); ++i) {
      size_t end = lines[i].second;
      if (keepends) end = i + 1 < lines.size() ? lines[i + 1].first : t.size();
      items.push_back(Value::String(Substr(s, lines[i].first, end)));
    }
    return rt.NewList(ListKind::kList, std::move(items));
  }
  if (name == "replace") {
    QUILL_ASSIGN_OR_RETURN(auto a, BindArgs(name, args, {"old", "new", "count"}, 2));
    QUILL_ASSIGN_OR_RETURN(std::string from, RequireStr(*a[0], "replace() argument 1"));
    QUILL_ASSIGN_OR_RETURN(std::string to, RequireStr(*a[1], "replace() argument 2"));
    int64_t count = -1;
    if (a[2]) {
      QUILL_ASSIGN_OR_RETURN(count, ToIndex(*a[2], "count"));
    }
    std::string out;
    int64_t done = 0;
    if (from.empty()) {
      // Python inserts `to` before every code point and at the end.
      for (size_t pos = 0, len = 0; pos <= t.size(); pos += len) {
        if (count < 0 || done < count) {
          out += to;
          ++done;
          QUILL_RETURN_IF_ERROR(rt.Charge(static_cast<int64_t>(to.size())));
        }
        if (pos == t.size()) break;
        py::DecodeAt(t, pos, &len);
        out.append(t, pos, len);
      }
    } else {
      size_t pos = 0;
      while (count < 0 || done < count) {
        const size_t hit = t.find(from, pos);
        if (hit == std::string::npos) break;
        out.append(t, pos, hit - pos);
        out += to;
        pos = hit + from.size();
        ++done;
        QUILL_RETURN_IF_ERROR(rt.Charge(static_cast<int64_t>(to.size())));
      }
      out.append(t, pos, std::string::npos);
    }
    return rt.NewString(
        Derived(std::move(out), untrusted || HasUntrusted(*a[0]) || HasUntrusted(*a[1])));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    QUILL_ASSIGN_OR_RETURN(auto a, BindArgs(name, args, {"sub", "start", "end"}, 1));
    QUILL_ASSIGN_OR_RETURN(std::string sub, RequireStr(*a[0], "must be str"));
    size_t b = 0, e = 0;
    QUILL_RETURN_IF_ERROR(CodePointBounds(t, a[1], a[2], &b, &e));
    const absl::string_view range = absl::string_view(t).substr(b, e - b);
    if (name == "count") {
      if (sub.empty()) return Value::Int(static_cast<int64_t>(py::CodePointCount(range)) + 1);
      int64_t n = 0;
      for (size_t pos = range.find(sub); pos != absl::string_view::npos;
           pos = range.find(sub, pos + sub.size())) {
        ++n;
      }
      return Value::Int(n);
    }
    const bool reverse = name == "rfind" || name == "rindex";
    const size_t hit = reverse ? range.rfind(sub) : range.find(sub);
    if (hit == absl::string_view::npos) {
      if (name == "index" || name == "rindex")
        return Error(ErrorKind::kValue, "substring not found");
      return Value::Int(-1);
    }
    return Value::Int(CodePointIndex(t, b + hit));
  }
  if (name == "join") {
    QUILL_ASSIGN_OR_RETURN(auto a, BindArgs(name, args, {"iterable"}, 1));
    QUILL_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(rt, *a[0]));
    auto out = std::make_shared<StrData>();
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) {
        return Error(ErrorKind::kType,
                     absl::StrCat("sequence item ", i, ": expected str instance, ",
                                  TypeName(items[i]), " found"));
      }
      if (i > 0) AppendSlice(s, 0, t.size(), &out->text, &out->untrusted);
      const StrData& item = items[i].str();
      AppendSlice(item, 0, item.text.size(), &out->text, &out->untrusted);
      QUILL_RETURN_IF_ERROR(rt.Charge(static_cast<int64_t>(item.text.size() + t.size())));
    }
    return rt.NewString(std::move(out));
  }
  if (name == "format") return StrFormat(rt, self, args);
  if (name == "center" || name == "ljust" || name == "rjust" || name == "zfill") {
    return StrJustify(rt, self, name, args);
  }
  if (name == "removeprefix" || name == "removesuffix") {
    QUILL_ASSIGN_OR_RETURN(auto a, BindArgs(name, args, {"affix"}, 1));
    QUILL_ASSIGN_OR_RETURN(std::string affix, RequireStr(*a[0], absl::StrCat(name, "() argument")));
    if (name == "removeprefix" && absl::StartsWith(t, affix)) {
      return Value::String(Substr(s, affix.size(), t.size()));
    }
    if (name == "removesuffix" && !affix.empty() && absl::EndsWith(t, affix)) {
      return Value::String(Substr(s, 0, t.size() - affix.size()));
    }
    return self;
  }
  if (name == "partition" || name == "rpartition") {
    QUILL_ASSIGN_OR_RETURN(auto a, BindArgs(name, args, {"sep"}, 1));
    QUILL_ASSIGN_OR_RETURN(std::string sep, RequireStr(*a[0], "separator"));
    if (sep.empty()) return Error(ErrorKind::kValue, "empty separator");
    const size_t hit = name == "partition" ? t.find(sep) : t.rfind(sep);
    std::vector<Value> parts;
    if (hit == std::string::npos) {
      const Value empty = Value::String(EmptyStr());
      parts = name == "partition" ? std::vector<Value>{self, empty, empty}
                                  : std::vector<Value>{empty, empty, self};
    } else {
      parts = {Value::String(Substr(s, 0, hit)), Value::String(Substr(s, hit, hit + sep.size())),
               Value::String(Substr(s, hit + sep.size(), t.size()))};
    }
    return rt.NewList(ListKind::kTuple, std::move(parts));
  }
  if (absl::StartsWith(name, "is")) {
    QUILL_RETURN_IF_ERROR(BindArgs(name, args, {}).status());
    if (name == "islower") return Value::Bool(py::IsLower(t));
    if (name == "isupper") return Value::Bool(py::IsUpper(t));
    if (name == "isascii") return Value::Bool(py::IsAscii(t));
    if (t.empty()) return Value::Bool(false);
    for (size_t pos = 0, len = 0; pos < t.size(); pos += len) {
      const uint32_t cp = py::DecodeAt(t, pos, &len);
      bool ok = false;
      if (name == "isspace") {
        ok = py::IsSpace(cp);
      } else if (name == "isalpha") {
        ok = py::IsAlpha(cp);
      } else if (name == "isalnum") {
        ok = py::IsAlpha(cp) || py::IsDigit(cp);
      } else {  // isdigit, isdecimal, isnumeric
        ok = py::IsDigit(cp);
      }
      if (!ok) return Value::Bool(false);
    }
    return Value::Bool(true);
  }
  return Error(ErrorKind::kUnsupported, absl::StrCat("str.", name, "() is not supported"));
}

absl::StatusOr<Value> DictMethod(Runtime& rt, const Value& self, absl::string_view name,
                                 CallArgs& args) {
  DictObject& dict = *self.dict();
  QUILL_RETURN_IF_ERROR(rt.Tick(static_cast<int64_t>(dict.entries.size() / 8)));
  if (name == "get") {
    QUILL_ASSIGN_OR_RETURN(auto a, BindArgs("get", args, {"key", "default"}, 1));
    if (a[0]->is_list() || a[0]->is_dict()) {
      return Error(ErrorKind::kType, absl::StrCat("unhashable type: '", TypeName(*a[0]), "'"));
    }
    const int64_t i = dict.Find(*a[0]);
    if (i >= 0) return dict.entries[i].second;
    return a[1] ? *a[1] : Value::None();
  }
  QUILL_RETURN_IF_ERROR(BindArgs(name, args, {}).status());
  if (name == "copy") {
    DictObject* copy = rt.heap().New<DictObject>();
    copy->entries = dict.entries;
    QUILL_RETURN_IF_ERROR(rt.Charge(static_cast<int64_t>(dict.entries.size() * 2 * sizeof(Value))));
    return Value::Dict(copy);
  }
  std::vector<Value> items;
  items.reserve(dict.entries.size());
  for (const auto& [k, v] : dict.entries) {
    if (name == "keys") {
      items.push_back(k);
    } else if (name == "values") {
      items.push_back(v);
    } else {
      QUILL_ASSIGN_OR_RETURN(Value pair, rt.NewList(ListKind::kTuple, {k, v}));
      items.push_back(std::move(pair));
    }
  }
  const ListKind kind = name == "keys"     ? ListKind::kDictKeys
                        : name == "values" ? ListKind::kDictValues
                                           : ListKind::kDictItems;
  return rt.NewList(kind, std::move(items));
}

absl::StatusOr<Value> ListMethod(Runtime& rt, const Value& self, absl::string_view name,
                                 CallArgs& args) {
  ListObject& list = *self.list();
  QUILL_RETURN_IF_ERROR(rt.Tick(static_cast<int64_t>(list.items.size() / 8)));
  if (name == "count" || name == "index") {
    QUILL_ASSIGN_OR_RETURN(auto a, BindArgs(name, args, {"value"}, 1));
    int64_t n = 0;
    for (size_t i = 0; i < list.items.size(); ++i) {
      QUILL_ASSIGN_OR_RETURN(bool eq, Equals(list.items[i], *a[0]));
      if (!eq) continue;
      if (name == "index") return Value::Int(static_cast<int64_t>(i));
      ++n;
    }
    if (name == "index") {
      QUILL_ASSIGN_OR_RETURN(std::string r, Repr(*a[0]));
      return Error(ErrorKind::kValue, absl::StrCat(r, " is not in list"));
    }
    return Value::Int(n);
  }
  if (name == "copy") {
    QUILL_RETURN_IF_ERROR(BindArgs(name, args, {}).status());
    return rt.NewList(ListKind::kList, list.items);
  }
  if (name == "clear") {
    QUILL_RETURN_IF_ERROR(BindArgs(name, args, {}).status());
    list.items.clear();
    return Value::None();
  }
  if (name == "pop") {
    QUILL_ASSIGN_OR_RETURN(auto a, BindArgs(name, args, {"index"}));
    if (list.items.empty()) return Error(ErrorKind::kIndex, "pop from empty list");
    int64_t i = -1;
    if (a[0]) {
      QUILL_ASSIGN_OR_RETURN(i, ToIndex(*a[0], "list indices"));
    }
    const int64_t n = static_cast<int64_t>(list.items.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Error(ErrorKind::kIndex, "pop index out of range");
    Value v = list.items[i];
    list.items.erase(list.items.begin() + i);
    return v;
  }
  return Error(ErrorKind::kUnsupported, absl::StrCat("list.", name, "() is not supported"));
}

absl::StatusOr<Value> LoopMethod(Runtime& rt, const Value& self, absl::string_view name,
                                 CallArgs& args) {
  LoopObject& loop = *self.loop();
  if (!args.keywords.empty()) {
    return Error(ErrorKind::kType, absl::StrCat("loop.", name, "() takes no keyword arguments"));
  }
  if (name == "cycle") {
    if (args.positional.empty()) return Error(ErrorKind::kType, "no items for cycling given");
    return args.positional[loop.index0 % args.positional.size()];
  }
  // changed(*values): true when the values differ from the previous call's.
  QUILL_ASSIGN_OR_RETURN(Value current, rt.NewList(ListKind::kTuple, args.positional));
  bool changed = true;
  if (loop.has_changed_value) {
    QUILL_ASSIGN_OR_RETURN(bool eq, Equals(loop.changed_value, current));
    changed = !eq;
  }
  if (changed) {
    loop.changed_value = current;
    loop.has_changed_value = true;
  }
  return Value::Bool(changed);
}

}  // namespace

absl::StatusOr<int64_t> ToIndex(const Value& v, absl::string_view what) {
  if (v.is_int() || v.is_bool()) return v.as_int();
  return Error(ErrorKind::kType, absl::StrCat(what, " must be integers, not ", TypeName(v)));
}

absl::StatusOr<Value> GetAttr(Runtime& rt, const Value& obj, absl::string_view name) {
  if (obj.is_undefined()) return rt.UndefinedError(obj);
  if (std::optional<Value> attr = LookupAttribute(rt, obj, name)) return *attr;
  if (obj.is_dict()) {
    const int64_t i = obj.dict()->FindStr(name);
    if (i >= 0) return obj.dict()->entries[i].second;
  }
  return rt.UndefinedAttribute(obj, name);
}

absl::StatusOr<Value> GetAttrOnly(Runtime& rt, const Value& obj, absl::string_view name) {
  if (obj.is_undefined()) return rt.UndefinedError(obj);
  if (std::optional<Value> attr = LookupAttribute(rt, obj, name)) return *attr;
  return rt.UndefinedAttribute(obj, name);
}

absl::StatusOr<Value> GetItem(Runtime& rt, const Value& obj, const Value& key) {
  if (obj.is_undefined()) return rt.UndefinedError(obj);
  switch (obj.type()) {
    case ValueType::kDict: {
      if (key.is_list() || key.is_dict()) break;  // unhashable: TypeError, then Undefined
      const int64_t i = obj.dict()->Find(key);
      if (i >= 0) return obj.dict()->entries[i].second;
      break;
    }
    case ValueType::kList: {
      const ListObject& list = *obj.list();
      if ((list.kind != ListKind::kList && list.kind != ListKind::kTuple) ||
          !(key.is_int() || key.is_bool())) {
        break;
      }
      int64_t i = key.as_int();
      const int64_t n = static_cast<int64_t>(list.items.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return list.items[i];
      break;
    }
    case ValueType::kString: {
      if (!(key.is_int() || key.is_bool())) break;
      const std::vector<size_t> offsets = py::CodePointOffsets(obj.text());
      const int64_t n = static_cast<int64_t>(offsets.size()) - 1;
      int64_t i = key.as_int();
      if (i < 0) i += n;
      if (i >= 0 && i < n) return Value::String(Substr(obj.str(), offsets[i], offsets[i + 1]));
      break;
    }
    default:
      break;
  }
  if (key.is_string()) {
    if (std::optional<Value> attr = LookupAttribute(rt, obj, key.text())) return *attr;
  }
  return rt.UndefinedItem(obj, key);
}

absl::StatusOr<Value> GetSlice(Runtime& rt, const Value& obj, const Value* start, const Value* stop,
                               const Value* step) {
  if (obj.is_undefined()) return rt.UndefinedError(obj);
  const auto bad_index = [](const Value* v) {
    return v != nullptr && !v->is_none() && !v->is_int() && !v->is_bool();
  };
  if (bad_index(start) || bad_index(stop) || bad_index(step)) return rt.Undefined("bad slice");
  if (obj.is_string()) {
    const StrData& s = obj.str();
    const std::vector<size_t> offsets = py::CodePointOffsets(s.text);
    QUILL_ASSIGN_OR_RETURN(
        std::vector<int64_t> indices,
        SliceIndices(static_cast<int64_t>(offsets.size()) - 1, start, stop, step));
    QUILL_RETURN_IF_ERROR(rt.Tick(static_cast<int64_t>(indices.size() / 16)));
    if (indices.empty()) return Value::String(EmptyStr());
    const bool contiguous = indices.size() == 1 || indices[1] == indices[0] + 1;  // step 1
    if (contiguous) {
      return rt.NewString(Substr(s, offsets[indices.front()], offsets[indices.back() + 1]));
    }
    auto out = std::make_shared<StrData>();
    for (int64_t i : indices) {
      AppendSlice(s, offsets[i], offsets[i + 1], &out->text, &out->untrusted);
    }
    return rt.NewString(std::move(out));
  }
  if (obj.is_list() &&
      (obj.list()->kind == ListKind::kList || obj.list()->kind == ListKind::kTuple)) {
    const ListObject& list = *obj.list();
    QUILL_ASSIGN_OR_RETURN(
        std::vector<int64_t> indices,
        SliceIndices(static_cast<int64_t>(list.items.size()), start, stop, step));
    std::vector<Value> items;
    items.reserve(indices.size());
    for (int64_t i : indices) items.push_back(list.items[i]);
    return rt.NewList(list.kind, std::move(items));
  }
  return rt.Undefined(absl::StrCat(py::Repr(ObjectTypeRepr(obj)), " is not subscriptable"));
}

bool HasCallableMethod(const Value& self, absl::string_view name) {
  return MethodSafety(self, name) == Safety::kSafe;
}

absl::StatusOr<Value> CallMethod(Runtime& rt, const Value& self, absl::string_view name,
                                 CallArgs& args) {
  const Safety safety = MethodSafety(self, name);
  if (safety == Safety::kUnsafe) return rt.UndefinedError(Unsafe(rt, self, name));
  if (safety == Safety::kUnsupported) {
    return Error(ErrorKind::kUnsupported,
                 absl::StrCat(TypeName(self), ".", name, "() is not supported"));
  }
  if (safety == Safety::kNone) {
    return Error(ErrorKind::kType,
                 absl::StrCat("'", TypeName(self), "' object has no method ", py::Repr(name)));
  }
  switch (self.type()) {
    case ValueType::kString:
      return StrMethod(rt, self, name, args);
    case ValueType::kDict:
      return DictMethod(rt, self, name, args);
    case ValueType::kList:
      return ListMethod(rt, self, name, args);
    case ValueType::kLoop:
      return LoopMethod(rt, self, name, args);
    default:
      return Error(ErrorKind::kType, "no methods");
  }
}

absl::StatusOr<std::vector<Value>> Iterate(Runtime& rt, const Value& v) {
  switch (v.type()) {
    case ValueType::kUndefined:
      return std::vector<Value>{};
    case ValueType::kList: {
      ListObject& list = *v.list();
      QUILL_RETURN_IF_ERROR(rt.Tick(static_cast<int64_t>(list.items.size() / 8)));
      if (list.kind == ListKind::kGenerator) {
        if (list.consumed) return std::vector<Value>{};
        list.consumed = true;
      }
      return list.items;
    }
    case ValueType::kDict: {
      std::vector<Value> keys;
      keys.reserve(v.dict()->entries.size());
      for (const auto& [k, value] : v.dict()->entries) keys.push_back(k);
      return keys;
    }
    case ValueType::kString: {
      const StrData& s = v.str();
      std::vector<Value> chars;
      QUILL_RETURN_IF_ERROR(rt.Charge(static_cast<int64_t>(s.text.size() * sizeof(Value))));
      for (size_t pos = 0, len = 0; pos < s.text.size(); pos += len) {
        py::DecodeAt(s.text, pos, &len);
        chars.push_back(Value::String(Substr(s, pos, pos + len)));
      }
      return chars;
    }
    default:
      return Error(ErrorKind::kType, absl::StrCat("'", TypeName(v), "' object is not iterable"));
  }
}

absl::StatusOr<int64_t> Length(const Value& v) {
  switch (v.type()) {
    case ValueType::kUndefined:
      return 0;
    case ValueType::kString:
      return static_cast<int64_t>(py::CodePointCount(v.text()));
    case ValueType::kList:
      if (v.list()->kind != ListKind::kGenerator) {
        return static_cast<int64_t>(v.list()->items.size());
      }
      break;
    case ValueType::kDict:
      return static_cast<int64_t>(v.dict()->entries.size());
    default:
      break;
  }
  return Error(ErrorKind::kType, absl::StrCat("object of type '", TypeName(v), "' has no len()"));
}

absl::StatusOr<bool> Contains(Runtime& rt, const Value& container, const Value& item) {
  switch (container.type()) {
    case ValueType::kUndefined:
      return false;
    case ValueType::kString:
      if (!item.is_string()) {
        return Error(
            ErrorKind::kType,
            absl::StrCat("'in <string>' requires string as left operand, not ", TypeName(item)));
      }
      return container.text().find(item.text()) != std::string::npos;
    case ValueType::kDict:
      if (item.is_list() || item.is_dict()) {
        return Error(ErrorKind::kType, absl::StrCat("unhashable type: '", TypeName(item), "'"));
      }
      return container.dict()->Find(item) >= 0;
    case ValueType::kList: {
      QUILL_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(rt, container));
      for (const Value& x : items) {
        QUILL_ASSIGN_OR_RETURN(bool eq, Equals(x, item));
        if (eq) return true;
      }
      return false;
    }
    default:
      return Error(ErrorKind::kType,
                   absl::StrCat("argument of type '", TypeName(container), "' is not iterable"));
  }
}

}  // namespace quill::engine::chat::jinja
