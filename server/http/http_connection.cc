#include "server/http/http_connection.h"

#include <sys/socket.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "boost/asio/post.hpp"
#include "boost/asio/write.hpp"
#include "boost/beast/http/error.hpp"
#include "boost/beast/http/read.hpp"
#include "boost/beast/http/status.hpp"
#include "spdlog/spdlog.h"

namespace quill::server::http {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

// A request's channel: forwards to its connection, tagged with the request's sequence
// number so that a late Wake() from a finished request's source is ignored. Holds the
// connection weakly: a vanished connection does not live on in the engine's sinks.
class RequestChannel final : public ResponseChannel {
 public:
  RequestChannel(std::weak_ptr<HttpConnection> connection, uint64_t seq)
      : connection_(std::move(connection)), seq_(seq) {}

  void Start(std::shared_ptr<ResponseSource> source) override {
    if (std::shared_ptr<HttpConnection> c = connection_.lock()) {
      c->StartResponse(seq_, std::move(source));
    } else {
      source->OnClientGone();
    }
  }
  void Wake() override {
    // One pull scheduled at a time; the pull takes everything accumulated by then.
    if (scheduled_->exchange(true)) return;
    if (std::shared_ptr<HttpConnection> c = connection_.lock()) c->WakeResponse(seq_, scheduled_);
  }

 private:
  const std::weak_ptr<HttpConnection> connection_;
  const uint64_t seq_;
  // Shared with the posted pull, which clears it right before pulling.
  const std::shared_ptr<std::atomic<bool>> scheduled_ = std::make_shared<std::atomic<bool>>(false);
};

std::string StatusLine(int status) {
  const auto reason = bhttp::obsolete_reason(bhttp::int_to_status(status));
  return absl::StrCat("HTTP/1.1 ", status, " ",
                      reason.empty() ? "Unknown" : std::string(reason.data(), reason.size()),
                      "\r\n");
}

std::string FormatHead(const HttpResponseHead& head, bool keep_alive) {
  std::string out = StatusLine(head.status);
  absl::StrAppend(&out, "Server: quill\r\nContent-Type: ", head.content_type, "\r\n");
  for (const auto& [name, value] : head.headers) absl::StrAppend(&out, name, ": ", value, "\r\n");
  absl::StrAppend(&out, "Connection: ", keep_alive ? "keep-alive" : "close", "\r\n");
  return out;
}

void AppendChunk(absl::string_view data, std::string* out) {
  if (data.empty()) return;  // an empty chunk would end the stream
  absl::StrAppendFormat(out, "%x\r\n", data.size());
  out->append(data.data(), data.size());
  out->append("\r\n");
}

}  // namespace

HttpConnection::Stream HttpConnection::MakeStream(net::ip::tcp::socket socket,
                                                  net::ssl::context* tls) {
  if (tls == nullptr) return Stream(std::in_place_index<0>, std::move(socket));
  return Stream(std::in_place_index<1>, std::move(socket), *tls);
}

HttpConnection::HttpConnection(net::ip::tcp::socket socket, uint64_t id, HttpHandler* handler,
                               const HttpServerOptions* options, ConnectionRegistry* registry,
                               net::ssl::context* tls)
    : id_(id),
      handler_(handler),
      options_(options),
      registry_(registry),
      stream_(MakeStream(std::move(socket), tls)) {}

HttpConnection::~HttpConnection() { registry_->Remove(id_); }

beast::tcp_stream& HttpConnection::tcp() {
  return std::visit([](auto& stream) -> beast::tcp_stream& { return beast::get_lowest_layer(stream); },
                    stream_);
}

void HttpConnection::Run() {
  net::post(tcp().get_executor(), [self = shared_from_this()] {
    if (self->stream_.index() == 0) return self->ReadHead();
    self->Handshake();
  });
}

// TLS: the handshake must complete within the read timeout, like a request head.
void HttpConnection::Handshake() {
  tcp().expires_after(absl::ToChronoNanoseconds(options_->read_timeout));
  std::get<1>(stream_).async_handshake(
      net::ssl::stream_base::server, [self = shared_from_this()](beast::error_code ec) {
        if (ec) {
          spdlog::debug("http connection={} TLS handshake failed: {}", self->id_, ec.message());
          return self->DoClose();
        }
        self->ReadHead();
      });
}

void HttpConnection::CloseWhenIdle() {
  net::post(tcp().get_executor(), [self = shared_from_this()] {
    if (!self->response_active_) {
      self->DoClose();
    } else {
      self->close_after_ = true;
    }
  });
}

void HttpConnection::Close() {
  net::post(tcp().get_executor(), [self = shared_from_this()] { self->ClientGone(); });
}

void HttpConnection::StartResponse(uint64_t seq, std::shared_ptr<ResponseSource> source) {
  net::post(tcp().get_executor(), [self = shared_from_this(), seq, source = std::move(source)] {
    self->OnStart(seq, source);
  });
}

