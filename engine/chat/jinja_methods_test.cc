// Attribute and item lookup, slicing, and the methods of str, dict, list and tuple, each
// expected output checked against Jinja2 3.1.2 (ImmutableSandboxedEnvironment).

#include "engine/chat/jinja_methods.h"

#include "engine/chat/jinja_test_util.h"
#include "gtest/gtest.h"

namespace quill::engine::chat::jinja {
namespace {

using ::quill::engine::chat::testing::RenderCase;

const RenderCase kLookupCases[] = {
    {"dot_prefers_methods_over_keys", "{{ d.items is callable }} {{ d['items'] }} {{ d.other }}",
     R"j({"d": {"items": "the key", "other": 1}})j", "True the key 1"},
    {"subscript_falls_back_to_methods", "{{ d['get']('a') }}", R"j({"d": {"a": 5}})j", "5"},
    {"integer_after_dot", "{{ l.0 }}{{ l.1.x }}", R"j({"l": [1, {"x": 2}]})j", "12"},
    {"negative_indexes", "{{ l[-1] }}{{ 'abc'[-2] }}{{ 'h\xc3\xa9llo'[1] }}", R"j({"l": [1, 2]})j",
     "2b\xc3\xa9"},
    {"slicing",
     "{{ 'abcdef'[1:-1:2] }}|{{ 'abc'[::-1] }}|{{ [1, 2, 3, 4][1:] }}|{{ [1, 2, 3][:-1] }}|{{ "
     "'abc'[5:] }}|{{ (1, 2, 3)[::2] }}|{{ 'h\xc3\xa9llo'[1:3] }}",
     "{}", "bd|cba|[2, 3, 4]|[1, 2]||(1, 3)|\xc3\xa9l"},
    {"slice_step_zero", "{{ 'abc'[::0] }}", "{}", "ERROR:ValueError: slice step cannot be zero"},
    {"namespace_item_access", "{% set ns = namespace(a=1) %}{{ ns['a'] }}{{ ns.b is defined }}",
     "{}", "1False"},
};

class LookupTest : public ::testing::TestWithParam<RenderCase> {};
TEST_P(LookupTest, MatchesJinja2) { testing::ExpectCase(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Methods, LookupTest, ::testing::ValuesIn(kLookupCases), testing::CaseName);

const RenderCase kStrMethodCases[] = {
    {"strip_family",
     "[{{ '  a  '.strip() }}][{{ '  a  '.lstrip() }}][{{ '  a  '.rstrip() }}][{{ "
     "'xyaxy'.strip('xy') }}][{{ '\xe3\x80\x80"
     "a\xc2\xa0'.strip() }}]",
     "{}", "[a][a  ][  a][a][a]"},
    {"case_methods",
     "{{ 'hello world'.title() }}|{{ \"they're\".title() }}|{{ 'hELLO'.capitalize() }}|{{ "
     "'AbC'.swapcase() }}|{{ '\xc3\xa9t\xc3\xa9'.upper() }}|{{ '\xc3\x89T\xc3\x89'.lower() }}",
     "{}", "Hello World|They'Re|Hello|aBc|\xc3\x89T\xc3\x89|\xc3\xa9t\xc3\xa9"},
    {"startswith_endswith",
     "{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}{{ 'abc'.startswith('b', 1) }}",
     "{}", "TrueTrueTrue"},
    {"split",
     "{{ 'a,b,,c'.split(',') }} {{ '  a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ "
     "'a,b,c'.rsplit(',', 1) }} {{ ' a b c '.rsplit(none, 1) }}",
     "{}", "['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b c'] ['a,b', 'c'] [' a b', 'c']"},
    {"split_empty_separator", "{{ 'abc'.split('') }}", "{}", "ERROR:ValueError: empty separator"},
    {"splitlines", "{{ 'a\nb\r\nc'.splitlines() }} {{ 'a\nb'.splitlines(true) }}", "{}",
     "['a', 'b', 'c'] ['a\\n', 'b']"},
    {"replace_count", "{{ 'aaa'.replace('a', 'b') }} {{ 'aaa'.replace('a', 'b', 1) }}", "{}",
     "bbb baa"},
    {"find_count_index",
     "{{ 'h\xc3\xa9llo'.find('l') }} {{ 'abc'.find('z') }} {{ 'abab'.rfind('ab') }} {{ "
     "'aaaa'.count('aa') }} {{ 'abc'.index('c') }}",
     "{}", "2 -1 2 2 2"},
    {"index_not_found", "{{ 'abc'.index('z') }}", "{}", "ERROR:ValueError: substring not found"},
    {"join_method", "{{ ', '.join(['a', 'b']) }}|{{ '-'.join('xyz') }}", "{}", "a, b|x-y-z"},
    {"join_non_string_fails", "{{ ''.join([1]) }}", "{}",
     "ERROR:TypeError: sequence item 0: expected str instance, int found"},
    {"format_method",
     "{{ '{} and {}'.format(1, 'x') }}|{{ '{1}{0}'.format('a', 'b') }}|{{ "
     "'{name}!'.format(name='n') }}|{{ '{{}}{0[k]}'.format({'k': 'v'}) }}",
     "{}", "1 and x|ba|n!|{}v"},
    {"justify",
     "[{{ 'ab'.ljust(4) }}][{{ 'ab'.rjust(4, '*') }}][{{ 'ab'.center(5) }}][{{ '-5'.zfill(4) }}]",
     "{}", "[ab  ][**ab][  ab ][-005]"},
    {"affixes_and_partition",
     "{{ 'prefix_x'.removeprefix('prefix_') }} {{ 'x.txt'.removesuffix('.txt') }} {{ "
     "'a=b=c'.partition('=') }} {{ 'a=b=c'.rpartition('=') }}",
     "{}", "x x ('a', '=', 'b=c') ('a=b', '=', 'c')"},
    {"is_methods",
     "{{ '123'.isdigit() }}{{ 'ab'.isalpha() }}{{ 'a1'.isalnum() }}{{ ' \t'.isspace() }}{{ "
     "'ab'.islower() }}{{ 'AB'.isupper() }}{{ ''.isdigit() }}",
     "{}", "TrueTrueTrueTrueTrueTrueFalse"},
    {"quill_unsupported_method", "{{ 'a'.encode() }}", "{}",
     "ERROR:Unsupported: str.encode() is not supported"},
    {"missing_method_is_undefined", "[{{ 'a'.nosuch }}]", "{}", "[]"},
};

class StrMethodTest : public ::testing::TestWithParam<RenderCase> {};
TEST_P(StrMethodTest, MatchesJinja2) { testing::ExpectCase(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Methods, StrMethodTest, ::testing::ValuesIn(kStrMethodCases),
                         testing::CaseName);

const RenderCase kContainerMethodCases[] = {
    {"dict_get", "{{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 'dflt') }}",
     R"j({"d": {"a": 1}})j", "1 None dflt"},
    {"dict_views", "{{ d.keys()|list }} {{ d.values()|list }} {{ d.items()|list }} {{ d.items() }}",
     R"j({"d": {"b": 1, "a": 2}})j",
     "['b', 'a'] [1, 2] [('b', 1), ('a', 2)] dict_items([('b', 1), ('a', 2)])"},
    {"dict_copy_is_independent",
     "{% set d = {'a': 1} %}{% set c = d.copy() %}{{ c == d }}{{ c is sameas d }}", "{}",
     "TrueFalse"},
    {"list_methods", "{% set l = [1, 2, 2, 3] %}{{ l.count(2) }}{{ l.index(3) }}{{ l.copy() }}",
     "{}", "23[1, 2, 2, 3]"},
    {"list_index_missing", "{{ [1].index(5) }}", "{}", "ERROR:ValueError: 5 is not in list"},
    {"list_pop_errors", "{{ [].pop() }}", "{}", "ERROR:IndexError: pop from empty list"},
    {"tuple_methods", "{{ (1, 2, 1).count(1) }}{{ (1, 2).index(2) }}", "{}", "21"},
};

class ContainerMethodTest : public ::testing::TestWithParam<RenderCase> {};
TEST_P(ContainerMethodTest, MatchesJinja2) { testing::ExpectCase(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Methods, ContainerMethodTest, ::testing::ValuesIn(kContainerMethodCases),
                         testing::CaseName);

}  // namespace
}  // namespace quill::engine::chat::jinja
