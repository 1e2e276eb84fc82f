#pragma once

// The in-process server the integration tests start: one set of options to start from, so
// each test states only what it changes, and a fixture base for suites that share one.

#include <cstdint>
#include <memory>

#include "client/quill_client.h"
#include "gtest/gtest.h"
#include "server/server.h"

namespace quill::testing {

// kjv-1m (../shared) in exact mode on 127.0.0.1: gRPC and /metrics on free ports (port 0),
// no HTTP API (set http_port = 0 for one), a 5 s drain, and `kv_cache_bytes` of KV cache.
server::ServerOptions KjvTestServerOptions(int64_t kv_cache_bytes);

// Server::Create; a test failure and nullptr if it fails.
std::unique_ptr<server::Server> StartTestServer(const server::ServerOptions& options);

// The in-process server and gRPC client that a suite's tests share: the fixture's
// SetUpTestSuite starts them (StartSharedServer), and they stop after its last test.
// `Suite` is the fixture itself, so that each suite has its own pair.
template <typename Suite>
class SharedServerTest : public ::testing::Test {
 protected:
  // A test failure, and no server, if it does not start.
  static void StartSharedServer(const server::ServerOptions& options) {
    server_ = StartTestServer(options);
    if (server_ != nullptr) client_ = client::QuillClient::Connect(server_->address());
  }
  static void TearDownTestSuite() {
    client_.reset();
    server_.reset();
  }

  inline static std::unique_ptr<server::Server> server_;
  inline static std::unique_ptr<client::QuillClient> client_;
};

}  // namespace quill::testing
