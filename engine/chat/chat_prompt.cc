#include "engine/chat/chat_prompt.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/chat/reasoning.h"

namespace quill::engine::chat {
namespace {

// The text of token `id` for the template's bos_token / eos_token; nullopt (the variable
// stays undefined) when the vocabulary has no such token.
std::optional<std::string> TokenTextOf(const Tokenizer& tokenizer, TokenId id) {
  if (id < 0 || id >= tokenizer.vocab_size()) return std::nullopt;
  return std::string(tokenizer.token_text(id));
}

// The request made the render fail, so the request is what is invalid; say so in terms
// of the field it came from.
absl::Status AsMessagesError(const absl::Status& status) {
  return absl::InvalidArgumentError(absl::StrCat("messages: ", status.message()));
}

}  // namespace

ChatPrompter::ChatPrompter(const Tokenizer& tokenizer, ChatTemplate tmpl)
    : tokenizer_(&tokenizer),
      tmpl_(std::move(tmpl)),
      tool_call_syntax_(ProbeToolCallSyntax(*tmpl_)),
      thinks_(ProbeThinks(*tmpl_)) {
  if (!thinks_) return;
  const auto single_token = [&](absl::string_view text) -> TokenId {
    absl::StatusOr<std::vector<TokenId>> ids =
        tokenizer.EncodeWithSpecialTokens(text, /*add_special=*/false, {});
    return ids.ok() && ids->size() == 1 ? (*ids)[0] : -1;
  };
  const ThoughtTags tags{single_token("<think>"), single_token("</think>")};
  if (tags.open >= 0 && tags.close >= 0) thought_tags_ = tags;
}

ChatPrompter::ChatPrompter(const Tokenizer& tokenizer, std::string unavailable_reason)
    : tokenizer_(&tokenizer), unavailable_reason_(std::move(unavailable_reason)) {}

ChatPrompter ChatPrompter::ForModel(const Tokenizer& tokenizer,
                                    std::optional<ChatTemplate> override_template,
                                    const std::optional<std::string>& model_template) {
  if (override_template.has_value()) return ChatPrompter(tokenizer, *std::move(override_template));
  if (!model_template.has_value() || model_template->empty()) {
    return ChatPrompter(tokenizer,
                        "this model has no chat template (GGUF tokenizer.chat_template), so "
                        "it cannot serve chat; start the server with --chat-template FILE "
                        "(raw prompts work without one)");
  }
  absl::StatusOr<ChatTemplate> parsed = ChatTemplate::Parse(*model_template);
  if (!parsed.ok()) {
    return ChatPrompter(
        tokenizer,
        absl::StrCat("this model's chat template (GGUF tokenizer.chat_template) "
                     "does not parse: ",
                     parsed.status().message(), "; start the server with --chat-template FILE"));
  }
  return ChatPrompter(tokenizer, *std::move(parsed));
}

absl::StatusOr<ChatPrompt> ChatPrompter::Build(absl::Span<const ChatMessage> messages,
                                               const ChatPromptOptions& options) const {
  nlohmann::ordered_json array = nlohmann::ordered_json::array();
  for (const ChatMessage& m : messages) {
    array.push_back({{"role", m.role}, {"content", m.content}});
  }
  return Build(array, options);
}

absl::StatusOr<ChatPrompt> ChatPrompter::Build(const nlohmann::ordered_json& messages,
                                               const ChatPromptOptions& options) const {
  if (!tmpl_.has_value()) return absl::FailedPreconditionError(unavailable_reason_);
  const Tokenizer& tokenizer = *tokenizer_;
  ChatRenderOptions render;
  render.add_generation_prompt = options.add_generation_prompt;
  render.date = options.date;
  render.limits = options.limits;
  render.extra_variables = options.extra_variables;
  render.bos_token = TokenTextOf(tokenizer, tokenizer.bos_id());
  render.eos_token = TokenTextOf(tokenizer, tokenizer.eos_id());
  absl::StatusOr<RenderedChat> rendered = tmpl_->Render(messages, render);
  if (!rendered.ok()) return AsMessagesError(rendered.status());

  ChatPrompt prompt;
  prompt.text = std::move(rendered->text);
  const std::vector<chat::ByteRange>& content = rendered->content_ranges;
  // The tokenizer will add BOS itself: a BOS the template wrote would be a second one.
  // Only the template's own BOS text goes; a message that happens to start the prompt
  // with that text keeps it (as plain text).
  size_t skip = 0;
  const std::optional<std::string>& bos = render.bos_token;
  if (tokenizer.add_bos() && bos.has_value() && !bos->empty() &&
      absl::StartsWith(prompt.text, *bos) && (content.empty() || content[0].begin >= bos->size())) {
    skip = bos->size();
    prompt.text.erase(0, skip);
  }
  std::vector<engine::ByteRange> plain;
  plain.reserve(content.size());
  for (const chat::ByteRange& r : content) plain.push_back({r.begin - skip, r.end - skip});

  absl::StatusOr<std::vector<TokenId>> ids =
      tokenizer.EncodeWithSpecialTokens(prompt.text, /*add_special=*/true, plain);
  if (!ids.ok()) return AsMessagesError(ids.status());
  prompt.ids = *std::move(ids);
  return prompt;
}

}  // namespace quill::engine::chat
