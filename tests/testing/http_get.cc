#include "tests/testing/http_get.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace quill::testing {
namespace {

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

absl::StatusOr<HttpResponse> HttpGet(absl::string_view host, int port, absl::string_view path,
                                     absl::Duration timeout) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  const std::string host_str(host);
  const std::string port_str = std::to_string(port);
  if (int rc = getaddrinfo(host_str.c_str(), port_str.c_str(), &hints, &result); rc != 0) {
    return absl::UnavailableError(absl::StrCat("resolve ", host, ": ", gai_strerror(rc)));
  }
  Fd fd(socket(result->ai_family, result->ai_socktype, result->ai_protocol));
  if (fd.get() < 0) {
    freeaddrinfo(result);
    return absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
  }
  timeval tv;
  tv.tv_sec = static_cast<time_t>(absl::ToInt64Seconds(timeout));
  tv.tv_usec = static_cast<suseconds_t>(absl::ToInt64Microseconds(timeout) % 1000000);
  setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  const int rc = connect(fd.get(), result->ai_addr, result->ai_addrlen);
  freeaddrinfo(result);
  if (rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("connect ", host, ":", port, ": ", std::strerror(errno)));
  }
  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: ", host, ":", port,
                   "\r\nAccept: text/plain\r\nConnection: close\r\n\r\n");
  for (size_t sent = 0; sent < request.size();) {
    const ssize_t n = send(fd.get(), request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return absl::UnavailableError(absl::StrCat("send: ", std::strerror(errno)));
    sent += static_cast<size_t>(n);
  }
  // Read until the server closes, or until Content-Length bytes of body have arrived
  // (servers may answer HTTP/1.1 and keep the connection open).
  std::string raw;
  size_t header_end = std::string::npos;
  int64_t content_length = -1;
  char buffer[16384];
  while (true) {
    if (header_end == std::string::npos) {
      header_end = raw.find("\r\n\r\n");
      if (header_end != std::string::npos) {
        const std::string lower = absl::AsciiStrToLower(raw.substr(0, header_end));
        const size_t at = lower.find("\r\ncontent-length:");
        if (at != std::string::npos) {
          const size_t begin = at + strlen("\r\ncontent-length:");
          const size_t end = lower.find("\r\n", begin);
          if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(absl::string_view(lower).substr(
                                    begin, end == std::string::npos ? end : end - begin)),
                                &content_length)) {
            return absl::InternalError("bad Content-Length");
          }
        }
      }
    }
    if (header_end != std::string::npos && content_length >= 0 &&
        raw.size() >= header_end + 4 + static_cast<size_t>(content_length)) {
      break;
    }
    const ssize_t n = recv(fd.get(), buffer, sizeof(buffer), 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return absl::DeadlineExceededError(absl::StrCat("GET ", path, " timed out"));
      }
      return absl::UnavailableError(absl::StrCat("recv: ", std::strerror(errno)));
    }
    raw.append(buffer, static_cast<size_t>(n));
  }
  if (header_end == std::string::npos) return absl::InternalError("no end of HTTP headers");
  std::vector<absl::string_view> lines =
      absl::StrSplit(absl::string_view(raw).substr(0, header_end), "\r\n");
  std::vector<absl::string_view> status_line = absl::StrSplit(lines[0], absl::MaxSplits(' ', 2));
  HttpResponse response;
  if (status_line.size() < 2 || !absl::StartsWith(status_line[0], "HTTP/") ||
      !absl::SimpleAtoi(status_line[1], &response.status)) {
    return absl::InternalError(absl::StrCat("bad status line: ", lines[0]));
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(lines[i], absl::MaxSplits(':', 1));
    if (absl::EqualsIgnoreCase(kv.first, "content-type")) {
      response.content_type = std::string(absl::StripAsciiWhitespace(kv.second));
    }
  }
  if (content_length >= 0) {
    response.body = raw.substr(header_end + 4, static_cast<size_t>(content_length));
    return response;
  }
  response.body = raw.substr(header_end + 4);
  return response;
}

}  // namespace quill::testing
