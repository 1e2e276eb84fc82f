#include "server/http/http_server.h"

#include <atomic>
#include <map>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "boost/asio/executor_work_guard.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/ssl/context.hpp"
#include "boost/asio/strand.hpp"
#include "server/http/http_connection.h"
#include "spdlog/spdlog.h"

namespace quill::server::http {

namespace net = boost::asio;
using tcp = net::ip::tcp;

class HttpServer::Impl final : public ConnectionRegistry {
 public:
  Impl(const HttpServerOptions& options, HttpHandler* handler)
      : options_(options),
        handler_(handler),
        ioc_(options.threads),
        acceptor_(net::make_strand(ioc_)) {}

  ~Impl() override { Shutdown(absl::ZeroDuration()); }

  // The TLS context every connection shares (TLS 1.2 and 1.3 only).
  absl::Status SetUpTls() {
    if (options_.tls_cert_chain.empty()) return absl::OkStatus();
    tls_.emplace(net::ssl::context::tls_server);
    boost::system::error_code ec;
    tls_->set_options(net::ssl::context::default_workarounds | net::ssl::context::no_sslv2 |
                          net::ssl::context::no_sslv3 | net::ssl::context::no_tlsv1 |
                          net::ssl::context::no_tlsv1_1 | net::ssl::context::single_dh_use,
                      ec);
    const auto pem = net::ssl::context::pem;
    if (tls_->use_certificate_chain(net::buffer(options_.tls_cert_chain), ec); ec) {
      return absl::InvalidArgumentError(absl::StrCat("http: --tls-cert: ", ec.message()));
    }
    if (tls_->use_private_key(net::buffer(options_.tls_private_key), pem, ec); ec) {
      return absl::InvalidArgumentError(absl::StrCat("http: --tls-key: ", ec.message()));
    }
    if (!options_.tls_client_ca.empty()) {
      if (tls_->add_certificate_authority(net::buffer(options_.tls_client_ca), ec); ec) {
        return absl::InvalidArgumentError(absl::StrCat("http: --tls-client-ca: ", ec.message()));
      }
      tls_->set_verify_mode(net::ssl::verify_peer | net::ssl::verify_fail_if_no_peer_cert, ec);
    }
    return absl::OkStatus();
  }

  absl::Status Bind() {
    if (absl::Status s = SetUpTls(); !s.ok()) return s;
    boost::system::error_code ec;
    tcp::resolver resolver(ioc_);
    const std::string host = options_.host.empty() ? "0.0.0.0" : options_.host;
    // A bracketed IPv6 literal ("[::1]") is accepted like the bare one.
    const std::string bare = host.size() > 2 && host.front() == '[' && host.back() == ']'
                                 ? host.substr(1, host.size() - 2)
                                 : host;
    const auto results =
        resolver.resolve(bare, std::to_string(options_.port),
                         tcp::resolver::passive | tcp::resolver::numeric_service, ec);
    if (ec || results.empty()) {
      return absl::UnavailableError(
          absl::StrCat("http: cannot resolve ", host, ": ", ec ? ec.message() : "no address"));
    }
    const tcp::endpoint endpoint = results.begin()->endpoint();
    const std::string where = absl::StrCat(host, ":", options_.port);
    if (acceptor_.open(endpoint.protocol(), ec); ec) {
      return absl::UnavailableError(absl::StrCat("http: cannot open ", where, ": ", ec.message()));
    }
    // SO_REUSEADDR only (binding over TIME_WAIT); never SO_REUSEPORT, so a busy port fails.
    acceptor_.set_option(net::socket_base::reuse_address(true), ec);
    if (acceptor_.bind(endpoint, ec); ec) {
      return absl::UnavailableError(absl::StrCat("http: cannot bind ", where, ": ", ec.message()));
    }
    if (acceptor_.listen(net::socket_base::max_listen_connections, ec); ec) {
      return absl::UnavailableError(
          absl::StrCat("http: cannot listen on ", where, ": ", ec.message()));
    }
    port_ = acceptor_.local_endpoint(ec).port();
    return absl::OkStatus();
  }

