#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "engine/runtime/engine.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/server_callback.h"
#include "quill/v1/quill.grpc.pb.h"
#include "server/request_codec.h"

namespace quill::server {

class QuillMetrics;

// Generate and Tokenize are registered raw (ByteBuffer in and out) so that the request is
// parsed by ParseRequest, which answers INVALID_ARGUMENT naming a non-UTF-8 string field
// where the generated parser would make gRPC answer INTERNAL.
using GeneratorServiceBase = quill::v1::Generator::WithRawCallbackMethod_Generate<
    quill::v1::Generator::WithRawCallbackMethod_Tokenize<
        quill::v1::Generator::WithCallbackMethod_GetModelInfo<quill::v1::Generator::Service>>>;

// The quill.v1.Generator service (thin: parse, validate, submit). Handlers run on gRPC
// callback threads, never block, and reach the engine only through Submit/Cancel.
// Until SetEngine() (model loading) and after StartDraining() every call is UNAVAILABLE.
class GenerationService final : public GeneratorServiceBase {
 public:
  struct Info {
    std::string model_path;
    std::string precision;  // "fast" / "exact"
  };
  // `metrics` may be null; it must outlive the gRPC server.
  GenerationService(QuillMetrics* metrics, Info info);

  // The engine is ready; it must outlive the gRPC server. Called once.
  void SetEngine(engine::Engine* engine);
  // New Generate calls are refused with UNAVAILABLE from now on.
  void StartDraining();

  const RequestLimits& limits() const { return limits_; }

  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                         const quill::v1::GetModelInfoRequest* request,
                                         quill::v1::ModelInfo* response) override;

 private:
  // OK, or UNAVAILABLE while loading or draining.
  absl::Status CheckServing() const;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* RejectGenerate(const absl::Status& status);
  std::string NewRequestId();

  QuillMetrics* const metrics_;
  const Info info_;
  // Written once by SetEngine before the health status turns SERVING; read by handlers.
  std::atomic<engine::Engine*> engine_{nullptr};
  RequestLimits limits_;  // set in SetEngine, before engine_ is published
  std::atomic<bool> draining_{false};
  std::atomic<uint64_t> next_id_{1};
  const uint64_t id_salt_;
};

// Builds GetModelInfo's answer from the engine's model and options.
quill::v1::ModelInfo BuildModelInfo(const engine::Engine& engine, const RequestLimits& limits,
                                    const std::string& model_path, const std::string& precision);

}  // namespace quill::server
