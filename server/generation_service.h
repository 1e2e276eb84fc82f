#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "engine/runtime/engine.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/server_callback.h"
#include "quill/v1/quill.grpc.pb.h"
#include "server/generate_reactor.h"
#include "server/request_codec.h"
#include "server/request_gateway.h"
#include "server/security/api_keys.h"

namespace quill::server {

// Generate, Chat and Tokenize are registered raw (ByteBuffer in and out) so that the
// request is parsed by ParseRequest, which answers INVALID_ARGUMENT naming a non-UTF-8
// string field where the generated parser would make gRPC answer INTERNAL.
using GeneratorServiceBase = quill::v1::Generator::WithRawCallbackMethod_Generate<
    quill::v1::Generator::WithRawCallbackMethod_Chat<
        quill::v1::Generator::WithRawCallbackMethod_Tokenize<
            quill::v1::Generator::WithCallbackMethod_GetModelInfo<quill::v1::Generator::Service>>>>;

// The quill.v1.Generator service (thin: parse, then the shared RequestGateway validates
// and submits). Handlers run on gRPC callback threads, never block, and reach the engine
// only through the gateway. While the gateway is loading or draining every call is
// UNAVAILABLE.
class GenerationService final : public GeneratorServiceBase {
 public:
  struct Info {
    std::string model_path;
    std::string precision;  // "fast" / "exact"
  };
  // `gateway` and `api_keys` must outlive the gRPC server. `api_keys` null: every call is
  // allowed; otherwise each must carry `authorization: Bearer KEY` (UNAUTHENTICATED).
  GenerationService(RequestGateway* gateway, Info info, const ApiKeys* api_keys = nullptr);

  const RequestLimits& limits() const { return gateway_->limits(); }

  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request) override;
  // Like Generate, for `messages` rendered by the chat template.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Chat(grpc::CallbackServerContext* context,
                                                   const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                         const quill::v1::GetModelInfoRequest* request,
                                         quill::v1::ModelInfo* response) override;

 private:
  // `counted`: the gateway has already counted the rejection.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* RejectGenerate(const absl::Status& status,
                                                             bool counted);

  // Starts the stream of an accepted request (a refusal carries retry pushback in
  // `context`'s trailing metadata); a chat's answer is read with `chat`.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* StartStream(grpc::CallbackServerContext* context,
                                                          engine::GenerationRequest request,
                                                          absl::Time deadline,
                                                          ChatReading chat = {});
  // The caller's tenant (ResolveTenant: the API key's, or else the x-quill-tenant
  // metadata); UNAUTHENTICATED when API keys are in force and the call has no valid one,
  // INVALID_ARGUMENT for a malformed x-quill-tenant when they are not.
  absl::StatusOr<Tenant> Authorize(const grpc::CallbackServerContext& context) const;

  RequestGateway* const gateway_;
  const Info info_;
  const ApiKeys* const api_keys_;
};

// Builds GetModelInfo's answer from the engine's model and options.
quill::v1::ModelInfo BuildModelInfo(const engine::Engine& engine, const RequestLimits& limits,
                                    const std::string& model_path, const std::string& precision);

}  // namespace quill::server
