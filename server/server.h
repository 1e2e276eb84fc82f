#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "engine/chat/chat_template.h"
#include "engine/runtime/engine.h"
#include "server/server_options.h"

namespace grpc {
class Server;
}
namespace prometheus {
class Exposer;
}

namespace quill::server {

class ApiKeys;
class GenerationService;
class QuillMetrics;
class RequestGateway;
namespace http {
class HttpServer;
class OpenAiApi;
}  // namespace http

// quill-server in one object: the metrics endpoint, the gRPC server (Generator, the
// standard grpc.health.v1.Health service and server reflection), the model and the engine.
class Server {
 public:
  // Serves /metrics, starts gRPC with health NOT_SERVING, loads the model, starts the
  // engine, then turns health SERVING. Blocks until all of that is done. Errors: the
  // model loader's (NOT_FOUND, INVALID_ARGUMENT, DATA_LOSS) with the path, the engine's,
  // UNAVAILABLE when a port cannot be bound, or, before anything starts, NOT_FOUND /
  // INVALID_ARGUMENT (with the line) for a chat_template_path that cannot be read or parsed.
  static absl::StatusOr<std::unique_ptr<Server>> Create(const ServerOptions& options);
  ~Server();  // Shutdown() with the configured drain timeout, if not done yet.

  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  int port() const { return port_; }                  // the bound gRPC port
  int metrics_port() const { return metrics_port_; }  // -1 without a metrics endpoint
  int http_port() const { return http_port_; }        // -1 without the HTTP API
  std::string address() const;                        // "host:port" for clients
  const ServerOptions& options() const { return options_; }

  // Graceful shutdown: health NOT_SERVING (gRPC and HTTP /health 503), new generations
  // UNAVAILABLE, running streams get up to `drain_timeout` to finish (the rest end
  // UNAVAILABLE), then HTTP and gRPC are shut down (waiting at most
  // options().grpc_shutdown_grace for the last writes).
  // Blocking, thread-safe, idempotent; never call it from a gRPC reaction.
  void Shutdown(absl::Duration drain_timeout) ABSL_LOCKS_EXCLUDED(shutdown_mu_);
  void Shutdown() { Shutdown(options_.drain_timeout); }
  // Blocks until a Shutdown() has finished.
  void Wait() { shut_down_.WaitForNotification(); }

  // Re-reads --api-keys-file (quill-server does on SIGHUP). OK without API keys. On error
  // the keys in force stay.
  absl::Status ReloadApiKeys();
  bool reflection_enabled() const { return reflection_; }

  engine::Engine& engine() { return *engine_; }
  QuillMetrics& metrics() { return *metrics_; }

 private:
  explicit Server(const ServerOptions& options);
  absl::Status Start();
  absl::Status LoadChatTemplate();
  absl::Status StartMetrics();
  absl::Status StartGrpc();
  absl::Status StartHttp();
  absl::Status LoadModelAndEngine();
  void SetHealth(bool serving);

  const ServerOptions options_;
  int port_ = 0;
  int metrics_port_ = -1;
  int http_port_ = -1;
  // --chat-template, parsed at startup; handed to the gateway with the engine.
  std::optional<engine::chat::ChatTemplate> chat_template_;
  bool reflection_ = false;
  std::optional<TlsPem> tls_pem_;  // read once at Start; empty = plaintext

  // Declaration order is destruction order reversed: the exposer (which reads the
  // metrics), the HTTP and gRPC servers (whose connections and reactors use the gateway
  // and the engine) go first.
  std::unique_ptr<QuillMetrics> metrics_;
  std::unique_ptr<ApiKeys> api_keys_;
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<RequestGateway> gateway_;
  std::unique_ptr<GenerationService> service_;
  std::unique_ptr<grpc::Server> grpc_server_;
  std::unique_ptr<http::OpenAiApi> http_api_;
  std::unique_ptr<http::HttpServer> http_server_;
  std::unique_ptr<prometheus::Exposer> exposer_;

  absl::Mutex shutdown_mu_;
  bool shutdown_started_ ABSL_GUARDED_BY(shutdown_mu_) = false;
  absl::Notification shut_down_;
};

}  // namespace quill::server
