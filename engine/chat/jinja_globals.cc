#include "engine/chat/jinja_globals.h"

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "engine/base/status_macros.h"
#include "engine/chat/jinja_error.h"
#include "engine/chat/jinja_methods.h"

namespace quill::engine::chat::jinja {
namespace {

absl::StatusOr<Value> Range(Runtime& rt, CallArgs& args) {
  if (!args.keywords.empty()) return Error(ErrorKind::kType, "range() takes no keyword arguments");
  const size_t n = args.positional.size();
  if (n < 1 || n > 3) {
    return Error(ErrorKind::kType, absl::StrCat("range expected 1 to 3 arguments, got ", n));
  }
  int64_t v[3] = {0, 0, 1};
  for (size_t i = 0; i < n; ++i) {
    const Value& a = args.positional[i];
    if (!a.is_int() && !a.is_bool()) {
      return Error(ErrorKind::kType,
                   absl::StrCat("'", TypeName(a), "' object cannot be interpreted as an integer"));
    }
  }
  if (n == 1) {
    v[1] = args.positional[0].as_int();
  } else {
    v[0] = args.positional[0].as_int();
    v[1] = args.positional[1].as_int();
    if (n == 3) v[2] = args.positional[2].as_int();
  }
  const int64_t start = v[0], stop = v[1], step = v[2];
  if (step == 0) return Error(ErrorKind::kValue, "range() arg 3 must not be zero");
  // Length computed without overflow: the difference fits in unsigned 64 bits.
  uint64_t length = 0;
  if (step > 0 && start < stop) {
    length = (static_cast<uint64_t>(stop) - static_cast<uint64_t>(start) - 1) /
                 static_cast<uint64_t>(step) +
             1;
  } else if (step < 0 && start > stop) {
    length = (static_cast<uint64_t>(start) - static_cast<uint64_t>(stop) - 1) /
                 (0 - static_cast<uint64_t>(step)) +
             1;
  }
  if (length > static_cast<uint64_t>(kMaxRange)) {
    return Error(ErrorKind::kOverflow,
                 absl::StrCat("Range too big. The sandbox blocks ranges larger than MAX_RANGE (",
                              kMaxRange, ")."));
  }
  QUILL_RETURN_IF_ERROR(rt.Tick(static_cast<int64_t>(length)));
  std::vector<Value> items;
  items.reserve(length);
  for (uint64_t i = 0; i < length; ++i)
    items.push_back(Value::Int(start + static_cast<int64_t>(i) * step));
  return rt.NewList(ListKind::kList, std::move(items));
}

// dict(*args, **kwargs) entries: a mapping or an iterable of pairs, then keywords.
absl::StatusOr<std::vector<std::pair<Value, Value>>> DictEntries(Runtime& rt, CallArgs& args,
                                                                 absl::string_view function) {
  if (args.positional.size() > 1) {
    return Error(ErrorKind::kType, absl::StrCat(function, " expected at most 1 argument, got ",
                                                args.positional.size()));
  }
  std::vector<std::pair<Value, Value>> entries;
  if (!args.positional.empty()) {
    const Value& source = args.positional[0];
    if (source.is_dict()) {
      entries = source.dict()->entries;
    } else {
      QUILL_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(rt, source));
      for (size_t i = 0; i < items.size(); ++i) {
        QUILL_ASSIGN_OR_RETURN(std::vector<Value> pair, Iterate(rt, items[i]));
        if (pair.size() != 2) {
          return Error(ErrorKind::kValue,
                       absl::StrCat("dictionary update sequence element #", i, " has length ",
                                    pair.size(), "; 2 is required"));
        }
        entries.emplace_back(pair[0], pair[1]);
      }
    }
  }
  for (const auto& [k, v] : args.keywords) entries.emplace_back(Value::Str(k), v);
  return entries;
}

absl::StatusOr<Value> Dict(Runtime& rt, CallArgs& args) {
  QUILL_ASSIGN_OR_RETURN(auto entries, DictEntries(rt, args, "dict"));
  return rt.NewDict(std::move(entries));
}

absl::StatusOr<Value> Namespace(Runtime& rt, CallArgs& args) {
  QUILL_ASSIGN_OR_RETURN(auto entries, DictEntries(rt, args, "namespace"));
  NamespaceObject* ns = rt.heap().New<NamespaceObject>();
  for (auto& [k, v] : entries) {
    if (!k.is_string()) {
      return Error(ErrorKind::kType, "namespace attribute names must be strings");
    }
    ns->Set(k.text(), std::move(v));
  }
  QUILL_RETURN_IF_ERROR(rt.Charge(static_cast<int64_t>(entries.size() * 2 * sizeof(Value))));
  return Value::Namespace(ns);
}

absl::StatusOr<Value> RaiseException(Runtime& rt, CallArgs& args) {
  QUILL_ASSIGN_OR_RETURN(auto a, BindArgs("raise_exception", args, {"message"}, 1));
  QUILL_ASSIGN_OR_RETURN(StrPtr message, ToStr(*a[0]));
  return RaisedError(message->text);
}

absl::StatusOr<Value> StrftimeNow(Runtime& rt, CallArgs& args) {
  QUILL_ASSIGN_OR_RETURN(auto a, BindArgs("strftime_now", args, {"format"}, 1));
  if (!a[0]->is_string()) {
    return Error(ErrorKind::kType,
                 absl::StrCat("strftime() argument 1 must be str, not ", TypeName(*a[0])));
  }
  const absl::TimeZone utc = absl::UTCTimeZone();
  std::string text = absl::FormatTime(a[0]->text(), absl::FromCivil(rt.now(), utc), utc);
  return rt.NewString(Derived(std::move(text), !a[0]->str().untrusted.empty()));
}

absl::StatusOr<Value> Unsupported(Runtime& rt, CallArgs& args) {
  return Error(ErrorKind::kUnsupported, "lipsum(), cycler() and joiner() are not supported");
}

}  // namespace

const BuiltinObject* FindGlobal(absl::string_view name) {
  static const BuiltinObject* const kGlobals[] = {
      new BuiltinObject("range", Range),
      new BuiltinObject("dict", Dict),
      new BuiltinObject("namespace", Namespace),
      new BuiltinObject("raise_exception", RaiseException),
      new BuiltinObject("strftime_now", StrftimeNow),
      new BuiltinObject("lipsum", Unsupported),
      new BuiltinObject("cycler", Unsupported),
      new BuiltinObject("joiner", Unsupported),
  };
  for (const BuiltinObject* g : kGlobals) {
    if (g->name == name) return g;
  }
  return nullptr;
}

}  // namespace quill::engine::chat::jinja
