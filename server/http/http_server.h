#pragma once

// quill-server's HTTP/1.1 listener (Boost.Beast over Boost.Asio). One io_context runs on a
// small fixed pool of threads; each connection is a strand-bound object of a few KiB
// (socket, read buffer, parser), so thousands of open SSE streams cost no threads, and a
// slow reader only makes its own response coalesce (see ResponseSource) until its write
// times out. Beast/Asio types stay inside server/http/*.cc.
//
// TLS: with a certificate in the options every accepted connection is an ssl_stream that
// handshakes first (within read_timeout). API keys are checked by the handler
// (OpenAiApi::Handle), which sees every request first.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/http/http_exchange.h"

namespace quill::server::http {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0 = any free port (see HttpServer::port())
  int threads = 2;  // io_context threads; they only parse, format and copy bytes
  // Larger request bodies get 413 and the connection is closed.
  int64_t max_body_bytes = 4 << 20;
  int64_t max_header_bytes = 16 << 10;  // larger request heads get 431
  // A request's head and body must arrive within this; an idle keep-alive connection is
  // closed after it.
  absl::Duration read_timeout = absl::Seconds(60);
  // A client that accepts no bytes of a response for this long is taken as gone (its
  // generation is cancelled and the connection closed).
  absl::Duration write_timeout = absl::Seconds(30);
  // TLS (PEM text, not paths): empty cert = plaintext. With a client CA, clients must
  // present a certificate it signed (mutual TLS).
  std::string tls_cert_chain;
  std::string tls_private_key;
  std::string tls_client_ca;
};

class HttpServer {
 public:
  // Binds host:port and starts the threads. `handler` must outlive the server.
  // UNAVAILABLE when the address cannot be bound (a busy port is refused: no SO_REUSEPORT);
  // INVALID_ARGUMENT when the TLS certificate or key cannot be used.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options,
                                                           HttpHandler* handler);
  ~HttpServer();  // Shutdown(zero) if not done yet.

  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const;

  // Stops accepting, closes idle connections, lets responses in progress finish for up to
  // `grace`, then closes the rest and joins the threads. Blocking; idempotent.
  void Shutdown(absl::Duration grace);

  // Open connections (for tests and logs).
  int num_connections() const;

  class Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace quill::server::http
