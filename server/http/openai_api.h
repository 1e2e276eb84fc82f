#pragma once

// The OpenAI-compatible HTTP API: routes requests to
//   POST /v1/completions, POST /v1/chat/completions, GET /v1/models[/{id}], GET /health,
//   and vLLM's POST /tokenize and POST /detokenize.
// Generations go through the shared RequestGateway (validation, admission, metrics,
// cancellation) exactly like gRPC's; output reaches the client through a
// GenerationStream. Handlers run on the HTTP threads and never block.

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/http/http_exchange.h"
#include "server/http/openai_request.h"
#include "server/http/openai_response.h"
#include "server/request_gateway.h"
#include "server/security/api_keys.h"

namespace quill::server::http {

class OpenAiApi final : public HttpHandler {
 public:
  // `gateway` and `api_keys` must outlive the HTTP server. `api_keys` null: no
  // authentication; otherwise every route but /health needs `Authorization: Bearer KEY`.
  explicit OpenAiApi(RequestGateway* gateway, const ApiKeys* api_keys = nullptr);

  void Handle(const HttpRequest& request, std::shared_ptr<ResponseChannel> channel) override;
  HttpResponseHead TransportError(int status, const std::string& message,
                                  std::string* body) override;

 private:
  void Health(ResponseChannel& channel);
  void Models(const HttpRequest& request, ResponseChannel& channel);
  void Tokenize(const HttpRequest& request, ResponseChannel& channel);
  void Detokenize(const HttpRequest& request, ResponseChannel& channel);
  void Generate(const HttpRequest& request, Endpoint endpoint, const Tenant& tenant,
                std::shared_ptr<ResponseChannel> channel);
  // The engine requests of a generation, one per prompt (chat: one), before n; errors in
  // OpenAI's terms.
  absl::StatusOr<std::vector<engine::GenerationRequest>> Prepare(const OpenAiRequest& parsed,
                                                                 Endpoint endpoint,
                                                                 const Tenant& tenant);
  ResponseFormat FormatFor(const OpenAiRequest& parsed, Endpoint endpoint,
                           const std::vector<engine::GenerationRequest>& prepared) const;
  // Every choice's engine request: n per prompt, choice j > 0 under its own id and seed.
  static std::vector<engine::GenerationRequest> ChoiceRequests(
      const std::vector<engine::GenerationRequest>& prepared, int n);
  // Answers `status` as an OpenAI error; counts a refused generation when `count`.
  void Fail(const absl::Status& status, ResponseChannel& channel);
  uint64_t NextSeed();

  RequestGateway* const gateway_;
  const ApiKeys* const api_keys_;
  const int64_t created_;  // server start, Unix seconds (the model's "created")
  std::atomic<uint64_t> seed_state_;
};

}  // namespace quill::server::http
