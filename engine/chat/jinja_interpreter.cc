#include "engine/chat/jinja_interpreter.h"

#include <cmath>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/chat/jinja_error.h"
#include "engine/chat/jinja_filters.h"
#include "engine/chat/jinja_globals.h"
#include "engine/chat/jinja_methods.h"
#include "engine/chat/py_string.h"

namespace quill::engine::chat::jinja {
namespace {

class Scope : public HeapObject {
 public:
  explicit Scope(Scope* parent_scope) : parent(parent_scope) {}
  Scope* parent;  // owned by the same heap; outlives this scope's use
  absl::flat_hash_map<std::string, Value> vars;
};

class MacroObject : public CallableObject {
 public:
  MacroObject(const MacroDef* macro_def, Scope* closure_scope)
      : CallableObject(Kind::kMacro), def(macro_def), closure(closure_scope) {
    name = macro_def->name;
  }
  const MacroDef* def;  // owned by the template, which outlives the render
  Scope* closure;       // the scope the macro was defined in
};

// Text being rendered (the template's output, a macro's, a block's).
struct Output {
  std::string text;
  Provenance untrusted;
};

enum class Flow { kNormal, kBreak, kContinue };

class Interpreter {
 public:
  explicit Interpreter(Runtime& rt) : rt_(rt) {}

  absl::StatusOr<StrPtr> Run(const Template& tmpl,
                             const std::vector<std::pair<std::string, Value>>& variables) {
    Scope* root = rt_.heap().New<Scope>(nullptr);
    for (const auto& [name, value] : variables) root->vars[name] = value;
    Output out;
    QUILL_ASSIGN_OR_RETURN(Flow flow, ExecBody(tmpl.body, root, &out));
    (void)flow;  // the parser allows break/continue only inside loops
    return MakeStr(std::move(out.text), std::move(out.untrusted));
  }

 private:
  // ---- output ----
  absl::Status Append(Output* out, const StrData& s) {
    if (s.text.empty()) return absl::OkStatus();
    if (static_cast<int64_t>(out->text.size() + s.text.size()) > rt_.limits().max_output_bytes) {
      return Error(ErrorKind::kLimit, absl::StrCat("the rendered text exceeds ",
                                                   rt_.limits().max_output_bytes, " bytes"));
    }
    QUILL_RETURN_IF_ERROR(rt_.Charge(static_cast<int64_t>(s.text.size())));
    out->untrusted.Append(s.untrusted, out->text.size());
    out->text += s.text;
    return absl::OkStatus();
  }

  absl::StatusOr<Value> OutputValue(Output&& out) {
    return Value::String(MakeStr(std::move(out.text), std::move(out.untrusted)));
  }

