#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "engine/kernels/kv_element.h"
#include "engine/kernels/linear.h"
#include "engine/runtime/engine.h"
#include "server/security/tls_files.h"

namespace quill::server {

// Everything quill-server is configured with (main.cc fills it from flags/environment;
// tests fill it directly).
struct ServerOptions {
  std::string model_path;
  // A Jinja chat template file that replaces the model's tokenizer.chat_template; empty =
  // the model's (without one, chat requests are FAILED_PRECONDITION). Parsed at startup:
  // a template that does not parse fails Server::Create.
  std::string chat_template_path;
  engine::kernels::Precision precision = engine::kernels::Precision::kFast;
  // What the KV cache stores (also the draft model's); unset: the precision's own (f32
  // exact, f16 fast). See ParseKvCacheType.
  std::optional<engine::kernels::KvElement> kv_cache_type;
  // Speculative decoding's draft model (same vocabulary); empty = n-gram drafting. Loaded
  // with the served model's precision and batch size; needs engine.spec_tokens > 0.
  std::string draft_model_path;

  std::string host = "127.0.0.1";
  int port = 50051;          // 0 = any free port (see Server::port())
  std::string metrics_host;  // empty = same as host
  int metrics_port = 9090;   // 0 = any free port; negative = no metrics endpoint
  // The /metrics HTTP server gives each open connection a thread of its own, and drops a
  // connection that has not sent a whole request (or taken the response) within the
  // timeout: stalled or idle clients hold at most `metrics_threads` threads for at most
  // `metrics_request_timeout` each, so scrapes keep being answered.
  int metrics_threads = 16;
  absl::Duration metrics_request_timeout = absl::Seconds(2);
  // Per-tenant metric series (QuillMetrics' per_tenant); off = no tenant label anywhere.
  bool metrics_per_tenant = false;
  std::string http_host;  // empty = same as host
  // OpenAI-compatible HTTP API; 0 = any free port; negative = off. Off unless asked for
  // (quill-server's --http-port defaults to 8080), so that code and tests building a
  // Server never bind a fixed port they did not name.
  int http_port = -1;
  int http_threads = 2;  // HTTP io threads (they only parse, format and copy bytes)

  engine::EngineOptions engine;

  // TLS on the gRPC and HTTP API listeners (not on /metrics: see README "Security").
  TlsFiles tls;
  // One API key per line; every gRPC call and HTTP API request must carry
  // `authorization: Bearer KEY` (health checks excepted). Empty: no authentication.
  std::string api_keys_file;
  // gRPC server reflection. Unset: on only when `host` is a loopback address, so that a
  // server reachable from the network does not describe itself to anyone who asks.
  std::optional<bool> reflection;

  // Running streams get this long to finish on shutdown; the rest end UNAVAILABLE.
  absl::Duration drain_timeout = absl::Seconds(30);
  // After the drain, gRPC gets this long to flush the last messages before it cancels.
  absl::Duration grpc_shutdown_grace = absl::Seconds(5);
  // Requests larger than this are refused by gRPC (RESOURCE_EXHAUSTED) and HTTP (413).
  int max_receive_message_bytes = 4 << 20;
  // No response message is larger than this (gRPC fails a call that would send one).
  int max_send_message_bytes = 4 << 20;
  // GRPC_ARG_MAX_CONCURRENT_STREAMS: calls one gRPC connection may have open at once
  // (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS; more wait in the client). Each open stream
  // holds at most kMaxUnsentChunks unsent chunks (server/stream_limits.h).
  int grpc_max_concurrent_streams = 100;
};

// "512MiB", "2GiB", "64M", "1000000", "1.5GiB", "10KB" -> bytes. KiB/MiB/GiB/TiB and
// the bare K/M/G/T are powers of 1024; KB/MB/GB/TB powers of 1000; B or nothing: bytes.
// Case-insensitive. INVALID_ARGUMENT for anything else, a negative value or overflow.
absl::StatusOr<int64_t> ParseByteSize(absl::string_view text);
// 536870912 -> "512MiB" (exact when a power-of-1024 unit divides it, else plain bytes).
std::string FormatByteSize(int64_t bytes);

// 3674624 -> "3.50MiB" (for logs; not exact).
std::string HumanBytes(int64_t bytes);

// "fast" / "exact".
absl::StatusOr<engine::kernels::Precision> ParsePrecision(absl::string_view text);
absl::string_view PrecisionName(engine::kernels::Precision precision);

// --kv-cache-type: "auto" (nullopt: the precision's own), "f32", "f16", "bf16" or "q8".
// Whether the element suits the precision and the model is Model::Load's to say.
absl::StatusOr<std::optional<engine::kernels::KvElement>> ParseKvCacheType(absl::string_view text);

// The candidates for the built-in model when --model is not given, in order:
// $QUILL_MODEL (if `env_model` is not empty), <exe dir>/../share/quill/models/kjv-1m.gguf,
// <exe dir>/../../models/kjv-1m.gguf (the build tree inside the repo), then
// ./models/kjv-1m.gguf.
std::vector<std::string> DefaultModelCandidates(absl::string_view exe_path,
                                                absl::string_view env_model);
// The first candidate that exists; NOT_FOUND listing them all otherwise.
absl::StatusOr<std::string> ResolveDefaultModel(absl::string_view exe_path,
                                                absl::string_view env_model);

// "127.0.0.1", "::1", "localhost" (and the rest of 127/8): only this machine can connect.
bool IsLoopbackHost(absl::string_view host);

// "host:port", bracketing IPv6 literals.
std::string JoinHostPort(absl::string_view host, int port);

}  // namespace quill::server