void HttpConnection::WakeResponse(uint64_t seq, std::shared_ptr<std::atomic<bool>> scheduled) {
  net::post(tcp().get_executor(), [self = shared_from_this(), seq, scheduled] {
    // Cleared before pulling: output arriving from now on schedules another pull.
    scheduled->store(false);
    if (seq == self->seq_) self->Pull();
  });
}

// --- reading ------------------------------------------------------------------------------

void HttpConnection::ReadHead() {
  if (closed_) return;
  if (registry_->draining()) return DoClose();
  parser_.emplace();
  parser_->header_limit(static_cast<uint32_t>(options_->max_header_bytes));
  parser_->body_limit(static_cast<uint64_t>(options_->max_body_bytes));
  tcp().expires_after(absl::ToChronoNanoseconds(options_->read_timeout));
  std::visit(
      [&](auto& stream) {
        bhttp::async_read_header(
            stream, buffer_, *parser_,
            [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHead(ec); });
      },
      stream_);
}

void HttpConnection::OnReadError(beast::error_code ec) {
  if (ec == bhttp::error::end_of_stream || ec == net::error::eof || ec == beast::error::timeout ||
      ec == net::error::operation_aborted || ec == net::error::connection_reset || closed_) {
    return DoClose();  // the client left (or idled out): nobody to answer
  }
  if (ec == bhttp::error::header_limit) {
    return RejectRequest(431, absl::StrCat("the request head is larger than ",
                                           options_->max_header_bytes, " bytes"));
  }
  if (ec == bhttp::error::body_limit) {
    return RejectRequest(413,
                         absl::StrCat("the request body is larger than the server's limit "
                                      "of ",
                                      options_->max_body_bytes, " bytes (--max-message-bytes)"));
  }
  RejectRequest(400, absl::StrCat("malformed HTTP request: ", ec.message()));
}

void HttpConnection::OnHead(beast::error_code ec) {
  if (ec) return OnReadError(ec);
  const auto& head = parser_->get();
  if (const auto length = parser_->content_length();
      length && *length > static_cast<uint64_t>(options_->max_body_bytes)) {
    return OnReadError(bhttp::error::body_limit);  // refuse before reading it
  }
  if (beast::iequals(head[bhttp::field::expect], "100-continue")) {
    out_ = "HTTP/1.1 100 Continue\r\n\r\n";
    tcp().expires_after(absl::ToChronoNanoseconds(options_->write_timeout));
    std::visit(
        [&](auto& stream) {
          net::async_write(stream, net::buffer(out_),
                           [self = shared_from_this()](beast::error_code ec, size_t) {
                             self->OnContinueSent(ec);
                           });
        },
        stream_);
    return;
  }
  ReadBody();
}

void HttpConnection::OnContinueSent(beast::error_code ec) {
  if (ec) return DoClose();
  ReadBody();
}

void HttpConnection::ReadBody() {
  tcp().expires_after(absl::ToChronoNanoseconds(options_->read_timeout));
  std::visit(
      [&](auto& stream) {
        bhttp::async_read(
            stream, buffer_, *parser_,
            [self = shared_from_this()](beast::error_code ec, size_t) { self->OnBody(ec); });
      },
      stream_);
}

void HttpConnection::OnBody(beast::error_code ec) {
  if (ec) return OnReadError(ec);
  tcp().expires_never();
  Dispatch();
}

void HttpConnection::Dispatch() {
  bhttp::request<bhttp::string_body> message = parser_->release();
  parser_.reset();
  HttpRequest request;
  const auto method = message.method_string();
  const auto target = message.target();
  request.method.assign(method.data(), method.size());
  request.target.assign(target.data(), target.size());
  request.path = request.target.substr(0, request.target.find('?'));
  for (const auto& field : message) {
    const auto name = field.name_string();
    const auto value = field.value();
    request.headers.emplace_back(std::string(name.data(), name.size()),
                                 std::string(value.data(), value.size()));
  }
  request.body = std::move(message.body());
  keep_alive_ = message.keep_alive();
  http11_ = message.version() >= 11;

  ++seq_;
  response_active_ = true;
  head_sent_ = false;
  chunked_ = false;
  WatchHangup();
  handler_->Handle(request, std::make_shared<RequestChannel>(weak_from_this(), seq_));
}

void HttpConnection::RejectRequest(int status, const std::string& message) {
  ++seq_;
  response_active_ = true;
  head_sent_ = false;
  chunked_ = false;
  keep_alive_ = false;  // the rest of what the client sent cannot be trusted
  std::string body;
  HttpResponseHead head = handler_->TransportError(status, message, &body);
  RequestChannel(weak_from_this(), seq_).Respond(std::move(head), std::move(body), true);
}

// --- writing ------------------------------------------------------------------------------

