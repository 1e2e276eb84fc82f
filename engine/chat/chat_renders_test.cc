// Every template x conversation of ../shared/chat_templates/renders.json: what Jinja2 3.1.2
// produced in Hugging Face's environment. A render matches when the text is identical byte
// for byte, or the render fails with the raise_exception message the reference raised, or
// fails where the reference failed with another error.

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/civil_time.h"
#include "engine/chat/chat_template.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/test_env.h"

namespace quill::engine::chat {
namespace {

using Json = nlohmann::ordered_json;

// Where two texts first differ, with a little context, for failure messages.
std::string FirstDifference(const std::string& got, const std::string& want) {
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  const size_t from = i > 40 ? i - 40 : 0;
  return absl::StrCat("first difference at byte ", i, ": got ", Json(got.substr(from, 100)).dump(),
                      " want ", Json(want.substr(from, 100)).dump());
}

TEST(ChatRendersTest, EveryTemplateAndConversationMatchesJinja2) {
  const std::string path = testing::SharedPath("chat_templates/renders.json");
  if (path.empty()) GTEST_SKIP() << "shared assets not found (chat_templates/renders.json)";
  const Json reference = Json::parse(testing::ReadWholeFile(path));
  absl::CivilDay date;
  ASSERT_TRUE(absl::ParseCivilTime(reference["strftime_now_date"].get<std::string>(), &date));

  int matched = 0, total = 0;
  std::vector<std::string> failures;
  for (const Json& entry : reference["templates"]) {
    const std::string name = entry["name"].get<std::string>();
    const std::string source = testing::ReadWholeFile(
        testing::SharedPath(absl::StrCat("chat_templates/", entry["file"].get<std::string>())));
    absl::StatusOr<ChatTemplate> tmpl = ChatTemplate::Parse(source);
    for (const auto& [conversation, expected] : entry["renders"].items()) {
      ++total;
      const Json& conv = reference["conversations"][conversation];
      ChatRenderOptions options;
      options.add_generation_prompt = conv["add_generation_prompt"].get<bool>();
      options.bos_token = reference["bos_token"].get<std::string>();
      options.eos_token = reference["eos_token"].get<std::string>();
      options.date = date;
      absl::StatusOr<RenderedChat> got = tmpl.ok() ? tmpl->Render(conv["messages"], options)
                                                   : absl::StatusOr<RenderedChat>(tmpl.status());
      std::string problem;
      if (expected.contains("text")) {
        const std::string want = expected["text"].get<std::string>();
        if (!got.ok()) {
          problem = absl::StrCat("failed: ", got.status().ToString());
        } else if (got->text != want) {
          problem = FirstDifference(got->text, want);
        }
      } else if (expected.contains("raises")) {
        const std::string want = expected["raises"].get<std::string>();
        if (got.ok()) {
          problem = "rendered, but the reference raised";
        } else if (got.status().message() != want) {
          problem = absl::StrCat("raised '", got.status().message(), "', want '", want, "'");
        }
      } else if (got.ok()) {
        problem = absl::StrCat("rendered, but the reference failed with ",
                               expected["error"].get<std::string>());
      }
      if (problem.empty()) {
        ++matched;
      } else {
        failures.push_back(absl::StrCat(name, " / ", conversation, ": ", problem));
      }
    }
  }
  std::printf("chat templates: %d of %d renders match Jinja2\n", matched, total);
  EXPECT_EQ(matched, total) << absl::StrJoin(failures, "\n");
  EXPECT_EQ(total, 270);  // 45 templates x 6 conversations
}

}  // namespace
}  // namespace quill::engine::chat
