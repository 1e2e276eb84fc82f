// quill-run --render-chat as a subprocess: the printed prompt is exactly Jinja2's render
// from ../shared/chat_templates/renders.json (nothing added), templates come from
// --chat-template or a vocabulary-only GGUF, and errors exit non-zero with the reason.

#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/gguf/gguf_file.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"

namespace quill::engine {
namespace {

using Json = nlohmann::ordered_json;
using testing::BuildBinaryPath;
using testing::RunAndCapture;
using testing::SharedPath;

std::string WriteTemp(const std::string& name, const std::string& content) {
  return testing::WriteScratchFile(absl::StrCat("render_chat_", name), content);
}

class RenderChatTest : public ::testing::Test {
 protected:
  void SetUp() override {
    quill_run_ = BuildBinaryPath("engine/tools/quill-run");
    if (quill_run_.empty()) GTEST_SKIP() << "quill-run not built";
    const std::string renders = SharedPath("chat_templates/renders.json");
    if (renders.empty()) GTEST_SKIP() << "shared assets not found (chat_templates/renders.json)";
    reference_ = Json::parse(testing::ReadWholeFile(renders));
    date_ = reference_["strftime_now_date"].get<std::string>();
  }

  // Runs quill-run with `args`; returns its output (stdout and stderr) and exit code.
  std::string Run(std::vector<std::string> args, int* exit_code) {
    args.insert(args.begin(), quill_run_);
    absl::StatusOr<std::string> out = RunAndCapture(args, exit_code);
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? *out : "";
  }

  std::string MessagesFile(const std::string& conversation) {
    return WriteTemp(conversation + ".json",
                     reference_["conversations"][conversation]["messages"].dump());
  }

  std::vector<std::string> RenderArgs(const std::string& conversation) {
    std::vector<std::string> args = {"--render-chat", MessagesFile(conversation), "--template-date",
                                     date_};
    if (!reference_["conversations"][conversation]["add_generation_prompt"].get<bool>()) {
      args.push_back("--no-generation-prompt");
    }
    return args;
  }

  const Json& Expected(const std::string& template_name, const std::string& conversation) {
    for (const Json& entry : reference_["templates"]) {
      if (entry["name"] == template_name) return entry["renders"][conversation];
    }
    ADD_FAILURE() << "no template " << template_name;
    static const Json kNull;
    return kNull;
  }

