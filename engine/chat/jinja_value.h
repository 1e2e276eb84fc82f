#pragma once

// Values of the template engine: Python's None/bool/int/float/str/list/tuple/dict plus
// Jinja2's Undefined, namespace, loop and callables, with Python's printing, equality,
// ordering and truthiness.
//
// Strings carry provenance: the byte ranges that came from request data (untrusted), so
// that the rendered prompt can tell the tokenizer which bytes must never become control
// tokens. Containers, namespaces, scopes and callables live in a per-render Heap (a
// template can build reference cycles through namespaces, and an arena frees them all at
// the end); strings are immutable and reference-counted.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace quill::engine::chat::jinja {

// [begin, end) byte offsets.
struct ByteRange {
  size_t begin = 0;
  size_t end = 0;
  friend bool operator==(const ByteRange& a, const ByteRange& b) {
    return a.begin == b.begin && a.end == b.end;
  }
};

// The untrusted byte ranges of one string: sorted, disjoint, never touching.
class Provenance {
 public:
  static Provenance Whole(size_t size);  // every byte untrusted (nothing if size == 0)

  bool empty() const { return ranges_.empty(); }
  const std::vector<ByteRange>& ranges() const { return ranges_; }
  // Adds [begin, end); begin must not precede the last range's end.
  void Add(size_t begin, size_t end);
  // Appends `other`'s ranges shifted by `offset` (the length of the text before it).
  void Append(const Provenance& other, size_t offset);
  // The ranges inside [begin, end), rebased to begin.
  Provenance Slice(size_t begin, size_t end) const;

 private:
  std::vector<ByteRange> ranges_;
};

struct StrData {
  std::string text;
  Provenance untrusted;
  // markupsafe.Markup (what |safe returns): `+` with a plain str HTML-escapes that str.
  bool markup = false;
};
using StrPtr = std::shared_ptr<const StrData>;

StrPtr MakeStr(std::string text);  // trusted
StrPtr MakeStr(std::string text, Provenance untrusted);
StrPtr MakeUntrustedStr(std::string text);  // all bytes untrusted
const StrPtr& EmptyStr();

enum class ValueType : uint8_t {
  kUndefined,
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kList,  // list, tuple, generator, dict views
  kDict,
  kNamespace,
  kLoop,
  kCallable,
};

class HeapObject {
 public:
  virtual ~HeapObject() = default;
};

class ListObject;
class DictObject;
class NamespaceObject;
class LoopObject;
class CallableObject;
struct UndefinedInfo;

class Value {
 public:
  Value() : type_(ValueType::kUndefined), i_(0) {}  // anonymous undefined

  static Value None() { return Value(ValueType::kNone); }
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double f);
  static Value String(StrPtr s);
  static Value Str(std::string text) { return String(MakeStr(std::move(text))); }
  // `info` null: an anonymous undefined.
  static Value Undefined(const UndefinedInfo* info);
  static Value List(ListObject* list);
  static Value Dict(DictObject* dict);
  static Value Namespace(NamespaceObject* ns);
  static Value Loop(LoopObject* loop);
  static Value Callable(CallableObject* callable);

  ValueType type() const { return type_; }
  bool is_undefined() const { return type_ == ValueType::kUndefined; }
  bool is_none() const { return type_ == ValueType::kNone; }
  bool is_bool() const { return type_ == ValueType::kBool; }
  bool is_int() const { return type_ == ValueType::kInt; }  // bool is not int here
  bool is_float() const { return type_ == ValueType::kFloat; }
  bool is_number() const { return is_bool() || is_int() || is_float(); }
  bool is_string() const { return type_ == ValueType::kString; }
  bool is_list() const { return type_ == ValueType::kList; }
  bool is_dict() const { return type_ == ValueType::kDict; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return is_bool() ? (b_ ? 1 : 0) : i_; }  // int or bool
  double as_float() const { return is_float() ? f_ : static_cast<double>(as_int()); }
  const StrData& str() const { return *str_; }
  const StrPtr& str_ptr() const { return str_; }
  const std::string& text() const { return str_->text; }
  ListObject* list() const;
  DictObject* dict() const;
  NamespaceObject* ns() const;
  LoopObject* loop() const;
  CallableObject* callable() const;
  const UndefinedInfo* undefined_info() const;  // null for an anonymous undefined
  // Identity of a heap value (for `is sameas`); nullptr for scalars and strings.
  const void* identity() const;

 private:
  explicit Value(ValueType type) : type_(type), i_(0) {}

  ValueType type_;
  union {
    bool b_;
    int64_t i_;
    double f_;
    HeapObject* obj_;
  };
  StrPtr str_;
};

// Why a value is undefined, for the error raised when it is used (Jinja2's hint, name
// and owner object).
struct UndefinedInfo : HeapObject {
  std::string message;  // the full UndefinedError / SecurityError message
  bool security = false;
};

