#include "client/bench/http_streamer.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace quill::bench {
namespace {

absl::StatusCode CodeOfHttpStatus(int status) {
  switch (status) {
    case 400:
      return absl::StatusCode::kInvalidArgument;
    case 404:
      return absl::StatusCode::kNotFound;
    case 429:
      return absl::StatusCode::kResourceExhausted;
    case 503:
      return absl::StatusCode::kUnavailable;
    case 504:
      return absl::StatusCode::kDeadlineExceeded;
    default:
      return absl::StatusCode::kInternal;
  }
}

}  // namespace

std::string CompletionBodyFor(const quill::v1::GenerateRequest& request) {
  nlohmann::json body = {{"model", "bench"},
                         {"prompt", std::vector<int32_t>(request.prompt_token_ids().ids().begin(),
                                                         request.prompt_token_ids().ids().end())},
                         {"max_tokens", request.max_tokens()},
                         {"temperature", request.sampling().temperature()},
                         {"seed", request.sampling().seed()},
                         {"ignore_eos", request.ignore_eos()},
                         {"disable_speculation", request.disable_speculation()},
                         {"stream", true},
                         {"stream_options", {{"continuous_usage_stats", true}}}};
  return body.dump();
}

int CompletionTokensOf(absl::string_view data) {
  constexpr absl::string_view kKey = "\"completion_tokens\":";
  const size_t at = data.rfind(kKey);
  if (at == absl::string_view::npos) return -1;
  size_t end = at + kKey.size();
  while (end < data.size() && absl::ascii_isdigit(data[end])) ++end;
  int value = -1;
  if (!absl::SimpleAtoi(data.substr(at + kKey.size(), end - at - kKey.size()), &value)) return -1;
  return value;
}

// A plain-socket HTTP/1.1 client: the bench must not share code with the server it
// measures, and it needs per-read deadlines.
class HttpStreamer::Impl {
 public:
  explicit Impl(std::string address) : address_(std::move(address)) {}
  ~Impl() { Disconnect(); }

  absl::Status Stream(const quill::v1::GenerateRequest& request, absl::Duration timeout,
                      const std::function<void(int)>& on_tokens) {
    deadline_ = absl::Now() + timeout;
    absl::Status status = StreamOnce(request, on_tokens);
    if (!status.ok()) Disconnect();  // whatever is left on the connection is unknown
    return status;
  }

 private:
  absl::Status Connect() {
    const size_t colon = address_.rfind(':');
    if (colon == std::string::npos) return absl::InvalidArgumentError("address needs a port");
    std::string host = address_.substr(0, colon);
    if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* result = nullptr;
    if (int rc = getaddrinfo(host.c_str(), address_.substr(colon + 1).c_str(), &hints, &result);
        rc != 0) {
      return absl::UnavailableError(absl::StrCat("resolve ", address_, ": ", gai_strerror(rc)));
    }
    fd_ = socket(result->ai_family, result->ai_socktype, result->ai_protocol);
    const int rc = fd_ < 0 ? -1 : connect(fd_, result->ai_addr, result->ai_addrlen);
    freeaddrinfo(result);
    if (rc != 0) {
      Disconnect();
      return absl::UnavailableError(absl::StrCat("connect ", address_, ": ", strerror(errno)));
    }
    const int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return absl::OkStatus();
  }

