#pragma once

// A small blocking HTTP/1.1 client for tests, written on plain sockets (independent of the
// server's HTTP code): requests with a body, responses with Content-Length, chunked
// transfer encoding or read-to-close, read whole or piece by piece (for streams), and a
// strict parser of server-sent events.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace quill::testing {

struct HttpReply {
  int status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;                            // de-chunked
  std::string Header(const std::string& lower_name) const;
};

class HttpClient {
 public:
  // UNAVAILABLE if the connection fails. Every later read/write gives up after `timeout`
  // (DEADLINE_EXCEEDED).
  static absl::StatusOr<std::unique_ptr<HttpClient>> Connect(
      const std::string& host, int port, absl::Duration timeout = absl::Seconds(30));
  ~HttpClient();

  // Sends one request (Content-Length set from `body`). `raw_headers` are extra
  // "Name: value\r\n" lines.
  absl::Status Send(absl::string_view method, absl::string_view path, absl::string_view body,
                    absl::string_view raw_headers = "");
  // Sends bytes as they are (malformed requests).
  absl::Status SendRaw(absl::string_view bytes);

  // Reads the status line and headers of the next response.
  absl::StatusOr<HttpReply> ReadHead();
  // The next piece of the body of the response whose head was read: one chunk of a chunked
  // body, else whatever arrived. "" at the end of the body.
  absl::StatusOr<std::string> ReadBodyPiece();
  // ReadHead + every piece.
  absl::StatusOr<HttpReply> ReadResponse();
  // Send + ReadResponse.
  absl::StatusOr<HttpReply> Request(absl::string_view method, absl::string_view path,
                                    absl::string_view body = "");

  // True when the server has closed the connection (reads return EOF).
  bool ServerClosed();
  void Close();

 private:
  explicit HttpClient(int fd, absl::Duration timeout) : fd_(fd), timeout_(timeout) {}
  // Reads more bytes into buffer_; OK with false at EOF.
  absl::StatusOr<bool> Fill();
  absl::StatusOr<std::string> ReadLine();

  int fd_;
  absl::Duration timeout_;
  std::string buffer_;
  // The body being read.
  bool chunked_ = false;
  int64_t remaining_ = -1;  // Content-Length left; -1 = until close
  bool body_done_ = true;
};

// One-shot request on a fresh connection.
absl::StatusOr<HttpReply> HttpRequest(const std::string& host, int port, absl::string_view method,
                                      absl::string_view path, absl::string_view body = "");

// Splits a text/event-stream body into its events' data payloads. Strict: every event must
// be exactly "data: <payload>\n\n"; anything else is INVALID_ARGUMENT.
absl::StatusOr<std::vector<std::string>> ParseSseData(absl::string_view body);

}  // namespace quill::testing