  // ---- statements ----
  absl::StatusOr<Flow> ExecBody(const Body& body, Scope* scope, Output* out) {
    for (const StmtPtr& stmt : body) {
      absl::StatusOr<Flow> flow = Exec(*stmt, scope, out);
      if (!flow.ok()) return AtLine(flow.status(), stmt->line);
      if (*flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  absl::StatusOr<Flow> Exec(const Stmt& stmt, Scope* scope, Output* out) {
    DepthGuard depth(rt_);
    QUILL_RETURN_IF_ERROR(depth.status());
    QUILL_RETURN_IF_ERROR(rt_.Tick());
    switch (stmt.kind) {
      case StmtKind::kData:
        QUILL_RETURN_IF_ERROR(Append(out, *static_cast<const DataStmt&>(stmt).text));
        return Flow::kNormal;
      case StmtKind::kOutput: {
        QUILL_ASSIGN_OR_RETURN(Value v, Eval(*static_cast<const OutputStmt&>(stmt).expr, scope));
        QUILL_ASSIGN_OR_RETURN(StrPtr s, ToStr(v));
        QUILL_RETURN_IF_ERROR(Append(out, *s));
        return Flow::kNormal;
      }
      case StmtKind::kIf: {
        const auto& s = static_cast<const IfStmt&>(stmt);
        for (const auto& [test, body] : s.branches) {
          QUILL_ASSIGN_OR_RETURN(Value v, Eval(*test, scope));
          if (Truthy(v)) return ExecBody(body, scope, out);
        }
        return ExecBody(s.else_body, scope, out);
      }
      case StmtKind::kFor:
        return ExecFor(static_cast<const ForStmt&>(stmt), scope, out);
      case StmtKind::kSet: {
        const auto& s = static_cast<const SetStmt&>(stmt);
        QUILL_ASSIGN_OR_RETURN(Value v, Eval(*s.value, scope));
        QUILL_RETURN_IF_ERROR(Assign(s.target, v, scope, scope));
        return Flow::kNormal;
      }
      case StmtKind::kSetBlock: {
        const auto& s = static_cast<const SetBlockStmt&>(stmt);
        QUILL_ASSIGN_OR_RETURN(Value v, RenderBlock(s.body, scope));
        if (s.filter) {
          QUILL_ASSIGN_OR_RETURN(v, EvalWithBlockInput(*s.filter, v, scope));
        }
        QUILL_RETURN_IF_ERROR(Assign(s.target, v, scope, scope));
        return Flow::kNormal;
      }
      case StmtKind::kMacro: {
        const auto& s = static_cast<const MacroStmt&>(stmt);
        scope->vars[s.macro.name] = Value::Callable(rt_.heap().New<MacroObject>(&s.macro, scope));
        return Flow::kNormal;
      }
      case StmtKind::kCallBlock: {
        const auto& s = static_cast<const CallBlockStmt&>(stmt);
        const Value caller = Value::Callable(rt_.heap().New<MacroObject>(&s.caller, scope));
        QUILL_ASSIGN_OR_RETURN(Value v,
                               EvalCall(static_cast<const CallExpr&>(*s.call), scope, &caller));
        QUILL_ASSIGN_OR_RETURN(StrPtr text, ToStr(v));
        QUILL_RETURN_IF_ERROR(Append(out, *text));
        return Flow::kNormal;
      }
      case StmtKind::kFilterBlock: {
        const auto& s = static_cast<const FilterBlockStmt&>(stmt);
        QUILL_ASSIGN_OR_RETURN(Value v, RenderBlock(s.body, scope));
        QUILL_ASSIGN_OR_RETURN(v, EvalWithBlockInput(*s.filter, v, scope));
        QUILL_ASSIGN_OR_RETURN(StrPtr text, ToStr(v));
        QUILL_RETURN_IF_ERROR(Append(out, *text));
        return Flow::kNormal;
      }
      case StmtKind::kScope: {
        Scope* inner = rt_.heap().New<Scope>(scope);
        QUILL_RETURN_IF_ERROR(
            ExecBody(static_cast<const ScopeStmt&>(stmt).body, inner, out).status());
        return Flow::kNormal;
      }
      case StmtKind::kWith: {
        const auto& s = static_cast<const WithStmt&>(stmt);
        Scope* inner = rt_.heap().New<Scope>(scope);
        for (const auto& [target, expr] : s.assignments) {
          QUILL_ASSIGN_OR_RETURN(Value v, Eval(*expr, scope));  // values see the outer scope
          QUILL_RETURN_IF_ERROR(Assign(target, v, inner, inner));
        }
        return ExecBody(s.body, inner, out);
      }
      case StmtKind::kBreak:
        return Flow::kBreak;
      case StmtKind::kContinue:
        return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  // The body rendered into a string of its own, in a child scope.
  absl::StatusOr<Value> RenderBlock(const Body& body, Scope* scope) {
    Scope* inner = rt_.heap().New<Scope>(scope);
    Output block;
    QUILL_RETURN_IF_ERROR(ExecBody(body, inner, &block).status());
    return OutputValue(std::move(block));
  }

  absl::StatusOr<Flow> ExecFor(const ForStmt& s, Scope* scope, Output* out) {
    QUILL_ASSIGN_OR_RETURN(Value iterable, Eval(*s.iterable, scope));
    if (iterable.is_undefined() && iterable.undefined_info() != nullptr &&
        iterable.undefined_info()->security) {
      return rt_.UndefinedError(iterable);
    }
    QUILL_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(rt_, iterable));
    if (s.filter) {
      // `for x in xs if cond`: loop.index and loop.length count the kept items only.
      std::vector<Value> kept;
      for (Value& item : items) {
        QUILL_RETURN_IF_ERROR(rt_.Tick());
        Scope* probe = rt_.heap().New<Scope>(scope);
        QUILL_RETURN_IF_ERROR(Assign(s.target, item, probe, probe));
        QUILL_ASSIGN_OR_RETURN(Value keep, Eval(*s.filter, probe));
        if (Truthy(keep)) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      Scope* inner = rt_.heap().New<Scope>(scope);
      QUILL_RETURN_IF_ERROR(ExecBody(s.else_body, inner, out).status());
      return Flow::kNormal;
    }
    LoopObject* loop = rt_.heap().New<LoopObject>();
    loop->items = std::move(items);
    const Value loop_value = Value::Loop(loop);
    for (size_t i = 0; i < loop->items.size(); ++i) {
      QUILL_RETURN_IF_ERROR(rt_.Tick());
      loop->index0 = i;
      Scope* inner = rt_.heap().New<Scope>(scope);
      inner->vars["loop"] = loop_value;
      QUILL_RETURN_IF_ERROR(Assign(s.target, loop->items[i], inner, inner));
      QUILL_ASSIGN_OR_RETURN(Flow flow, ExecBody(s.body, inner, out));
      if (flow == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  // Binds `value` to `target`: names in `scope`, namespace attributes through the
  // variable found from `lookup`.
  absl::Status Assign(const Target& target, const Value& value, Scope* scope, Scope* lookup) {
    switch (target.kind) {
      case Target::Kind::kName:
        scope->vars[target.name] = value;
        return absl::OkStatus();
      case Target::Kind::kTuple: {
        QUILL_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(rt_, value));
        if (items.size() != target.items.size()) {
          return Error(
              ErrorKind::kValue,
              items.size() > target.items.size()
                  ? absl::StrCat("too many values to unpack (expected ", target.items.size(), ")")
                  : absl::StrCat("not enough values to unpack (expected ", target.items.size(),
                                 ", got ", items.size(), ")"));
        }
        for (size_t i = 0; i < items.size(); ++i) {
          QUILL_RETURN_IF_ERROR(Assign(target.items[i], items[i], scope, lookup));
        }
        return absl::OkStatus();
      }
      case Target::Kind::kNamespaceAttr: {
        const Value ns = Lookup(target.name, lookup);
        if (ns.type() != ValueType::kNamespace) {
          return Error(ErrorKind::kRuntime, "cannot assign attribute on non-namespace object");
        }
        ns.ns()->Set(target.attr, value);
        return absl::OkStatus();
      }
    }
    return absl::OkStatus();
  }

  // ---- expressions ----
  Value Lookup(const std::string& name, Scope* scope) {
    for (Scope* s = scope; s != nullptr; s = s->parent) {
      auto it = s->vars.find(name);
      if (it != s->vars.end()) return it->second;
    }
    if (const BuiltinObject* g = FindGlobal(name)) {
      return Value::Callable(const_cast<BuiltinObject*>(g));
    }
    return rt_.UndefinedName(name);
  }

  absl::StatusOr<Value> Eval(const Expr& e, Scope* scope) {
    DepthGuard depth(rt_);
    QUILL_RETURN_IF_ERROR(depth.status());
    QUILL_RETURN_IF_ERROR(rt_.Tick());
    absl::StatusOr<Value> v = EvalImpl(e, scope);
    if (!v.ok()) return AtLine(v.status(), e.line);
    return v;
  }

  absl::StatusOr<Value> EvalImpl(const Expr& e, Scope* scope) {
    switch (e.kind) {
      case ExprKind::kLiteral:
        return static_cast<const LiteralExpr&>(e).value;
      case ExprKind::kName:
        return Lookup(static_cast<const NameExpr&>(e).name, scope);
      case ExprKind::kList: {
        const auto& l = static_cast<const ListExpr&>(e);
        std::vector<Value> items;
        items.reserve(l.items.size());
        for (const ExprPtr& item : l.items) {
          QUILL_ASSIGN_OR_RETURN(Value v, Eval(*item, scope));
          items.push_back(std::move(v));
        }
        return rt_.NewList(l.tuple ? ListKind::kTuple : ListKind::kList, std::move(items));
      }
      case ExprKind::kDict: {
        std::vector<std::pair<Value, Value>> entries;
        for (const auto& [key_expr, value_expr] : static_cast<const DictExpr&>(e).items) {
          QUILL_ASSIGN_OR_RETURN(Value key, Eval(*key_expr, scope));
          if (key.is_list() || key.is_dict() || key.is_undefined()) {
            return Error(ErrorKind::kType, absl::StrCat("unhashable type: '", TypeName(key), "'"));
          }
          QUILL_ASSIGN_OR_RETURN(Value value, Eval(*value_expr, scope));
          entries.emplace_back(std::move(key), std::move(value));
        }
        return rt_.NewDict(std::move(entries));
      }
      case ExprKind::kGetAttr: {
        const auto& g = static_cast<const GetAttrExpr&>(e);
        QUILL_ASSIGN_OR_RETURN(Value obj, Eval(*g.object, scope));
        return GetAttr(rt_, obj, g.name);
      }
      case ExprKind::kGetItem: {
        const auto& g = static_cast<const GetItemExpr&>(e);
        QUILL_ASSIGN_OR_RETURN(Value obj, Eval(*g.object, scope));
        QUILL_ASSIGN_OR_RETURN(Value key, Eval(*g.index, scope));
        return GetItem(rt_, obj, key);
      }
      case ExprKind::kSlice: {
        const auto& s = static_cast<const SliceExpr&>(e);
        QUILL_ASSIGN_OR_RETURN(Value obj, Eval(*s.object, scope));
        Value bounds[3];
        const Expr* exprs[3] = {s.start.get(), s.stop.get(), s.step.get()};
        for (int i = 0; i < 3; ++i) {
          if (exprs[i] != nullptr) {
            QUILL_ASSIGN_OR_RETURN(bounds[i], Eval(*exprs[i], scope));
          }
        }
        return GetSlice(rt_, obj, exprs[0] ? &bounds[0] : nullptr, exprs[1] ? &bounds[1] : nullptr,
                        exprs[2] ? &bounds[2] : nullptr);
      }
      case ExprKind::kCall:
        return EvalCall(static_cast<const CallExpr&>(e), scope, nullptr);
      case ExprKind::kFilter:
        return EvalFilter(static_cast<const FilterExpr&>(e), scope);
      case ExprKind::kTest: {
        const auto& t = static_cast<const TestExpr&>(e);
        QUILL_ASSIGN_OR_RETURN(Value operand, Eval(*t.operand, scope));
        if (t.test == nullptr) {
          return Error(ErrorKind::kRuntime,
                       absl::StrCat("No test named ", py::Repr(t.name), " found."));
        }
        QUILL_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(t.args, scope));
        QUILL_ASSIGN_OR_RETURN(bool result, ApplyTest(rt_, *t.test, operand, args));
        return Value::Bool(result);
      }
      case ExprKind::kUnary:
        return EvalUnary(static_cast<const UnaryExpr&>(e), scope);
      case ExprKind::kBinary:
        return EvalBinary(static_cast<const BinaryExpr&>(e), scope);
      case ExprKind::kCompare:
        return EvalCompare(static_cast<const CompareExpr&>(e), scope);
      case ExprKind::kConcat: {
        auto s = std::make_shared<StrData>();
        for (const ExprPtr& part : static_cast<const ConcatExpr&>(e).parts) {
          QUILL_ASSIGN_OR_RETURN(Value v, Eval(*part, scope));
          QUILL_ASSIGN_OR_RETURN(StrPtr text, ToStr(v));
          s->untrusted.Append(text->untrusted, s->text.size());
          s->text += text->text;
          QUILL_RETURN_IF_ERROR(rt_.Charge(static_cast<int64_t>(text->text.size())));
        }
        return rt_.NewString(std::move(s));
      }
      case ExprKind::kCondExpr: {
        const auto& c = static_cast<const CondExpr&>(e);
        QUILL_ASSIGN_OR_RETURN(Value test, Eval(*c.test, scope));
        if (Truthy(test)) return Eval(*c.then, scope);
        if (c.otherwise) return Eval(*c.otherwise, scope);
        return rt_.Undefined(absl::StrCat("the inline if-expression on line ", e.line,
                                          " evaluated to false and no else section was "
                                          "defined."));
      }
    }
    return Error(ErrorKind::kRuntime, "unknown expression");
  }

  absl::StatusOr<Value> EvalWithBlockInput(const Expr& filter, const Value& input, Scope* scope) {
    const Value* saved = block_input_;
    block_input_ = &input;
    absl::StatusOr<Value> v = Eval(filter, scope);
    block_input_ = saved;
    return v;
  }

  absl::StatusOr<Value> EvalFilter(const FilterExpr& f, Scope* scope) {
    Value operand;
    if (f.operand) {
      QUILL_ASSIGN_OR_RETURN(operand, Eval(*f.operand, scope));
    } else if (block_input_ != nullptr) {
      operand = *block_input_;
    }
    if (f.filter == nullptr) {
      return Error(ErrorKind::kRuntime,
                   absl::StrCat("No filter named ", py::Repr(f.name), " found."));
    }
    QUILL_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(f.args, scope));
    return ApplyFilter(rt_, *f.filter, operand, args);
  }

  absl::StatusOr<CallArgs> EvalArgs(const CallArgsExpr& a, Scope* scope) {
    CallArgs args;
    args.positional.reserve(a.positional.size());
    for (const ExprPtr& e : a.positional) {
      QUILL_ASSIGN_OR_RETURN(Value v, Eval(*e, scope));
      args.positional.push_back(std::move(v));
    }
    for (const auto& [name, e] : a.keywords) {
      QUILL_ASSIGN_OR_RETURN(Value v, Eval(*e, scope));
      args.keywords.emplace_back(name, std::move(v));
    }
    if (a.star_args) {
      QUILL_ASSIGN_OR_RETURN(Value v, Eval(*a.star_args, scope));
      QUILL_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(rt_, v));
      for (Value& item : items) args.positional.push_back(std::move(item));
    }
    if (a.star_kwargs) {
      QUILL_ASSIGN_OR_RETURN(Value v, Eval(*a.star_kwargs, scope));
      if (!v.is_dict()) {
        return Error(ErrorKind::kType,
                     absl::StrCat("argument after ** must be a mapping, not ", TypeName(v)));
      }
      for (const auto& [k, value] : v.dict()->entries) {
        if (!k.is_string()) return Error(ErrorKind::kType, "keywords must be strings");
        args.keywords.emplace_back(k.text(), value);
      }
    }
    return args;
  }

  absl::StatusOr<Value> EvalCall(const CallExpr& call, Scope* scope, const Value* caller) {
    // obj.method(...) on a builtin type: call it without materializing a bound method.
    if (call.callee->kind == ExprKind::kGetAttr) {
      const auto& g = static_cast<const GetAttrExpr&>(*call.callee);
      QUILL_ASSIGN_OR_RETURN(Value obj, Eval(*g.object, scope));
      if (HasCallableMethod(obj, g.name)) {
        QUILL_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(call.args, scope));
        if (caller != nullptr) args.keywords.emplace_back("caller", *caller);
        return CallMethod(rt_, obj, g.name, args);
      }
      QUILL_ASSIGN_OR_RETURN(Value callee, GetAttr(rt_, obj, g.name));
      QUILL_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(call.args, scope));
      if (caller != nullptr) args.keywords.emplace_back("caller", *caller);
      return CallValue(callee, args);
    }
    QUILL_ASSIGN_OR_RETURN(Value callee, Eval(*call.callee, scope));
    QUILL_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(call.args, scope));
    if (caller != nullptr) args.keywords.emplace_back("caller", *caller);
    return CallValue(callee, args);
  }

  absl::StatusOr<Value> CallValue(const Value& callee, CallArgs& args) {
    QUILL_RETURN_IF_ERROR(rt_.Tick());
    if (callee.is_undefined()) return rt_.UndefinedError(callee);
    if (callee.type() != ValueType::kCallable) {
      return Error(ErrorKind::kType,
                   absl::StrCat("'", TypeName(callee), "' object is not callable"));
    }
    CallableObject* c = callee.callable();
    switch (c->kind) {
      case CallableObject::Kind::kMacro:
        return CallMacro(*static_cast<MacroObject*>(c), args);
      case CallableObject::Kind::kBuiltin:
        return static_cast<BuiltinObject*>(c)->fn(rt_, args);
      case CallableObject::Kind::kMethod:
      case CallableObject::Kind::kLoopMethod:
        return CallMethod(rt_, static_cast<MethodObject*>(c)->self, c->name, args);
    }
    return Error(ErrorKind::kType, "not callable");
  }

  // Binds arguments as Jinja2's Macro.__call__ does, then renders the body.
  absl::StatusOr<Value> CallMacro(const MacroObject& macro, CallArgs& args) {
    const MacroDef& def = *macro.def;
    Scope* scope = rt_.heap().New<Scope>(macro.closure);
    const size_t n = def.params.size();
    std::vector<std::pair<std::string, Value>> kwargs = std::move(args.keywords);
    const auto take_kwarg = [&](const std::string& name, Value* out) {
      for (auto it = kwargs.begin(); it != kwargs.end(); ++it) {
        if (it->first == name) {
          *out = std::move(it->second);
          kwargs.erase(it);
          return true;
        }
      }
      return false;
    };
    std::vector<bool> provided(n, false);
    bool caller_bound = false;
    for (size_t i = 0; i < n; ++i) {
      Value v;
      if (i < args.positional.size()) {
        v = args.positional[i];
      } else if (!take_kwarg(def.params[i], &v)) {
        continue;
      }
      provided[i] = true;
      if (def.params[i] == "caller") caller_bound = true;
      scope->vars[def.params[i]] = std::move(v);
    }
    if (def.uses_caller && !caller_bound) {
      Value caller;
      if (!take_kwarg("caller", &caller)) caller = rt_.Undefined("No caller defined");
      scope->vars["caller"] = caller;
    }
    if (def.catch_kwargs) {
      std::vector<std::pair<Value, Value>> entries;
      for (auto& [k, v] : kwargs) entries.emplace_back(Value::Str(k), std::move(v));
      QUILL_ASSIGN_OR_RETURN(scope->vars["kwargs"], rt_.NewDict(std::move(entries)));
    } else if (!kwargs.empty()) {
      if (kwargs.front().first == "caller") {
        return Error(ErrorKind::kType,
                     absl::StrCat("macro ", py::Repr(def.name),
                                  " was invoked with two values for the special caller "
                                  "argument. This is most likely a bug."));
      }
      return Error(ErrorKind::kType,
                   absl::StrCat("macro ", py::Repr(def.name), " takes no keyword argument ",
                                py::Repr(kwargs.front().first)));
    }
    if (def.catch_varargs) {
      std::vector<Value> rest;
      for (size_t i = n; i < args.positional.size(); ++i) rest.push_back(args.positional[i]);
      QUILL_ASSIGN_OR_RETURN(scope->vars["varargs"],
                             rt_.NewList(ListKind::kTuple, std::move(rest)));
    } else if (args.positional.size() > n) {
      return Error(ErrorKind::kType, absl::StrCat("macro ", py::Repr(def.name),
                                                  " takes not more than ", n, " argument(s)"));
    }
    for (size_t i = 0; i < n; ++i) {
      if (provided[i]) continue;
      if (def.defaults[i]) {
        QUILL_ASSIGN_OR_RETURN(scope->vars[def.params[i]], Eval(*def.defaults[i], scope));
      } else {
        scope->vars[def.params[i]] =
            rt_.Undefined(absl::StrCat("parameter ", py::Repr(def.params[i]), " was not provided"));
      }
    }
    Output out;
    QUILL_RETURN_IF_ERROR(ExecBody(def.body, scope, &out).status());
    return OutputValue(std::move(out));
  }

  absl::StatusOr<Value> EvalUnary(const UnaryExpr& u, Scope* scope) {
    QUILL_ASSIGN_OR_RETURN(Value v, Eval(*u.operand, scope));
    if (u.op == UnaryOp::kNot) return Value::Bool(!Truthy(v));
    if (v.is_undefined()) return rt_.UndefinedError(v);
    if (!v.is_number()) {
      return Error(ErrorKind::kType,
                   absl::StrCat("bad operand type for unary ", u.op == UnaryOp::kNeg ? "-" : "+",
                                ": '", TypeName(v), "'"));
    }
    if (u.op == UnaryOp::kPos) return v.is_bool() ? Value::Int(v.as_int()) : v;
    if (v.is_float()) return Value::Float(-v.as_float());
    if (v.as_int() == INT64_MIN) return Overflow();
    return Value::Int(-v.as_int());
  }

  static absl::Status Overflow() {
    return Error(ErrorKind::kOverflow, "integer result does not fit in 64 bits");
  }

  absl::Status BinaryTypeError(absl::string_view op, const Value& a, const Value& b) {
    if (op == "+" && a.is_string()) {
      return Error(ErrorKind::kType,
                   absl::StrCat("can only concatenate str (not \"", TypeName(b), "\") to str"));
    }
    if (op == "+" && a.is_list() && b.is_list()) {
      return Error(ErrorKind::kType, absl::StrCat("can only concatenate ", TypeName(a), " (not \"",
                                                  TypeName(b), "\") to ", TypeName(a)));
    }
    return Error(ErrorKind::kType, absl::StrCat("unsupported operand type(s) for ", op, ": '",
                                                TypeName(a), "' and '", TypeName(b), "'"));
  }

  absl::StatusOr<Value> EvalBinary(const BinaryExpr& b, Scope* scope) {
    QUILL_ASSIGN_OR_RETURN(Value left, Eval(*b.left, scope));
    if (b.op == BinaryOp::kAnd) return Truthy(left) ? Eval(*b.right, scope) : left;
    if (b.op == BinaryOp::kOr) return Truthy(left) ? left : Eval(*b.right, scope);
    QUILL_ASSIGN_OR_RETURN(Value right, Eval(*b.right, scope));
    if (left.is_undefined()) return rt_.UndefinedError(left);
    if (right.is_undefined()) return rt_.UndefinedError(right);
    switch (b.op) {
      case BinaryOp::kAdd:
        return Add(left, right);
      case BinaryOp::kSub:
        return Arithmetic(left, right, "-");
      case BinaryOp::kMul:
        return Multiply(left, right);
      case BinaryOp::kDiv:
        return Arithmetic(left, right, "/");
      case BinaryOp::kFloorDiv:
        return Arithmetic(left, right, "//");
      case BinaryOp::kMod:
        if (left.is_string()) {
          return Error(ErrorKind::kUnsupported,
                       "printf-style '%' string formatting is not supported");
        }
        return Arithmetic(left, right, "%");
      case BinaryOp::kPow:
        return Arithmetic(left, right, "**");
      default:
        return Error(ErrorKind::kRuntime, "bad operator");
    }
  }

  absl::StatusOr<Value> Add(const Value& a, const Value& b) {
    if (a.is_number() && b.is_number()) return Arithmetic(a, b, "+");
    if (a.is_string() && b.is_string()) {
      const StrData& x = a.str();
      const StrData& y = b.str();
      QUILL_RETURN_IF_ERROR(rt_.Charge(static_cast<int64_t>(x.text.size() + y.text.size())));
      if (!x.markup && !y.markup) return Value::String(Concat(x, y));
      // markupsafe.Markup: the plain operand is HTML-escaped and the result is Markup.
      const auto escaped = [](const StrData& s) {
        return s.markup ? std::make_shared<StrData>(s)
                        : std::const_pointer_cast<StrData>(
                              Derived(HtmlEscape(s.text), !s.untrusted.empty()));
      };
      auto r = std::const_pointer_cast<StrData>(Concat(*escaped(x), *escaped(y)));
      r->markup = true;
      return Value::String(std::move(r));
    }
    if (a.is_list() && b.is_list() && a.list()->kind == b.list()->kind &&
        (a.list()->kind == ListKind::kList || a.list()->kind == ListKind::kTuple)) {
      std::vector<Value> items = a.list()->items;
      items.insert(items.end(), b.list()->items.begin(), b.list()->items.end());
      return rt_.NewList(a.list()->kind, std::move(items));
    }
    return BinaryTypeError("+", a, b);
  }

  absl::StatusOr<Value> Multiply(const Value& a, const Value& b) {
    if (a.is_number() && b.is_number()) return Arithmetic(a, b, "*");
    const Value& seq = (a.is_int() || a.is_bool()) ? b : a;
    const Value& count = (a.is_int() || a.is_bool()) ? a : b;
    if (!(count.is_int() || count.is_bool()) || !(seq.is_string() || seq.is_list())) {
      return BinaryTypeError("*", a, b);
    }
    const int64_t n = std::max<int64_t>(0, count.as_int());
    if (seq.is_string()) {
      const StrData& s = seq.str();
      if (n > 0 && static_cast<int64_t>(s.text.size()) > rt_.limits().max_output_bytes / n) {
        return rt_.Charge(rt_.limits().max_output_bytes + 1);
      }
      QUILL_RETURN_IF_ERROR(rt_.Charge(static_cast<int64_t>(s.text.size()) * n));
      auto r = std::make_shared<StrData>();
      for (int64_t i = 0; i < n; ++i) {
        r->untrusted.Append(s.untrusted, r->text.size());
        r->text += s.text;
      }
      return Value::String(std::move(r));
    }
    const ListObject& list = *seq.list();
    if (list.kind != ListKind::kList && list.kind != ListKind::kTuple) {
      return BinaryTypeError("*", a, b);
    }
    const int64_t per = static_cast<int64_t>(list.items.size() * sizeof(Value));
    if (n > 0 && per > rt_.limits().max_output_bytes / n) {
      return rt_.Charge(rt_.limits().max_output_bytes + 1);
    }
    QUILL_RETURN_IF_ERROR(rt_.Tick(static_cast<int64_t>(list.items.size()) * n));
    std::vector<Value> items;
    for (int64_t i = 0; i < n; ++i) items.insert(items.end(), list.items.begin(), list.items.end());
    return rt_.NewList(list.kind, std::move(items));
  }

  // Python arithmetic on int/float/bool.
  absl::StatusOr<Value> Arithmetic(const Value& a, const Value& b, absl::string_view op) {
    if (!a.is_number() || !b.is_number()) return BinaryTypeError(op, a, b);
    const bool both_int = !a.is_float() && !b.is_float();
    if (op == "/") {
      if (b.as_float() == 0) return Error(ErrorKind::kZeroDivision, "division by zero");
      return Value::Float(a.as_float() / b.as_float());
    }
    if (both_int) {
      const int64_t x = a.as_int(), y = b.as_int();
      int64_t r = 0;
      if (op == "+") {
        if (__builtin_add_overflow(x, y, &r)) return Overflow();
        return Value::Int(r);
      }
      if (op == "-") {
        if (__builtin_sub_overflow(x, y, &r)) return Overflow();
        return Value::Int(r);
      }
      if (op == "*") {
        if (__builtin_mul_overflow(x, y, &r)) return Overflow();
        return Value::Int(r);
      }
      if (op == "//" || op == "%") {
        if (y == 0) {
          return Error(ErrorKind::kZeroDivision, "integer division or modulo by zero");
        }
        if (x == INT64_MIN && y == -1)
          return op == "%" ? Value::Int(0) : absl::StatusOr<Value>(Overflow());
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {
          --q;
          m += y;
        }
        return Value::Int(op == "//" ? q : m);
      }
      if (op == "**") {
        if (y < 0) {
          if (x == 0) {
            return Error(ErrorKind::kZeroDivision, "0.0 cannot be raised to a negative power");
          }
          return Value::Float(std::pow(static_cast<double>(x), static_cast<double>(y)));
        }
        int64_t result = 1, base = x, e = y;
        while (e > 0) {
          if (e & 1) {
            if (__builtin_mul_overflow(result, base, &result)) return Overflow();
          }
          e >>= 1;
          if (e > 0 && __builtin_mul_overflow(base, base, &base)) return Overflow();
        }
        return Value::Int(result);
      }
    }
    const double x = a.as_float(), y = b.as_float();
    if (op == "+") return Value::Float(x + y);
    if (op == "-") return Value::Float(x - y);
    if (op == "*") return Value::Float(x * y);
    if (op == "//" || op == "%") {
      if (y == 0) {
        return Error(ErrorKind::kZeroDivision,
                     op == "%" ? "float modulo" : "float floor division by zero");
      }
      // CPython's float divmod.
      double mod = std::fmod(x, y);
      double div = (x - mod) / y;
      if (mod != 0) {
        if ((y < 0) != (mod < 0)) {
          mod += y;
          div -= 1.0;
        }
      } else {
        mod = std::copysign(0.0, y);
      }
      if (op == "%") return Value::Float(mod);
      double floordiv = 0;
      if (div != 0) {
        floordiv = std::floor(div);
        if (div - floordiv > 0.5) floordiv += 1.0;
      } else {
        floordiv = std::copysign(0.0, x / y);
      }
      return Value::Float(floordiv);
    }
    if (op == "**") {
      if (x == 0 && y < 0) {
        return Error(ErrorKind::kZeroDivision, "0.0 cannot be raised to a negative power");
      }
      return Value::Float(std::pow(x, y));
    }
    return BinaryTypeError(op, a, b);
  }

  absl::StatusOr<Value> EvalCompare(const CompareExpr& c, Scope* scope) {
    QUILL_ASSIGN_OR_RETURN(Value left, Eval(*c.first, scope));
    for (const auto& [op, right_expr] : c.rest) {
      QUILL_ASSIGN_OR_RETURN(Value right, Eval(*right_expr, scope));
      bool result = false;
      switch (op) {
        case CompareOp::kEq:
        case CompareOp::kNe: {
          QUILL_ASSIGN_OR_RETURN(bool eq, Equals(left, right));
          result = op == CompareOp::kEq ? eq : !eq;
          break;
        }
        case CompareOp::kIn:
        case CompareOp::kNotIn: {
          QUILL_ASSIGN_OR_RETURN(bool in, Contains(rt_, right, left));
          result = op == CompareOp::kIn ? in : !in;
          break;
        }
        default: {
          if (left.is_undefined()) return rt_.UndefinedError(left);
          if (right.is_undefined()) return rt_.UndefinedError(right);
          const absl::string_view name = op == CompareOp::kLt   ? "<"
                                         : op == CompareOp::kLe ? "<="
                                         : op == CompareOp::kGt ? ">"
                                                                : ">=";
          QUILL_ASSIGN_OR_RETURN(int cmp, Compare(left, right, name));
          result = op == CompareOp::kLt   ? cmp < 0
                   : op == CompareOp::kLe ? cmp <= 0
                   : op == CompareOp::kGt ? cmp > 0
                                          : cmp >= 0;
        }
      }
      if (!result) return Value::Bool(false);
      left = std::move(right);
    }
    return Value::Bool(true);
  }

  Runtime& rt_;
  const Value* block_input_ = nullptr;  // the text a {% filter %} / set-block filter applies to
};

}  // namespace

absl::StatusOr<StrPtr> Render(const Template& tmpl, Runtime& rt,
                              const std::vector<std::pair<std::string, Value>>& variables) {
  Interpreter interpreter(rt);
  return interpreter.Run(tmpl, variables);
}

}  // namespace quill::engine::chat::jinja