void HttpConnection::OnStart(uint64_t seq, std::shared_ptr<ResponseSource> source) {
  if (closed_) {
    source->OnClientGone();
    return;
  }
  if (seq != seq_ || source_ != nullptr) return;  // a programming error in a handler
  source_ = std::move(source);
  Pull();
}

void HttpConnection::Pull() {
  if (closed_ || source_ == nullptr || writing_ || !response_active_) return;
  HttpOutput output = source_->Next();
  if (output.empty()) return;
  close_after_ = close_after_ || output.close;
  out_.clear();
  if (!head_sent_) {
    if (output.head == nullptr) output.head = std::make_unique<HttpResponseHead>();
    head_sent_ = true;
    if (output.last && !output.head->stream) {
      // A whole response.
      const bool keep_alive = keep_alive_ && !close_after_;
      out_ = FormatHead(*output.head, keep_alive);
      absl::StrAppend(&out_, "Content-Length: ", output.body.size(), "\r\n\r\n", output.body);
    } else {
      // A stream: chunked on HTTP/1.1; HTTP/1.0 clients read until the connection closes.
      chunked_ = http11_;
      if (!chunked_) close_after_ = true;
      const bool keep_alive = keep_alive_ && !close_after_;
      out_ = FormatHead(*output.head, keep_alive);
      absl::StrAppend(&out_, "Cache-Control: no-cache\r\n",
                      chunked_ ? "Transfer-Encoding: chunked\r\n" : "", "\r\n");
      if (chunked_) {
        AppendChunk(output.body, &out_);
        if (output.last) out_ += "0\r\n\r\n";
      } else {
        out_ += output.body;
      }
    }
  } else if (chunked_) {
    AppendChunk(output.body, &out_);
    if (output.last) out_ += "0\r\n\r\n";
  } else {
    out_ = std::move(output.body);
  }
  last_in_flight_ = output.last;
  if (out_.empty()) {
    if (last_in_flight_) FinishResponse();
    return;
  }
  Write();
}

void HttpConnection::Write() {
  writing_ = true;
  tcp().expires_after(absl::ToChronoNanoseconds(options_->write_timeout));
  std::visit(
      [&](auto& stream) {
        net::async_write(
            stream, net::buffer(out_),
            [self = shared_from_this()](beast::error_code ec, size_t) { self->OnWrite(ec); });
      },
      stream_);
}

void HttpConnection::OnWrite(beast::error_code ec) {
  writing_ = false;
  if (ec) {
    if (ec == beast::error::timeout) {
      spdlog::info("http connection={} closed: the client read nothing for {}", id_,
                   absl::FormatDuration(options_->write_timeout));
    }
    return ClientGone();
  }
  tcp().expires_never();
  if (last_in_flight_) return FinishResponse();
  Pull();
}

void HttpConnection::FinishResponse() {
  response_active_ = false;
  source_.reset();
  last_in_flight_ = false;
  if (close_after_ || !keep_alive_ || registry_->draining()) {
    // Let the client read everything before the FIN.
    beast::error_code ignored;
    tcp().socket().shutdown(net::ip::tcp::socket::shutdown_send, ignored);
    return DoClose();
  }
  if (hangup_watch_) {
    // The readiness wait must end before the next read starts.
    read_after_watch_ = true;
    beast::error_code ignored;
    tcp().socket().cancel(ignored);
    return;
  }
  ReadHead();
}

// --- the client hanging up ----------------------------------------------------------------

void HttpConnection::WatchHangup() {
  if (hangup_watch_ || closed_) return;
  hangup_watch_ = true;
  tcp().socket().async_wait(
      net::ip::tcp::socket::wait_read,
      [self = shared_from_this()](beast::error_code ec) { self->OnReadable(ec); });
}

void HttpConnection::OnReadable(beast::error_code ec) {
  hangup_watch_ = false;
  if (closed_) return;
  if (!response_active_) {
    if (read_after_watch_) {
      read_after_watch_ = false;
      ReadHead();
    }
    return;
  }
  if (ec == net::error::operation_aborted) return;
  if (ec) return ClientGone();
  // Readable: either the client closed (EOF), or it sent more (a pipelined request, which
  // is read after this response).
  char byte;
  const ssize_t n = ::recv(tcp().socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
    return ClientGone();
  }
  if (n < 0) WatchHangup();  // spurious wakeup
}

void HttpConnection::ClientGone() {
  if (closed_) return;
  if (response_active_ && source_ != nullptr) source_->OnClientGone();
  source_.reset();
  response_active_ = false;
  DoClose();
}

void HttpConnection::DoClose() {
  if (closed_) return;
  closed_ = true;
  // A response whose source was never attached learns of it in OnStart.
  beast::error_code ignored;
  tcp().socket().shutdown(net::ip::tcp::socket::shutdown_both, ignored);
  tcp().close();
}

}  // namespace quill::server::http
