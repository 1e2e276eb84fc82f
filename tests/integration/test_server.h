#pragma once

// The in-process server the integration tests start: one set of options to start from, so
// each test states only what it changes.

#include <cstdint>
#include <memory>

#include "server/server.h"

namespace quill::testing {

// kjv-1m (../shared) in exact mode on 127.0.0.1: gRPC and /metrics on free ports (port 0),
// no HTTP API (set http_port = 0 for one), a 5 s drain, and `kv_cache_bytes` of KV cache.
server::ServerOptions KjvTestServerOptions(int64_t kv_cache_bytes);

// Server::Create; a test failure and nullptr if it fails.
std::unique_ptr<server::Server> StartTestServer(const server::ServerOptions& options);

}  // namespace quill::testing
