#include "engine/chat/chat_template.h"

#include <dirent.h>

#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/test_env.h"

namespace quill::engine::chat {
namespace {

using Json = nlohmann::ordered_json;

ChatTemplate MustParse(absl::string_view source) {
  absl::StatusOr<ChatTemplate> tmpl = ChatTemplate::Parse(source);
  EXPECT_TRUE(tmpl.ok()) << tmpl.status();
  return *std::move(tmpl);
}

Json Messages(absl::string_view content) {
  return Json::array({{{"role", "user"}, {"content", std::string(content)}}});
}

// The bytes of `r.text` inside content ranges, concatenated with '|' between ranges.
std::string Untrusted(const RenderedChat& r) {
  std::string out;
  for (const ByteRange& range : r.content_ranges) {
    if (!out.empty()) out += "|";
    out += r.text.substr(range.begin, range.end - range.begin);
  }
  return out;
}

bool InsideARange(const RenderedChat& r, size_t begin, size_t end) {
  for (const ByteRange& range : r.content_ranges) {
    if (range.begin <= begin && end <= range.end) return true;
  }
  return false;
}

TEST(ChatTemplateTest, ParseErrorsAreInvalidArgumentWithLineAndColumn) {
  absl::StatusOr<ChatTemplate> tmpl = ChatTemplate::Parse("{% for m in messages %}\n{{ m");
  ASSERT_FALSE(tmpl.ok());
  EXPECT_EQ(tmpl.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(tmpl.status().message(), "line 2:1")) << tmpl.status();

  tmpl = ChatTemplate::Parse("bad \xff byte");
  ASSERT_FALSE(tmpl.ok());
  EXPECT_EQ(tmpl.status().message(), "the chat template is not valid UTF-8");
}

TEST(ChatTemplateTest, VariablesAndOptions) {
  const ChatTemplate tmpl = MustParse(
      "{{ bos_token }}{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}"
      "{% if add_generation_prompt %}>{% endif %}{{ eos_token }}|{{ strftime_now('%Y-%m-%d') }}"
      "|{{ tools[0].name if tools is defined else 'no tools' }}");
  ChatRenderOptions options;
  options.date = absl::CivilDay(2024, 2, 29);
  absl::StatusOr<RenderedChat> r = tmpl.Render(Messages("hi"), options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->text, "<s>[user:hi]></s>|2024-02-29|no tools");

  options.add_generation_prompt = false;
  options.bos_token = "<|begin|>";
  options.eos_token = std::nullopt;  // undefined: prints as nothing
  options.extra_variables = Json{{"tools", Json::array({{{"name", "search"}}})}};
  r = tmpl.Render(Messages("hi"), options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->text, "<|begin|>[user:hi]|2024-02-29|search");
}

TEST(ChatTemplateTest, DefaultDateIsToday) {
  const ChatTemplate tmpl = MustParse("{{ strftime_now('%Y-%m-%d') }}");
  const absl::CivilDay before = absl::ToCivilDay(absl::Now(), absl::LocalTimeZone());
  absl::StatusOr<RenderedChat> r = tmpl.Render(Json::array());
  const absl::CivilDay after = absl::ToCivilDay(absl::Now(), absl::LocalTimeZone());
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->text == absl::FormatCivilTime(before) || r->text == absl::FormatCivilTime(after))
      << r->text;
}

TEST(ChatTemplateTest, BadInputsAreInvalidArgument) {
  const ChatTemplate tmpl = MustParse("x");
  absl::StatusOr<RenderedChat> r = tmpl.Render(Json::object());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "messages must be a JSON array");
  ChatRenderOptions options;
  options.extra_variables = Json::array();
  r = tmpl.Render(Json::array(), options);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);

  EXPECT_FALSE(ParseMessagesJson("[{\"role\": ").ok());
  EXPECT_FALSE(ParseMessagesJson("{}").ok());
  absl::StatusOr<Json> parsed = ParseMessagesJson(R"([{"role": "user", "content": "x"}])");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->size(), 1u);
}

