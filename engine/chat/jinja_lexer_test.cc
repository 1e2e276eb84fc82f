#include "engine/chat/jinja_lexer.h"

#include "engine/chat/jinja_test_util.h"
#include "gtest/gtest.h"

namespace quill::engine::chat::jinja {
namespace {

using ::quill::engine::chat::testing::RenderCase;

TEST(JinjaLexerTest, TokenTypesValuesAndPositions) {
  absl::StatusOr<std::vector<Token>> tokens = Lex("ab\n{{ x.y + 1.5 }}{% if 'q\\n' %}");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  const std::vector<TokenType> want_types = {
      TokenType::kData,     TokenType::kVariableBegin, TokenType::kName,
      TokenType::kOperator, TokenType::kName,          TokenType::kOperator,
      TokenType::kFloat,    TokenType::kVariableEnd,   TokenType::kBlockBegin,
      TokenType::kName,     TokenType::kString,        TokenType::kBlockEnd,
      TokenType::kEof};
  ASSERT_EQ(tokens->size(), want_types.size());
  for (size_t i = 0; i < want_types.size(); ++i) {
    EXPECT_EQ((*tokens)[i].type, want_types[i]) << "token " << i;
  }
  EXPECT_EQ((*tokens)[0].value, "ab\n");
  EXPECT_EQ((*tokens)[2].value, "x");
  EXPECT_EQ((*tokens)[2].line, 2);
  EXPECT_EQ((*tokens)[2].column, 4);
  EXPECT_EQ((*tokens)[5].value, "+");
  EXPECT_DOUBLE_EQ((*tokens)[6].float_value, 1.5);
  EXPECT_EQ((*tokens)[10].value, "q\n");  // escapes decoded
}

TEST(JinjaLexerTest, IntegerLiterals) {
  absl::StatusOr<std::vector<Token>> tokens = Lex("{{ 1_000 0x1F 0b101 0o17 0 }}");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  const int64_t want[] = {1000, 31, 5, 15, 0};
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ((*tokens)[1 + i].type, TokenType::kInteger);
    EXPECT_EQ((*tokens)[1 + i].int_value, want[i]);
  }
}

TEST(JinjaLexerTest, ErrorsNameLineAndColumn) {
  const struct {
    const char* source;
    const char* message;
  } cases[] = {
      {"ab\n  {{ x ", "line 2:3: unexpected end of template, expected '}}'"},
      {"{% if x ", "line 1:1: unexpected end of template, expected '%}'"},
      {"a\n{# comment", "line 2:1: missing end of comment tag"},
      {"{% raw %}x", "line 1:1: missing end of raw directive"},
      {"{{ x ? }}", "line 1:6: unexpected char '?'"},
      {"{{ (1 }}", "line 1:7: unexpected '}', expected ')'"},
      {"{{ 1) }}", "line 1:5: unexpected ')'"},
      {"x\n\n{{ 'abc }}", "line 3:4: unterminated string literal"},
      {"{{ '\\x4' }}", "truncated \\x escape"},
      {"{{ 99999999999999999999 }}", "integer literal does not fit in 64 bits"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<std::vector<Token>> tokens = Lex(c.source);
    ASSERT_FALSE(tokens.ok()) << c.source;
    EXPECT_EQ(tokens.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(tokens.status().message(), c.message))
        << c.source << " -> " << tokens.status().message();
    EXPECT_TRUE(absl::StartsWith(tokens.status().message(), "TemplateSyntaxError: "));
  }
}

// Whitespace control as Hugging Face's environment applies it (trim_blocks, lstrip_blocks,
// no trailing newline), checked against Jinja2.
const RenderCase kWhitespaceCases[] = {
    {"minus_strips_before", R"j(a  {%- if true %}b{% endif %})j", "{}", R"j(ab)j"},
    {"minus_strips_after", "{% if true -%}  \n\n  x{%- endif %}", "{}", "x"},
    {"trim_and_lstrip_blocks", "a\n  {% if true %}\nb\n  {% endif %}\nc", "{}", "a\nb\nc"},
    {"variable_minus_both", "a {{- 'b' -}} c", "{}", "abc"},
    {"variables_are_not_lstripped", "  {{ 'x' }}\n", "{}", "  x"},
    {"one_trailing_newline_dropped", "x\n\n", "{}", "x\n"},
    {"comment_trims_newline", "{# comment #}\nx", "{}", "x"},
    {"comment_lstripped", "  {# c #}\nx", "{}", "x"},
    {"comment_minus", "a {#- c -#} b", "{}", "ab"},
    {"plus_disables_lstrip", "  {%+ if true %}x{% endif %}", "{}", "  x"},
    {"plus_disables_trim", "{% if true +%}\nx{% endif %}", "{}", "\nx"},
    {"lstrip_needs_only_blanks_before", "x  {% if true %}y{% endif %}", "{}", "x  y"},
    {"lstrip_tabs", "\t {% if true %}y{% endif %}", "{}", "y"},
    {"lstrip_after_trimmed_newline", "{% if true %}\n  {% if true %}x{% endif %}{% endif %}", "{}",
     "x"},
    {"trim_only_one_newline", "{% if true %}\n\nx{% endif %}", "{}", "\nx"},
    {"crlf_normalized", "a\r\nb\rc", "{}", "a\nb\nc"},
    {"raw_block", "{% raw %}{{ x }}{% endraw %}", "{}", "{{ x }}"},
    {"raw_block_whitespace_control", "a {%- raw -%} {{ x }} {%- endraw -%} b", "{}", "a{{ x }}b"},
    {"string_escapes", R"j({{ "\u00e9\x41\t|\d|\'" }})j", "{}",
     "\xc3\xa9"
     "A\t|\\d|'"},
    {"adjacent_strings", "{{ 'a' \"b\" }}", "{}", "ab"},
    {"number_literals", "{{ 1_000 }} {{ 0x1F }} {{ 1.5e3 }} {{ 2E-1 }} {{ 0b101 }} {{ 0o17 }}",
     "{}", "1000 31 1500.0 0.2 5 15"},
    {"braces_balanced_in_variable", "{{ {'a': {'b': 1}} }}", "{}", "{'a': {'b': 1}}"},
    {"minus_before_end_is_not_an_operator", "{{ 3 -}}\n x", "{}", "3x"},
};

class WhitespaceTest : public ::testing::TestWithParam<RenderCase> {};
TEST_P(WhitespaceTest, MatchesJinja2) { testing::ExpectCase(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Lexer, WhitespaceTest, ::testing::ValuesIn(kWhitespaceCases),
                         testing::CaseName);

}  // namespace
}  // namespace quill::engine::chat::jinja
