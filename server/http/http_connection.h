#pragma once

// One HTTP/1.1 connection (internal to server/http; the only other file that sees Beast is
// http_server.cc). Everything below runs on the connection's strand except the public
// methods, which post to it.
//
// Per request: read the head (timeout), answer `Expect: 100-continue`, read the body
// (limit), hand the request to the HttpHandler with a fresh ResponseChannel, then pull the
// response from its ResponseSource: one write in flight, each write bounded by the write
// timeout, output that arrives meanwhile coalescing in the source. While a response is
// pending the socket is also watched for the client hanging up, so an abandoned generation
// is cancelled at once instead of at its next write.

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>

#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/ssl/context.hpp"
#include "boost/beast/core/error.hpp"
#include "boost/beast/core/flat_buffer.hpp"
#include "boost/beast/core/tcp_stream.hpp"
#include "boost/beast/http/parser.hpp"
#include "boost/beast/http/string_body.hpp"
#include "boost/beast/ssl/ssl_stream.hpp"
#include "server/http/http_exchange.h"
#include "server/http/http_server.h"

namespace quill::server::http {

// What a connection needs from the server that owns it.
class ConnectionRegistry {
 public:
  virtual ~ConnectionRegistry() = default;
  virtual void Remove(uint64_t id) = 0;  // from the connection's destructor
  virtual bool draining() const = 0;     // close after the current response
};

class HttpConnection final : public std::enable_shared_from_this<HttpConnection> {
 public:
  // `handler`, `options`, `registry` and `tls` must outlive the connection (the server's
  // io_context, which holds the last references, is destroyed first). `tls` null:
  // plaintext; otherwise the connection starts with a TLS handshake.
  HttpConnection(boost::asio::ip::tcp::socket socket, uint64_t id, HttpHandler* handler,
                 const HttpServerOptions* options, ConnectionRegistry* registry,
                 boost::asio::ssl::context* tls = nullptr);
  ~HttpConnection();

  // Any thread.
  void Run();
  // Shutdown: an idle connection closes now, a busy one after its response.
  void CloseWhenIdle();
  // Closes now; a response in progress is abandoned (its source is told the client left).
  void Close();

  // From a request's ResponseChannel (any thread). `seq` identifies the request: output of
  // a request that is over is ignored.
  void StartResponse(uint64_t seq, std::shared_ptr<ResponseSource> source);
  void WakeResponse(uint64_t seq, std::shared_ptr<std::atomic<bool>> scheduled);

 private:
  // Plaintext or TLS; reads and writes go through std::visit, timeouts and the socket
  // through the TCP layer underneath either.
  using Stream = std::variant<boost::beast::tcp_stream,
                              boost::beast::ssl_stream<boost::beast::tcp_stream>>;
  static Stream MakeStream(boost::asio::ip::tcp::socket socket, boost::asio::ssl::context* tls);
  boost::beast::tcp_stream& tcp();

  void Handshake();
  void ReadHead();
  void OnHead(boost::beast::error_code ec);
  void OnContinueSent(boost::beast::error_code ec);
  void ReadBody();
  void OnBody(boost::beast::error_code ec);
  void Dispatch();
  void RejectRequest(int status, const std::string& message);
  void OnStart(uint64_t seq, std::shared_ptr<ResponseSource> source);
  void Pull();
  void Write();
  void OnWrite(boost::beast::error_code ec);
  void WatchHangup();
  void OnReadable(boost::beast::error_code ec);
  void FinishResponse();
  void ClientGone();
  void DoClose();
  // Parse errors other than timeouts and closed connections get a response.
  void OnReadError(boost::beast::error_code ec);

  const uint64_t id_;
  HttpHandler* const handler_;
  const HttpServerOptions* const options_;
  ConnectionRegistry* const registry_;

  Stream stream_;
  boost::beast::flat_buffer buffer_;
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;

  // The current request (strand only).
  uint64_t seq_ = 0;
  bool response_active_ = false;  // a request was read and its response has not ended
  std::shared_ptr<ResponseSource> source_;
  bool keep_alive_ = true;
  bool http11_ = true;
  bool head_sent_ = false;
  bool chunked_ = false;
  bool writing_ = false;
  bool last_in_flight_ = false;  // the write in flight ends the response
  bool close_after_ = false;     // close once the response has ended
  std::string out_;              // the bytes of the write in flight
  bool hangup_watch_ = false;    // an async_wait for readability is pending
  bool read_after_watch_ = false;
  bool closed_ = false;
};

}  // namespace quill::server::http