  void Disconnect() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
    buffer_.clear();
  }

  absl::Status Fill() {
    const absl::Duration left = deadline_ - absl::Now();
    if (left <= absl::ZeroDuration()) return absl::DeadlineExceededError("request timed out");
    pollfd p{fd_, POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (ready == 0) return absl::DeadlineExceededError("request timed out");
    if (ready < 0) return absl::UnavailableError(absl::StrCat("poll: ", strerror(errno)));
    char data[16384];
    const ssize_t n = recv(fd_, data, sizeof(data), 0);
    if (n <= 0) return absl::UnavailableError("the server closed the connection");
    buffer_.append(data, static_cast<size_t>(n));
    return absl::OkStatus();
  }

  // Up to and without "\r\n".
  absl::Status Line(std::string* line) {
    size_t end;
    while ((end = buffer_.find("\r\n")) == std::string::npos) {
      if (absl::Status s = Fill(); !s.ok()) return s;
    }
    *line = buffer_.substr(0, end);
    buffer_.erase(0, end + 2);
    return absl::OkStatus();
  }

  absl::Status Exactly(size_t n, std::string* out) {
    while (buffer_.size() < n) {
      if (absl::Status s = Fill(); !s.ok()) return s;
    }
    out->assign(buffer_, 0, n);
    buffer_.erase(0, n);
    return absl::OkStatus();
  }

  absl::Status StreamOnce(const quill::v1::GenerateRequest& request,
                          const std::function<void(int)>& on_tokens) {
    if (fd_ < 0) {
      if (absl::Status s = Connect(); !s.ok()) return s;
    }
    const std::string body = CompletionBodyFor(request);
    const std::string message =
        absl::StrCat("POST /v1/completions HTTP/1.1\r\nHost: ", address_,
                     "\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\n"
                     "Content-Length: ",
                     body.size(), "\r\n\r\n", body);
    for (size_t sent = 0; sent < message.size();) {
      const ssize_t n = send(fd_, message.data() + sent, message.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return absl::UnavailableError(absl::StrCat("send: ", strerror(errno)));
      sent += static_cast<size_t>(n);
    }
    // Head.
    std::string line;
    if (absl::Status s = Line(&line); !s.ok()) return s;
    int status = 0;
    if (line.size() < 12 || !absl::SimpleAtoi(line.substr(9, 3), &status)) {
      return absl::InternalError(absl::StrCat("bad status line: ", line));
    }
    bool chunked = false;
    int64_t length = -1;
    while (true) {
      if (absl::Status s = Line(&line); !s.ok()) return s;
      if (line.empty()) break;
      const std::string lower = absl::AsciiStrToLower(line);
      if (absl::StartsWith(lower, "transfer-encoding:") && absl::StrContains(lower, "chunked")) {
        chunked = true;
      }
      if (absl::StartsWith(lower, "content-length:")) {
        if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(lower.substr(15)), &length)) length = -1;
      }
    }
    if (!chunked) {
      // An error answer (or a server that does not stream): read it and report.
      std::string error;
      if (length > 0) {
        if (absl::Status s = Exactly(static_cast<size_t>(length), &error); !s.ok()) return s;
      }
      if (status == 200) return absl::InternalError("the response is not a stream");
      return absl::Status(CodeOfHttpStatus(status), absl::StrCat("HTTP ", status, ": ", error));
    }
    // Chunks; events may span chunk boundaries.
    std::string events;
    int tokens_so_far = 0;
    bool done = false;
    while (true) {
      if (absl::Status s = Line(&line); !s.ok()) return s;
      size_t size = 0;
      if (!absl::SimpleHexAtoi(line, &size)) return absl::InternalError("bad chunk size");
      std::string data;
      if (absl::Status s = Exactly(size + 2, &data); !s.ok()) return s;
      if (size == 0) break;
      events.append(data, 0, size);
      size_t end;
      while ((end = events.find("\n\n")) != std::string::npos) {
        absl::string_view event(events.data(), end);
        if (absl::ConsumePrefix(&event, "data: ")) {
          if (event == "[DONE]") {
            done = true;
          } else if (absl::StrContains(event, "\"error\":")) {
            return absl::InternalError(absl::StrCat("stream error: ", event));
          } else if (const int n = CompletionTokensOf(event); n > tokens_so_far) {
            on_tokens(n - tokens_so_far);
            tokens_so_far = n;
          }
        }
        events.erase(0, end + 2);
      }
    }
    if (!done) return absl::InternalError("the stream ended without [DONE]");
    return absl::OkStatus();
  }

  const std::string address_;
  int fd_ = -1;
  std::string buffer_;
  absl::Time deadline_;
};

HttpStreamer::HttpStreamer(std::string address)
    : impl_(std::make_unique<Impl>(std::move(address))) {}
HttpStreamer::~HttpStreamer() = default;

absl::Status HttpStreamer::Stream(const quill::v1::GenerateRequest& request, absl::Duration timeout,
                                  const std::function<void(int)>& on_tokens) {
  return impl_->Stream(request, timeout, on_tokens);
}

}  // namespace quill::bench
