#include "engine/chat/jinja_parser.h"

#include <functional>
#include <initializer_list>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/base/status_macros.h"
#include "engine/chat/jinja_error.h"
#include "engine/chat/jinja_lexer.h"
#include "engine/chat/py_string.h"

namespace quill::engine::chat::jinja {
namespace {

std::string Describe(const Token& t) {
  switch (t.type) {
    case TokenType::kName:
    case TokenType::kOperator:
      return t.value;
    case TokenType::kString:
      return "string";
    case TokenType::kInteger:
      return "integer";
    case TokenType::kFloat:
      return "float";
    case TokenType::kData:
      return "template data";
    case TokenType::kVariableBegin:
      return "begin of print statement";
    case TokenType::kVariableEnd:
      return "end of print statement";
    case TokenType::kBlockBegin:
      return "begin of statement block";
    case TokenType::kBlockEnd:
      return "end of statement block";
    case TokenType::kEof:
      return "end of template";
  }
  return "token";
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  absl::StatusOr<std::unique_ptr<const Template>> Run() {
    auto tmpl = std::make_unique<Template>();
    QUILL_ASSIGN_OR_RETURN(tmpl->body, ParseBody({}));
    return std::unique_ptr<const Template>(std::move(tmpl));
  }

 private:
  // ---- token stream ----
  const Token& Current() const { return tokens_[pos_]; }
  const Token& Look() const { return tokens_[std::min(pos_ + 1, tokens_.size() - 1)]; }
  const Token& Next() {
    const Token& t = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return t;
  }
  bool IsOp(absl::string_view op) const {
    return Current().type == TokenType::kOperator && Current().value == op;
  }
  bool IsName(absl::string_view name) const {
    return Current().type == TokenType::kName && Current().value == name;
  }
  bool SkipOp(absl::string_view op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }
  bool SkipName(absl::string_view name) {
    if (!IsName(name)) return false;
    Next();
    return true;
  }

  absl::Status Fail(const Token& at, absl::string_view message) const {
    return SyntaxError(at.line, at.column, message);
  }
  absl::Status Unexpected(absl::string_view expected) const {
    return Fail(Current(),
                absl::StrCat("expected ", expected, ", got '", Describe(Current()), "'"));
  }
  absl::Status ExpectOp(absl::string_view op) {
    if (!SkipOp(op)) return Unexpected(absl::StrCat("'", op, "'"));
    return absl::OkStatus();
  }
  absl::Status ExpectType(TokenType type, absl::string_view what) {
    if (Current().type != type) return Unexpected(what);
    Next();
    return absl::OkStatus();
  }
  absl::Status ExpectBlockEnd() {
    SkipOp(":");  // Jinja2 accepts "{% else: %}"
    return ExpectType(TokenType::kBlockEnd, "end of statement block");
  }
  absl::StatusOr<std::string> ExpectName() {
    if (Current().type != TokenType::kName) return Unexpected("a name");
    return Next().value;
  }

  // ---- nesting bound ----
  class DepthScope {
   public:
    explicit DepthScope(Parser* p) : p_(p) { ++p_->depth_; }
    ~DepthScope() { --p_->depth_; }

   private:
    Parser* p_;
  };
  absl::Status CheckDepth() const {
    if (depth_ > kMaxParseDepth) {
      return Fail(Current(),
                  absl::StrCat("template nested deeper than ", kMaxParseDepth, " levels"));
    }
    return absl::OkStatus();
  }

  // Context flags, saved and restored around nested constructs.
  struct Context {
    bool soft = false;  // directly inside an if/conditional: unknown filters fail at runtime
    int loops = 0;      // enclosing for loops (break/continue allowed)
  };
  template <typename F>
  auto WithContext(Context c, F f) {
    Context saved = ctx_;
    ctx_ = c;
    auto result = f();
    ctx_ = saved;
    return result;
  }

  // ---- statements ----
  absl::StatusOr<Body> ParseBody(std::vector<absl::string_view> end_tags,
                                 absl::string_view open_tag = "") {
    DepthScope depth(this);
    QUILL_RETURN_IF_ERROR(CheckDepth());
    Body body;
    while (true) {
      const Token& t = Current();
      switch (t.type) {
        case TokenType::kData:
          body.push_back(std::make_unique<DataStmt>(t.line, MakeStr(t.value)));
          Next();
          break;
        case TokenType::kVariableBegin: {
          Next();
          QUILL_ASSIGN_OR_RETURN(ExprPtr expr, ParseTuple(false, true, {}, false));
          QUILL_RETURN_IF_ERROR(ExpectType(TokenType::kVariableEnd, "end of print statement"));
          body.push_back(std::make_unique<OutputStmt>(t.line, std::move(expr)));
          break;
        }
        case TokenType::kBlockBegin: {
          Next();
          if (Current().type == TokenType::kName) {
            for (absl::string_view end : end_tags) {
              if (Current().value == end) return body;
            }
          }
          QUILL_ASSIGN_OR_RETURN(StmtPtr stmt, ParseStatement(end_tags, open_tag));
          QUILL_RETURN_IF_ERROR(ExpectType(TokenType::kBlockEnd, "end of statement block"));
          if (stmt) body.push_back(std::move(stmt));
          break;
        }
        case TokenType::kEof:
          if (!end_tags.empty()) {
            return Fail(t, absl::StrCat("unexpected end of template; expected ", TagList(end_tags),
                                        " to close '", open_tag, "'"));
          }
          return body;
        default:
          return Fail(t, absl::StrCat("unexpected '", Describe(t), "'"));
      }
    }
  }

  static std::string TagList(const std::vector<absl::string_view>& tags) {
    return absl::StrJoin(tags, " or ", [](std::string* out, absl::string_view tag) {
      absl::StrAppend(out, "'", tag, "'");
    });
  }

  // Parses "{% tag ... " up to (not including) the closing %}.
  absl::StatusOr<StmtPtr> ParseStatement(const std::vector<absl::string_view>& end_tags,
                                         absl::string_view open_tag) {
    const Token& t = Current();
    if (t.type != TokenType::kName) return Fail(t, "tag name expected");
    const std::string& tag = t.value;
    if (tag == "if") return ParseIf();
    if (tag == "for") return ParseFor();
    if (tag == "set") return ParseSet();
    if (tag == "macro") return ParseMacro();
    if (tag == "call") return ParseCallBlock();
    if (tag == "filter") return ParseFilterBlock();
    if (tag == "with") return ParseWith();
    if (tag == "generation") return ParseScope("endgeneration");
    if (tag == "break" || tag == "continue") {
      if (ctx_.loops == 0) return Fail(t, absl::StrCat("'", tag, "' outside of a for loop"));
      Next();
      return StmtPtr(std::make_unique<LoopControlStmt>(
          tag == "break" ? StmtKind::kBreak : StmtKind::kContinue, t.line));
    }
    if (tag == "extends" || tag == "block" || tag == "include" || tag == "import" ||
        tag == "from") {
      return Error(ErrorKind::kUnsupported,
                   absl::StrCat("line ", t.line, ":", t.column, ": '", tag,
                                "' is not supported: a chat template is rendered on its own"));
    }
    if (end_tags.empty()) {
      return Fail(t, absl::StrCat("encountered unknown tag '", tag, "'"));
    }
    return Fail(t, absl::StrCat("encountered unknown tag '", tag, "'; expected ", TagList(end_tags),
                                " to close '", open_tag, "'"));
  }

  // Parses the block's body up to one of `end_tags` and returns which one ended it
  // (consumed, with its %} still to be read by the caller).
  absl::StatusOr<std::string> ParseBlockBody(Body* body, std::vector<absl::string_view> end_tags,
                                             absl::string_view open_tag, Context ctx) {
    QUILL_ASSIGN_OR_RETURN(*body, WithContext(ctx, [&] { return ParseBody(end_tags, open_tag); }));
    return Next().value;
  }

  // The context for the body of a construct that gets its own scope in Jinja2's compiler.
  Context InnerContext(int loops) const { return Context{false, loops}; }

  absl::StatusOr<StmtPtr> ParseIf() {
    auto stmt = std::make_unique<IfStmt>(Next().line);
    Context soft{true, ctx_.loops};
    while (true) {
      QUILL_ASSIGN_OR_RETURN(
          ExprPtr test, WithContext(soft, [&] { return ParseTuple(false, false, {}, false); }));
      QUILL_RETURN_IF_ERROR(ExpectBlockEnd());
      Body body;
      QUILL_ASSIGN_OR_RETURN(std::string end,
                             ParseBlockBody(&body, {"elif", "else", "endif"}, "if", soft));
      stmt->branches.emplace_back(std::move(test), std::move(body));
      if (end == "elif") continue;
      if (end == "else") {
        QUILL_RETURN_IF_ERROR(ExpectBlockEnd());
        QUILL_RETURN_IF_ERROR(ParseBlockBody(&stmt->else_body, {"endif"}, "if", soft).status());
      }
      return StmtPtr(std::move(stmt));
    }
  }

  absl::StatusOr<StmtPtr> ParseFor() {
    auto stmt = std::make_unique<ForStmt>(Next().line);
    QUILL_ASSIGN_OR_RETURN(stmt->target, ParseAssignTarget(true, false, {"in"}, false));
    if (!SkipName("in")) return Unexpected("'in'");
    QUILL_ASSIGN_OR_RETURN(stmt->iterable, ParseTuple(false, false, {"recursive"}, false));
    if (SkipName("if")) {
      QUILL_ASSIGN_OR_RETURN(stmt->filter, ParseExpression(true));
    }
    if (IsName("recursive")) {
      return Error(ErrorKind::kUnsupported,
                   absl::StrCat("line ", Current().line, ":", Current().column,
                                ": recursive for loops are not supported"));
    }
    QUILL_RETURN_IF_ERROR(ExpectBlockEnd());
    QUILL_ASSIGN_OR_RETURN(std::string end, ParseBlockBody(&stmt->body, {"endfor", "else"}, "for",
                                                           InnerContext(ctx_.loops + 1)));
    if (end == "else") {
      QUILL_RETURN_IF_ERROR(ExpectBlockEnd());
      QUILL_RETURN_IF_ERROR(
          ParseBlockBody(&stmt->else_body, {"endfor"}, "for", InnerContext(ctx_.loops)).status());
    }
    return StmtPtr(std::move(stmt));
  }

  absl::StatusOr<StmtPtr> ParseSet() {
    const int line = Next().line;
    QUILL_ASSIGN_OR_RETURN(Target target, ParseAssignTarget(true, false, {}, true));
    if (SkipOp("=")) {
      auto stmt = std::make_unique<SetStmt>(line);
      stmt->target = std::move(target);
      QUILL_ASSIGN_OR_RETURN(stmt->value, ParseTuple(false, true, {}, false));
      return StmtPtr(std::move(stmt));
    }
    auto stmt = std::make_unique<SetBlockStmt>(line);
    stmt->target = std::move(target);
    if (IsOp("|")) {
      QUILL_ASSIGN_OR_RETURN(stmt->filter, ParseFilter(nullptr, false));
    }
    QUILL_RETURN_IF_ERROR(ExpectBlockEnd());
    QUILL_RETURN_IF_ERROR(
        ParseBlockBody(&stmt->body, {"endset"}, "set", InnerContext(ctx_.loops)).status());
    return StmtPtr(std::move(stmt));
  }

  absl::Status ParseSignature(MacroDef* macro) {
    QUILL_RETURN_IF_ERROR(ExpectOp("("));
    bool seen_default = false;
    while (!IsOp(")")) {
      if (!macro->params.empty()) QUILL_RETURN_IF_ERROR(ExpectOp(","));
      const Token& at = Current();
      QUILL_ASSIGN_OR_RETURN(std::string name, ExpectName());
      ExprPtr default_value;
      if (SkipOp("=")) {
        QUILL_ASSIGN_OR_RETURN(default_value, ParseExpression(true));
        seen_default = true;
      } else if (seen_default) {
        return Fail(at, "non-default argument follows default argument");
      }
      macro->params.push_back(std::move(name));
      macro->defaults.push_back(std::move(default_value));
    }
    return ExpectOp(")");
  }

  // Which of caller/varargs/kwargs a macro body reads (Jinja2 decides this the same way).
  void ScanSpecialNames(MacroDef* macro) {
    std::function<void(const Expr*)> visit_expr;
    std::function<void(const Body&)> visit_body;
    const auto visit_args = [&](const CallArgsExpr& args) {
      for (const auto& e : args.positional) visit_expr(e.get());
      for (const auto& [name, e] : args.keywords) visit_expr(e.get());
      visit_expr(args.star_args.get());
      visit_expr(args.star_kwargs.get());
    };
    visit_expr = [&](const Expr* e) {
      if (e == nullptr) return;
      switch (e->kind) {
        case ExprKind::kName: {
          const std::string& n = static_cast<const NameExpr*>(e)->name;
          if (n == "caller") macro->uses_caller = true;
          if (n == "varargs") macro->catch_varargs = true;
          if (n == "kwargs") macro->catch_kwargs = true;
          break;
        }
        case ExprKind::kList:
          for (const auto& i : static_cast<const ListExpr*>(e)->items) visit_expr(i.get());
          break;
        case ExprKind::kDict:
          for (const auto& [k, v] : static_cast<const DictExpr*>(e)->items) {
            visit_expr(k.get());
            visit_expr(v.get());
          }
          break;
        case ExprKind::kGetAttr:
          visit_expr(static_cast<const GetAttrExpr*>(e)->object.get());
          break;
        case ExprKind::kGetItem:
          visit_expr(static_cast<const GetItemExpr*>(e)->object.get());
          visit_expr(static_cast<const GetItemExpr*>(e)->index.get());
          break;
        case ExprKind::kSlice: {
          const auto* s = static_cast<const SliceExpr*>(e);
          visit_expr(s->object.get());
          visit_expr(s->start.get());
          visit_expr(s->stop.get());
          visit_expr(s->step.get());
          break;
        }
        case ExprKind::kCall:
          visit_expr(static_cast<const CallExpr*>(e)->callee.get());
          visit_args(static_cast<const CallExpr*>(e)->args);
          break;
        case ExprKind::kFilter:
          visit_expr(static_cast<const FilterExpr*>(e)->operand.get());
          visit_args(static_cast<const FilterExpr*>(e)->args);
          break;
        case ExprKind::kTest:
          visit_expr(static_cast<const TestExpr*>(e)->operand.get());
          visit_args(static_cast<const TestExpr*>(e)->args);
          break;
        case ExprKind::kUnary:
          visit_expr(static_cast<const UnaryExpr*>(e)->operand.get());
          break;
        case ExprKind::kBinary:
          visit_expr(static_cast<const BinaryExpr*>(e)->left.get());
          visit_expr(static_cast<const BinaryExpr*>(e)->right.get());
          break;
        case ExprKind::kCompare:
          visit_expr(static_cast<const CompareExpr*>(e)->first.get());
          for (const auto& [op, r] : static_cast<const CompareExpr*>(e)->rest) visit_expr(r.get());
          break;
        case ExprKind::kConcat:
          for (const auto& p : static_cast<const ConcatExpr*>(e)->parts) visit_expr(p.get());
          break;
        case ExprKind::kCondExpr: {
          const auto* c = static_cast<const CondExpr*>(e);
          visit_expr(c->test.get());
          visit_expr(c->then.get());
          visit_expr(c->otherwise.get());
          break;
        }
        case ExprKind::kLiteral:
          break;
      }
    };
    visit_body = [&](const Body& body) {
      for (const StmtPtr& s : body) {
        switch (s->kind) {
          case StmtKind::kOutput:
            visit_expr(static_cast<const OutputStmt*>(s.get())->expr.get());
            break;
          case StmtKind::kIf:
            for (const auto& [test, b] : static_cast<const IfStmt*>(s.get())->branches) {
              visit_expr(test.get());
              visit_body(b);
            }
            visit_body(static_cast<const IfStmt*>(s.get())->else_body);
            break;
          case StmtKind::kFor: {
            const auto* f = static_cast<const ForStmt*>(s.get());
            visit_expr(f->iterable.get());
            visit_expr(f->filter.get());
            visit_body(f->body);
            visit_body(f->else_body);
            break;
          }
          case StmtKind::kSet:
            visit_expr(static_cast<const SetStmt*>(s.get())->value.get());
            break;
          case StmtKind::kSetBlock:
            visit_expr(static_cast<const SetBlockStmt*>(s.get())->filter.get());
            visit_body(static_cast<const SetBlockStmt*>(s.get())->body);
            break;
          case StmtKind::kMacro:
            for (const auto& d : static_cast<const MacroStmt*>(s.get())->macro.defaults) {
              visit_expr(d.get());
            }
            visit_body(static_cast<const MacroStmt*>(s.get())->macro.body);
            break;
          case StmtKind::kCallBlock:
            visit_expr(static_cast<const CallBlockStmt*>(s.get())->call.get());
            visit_body(static_cast<const CallBlockStmt*>(s.get())->caller.body);
            break;
          case StmtKind::kFilterBlock:
            visit_expr(static_cast<const FilterBlockStmt*>(s.get())->filter.get());
            visit_body(static_cast<const FilterBlockStmt*>(s.get())->body);
            break;
          case StmtKind::kScope:
            visit_body(static_cast<const ScopeStmt*>(s.get())->body);
            break;
          case StmtKind::kWith:
            for (const auto& [t, v] : static_cast<const WithStmt*>(s.get())->assignments) {
              visit_expr(v.get());
            }
            visit_body(static_cast<const WithStmt*>(s.get())->body);
            break;
          default:
            break;
        }
      }
    };
    visit_body(macro->body);
  }

  absl::StatusOr<StmtPtr> ParseMacro() {
    auto stmt = std::make_unique<MacroStmt>(Next().line);
    QUILL_ASSIGN_OR_RETURN(stmt->macro.name, ExpectName());
    QUILL_RETURN_IF_ERROR(
        WithContext(InnerContext(0), [&] { return ParseSignature(&stmt->macro); }));
    QUILL_RETURN_IF_ERROR(ExpectBlockEnd());
    QUILL_RETURN_IF_ERROR(
        ParseBlockBody(&stmt->macro.body, {"endmacro"}, "macro", InnerContext(0)).status());
    ScanSpecialNames(&stmt->macro);
    return StmtPtr(std::move(stmt));
  }

  absl::StatusOr<StmtPtr> ParseCallBlock() {
    auto stmt = std::make_unique<CallBlockStmt>(Next().line);
    stmt->caller.name = "caller";
    if (IsOp("(")) {
      QUILL_RETURN_IF_ERROR(
          WithContext(InnerContext(0), [&] { return ParseSignature(&stmt->caller); }));
    }
    const Token& at = Current();
    QUILL_ASSIGN_OR_RETURN(stmt->call, ParseExpression(true));
    if (stmt->call->kind != ExprKind::kCall) return Fail(at, "expected a call after 'call'");
    QUILL_RETURN_IF_ERROR(ExpectBlockEnd());
    QUILL_RETURN_IF_ERROR(
        ParseBlockBody(&stmt->caller.body, {"endcall"}, "call", InnerContext(0)).status());
    ScanSpecialNames(&stmt->caller);
    return StmtPtr(std::move(stmt));
  }

  absl::StatusOr<StmtPtr> ParseFilterBlock() {
    auto stmt = std::make_unique<FilterBlockStmt>(Next().line);
    QUILL_ASSIGN_OR_RETURN(stmt->filter, ParseFilter(nullptr, true));
    QUILL_RETURN_IF_ERROR(ExpectBlockEnd());
    QUILL_RETURN_IF_ERROR(
        ParseBlockBody(&stmt->body, {"endfilter"}, "filter", InnerContext(ctx_.loops)).status());
    return StmtPtr(std::move(stmt));
  }

  absl::StatusOr<StmtPtr> ParseWith() {
    auto stmt = std::make_unique<WithStmt>(Next().line);
    while (Current().type != TokenType::kBlockEnd) {
      if (!stmt->assignments.empty()) QUILL_RETURN_IF_ERROR(ExpectOp(","));
      QUILL_ASSIGN_OR_RETURN(Target target, ParseAssignTarget(true, false, {}, false));
      QUILL_RETURN_IF_ERROR(ExpectOp("="));
      QUILL_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
      stmt->assignments.emplace_back(std::move(target), std::move(value));
    }
    QUILL_RETURN_IF_ERROR(ExpectBlockEnd());
    QUILL_RETURN_IF_ERROR(
        ParseBlockBody(&stmt->body, {"endwith"}, "with", InnerContext(ctx_.loops)).status());
    return StmtPtr(std::move(stmt));
  }

  absl::StatusOr<StmtPtr> ParseScope(absl::string_view end_tag) {
    const Token& t = Next();
    auto stmt = std::make_unique<ScopeStmt>(t.line);
    const std::string open = t.value;
    QUILL_RETURN_IF_ERROR(ExpectBlockEnd());
    // {% generation %} is a call block in Hugging Face's extension: a macro body.
    QUILL_RETURN_IF_ERROR(ParseBlockBody(&stmt->body, {end_tag}, open, InnerContext(0)).status());
    return StmtPtr(std::move(stmt));
  }

  // ---- assignment targets ----
  absl::StatusOr<Target> ToTarget(const Expr* e, const Token& at) {
    Target target;
    target.line = e->line;
    if (e->kind == ExprKind::kName) {
      target.kind = Target::Kind::kName;
      target.name = static_cast<const NameExpr*>(e)->name;
      return target;
    }
    if (e->kind == ExprKind::kList && static_cast<const ListExpr*>(e)->tuple) {
      target.kind = Target::Kind::kTuple;
      for (const ExprPtr& item : static_cast<const ListExpr*>(e)->items) {
        QUILL_ASSIGN_OR_RETURN(Target t, ToTarget(item.get(), at));
        target.items.push_back(std::move(t));
      }
      return target;
    }
    return Fail(at, "can't assign to this expression");
  }

  absl::StatusOr<Target> ParseAssignTarget(bool with_tuple, bool name_only,
                                           std::vector<absl::string_view> extra_end,
                                           bool with_namespace) {
    const Token& at = Current();
    if (with_namespace && at.type == TokenType::kName && Look().type == TokenType::kOperator &&
        Look().value == ".") {
      Target target;
      target.kind = Target::Kind::kNamespaceAttr;
      target.line = at.line;
      target.name = Next().value;
      Next();  // the dot
      QUILL_ASSIGN_OR_RETURN(target.attr, ExpectName());
      return target;
    }
    if (name_only) {
      Target target;
      target.line = at.line;
      QUILL_ASSIGN_OR_RETURN(target.name, ExpectName());
      return target;
    }
    ExprPtr expr;
    if (with_tuple) {
      QUILL_ASSIGN_OR_RETURN(expr, ParseTuple(true, true, extra_end, false));
    } else {
      QUILL_ASSIGN_OR_RETURN(expr, ParsePrimary());
    }
    return ToTarget(expr.get(), at);
  }

  // ---- expressions ----
  bool IsTupleEnd(const std::vector<absl::string_view>& extra_end) const {
    const Token& t = Current();
    if (t.type == TokenType::kVariableEnd || t.type == TokenType::kBlockEnd ||
        (t.type == TokenType::kOperator && t.value == ")")) {
      return true;
    }
    if (t.type == TokenType::kName) {
      for (absl::string_view name : extra_end) {
        if (t.value == name) return true;
      }
    }
    return false;
  }

  absl::StatusOr<ExprPtr> ParseTuple(bool simplified, bool with_condexpr,
                                     std::vector<absl::string_view> extra_end,
                                     bool explicit_parentheses) {
    const int line = Current().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) QUILL_RETURN_IF_ERROR(ExpectOp(","));
      if (IsTupleEnd(extra_end)) break;
      ExprPtr item;
      if (simplified) {
        QUILL_ASSIGN_OR_RETURN(item, ParsePrimary());
      } else {
        QUILL_ASSIGN_OR_RETURN(item, ParseExpression(with_condexpr));
      }
      items.push_back(std::move(item));
      if (IsOp(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parentheses) {
        return Fail(Current(),
                    absl::StrCat("expected an expression, got '", Describe(Current()), "'"));
      }
    }
    auto tuple = std::make_unique<ListExpr>(line, /*tuple=*/true);
    tuple->items = std::move(items);
    return ExprPtr(std::move(tuple));
  }

