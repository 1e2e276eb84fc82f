#pragma once

// Quill's engine output in OpenAI's response shapes: `text_completion` /
// `chat.completion` bodies, and the `text_completion` / `chat.completion.chunk` objects of
// a stream as server-sent events (`data: {...}\n\n`, ending with `data: [DONE]\n\n`).
// Pure functions over plain data; GenerationStream decides when to call them.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
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
  int prompt_tokens = 0;
  bool include_usage = false;
  bool continuous_usage = false;
  bool logprobs = false;
  int top_logprobs = 0;
  // Needed for logprobs (token text); must outlive the response.
  const engine::Tokenizer* tokenizer = nullptr;
};

// Output accumulated since the last event (or the whole answer, for a body).
struct OutputDelta {
  std::string text;
  std::vector<engine::GeneratedToken> tokens;  // kept only when logprobs are asked for
  int num_tokens = 0;
};

// "stop" for stop strings, stop ids and end of generation; "length" at max_tokens.
const char* OpenAiFinishReason(engine::FinishReason reason);

// Completions' logprobs carry byte offsets into the whole answer; the stream keeps the
// running offset here.
struct LogprobsCursor {
  int64_t text_offset = 0;
};

// One SSE event carrying `delta` (chat: the first event also carries the role).
// `completion_tokens` is the running count, shown with continuous usage.
std::string StreamDeltaEvent(const ResponseFormat& format, const OutputDelta& delta, bool first,
                             int completion_tokens, LogprobsCursor* cursor);
// The events that end a successful stream: the choice with finish_reason, then the usage
// chunk when asked for, then [DONE].
std::string StreamEndEvents(const ResponseFormat& format, const engine::FinishInfo& info);
// A failure after the stream started: an error event, then [DONE].
std::string StreamErrorEvents(const absl::Status& status);

// The non-streaming body.
std::string CompleteBody(const ResponseFormat& format, const OutputDelta& all,
                         const engine::FinishInfo& info);

}  // namespace quill::server::http
