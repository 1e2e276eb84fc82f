#pragma once

// Quill's engine output in OpenAI's response shapes: `text_completion` /
// `chat.completion` bodies, and the `text_completion` / `chat.completion.chunk` objects of
// a stream as server-sent events (`data: {...}\n\n`, ending with `data: [DONE]\n\n`).
// Pure functions over plain data; GenerationStream decides when to call them.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/chat/reasoning.h"
#include "engine/chat/tool_calls.h"
#include "engine/runtime/request.h"
#include "engine/tokenizer/tokenizer.h"
#include "server/http/openai_request.h"

namespace quill::server::http {

// What every object of one response repeats, and how to render it.
struct ResponseFormat {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string id;       // "cmpl-..." / "chatcmpl-..."
  std::string model;    // the served model's name
  int64_t created = 0;  // Unix seconds
  int prompt_tokens = 0;  // of every prompt
  // Prompts x OpenAI's `n` engine requests answer as choices 0 .. choices-1 of one
  // response, choice i answering prompt i / n.
  int n = 1;
  int choices = 1;
  bool include_usage = false;
  bool continuous_usage = false;
  bool logprobs = false;
  int top_logprobs = 0;
  // Chat: how an answer's tool calls are read (syntax kNone: an answer is text);
  // kJsonObject for a forced call, the chat template's for tool_choice "auto". Calls go
  // out as the message's tool_calls with finish_reason "tool_calls"; a stream holds back
  // what may be a call and sends the calls whole once the answer is complete.
  ToolCallReading tool_calls;
  // Chat with a reasoning model's template (RequestGateway::ReasoningSplitOf): each
  // answer's thought goes out as the message's reasoning_content, apart from its content.
  engine::chat::ReasoningSplit reasoning;
  // Completions with echo, one per prompt (empty: no echo): a choice's answer starts with
  // its prompt's text and, with logprobs, the prompt's tokens, the first of which
  // (`first_token`) has no logprob.
  struct Echo {
    std::string text;
    engine::TokenId first_token = 0;
  };
  std::vector<Echo> echo;
  // Per prompt: its answers' text starts where the sequence's text starts (echo, or a
  // prompt of BOS alone), and the vocabulary drops the SentencePiece space it prefixes
  // when encoding: the first token's leading space is then not in the text, nor in that
  // token's logprobs entry and the offsets after it. Empty: none.
  std::vector<bool> drops_first_space;
  // Needed for logprobs (token text); must outlive the response.
  const engine::Tokenizer* tokenizer = nullptr;
};

// Output accumulated since the last event (or the whole answer, for a body).
struct OutputDelta {
  std::string text;       // content
  std::string reasoning;  // with format.reasoning.split: the thought
  // With echo and logprobs, the prompt's tokens before `tokens`; echoed[0] has no logprob.
  std::vector<engine::GeneratedToken> echoed;
  std::vector<engine::GeneratedToken> tokens;  // kept only when logprobs are asked for
  int num_tokens = 0;
};

// "stop" for stop strings, stop ids and end of generation; "length" at max_tokens.
const char* OpenAiFinishReason(engine::FinishReason reason);

// Completions' logprobs carry byte offsets into the whole answer; the stream keeps the
// running offset here.
struct LogprobsCursor {
  int64_t text_offset = 0;
  bool text_started = false;  // a token with text went before (see drops_first_space)
};

// One SSE event carrying `delta` for choice `index` (chat: a choice's first event also
// carries the role). `completion_tokens` is the running count over all choices, shown
// with continuous usage.
std::string StreamDeltaEvent(const ResponseFormat& format, int index, const OutputDelta& delta,
                             bool first, int completion_tokens, LogprobsCursor* cursor);
// The event that ends choice `index` with its finish_reason; with continuous usage it
// carries `usage` (the response's usage so far).
std::string StreamFinishEvent(const ResponseFormat& format, int index, engine::FinishReason reason,
                              const engine::FinishInfo& usage);
// The events that end choice `index` once its answer is complete, when the part of it not
// yet sent (`unsent`) may hold tool calls: with calls, a delta with any content not yet
// sent, then one with the calls, then the finish with "tool_calls" (`first`: the choice's
// first event, which carries the role); without, `unsent` as content and the finish.
std::string StreamHeldAnswerEvents(const ResponseFormat& format, int index,
                                   const OutputDelta& unsent, bool first,
                                   engine::FinishReason reason, int completion_tokens,
                                   const engine::FinishInfo& usage, LogprobsCursor* cursor);
// What ends a successful stream once every choice finished: the usage chunk when asked
// for, then [DONE].
std::string StreamDoneEvents(const ResponseFormat& format, const engine::FinishInfo& usage);
// A failure after the stream started: an error event, then [DONE].
std::string StreamErrorEvents(const absl::Status& status);

// One choice's whole answer, for a body.
struct FinishedChoice {
  OutputDelta output;
  engine::FinishReason reason = engine::FinishReason::kLength;
};

// The non-streaming body: `choices` in index order, and the response's `usage`.
std::string CompleteBody(const ResponseFormat& format, const std::vector<FinishedChoice>& choices,
                         const engine::FinishInfo& usage);

}  // namespace quill::server::http
