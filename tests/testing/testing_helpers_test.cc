// Tests of the shared test helpers themselves (so that the integration tests built on
// them can be trusted).

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/heap_allocations.h"
#include "tests/testing/http_get.h"
#include "tests/testing/prometheus_text.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"

namespace quill::testing {
namespace {

// The counter sees every thread's allocations (the "allocates nothing" tests rely on it).
std::vector<int>* volatile g_kept = nullptr;  // volatile: the allocations cannot be elided
TEST(HeapAllocationsTest, CountsEveryThreadsAllocations) {
  const int64_t before = HeapAllocations();
  auto here = std::make_unique<std::vector<int>>(100);
  g_kept = here.get();
  std::unique_ptr<std::vector<int>> there;
  const int64_t before_thread = HeapAllocations();  // std::thread allocates its state too
  std::thread([&] { there = std::make_unique<std::vector<int>>(100); }).join();
  g_kept = there.get();
  EXPECT_GE(before_thread - before, 2);  // the vector and its buffer
  EXPECT_GE(HeapAllocations() - before_thread, 2);
}

struct alignas(128) OverAligned {
  float values[8];
};
OverAligned* volatile g_aligned = nullptr;
TEST(HeapAllocationsTest, CountsOverAlignedAllocations) {
  const int64_t before = HeapAllocations();
  auto block = std::make_unique<OverAligned>();
  g_aligned = block.get();
  EXPECT_EQ(HeapAllocations() - before, 1);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(block.get()) % 128, 0u);
}

using ::testing::HasSubstr;

constexpr char kValid[] = R"(# HELP requests_total Requests by outcome.
# TYPE requests_total counter
requests_total{outcome="length"} 3
requests_total{outcome="stop",note="a \"quoted\" \\ value\n"} 1 1700000000000
# TYPE temperature gauge
temperature -4.5
# HELP latency_seconds Latency.
# TYPE latency_seconds histogram
latency_seconds_bucket{le="0.1"} 1
latency_seconds_bucket{le="1"} 3
latency_seconds_bucket{le="+Inf"} 4
latency_seconds_sum 7.25
latency_seconds_count 4
# a free comment
)";

TEST(PromTextTest, ParsesCountersGaugesAndHistograms) {
  absl::StatusOr<PromText> text = PromText::Parse(kValid);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->Family("requests_total")->type, "counter");
  EXPECT_EQ(text->Family("requests_total")->help, "Requests by outcome.");
  EXPECT_EQ(text->Value("requests_total", {{"outcome", "length"}}), 3.0);
  EXPECT_EQ(text->Value("requests_total", {{"outcome", "stop"}, {"note", "a \"quoted\" \\ value\n"}}),
            1.0);
  EXPECT_EQ(text->Value("requests_total", {{"outcome", "eos"}}), std::nullopt);
  EXPECT_EQ(text->Value("temperature"), -4.5);
  EXPECT_EQ(text->HistogramCount("latency_seconds"), 4.0);
  EXPECT_EQ(text->HistogramSum("latency_seconds"), 7.25);
  EXPECT_EQ(text->Value("latency_seconds_bucket", {{"le", "1"}}), 3.0);
}

TEST(PromTextTest, RejectsMalformedInput) {
  const char* bad[] = {
      "# TYPE x counter\nx{a=\"1} 2\n",                 // unterminated label value
      "# TYPE x counter\nx{a=\"\\t\"} 2\n",             // bad escape
      "# TYPE x counter\nx{1a=\"b\"} 2\n",              // bad label name
      "# TYPE x counter\nx 2 3 4\n",                    // too many fields
      "# TYPE x counter\nx abc\n",                      // bad value
      "# TYPE x counter\nx -1\n",                       // negative counter
      "y 1\n",                                          // undeclared family
      "# TYPE x gauge\n# TYPE x gauge\nx 1\n",          // second TYPE
      "# TYPE x summaryish\nx 1\n",                     // bad type
      "# TYPE h histogram\nh_bucket{le=\"1\"} 3\nh_bucket{le=\"+Inf\"} 2\nh_count 2\n",
      "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_count 3\n",
      "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_count 1\n",  // no +Inf bucket
  };
  for (const char* text : bad) {
    EXPECT_EQ(PromText::Parse(text).status().code(), absl::StatusCode::kInvalidArgument) << text;
  }
}

