// Statements, expressions, operators, scoping, macros and errors of the interpreter, each
// expected output checked against Jinja2 3.1.2 in Hugging Face's environment.

#include "engine/chat/jinja_interpreter.h"

#include "engine/chat/jinja_test_util.h"
#include "gtest/gtest.h"

namespace quill::engine::chat::jinja {
namespace {

using ::quill::engine::chat::testing::RenderCase;

const RenderCase kStatementCases[] = {
    {"if_elif_else",
     "{% for x in [1, 2, 3] %}{% if x == 1 %}a{% elif x == 2 %}b{% else %}c{% endif %}{% endfor %}",
     "{}", "abc"},
    {"if_is_truthiness",
     "{% if '' %}1{% endif %}{% if [] %}2{% endif %}{% if {} %}3{% endif %}{% if 0.0 %}4{% endif "
     "%}{% if 'x' %}5{% endif %}",
     "{}", "5"},
    {"for_loop_variables",
     "{% for x in ['a', 'b', 'c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ "
     "loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
     "{}", "1032TrueFalse3;2121FalseFalse3;3210FalseTrue3;"},
    {"for_previtem_nextitem_depth",
     "{% for x in [1, 2, 3] %}[{{ loop.previtem }}|{{ loop.nextitem }}|{{ loop.depth }}{{ "
     "loop.depth0 }}]{% endfor %}",
     "{}", "[|2|10][1|3|10][2||10]"},
    {"for_cycle_and_changed",
     "{% for x in [1, 1, 2, 2, 3] %}{{ loop.cycle('a', 'b') }}{% if loop.changed(x) %}!{% endif "
     "%}{% endfor %}",
     "{}", "a!ba!ba!"},
    {"for_else_runs_when_empty", "{% for x in [] %}x{% else %}empty{% endfor %}", "{}", "empty"},
    {"for_else_skipped_when_iterated", "{% for x in [1] %}x{% else %}empty{% endfor %}", "{}", "x"},
    {"for_if_filters_and_counts",
     "{% for x in [1, 2, 3, 4] if x != 2 %}{{ loop.index }}/{{ loop.length }}:{{ x }} {% endfor %}",
     "{}", "1/3:1 2/3:3 3/3:4 "},
    {"for_break_continue",
     "{% for x in range(10) %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% "
     "endif %}{{ x }}{% endfor %}",
     "{}", "023"},
    {"for_unpacks_items", "{% for k, v in {'b': 1, 'a': 2}.items() %}{{ k }}={{ v }},{% endfor %}",
     "{}", "b=1,a=2,"},
    {"for_over_dict_keys_string_undefined",
     "{% for k in {'b': 1, 'a': 2} %}{{ k }}{% endfor %}|{% for c in 'h\xc3\xa9' %}{{ c }}.{% "
     "endfor %}|{% for x in nothing %}x{% endfor %}",
     "{}", "ba|h.\xc3\xa9.|"},
    {"for_over_none_fails", "{% for x in none %}{% endfor %}", "{}",
     "ERROR:TypeError: 'NoneType' object is not iterable"},
    {"for_unpack_mismatch", "{% for a, b in [[1, 2, 3]] %}{% endfor %}", "{}",
     "ERROR:ValueError: too many values to unpack (expected 2)"},
    {"nested_loop_outer_via_set",
     "{% for a in [1, 2] %}{% set outer = loop %}{% for b in [1] %}{{ outer.index }}{{ loop.index "
     "}}{% endfor %}{% endfor %}",
     "{}", "1121"},
    {"set_and_tuple_set", "{% set a = 1 %}{% set b, c = 2, 3 %}{{ a }}{{ b }}{{ c }}", "{}", "123"},
    {"set_in_loop_does_not_leak",
     "{% set x = 0 %}{% for i in [1, 2] %}{{ x }}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}",
     "{}", "01020"},
    {"set_in_if_leaks", "{% if true %}{% set y = 2 %}{% endif %}{{ y }}", "{}", "2"},
    {"namespace_crosses_scopes",
     "{% set ns = namespace(total=0, seen=[]) %}{% for i in [1, 2, 3] %}{% set ns.total = ns.total "
     "+ i %}{% endfor %}{{ ns.total }}",
     "{}", "6"},
    {"namespace_from_dict", "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}{{ ns }}",
     "{}", "12<Namespace {'a': 1, 'b': 2}>"},
    {"namespace_attribute_on_non_namespace", "{% set d = {} %}{% set d.x = 1 %}", "{}",
     "ERROR:TemplateRuntimeError: cannot assign attribute on non-namespace object"},
    {"set_block", "{% set b %}x{{ 1 + 1 }}{% endset %}[{{ b }}]", "{}", "[x2]"},
    {"set_block_with_filter", "{% set b | upper | trim %}  hi {% endset %}[{{ b }}]", "{}", "[HI]"},
    {"set_block_scope", "{% set b %}{% set inner = 1 %}{% endset %}{{ inner is defined }}", "{}",
     "False"},
    {"filter_block", "{% filter upper %}ab{{ 'c' }}{% endfilter %}", "{}", "ABC"},
    {"with_block", "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a is defined }}", "{}",
     "3False"},
    {"generation_renders_body",
     "{% generation %}{% set z = 3 %}gen{{ z }}{% endgeneration %}|{{ z is defined }}", "{}",
     "gen3|False"},
    {"raise_exception_verbatim", "a{{ raise_exception('Bad role: ' ~ 'x') }}", "{}",
     "ERROR:Bad role: x"},
    {"strftime_now", "{{ strftime_now('%Y-%m-%d|%d %b %Y|%B %d, %Y|%A') }}", "{}",
     "2026-01-15|15 Jan 2026|January 15, 2026|Thursday"},
    {"range_forms", "{{ range(3)|list }}{{ range(1, 7, 2)|list }}{{ range(3, 0, -1)|list }}", "{}",
     "[0, 1, 2][1, 3, 5][3, 2, 1]"},
    {"range_too_big", "{{ range(200000)|length }}", "{}",
     "ERROR:OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE "
     "(100000)."},
    {"dict_global", "{{ dict(a=1, b='x') }}", "{}", "{'a': 1, 'b': 'x'}"},
    {"variables_from_context",
     "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}{{ add_generation_prompt }}",
     R"j({"messages": [{"role": "user", "content": "hi"}]})j", "<s>hi</s>True"},
};

class StatementTest : public ::testing::TestWithParam<RenderCase> {};
TEST_P(StatementTest, MatchesJinja2) { testing::ExpectCase(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Interpreter, StatementTest, ::testing::ValuesIn(kStatementCases),
                         testing::CaseName);

const RenderCase kMacroCases[] = {
    {"macro_defaults_and_kwargs",
     "{% macro m(a, b=2, c=a) %}{{ a }}-{{ b }}-{{ c }}{% endmacro %}{{ m(1) }} {{ m(1, c=5) }} {{ "
     "m(b=3, a=4) }}",
     "{}", "1-2-1 1-2-5 4-3-4"},
    {"macro_missing_argument_is_undefined",
     "{% macro m(a) %}[{{ a }}]{{ a is defined }}{% endmacro %}{{ m() }}", "{}", "[]False"},
    {"macro_too_many_arguments", "{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", "{}",
     "ERROR:TypeError: macro 'm' takes not more than 1 argument(s)"},
    {"macro_unknown_keyword", "{% macro m(a) %}{% endmacro %}{{ m(b=1) }}", "{}",
     "ERROR:TypeError: macro 'm' takes no keyword argument 'b'"},
    {"macro_varargs_kwargs",
     "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, x=4) }}", "{}",
     "1(2, 3){'x': 4}"},
    {"macro_recursion",
     "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}", "{}",
     "321"},
    {"macro_sees_globals_at_call_time",
     "{% set x = 5 %}{% macro m() %}{{ x }}{% endmacro %}{% set x = 1 %}{{ m() }}", "{}", "1"},
    {"macro_sets_are_local",
     "{% macro m() %}{% set y = 1 %}{{ y }}{% endmacro %}{{ m() }}{{ y is defined }}", "{}",
     "1False"},
    {"macro_result_is_a_string", "{% macro m() %}abc{% endmacro %}{{ m()|length }}{{ m() ~ 'd' }}",
     "{}", "3abcd"},
    {"macro_can_mutate_namespace",
     "{% set ns = namespace(n=0) %}{% macro inc() %}{% set ns.n = ns.n + 1 %}{% endmacro %}{{ "
     "inc() }}{{ inc() }}{{ ns.n }}",
     "{}", "2"},
    {"call_block_caller",
     "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') "
     "%}hi{% endcall %}",
     "{}", "<b>hi</b>"},
    {"call_block_caller_arguments",
     "{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}{% call(item) "
     "each([1, 2]) %}[{{ item }}]{% endcall %}",
     "{}", "[1][2]"},
};

class MacroTest : public ::testing::TestWithParam<RenderCase> {};
TEST_P(MacroTest, MatchesJinja2) { testing::ExpectCase(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Interpreter, MacroTest, ::testing::ValuesIn(kMacroCases),
                         testing::CaseName);

const RenderCase kExpressionCases[] = {
    {"arithmetic",
     "{{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 2 ** -1 }}",
     "{}", "3.5 3 -4 2 -2 1024 0.5"},
    {"float_arithmetic",
     "{{ 7.5 % 2 }} {{ 3.0 // 2 }} {{ -7.0 // 2 }} {{ 0.1 + 0.2 }} {{ 1 + 1.0 }} {{ true + 1 }}",
     "{}", "1.5 1.0 -4.0 0.30000000000000004 2.0 2"},
    {"division_by_zero", "{{ 1 / 0 }}", "{}", "ERROR:ZeroDivisionError: division by zero"},
    {"precedence",
     "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 * 3 ~ 4 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ not 1 "
     "== 2 }}",
     "{}", "7 9 64 64 4 True"},
    {"tilde_binds_tighter_than_plus", "{{ 1 + 2 ~ 'a' }}", "{}",
     "ERROR:TypeError: unsupported operand type(s) for +: 'int' and 'str'"},
    {"unary_minus_then_filter", "{{ -x|abs }}", R"j({"x": 3})j", "3"},
    {"string_concatenation",
     "{{ 'a' + 'b' }} {{ 'a' ~ 1 ~ none ~ true ~ nothing }} {{ 'ab' * 3 }} {{ 2 * 'c' }}|{{ 'x' * "
     "-1 }}|",
     "{}", "ab a1NoneTrue ababab cc||"},
    {"string_plus_int_fails", "{{ 'a' + 1 }}", "{}",
     "ERROR:TypeError: can only concatenate str (not \"int\") to str"},
    {"list_operations", "{{ [1] + [2] }} {{ [0] * 3 }} {{ (1,) + (2,) }}", "{}",
     "[1, 2] [0, 0, 0] (1, 2)"},
    {"list_plus_tuple_fails", "{{ [1] + (2,) }}", "{}",
     "ERROR:TypeError: can only concatenate list (not \"tuple\") to list"},
    {"comparisons",
     "{{ 1 == 1.0 }} {{ '1' == 1 }} {{ [1, 2] == [1, 2] }} {{ [1, 2] == (1, 2) }} {{ {'a': 1, 'b': "
     "2} == {'b': 2, 'a': 1} }} {{ none == none }}",
     "{}", "True False True False True True"},
    {"ordering",
     "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' < 'b' }} {{ [1, 'a'] < [1, 'b'] }} {{ 2 >= 2.0 }}",
     "{}", "True False True True True"},
    {"ordering_type_error", "{{ 1 < 'a' }}", "{}",
     "ERROR:TypeError: '<' not supported between instances of 'int' and 'str'"},
    {"membership",
     "{{ 2 in [1, 2] }} {{ 'b' in 'abc' }} {{ 'a' in {'a': 1} }} {{ 'z' not in 'abc' }} {{ 'x' in "
     "nothing }}",
     "{}", "True True True True False"},
    {"membership_type_error", "{{ 1 in 'abc' }}", "{}",
     "ERROR:TypeError: 'in <string>' requires string as left operand, not int"},
    {"and_or_return_operands", "{{ 0 or 'x' }}|{{ '' and 1 }}|{{ 'a' and 'b' }}|{{ none or [] }}",
     "{}", "x||b|[]"},
    {"conditional_expression",
     "{{ 'a' if true else 'b' }}{{ 'a' if false else 'b' }}[{{ 'a' if false }}]", "{}", "ab[]"},
    {"tests_without_parentheses",
     "{{ 4 is divisibleby 2 }} {{ x is not none }} {{ 1 is number and 'a' is string }}",
     R"j({"x": 1})j", "True True True"},
    {"tuples_and_literals",
     "{{ (1, 2) }} {{ (1,) }} {{ () }} {{ [1, 2,] }} {{ {'a': 1,} }} {{ range(1, 3,)|list }}", "{}",
     "(1, 2) (1,) () [1, 2] {'a': 1} [1, 2]"},
    {"python_printing",
     "{{ none }} {{ true }} {{ 1.0 }} {{ 1e16 }} {{ 1e-5 }} {{ 0.0001 }} {{ -0.0 }} {{ [1, 'a', "
     "none, 1.5, {'k': 'v\\n'}] }}",
     "{}", "None True 1.0 1e+16 1e-05 0.0001 -0.0 [1, 'a', None, 1.5, {'k': 'v\\n'}]"},
    {"python_string_repr", R"j({{ ["it's", 'say "hi"', 'both \'"', 'tab\t'] }})j", "{}",
     R"j(["it's", 'say "hi"', 'both \'"', 'tab\t'])j"},
    {"dict_duplicate_keys", "{{ {1: 'a', 1.0: 'b', true: 'c'} }}", "{}", "{1: 'c'}"},
    {"markup_plus_escapes_plain_str",
     "{{ ('<a>'|safe) + '<b>' }}|{{ '<c>' + ('&'|safe) }}|{{ ('<a>'|safe) ~ '<b>' }}", "{}",
     "<a>&lt;b&gt;|&lt;c&gt;&|<a><b>"},
    {"quill_integer_overflow_is_an_error", "{{ 2 ** 64 }}", "{}", "ERROR:OverflowError"},
};

