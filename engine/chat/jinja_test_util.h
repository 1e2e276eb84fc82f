#pragma once

// Table-driven template tests: a template, its variables (JSON), and the expected output.
// Expected values are Jinja2 3.1.2's output in Hugging Face's environment (each case was
// checked against Jinja2); cases named quill_* test Quill-specific behavior (limits,
// unsupported features) that Jinja2 does not share.

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "absl/time/civil_time.h"
#include "engine/chat/chat_template.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace quill::engine::chat::testing {

struct RenderCase {
  const char* name;
  const char* source;
  const char* vars;      // JSON object: "messages" and any other variables
  const char* expected;  // the output, or "ERROR:" + a substring of the error message
};

inline std::ostream& operator<<(std::ostream& os, const RenderCase& c) { return os << c.name; }

// Renders `source` with `vars` (bos_token "<s>", eos_token "</s>", the date 2026-01-15,
// add_generation_prompt true unless vars sets it).
inline absl::StatusOr<std::string> RenderForTest(absl::string_view source,
                                                 absl::string_view vars_json = "{}",
                                                 const RenderLimits& limits = {}) {
  absl::StatusOr<ChatTemplate> tmpl = ChatTemplate::Parse(source);
  if (!tmpl.ok()) return tmpl.status();
  nlohmann::ordered_json vars = nlohmann::ordered_json::parse(vars_json);
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  ChatRenderOptions options;
  options.date = absl::CivilDay(2026, 1, 15);
  options.limits = limits;
  options.extra_variables = nlohmann::ordered_json::object();
  for (auto it = vars.begin(); it != vars.end(); ++it) {
    if (it.key() == "messages") {
      messages = it.value();
    } else if (it.key() == "add_generation_prompt") {
      options.add_generation_prompt = it.value().get<bool>();
    } else {
      options.extra_variables[it.key()] = it.value();
    }
  }
  absl::StatusOr<RenderedChat> rendered = tmpl->Render(messages, options);
  if (!rendered.ok()) return rendered.status();
  return rendered->text;
}

inline void ExpectCase(const RenderCase& c) {
  absl::StatusOr<std::string> got = RenderForTest(c.source, c.vars);
  const absl::string_view expected = c.expected;
  if (absl::StartsWith(expected, "ERROR:")) {
    ASSERT_FALSE(got.ok()) << "rendered " << *got;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(got.status().message(), expected.substr(6)))
        << "error: " << got.status().message()
        << "\nwant a message containing: " << expected.substr(6);
  } else {
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, expected);
  }
}

inline std::string CaseName(const ::testing::TestParamInfo<RenderCase>& info) {
  return info.param.name;
}

}  // namespace quill::engine::chat::testing
