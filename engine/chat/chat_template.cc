#include "engine/chat/chat_template.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "engine/base/status_macros.h"
#include "engine/base/utf8.h"
#include "engine/chat/jinja_interpreter.h"
#include "engine/chat/jinja_json.h"
#include "engine/chat/jinja_parser.h"

namespace quill::engine::chat {

absl::StatusOr<ChatTemplate> ChatTemplate::Parse(absl::string_view source) {
  if (!IsValidUtf8(source)) {
    return absl::InvalidArgumentError("the chat template is not valid UTF-8");
  }
  QUILL_ASSIGN_OR_RETURN(std::unique_ptr<const jinja::Template> tmpl, jinja::ParseTemplate(source));
  return ChatTemplate(std::shared_ptr<const jinja::Template>(std::move(tmpl)));
}

template <typename Json>
absl::StatusOr<RenderedChat> ChatTemplate::RenderImpl(const Json& messages,
                                                      const ChatRenderOptions& options) const {
  if (!messages.is_array()) return absl::InvalidArgumentError("messages must be a JSON array");
  const auto& extra = options.extra_variables;
  if (!extra.is_null() && !extra.is_object()) {
    return absl::InvalidArgumentError("extra template variables must be a JSON object");
  }
  const absl::CivilSecond now = options.date
                                    ? absl::CivilSecond(*options.date)
                                    : absl::ToCivilSecond(absl::Now(), absl::LocalTimeZone());
  jinja::Runtime rt(options.limits, now);
  std::vector<std::pair<std::string, jinja::Value>> variables;
  QUILL_ASSIGN_OR_RETURN(jinja::Value msgs,
                         jinja::FromJson(messages, rt.heap(), /*untrusted=*/true));
  variables.emplace_back("messages", msgs);
  variables.emplace_back("add_generation_prompt",
                         jinja::Value::Bool(options.add_generation_prompt));
  // Special-token text comes from the model, not the request: trusted.
  if (options.bos_token) variables.emplace_back("bos_token", jinja::Value::Str(*options.bos_token));
  if (options.eos_token) variables.emplace_back("eos_token", jinja::Value::Str(*options.eos_token));
  if (extra.is_object()) {
    for (auto it = extra.begin(); it != extra.end(); ++it) {
      QUILL_ASSIGN_OR_RETURN(jinja::Value v,
                             jinja::FromJson(it.value(), rt.heap(), /*untrusted=*/true));
      variables.emplace_back(it.key(), v);
    }
  }
  QUILL_ASSIGN_OR_RETURN(jinja::StrPtr out, jinja::Render(*template_, rt, variables));
  RenderedChat rendered;
  rendered.text = out->text;
  rendered.content_ranges.reserve(out->untrusted.ranges().size());
  for (const jinja::ByteRange& r : out->untrusted.ranges()) {
    rendered.content_ranges.push_back({r.begin, r.end});
  }
  return rendered;
}

absl::StatusOr<RenderedChat> ChatTemplate::Render(const nlohmann::ordered_json& messages,
                                                  const ChatRenderOptions& options) const {
  return RenderImpl(messages, options);
}

absl::StatusOr<RenderedChat> ChatTemplate::Render(const nlohmann::json& messages,
                                                  const ChatRenderOptions& options) const {
  return RenderImpl(messages, options);
}

absl::StatusOr<nlohmann::ordered_json> ParseMessagesJson(absl::string_view text) {
  // nlohmann::json throws; this is the wall.
  try {
    nlohmann::ordered_json json = nlohmann::ordered_json::parse(text.begin(), text.end());
    if (!json.is_array()) return absl::InvalidArgumentError("messages must be a JSON array");
    return json;
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("messages are not valid JSON: ", e.what()));
  }
}

}  // namespace quill::engine::chat
