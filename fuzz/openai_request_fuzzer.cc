// libFuzzer target: an OpenAI-compatible request body, through everything the HTTP front
// end does with it before the engine: ParseOpenAiRequest, then ToEngineRequest (POST
// /v1/completions) or ToEngineChatRequest through a real chat template (POST
// /v1/chat/completions), with the built-in kjv-1m tokenizer. Byte 0 picks the endpoint
// (bit 0) and, for chat, the template (the other bits; ../shared/chat_templates, or a
// small built-in one without it); the rest is the body. Checked: every refusal is
// INVALID_ARGUMENT (a 400 naming the field), a parsed request has the shape the server
// relies on, and an accepted one satisfies every limit the engine relies on.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/strings/string_view.h"
#include "engine/base/check.h"
#include "engine/chat/chat_prompt.h"
#include "engine/tokenizer/tokenizer.h"
#include "fuzz/accepted_request.h"
#include "fuzz/chat_templates.h"
#include "fuzz/fuzz_assets.h"
#include "server/http/openai_request.h"
#include "server/request_codec.h"

namespace {

namespace http = ::quill::server::http;
using quill::engine::chat::ChatPrompter;

// What ParseOpenAiRequest promises the API handler (openai_request.h).
void CheckParsed(const http::OpenAiRequest& r) {
  QUILL_CHECK(!r.logprobs || r.generate.logprobs() >= 1);
  QUILL_CHECK(r.n >= 1 && r.n <= http::kMaxChoices);
  if (r.endpoint == http::Endpoint::kCompletions) {
    QUILL_CHECK(!r.prompts.empty() &&
                r.n * static_cast<int>(r.prompts.size()) <= http::kMaxChoices);
    for (const quill::v1::GenerateRequest& prompt : r.prompts) {
      QUILL_CHECK(prompt.input_case() != quill::v1::GenerateRequest::INPUT_NOT_SET);
    }
    QUILL_CHECK(r.generate.input_case() != quill::v1::GenerateRequest::INPUT_NOT_SET);
    QUILL_CHECK(r.generate.prompt_logprobs() == (r.echo && r.logprobs));
    return;
  }
  QUILL_CHECK(!r.echo);
  QUILL_CHECK(r.messages.is_array() && !r.messages.empty());
  for (const auto& message : r.messages) {
    QUILL_CHECK(message.is_object());
    QUILL_CHECK(message.contains("role") && message["role"].is_string() &&
                !message["role"].get_ref<const std::string&>().empty());
    if (message.contains("content")) {
      QUILL_CHECK(message["content"].is_string() || message["content"].is_null());
    }
  }
  QUILL_CHECK(!r.max_tokens_given || r.generate.max_tokens() >= 1);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const quill::engine::Tokenizer* tokenizer = quill::fuzz::BuiltinTokenizer().release();
  static const quill::server::RequestLimits limits = quill::fuzz::BuiltinModelLimits(*tokenizer);
  static const std::vector<ChatPrompter>* prompters = [] {
    auto* list = new std::vector<ChatPrompter>();
    for (const auto& tmpl : quill::fuzz::ChatTemplates()) list->emplace_back(*tokenizer, tmpl);
    return list;
  }();
  if (size < 1) return 0;

  const bool chat = (data[0] & 1) != 0;
  const absl::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  auto parsed = http::ParseOpenAiRequest(
      body, chat ? http::Endpoint::kChatCompletions : http::Endpoint::kCompletions,
      /*random_seed=*/7);
  if (!parsed.ok()) {
    QUILL_CHECK(parsed.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  CheckParsed(*parsed);
  auto check = [&](const absl::StatusOr<quill::engine::GenerationRequest>& converted) {
    if (converted.ok()) {
      quill::fuzz::CheckAccepted(*converted, limits);
    } else {
      QUILL_CHECK(converted.status().code() == absl::StatusCode::kInvalidArgument);
    }
  };
  if (chat) {
    check(quill::server::ToEngineChatRequest(parsed->messages, parsed->generate, limits,
                                             (*prompters)[(data[0] >> 1) % prompters->size()],
                                             parsed->template_variables));
    return 0;
  }
  // Every prompt of a batch, with the request's options, as the HTTP API submits them.
  for (const quill::v1::GenerateRequest& prompt : parsed->prompts) {
    quill::v1::GenerateRequest one = parsed->generate;
    one.clear_input();
    one.MergeFrom(prompt);
    check(quill::server::ToEngineRequest(one, limits, *tokenizer));
  }
  return 0;
}
