#pragma once

// Proto <-> engine structs, and the validation every request passes before anything
// reaches the engine. Pure functions (no gRPC calls, no engine calls): unit-testable with
// a fake tokenizer.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/chat/chat_prompt.h"
#include "engine/runtime/request.h"
#include "engine/tokenizer/tokenizer.h"
#include "google/protobuf/message.h"
#include "grpcpp/support/byte_buffer.h"
#include "nlohmann/json.hpp"
#include "quill/v1/quill.pb.h"
#include "server/tool_request.h"

namespace quill::server {

// What a request may ask for; filled from the model and the engine options at startup.
struct RequestLimits {
  int64_t vocab_size = 0;
  int64_t context_length = 0;
  int max_tokens = 0;         // largest max_tokens accepted (<= context_length - 1)
  int max_prompt_tokens = 0;  // longest prompt accepted (context_length - 1)
  // Tokens the whole KV pool holds; prompt + max_tokens beyond it could never be admitted.
  // 0 = unknown (not checked).
  int64_t kv_capacity_tokens = 0;
  int max_stop_strings = 16;
  int max_stop_bytes = 256;  // per stop string
  int max_stop_token_ids = 16;
  int max_logit_bias = 300;  // entries of sampling.logit_bias
  int max_logprobs = 20;
  int max_request_id_bytes = 128;
  // Text longer than this many bytes cannot fit max_prompt_tokens tokens (see
  // MaxBytesPerToken) and is refused before it is tokenized. 0 = not checked.
  int64_t max_prompt_bytes = 0;
  // Tokenize: the longest text accepted (bytes) and the most ids returned; 0 = not checked.
  int64_t max_tokenize_bytes = 0;
  int64_t max_tokenize_tokens = 0;
  // The largest serialized GenerateRequest / TokenizeRequest any valid request can be,
  // given the limits above: a bigger one is refused before it is parsed. 0 = not checked.
  int64_t max_generate_request_bytes = 0;
  int64_t max_tokenize_request_bytes = 0;
  // Chat: messages per request, and bytes of all their roles and contents together (each
  // byte is rendered and tokenized, so this bounds the work before the prompt length is
  // known).
  int max_chat_messages = 1024;
  int64_t max_chat_content_bytes = 1 << 20;
};

// An upper bound on the bytes of text one token of `tokenizer` can stand for, so that text
// of more than n * MaxBytesPerToken bytes always encodes to more than n tokens. A token
// covers its TokenBytes, except that a SentencePiece piece writes each space as "\u2581"
// (3 bytes), which a client may also send literally; an unknown-character token covers one
// character (at most 4 bytes). Hence max(4, 3 * the longest TokenBytes).
int64_t MaxBytesPerToken(const engine::Tokenizer& tokenizer);

// Fills the byte and Tokenize caps of `limits` from its token limits and `tokenizer`.
void SetTextLimits(const engine::Tokenizer& tokenizer, RequestLimits* limits);

// INVALID_ARGUMENT ("request is N bytes; ...") if a serialized request of `bytes` is over
// `limit` (0 = no limit): no valid request is that large, so it is refused unparsed.
absl::Status CheckRequestBytes(int64_t bytes, int64_t limit);

// Offset of the first byte that is not part of well-formed UTF-8 (overlong forms,
// surrogates and code points above U+10FFFF are ill-formed), or -1 if `text` is valid.
int64_t FirstInvalidUtf8(absl::string_view text);

// `bytes` with each ill-formed byte replaced by U+FFFD (proto3 strings must be UTF-8).
std::string ToValidUtf8(absl::string_view bytes);

// Parses a serialized request into `message`. Protobuf refuses proto3 strings that are not
// UTF-8; this turns that into INVALID_ARGUMENT naming the field ("prompt is not valid
// UTF-8 at byte 3", "stop[1] ...") instead of the INTERNAL gRPC would send. Any other
// malformed input is INVALID_ARGUMENT too.
absl::Status ParseRequest(const grpc::ByteBuffer& buffer, google::protobuf::Message* message);

// Serializes `message` for a raw (ByteBuffer) method.
grpc::ByteBuffer SerializeResponse(const google::protobuf::Message& message);

// Checks every field that does not need the tokenizer. INVALID_ARGUMENT naming the field:
// request_id too long or not printable ASCII, no prompt, a text prompt of more than
// max_prompt_bytes bytes (checked before anything else reads it), ids outside the
// vocabulary, max_tokens 0 or above the limit, NaN/Inf/out-of-range sampling values,
// logprobs outside [0, max_logprobs],
// stop strings that are too many, too long, empty or not UTF-8, stop_token_ids outside
// the vocabulary. Nothing is clamped.
absl::Status ValidateGenerateRequest(const quill::v1::GenerateRequest& request,
                                     const RequestLimits& limits);

// Validates `request`, tokenizes a text prompt (with BOS when the vocabulary adds one)
// and builds the engine request. Also INVALID_ARGUMENT when the prompt is longer than
// max_prompt_tokens or prompt + max_tokens does not fit the context. request_id and
// deadline are copied/left for the caller to set.
absl::StatusOr<engine::GenerationRequest> ToEngineRequest(const quill::v1::GenerateRequest& request,
                                                          const RequestLimits& limits,
                                                          const engine::Tokenizer& tokenizer);

// Checks a Chat request before anything is rendered: request_id and the option fields as
// ValidateGenerateRequest checks them (except that max_tokens 0 is allowed: the default),
// and messages: not empty, at most max_chat_messages, every role non-empty, roles and
// contents valid UTF-8 and at most max_chat_content_bytes together. INVALID_ARGUMENT
// naming the field ("messages[2].role is empty").
absl::Status ValidateChatRequest(const quill::v1::ChatRequest& request,
                                 const RequestLimits& limits);

// The Chat request's tools and tool_choice (in OpenAI's shapes, through ParseTools):
// INVALID_ARGUMENT naming the field for what ParseTools refuses, parameters_json that is
// not JSON, or a forced call beside json_object, json_schema or ignore_eos.
absl::StatusOr<ToolRequest> ChatTools(const quill::v1::ChatRequest& request);

// Validates `request`, renders and tokenizes its messages through `prompter` and builds the
// engine request (the JSON overload below, after ValidateChatRequest): earlier calls'
// arguments reach the template as objects, the tools as its `tools` variable, and a forced
// call's schema becomes the request's json_schema. INVALID_ARGUMENT also for tool_choice
// "auto" (or unset) with tools when `prompter`'s template writes no calls Quill reads.
// `tool_calls`, when not null, gets how the answer's calls are to be read.
absl::StatusOr<engine::GenerationRequest> ToEngineChatRequest(
    const quill::v1::ChatRequest& request, const RequestLimits& limits,
    const engine::chat::ChatPrompter& prompter, ToolCallReading* tool_calls = nullptr);

// The shape every chat front end shares: `messages` a non-empty array of at most
// max_chat_messages objects, each with a non-empty string "role"; string roles and contents
// at most max_chat_content_bytes together. Other fields (and a non-string content) are the
// template's business. INVALID_ARGUMENT naming the field.
absl::Status ValidateChatMessages(const nlohmann::ordered_json& messages,
                                  const RequestLimits& limits);

// A chat turn from `messages` as the client sent them (an OpenAI message array, kept in
// order: templates see every field, and tojson prints them as given) and the generation
// options in `options` (a GenerateRequest without input). max_tokens 0 becomes what the
// context (and KV pool) has left after the prompt, up to limits.max_tokens.
// FAILED_PRECONDITION when the server has no chat template; INVALID_ARGUMENT for what
// ValidateChatMessages or the option checks refuse, a template that refuses the
// conversation ("messages: ..."), a prompt longer than max_prompt_tokens, or one that leaves
// no room for max_tokens.
// `template_variables` (an object or null) become more variables of the template, e.g.
// the OpenAI request's tools.
absl::StatusOr<engine::GenerationRequest> ToEngineChatRequest(
    const nlohmann::ordered_json& messages, const quill::v1::GenerateRequest& options,
    const RequestLimits& limits, const engine::chat::ChatPrompter& prompter,
    const nlohmann::ordered_json& template_variables = nullptr);

// The generation options of a Chat request as a GenerateRequest without input (the two
// messages share the option fields' names and numbers).
quill::v1::GenerateRequest ChatOptions(const quill::v1::ChatRequest& request);

// The Tokenize RPC: INVALID_ARGUMENT naming `field` (the text's field as the caller's
// request calls it: gRPC's "text", HTTP's "prompt") for text of more than
// max_tokenize_bytes bytes (refused before tokenizing), text that is not UTF-8, or text that
// encodes to more than max_tokenize_tokens ids; else the ids, their pieces and the decoded
// text.
absl::StatusOr<quill::v1::TokenizeResponse> TokenizeText(const quill::v1::TokenizeRequest& request,
                                                         const RequestLimits& limits,
                                                         const engine::Tokenizer& tokenizer,
                                                         absl::string_view field = "text");

// Token ids -> the text that encodes to them (the inverse of Tokenize): valid UTF-8, without
// the space a SentencePiece vocabulary prefixes. The ids must be in the vocabulary.
std::string IdsToText(absl::Span<const int32_t> ids, const engine::Tokenizer& tokenizer);

// Token ids -> their text, checked, then IdsToText (HTTP POST /detokenize).
// INVALID_ARGUMENT naming `field` for an id outside the vocabulary or more than
// max_tokenize_tokens ids (the context length).
absl::StatusOr<std::string> DetokenizeIds(absl::Span<const int32_t> ids,
                                          const RequestLimits& limits,
                                          const engine::Tokenizer& tokenizer,
                                          absl::string_view field = "tokens");

// Proto sampling message -> engine sampling params (unset message = greedy; top_p 0 and
// repetition_penalty 0 mean 1). Assumes ValidateGenerateRequest passed.
engine::SamplingParams ToEngineSampling(const quill::v1::GenerateRequest& request);

quill::v1::FinishReason ToProtoFinishReason(engine::FinishReason reason);

// Appends one engine chunk (ids, text, and logprobs when `with_logprobs`) to `response`.
void AppendChunk(const engine::TokenChunk& chunk, bool with_logprobs,
                 quill::v1::GenerateResponse* response);

// Sets the fields of the last message: finish_reason, usage, timings.
void SetFinalFields(const engine::FinishInfo& info, quill::v1::GenerateResponse* response);

// When `answer` (the whole answer's text) reads as calls in `reading`: they become the last
// message's tool_calls (ids call_<request_id>, then _<k> for the k-th past the first) and
// its finish_reason TOOL_CALLS. Otherwise nothing changes.
void SetToolCalls(const ToolCallReading& reading, absl::string_view answer,
                  absl::string_view request_id, quill::v1::GenerateResponse* last);

}  // namespace quill::server
