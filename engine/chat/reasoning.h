#pragma once

// Reasoning models (DeepSeek R1, Qwen3, SmolLM3, ...) think in <think>...</think> before
// they answer. OpenAI-compatible servers hand the thought back apart from the answer, as
// the message's `reasoning_content`, so that a client shows (or hides) it and keeps it
// out of the next turn. Which templates' models think is found once, at load: their
// templates drop an earlier turn's thought from the conversation they render.

#include <string>

#include "absl/strings/string_view.h"
#include "engine/chat/chat_template.h"

namespace quill::engine::chat {

// Whether `tmpl` is a reasoning model's: its prompt for a user turn writes the tags itself
// (an instruction to think in them, an empty thought when thinking is off, or a thought
// opened for the model), or it drops the thought of an earlier answer "<think>THOUGHT
// </think>ANSWER" and keeps ANSWER. False when a render fails.
bool ProbeThinks(const ChatTemplate& tmpl, const RenderLimits& limits = {});

// Whether a prompt ending in `prompt_tail` leaves the model inside a thought: its last
// text other than whitespace is "<think>" (DeepSeek R1's templates open it for the model).
bool PromptOpensThought(absl::string_view prompt_tail);

// Whether a chat answer is split into thought and content, and how it starts.
struct ReasoningSplit {
  bool split = false;         // a reasoning model's answer, not one JSON mode constrains
  bool thought_open = false;  // the prompt opened the thought (PromptOpensThought)
};

// Splits an answer into its thought and the rest, as its text arrives in pieces. The
// thought is what lies between a "<think>" that starts the answer (or the prompt's open
// one) and "</think>"; the tags and the whitespace after "</think>" belong to neither.
// Without a thought everything is content. A piece's end that may be the start of a tag
// is held until the next piece says, so pieces split anywhere give what the whole text
// gives.
class ReasoningSplitter {
 public:
  struct Parts {
    std::string reasoning;
    std::string content;
  };

  // `thought_open`: the prompt opened the thought (PromptOpensThought).
  explicit ReasoningSplitter(bool thought_open);

  // Appends the next piece of the answer; returns what of it is now known to be which.
  Parts Add(absl::string_view piece);
  // The answer is complete: returns what was held (an unclosed thought is all thought).
  Parts Finish();

 private:
  enum class State {
    kStart,    // only whitespace, or a prefix of "<think>", so far
    kThought,  // inside the thought
    kGap,      // after "</think>", only whitespace so far
    kContent,  // the rest is content
  };
  State state_;
  std::string held_;  // text whose part is not known yet
};

}  // namespace quill::engine::chat
