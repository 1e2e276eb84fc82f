#include "server/request_gateway.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/strings/str_format.h"
#include "engine/base/log_field.h"
#include "engine/base/status_macros.h"
#include "engine/model/model.h"
#include "engine/model/model_config.h"
#include "spdlog/spdlog.h"

namespace quill::server {

RequestGateway::RequestGateway(QuillMetrics* metrics, std::string model_path)
    : metrics_(metrics), model_path_(std::move(model_path)), id_salt_(std::random_device()()) {}

void RequestGateway::SetEngine(engine::Engine* engine,
                               std::optional<engine::chat::ChatTemplate> chat_template) {
  const engine::ModelConfig& config = engine->model().config();
  const engine::EngineOptions& options = engine->options();
  const engine::EngineGauges gauges = engine->gauges();
  RequestLimits limits;
  limits.vocab_size = engine->model().tokenizer().vocab_size();
  limits.context_length = config.context_length;
  // A prompt has at least one token, so at most context - 1 can be generated.
  const int longest = static_cast<int>(config.context_length - 1);
  limits.max_tokens =
      options.max_tokens_limit > 0 ? std::min(options.max_tokens_limit, longest) : longest;
  limits.max_prompt_tokens = longest;
  limits.kv_capacity_tokens =
      static_cast<int64_t>(gauges.kv_blocks_total) * options.block_size_tokens;
  SetTextLimits(engine->model().tokenizer(), &limits);
  spdlog::info(
      "text limits: max_prompt_bytes={} max_tokenize_bytes={} max_tokenize_tokens={} "
      "max_generate_request_bytes={} max_tokenize_request_bytes={}",
      limits.max_prompt_bytes, limits.max_tokenize_bytes, limits.max_tokenize_tokens,
      limits.max_generate_request_bytes, limits.max_tokenize_request_bytes);
  limits_ = limits;
  model_name_ = ServedModelName(*engine, model_path_);
  const char* source = chat_template.has_value() ? "--chat-template" : "the model's";
  chat_prompter_ = engine::chat::ChatPrompter::ForModel(
      engine->model().tokenizer(), std::move(chat_template), engine->model().chat_template());
  if (chat_prompter_->available()) {
    spdlog::info("chat template: {} (tool calls: {}; thinking: {})", source,
                 engine::chat::ToolCallSyntaxName(chat_prompter_->tool_call_syntax()),
                 chat_prompter_->thinks() ? "split into reasoning_content" : "none");
  } else {
    spdlog::warn("chat unavailable: {}", chat_prompter_->unavailable_reason());
  }
  engine_.store(engine, std::memory_order_release);
}

void RequestGateway::StartDraining() { draining_.store(true); }

absl::Status RequestGateway::CheckServing() const {
  if (loading()) return absl::UnavailableError("the model is still loading; retry later");
  if (draining()) return absl::UnavailableError("the server is shutting down");
  return absl::OkStatus();
}

std::string RequestGateway::NewRequestId() {
  return absl::StrFormat("req-%08x-%d", static_cast<uint32_t>(id_salt_),
                         next_id_.fetch_add(1, std::memory_order_relaxed));
}

void RequestGateway::RecordRejected(Api api, std::optional<absl::string_view> tenant) {
  if (metrics_ != nullptr) metrics_->RecordRejected(api, tenant);
}

absl::StatusOr<engine::GenerationRequest> RequestGateway::Prepare(
    const quill::v1::GenerateRequest& request, absl::Time deadline, Api api, const Tenant& tenant) {
  absl::Status serving = CheckServing();
  if (!serving.ok()) {
    RecordRejected(api, tenant.name);
    return serving;
  }
  return FinishPrepare(ToEngineRequest(request, limits_, engine()->model().tokenizer()), deadline,
                       api, tenant);
}

absl::StatusOr<engine::GenerationRequest> RequestGateway::PrepareChat(
    const quill::v1::ChatRequest& request, absl::Time deadline, Api api, const Tenant& tenant,
    ToolCallReading* tool_calls) {
  absl::Status serving = CheckServing();
  if (!serving.ok()) {
    RecordRejected(api, tenant.name);
    return serving;
  }
  return FinishPrepare(
      MarkTheThought(ToEngineChatRequest(request, limits_, *chat_prompter_, tool_calls)), deadline,
      api, tenant);
}

absl::StatusOr<engine::GenerationRequest> RequestGateway::PrepareChat(
    const nlohmann::ordered_json& messages, const quill::v1::GenerateRequest& options,
    const nlohmann::ordered_json& template_variables, absl::Time deadline, Api api,
    const Tenant& tenant) {
  absl::Status serving = CheckServing();
  if (!serving.ok()) {
    RecordRejected(api, tenant.name);
    return serving;
  }
  return FinishPrepare(MarkTheThought(ToEngineChatRequest(messages, options, limits_,
                                                          *chat_prompter_, template_variables)),
                       deadline, api, tenant);
}

bool RequestGateway::PromptOpensThought(const engine::GenerationRequest& request) const {
  // DeepSeek R1's templates open the thought: the prompt's last tokens are "<think>" and
  // perhaps a newline.
  const absl::Span<const engine::TokenId> ids = request.prompt_ids;
  const size_t tail = std::min<size_t>(ids.size(), 16);
  return engine::chat::PromptOpensThought(
      IdsToText(ids.subspan(ids.size() - tail), engine()->model().tokenizer()));
}

absl::StatusOr<engine::GenerationRequest> RequestGateway::MarkTheThought(
    absl::StatusOr<engine::GenerationRequest> request) const {
  // thought_tags() exists only for a template that thinks.
  if (!request.ok() || !chat_prompter_->thought_tags().has_value()) return request;
  const engine::chat::ThoughtTags& tags = *chat_prompter_->thought_tags();
  request->thought = engine::ThoughtTokens{tags.open, tags.close, PromptOpensThought(*request)};
  return request;
}

engine::chat::ReasoningSplit RequestGateway::ReasoningSplitOf(
    const engine::GenerationRequest& request) const {
  engine::chat::ReasoningSplit split;
  split.split = chat_thinks() && (!request.json_object || request.thought.has_value());
  if (!split.split) return split;
  split.thought_open =
      request.thought.has_value() ? request.thought->opened : PromptOpensThought(request);
  return split;
}

absl::StatusOr<engine::GenerationRequest> RequestGateway::FinishPrepare(
    absl::StatusOr<engine::GenerationRequest> converted, absl::Time deadline, Api api,
    const Tenant& tenant) {
  if (!converted.ok()) {
    RecordRejected(api, tenant.name);
    spdlog::debug("rejected request api={} status={}", std::string(ApiName(api)),
                  LogField(converted.status().ToString()));
    return converted.status();
  }
  if (converted->request_id.empty()) converted->request_id = NewRequestId();
  converted->deadline = deadline;
  converted->frontend = std::string(ApiName(api));
  converted->tenant = tenant.name;
  converted->tenant_weight = tenant.weight;
  return converted;
}

absl::StatusOr<quill::v1::TokenizeResponse> RequestGateway::Tokenize(
    const quill::v1::TokenizeRequest& request, absl::string_view text_field) {
  QUILL_RETURN_IF_ERROR(CheckServing());
  return TokenizeText(request, limits_, engine()->model().tokenizer(), text_field);
}

absl::StatusOr<std::string> RequestGateway::Detokenize(absl::Span<const int32_t> ids) {
  QUILL_RETURN_IF_ERROR(CheckServing());
  return DetokenizeIds(ids, limits_, engine()->model().tokenizer());
}

absl::Status RequestGateway::Submit(engine::GenerationRequest request,
                                    std::shared_ptr<engine::TokenSink> sink, Api api) {
  engine::Engine* e = engine();
  const std::string tenant = request.tenant;  // for the refusal's count
  absl::Status submitted =
      e == nullptr ? CheckServing() : e->Submit(std::move(request), std::move(sink));
  if (!submitted.ok()) {
    if (submitted.code() == absl::StatusCode::kDeadlineExceeded) {
      if (metrics_ != nullptr) metrics_->RecordDeadlineRefused(api, tenant);
    } else {
      RecordRejected(api, tenant);
    }
    spdlog::debug("engine refused request api={} status={}", std::string(ApiName(api)),
                  LogField(submitted.ToString()));
  }
  return submitted;
}

void RequestGateway::Cancel(absl::string_view request_id) {
  if (engine::Engine* e = engine(); e != nullptr) e->Cancel(request_id);
}

void RequestGateway::Resume(absl::string_view request_id) {
  if (engine::Engine* e = engine(); e != nullptr) e->Resume(request_id);
}

std::string ServedModelName(const engine::Engine& engine, const std::string& model_path) {
  const std::string& name = engine.model().config().name;
  if (!name.empty()) return name;
  const size_t slash = model_path.rfind('/');
  return slash == std::string::npos ? model_path : model_path.substr(slash + 1);
}

}  // namespace quill::server
