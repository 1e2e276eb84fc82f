#include "tests/testing/http_client.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace quill::testing {

std::string HttpReply::Header(const std::string& lower_name) const {
  auto it = headers.find(lower_name);
  return it == headers.end() ? "" : it->second;
}

absl::StatusOr<std::unique_ptr<HttpClient>> HttpClient::Connect(const std::string& host, int port,
                                                                absl::Duration timeout) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  if (int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &result); rc != 0) {
    return absl::UnavailableError(absl::StrCat("resolve ", host, ": ", gai_strerror(rc)));
  }
  const int fd = socket(result->ai_family, result->ai_socktype, result->ai_protocol);
  if (fd < 0) {
    freeaddrinfo(result);
    return absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
  }
  const int rc = connect(fd, result->ai_addr, result->ai_addrlen);
  freeaddrinfo(result);
  if (rc != 0) {
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("connect ", host, ":", port, ": ", std::strerror(errno)));
  }
  return std::unique_ptr<HttpClient>(new HttpClient(fd, timeout));
}

HttpClient::~HttpClient() { Close(); }

void HttpClient::Close() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

absl::Status HttpClient::SendRaw(absl::string_view bytes) {
  for (size_t sent = 0; sent < bytes.size();) {
    const ssize_t n = send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return absl::UnavailableError(absl::StrCat("send: ", std::strerror(errno)));
    sent += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status HttpClient::Send(absl::string_view method, absl::string_view path,
                              absl::string_view body, absl::string_view raw_headers) {
  return SendRaw(absl::StrCat(method, " ", path, " HTTP/1.1\r\nHost: 127.0.0.1\r\n",
                              "Content-Type: application/json\r\nContent-Length: ", body.size(),
                              "\r\n", raw_headers, "\r\n", body));
}

absl::StatusOr<bool> HttpClient::Fill() {
  pollfd p{fd_, POLLIN, 0};
  const int ready = poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout_)));
  if (ready == 0) return absl::DeadlineExceededError("HTTP read timed out");
  if (ready < 0) return absl::UnavailableError(absl::StrCat("poll: ", std::strerror(errno)));
  char data[16384];
  const ssize_t n = recv(fd_, data, sizeof(data), 0);
  if (n < 0) return absl::UnavailableError(absl::StrCat("recv: ", std::strerror(errno)));
  buffer_.append(data, static_cast<size_t>(n));
  return n > 0;
}

absl::StatusOr<std::string> HttpClient::ReadLine() {
  while (true) {
    const size_t end = buffer_.find("\r\n");
    if (end != std::string::npos) {
      std::string line = buffer_.substr(0, end);
      buffer_.erase(0, end + 2);
      return line;
    }
    absl::StatusOr<bool> more = Fill();
    if (!more.ok()) return more.status();
    if (!*more) return absl::UnavailableError("connection closed in the middle of a line");
  }
}

absl::StatusOr<HttpReply> HttpClient::ReadHead() {
  HttpReply reply;
  absl::StatusOr<std::string> status_line = ReadLine();
  if (!status_line.ok()) return status_line.status();
  std::vector<std::string> parts = absl::StrSplit(*status_line, absl::MaxSplits(' ', 2));
  if (parts.size() < 2 || !absl::StartsWith(parts[0], "HTTP/1.") ||
      !absl::SimpleAtoi(parts[1], &reply.status)) {
    return absl::InternalError(absl::StrCat("bad status line: ", *status_line));
  }
  while (true) {
    absl::StatusOr<std::string> line = ReadLine();
    if (!line.ok()) return line.status();
    if (line->empty()) break;
    const size_t colon = line->find(':');
    if (colon == std::string::npos) return absl::InternalError(absl::StrCat("bad header ", *line));
    reply.headers[absl::AsciiStrToLower(line->substr(0, colon))] =
        std::string(absl::StripAsciiWhitespace(line->substr(colon + 1)));
  }
  chunked_ = absl::EqualsIgnoreCase(reply.Header("transfer-encoding"), "chunked");
  remaining_ = -1;
  if (!chunked_ && !reply.Header("content-length").empty() &&
      !absl::SimpleAtoi(reply.Header("content-length"), &remaining_)) {
    return absl::InternalError("bad Content-Length");
  }
  body_done_ = !chunked_ && remaining_ == 0;
  return reply;
}