  absl::StatusOr<ExprPtr> ParseExpression(bool with_condexpr) {
    DepthScope depth(this);
    QUILL_RETURN_IF_ERROR(CheckDepth());
    if (with_condexpr) return ParseCondExpr();
    return ParseOr();
  }

  absl::StatusOr<ExprPtr> ParseCondExpr() {
    const int line = Current().line;
    // Everything in a conditional expression is "soft" (unknown filters fail at runtime).
    Context soft{true, ctx_.loops};
    QUILL_ASSIGN_OR_RETURN(ExprPtr expr, ParseOr());
    while (SkipName("if")) {
      auto cond = std::make_unique<CondExpr>(line);
      cond->then = std::move(expr);
      QUILL_ASSIGN_OR_RETURN(cond->test, WithContext(soft, [&] { return ParseOr(); }));
      if (SkipName("else")) {
        QUILL_ASSIGN_OR_RETURN(cond->otherwise, WithContext(soft, [&] { return ParseCondExpr(); }));
      }
      MarkSoft(cond->then.get());
      expr = std::move(cond);
    }
    return expr;
  }

  // The "then" part of `a if b else c` is parsed before the `if` is seen; Jinja2 compiles
  // it in the soft frame too, so unknown filters in it may only fail at runtime.
  void MarkSoft(Expr* e) {
    if (e == nullptr) return;
    for (auto it = unresolved_.begin(); it != unresolved_.end();) {
      if (Contains(e, it->first)) {
        it = unresolved_.erase(it);
      } else {
        ++it;
      }
    }
  }
  static bool Contains(const Expr* root, const Expr* target);

