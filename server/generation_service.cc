#include "server/generation_service.h"

#include <chrono>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/base/log_field.h"
#include "engine/model/model.h"
#include "engine/model/model_config.h"
#include "engine/runtime/retry_pushback.h"
#include "server/generate_reactor.h"
#include "server/metrics/process_metrics.h"
#include "server/metrics/quill_metrics.h"
#include "server/status_codec.h"
#include "spdlog/spdlog.h"

namespace quill::server {
namespace {

namespace v1 = ::quill::v1;

absl::Time DeadlineOf(const grpc::CallbackServerContext& context) {
  const auto deadline = context.deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return absl::InfiniteFuture();
  const absl::Time t = absl::FromChrono(deadline);
  // gRPC reports "no deadline" as a far-future time point.
  if (t > absl::Now() + absl::Hours(24 * 365 * 50)) return absl::InfiniteFuture();
  return t;
}

std::string FileName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

GenerationService::GenerationService(RequestGateway* gateway, Info info,
                                     const ApiKeys* api_keys)
    : gateway_(gateway), info_(std::move(info)), api_keys_(api_keys) {}

absl::StatusOr<Tenant> GenerationService::Authorize(
    const grpc::CallbackServerContext& context) const {
  // gRPC lower-cases metadata keys; a repeated header counts by its first value.
  const auto& metadata = context.client_metadata();
  const auto lookup = [&metadata](absl::string_view key) -> std::optional<absl::string_view> {
    const auto found = metadata.find(grpc::string_ref(key.data(), key.size()));
    if (found == metadata.end()) return std::nullopt;
    return absl::string_view(found->second.data(), found->second.size());
  };
  return ResolveTenant(api_keys_, lookup("authorization").value_or(""), lookup(kTenantHeader));
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerationService::RejectGenerate(
    const absl::Status& status, bool counted) {
  if (!counted) gateway_->RecordRejected(Api::kGrpc);
  spdlog::debug("rejected generate: status={}", LogField(status.ToString()));
  // Never submitted, so the reactor never reaches the engine.
  auto* reactor =
      new GenerateReactor(/*engine=*/nullptr, "", /*with_logprobs=*/false, absl::InfiniteFuture());
  reactor->Reject(status);
  return reactor;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerationService::Generate(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* raw) {
  absl::StatusOr<Tenant> tenant = Authorize(*context);
  if (!tenant.ok()) return RejectGenerate(tenant.status(), false);
  if (absl::Status s = gateway_->CheckServing(); !s.ok()) return RejectGenerate(s, false);
  v1::GenerateRequest request;
  // Size first: an oversized request is refused before it is copied or parsed.
  absl::Status parsed = CheckRequestBytes(static_cast<int64_t>(raw->Length()),
                                          gateway_->limits().max_generate_request_bytes);
  if (parsed.ok()) parsed = ParseRequest(*raw, &request);
  if (!parsed.ok()) return RejectGenerate(parsed, false);
  const absl::Time deadline = DeadlineOf(*context);
  absl::StatusOr<engine::GenerationRequest> converted =
      gateway_->Prepare(request, deadline, Api::kGrpc, *tenant);
  if (!converted.ok()) return RejectGenerate(converted.status(), /*counted=*/true);

  return StartStream(context, *std::move(converted), deadline);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerationService::Chat(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* raw) {
  absl::StatusOr<Tenant> tenant = Authorize(*context);
  if (!tenant.ok()) return RejectGenerate(tenant.status(), false);
  if (absl::Status s = gateway_->CheckServing(); !s.ok()) return RejectGenerate(s, false);
  v1::ChatRequest request;
  if (absl::Status s = ParseRequest(*raw, &request); !s.ok()) return RejectGenerate(s, false);
  const absl::Time deadline = DeadlineOf(*context);
  ChatReading reading;
  absl::StatusOr<engine::GenerationRequest> converted =
      gateway_->PrepareChat(request, deadline, Api::kGrpc, *tenant, &reading.tools);
  if (!converted.ok()) return RejectGenerate(converted.status(), /*counted=*/true);
  if (!request.reasoning_in_text()) reading.reasoning = gateway_->ReasoningSplitOf(*converted);
  return StartStream(context, *std::move(converted), deadline, std::move(reading));
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerationService::StartStream(
    grpc::CallbackServerContext* context, engine::GenerationRequest request, absl::Time deadline,
    ChatReading chat) {
  auto* reactor = new GenerateReactor(gateway_->engine(), request.request_id, request.logprobs > 0,
                                      deadline, std::move(chat));
  // The engine may start streaming before Submit returns; gRPC holds a reactor's
  // operations until the method returns it.
  const absl::Status submitted =
      gateway_->Submit(std::move(request), reactor->channel(), Api::kGrpc);
  if (!submitted.ok()) {
    // gRPC's retry policy honours this trailer; clients can also read it themselves.
    if (std::optional<absl::Duration> pushback = engine::RetryPushbackOf(submitted)) {
      context->AddTrailingMetadata("grpc-retry-pushback-ms",
                                   absl::StrCat(absl::ToInt64Milliseconds(*pushback)));
    }
    reactor->Reject(submitted);
    return reactor;
  }
  reactor->MarkSubmitted();
  return reactor;
}

grpc::ServerUnaryReactor* GenerationService::Tokenize(grpc::CallbackServerContext* context,
                                                      const grpc::ByteBuffer* raw,
                                                      grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // Only the key matters here (no tenant is needed, so x-quill-tenant is not checked).
  absl::Status status = api_keys_ == nullptr ? absl::OkStatus() : Authorize(*context).status();
  if (status.ok()) status = gateway_->CheckServing();
  v1::TokenizeRequest request;
  // Size first: an oversized request is refused before it is copied or parsed.
  if (status.ok()) {
    status = CheckRequestBytes(static_cast<int64_t>(raw->Length()),
                               gateway_->limits().max_tokenize_request_bytes);
  }
  if (status.ok()) status = ParseRequest(*raw, &request);
  if (!status.ok()) {
    reactor->Finish(ToGrpcStatus(status));
    return reactor;
  }
  absl::StatusOr<v1::TokenizeResponse> out = gateway_->Tokenize(request);
  if (!out.ok()) {
    reactor->Finish(ToGrpcStatus(out.status()));
    return reactor;
  }
  *response = SerializeResponse(*out);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* GenerationService::GetModelInfo(
    grpc::CallbackServerContext* context, const v1::GetModelInfoRequest* /*request*/,
    v1::ModelInfo* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // Only the key matters here (no tenant is needed, so x-quill-tenant is not checked).
  absl::Status status = api_keys_ == nullptr ? absl::OkStatus() : Authorize(*context).status();
  if (status.ok()) status = gateway_->CheckServing();
  if (!status.ok()) {
    reactor->Finish(ToGrpcStatus(status));
    return reactor;
  }
  *response =
      BuildModelInfo(*gateway_->engine(), gateway_->limits(), info_.model_path, info_.precision);
  response->set_tool_call_syntax(engine::chat::ToolCallSyntaxName(gateway_->tool_call_syntax()));
  response->set_chat_thinks(gateway_->chat_thinks());
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

v1::ModelInfo BuildModelInfo(const engine::Engine& engine, const RequestLimits& limits,
                             const std::string& model_path, const std::string& precision) {
  const engine::Model& model = engine.model();
  const engine::ModelConfig& config = model.config();
  const engine::Tokenizer& tokenizer = model.tokenizer();
  // K and V as the cache stores them: f32 in exact mode, f16 in fast mode.
  const engine::ModelAccounting accounting =
      engine::ComputeAccounting(config, config.context_length, model.kv_element());
  const engine::EngineOptions& options = engine.options();
  const engine::EngineGauges gauges = engine.gauges();

  v1::ModelInfo info;
  info.set_name(ToValidUtf8(ServedModelName(engine, model_path)));
  info.set_architecture(ToValidUtf8(config.architecture));
  info.set_path(ToValidUtf8(FileName(model_path)));  // not the server's directory layout
  info.set_weight_type(model.weight_type_name());
  info.set_precision(precision);
  info.set_vocab_size(tokenizer.vocab_size());
  info.set_context_length(config.context_length);
  info.set_embedding_length(config.embedding_length);
  info.set_block_count(config.block_count);
  info.set_head_count(config.head_count);
  info.set_head_count_kv(config.head_count_kv);
  info.set_feed_forward_length(config.feed_forward_length);
  info.set_parameter_count(accounting.total_params);
  info.set_non_embedding_parameter_count(accounting.non_embedding_params);
  info.set_kv_bytes_per_token(accounting.kv_bytes_per_token);
  info.set_kv_cache_type(engine::kernels::KvElementName(model.kv_element()));
  info.set_weights_bytes(model.weight_bytes());
  info.set_mapped_weights_bytes(model.mapped_weight_bytes());
  if (absl::StatusOr<int64_t> rss = ReadResidentMemoryBytes(); rss.ok()) {
    info.set_resident_memory_bytes(*rss);
  }
  info.set_bos_token_id(tokenizer.bos_id());
  info.set_eos_token_id(tokenizer.eos_id());
  v1::ServerLimits* l = info.mutable_limits();
  l->set_max_tokens(limits.max_tokens);
  l->set_max_prompt_tokens(limits.max_prompt_tokens);
  l->set_max_batch_tokens(options.max_batch_tokens);
  l->set_prefill_chunk_tokens(options.prefill_chunk_tokens);
  l->set_max_running(options.max_running);
  l->set_max_queue(options.max_queue);
  l->set_kv_cache_bytes(gauges.kv_bytes_total);
  l->set_kv_cache_blocks(gauges.kv_blocks_total);
  l->set_kv_block_size_tokens(options.block_size_tokens);
  return info;
}

}  // namespace quill::server