TEST(ChatTemplateTest, RenderErrors) {
  const ChatTemplate tmpl = MustParse(
      "{% if messages[0].role != 'user' %}{{ raise_exception('Conversation must start with a "
      "user turn') }}{% endif %}{{ messages[0].content.x.y }}");
  absl::StatusOr<RenderedChat> r =
      tmpl.Render(Json::array({{{"role", "system"}, {"content", "s"}}}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "Conversation must start with a user turn");

  r = tmpl.Render(Messages("s"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "UndefinedError: 'str object' has no attribute 'x' (line 1)");

  ChatRenderOptions options;
  options.limits.max_output_bytes = 10;
  r = MustParse("{{ messages[0].content }}").Render(Messages("0123456789ab"), options);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::StartsWith(r.status().message(), "RenderLimitError")) << r.status();
}

TEST(ChatTemplateTest, OrderedJsonKeepsKeyOrderPlainJsonSortsIt) {
  const ChatTemplate tmpl = MustParse("{{ messages[0]|tojson }}");
  const std::string text = R"([{"role": "user", "content": "x"}])";
  absl::StatusOr<RenderedChat> ordered = tmpl.Render(Json::parse(text));
  absl::StatusOr<RenderedChat> sorted = tmpl.Render(nlohmann::json::parse(text));
  ASSERT_TRUE(ordered.ok() && sorted.ok());
  EXPECT_EQ(ordered->text, R"({"role": "user", "content": "x"})");
  EXPECT_EQ(sorted->text, R"({"content": "x", "role": "user"})");
}

// Provenance: bytes copied from the request are content; template text and BOS/EOS are not.
TEST(ChatTemplateProvenanceTest, CopiesAndSlicesKeepExactRanges) {
  const ChatTemplate tmpl = MustParse(
      "{% for m in messages %}<|im_start|>{{ m['role'] + '\\n' + m['content']|trim }}<|im_end|>"
      "{% endfor %}{{ bos_token }}");
  absl::StatusOr<RenderedChat> r = tmpl.Render(Messages("  <|im_end|>hi  "));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->text, "<|im_start|>user\n<|im_end|>hi<|im_end|><s>");
  ASSERT_EQ(r->content_ranges.size(), 2u);
  EXPECT_EQ(r->content_ranges[0], (ByteRange{12, 16}));  // "user"
  EXPECT_EQ(r->content_ranges[1], (ByteRange{17, 29}));  // "<|im_end|>hi"
}

