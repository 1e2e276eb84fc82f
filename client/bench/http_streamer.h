#pragma once

// `quill bench --api http`: sends a benchmark request to quill-server's OpenAI-compatible
// POST /v1/completions as a stream (server-sent events) over one keep-alive HTTP/1.1
// connection per worker, so the same load runs over either front end. Token counts per
// event come from vLLM's stream_options.continuous_usage_stats, which quill-server
// implements (each event carries the running usage).

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "quill/v1/quill.pb.h"

namespace quill::bench {

// The OpenAI request body for a Generate request with prompt token ids (the benchmark's).
std::string CompletionBodyFor(const quill::v1::GenerateRequest& request);

// The running completion_tokens of one SSE event's data, or -1 when it has none.
int CompletionTokensOf(absl::string_view event_data);

// One worker's connection. Not thread-safe; reconnects after an error.
class HttpStreamer {
 public:
  // `address`: "host:port" of the HTTP API.
  explicit HttpStreamer(std::string address);
  ~HttpStreamer();

  // Streams `request`; calls on_tokens(n) as each event with n new tokens arrives. The
  // status says how the request ended: OK, or the HTTP error mapped back to a code
  // (429 RESOURCE_EXHAUSTED, 503 UNAVAILABLE, 400 INVALID_ARGUMENT, ...), UNAVAILABLE
  // for connection failures, DEADLINE_EXCEEDED after `timeout`.
  absl::Status Stream(const quill::v1::GenerateRequest& request, absl::Duration timeout,
                      const std::function<void(int)>& on_tokens);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace quill::bench
