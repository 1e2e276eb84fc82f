// The /metrics endpoint against stalled clients, and on an address of its own: a real
// quill-server in process (kjv-1m), raw TCP connections that never finish a request, and
// real HTTP scrapes.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/integration/test_server.h"
#include "tests/testing/http_get.h"
#include "tests/testing/test_env.h"

namespace quill::testing {
namespace {

server::ServerOptions Options() {
  server::ServerOptions options = KjvTestServerOptions(4 << 20);
  options.drain_timeout = absl::Seconds(1);
  return options;
}

// A TCP connection to host:port that sends `prefix` (maybe nothing) and then stalls.
class StalledConnection {
 public:
  StalledConnection(const char* host, int port, const std::string& prefix) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, host, &addr.sin_addr);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    if (connected_ && !prefix.empty()) {
      connected_ = send(fd_, prefix.data(), prefix.size(), MSG_NOSIGNAL) ==
                   static_cast<ssize_t>(prefix.size());
    }
  }
  ~StalledConnection() {
    if (fd_ >= 0) close(fd_);
  }
  bool connected() const { return connected_; }
  // True if the server closes the connection within `timeout`.
  bool ClosedByServerWithin(absl::Duration timeout) {
    timeval tv;
    tv.tv_sec = static_cast<time_t>(absl::ToInt64Seconds(timeout));
    tv.tv_usec = static_cast<suseconds_t>(absl::ToInt64Microseconds(timeout) % 1000000);
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char buffer[4096];
    while (true) {
      const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
      if (n == 0) return true;   // orderly close (possibly after an error response)
      if (n < 0) return errno == ECONNRESET;
    }
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

std::vector<std::unique_ptr<StalledConnection>> Stall(int count, const char* host, int port) {
  std::vector<std::unique_ptr<StalledConnection>> stalled;
  for (int i = 0; i < count; ++i) {
    // Half say nothing at all; half stop in the middle of their request headers.
    stalled.push_back(std::make_unique<StalledConnection>(
        host, port, i % 2 == 0 ? "" : "GET /metrics HTTP/1.1\r\nHost: quill\r\n"));
    EXPECT_TRUE(stalled.back()->connected()) << i;
  }
  absl::SleepFor(absl::Milliseconds(200));  // the server has accepted every one of them
  return stalled;
}

class MetricsEndpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (SharedModelPath("kjv-1m.gguf").empty()) {
      GTEST_SKIP() << "shared assets not found (QUILL_SHARED_DIR)";
    }
  }
  void Start(const server::ServerOptions& options) {
    absl::StatusOr<std::unique_ptr<server::Server>> server = server::Server::Create(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }
  std::unique_ptr<server::Server> server_;
};

// Issue 10: two idle connections used to make every scrape time out.
TEST_F(MetricsEndpointTest, ScrapeAnswersWithinASecondWhileTenConnectionsStall) {
  Start(Options());
  auto stalled = Stall(10, "127.0.0.1", server_->metrics_port());
  const absl::Time start = absl::Now();
  absl::StatusOr<HttpResponse> scrape =
      HttpGet("127.0.0.1", server_->metrics_port(), "/metrics", absl::Seconds(5));
  const absl::Duration took = absl::Now() - start;
  ASSERT_TRUE(scrape.ok()) << scrape.status() << " after " << took;
  EXPECT_EQ(scrape->status, 200);
  EXPECT_NE(scrape->body.find("quill_requests_running"), std::string::npos);
  EXPECT_LT(took, absl::Seconds(1));
}

// More stalled clients than threads: each holds a thread for at most the request timeout,
// then the server drops it and the scrape is served.
TEST_F(MetricsEndpointTest, StalledConnectionsAreDroppedAfterTheRequestTimeout) {
  server::ServerOptions options = Options();
  options.metrics_threads = 2;
  options.metrics_request_timeout = absl::Milliseconds(300);
  Start(options);
  auto stalled = Stall(4, "127.0.0.1", server_->metrics_port());
  const absl::Time start = absl::Now();
  absl::StatusOr<HttpResponse> scrape =
      HttpGet("127.0.0.1", server_->metrics_port(), "/metrics", absl::Seconds(10));
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  EXPECT_EQ(scrape->status, 200);
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  for (auto& connection : stalled) {
    EXPECT_TRUE(connection->ClosedByServerWithin(absl::Seconds(3)));
  }
}

TEST_F(MetricsEndpointTest, ServesOnAnAddressOfItsOwn) {
  server::ServerOptions options = Options();
  options.metrics_host = "127.0.0.2";  // gRPC stays on 127.0.0.1
  Start(options);
  absl::StatusOr<HttpResponse> scrape =
      HttpGet("127.0.0.2", server_->metrics_port(), "/metrics", absl::Seconds(5));
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  EXPECT_EQ(scrape->status, 200);
  EXPECT_FALSE(HttpGet("127.0.0.1", server_->metrics_port(), "/metrics", absl::Seconds(2)).ok());
}

}  // namespace
}  // namespace quill::testing
