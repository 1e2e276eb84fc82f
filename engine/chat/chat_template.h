#pragma once

// Chat templates: a model's `tokenizer.chat_template` (Jinja, as Hugging Face writes them)
// rendered into a prompt by Quill's own Jinja interpreter (engine/chat/jinja_*), with the
// semantics of Jinja2 3.1 in Hugging Face's environment (sandboxed, trim_blocks,
// lstrip_blocks, loop controls, {% generation %}, raise_exception, strftime_now, tojson
// without ASCII escaping).
//
// The rendered text remembers which bytes came from the request (message contents, tool
// definitions, ...): the tokenizer must treat those as plain text, so that a user typing
// "<|im_start|>" cannot forge a control token, while the template's own markup is parsed
// for special tokens.
//
//   QUILL_ASSIGN_OR_RETURN(ChatTemplate tmpl, ChatTemplate::Parse(source));  // at load
//   QUILL_ASSIGN_OR_RETURN(RenderedChat prompt, tmpl.Render(messages, options));  // per request

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/civil_time.h"
#include "engine/chat/jinja_runtime.h"
#include "nlohmann/json.hpp"

namespace quill::engine::chat {

namespace jinja {
struct Template;
}  // namespace jinja

// [begin, end) byte offsets into RenderedChat::text.
struct ByteRange {
  size_t begin = 0;
  size_t end = 0;
  friend bool operator==(const ByteRange& a, const ByteRange& b) {
    return a.begin == b.begin && a.end == b.end;
  }
};

// Bounds on one render (output size, memory, operations, nesting); see jinja::RenderLimits.
using RenderLimits = jinja::RenderLimits;

struct ChatRenderOptions {
  bool add_generation_prompt = true;
  // The template's bos_token / eos_token; nullopt leaves the variable undefined (a
  // vocabulary without that token).
  std::optional<std::string> bos_token = "<s>";
  std::optional<std::string> eos_token = "</s>";
  // What strftime_now() formats: this date at 00:00:00, or the local time now if unset.
  std::optional<absl::CivilDay> date;
  // More variables for the template (tools, documents, enable_thinking, ...): each
  // member of this JSON object becomes a variable. They come from the request, so their
  // strings are untrusted like message contents. Must be an object or null.
  nlohmann::ordered_json extra_variables;
  RenderLimits limits;
};

struct RenderedChat {
  std::string text;
  // Sorted, disjoint, non-adjacent byte ranges of `text` that were copied from request
  // data (messages and extra_variables). Everything else came from the template or the
  // BOS/EOS tokens.
  std::vector<ByteRange> content_ranges;
};

class ChatTemplate {
 public:
  // INVALID_ARGUMENT with "line L:C" for a template that does not parse (syntax errors,
  // unknown tags or filters, unsupported constructs such as include), or that is not
  // valid UTF-8.
  static absl::StatusOr<ChatTemplate> Parse(absl::string_view source);

  // Renders an OpenAI-style message array ([{"role": ..., "content": ...}, ...]; any
  // other fields pass through to the template). Const and thread-safe: every render has
  // its own state. Errors are INVALID_ARGUMENT, because they depend on the request:
  //   - the template called raise_exception(msg): the status message is `msg` verbatim;
  //   - any other template error (undefined variable used, type error, ...): the Jinja2
  //     error name, its message and the template line ("UndefinedError: 'tools' is
  //     undefined (line 3)");
  //   - a render limit was exceeded ("RenderLimitError: ...");
  //   - `messages` is not an array or extra_variables not an object.
  // Pass ordered_json to keep each object's key order (what |tojson prints); an
  // nlohmann::json object's keys come out sorted.
  absl::StatusOr<RenderedChat> Render(const nlohmann::ordered_json& messages,
                                      const ChatRenderOptions& options = {}) const;
  absl::StatusOr<RenderedChat> Render(const nlohmann::json& messages,
                                      const ChatRenderOptions& options = {}) const;

 private:
  explicit ChatTemplate(std::shared_ptr<const jinja::Template> tmpl) : template_(std::move(tmpl)) {}

  template <typename Json>
  absl::StatusOr<RenderedChat> RenderImpl(const Json& messages,
                                          const ChatRenderOptions& options) const;

  std::shared_ptr<const jinja::Template> template_;
};

// Parses an OpenAI-style messages file or request body (a JSON array), keeping key order.
// INVALID_ARGUMENT with the parser's message for bad JSON or a non-array.
absl::StatusOr<nlohmann::ordered_json> ParseMessagesJson(absl::string_view text);

}  // namespace quill::engine::chat