  std::string quill_run_;
  Json reference_;
  std::string date_;
};

// Templates chosen to cover strftime_now, raise_exception, an UndefinedError, from_json in
// an if, {% generation %}, special tokens and long tool-oriented templates.
TEST_F(RenderChatTest, ChatTemplateFilesMatchJinja2) {
  const std::vector<std::string> templates = {
      "Qwen-Qwen2.5-7B-Instruct",  "meta-llama-Llama-3.2-3B-Instruct",
      "google-gemma-2-2b-it",      "fireworks-ai-llama-3-firefunction-v2",
      "openai-gpt-oss-120b",       "Mistral-Small-3.2-24B-Instruct-2506",
      "deepseek-ai-DeepSeek-V3.2", "poolside-Laguna-XS.2"};
  int matched = 0, total = 0;
  for (const std::string& name : templates) {
    const std::string file = SharedPath(absl::StrCat("chat_templates/", name, ".jinja"));
    ASSERT_FALSE(file.empty()) << name;
    for (const auto& [conversation, c] : reference_["conversations"].items()) {
      ++total;
      std::vector<std::string> args = RenderArgs(conversation);
      args.push_back("--chat-template");
      args.push_back(file);
      int code = -1;
      const std::string out = Run(args, &code);
      const Json& want = Expected(name, conversation);
      SCOPED_TRACE(absl::StrCat(name, " / ", conversation));
      if (want.contains("text")) {
        EXPECT_EQ(code, 0) << out;
        EXPECT_EQ(out, want["text"].get<std::string>());
        matched += code == 0 && out == want["text"].get<std::string>();
      } else if (want.contains("raises")) {
        EXPECT_EQ(code, 5);
        EXPECT_EQ(out, absl::StrCat("quill-run: ", want["raises"].get<std::string>(), "\n"));
        matched += code == 5;
      } else {
        EXPECT_EQ(code, 5) << out;
        EXPECT_TRUE(absl::StartsWith(out, "quill-run: UndefinedError: 'functions' is undefined"))
            << out;
        matched += code == 5;
      }
    }
  }
  std::printf("quill-run --render-chat: %d of %d renders match Jinja2\n", matched, total);
  EXPECT_EQ(matched, total);
}

// A vocabulary-only GGUF: its tokenizer.chat_template is Qwen3's, so the output must be
// the reference render of Qwen-Qwen3-0.6B (which does not use bos_token or eos_token).
TEST_F(RenderChatTest, VocabularyOnlyGgufTemplate) {
  const std::string vocab = SharedPath("vocab/ggml-vocab-qwen2.gguf");
  if (vocab.empty()) GTEST_SKIP() << "shared assets not found (vocab/ggml-vocab-qwen2.gguf)";
  auto file = GgufFile::Open(vocab);
  ASSERT_TRUE(file.ok()) << file.status();
  auto embedded = (*file)->GetString("tokenizer.chat_template");
  ASSERT_TRUE(embedded.ok());
  ASSERT_EQ(*embedded, testing::ReadWholeFile(SharedPath("chat_templates/Qwen-Qwen3-0.6B.jinja")));

  for (const auto& [conversation, c] : reference_["conversations"].items()) {
    SCOPED_TRACE(conversation);
    std::vector<std::string> args = RenderArgs(conversation);
    args.push_back("-m");
    args.push_back(vocab);
    int code = -1;
    const std::string out = Run(args, &code);
    EXPECT_EQ(code, 0) << out;
    EXPECT_EQ(out, Expected("Qwen-Qwen3-0.6B", conversation)["text"].get<std::string>());
  }
}

// BOS/EOS text comes from the GGUF's vocabulary: llama-bpe's template starts the first
// turn with bos_token (<|begin_of_text|>). Expected text rendered by Jinja2 from the
// template stored in that file.
TEST_F(RenderChatTest, BosAndEosTextFromTheGguf) {
  const std::string vocab = SharedPath("vocab/ggml-vocab-llama-bpe.gguf");
  if (vocab.empty()) GTEST_SKIP() << "shared assets not found (vocab/ggml-vocab-llama-bpe.gguf)";
  std::vector<std::string> args = RenderArgs("user-only");
  args.insert(args.end(), {"-m", vocab});
  int code = -1;
  std::string out = Run(args, &code);
  EXPECT_EQ(code, 0) << out;
  EXPECT_EQ(out,
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello! Who are you?"
            "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");

  // --chat-template replaces the model's template; the tokens still come from the model.
  args = RenderArgs("user-only");
  args.insert(args.end(), {"-m", vocab, "--chat-template",
                           WriteTemp("tokens.jinja", "{{ bos_token }}|{{ eos_token }}")});
  out = Run(args, &code);
  EXPECT_EQ(code, 0) << out;
  EXPECT_EQ(out, "<|begin_of_text|>|<|end_of_text|>");

  // Without a model they are <s> and </s>.
  args = RenderArgs("user-only");
  args.insert(args.end(),
              {"--chat-template", WriteTemp("tokens2.jinja", "{{ bos_token }}|{{ eos_token }}")});
  out = Run(args, &code);
  EXPECT_EQ(code, 0) << out;
  EXPECT_EQ(out, "<s>|</s>");
}

TEST_F(RenderChatTest, ErrorsExitNonZeroWithTheReason) {
  int code = -1;
  const std::string kjv = SharedPath("models/kjv-1m.gguf");
  if (!kjv.empty()) {
    std::string out = Run({"-m", kjv, "--render-chat", MessagesFile("user-only")}, &code);
    EXPECT_EQ(code, 5);
    EXPECT_TRUE(absl::StrContains(out, "FAILED_PRECONDITION")) << out;
    EXPECT_TRUE(absl::StrContains(out, "has no tokenizer.chat_template")) << out;
  }

  const std::string good_template = WriteTemp("ok.jinja", "{{ messages[0].content }}");
  std::string out = Run(
      {"--render-chat", WriteTemp("bad.json", "[{\"role\": "), "--chat-template", good_template},
      &code);
  EXPECT_EQ(code, 4);
  EXPECT_TRUE(absl::StrContains(out, "messages are not valid JSON")) << out;

  out = Run({"--render-chat", MessagesFile("user-only"), "--chat-template",
             WriteTemp("syntax.jinja", "ok\n{% for m in messages %}")},
            &code);
  EXPECT_EQ(code, 5);
  EXPECT_TRUE(absl::StrContains(out, "TemplateSyntaxError: line 2:")) << out;

  out = Run({"--render-chat", MessagesFile("user-only"), "--chat-template",
             WriteTemp("undefined.jinja", "{{ tools[0].name }}")},
            &code);
  EXPECT_EQ(code, 5);
  EXPECT_EQ(out, "quill-run: UndefinedError: 'tools' is undefined (line 1)\n");

  out = Run({"--render-chat", MessagesFile("user-only")}, &code);
  EXPECT_EQ(code, 2);
  EXPECT_TRUE(absl::StrContains(out, "needs -m MODEL.gguf or --chat-template")) << out;

  out = Run({"--render-chat", MessagesFile("user-only"), "--chat-template", good_template,
             "--template-date", "15/01/2026"},
            &code);
  EXPECT_EQ(code, 2);
  EXPECT_TRUE(absl::StrContains(out, "YYYY-MM-DD")) << out;

  out = Run({"--render-chat", MessagesFile("user-only"), "--chat-template",
             "/nonexistent/template.jinja"},
            &code);
  EXPECT_EQ(code, 5);
  EXPECT_TRUE(absl::StrContains(out, "cannot open /nonexistent/template.jinja")) << out;

  out = Run({"--help"}, &code);
  EXPECT_TRUE(absl::StrContains(out, "--render-chat MESSAGES.json")) << out;
}

}  // namespace
}  // namespace quill::engine
