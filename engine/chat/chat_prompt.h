#pragma once

// The chat prompt: OpenAI-style messages -> the token ids a model's chat template makes of
// them. The one place where a ChatTemplate meets a Tokenizer; both servers (gRPC Chat and
// /v1/chat/completions) and the tools build chat prompts only through ChatPrompter.
//
// What it does, as llama.cpp's server does it:
//   - bos_token / eos_token are the vocabulary's own token texts (e.g. "<|begin_of_text|>");
//   - the template's own text is tokenized with special tokens parsed, while every byte that
//     came from a message stays plain text, so content cannot forge a control token;
//   - when the vocabulary adds BOS and the template already starts with the BOS text, that
//     text is dropped before tokenizing (llama.cpp strips it the same way), so the prompt
//     has exactly one BOS.
// A chat turn then ends on any of the tokenizer's end-of-generation ids (<|eot_id|>,
// <|im_end|>, ...), which the engine treats like EOS unless ignore_eos.

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/civil_time.h"
#include "absl/types/span.h"
#include "engine/chat/chat_template.h"
#include "engine/chat/tool_calls.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace quill::engine::chat {

struct ChatMessage {
  std::string role;
  std::string content;
};

struct ChatPromptOptions {
  bool add_generation_prompt = true;
  // What strftime_now() formats: this date, or the local date now if unset.
  std::optional<absl::CivilDay> date;
  RenderLimits limits;
  // More variables for the template (ChatRenderOptions::extra_variables): an object or
  // null.
  nlohmann::ordered_json extra_variables;
};

struct ChatPrompt {
  // The rendered prompt as it was tokenized (without a leading BOS text the tokenizer
  // adds back as the BOS token).
  std::string text;
  std::vector<TokenId> ids;
};

// A reasoning model's thought tags as tokens: "<think>" and "</think>", each one token of
// the vocabulary.
struct ThoughtTags {
  TokenId open = -1;
  TokenId close = -1;
};

// Immutable after construction; Build() is const and thread-safe. Holds a reference to the
// tokenizer, which must outlive it (the model owns both).
class ChatPrompter {
 public:
  // Prompts through `tmpl`.
  ChatPrompter(const Tokenizer& tokenizer, ChatTemplate tmpl);
  // No template: every Build() is FAILED_PRECONDITION with `unavailable_reason`.
  ChatPrompter(const Tokenizer& tokenizer, std::string unavailable_reason);

  // The prompter a served model uses: `override_template` (--chat-template) when given,
  // else the model's own `tokenizer.chat_template` source parsed now. Without either, or
  // when the model's template does not parse, chat is unavailable and Build() says why
  // (raw prompts are unaffected, so this never fails the model).
  static ChatPrompter ForModel(const Tokenizer& tokenizer,
                               std::optional<ChatTemplate> override_template,
                               const std::optional<std::string>& model_template);

  bool available() const { return tmpl_.has_value(); }
  // Why Build() is FAILED_PRECONDITION; "" when available.
  const std::string& unavailable_reason() const { return unavailable_reason_; }
  // How the template writes tool calls (probed once, at construction): what a model
  // deciding for itself whether to call is read in.
  ToolCallSyntax tool_call_syntax() const { return tool_call_syntax_; }
  // Whether the template is a reasoning model's, whose answers start with a thought
  // (engine/chat/reasoning.h; probed once, at construction).
  bool thinks() const { return thinks_; }
  // For a template that thinks, its tags when each is one token of the vocabulary (what
  // JSON mode needs to let a thought come before the object); nullopt otherwise.
  const std::optional<ThoughtTags>& thought_tags() const { return thought_tags_; }

  // Renders `messages` and tokenizes the result. Errors:
  //   FAILED_PRECONDITION  no usable chat template (see ForModel);
  //   INVALID_ARGUMENT     the template refused the conversation (raise_exception's message,
  //                        e.g. roles that do not alternate), a template error or render
  //                        limit, or text the tokenizer refuses; the message starts with
  //                        "messages".
  absl::StatusOr<ChatPrompt> Build(absl::Span<const ChatMessage> messages,
                                   const ChatPromptOptions& options = {}) const;
  // The same for a JSON message array (any extra message fields reach the template).
  absl::StatusOr<ChatPrompt> Build(const nlohmann::ordered_json& messages,
                                   const ChatPromptOptions& options = {}) const;

 private:
  const Tokenizer* tokenizer_;  // owned by the model, which outlives every prompter
  std::optional<ChatTemplate> tmpl_;
  std::string unavailable_reason_;
  ToolCallSyntax tool_call_syntax_ = ToolCallSyntax::kNone;
  bool thinks_ = false;
  std::optional<ThoughtTags> thought_tags_;
};

}  // namespace quill::engine::chat
