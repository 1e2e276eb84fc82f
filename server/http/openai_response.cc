#include "server/http/openai_response.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/http/openai_error.h"

namespace quill::server::http {
namespace {

using json = nlohmann::json;

// Never throws: bytes that are not UTF-8 (a token that is half a character) become U+FFFD.
std::string Dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string Event(const json& value) { return absl::StrCat("data: ", Dump(value), "\n\n"); }

json Usage(int prompt_tokens, int completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

// The final usage, with OpenAI's prompt_tokens_details.cached_tokens (prefix cache hits)
// and, for a reasoning model whose thought the engine counted, its
// completion_tokens_details.reasoning_tokens.
json Usage(const engine::FinishInfo& info) {
  json usage = Usage(info.prompt_tokens, info.completion_tokens);
  usage["prompt_tokens_details"] = {{"cached_tokens", info.cached_prompt_tokens}};
  if (info.reasoning_tokens.has_value()) {
    usage["completion_tokens_details"] = {{"reasoning_tokens", *info.reasoning_tokens}};
  }
  return usage;
}

json Bytes(const std::string& s) {
  json out = json::array();
  for (unsigned char c : s) out.push_back(static_cast<int>(c));
  return out;
}

// Chat: {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}.
json ChatLogprobs(const ResponseFormat& format, const std::vector<engine::GeneratedToken>& tokens) {
  json content = json::array();
  for (const engine::GeneratedToken& t : tokens) {
    const std::string piece = format.tokenizer->TokenBytes(t.id);
    json top = json::array();
    for (int i = 0; i < format.top_logprobs && i < static_cast<int>(t.top_logprobs.size()); ++i) {
      const std::string alt = format.tokenizer->TokenBytes(t.top_logprobs[i].id);
      top.push_back(
          {{"token", alt}, {"logprob", t.top_logprobs[i].logprob}, {"bytes", Bytes(alt)}});
    }
    content.push_back(
        {{"token", piece}, {"logprob", t.logprob}, {"bytes", Bytes(piece)}, {"top_logprobs", top}});
  }
  return {{"content", content}};
}

// Completions: {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}], "text_offset"};
// an echoed prompt's tokens come first, its first token with null logprobs (nothing
// precedes it).
json CompletionLogprobs(const ResponseFormat& format, int index, const OutputDelta& delta,
                        LogprobsCursor* cursor) {
  const size_t prompt = static_cast<size_t>(index / std::max(format.n, 1));
  const bool drops_first_space =
      prompt < format.drops_first_space.size() && format.drops_first_space[prompt];
  json out = {{"tokens", json::array()},
              {"token_logprobs", json::array()},
              {"top_logprobs", json::array()},
              {"text_offset", json::array()}};
  auto add = [&](const engine::GeneratedToken& t, bool scored) {
    std::string piece = format.tokenizer->TokenBytes(t.id);
    if (!cursor->text_started && !piece.empty()) {
      cursor->text_started = true;
      if (drops_first_space && piece.front() == ' ') piece.erase(0, 1);
    }
    json top = json::object();
    for (int i = 0; i < format.top_logprobs && i < static_cast<int>(t.top_logprobs.size()); ++i) {
      top[format.tokenizer->TokenBytes(t.top_logprobs[i].id)] = t.top_logprobs[i].logprob;
    }
    out["tokens"].push_back(piece);
    out["token_logprobs"].push_back(scored ? json(t.logprob) : json(nullptr));
    out["top_logprobs"].push_back(scored ? top : json(nullptr));
    out["text_offset"].push_back(cursor->text_offset);
    cursor->text_offset += static_cast<int64_t>(piece.size());
  };
  for (size_t i = 0; i < delta.echoed.size(); ++i) add(delta.echoed[i], /*scored=*/i > 0);
  for (const engine::GeneratedToken& t : delta.tokens) add(t, /*scored=*/true);
  return out;
}

json Logprobs(const ResponseFormat& format, int index, const OutputDelta& delta,
              LogprobsCursor* cursor) {
  if (!format.logprobs) return nullptr;
  return format.endpoint == Endpoint::kChatCompletions
             ? ChatLogprobs(format, delta.tokens)
             : CompletionLogprobs(format, index, delta, cursor);
}

json Chunk(const ResponseFormat& format, json choices) {
  const bool chat = format.endpoint == Endpoint::kChatCompletions;
  return {{"id", format.id},
          {"object", chat ? "chat.completion.chunk" : "text_completion"},
          {"created", format.created},
          {"model", format.model},
          {"choices", std::move(choices)}};
}

json Choice(const ResponseFormat& format, int index, json delta_or_text, json logprobs,
            json finish_reason) {
  json choice = {{"index", index}};
  if (format.endpoint == Endpoint::kChatCompletions) {
    choice["delta"] = std::move(delta_or_text);
  } else {
    choice["text"] = std::move(delta_or_text);
  }
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = std::move(finish_reason);
  return choice;
}

}  // namespace

const char* OpenAiFinishReason(engine::FinishReason reason) {
  return reason == engine::FinishReason::kLength ? "length" : "stop";
}

std::string StreamDeltaEvent(const ResponseFormat& format, int index, const OutputDelta& delta,
                             bool first, int completion_tokens, LogprobsCursor* cursor) {
  json content;
  if (format.endpoint == Endpoint::kChatCompletions) {
    content = json::object();
    if (first) content["role"] = "assistant";
    // A piece of thought alone carries no content (as other servers send it).
    if (!delta.reasoning.empty()) content["reasoning_content"] = delta.reasoning;
    if (!delta.text.empty() || delta.reasoning.empty()) content["content"] = delta.text;
  } else {
    content = delta.text;
  }
  json chunk =
      Chunk(format, json::array({Choice(format, index, std::move(content),
                                        Logprobs(format, index, delta, cursor), nullptr)}));
  if (format.continuous_usage) {
    chunk["usage"] = Usage(format.prompt_tokens, completion_tokens);
  } else if (format.include_usage) {
    chunk["usage"] = nullptr;  // as OpenAI: every chunk but the last carries a null usage
  }
  return Event(chunk);
}

namespace {

std::string FinishEvent(const ResponseFormat& format, int index, json finish_reason,
                        const engine::FinishInfo& usage) {
  json empty = format.endpoint == Endpoint::kChatCompletions ? json::object() : json("");
  json chunk = Chunk(
      format,
      json::array({Choice(format, index, std::move(empty), nullptr, std::move(finish_reason))}));
  if (format.continuous_usage) {
    chunk["usage"] = Usage(usage);
  } else if (format.include_usage) {
    chunk["usage"] = nullptr;
  }
  return Event(chunk);
}

// Choice `index`'s calls as OpenAI's tool_calls: ids call_<response>_<choice>, with _<k>
// after it for the k-th call past the first; a stream's also carry their index.
json ToolCallsJson(const ResponseFormat& format, int index,
                   const std::vector<engine::chat::ToolCall>& calls, bool streamed) {
  const std::string id =
      absl::StrCat("call_", format.id.substr(format.id.find('-') + 1), "_", index);
  json out = json::array();
  for (size_t k = 0; k < calls.size(); ++k) {
    json call;
    if (streamed) call["index"] = k;
    call["id"] = k == 0 ? id : absl::StrCat(id, "_", k);
    call["type"] = "function";
    call["function"] = {{"name", calls[k].name}, {"arguments", calls[k].arguments.dump()}};
    out.push_back(std::move(call));
  }
  return out;
}

json ContentOrNull(const std::string& content) {
  return content.empty() ? json(nullptr) : json(content);
}

}  // namespace

std::string StreamFinishEvent(const ResponseFormat& format, int index, engine::FinishReason reason,
                              const engine::FinishInfo& usage) {
  return FinishEvent(format, index, OpenAiFinishReason(reason), usage);
}

std::string StreamHeldAnswerEvents(const ResponseFormat& format, int index,
                                   const OutputDelta& unsent, bool first,
                                   engine::FinishReason reason, int completion_tokens,
                                   const engine::FinishInfo& usage, LogprobsCursor* cursor) {
  engine::chat::ParsedAnswer answer = ReadToolCalls(format.tool_calls, unsent.text);
  if (answer.calls.empty()) {
    std::string out;
    if (first || !unsent.text.empty() || !unsent.reasoning.empty() || unsent.num_tokens > 0) {
      out = StreamDeltaEvent(format, index, unsent, first, completion_tokens, cursor);
    }
    return out + StreamFinishEvent(format, index, reason, usage);
  }
  json delta = json::object();
  if (first) delta["role"] = "assistant";
  if (!unsent.reasoning.empty()) delta["reasoning_content"] = unsent.reasoning;
  delta["content"] = ContentOrNull(answer.content);
  delta["tool_calls"] = ToolCallsJson(format, index, answer.calls, /*streamed=*/true);
  json chunk =
      Chunk(format, json::array({Choice(format, index, std::move(delta), nullptr, nullptr)}));
  if (format.continuous_usage) {
    chunk["usage"] = Usage(format.prompt_tokens, completion_tokens);
  } else if (format.include_usage) {
    chunk["usage"] = nullptr;
  }
  return Event(chunk) + FinishEvent(format, index, "tool_calls", usage);
}

std::string StreamDoneEvents(const ResponseFormat& format, const engine::FinishInfo& usage) {
  std::string out;
  if (format.include_usage) {
    json chunk = Chunk(format, json::array());
    chunk["usage"] = Usage(usage);
    out += Event(chunk);
  }
  out += "data: [DONE]\n\n";
  return out;
}

std::string StreamErrorEvents(const absl::Status& status) {
  return absl::StrCat("data: ", OpenAiErrorJson(status), "\n\ndata: [DONE]\n\n");
}

std::string CompleteBody(const ResponseFormat& format, const std::vector<FinishedChoice>& choices,
                         const engine::FinishInfo& usage) {
  const bool chat = format.endpoint == Endpoint::kChatCompletions;
  json rendered = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const FinishedChoice& c = choices[i];
    LogprobsCursor cursor;
    json choice = {{"index", i}};
    const engine::chat::ParsedAnswer answer = ReadToolCalls(format.tool_calls, c.output.text);
    if (!answer.calls.empty()) {
      // A call's tokens are not scored content (OpenAI answers logprobs null).
      choice["message"] = {
          {"role", "assistant"},
          {"content", ContentOrNull(answer.content)},
          {"tool_calls", ToolCallsJson(format, static_cast<int>(i), answer.calls, false)}};
      if (!c.output.reasoning.empty()) choice["message"]["reasoning_content"] = c.output.reasoning;
      choice["logprobs"] = nullptr;
      choice["finish_reason"] = "tool_calls";
      rendered.push_back(std::move(choice));
      continue;
    }
    if (chat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.output.text}};
      if (!c.output.reasoning.empty()) choice["message"]["reasoning_content"] = c.output.reasoning;
    } else {
      choice["text"] = c.output.text;
    }
    choice["logprobs"] = Logprobs(format, static_cast<int>(i), c.output, &cursor);
    choice["finish_reason"] = OpenAiFinishReason(c.reason);
    rendered.push_back(std::move(choice));
  }
  const json body = {{"id", format.id},
                     {"object", chat ? "chat.completion" : "text_completion"},
                     {"created", format.created},
                     {"model", format.model},
                     {"choices", std::move(rendered)},
                     {"usage", Usage(usage)}};
  return Dump(body);
}

}  // namespace quill::server::http
