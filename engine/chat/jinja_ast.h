#pragma once

// The syntax tree of a parsed template. Immutable after parsing and shared by every render
// (literal strings are reference-counted immutable values, safe to share across threads).

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/chat/jinja_filters.h"
#include "engine/chat/jinja_value.h"

namespace quill::engine::chat::jinja {

enum class ExprKind {
  kLiteral,
  kName,
  kList,  // list or tuple literal
  kDict,
  kGetAttr,
  kGetItem,
  kSlice,
  kCall,
  kFilter,
  kTest,
  kUnary,
  kBinary,
  kCompare,
  kConcat,
  kCondExpr,
};

struct Expr {
  Expr(ExprKind kind, int line) : kind(kind), line(line) {}
  virtual ~Expr() = default;
  const ExprKind kind;
  const int line;
};
using ExprPtr = std::unique_ptr<Expr>;

struct LiteralExpr : Expr {
  LiteralExpr(int line, Value value) : Expr(ExprKind::kLiteral, line), value(std::move(value)) {}
  Value value;  // None, bool, int, float or string (never a heap value)
};

struct NameExpr : Expr {
  NameExpr(int line, std::string name) : Expr(ExprKind::kName, line), name(std::move(name)) {}
  std::string name;
};

struct ListExpr : Expr {
  ListExpr(int line, bool tuple) : Expr(ExprKind::kList, line), tuple(tuple) {}
  bool tuple;
  std::vector<ExprPtr> items;
};

struct DictExpr : Expr {
  explicit DictExpr(int line) : Expr(ExprKind::kDict, line) {}
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};

struct GetAttrExpr : Expr {
  GetAttrExpr(int line, ExprPtr object, std::string name)
      : Expr(ExprKind::kGetAttr, line), object(std::move(object)), name(std::move(name)) {}
  ExprPtr object;
  std::string name;
};

struct GetItemExpr : Expr {
  GetItemExpr(int line, ExprPtr object, ExprPtr index)
      : Expr(ExprKind::kGetItem, line), object(std::move(object)), index(std::move(index)) {}
  ExprPtr object;
  ExprPtr index;
};

struct SliceExpr : Expr {
  explicit SliceExpr(int line) : Expr(ExprKind::kSlice, line) {}
  ExprPtr object;
  ExprPtr start, stop, step;  // each may be null
};

struct CallArgsExpr {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keywords;
  ExprPtr star_args;    // *args
  ExprPtr star_kwargs;  // **kwargs
};

struct CallExpr : Expr {
  explicit CallExpr(int line) : Expr(ExprKind::kCall, line) {}
  ExprPtr callee;
  CallArgsExpr args;
};

struct FilterExpr : Expr {
  explicit FilterExpr(int line) : Expr(ExprKind::kFilter, line) {}
  ExprPtr operand;  // null in {% filter %} and {% set x | filter %}: the block's text
  std::string name;
  const FilterDef* filter = nullptr;  // null: unknown (an error if ever evaluated)
  CallArgsExpr args;
};

struct TestExpr : Expr {
  explicit TestExpr(int line) : Expr(ExprKind::kTest, line) {}
  ExprPtr operand;
  std::string name;
  const TestDef* test = nullptr;  // null: unknown (an error if ever evaluated)
  CallArgsExpr args;
};

enum class UnaryOp { kNot, kNeg, kPos };

struct UnaryExpr : Expr {
  UnaryExpr(int line, UnaryOp op, ExprPtr operand)
      : Expr(ExprKind::kUnary, line), op(op), operand(std::move(operand)) {}
  UnaryOp op;
  ExprPtr operand;
};

enum class BinaryOp { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow, kAnd, kOr };

struct BinaryExpr : Expr {
  BinaryExpr(int line, BinaryOp op, ExprPtr left, ExprPtr right)
      : Expr(ExprKind::kBinary, line), op(op), left(std::move(left)), right(std::move(right)) {}
  BinaryOp op;
  ExprPtr left, right;
};

enum class CompareOp { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

struct CompareExpr : Expr {
  explicit CompareExpr(int line) : Expr(ExprKind::kCompare, line) {}
  ExprPtr first;
  std::vector<std::pair<CompareOp, ExprPtr>> rest;  // a < b < c chains like Python
};

struct ConcatExpr : Expr {  // a ~ b ~ c
  explicit ConcatExpr(int line) : Expr(ExprKind::kConcat, line) {}
  std::vector<ExprPtr> parts;
};

struct CondExpr : Expr {  // then if test else otherwise
  explicit CondExpr(int line) : Expr(ExprKind::kCondExpr, line) {}
  ExprPtr test, then, otherwise;  // otherwise may be null (gives undefined)
};

// Assignment targets: a name, a tuple of targets (unpacking) or namespace.attr.
struct Target {
  enum class Kind { kName, kTuple, kNamespaceAttr };
  Kind kind = Kind::kName;
  std::string name;           // kName; the namespace variable for kNamespaceAttr
  std::string attr;           // kNamespaceAttr
  std::vector<Target> items;  // kTuple
  int line = 0;
};

enum class StmtKind {
  kData,
  kOutput,
  kIf,
  kFor,
  kSet,
  kSetBlock,
  kMacro,
  kCallBlock,
  kFilterBlock,
  kBreak,
  kContinue,
  kScope,  // {% generation %}: renders its body in a scope of its own
  kWith,
};

struct Stmt {
  Stmt(StmtKind kind, int line) : kind(kind), line(line) {}
  virtual ~Stmt() = default;
  const StmtKind kind;
  const int line;
};
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct DataStmt : Stmt {
  DataStmt(int line, StrPtr text) : Stmt(StmtKind::kData, line), text(std::move(text)) {}
  StrPtr text;
};

struct OutputStmt : Stmt {
  OutputStmt(int line, ExprPtr expr) : Stmt(StmtKind::kOutput, line), expr(std::move(expr)) {}
  ExprPtr expr;
};

struct IfStmt : Stmt {
  explicit IfStmt(int line) : Stmt(StmtKind::kIf, line) {}
  std::vector<std::pair<ExprPtr, Body>> branches;  // if, elif...
  Body else_body;
};

struct ForStmt : Stmt {
  explicit ForStmt(int line) : Stmt(StmtKind::kFor, line) {}
  Target target;
  ExprPtr iterable;
  ExprPtr filter;  // for x in xs if cond (may be null)
  Body body;
  Body else_body;  // runs when no item was iterated
};

struct SetStmt : Stmt {
  explicit SetStmt(int line) : Stmt(StmtKind::kSet, line) {}
  Target target;
  ExprPtr value;
};

struct SetBlockStmt : Stmt {
  explicit SetBlockStmt(int line) : Stmt(StmtKind::kSetBlock, line) {}
  Target target;
  ExprPtr filter;  // FilterExpr chain over the body's text (may be null)
  Body body;
};

// A macro, and the caller of a {% call %} block.
struct MacroDef {
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // defaults[i] belongs to params[i] (null: required)
  Body body;
  bool catch_varargs = false;  // the body reads `varargs`
  bool catch_kwargs = false;   // the body reads `kwargs`
  bool uses_caller = false;    // the body reads `caller`
};

struct MacroStmt : Stmt {
  explicit MacroStmt(int line) : Stmt(StmtKind::kMacro, line) {}
  MacroDef macro;
};

struct CallBlockStmt : Stmt {
  explicit CallBlockStmt(int line) : Stmt(StmtKind::kCallBlock, line) {}
  ExprPtr call;     // the CallExpr whose `caller` is the block
  MacroDef caller;  // name "caller"
};

struct FilterBlockStmt : Stmt {
  explicit FilterBlockStmt(int line) : Stmt(StmtKind::kFilterBlock, line) {}
  ExprPtr filter;  // FilterExpr chain over the body's text
  Body body;
};

struct ScopeStmt : Stmt {
  explicit ScopeStmt(int line) : Stmt(StmtKind::kScope, line) {}
  Body body;
};

struct WithStmt : Stmt {
  explicit WithStmt(int line) : Stmt(StmtKind::kWith, line) {}
  std::vector<std::pair<Target, ExprPtr>> assignments;
  Body body;
};

struct LoopControlStmt : Stmt {  // kBreak, kContinue
  LoopControlStmt(StmtKind kind, int line) : Stmt(kind, line) {}
};

struct Template {
  Body body;
};

}  // namespace quill::engine::chat::jinja
