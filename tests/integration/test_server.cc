#include "tests/integration/test_server.h"

#include <utility>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/testing/test_env.h"

namespace quill::testing {

server::ServerOptions KjvTestServerOptions(int64_t kv_cache_bytes) {
  server::ServerOptions options;
  options.model_path = SharedModelPath("kjv-1m.gguf");
  options.precision = engine::kernels::Precision::kExact;
  options.host = "127.0.0.1";
  options.port = 0;
  options.metrics_port = 0;
  options.drain_timeout = absl::Seconds(5);
  options.engine.kv_cache_bytes = kv_cache_bytes;
  return options;
}

std::unique_ptr<server::Server> StartTestServer(const server::ServerOptions& options) {
  absl::StatusOr<std::unique_ptr<server::Server>> server = server::Server::Create(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

}  // namespace quill::testing