  absl::StatusOr<ExprPtr> ParseOr() {
    QUILL_ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
    while (IsName("or")) {
      const int line = Next().line;
      QUILL_ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
      left = std::make_unique<BinaryExpr>(line, BinaryOp::kOr, std::move(left), std::move(right));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseAnd() {
    QUILL_ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
    while (IsName("and")) {
      const int line = Next().line;
      QUILL_ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
      left = std::make_unique<BinaryExpr>(line, BinaryOp::kAnd, std::move(left), std::move(right));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseNot() {
    if (IsName("not")) {
      const int line = Next().line;
      DepthScope depth(this);
      QUILL_RETURN_IF_ERROR(CheckDepth());
      QUILL_ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
      return ExprPtr(std::make_unique<UnaryExpr>(line, UnaryOp::kNot, std::move(operand)));
    }
    return ParseCompare();
  }

  absl::StatusOr<ExprPtr> ParseCompare() {
    const int line = Current().line;
    QUILL_ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
    auto cmp = std::make_unique<CompareExpr>(line);
    while (true) {
      CompareOp op;
      if (Current().type == TokenType::kOperator) {
        const std::string& v = Current().value;
        if (v == "==") {
          op = CompareOp::kEq;
        } else if (v == "!=") {
          op = CompareOp::kNe;
        } else if (v == "<") {
          op = CompareOp::kLt;
        } else if (v == "<=") {
          op = CompareOp::kLe;
        } else if (v == ">") {
          op = CompareOp::kGt;
        } else if (v == ">=") {
          op = CompareOp::kGe;
        } else {
          break;
        }
        Next();
      } else if (IsName("in")) {
        op = CompareOp::kIn;
        Next();
      } else if (IsName("not") && Look().type == TokenType::kName && Look().value == "in") {
        op = CompareOp::kNotIn;
        Next();
        Next();
      } else {
        break;
      }
      QUILL_ASSIGN_OR_RETURN(ExprPtr right, ParseMath1());
      cmp->rest.emplace_back(op, std::move(right));
    }
    if (cmp->rest.empty()) return first;
    cmp->first = std::move(first);
    return ExprPtr(std::move(cmp));
  }

  absl::StatusOr<ExprPtr> ParseMath1() {
    QUILL_ASSIGN_OR_RETURN(ExprPtr left, ParseConcat());
    while (IsOp("+") || IsOp("-")) {
      const Token& t = Next();
      const BinaryOp op = t.value == "+" ? BinaryOp::kAdd : BinaryOp::kSub;
      QUILL_ASSIGN_OR_RETURN(ExprPtr right, ParseConcat());
      left = std::make_unique<BinaryExpr>(t.line, op, std::move(left), std::move(right));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseConcat() {
    const int line = Current().line;
    QUILL_ASSIGN_OR_RETURN(ExprPtr first, ParseMath2());
    if (!IsOp("~")) return first;
    auto concat = std::make_unique<ConcatExpr>(line);
    concat->parts.push_back(std::move(first));
    while (SkipOp("~")) {
      QUILL_ASSIGN_OR_RETURN(ExprPtr part, ParseMath2());
      concat->parts.push_back(std::move(part));
    }
    return ExprPtr(std::move(concat));
  }

  absl::StatusOr<ExprPtr> ParseMath2() {
    QUILL_ASSIGN_OR_RETURN(ExprPtr left, ParsePow());
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const Token& t = Next();
      const BinaryOp op = t.value == "*"    ? BinaryOp::kMul
                          : t.value == "/"  ? BinaryOp::kDiv
                          : t.value == "//" ? BinaryOp::kFloorDiv
                                            : BinaryOp::kMod;
      QUILL_ASSIGN_OR_RETURN(ExprPtr right, ParsePow());
      left = std::make_unique<BinaryExpr>(t.line, op, std::move(left), std::move(right));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParsePow() {
    QUILL_ASSIGN_OR_RETURN(ExprPtr left, ParseUnary(true));
    while (IsOp("**")) {
      const int line = Next().line;
      QUILL_ASSIGN_OR_RETURN(ExprPtr right, ParseUnary(true));
      left = std::make_unique<BinaryExpr>(line, BinaryOp::kPow, std::move(left), std::move(right));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter) {
    DepthScope depth(this);
    QUILL_RETURN_IF_ERROR(CheckDepth());
    const Token& t = Current();
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      const UnaryOp op = t.value == "-" ? UnaryOp::kNeg : UnaryOp::kPos;
      const int line = Next().line;
      QUILL_ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
      node = std::make_unique<UnaryExpr>(line, op, std::move(operand));
    } else {
      QUILL_ASSIGN_OR_RETURN(node, ParsePrimary());
    }
    QUILL_ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
    if (with_filter) {
      QUILL_ASSIGN_OR_RETURN(node, ParseFilterExpr(std::move(node)));
    }
    return node;
  }

  absl::StatusOr<ExprPtr> ParsePrimary() {
    const Token& t = Current();
    switch (t.type) {
      case TokenType::kName: {
        Next();
        const std::string& v = t.value;
        if (v == "true" || v == "True") {
          return ExprPtr(std::make_unique<LiteralExpr>(t.line, Value::Bool(true)));
        }
        if (v == "false" || v == "False") {
          return ExprPtr(std::make_unique<LiteralExpr>(t.line, Value::Bool(false)));
        }
        if (v == "none" || v == "None") {
          return ExprPtr(std::make_unique<LiteralExpr>(t.line, Value::None()));
        }
        return ExprPtr(std::make_unique<NameExpr>(t.line, v));
      }
      case TokenType::kString: {
        std::string text = Next().value;
        while (Current().type == TokenType::kString) text += Next().value;  // 'a' 'b'
        return ExprPtr(std::make_unique<LiteralExpr>(t.line, Value::Str(std::move(text))));
      }
      case TokenType::kInteger:
        Next();
        return ExprPtr(std::make_unique<LiteralExpr>(t.line, Value::Int(t.int_value)));
      case TokenType::kFloat:
        Next();
        return ExprPtr(std::make_unique<LiteralExpr>(t.line, Value::Float(t.float_value)));
      case TokenType::kOperator:
        if (t.value == "(") {
          Next();
          QUILL_ASSIGN_OR_RETURN(ExprPtr inner, ParseTuple(false, true, {}, true));
          QUILL_RETURN_IF_ERROR(ExpectOp(")"));
          return inner;
        }
        if (t.value == "[") return ParseList();
        if (t.value == "{") return ParseDict();
        break;
      default:
        break;
    }
    return Fail(t, absl::StrCat("unexpected '", Describe(t), "'"));
  }

  absl::StatusOr<ExprPtr> ParseList() {
    auto list = std::make_unique<ListExpr>(Next().line, /*tuple=*/false);
    while (!IsOp("]")) {
      if (!list->items.empty()) QUILL_RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp("]")) break;
      QUILL_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(true));
      list->items.push_back(std::move(item));
    }
    QUILL_RETURN_IF_ERROR(ExpectOp("]"));
    return ExprPtr(std::move(list));
  }

  absl::StatusOr<ExprPtr> ParseDict() {
    auto dict = std::make_unique<DictExpr>(Next().line);
    while (!IsOp("}")) {
      if (!dict->items.empty()) QUILL_RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp("}")) break;
      QUILL_ASSIGN_OR_RETURN(ExprPtr key, ParseExpression(true));
      QUILL_RETURN_IF_ERROR(ExpectOp(":"));
      QUILL_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
      dict->items.emplace_back(std::move(key), std::move(value));
    }
    QUILL_RETURN_IF_ERROR(ExpectOp("}"));
    return ExprPtr(std::move(dict));
  }

  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node) {
    while (true) {
      if (IsOp(".") || IsOp("[")) {
        QUILL_ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node)));
      } else if (IsOp("(")) {
        QUILL_ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  absl::StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node) {
    while (true) {
      if (IsOp("|")) {
        QUILL_ASSIGN_OR_RETURN(node, ParseFilter(std::move(node), false));
      } else if (IsName("is")) {
        QUILL_ASSIGN_OR_RETURN(node, ParseTest(std::move(node)));
      } else if (IsOp("(")) {
        QUILL_ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr node) {
    const Token& t = Next();
    if (t.value == ".") {
      const Token& attr = Current();
      if (attr.type == TokenType::kName) {
        Next();
        return ExprPtr(std::make_unique<GetAttrExpr>(t.line, std::move(node), attr.value));
      }
      if (attr.type == TokenType::kInteger) {
        Next();
        auto index = std::make_unique<LiteralExpr>(attr.line, Value::Int(attr.int_value));
        return ExprPtr(std::make_unique<GetItemExpr>(t.line, std::move(node), std::move(index)));
      }
      return Fail(attr, "expected name or number");
    }
    // "[": one subscript (an expression or a slice) or a tuple of expressions.
    std::vector<ExprPtr> args;
    std::unique_ptr<SliceExpr> slice;
    while (!IsOp("]")) {
      if (!args.empty() || slice) QUILL_RETURN_IF_ERROR(ExpectOp(","));
      ExprPtr start;
      if (!IsOp(":")) {
        QUILL_ASSIGN_OR_RETURN(start, ParseExpression(true));
        if (!IsOp(":")) {
          if (slice) return Fail(Current(), "slices inside a tuple subscript are not supported");
          args.push_back(std::move(start));
          continue;
        }
      }
      if (slice || !args.empty()) {
        return Fail(Current(), "slices inside a tuple subscript are not supported");
      }
      Next();  // ':'
      slice = std::make_unique<SliceExpr>(t.line);
      slice->start = std::move(start);
      if (!IsOp("]") && !IsOp(",") && !IsOp(":")) {
        QUILL_ASSIGN_OR_RETURN(slice->stop, ParseExpression(true));
      }
      if (SkipOp(":")) {
        if (!IsOp("]") && !IsOp(",")) {
          QUILL_ASSIGN_OR_RETURN(slice->step, ParseExpression(true));
        }
      }
    }
    QUILL_RETURN_IF_ERROR(ExpectOp("]"));
    if (slice) {
      if (!args.empty()) return Fail(t, "slices inside a tuple subscript are not supported");
      slice->object = std::move(node);
      return ExprPtr(std::move(slice));
    }
    if (args.empty()) return Fail(t, "expected a subscript");
    ExprPtr index;
    if (args.size() == 1) {
      index = std::move(args[0]);
    } else {
      auto tuple = std::make_unique<ListExpr>(t.line, /*tuple=*/true);
      tuple->items = std::move(args);
      index = std::move(tuple);
    }
    return ExprPtr(std::make_unique<GetItemExpr>(t.line, std::move(node), std::move(index)));
  }

  absl::Status ParseCallArgs(CallArgsExpr* args) {
    const Token& open = Current();
    QUILL_RETURN_IF_ERROR(ExpectOp("("));
    bool require_comma = false;
    const auto invalid = [&] { return Fail(open, "invalid syntax for function call expression"); };
    while (!IsOp(")")) {
      if (require_comma) {
        QUILL_RETURN_IF_ERROR(ExpectOp(","));
        if (IsOp(")")) break;  // trailing comma
      }
      if (IsOp("*")) {
        if (args->star_args || args->star_kwargs) return invalid();
        Next();
        QUILL_ASSIGN_OR_RETURN(args->star_args, ParseExpression(true));
      } else if (IsOp("**")) {
        if (args->star_kwargs) return invalid();
        Next();
        QUILL_ASSIGN_OR_RETURN(args->star_kwargs, ParseExpression(true));
      } else if (Current().type == TokenType::kName && Look().type == TokenType::kOperator &&
                 Look().value == "=") {
        if (args->star_kwargs) return invalid();
        std::string key = Next().value;
        Next();  // '='
        QUILL_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
        args->keywords.emplace_back(std::move(key), std::move(value));
      } else {
        if (args->star_args || args->star_kwargs || !args->keywords.empty()) return invalid();
        QUILL_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
        args->positional.push_back(std::move(value));
      }
      require_comma = true;
    }
    return ExpectOp(")");
  }

  absl::StatusOr<ExprPtr> ParseCall(ExprPtr callee) {
    auto call = std::make_unique<CallExpr>(Current().line);
    call->callee = std::move(callee);
    QUILL_RETURN_IF_ERROR(ParseCallArgs(&call->args));
    return ExprPtr(std::move(call));
  }

  // "|name(args)|name2..."; with `start_inline` the first "|" is already consumed
  // ({% filter name %}).
  absl::StatusOr<ExprPtr> ParseFilter(ExprPtr node, bool start_inline) {
    while (IsOp("|") || start_inline) {
      if (!start_inline) Next();
      start_inline = false;
      const Token& t = Current();
      QUILL_ASSIGN_OR_RETURN(std::string name, ExpectName());
      while (SkipOp(".")) {
        QUILL_ASSIGN_OR_RETURN(std::string part, ExpectName());
        absl::StrAppend(&name, ".", part);
      }
      auto filter = std::make_unique<FilterExpr>(t.line);
      filter->operand = std::move(node);
      filter->name = name;
      filter->filter = FindFilter(name);
      if (IsOp("(")) QUILL_RETURN_IF_ERROR(ParseCallArgs(&filter->args));
      if (filter->filter == nullptr) QUILL_RETURN_IF_ERROR(Unresolved(filter.get(), t, "filter"));
      node = std::move(filter);
    }
    return node;
  }

  absl::StatusOr<ExprPtr> ParseTest(ExprPtr node) {
    const Token& is = Next();
    const bool negated = SkipName("not");
    const Token& t = Current();
    QUILL_ASSIGN_OR_RETURN(std::string name, ExpectName());
    while (SkipOp(".")) {
      QUILL_ASSIGN_OR_RETURN(std::string part, ExpectName());
      absl::StrAppend(&name, ".", part);
    }
    auto test = std::make_unique<TestExpr>(is.line);
    test->operand = std::move(node);
    test->name = name;
    test->test = FindTest(name);
    const Token& c = Current();
    if (IsOp("(")) {
      QUILL_RETURN_IF_ERROR(ParseCallArgs(&test->args));
    } else if ((c.type == TokenType::kName || c.type == TokenType::kString ||
                c.type == TokenType::kInteger || c.type == TokenType::kFloat || IsOp("(") ||
                IsOp("[") || IsOp("{")) &&
               !IsName("else") && !IsName("or") && !IsName("and")) {
      // A single argument without parentheses: "x is divisibleby 3".
      if (IsName("is")) return Fail(c, "you cannot chain multiple tests with is");
      QUILL_ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
      QUILL_ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
      test->args.positional.push_back(std::move(arg));
    }
    if (test->test == nullptr) QUILL_RETURN_IF_ERROR(Unresolved(test.get(), t, "test"));
    ExprPtr result = std::move(test);
    if (negated) result = std::make_unique<UnaryExpr>(is.line, UnaryOp::kNot, std::move(result));
    return result;
  }

  // An unknown filter or test: Jinja2 fails at compile time unless it sits directly in an
  // if or a conditional expression, where it fails only if evaluated.
  absl::Status Unresolved(const Expr* e, const Token& at, absl::string_view what) {
    if (ctx_.soft) return absl::OkStatus();
    unresolved_.emplace_back(e, absl::StrCat("line ", at.line, ":", at.column, ": no ", what,
                                             " named ", py::Repr(at.value)));
    return absl::OkStatus();
  }

 public:
  // Errors for unknown filters/tests that turned out not to be in a soft context.
  absl::Status CheckUnresolved() const {
    if (unresolved_.empty()) return absl::OkStatus();
    return Error(ErrorKind::kAssertion, unresolved_.front().second);
  }

 private:
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
  Context ctx_;
  std::vector<std::pair<const Expr*, std::string>> unresolved_;
};

bool Parser::Contains(const Expr* root, const Expr* target) {
  if (root == nullptr) return false;
  if (root == target) return true;
  const auto args_contain = [&](const CallArgsExpr& args) {
    for (const auto& e : args.positional) {
      if (Contains(e.get(), target)) return true;
    }
    for (const auto& [k, e] : args.keywords) {
      if (Contains(e.get(), target)) return true;
    }
    return Contains(args.star_args.get(), target) || Contains(args.star_kwargs.get(), target);
  };
  switch (root->kind) {
    case ExprKind::kList:
      for (const auto& i : static_cast<const ListExpr*>(root)->items) {
        if (Contains(i.get(), target)) return true;
      }
      return false;
    case ExprKind::kDict:
      for (const auto& [k, v] : static_cast<const DictExpr*>(root)->items) {
        if (Contains(k.get(), target) || Contains(v.get(), target)) return true;
      }
      return false;
    case ExprKind::kGetAttr:
      return Contains(static_cast<const GetAttrExpr*>(root)->object.get(), target);
    case ExprKind::kGetItem:
      return Contains(static_cast<const GetItemExpr*>(root)->object.get(), target) ||
             Contains(static_cast<const GetItemExpr*>(root)->index.get(), target);
    case ExprKind::kSlice: {
      const auto* s = static_cast<const SliceExpr*>(root);
      return Contains(s->object.get(), target) || Contains(s->start.get(), target) ||
             Contains(s->stop.get(), target) || Contains(s->step.get(), target);
    }
    case ExprKind::kCall:
      return Contains(static_cast<const CallExpr*>(root)->callee.get(), target) ||
             args_contain(static_cast<const CallExpr*>(root)->args);
    case ExprKind::kFilter:
      return Contains(static_cast<const FilterExpr*>(root)->operand.get(), target) ||
             args_contain(static_cast<const FilterExpr*>(root)->args);
    case ExprKind::kTest:
      return Contains(static_cast<const TestExpr*>(root)->operand.get(), target) ||
             args_contain(static_cast<const TestExpr*>(root)->args);
    case ExprKind::kUnary:
      return Contains(static_cast<const UnaryExpr*>(root)->operand.get(), target);
    case ExprKind::kBinary:
      return Contains(static_cast<const BinaryExpr*>(root)->left.get(), target) ||
             Contains(static_cast<const BinaryExpr*>(root)->right.get(), target);
    case ExprKind::kCompare:
      if (Contains(static_cast<const CompareExpr*>(root)->first.get(), target)) return true;
      for (const auto& [op, r] : static_cast<const CompareExpr*>(root)->rest) {
        if (Contains(r.get(), target)) return true;
      }
      return false;
    case ExprKind::kConcat:
      for (const auto& p : static_cast<const ConcatExpr*>(root)->parts) {
        if (Contains(p.get(), target)) return true;
      }
      return false;
    case ExprKind::kCondExpr: {
      const auto* c = static_cast<const CondExpr*>(root);
      return Contains(c->test.get(), target) || Contains(c->then.get(), target) ||
             Contains(c->otherwise.get(), target);
    }
    default:
      return false;
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<const Template>> ParseTemplate(absl::string_view source) {
  if (source.size() > kMaxTemplateBytes) {
    return Error(ErrorKind::kLimit,
                 absl::StrCat("template of ", source.size(), " bytes exceeds the limit of ",
                              kMaxTemplateBytes));
  }
  QUILL_ASSIGN_OR_RETURN(std::vector<Token> tokens, Lex(source));
  Parser parser(std::move(tokens));
  QUILL_ASSIGN_OR_RETURN(std::unique_ptr<const Template> tmpl, parser.Run());
  QUILL_RETURN_IF_ERROR(parser.CheckUnresolved());
  return tmpl;
}

}  // namespace quill::engine::chat::jinja