enum class ListKind : uint8_t {
  kList,
  kTuple,
  kGenerator,  // what map/select/... return: iterates once, has no len() or index
  kDictKeys,
  kDictValues,
  kDictItems,
};

class ListObject : public HeapObject {
 public:
  ListObject(ListKind kind, std::vector<Value> items) : kind(kind), items(std::move(items)) {}
  ListKind kind;
  std::vector<Value> items;
  bool consumed = false;  // a generator that has been iterated
};

class DictObject : public HeapObject {
 public:
  std::vector<std::pair<Value, Value>> entries;  // insertion order

  // Index of `key` (Python equality for hashable keys), or -1.
  int64_t Find(const Value& key) const;
  int64_t FindStr(absl::string_view key) const;
  // Sets key (replaces the value if present, like Python).
  void Set(Value key, Value value);
};

class NamespaceObject : public HeapObject {
 public:
  std::vector<std::pair<std::string, Value>> attrs;
  const Value* Find(absl::string_view name) const;
  void Set(absl::string_view name, Value value);
};

// Jinja2's LoopContext for one iteration of a for loop.
class LoopObject : public HeapObject {
 public:
  std::vector<Value> items;  // what the loop iterates (after its `if` filter)
  size_t index0 = 0;
  bool has_changed_value = false;
  Value changed_value;  // last argument list passed to loop.changed()
};

class CallableObject : public HeapObject {
 public:
  enum class Kind { kMacro, kBuiltin, kMethod, kLoopMethod };
  explicit CallableObject(Kind kind) : kind(kind) {}
  Kind kind;
  std::string name;
};

inline ListObject* Value::list() const { return static_cast<ListObject*>(obj_); }
inline DictObject* Value::dict() const { return static_cast<DictObject*>(obj_); }
inline NamespaceObject* Value::ns() const { return static_cast<NamespaceObject*>(obj_); }
inline LoopObject* Value::loop() const { return static_cast<LoopObject*>(obj_); }
inline CallableObject* Value::callable() const { return static_cast<CallableObject*>(obj_); }
inline const UndefinedInfo* Value::undefined_info() const {
  return static_cast<const UndefinedInfo*>(obj_);
}

// Owns every heap object of one render.
class Heap {
 public:
  template <typename T, typename... Args>
  T* New(Args&&... args) {
    auto object = std::make_unique<T>(std::forward<Args>(args)...);
    T* raw = object.get();
    objects_.push_back(std::move(object));
    bytes_ += static_cast<int64_t>(sizeof(T));
    return raw;
  }
  // Bytes of the objects themselves (their contents are charged where they are built).
  int64_t bytes() const { return bytes_; }

 private:
  std::vector<std::unique_ptr<HeapObject>> objects_;
  int64_t bytes_ = 0;
};

// Deepest nesting printed, compared or serialized (templates can build deep or cyclic
// structures through namespaces; Python would raise RecursionError).
inline constexpr int kMaxValueDepth = 200;

bool Truthy(const Value& v);
// Python type name: "NoneType", "bool", "int", "float", "str", "list", "tuple", "dict", ...
std::string TypeName(const Value& v);
// Jinja2's object_type_repr: "None", "dict object", "str object", ...
std::string ObjectTypeRepr(const Value& v);

// Python repr(float).
std::string FormatFloat(double f);

// str(v) as a string with provenance: strings as they are, containers as Python prints
// them (untrusted as a whole if anything inside was), Undefined as "". Fails only on
// structures nested deeper than kMaxValueDepth.
absl::StatusOr<StrPtr> ToStr(const Value& v);
// repr(v) (strings quoted).
absl::StatusOr<std::string> Repr(const Value& v);
// Whether any string inside `v` (keys included) has untrusted bytes.
bool HasUntrusted(const Value& v, int depth = 0);

// Python ==. Never fails except on structures nested too deeply.
absl::StatusOr<bool> Equals(const Value& a, const Value& b);
// Python ordering for <, <=, >, >= and sorting: numbers, strings, and lists/tuples of
// them; TypeError otherwise ("'<' not supported between instances of 'int' and 'str'").
// Returns <0, 0, >0.
absl::StatusOr<int> Compare(const Value& a, const Value& b, absl::string_view op = "<");

// Concatenation keeping provenance exact.
StrPtr Concat(const StrData& a, const StrData& b);
// Bytes [begin, end) of s, provenance kept.
StrPtr Substr(const StrData& s, size_t begin, size_t end);
// A string computed from inputs by a transform that does not keep byte positions: wholly
// untrusted if any input had untrusted bytes.
StrPtr Derived(std::string text, bool any_untrusted);

}  // namespace quill::engine::chat::jinja
