#pragma once

// OpenAI request bodies (POST /v1/completions, /v1/chat/completions) -> Quill's
// quill.v1.GenerateRequest, the one request form both front ends validate and submit
// through RequestGateway. This layer only checks JSON shapes and OpenAI-specific rules
// (n, types, unsupported options) and names the OpenAI field; value ranges are checked by
// request_codec like for gRPC. Unknown fields are ignored, as OpenAI clients expect.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "quill/v1/quill.pb.h"
#include "server/tool_request.h"

namespace quill::server::http {

enum class Endpoint { kCompletions, kChatCompletions };

struct OpenAiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  // Sampling, stop, max_tokens, logprobs, ignore_eos, disable_speculation, and for
  // completions the prompt.
  // Chat prompts are rendered from `messages` later.
  quill::v1::GenerateRequest generate;
  // Completions: every prompt of the request, in order (only the prompt is set; a batch
  // has several). `generate` holds the first. Choices p * n .. p * n + n - 1 answer
  // prompt p.
  std::vector<quill::v1::GenerateRequest> prompts;
  // Chat only: the message array as sent, in the client's key order (templates see every
  // field, and tojson prints them as given), except that a content given as text parts is
  // joined into one string.
  nlohmann::ordered_json messages;
  // OpenAI's n: this many choices, each its own engine request (choice i > 0 samples with
  // a seed derived from the request's, see ChoiceSeed).
  int n = 1;
  bool max_tokens_given = false;  // else the caller picks the default
  // Which field carried max_tokens ("max_tokens" or "max_completion_tokens"), for errors.
  std::string max_tokens_field = "max_tokens";
  bool stream = false;
  bool include_usage = false;     // stream_options.include_usage
  bool continuous_usage = false;  // stream_options.continuous_usage_stats (vLLM's extension)
  // Return logprobs (chat: logprobs: true; completions: logprobs: N) with `top_logprobs`
  // alternatives per token. generate.logprobs is at least 1 then (the engine returns the
  // chosen token's logprob only alongside alternatives); extra ones are dropped.
  bool logprobs = false;
  int top_logprobs = 0;
  // Completions: the answer starts with the prompt (and, with logprobs, the prompt's
  // tokens with their logprobs: generate.prompt_logprobs is set).
  bool echo = false;
  // The name of the field `generate.logprobs` came from, for errors.
  std::string logprobs_field = "logprobs";
  // Chat: more variables for the template (the request's tools as "tools", and its
  // chat_template_kwargs), else null.
  nlohmann::ordered_json template_variables;
  // Chat: the request's tools and tool_choice (server/tool_request.h). A forced call's
  // schema is also in generate.json_schema; with auto_calls the model decides, and its
  // calls are read in its chat template's syntax (OpenAiApi refuses a template with none).
  ToolRequest tools;
};

// OpenAI's bound on n, and Quill's on prompts x n. Each choice is admitted like a request
// of its own, so the queue and tenant limits bound what they cost.
inline constexpr int kMaxChoices = 128;

// OpenAI's default max_tokens for /v1/completions.
inline constexpr int kDefaultCompletionMaxTokens = 16;

// Parses and checks `body`. INVALID_ARGUMENT naming the field for malformed JSON, a body
// that is not an object, a field of the wrong type, a missing prompt/messages, n outside
// [1, kMaxChoices], more than kMaxChoices choices over all prompts, echo on chat, best_of
// other than n, a non-empty suffix, functions, tools on completions, tools or tool_choice
// that ParseTools refuses, a response_format Quill cannot keep, and top_logprobs without
// logprobs. A request without `seed` that samples gets `random_seed`.
absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(absl::string_view body, Endpoint endpoint,
                                                 uint64_t random_seed);

// POST /tokenize (vLLM's form): {"prompt": "text", "add_special_tokens": bool (default
// true, as a completion's text prompt is encoded)}. INVALID_ARGUMENT naming the field.
// splitmix64: MixSeed(c + i * kSeedStep) for i = 0, 1, ... are distinct, well-mixed
// seeds, without a shared RNG.
inline constexpr uint64_t kSeedStep = 0x9e3779b97f4a7c15ULL;
uint64_t MixSeed(uint64_t counter);

// The seed of choice `index` of a request seeded with `seed`: `seed` itself for choice 0
// (n = 1 samples as before), distinct well-mixed seeds for the others, so that a seeded
// request with n > 1 is reproducible and its choices differ.
uint64_t ChoiceSeed(uint64_t seed, int index);

absl::StatusOr<quill::v1::TokenizeRequest> ParseTokenizeRequest(absl::string_view body);

// POST /detokenize (vLLM's form): {"tokens": [ids]}. INVALID_ARGUMENT naming the field;
// the ids' range is checked by request_codec's DetokenizeIds.
absl::StatusOr<std::vector<int32_t>> ParseDetokenizeRequest(absl::string_view body);

}  // namespace quill::server::http