  void StartThreads() {
    work_.emplace(net::make_work_guard(ioc_));
    Accept();
    for (int i = 0; i < std::max(1, options_.threads); ++i) {
      threads_.emplace_back([this] { ioc_.run(); });
    }
  }

  void Shutdown(absl::Duration grace) {
    if (shut_down_.exchange(true)) return;
    draining_.store(true);
    net::post(acceptor_.get_executor(), [this] {
      boost::system::error_code ignored;
      acceptor_.close(ignored);
    });
    for (const std::shared_ptr<HttpConnection>& c : Live()) c->CloseWhenIdle();
    WaitForNoConnections(absl::Now() + grace);
    for (const std::shared_ptr<HttpConnection>& c : Live()) c->Close();
    WaitForNoConnections(absl::Now() + absl::Seconds(1));
    work_.reset();
    ioc_.stop();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }

  // ConnectionRegistry
  void Remove(uint64_t id) override {
    absl::MutexLock lock(&mu_);
    connections_.erase(id);
  }
  bool draining() const override { return draining_.load(); }

  int port() const { return port_; }
  int num_connections() const {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(connections_.size());
  }

 private:
  void Accept() {
    acceptor_.async_accept(net::make_strand(ioc_),
                           [this](boost::system::error_code ec, tcp::socket socket) {
                             OnAccept(ec, std::move(socket));
                           });
  }

  void OnAccept(boost::system::error_code ec, tcp::socket socket) {
    if (ec) {
      if (ec == net::error::operation_aborted || !acceptor_.is_open()) return;
      // Out of descriptors and the like: keep accepting; the client sees a reset.
      spdlog::warn("http accept failed: {}", ec.message());
      return Accept();
    }
    if (draining_.load()) return;  // the acceptor closes at once
    // Token streams are many small writes: send each at once.
    socket.set_option(tcp::no_delay(true), ec);
    auto connection = std::make_shared<HttpConnection>(
        std::move(socket), next_id_++, handler_, &options_, this, tls_ ? &*tls_ : nullptr);
    {
      absl::MutexLock lock(&mu_);
      connections_.emplace(next_id_ - 1, connection);
    }
    connection->Run();
    Accept();
  }

  std::vector<std::shared_ptr<HttpConnection>> Live() {
    std::vector<std::shared_ptr<HttpConnection>> live;
    absl::MutexLock lock(&mu_);
    for (const auto& [id, weak] : connections_) {
      if (std::shared_ptr<HttpConnection> c = weak.lock()) live.push_back(std::move(c));
    }
    return live;
  }

  void WaitForNoConnections(absl::Time deadline) {
    while (num_connections() > 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  }

  const HttpServerOptions options_;
  HttpHandler* const handler_;
  int port_ = 0;
  std::atomic<bool> draining_{false};
  std::atomic<bool> shut_down_{false};
  uint64_t next_id_ = 1;  // acceptor strand only

  // Declared before the io_context: its destruction destroys the last connections, whose
  // destructors unregister here.
  mutable absl::Mutex mu_;
  std::map<uint64_t, std::weak_ptr<HttpConnection>> connections_ ABSL_GUARDED_BY(mu_);

  std::optional<net::ssl::context> tls_;  // before the io_context: connections use it
  net::io_context ioc_;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work_;
  tcp::acceptor acceptor_;
  std::vector<std::thread> threads_;
};

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() = default;

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options,
                                                              HttpHandler* handler) {
  auto impl = std::make_unique<Impl>(options, handler);
  if (absl::Status s = impl->Bind(); !s.ok()) return s;
  impl->StartThreads();
  return absl::WrapUnique(new HttpServer(std::move(impl)));
}

int HttpServer::port() const { return impl_->port(); }

void HttpServer::Shutdown(absl::Duration grace) { impl_->Shutdown(grace); }

int HttpServer::num_connections() const { return impl_->num_connections(); }

}  // namespace quill::server::http