class ExpressionTest : public ::testing::TestWithParam<RenderCase> {};
TEST_P(ExpressionTest, MatchesJinja2) { testing::ExpectCase(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Interpreter, ExpressionTest, ::testing::ValuesIn(kExpressionCases),
                         testing::CaseName);

const RenderCase kUndefinedCases[] = {
    {"printing_undefined_is_empty", "[{{ nothing }}][{{ messages.missing }}]", "{}", "[][]"},
    {"attribute_of_undefined_fails", "{{ nothing.attr }}", "{}",
     "ERROR:UndefinedError: 'nothing' is undefined"},
    {"attribute_of_missing_key_fails", "{{ d.missing.x }}", R"j({"d": {}})j",
     "ERROR:UndefinedError: 'dict object' has no attribute 'missing'"},
    {"missing_list_element", "[{{ l[5] }}]", R"j({"l": [1]})j", "[]"},
    {"attribute_of_missing_element_fails", "{{ l[5].x }}", R"j({"l": [1]})j",
     "ERROR:UndefinedError: list object has no element 5"},
    {"arithmetic_on_undefined_fails", "{{ nothing + 1 }}", "{}",
     "ERROR:UndefinedError: 'nothing' is undefined"},
    {"undefined_tests_and_filters",
     "{{ nothing is defined }}{{ nothing is undefined }}{{ nothing|default('d') }}{{ nothing ~ 'x' "
     "}}{{ nothing|length }}{{ nothing is none }}",
     "{}", "FalseTruedx0False"},
    {"undefined_is_sequence_and_iterable",
     "{{ nothing is sequence }}{{ nothing is iterable }}{{ nothing is callable }}", "{}",
     "TrueTrueTrue"},
    {"calling_undefined_fails", "{{ nothing() }}", "{}",
     "ERROR:UndefinedError: 'nothing' is undefined"},
    {"undefined_equality", "{{ nothing == other }} {{ nothing == none }}", "{}", "True False"},
};

class UndefinedTest : public ::testing::TestWithParam<RenderCase> {};
TEST_P(UndefinedTest, MatchesJinja2) { testing::ExpectCase(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Interpreter, UndefinedTest, ::testing::ValuesIn(kUndefinedCases),
                         testing::CaseName);

const RenderCase kSandboxCases[] = {
    {"list_append_is_unsafe", "{{ [1].append(2) }}", "{}",
     "ERROR:SecurityError: access to attribute 'append' of 'list' object is unsafe."},
    {"dict_update_is_unsafe", "{% set d = {} %}{{ d.update({'a': 1}) }}", "{}",
     "ERROR:SecurityError: access to attribute 'update' of 'dict' object is unsafe."},
    {"unsafe_attribute_prints_empty", "[{{ [].append }}]", "{}", "[]"},
    {"dunder_attributes_are_unsafe", "{{ ''.__class__() }}", "{}", "ERROR:SecurityError"},
    {"list_pop_is_allowed", "{% set l = [1, 2, 3] %}{{ l.pop() }}{{ l.pop(0) }}{{ l }}", "{}",
     "31[2]"},
};

class SandboxTest : public ::testing::TestWithParam<RenderCase> {};
TEST_P(SandboxTest, MatchesJinja2) { testing::ExpectCase(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Interpreter, SandboxTest, ::testing::ValuesIn(kSandboxCases),
                         testing::CaseName);

TEST(InterpreterErrorsTest, RuntimeErrorsNameTheLine) {
  absl::StatusOr<std::string> got =
      testing::RenderForTest("line one\n{% set x = 1 %}\n{{ x }}{{ y.z }}\n");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().message(), "UndefinedError: 'y' is undefined (line 3)");

  got = testing::RenderForTest("{% macro m() %}\n\n{{ 1 / 0 }}{% endmacro %}\n{{ m() }}");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().message(), "ZeroDivisionError: division by zero (line 3)");
}

TEST(InterpreterErrorsTest, RaiseExceptionMessageIsVerbatim) {
  absl::StatusOr<std::string> got =
      testing::RenderForTest("\n\n{{ raise_exception('Only user and assistant roles') }}");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(got.status().message(), "Only user and assistant roles");
}

// Templates are user-supplied: runaway loops, recursion and output are stopped with a
// clear error instead of exhausting time, stack or memory.
TEST(InterpreterLimitsTest, OperationBudgetStopsLongLoops) {
  RenderLimits limits;
  limits.max_operations = 100000;
  absl::StatusOr<std::string> got = testing::RenderForTest(
      "{% for a in range(1000) %}{% for b in range(1000) %}{% endfor %}{% endfor %}", "{}", limits);
  ASSERT_FALSE(got.ok());
  EXPECT_TRUE(absl::StrContains(got.status().message(),
                                "RenderLimitError: the template ran more "
                                "than 100000 operations"))
      << got.status();
}

TEST(InterpreterLimitsTest, DepthLimitStopsRunawayRecursion) {
  absl::StatusOr<std::string> got =
      testing::RenderForTest("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  ASSERT_FALSE(got.ok());
  EXPECT_TRUE(absl::StrContains(got.status().message(), "evaluation nested deeper than 400"))
      << got.status();
}

TEST(InterpreterLimitsTest, BranchingRecursionRunsOutOfOperations) {
  // 2^40 calls if unbounded.
  RenderLimits limits;
  limits.max_operations = 1000000;
  absl::StatusOr<std::string> got = testing::RenderForTest(
      "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}"
      "{{ f(40) }}",
      "{}", limits);
  ASSERT_FALSE(got.ok());
  EXPECT_TRUE(absl::StrContains(got.status().message(), "operations")) << got.status();
}

TEST(InterpreterLimitsTest, OutputSizeIsBounded) {
  RenderLimits limits;
  limits.max_output_bytes = 1000;
  absl::StatusOr<std::string> got = testing::RenderForTest(
      "{% for i in range(10) %}{{ '0123456789abcdef' * 10 }}{% endfor %}", "{}", limits);
  ASSERT_FALSE(got.ok());
  EXPECT_TRUE(absl::StrContains(got.status().message(), "exceeds 1000 bytes")) << got.status();
  // One huge string is refused before it is built.
  got = testing::RenderForTest("{{ 'x' * 1000000000000 }}", "{}", limits);
  ASSERT_FALSE(got.ok());
  EXPECT_TRUE(absl::StrContains(got.status().message(), "RenderLimitError")) << got.status();
  got = testing::RenderForTest("{{ ([1] * 1000000000000)|length }}", "{}", limits);
  ASSERT_FALSE(got.ok());
  EXPECT_TRUE(absl::StrContains(got.status().message(), "RenderLimitError")) << got.status();
}

TEST(InterpreterLimitsTest, CumulativeAllocationIsBounded) {
  RenderLimits limits;
  limits.max_allocated_bytes = 1 << 20;
  // Doubling a string: each value stays under the output limit, the total does not.
  absl::StatusOr<std::string> got = testing::RenderForTest(
      "{% set ns = namespace(s='x' * 1000) %}{% for i in range(5000) %}{% set ns.s = ns.s ~ 'y' "
      "%}{% endfor %}{{ ns.s|length }}",
      "{}", limits);
  ASSERT_FALSE(got.ok());
  EXPECT_TRUE(absl::StrContains(got.status().message(), "bytes of values in one render"))
      << got.status();
}

TEST(InterpreterLimitsTest, CyclicNamespacesAreSafe) {
  // A namespace holding itself: printing stops at the nesting limit instead of recursing
  // forever, and the render's heap frees the cycle.
  absl::StatusOr<std::string> got =
      testing::RenderForTest("{% set ns = namespace() %}{% set ns.self = ns %}{{ ns }}");
  ASSERT_FALSE(got.ok());
  EXPECT_TRUE(absl::StrContains(got.status().message(), "nested deeper")) << got.status();
}

}  // namespace
}  // namespace quill::engine::chat::jinja