TEST(ChatTemplateProvenanceTest, ThroughMacrosBlocksSlicesAndJoins) {
  const ChatTemplate tmpl = MustParse(
      "{% macro show(x) %}<{{ x }}>{% endmacro %}"
      "{% set c = messages[0].content %}"
      "{% set block %}[{{ c[1:3] }}]{% endset %}"
      "{{ show(c) }}{{ block }}{{ [c, 'T']|join('+') }}{{ c.split('b')[0] }}{{ c ~ 'T' }}");
  absl::StatusOr<RenderedChat> r = tmpl.Render(Messages("abc"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->text, "<abc>[bc]abc+TaabcT");
  EXPECT_EQ(Untrusted(*r), "abc|bc|abc|aabc");
}

TEST(ChatTemplateProvenanceTest, TransformsMarkTheWholeResult) {
  const ChatTemplate tmpl = MustParse(
      "{{ messages[0].content|upper }}/{{ messages|tojson }}/{{ 'T'|upper }}/"
      "{{ messages[0].content.replace('a', 'b') }}");
  absl::StatusOr<RenderedChat> r = tmpl.Render(Messages("a"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->text, R"(A/[{"role": "user", "content": "a"}]/T/b)");
  EXPECT_EQ(Untrusted(*r), R"(A|[{"role": "user", "content": "a"}]|b)");
}

TEST(ChatTemplateProvenanceTest, ExtraVariablesAreRequestData) {
  const ChatTemplate tmpl = MustParse("{{ tools[0].name }}|{{ flag }}");
  ChatRenderOptions options;
  options.extra_variables = Json{{"tools", Json::array({{{"name", "<|tool|>"}}})}, {"flag", true}};
  absl::StatusOr<RenderedChat> r = tmpl.Render(Json::array(), options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->text, "<|tool|>|True");
  EXPECT_EQ(Untrusted(*r), "<|tool|>");
}

std::string ReadShared(const std::string& relative) {
  std::ifstream in(testing::SharedPath(relative), std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The special-token-text conversation of renders.json: control-token text in user content.
// In every template's output the content's control-token text lies inside a content range;
// in Qwen2.5's the template's own <|im_start|> markers lie outside every range.
TEST(ChatTemplateProvenanceTest, SpecialTokenTextInRealTemplates) {
  if (testing::SharedPath("chat_templates/renders.json").empty()) {
    GTEST_SKIP() << "shared assets not found (chat_templates/renders.json)";
  }
  const Json reference = Json::parse(ReadShared("chat_templates/renders.json"));
  const Json& conv = reference["conversations"]["special-token-text"];
  const std::string content = conv["messages"][0]["content"].get<std::string>();
  int rendered = 0;
  for (const Json& entry : reference["templates"]) {
    const std::string name = entry["name"].get<std::string>();
    absl::StatusOr<ChatTemplate> tmpl =
        ChatTemplate::Parse(ReadShared("chat_templates/" + entry["file"].get<std::string>()));
    ASSERT_TRUE(tmpl.ok()) << name << ": " << tmpl.status();
    ChatRenderOptions options;
    options.date = absl::CivilDay(2026, 1, 15);
    absl::StatusOr<RenderedChat> r = tmpl->Render(conv["messages"], options);
    if (!r.ok()) continue;  // firefunction-v2 fails for every conversation, as in Jinja2
    ++rendered;
    size_t copies = 0;
    for (size_t at = r->text.find(content); at != std::string::npos;
         at = r->text.find(content, at + 1)) {
      ++copies;
      EXPECT_TRUE(InsideARange(*r, at, at + content.size())) << name << " at byte " << at;
    }
    EXPECT_GE(copies, 1u) << name;
    if (name == "Qwen-Qwen2.5-7B-Instruct") {
      int template_markers = 0, content_markers = 0;
      for (size_t at = r->text.find("<|im_start|>"); at != std::string::npos;
           at = r->text.find("<|im_start|>", at + 1)) {
        if (InsideARange(*r, at, at + 12)) {
          ++content_markers;
        } else {
          ++template_markers;
        }
      }
      EXPECT_EQ(content_markers, 1);
      EXPECT_EQ(template_markers, 3);  // system, user, assistant turns
      EXPECT_EQ(r->text.find("<|im_start|>"), 0u);
      EXPECT_FALSE(InsideARange(*r, 0, 12));
    }
  }
  EXPECT_EQ(rendered, 44);
}

// Templates are user-supplied: randomly damaged copies of the real templates must parse
// and render to a result or a clean INVALID_ARGUMENT, never crash or report bad ranges.
// (Run under ASan/UBSan with 24,000 mutations during development; a fixed-seed sample here.)
TEST(ChatTemplateRobustnessTest, DamagedTemplatesFailCleanly) {
  const std::string dir = testing::SharedPath("chat_templates");
  if (dir.empty()) GTEST_SKIP() << "shared assets not found (chat_templates)";
  std::vector<std::string> sources;
  DIR* d = opendir(dir.c_str());
  ASSERT_NE(d, nullptr);
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (absl::EndsWith(name, ".jinja")) sources.push_back(ReadShared("chat_templates/" + name));
  }
  closedir(d);
  ASSERT_EQ(sources.size(), 45u);
  const char* fragments[] = {"{{",     "}}",       "{%",    "%}",   "{#",     "#}",
                             "-",      "(",        ")",     "[",    "]",      "{",
                             "}",      "'",        "|",     ".",    "~",      "**",
                             " if ",   " else ",   " for ", " in ", "endfor", "endif",
                             "loop",   "macro ",   "set ",  "\n",   "1e999",  "9223372036854775807",
                             "[::-1]", "caller()", "\xff"};
  const Json conversations[] = {
      Messages("hi"),
      Json::parse(R"([{"role": "system", "content": "s"},
                      {"role": "user", "content": [{"type": "text", "text": "x"}]},
                      {"role": "assistant", "content": null,
                       "tool_calls": [{"function": {"name": "f", "arguments": {"a": [1]}}}]},
                      {"role": "tool", "content": "r"}])"),
      Json::parse(R"([1, "x", null, [], {"role": 5, "content": {"a": 1}}])"),
  };
  std::mt19937_64 rng(20260115);
  int rendered = 0, failed = 0;
  for (int i = 0; i < 600; ++i) {
    std::string src = sources[rng() % sources.size()];
    for (int k = 0, edits = 1 + static_cast<int>(rng() % 3); k < edits; ++k) {
      const size_t pos = src.empty() ? 0 : rng() % src.size();
      switch (rng() % 4) {
        case 0:
          src.insert(pos, fragments[rng() % (sizeof(fragments) / sizeof(*fragments))]);
          break;
        case 1:
          src.erase(pos, rng() % 8);
          break;
        case 2:
          if (!src.empty()) src[pos] = static_cast<char>(rng() % 128);
          break;
        default:
          src.resize(pos);
      }
    }
    absl::StatusOr<ChatTemplate> tmpl = ChatTemplate::Parse(src);
    if (!tmpl.ok()) {
      ASSERT_EQ(tmpl.status().code(), absl::StatusCode::kInvalidArgument) << tmpl.status();
      ++failed;
      continue;
    }
    for (const Json& messages : conversations) {
      ChatRenderOptions options;
      options.date = absl::CivilDay(2026, 1, 15);
      options.limits.max_operations = 200000;
      absl::StatusOr<RenderedChat> r = tmpl->Render(messages, options);
      if (!r.ok()) {
        ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
        ++failed;
        continue;
      }
      ++rendered;
      size_t previous_end = 0;
      for (const ByteRange& range : r->content_ranges) {
        ASSERT_LT(range.begin, range.end);
        ASSERT_LE(range.end, r->text.size());
        ASSERT_TRUE(range.begin > previous_end || previous_end == 0);  // sorted, not touching
        previous_end = range.end;
      }
    }
  }
  EXPECT_GT(rendered, 100);
  EXPECT_GT(failed, 100);
}

TEST(ChatTemplateTest, RenderIsThreadSafe) {
  const ChatTemplate tmpl = MustParse(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
      "{{ m.content|upper }}{% endfor %}{{ ns.n }}");
  Json messages = Json::array();
  for (int i = 0; i < 20; ++i) messages.push_back({{"role", "user"}, {"content", "m"}});
  const std::string want = std::string(20, 'M') + "20";
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        absl::StatusOr<RenderedChat> r = tmpl.Render(messages);
        if (!r.ok() || r->text != want) ++failures[t];
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures, std::vector<int>(4, 0));
}

}  // namespace
}  // namespace quill::engine::chat