TEST(SubprocessTest, CapturesOutputAndExitCode) {
  int code = -1;
  absl::StatusOr<std::string> out =
      RunAndCapture({"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}, &code);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(code, 3);
  EXPECT_THAT(*out, HasSubstr("out\n"));
  EXPECT_THAT(*out, HasSubstr("err\n"));
}

TEST(SubprocessTest, WaitsForAPatternAndReportsSignals) {
  absl::StatusOr<std::unique_ptr<Subprocess>> p =
      Subprocess::Start({"/bin/sh", "-c", "echo \"listening on 127.0.0.1:$PORT\"; exec sleep 30"},
                        {{"PORT", "4567"}});
  ASSERT_TRUE(p.ok()) << p.status();
  absl::StatusOr<std::string> port =
      (*p)->WaitForOutput("listening on 127\\.0\\.0\\.1:([0-9]+)", absl::Seconds(10));
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_EQ(*port, "4567");
  EXPECT_EQ((*p)->WaitForOutput("never printed", absl::Milliseconds(50)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ((*p)->Wait(absl::Milliseconds(10)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  (*p)->Signal(SIGTERM);
  absl::StatusOr<int> code = (*p)->Wait(absl::Seconds(10));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 128 + SIGTERM);
}

TEST(SubprocessTest, ReportsAnEarlyExitWhileWaitingForOutput) {
  absl::StatusOr<std::unique_ptr<Subprocess>> p =
      Subprocess::Start({"/bin/sh", "-c", "echo bye"});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ((*p)->WaitForOutput("hello", absl::Seconds(10)).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// A one-shot HTTP server on a free port that answers with `reply`.
class OneShotServer {
 public:
  explicit OneShotServer(std::string reply) : reply_(std::move(reply)) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    listen(fd_, 1);
    socklen_t len = sizeof(addr);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] {
      const int client = accept(fd_, nullptr, nullptr);
      char buf[4096];
      std::string got;
      while (got.find("\r\n\r\n") == std::string::npos) {
        const ssize_t n = read(client, buf, sizeof(buf));
        if (n <= 0) break;
        got.append(buf, n);
      }
      request_ = got;
      ssize_t ignored = write(client, reply_.data(), reply_.size());
      (void)ignored;
      close(client);
    });
  }
  ~OneShotServer() {
    thread_.join();
    close(fd_);
  }
  int port() const { return port_; }
  const std::string& request() const { return request_; }

 private:
  std::string reply_;
  int fd_;
  int port_;
  std::thread thread_;
  std::string request_;
};

TEST(HttpGetTest, ReadsStatusContentTypeAndBody) {
  absl::StatusOr<HttpResponse> response;
  std::string request;
  {
    OneShotServer server("HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n\r\nbody\n");
    response = HttpGet("127.0.0.1", server.port(), "/metrics");
    // (request_ is written before the reply, so it is complete here.)
    request = server.request();
  }
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->content_type, "text/plain; version=0.0.4");
  EXPECT_EQ(response->body, "body\n");
  EXPECT_THAT(request, ::testing::StartsWith("GET /metrics HTTP/1.0\r\n"));
}

TEST(HttpGetTest, ConnectionRefusedIsUnavailable) {
  int port;
  {
    OneShotServer server("HTTP/1.0 204 No Content\r\n\r\n");
    port = server.port();
    ASSERT_TRUE(HttpGet("127.0.0.1", port, "/").ok());
  }
  EXPECT_EQ(HttpGet("127.0.0.1", port, "/").status().code(), absl::StatusCode::kUnavailable);
}

TEST(ScratchPathTest, FilesAndDirectoriesGoWhenTheProcessExits) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // In the child: make a file and a directory tree, check they exist, exit normally.
    const std::string file = WriteScratchFile("probe.txt", "x");
    const std::string dir = ScratchPath("probe-dir");
    std::filesystem::create_directories(dir + "/sub");
    const bool made = !file.empty() && std::filesystem::exists(file) &&
                      std::filesystem::exists(dir + "/sub");
    std::exit(made ? 0 : 3);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child could not make its scratch files";
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = (tmp != nullptr && *tmp != '\0') ? tmp : "/tmp";
  const std::string prefix = dir + "/quill-test-" + std::to_string(child) + "-";
  EXPECT_FALSE(std::filesystem::exists(prefix + "probe.txt"));
  EXPECT_FALSE(std::filesystem::exists(prefix + "probe-dir"));
}

}  // namespace
}  // namespace quill::testing
