#include "client/quill_client.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/status.h"
#include "grpcpp/support/sync_stream.h"

namespace quill::client {
namespace {

absl::StatusOr<std::string> ReadPem(const char* what, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

absl::string_view HealthStatusName(HealthStatus status) {
  switch (status) {
    case HealthStatus::kUnknown:
      return "UNKNOWN";
    case HealthStatus::kServing:
      return "SERVING";
    case HealthStatus::kNotServing:
      return "NOT_SERVING";
    case HealthStatus::kServiceUnknown:
      return "SERVICE_UNKNOWN";
  }
  return "UNKNOWN";
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  // grpc::StatusCode and absl::StatusCode use the canonical code numbers 0..16.
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

absl::string_view FinishReasonName(quill::v1::FinishReason reason) {
  switch (reason) {
    case quill::v1::LENGTH:
      return "LENGTH";
    case quill::v1::STOP:
      return "STOP";
    case quill::v1::EOS:
      return "EOS";
    case quill::v1::TOOL_CALLS:
      return "TOOL_CALLS";
    default:
      return "UNSPECIFIED";
  }
}

void GenerateCall::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  // TryCancel is thread-safe and only marks the call; the blocked Read() then returns false.
  if (context_ != nullptr) context_->TryCancel();
}

bool GenerateCall::cancelled() const {
  absl::MutexLock lock(&mu_);
  return cancelled_;
}

bool GenerateCall::Attach(grpc::ClientContext* context) {
  absl::MutexLock lock(&mu_);
  if (cancelled_) return false;
  context_ = context;
  return true;
}

void GenerateCall::Detach() {
  // Under the lock so that a concurrent Cancel() never touches a destroyed context.
  absl::MutexLock lock(&mu_);
  context_ = nullptr;
}

std::unique_ptr<QuillClient> QuillClient::Connect(absl::string_view address) {
  return std::make_unique<QuillClient>(
      grpc::CreateChannel(std::string(address), grpc::InsecureChannelCredentials()));
}

absl::StatusOr<std::unique_ptr<QuillClient>> QuillClient::Connect(absl::string_view address,
                                                                  const ConnectOptions& options) {
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key must be given together");
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (!options.tls_ca_file.empty() || !options.tls_cert_file.empty()) {
    grpc::SslCredentialsOptions ssl;
    if (!options.tls_ca_file.empty()) {
      absl::StatusOr<std::string> ca = ReadPem("--tls-ca", options.tls_ca_file);
      if (!ca.ok()) return ca.status();
      ssl.pem_root_certs = *std::move(ca);  // empty: the system's roots
    }
    if (!options.tls_cert_file.empty()) {
      absl::StatusOr<std::string> cert = ReadPem("--tls-cert", options.tls_cert_file);
      if (!cert.ok()) return cert.status();
      absl::StatusOr<std::string> key = ReadPem("--tls-key", options.tls_key_file);
      if (!key.ok()) return key.status();
      ssl.pem_cert_chain = *std::move(cert);
      ssl.pem_private_key = *std::move(key);
    }
    credentials = grpc::SslCredentials(ssl);
  }
  return std::make_unique<QuillClient>(grpc::CreateChannel(std::string(address), credentials),
                                       options.api_key);
}

QuillClient::QuillClient(std::shared_ptr<grpc::Channel> channel, std::string api_key)
    : channel_(std::move(channel)),
      api_key_(std::move(api_key)),
      generator_(quill::v1::Generator::NewStub(channel_)),
      health_(grpc::health::v1::Health::NewStub(channel_)) {}

void QuillClient::PrepareContext(grpc::ClientContext* context, absl::Duration timeout,
                                 const ClientContextHook& hook) const {
  if (timeout != absl::InfiniteDuration()) {
    context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  }
  // Plain metadata rather than call credentials, which gRPC sends only over TLS: a
  // plaintext hop on loopback (or behind a TLS-terminating proxy) needs the key too.
  if (!api_key_.empty()) context->AddMetadata("authorization", "Bearer " + api_key_);
  if (hook) hook(context);
}

absl::Status QuillClient::WaitForConnected(absl::Duration timeout) {
  if (channel_->WaitForConnected(absl::ToChronoTime(absl::Now() + timeout))) {
    return absl::OkStatus();
  }
  return absl::DeadlineExceededError(
      absl::StrCat("channel not ready after ", absl::FormatDuration(timeout)));
}

absl::Status QuillClient::Generate(
    const quill::v1::GenerateRequest& request,
    const std::function<void(const quill::v1::GenerateResponse&)>& on_message,
    absl::Duration timeout, const ClientContextHook& hook, GenerateCall* call) {
  return Stream(
      [&](grpc::ClientContext* context) { return generator_->Generate(context, request); },
      on_message, timeout, hook, call);
}

absl::Status QuillClient::Chat(
    const quill::v1::ChatRequest& request,
    const std::function<void(const quill::v1::GenerateResponse&)>& on_message,
    absl::Duration timeout, const ClientContextHook& hook, GenerateCall* call) {
  return Stream([&](grpc::ClientContext* context) { return generator_->Chat(context, request); },
                on_message, timeout, hook, call);
}

absl::Status QuillClient::Stream(
    const std::function<std::unique_ptr<grpc::ClientReader<quill::v1::GenerateResponse>>(
        grpc::ClientContext*)>& start,
    const std::function<void(const quill::v1::GenerateResponse&)>& on_message,
    absl::Duration timeout, const ClientContextHook& hook, GenerateCall* call) {
  grpc::ClientContext context;
  PrepareContext(&context, timeout, hook);
  if (call != nullptr && !call->Attach(&context)) {
    return absl::CancelledError("cancelled before the call started");
  }
  std::unique_ptr<grpc::ClientReader<quill::v1::GenerateResponse>> reader = start(&context);
  quill::v1::GenerateResponse response;
  while (reader->Read(&response)) {
    if (on_message) on_message(response);
  }
  grpc::Status status = reader->Finish();
  if (call != nullptr) call->Detach();
  return FromGrpcStatus(status);
}

namespace {

// Appends one streamed message to `result`.
void Collect(const quill::v1::GenerateResponse& response, GenerateResult* result) {
  if (result->request_id.empty()) result->request_id = response.request_id();
  result->text += response.text();
  result->reasoning += response.reasoning();
  result->token_ids.insert(result->token_ids.end(), response.token_ids().begin(),
                           response.token_ids().end());
  ++result->num_messages;
  result->last = response;
}

}  // namespace

absl::StatusOr<GenerateResult> QuillClient::GenerateText(const quill::v1::GenerateRequest& request,
                                                         absl::Duration timeout,
                                                         const ClientContextHook& hook) {
  GenerateResult result;
  absl::Status status = Generate(
      request, [&result](const quill::v1::GenerateResponse& r) { Collect(r, &result); }, timeout,
      hook);
  if (!status.ok()) return status;
  return result;
}

absl::StatusOr<GenerateResult> QuillClient::ChatText(const quill::v1::ChatRequest& request,
                                                     absl::Duration timeout,
                                                     const ClientContextHook& hook) {
  GenerateResult result;
  absl::Status status = Chat(
      request, [&result](const quill::v1::GenerateResponse& r) { Collect(r, &result); }, timeout,
      hook);
  if (!status.ok()) return status;
  return result;
}

absl::StatusOr<quill::v1::TokenizeResponse> QuillClient::Tokenize(
    const quill::v1::TokenizeRequest& request, absl::Duration timeout,
    const ClientContextHook& hook) {
  grpc::ClientContext context;
  PrepareContext(&context, timeout, hook);
  quill::v1::TokenizeResponse response;
  grpc::Status status = generator_->Tokenize(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::StatusOr<quill::v1::TokenizeResponse> QuillClient::Tokenize(absl::string_view text,
                                                                  bool add_special_tokens,
                                                                  absl::Duration timeout) {
  quill::v1::TokenizeRequest request;
  request.set_text(std::string(text));
  request.set_add_special_tokens(add_special_tokens);
  return Tokenize(request, timeout);
}

absl::StatusOr<quill::v1::ModelInfo> QuillClient::GetModelInfo(absl::Duration timeout,
                                                               const ClientContextHook& hook) {
  grpc::ClientContext context;
  PrepareContext(&context, timeout, hook);
  quill::v1::ModelInfo info;
  grpc::Status status = generator_->GetModelInfo(&context, quill::v1::GetModelInfoRequest(), &info);
  if (!status.ok()) return FromGrpcStatus(status);
  return info;
}

absl::StatusOr<HealthStatus> QuillClient::Health(absl::string_view service, absl::Duration timeout,
                                                 const ClientContextHook& hook) {
  grpc::ClientContext context;
  PrepareContext(&context, timeout, hook);
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(std::string(service));
  grpc::health::v1::HealthCheckResponse response;
  grpc::Status status = health_->Check(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  switch (response.status()) {
    case grpc::health::v1::HealthCheckResponse::SERVING:
      return HealthStatus::kServing;
    case grpc::health::v1::HealthCheckResponse::NOT_SERVING:
      return HealthStatus::kNotServing;
    case grpc::health::v1::HealthCheckResponse::SERVICE_UNKNOWN:
      return HealthStatus::kServiceUnknown;
    default:
      return HealthStatus::kUnknown;
  }
}

}  // namespace quill::client