absl::StatusOr<std::string> HttpClient::ReadBodyPiece() {
  if (body_done_) return std::string();
  if (chunked_) {
    absl::StatusOr<std::string> size_line = ReadLine();
    if (!size_line.ok()) return size_line.status();
    size_t size = 0;
    if (!absl::SimpleHexAtoi(*size_line, &size)) {
      return absl::InternalError(absl::StrCat("bad chunk size: ", *size_line));
    }
    while (buffer_.size() < size + 2) {
      absl::StatusOr<bool> more = Fill();
      if (!more.ok()) return more.status();
      if (!*more) return absl::UnavailableError("connection closed inside a chunk");
    }
    if (buffer_.compare(size, 2, "\r\n") != 0) return absl::InternalError("chunk without CRLF");
    std::string data = buffer_.substr(0, size);
    buffer_.erase(0, size + 2);
    if (size == 0) body_done_ = true;
    return data;
  }
  if (buffer_.empty()) {
    absl::StatusOr<bool> more = Fill();
    if (!more.ok()) return more.status();
    if (!*more) {
      body_done_ = true;
      if (remaining_ > 0) return absl::UnavailableError("connection closed before the body ended");
      return std::string();
    }
  }
  std::string data;
  if (remaining_ >= 0) {
    const size_t take = std::min<size_t>(buffer_.size(), static_cast<size_t>(remaining_));
    data = buffer_.substr(0, take);
    buffer_.erase(0, take);
    remaining_ -= static_cast<int64_t>(take);
    if (remaining_ == 0) body_done_ = true;
  } else {
    data.swap(buffer_);
  }
  return data;
}

absl::StatusOr<HttpReply> HttpClient::ReadResponse() {
  absl::StatusOr<HttpReply> reply = ReadHead();
  if (!reply.ok()) return reply;
  while (true) {
    absl::StatusOr<std::string> piece = ReadBodyPiece();
    if (!piece.ok()) return piece.status();
    if (piece->empty() && body_done_) break;
    reply->body += *piece;
  }
  return reply;
}

absl::StatusOr<HttpReply> HttpClient::Request(absl::string_view method, absl::string_view path,
                                              absl::string_view body) {
  if (absl::Status s = Send(method, path, body); !s.ok()) return s;
  return ReadResponse();
}

bool HttpClient::ServerClosed() {
  if (!buffer_.empty()) return false;
  absl::StatusOr<bool> more = Fill();
  return more.ok() && !*more;
}

absl::StatusOr<HttpReply> HttpRequest(const std::string& host, int port, absl::string_view method,
                                      absl::string_view path, absl::string_view body) {
  absl::StatusOr<std::unique_ptr<HttpClient>> client = HttpClient::Connect(host, port);
  if (!client.ok()) return client.status();
  return (*client)->Request(method, path, body);
}

absl::StatusOr<std::vector<std::string>> ParseSseData(absl::string_view body) {
  std::vector<std::string> events;
  while (!body.empty()) {
    const size_t end = body.find("\n\n");
    if (end == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("unterminated event: ", body));
    }
    absl::string_view event = body.substr(0, end);
    if (!absl::ConsumePrefix(&event, "data: ") || absl::StrContains(event, '\n')) {
      return absl::InvalidArgumentError(absl::StrCat("malformed event: ", body.substr(0, end)));
    }
    events.emplace_back(event);
    body.remove_prefix(end + 2);
  }
  return events;
}

}  // namespace quill::testing
