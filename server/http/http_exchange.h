#pragma once

// The seam between the HTTP transport (http_server.cc, the only code that sees Boost.Beast)
// and the handlers of the API (openai_api.cc): plain structs for a request and a response,
// and the per-request channel through which a handler answers, now or later, from any
// thread.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace quill::server::http {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // path and query, as sent: "/v1/models?x=1"
  std::string path;    // target without the query
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // The header's value (first occurrence, case-insensitive name), or "".
  absl::string_view Header(absl::string_view name) const;
};

struct HttpResponseHead {
  int status = 200;
  std::string content_type = "application/json";
  // A stream (server-sent events): sent chunked on HTTP/1.1 (read-to-close on 1.0) even
  // when the whole of it is ready at once.
  bool stream = false;
  std::vector<std::pair<std::string, std::string>> headers;  // extra, e.g. Retry-After
};

// What a ResponseSource hands the transport next.
struct HttpOutput {
  // Set on a response's first output only: a complete response when `last` is set too
  // (sent with Content-Length), else the head of a chunked stream (server-sent events).
  std::unique_ptr<HttpResponseHead> head;
  std::string body;   // bytes to send (may be empty)
  bool last = false;  // the response ends after `body`
  // Close the connection after this response even if the client wants keep-alive.
  bool close = false;

  bool empty() const { return head == nullptr && body.empty() && !last; }
};

// Produces a response's bytes. Pull-based, so that output coalesces while the client is
// slow: the transport calls Next() when it can write (on its own thread) and the source
// returns everything that accumulated since, formatted. Implementations are thread-safe.
class ResponseSource {
 public:
  virtual ~ResponseSource() = default;
  // The next output, or an empty one when there is nothing yet (the source then calls
  // ResponseChannel::Wake() when there is). Never blocks.
  virtual HttpOutput Next() = 0;
  // The client disconnected, timed out or stopped reading before the response ended.
  // Called at most once, from a transport thread; never blocks.
  virtual void OnClientGone() = 0;
};

// One request's way back to its client. Thread-safe; never blocks.
class ResponseChannel {
 public:
  virtual ~ResponseChannel() = default;
  // Attaches the source of this request's response and starts pulling from it. Called
  // exactly once per request (Respond() does it too).
  virtual void Start(std::shared_ptr<ResponseSource> source) = 0;
  // The source has new output (cheap; coalesces with a pull already scheduled).
  virtual void Wake() = 0;

  // A complete response, right away.
  void Respond(HttpResponseHead head, std::string body, bool close = false);
};

// Routes requests. Handle() runs on a transport thread and must not block; it answers
// through `channel` (at once or later, from any thread).
class HttpHandler {
 public:
  virtual ~HttpHandler() = default;
  virtual void Handle(const HttpRequest& request, std::shared_ptr<ResponseChannel> channel) = 0;
  // A request the transport could not parse or accept (malformed, too large): the handler
  // formats the error body. `status` is the HTTP status (400, 413, 431).
  virtual HttpResponseHead TransportError(int status, const std::string& message,
                                          std::string* body) = 0;
};

}  // namespace quill::server::http
