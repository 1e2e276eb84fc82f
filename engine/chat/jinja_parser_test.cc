#include "engine/chat/jinja_parser.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/chat/jinja_test_util.h"
#include "gtest/gtest.h"

namespace quill::engine::chat::jinja {
namespace {

using ::quill::engine::chat::testing::RenderCase;

// What each bad template's error says, and where: "line L:C".
TEST(JinjaParserTest, SyntaxErrorsNameLineAndColumn) {
  const struct {
    const char* source;
    const char* message;
  } cases[] = {
      {"{% if x %}",
       "TemplateSyntaxError: line 1:11: unexpected end of template; expected "
       "'elif' or 'else' or 'endif' to close 'if'"},
      {"a\n{% for x in y %}\n{% endif %}",
       "line 3:4: encountered unknown tag 'endif'; expected 'endfor' or 'else' to close 'for'"},
      {"{% foo %}", "line 1:4: encountered unknown tag 'foo'"},
      {"{% endfor %}", "line 1:4: encountered unknown tag 'endfor'"},
      {"text\n\n  {{ 1 + }}", "line 3:10: unexpected 'end of print statement'"},
      {"{{ }}", "line 1:4: expected an expression, got 'end of print statement'"},
      {"{% for x y %}{% endfor %}", "line 1:10: expected 'in', got 'y'"},
      {"{% set 1 = 2 %}", "line 1:8: can't assign to this expression"},
      {"{% macro m(a=1, b) %}{% endmacro %}",
       "line 1:17: non-default argument follows default argument"},
      {"{% break %}", "line 1:4: 'break' outside of a for loop"},
      {"{% for x in y %}{% macro m() %}{% continue %}{% endmacro %}{% endfor %}",
       "'continue' outside of a for loop"},
      {"{{ f(a=1, 2) }}", "line 1:5: invalid syntax for function call expression"},
      {"{{ x is defined is defined }}", "line 1:17: you cannot chain multiple tests with is"},
      {"{{ x[1:2, 3] }}", "slices inside a tuple subscript are not supported"},
      {"{% call x %}{% endcall %}", "expected a call after 'call'"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<std::unique_ptr<const Template>> tmpl = ParseTemplate(c.source);
    ASSERT_FALSE(tmpl.ok()) << c.source;
    EXPECT_EQ(tmpl.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(tmpl.status().message(), c.message))
        << c.source << "\n  got:  " << tmpl.status().message() << "\n  want: " << c.message;
  }
}

TEST(JinjaParserTest, UnsupportedConstructsAreRefusedClearly) {
  const char* cases[] = {"{% include 'x' %}", "{% extends 'x' %}", "{% import 'x' as y %}",
                         "{% block b %}{% endblock %}", "{% for x in y recursive %}{% endfor %}"};
  for (const char* source : cases) {
    absl::StatusOr<std::unique_ptr<const Template>> tmpl = ParseTemplate(source);
    ASSERT_FALSE(tmpl.ok()) << source;
    EXPECT_TRUE(absl::StartsWith(tmpl.status().message(), "Unsupported: line 1:"))
        << tmpl.status().message();
  }
}

// Jinja2 rejects an unknown filter or test when compiling, unless it sits directly inside
// an if (or a conditional expression); there it fails only when evaluated. DeepSeek's
// templates rely on this for `from_json`.
TEST(JinjaParserTest, UnknownFiltersFailAtParseTimeOutsideIfs) {
  absl::StatusOr<std::unique_ptr<const Template>> tmpl = ParseTemplate("{{ x|from_json }}");
  ASSERT_FALSE(tmpl.ok());
  EXPECT_EQ(tmpl.status().message(),
            "TemplateAssertionError: line 1:6: no filter named 'from_json'");
  tmpl = ParseTemplate("{% if x %}{% for y in z %}{{ y is nosuch }}{% endfor %}{% endif %}");
  ASSERT_FALSE(tmpl.ok());
  EXPECT_TRUE(absl::StrContains(tmpl.status().message(), "no test named 'nosuch'"));
}

const RenderCase kSoftUnknownFilterCases[] = {
    {"unknown_filter_in_if_not_reached", "{% if x %}{{ x|from_json }}{% endif %}ok",
     R"j({"x": 0})j", "ok"},
    {"unknown_filter_in_if_reached", "{% if x %}{{ x|from_json }}{% endif %}ok", R"j({"x": 1})j",
     "ERROR:TemplateRuntimeError: No filter named 'from_json' found."},
    {"unknown_filter_in_conditional_expression", "{{ (x|from_json) if x else 'no' }}",
     R"j({"x": 0})j", "no"},
    {"unknown_test_in_elif", "{% if false %}{% elif x is nosuch %}{% endif %}ok", R"j({"x": 0})j",
     "ERROR:TemplateRuntimeError: No test named 'nosuch' found."},
};

class SoftUnknownFilterTest : public ::testing::TestWithParam<RenderCase> {};
TEST_P(SoftUnknownFilterTest, MatchesJinja2) { testing::ExpectCase(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Parser, SoftUnknownFilterTest,
                         ::testing::ValuesIn(kSoftUnknownFilterCases), testing::CaseName);

TEST(JinjaParserTest, NestingIsBounded) {
  const std::string deep_parens =
      absl::StrCat("{{ ", std::string(500, '('), "1", std::string(500, ')'), " }}");
  absl::StatusOr<std::unique_ptr<const Template>> tmpl = ParseTemplate(deep_parens);
  ASSERT_FALSE(tmpl.ok());
  EXPECT_TRUE(absl::StrContains(tmpl.status().message(), "nested deeper than 100 levels"))
      << tmpl.status();

  std::string deep_ifs;
  for (int i = 0; i < 300; ++i) deep_ifs += "{% if true %}";
  for (int i = 0; i < 300; ++i) deep_ifs += "{% endif %}";
  tmpl = ParseTemplate(deep_ifs);
  ASSERT_FALSE(tmpl.ok());
  EXPECT_TRUE(absl::StrContains(tmpl.status().message(), "nested deeper")) << tmpl.status();

  tmpl = ParseTemplate(absl::StrCat("{{ ", std::string(1000, '-'), "1 }}"));
  ASSERT_FALSE(tmpl.ok());
  tmpl = ParseTemplate(absl::StrCat("{{ ", std::string(1000, '['), " }}"));
  ASSERT_FALSE(tmpl.ok());

  // Moderate nesting is fine.
  EXPECT_TRUE(
      ParseTemplate(absl::StrCat("{{ ", std::string(20, '('), "1", std::string(20, ')'), " }}"))
          .ok());
}

TEST(JinjaParserTest, HugeTemplatesAreRefused) {
  const std::string huge(kMaxTemplateBytes + 1, 'x');
  absl::StatusOr<std::unique_ptr<const Template>> tmpl = ParseTemplate(huge);
  ASSERT_FALSE(tmpl.ok());
  EXPECT_TRUE(absl::StrContains(tmpl.status().message(), "exceeds the limit")) << tmpl.status();
}

}  // namespace
}  // namespace quill::engine::chat::jinja
