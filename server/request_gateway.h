#pragma once

// The one path from a front end (gRPC or HTTP) into the engine: serving checks, request
// validation and conversion to engine::GenerationRequest (request_codec), request ids,
// submission, rejection metrics and cancellation. Both front ends call it; neither talks to
// the engine for generation in any other way.

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "engine/chat/chat_prompt.h"
#include "engine/chat/reasoning.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/request.h"
#include "engine/runtime/token_sink.h"
#include "nlohmann/json.hpp"
#include "quill/v1/quill.pb.h"
#include "server/metrics/quill_metrics.h"
#include "server/request_codec.h"
#include "server/security/tenant.h"

namespace quill::server {

// Thread-safe. Until SetEngine() (model loading) and after StartDraining() every
// generation is UNAVAILABLE.
class RequestGateway {
 public:
  // `metrics` may be null; it must outlive the gateway.
  RequestGateway(QuillMetrics* metrics, std::string model_path);

  // The engine is ready; it must outlive every front end. Called once. Chat prompts use
  // `chat_template` (the server's --chat-template) or else the model's own template; with
  // neither, chat requests are FAILED_PRECONDITION.
  void SetEngine(engine::Engine* engine,
                 std::optional<engine::chat::ChatTemplate> chat_template = std::nullopt);
  // New generations are refused with UNAVAILABLE from now on.
  void StartDraining();

  // OK while serving; UNAVAILABLE while loading or draining.
  absl::Status CheckServing() const;
  bool loading() const { return engine_.load(std::memory_order_acquire) == nullptr; }
  bool draining() const { return draining_.load(); }

  // Null until SetEngine.
  engine::Engine* engine() const { return engine_.load(std::memory_order_acquire); }
  // Valid once engine() is not null.
  const RequestLimits& limits() const { return limits_; }
  // The served model's name (GGUF general.name, else the file name); "" while loading.
  const std::string& model_name() const { return model_name_; }
  const std::string& model_path() const { return model_path_; }
  // How the chat template writes tool calls (kNone without chat); valid once engine() is
  // not null.
  engine::chat::ToolCallSyntax tool_call_syntax() const {
    return chat_prompter_.has_value() ? chat_prompter_->tool_call_syntax()
                                      : engine::chat::ToolCallSyntax::kNone;
  }
  // Whether the chat template is a reasoning model's (engine/chat/reasoning.h); valid
  // once engine() is not null.
  bool chat_thinks() const { return chat_prompter_.has_value() && chat_prompter_->thinks(); }
  // How the answer to `request` (from PrepareChat) is split into thought and content: not
  // at all without a reasoning model's template, or under JSON mode (a forced call
  // included) unless a thought may precede the object (MarkTheThought); else whether its
  // prompt opened the thought.
  engine::chat::ReasoningSplit ReasoningSplitOf(const engine::GenerationRequest& request) const;

  // CheckServing, then request_codec's validation and conversion; fills in a request id
  // when the request has none, `deadline`, the front end's label and `tenant` (the front
  // end resolved it with ResolveTenant). On error the rejection is counted and the status
  // names the offending field (INVALID_ARGUMENT) or says why the server cannot take it
  // (UNAVAILABLE).
  absl::StatusOr<engine::GenerationRequest> Prepare(const quill::v1::GenerateRequest& request,
                                                    absl::Time deadline, Api api,
                                                    const Tenant& tenant = {});

  // The Tokenize call (both front ends): CheckServing, then request_codec's TokenizeText,
  // which refuses text over max_tokenize_bytes before tokenizing it and output over
  // max_tokenize_tokens ids (INVALID_ARGUMENT naming `text_field` and the limit).
  absl::StatusOr<quill::v1::TokenizeResponse> Tokenize(const quill::v1::TokenizeRequest& request,
                                                       absl::string_view text_field = "text");
  // HTTP's POST /detokenize: CheckServing, then request_codec's DetokenizeIds.
  absl::StatusOr<std::string> Detokenize(absl::Span<const int32_t> ids);
  // Prepare for a chat: the messages are rendered by the chat template and tokenized
  // (request_codec's ToEngineChatRequest). FAILED_PRECONDITION when the server has no chat
  // template; otherwise errors as Prepare's. The rejection is counted either way.
  // `tool_calls` (not null) gets how the answer's tool calls are read.
  absl::StatusOr<engine::GenerationRequest> PrepareChat(const quill::v1::ChatRequest& request,
                                                        absl::Time deadline, Api api,
                                                        const Tenant& tenant,
                                                        ToolCallReading* tool_calls);
  // The same for an OpenAI message array and the options in `options` (HTTP), with
  // more variables for the template (an object, e.g. {"tools": [...]}, or null).
  absl::StatusOr<engine::GenerationRequest> PrepareChat(
      const nlohmann::ordered_json& messages, const quill::v1::GenerateRequest& options,
      const nlohmann::ordered_json& template_variables, absl::Time deadline, Api api,
      const Tenant& tenant = {});

  // Engine::Submit. On error (RESOURCE_EXHAUSTED queue full, UNAVAILABLE draining,
  // ALREADY_EXISTS duplicate id, INVALID_ARGUMENT) the rejection is counted, and
  // DEADLINE_EXCEEDED (the deadline cannot be met) under outcome "deadline"; `sink` is
  // never called. On OK it gets chunks and exactly one OnFinish.
  absl::Status Submit(engine::GenerationRequest request, std::shared_ptr<engine::TokenSink> sink,
                      Api api);

  // Counts a request a front end refused on its own (malformed body, bad field types);
  // per tenant too when `tenant` is known (--metrics-per-tenant).
  void RecordRejected(Api api, std::optional<absl::string_view> tenant = std::nullopt);

  // Never blocks; the request ends (kCancelled) within one engine step. No-op when the
  // engine is not running or the id is unknown.
  void Cancel(absl::string_view request_id);
  // Never blocks: a sink that reported WouldBlock drained (engine::Engine::Resume).
  void Resume(absl::string_view request_id);

 private:
  std::string NewRequestId();
  // Whether `request`'s prompt leaves the model inside a thought.
  bool PromptOpensThought(const engine::GenerationRequest& request) const;
  // A chat with a reasoning model's template whose tags are single tokens: the engine is
  // told them (GenerationRequest::thought), so that it counts the thought's tokens and, in
  // JSON mode, lets the model think first and starts the mask after the thought (as vLLM
  // does) rather than take the thought away.
  absl::StatusOr<engine::GenerationRequest> MarkTheThought(
      absl::StatusOr<engine::GenerationRequest> request) const;
  // Counts and logs a refused request; fills in id, deadline and front end otherwise.
  absl::StatusOr<engine::GenerationRequest> FinishPrepare(
      absl::StatusOr<engine::GenerationRequest> converted, absl::Time deadline, Api api,
      const Tenant& tenant);

  QuillMetrics* const metrics_;
  const std::string model_path_;
  // Written once by SetEngine before engine_ is published; read by handlers after.
  RequestLimits limits_;
  std::string model_name_;
  // Set with the engine (chat needs the model's tokenizer).
  std::optional<engine::chat::ChatPrompter> chat_prompter_;
  std::atomic<engine::Engine*> engine_{nullptr};
  std::atomic<bool> draining_{false};
  std::atomic<uint64_t> next_id_{1};
  const uint64_t id_salt_;
};

// The served model's name: GGUF general.name, else the model file's name.
std::string ServedModelName(const engine::Engine& engine, const std::string& model_path);

}  // namespace quill::server
