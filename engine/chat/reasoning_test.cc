// Thinking probed from real templates; answers split into thought and content, whole and
// in pieces.
#include "engine/chat/reasoning.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/chat/chat_template.h"
#include "gtest/gtest.h"
#include "tests/testing/test_env.h"

namespace quill::engine::chat {
namespace {

TEST(ProbeThinksTest, ReasoningModelsTemplatesAreFound) {
  const std::string dir = testing::SharedPath("chat_templates");
  if (dir.empty()) GTEST_SKIP() << "shared assets not found (chat_templates)";
  // Read in their sources: reasoning models' templates drop an earlier answer's thought
  // (content.split('</think>')) or open <think> in the generation prompt.
  const std::map<std::string, bool> expected = {
      {"Qwen-Qwen3-0.6B", true},
      {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", true},
      {"llama-cpp-deepseek-r1", true},
      // Tells the model to think in the tags; thinking off writes an empty thought.
      {"HuggingFaceTB-SmolLM3-3B", true},
      {"deepseek-ai-DeepSeek-V3.2", true},
      // No thinking.
      {"Qwen-Qwen2.5-7B-Instruct", false},
      {"meta-llama-Llama-3.1-8B-Instruct", false},
      {"google-gemma-2-2b-it", false},
      {"microsoft-Phi-3.5-mini-instruct", false},
      {"mistralai-Mistral-Nemo-Instruct-2407", false},
  };
  for (const auto& [name, want] : expected) {
    absl::StatusOr<ChatTemplate> tmpl =
        ChatTemplate::Parse(testing::ReadWholeFile(absl::StrCat(dir, "/", name, ".jinja")));
    ASSERT_TRUE(tmpl.ok()) << name << ": " << tmpl.status();
    EXPECT_EQ(ProbeThinks(*tmpl), want) << name;
  }
}

TEST(PromptOpensThoughtTest, OnlyAnOpenTagLastCounts) {
  EXPECT_TRUE(PromptOpensThought("<|Assistant|><think>\n"));
  EXPECT_TRUE(PromptOpensThought("<think>"));
  EXPECT_FALSE(PromptOpensThought("<think>\n\n</think>\n\n"));
  EXPECT_FALSE(PromptOpensThought("<|im_start|>assistant\n"));
  EXPECT_FALSE(PromptOpensThought(""));
}

// Splits `answer` whole.
ReasoningSplitter::Parts SplitWhole(absl::string_view answer, bool thought_open) {
  ReasoningSplitter splitter(thought_open);
  ReasoningSplitter::Parts out = splitter.Add(answer);
  ReasoningSplitter::Parts last = splitter.Finish();
  out.reasoning += last.reasoning;
  out.content += last.content;
  return out;
}

TEST(ReasoningSplitterTest, ThoughtAndAnswerComeApart) {
  struct Case {
    const char* answer;
    bool thought_open;
    const char* reasoning;
    const char* content;
  };
  const Case cases[] = {
      // Qwen3: the model opens the thought; the gap after it is neither part.
      {"<think>\nLet me see.\n</think>\n\nIt is 4.", false, "\nLet me see.\n", "It is 4."},
      {"\n<think>a</think>b", false, "a", "b"},
      // DeepSeek R1: the prompt opened it.
      {"Let me see.\n</think>\n\nIt is 4.", true, "Let me see.\n", "It is 4."},
      // Cut short inside the thought: all of it is thought.
      {"Let me see", true, "Let me see", ""},
      {"<think>Let me see </thi", false, "Let me see </thi", ""},
      // No thought: all content, whitespace and look-alikes kept.
      {"It is 4.", false, "", "It is 4."},
      {"  It is 4.", false, "", "  It is 4."},
      {"<thinking>x</thinking>", false, "", "<thinking>x</thinking>"},
      {"<thi", false, "", "<thi"},
      {"It is <think>4</think>.", false, "", "It is <think>4</think>."},
      // An empty thought, and one with nothing after it.
      {"<think>\n\n</think>\n\nHi", false, "\n\n", "Hi"},
      {"<think>x</think>\n", false, "x", ""},
      // A second </think> is content.
      {"a</think>b</think>c", true, "a", "b</think>c"},
  };
  for (const Case& c : cases) {
    const ReasoningSplitter::Parts parts = SplitWhole(c.answer, c.thought_open);
    EXPECT_EQ(parts.reasoning, c.reasoning) << c.answer;
    EXPECT_EQ(parts.content, c.content) << c.answer;
  }
  // A thought opens the answer, after at most 64 bytes of whitespace.
  const std::string blank(64, '\n');
  EXPECT_EQ(SplitWhole(blank + "<think>x", false).reasoning, "x");
  EXPECT_EQ(SplitWhole(blank + " <think>x", false).content, blank + " <think>x");
}

// A stream's pieces may split a tag anywhere: every split of every case gives the parts
// of the whole, and nothing known comes later than the piece that settles it.
TEST(ReasoningSplitterTest, PiecesSplitAnywhereGiveTheWholeParts) {
  for (const bool open : {false, true}) {
    for (const std::string answer :
         {"<think>\nLet me see.\n</think>\n\nIt is 4.", "Let me see.\n</think>\n\nIt is 4.", "<thi",
          "a </think", " <think>x</think>  y"}) {
      const ReasoningSplitter::Parts whole = SplitWhole(answer, open);
      for (size_t cut1 = 0; cut1 <= answer.size(); ++cut1) {
        for (size_t cut2 = cut1; cut2 <= answer.size(); ++cut2) {
          ReasoningSplitter splitter(open);
          ReasoningSplitter::Parts got;
          for (const auto& piece :
               {answer.substr(0, cut1), answer.substr(cut1, cut2 - cut1), answer.substr(cut2)}) {
            const ReasoningSplitter::Parts p = splitter.Add(piece);
            got.reasoning += p.reasoning;
            got.content += p.content;
          }
          const ReasoningSplitter::Parts last = splitter.Finish();
          got.reasoning += last.reasoning;
          got.content += last.content;
          EXPECT_EQ(got.reasoning, whole.reasoning) << answer << " cut at " << cut1 << ", " << cut2;
          EXPECT_EQ(got.content, whole.content) << answer << " cut at " << cut1 << ", " << cut2;
        }
      }
    }
  }
  // Thought text goes out as it comes, but for what may start "</think>".
  ReasoningSplitter splitter(/*thought_open=*/true);
  EXPECT_EQ(splitter.Add("Let me </").reasoning, "Let me ");
  EXPECT_EQ(splitter.Add("b> see").reasoning, "</b> see");
}

}  // namespace
}  // namespace quill::engine::chat
