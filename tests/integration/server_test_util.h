#pragma once

// Helpers shared by the server integration tests: building requests, collecting streams,
// running quill-run, polling /metrics.

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/quill_client.h"
#include "grpcpp/grpcpp.h"
#include "quill/v1/quill.grpc.pb.h"
#include "quill/v1/quill.pb.h"
#include "tests/testing/prometheus_text.h"

namespace quill::testing {

quill::v1::GenerateRequest TextRequest(const std::string& prompt, int max_tokens);
quill::v1::GenerateRequest IdsRequest(const std::vector<int>& ids, int max_tokens);
void SetSampling(quill::v1::GenerateRequest* request, float temperature, float top_p,
                 uint64_t seed);
// The same for any request's sampling (a ChatRequest's).
void SetSampling(quill::v1::SamplingParams* sampling, float temperature, float top_p,
                 uint64_t seed);

// Everything one stream produced, including a non-OK status.
struct Stream {
  absl::Status status;
  std::vector<int> ids;
  std::string text;
  std::string reasoning;  // Chat with a reasoning model: the thought
  int messages = 0;
  quill::v1::GenerateResponse last;
  std::vector<quill::v1::TokenLogprobs> logprobs;
  std::vector<quill::v1::TokenLogprobs> prompt_logprobs;
};
Stream Collect(client::QuillClient& client, const quill::v1::GenerateRequest& request,
               absl::Duration timeout = absl::Seconds(60), client::GenerateCall* call = nullptr,
               const std::function<void(const Stream&)>& on_message = nullptr);

// A channel whose streams get a tiny HTTP/2 receive window (and a connection of its own), so
// that a stream nobody reads stops the server's writes after a few messages instead of after
// the default 64 KiB. With logprobs on, the server then pauses the request in the engine,
// where it keeps its KV blocks (reserved for prompt + max_tokens) until it is cancelled or
// stalls out: a test can hold the KV cache full for as long as it needs.
std::shared_ptr<grpc::Channel> TinyWindowChannel(const std::string& address);

// One Generate call whose messages are never read (until Drain).
struct NeverRead {
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<quill::v1::GenerateResponse>> reader;

  // Starts `request` with logprobs, so that every message is a few hundred bytes and fills
  // a TinyWindowChannel at once, and a 120 s deadline that bounds a test gone wrong. Blocks
  // while the connection has no free stream.
  void Start(quill::v1::Generator::Stub& stub, quill::v1::GenerateRequest request);

  // Reads what is left, adding the tokens to *tokens, and returns the status.
  grpc::Status Drain(int* tokens);
};

// kjv-1m: 2 * 4 layers * 2 kv heads * 32 dims * 4 bytes = 2 KiB per token, 32 KiB per
// 16-token block: 512 KiB is 16 blocks = 256 tokens, one LongRequest() at a time.
inline constexpr size_t kOneLongRequestOfKv = 512 << 10;
// "In the beginning" and 240 tokens with EOS ignored: with its prompt, 16 KV blocks.
quill::v1::GenerateRequest LongRequest();

// Holds a server's KV blocks with a LongRequest() whose client never reads: the server
// pauses it after a few tokens and it keeps its blocks until this is destroyed (which
// cancels it). Whatever comes next must wait for KV blocks, or a draining server for it,
// however fast the machine is. Wait for quill_requests_paused before relying on it.
class KvHog {
 public:
  // `hook` adds metadata to the call (an API key, a tenant).
  explicit KvHog(const std::string& address, const client::ClientContextHook& hook = nullptr);
  ~KvHog();

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<quill::v1::Generator::Stub> stub_;
  NeverRead call_;
};

// A Chat request of (role, content) pairs.
// A compact chat template that lists the tools' names and writes calls as Qwen2.5 and
// Hermes do, <tool_call>{"name": ..., "arguments": {...}}</tool_call> (Qwen2.5's own tool
// prompt outgrows kjv-1m's 256-token context): one user question with tools renders as
// "<tools>a,b</tools><user>question<assistant>".
inline constexpr char kHermesToolsTemplate[] =
    "{% if tools %}<tools>{% for t in tools %}{{ t.function.name }}{% if not loop.last %},"
    "{% endif %}{% endfor %}</tools>{% endif %}{% for m in messages %}<{{ m.role }}>"
    "{% if m.content %}{{ m.content }}{% endif %}{% if m.tool_calls %}{% for c in m.tool_calls %}"
    "<tool_call>{\"name\": \"{{ c.function.name }}\", \"arguments\": "
    "{{ c.function.arguments | tojson }}}</tool_call>{% endfor %}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}";

quill::v1::ChatRequest ChatRequestOf(
    const std::vector<std::pair<std::string, std::string>>& messages, int max_tokens);
// Collect for a Chat stream.
Stream CollectChat(client::QuillClient& client, const quill::v1::ChatRequest& request,
                   absl::Duration timeout = absl::Seconds(60));

// Runs $QUILL_BINARY_DIR/engine/tools/quill-run with `args` (plus --ids) and returns the
// generated ids (the last line of digits and commas).
absl::StatusOr<std::vector<int>> QuillRunIds(const std::vector<std::string>& args);

// Runs quill-run --render-chat with `args` and returns exactly what it printed (the chat
// prompt), or INTERNAL with its output when it fails.
absl::StatusOr<std::string> QuillRunRenderChat(const std::vector<std::string>& args);
// The prompt quill-run renders for the (role, content) `messages` with `template_path` and
// `model`'s BOS/EOS text.
absl::StatusOr<std::string> RenderChat(
    const std::vector<std::pair<std::string, std::string>>& messages, const std::string& model,
    const std::string& template_path);

// Scrapes 127.0.0.1:<port>/metrics until `done(text)` holds and returns that scrape;
// DEADLINE_EXCEEDED if it never held within `timeout`.
//
// What a client has, /metrics has: when a request ends, the engine counts its outcome
// (quill_requests_total, then its latency histograms, then the per-tenant series), records
// the step it ended in (step and batch histograms, draft and prefix counters, the
// inter-token gaps), publishes the gauges (running, waiting, paused, KV blocks), and only
// then sends the request's last message. So one scrape after a call returned shows it. A
// call the client ended itself, by cancelling or by its own deadline, may not be counted
// yet: a test waits for that here.
absl::StatusOr<PromText> ScrapeUntil(int port, const std::function<bool(const PromText&)>& done,
                                     absl::Duration timeout = absl::Seconds(10));

// A baseline for deltas: a scrape that shows the server idle (nothing running, waiting or
// holding KV blocks) and began after another scrape had shown it idle. The gauges leave
// idle when a request is admitted and are published last after its step (above), so the
// requests and steps before are in every other metric once they show idle; but one scrape
// reads its families one after another, and the first to show idle may have read the
// counters before the gauges turned (CI: 13 "deadline" outcomes beside 16 durations). Empty,
// with a test failure, if the server is not idle within 10 s.
PromText ScrapeWhenIdle(int port);

// True once 127.0.0.1:<metrics_port>/metrics shows `value` for the gauge `name` (false
// after 10 s).
bool GaugeReaches(int metrics_port, const std::string& name, double value);

// A value that must exist (0 if absent, with a test failure).
double Metric(const PromText& text, const std::string& name, const Labels& labels = {});

}  // namespace quill::testing
