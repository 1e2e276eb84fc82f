// `quill bench`: a closed- or open-loop load generator with latency percentiles.

#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "client/bench/http_streamer.h"
#include "client/bench/load_generator.h"
#include "client/cli/cli_common.h"
#include "client/quill_client.h"

namespace quill::cli {

int BenchCommand(const std::vector<std::string>& args) {
  ConnectionFlags connection;
  std::string http_addr;
  bench::BenchOptions options;
  int requests = -1;  // -1: 100, or no limit when --duration is given
  int warmup = 0;
  double temperature = 0;
  bool json = false;
  bool quiet = false;
  std::string tenant;
  FlagParser parser(
      "quill bench [flags]",
      "Load-tests a server. Closed loop (default): --concurrency workers each send their next "
      "request as soon as the previous one ends. Open loop (--rate): requests arrive as a "
      "Poisson process at --rate per second, at most --concurrency in flight. Every request "
      "sends exactly --prompt-tokens random token ids (BOS first) and generates exactly "
      "--max-tokens tokens (ignore_eos). Reports request and token throughput and client-side "
      "TTFT, inter-token latency (gap between streamed messages divided by their tokens), time "
      "per output token and end-to-end latency at p50/p90/p99 (nearest rank), and errors by "
      "status code. A progress line is updated on stderr about once a second.");
  connection.Register(parser);
  parser.AddString("api", &options.api,
                   "Front end to load: 'grpc' (Generate) or 'http' (the OpenAI-compatible "
                   "POST /v1/completions, streamed; one keep-alive connection per worker). The "
                   "model's details come over gRPC either way.");
  parser.AddString("http-addr", &http_addr,
                   "HTTP API address HOST:PORT for --api http. Default: --addr's host, port "
                   "8080.");
  parser.AddInt("concurrency", &options.concurrency,
                "Closed loop: workers. Open loop: most requests in flight.");
  parser.AddInt("requests", &requests, "Requests to send (0 = no limit).");
  parser.SetDefaultText("requests", "100, or no limit with --duration");
  parser.AddDuration("duration", &options.duration,
                     "Stop starting requests after this long (e.g. 20s); requests in flight "
                     "finish. 0 = no limit.");
  parser.AddInt("warmup", &warmup,
                "Leave the first this-many requests (in start order) out of the latency "
                "figures. A closed loop starts with every worker's first prompt arriving at "
                "once, a burst its steady state never repeats; --warmup equal to "
                "--concurrency measures the steady state. Throughput counts the whole run.");
  parser.AddDouble("rate", &options.rate, "Open loop: mean requests per second; 0 = closed loop.");
  parser.AddInt("prompt-tokens", &options.prompt_tokens,
                "Prompt length in tokens (after the shared prefix, if any).");
  parser.AddInt("shared-prefix-tokens", &options.shared_prefix_tokens,
                "Start every prompt with the same this-many random ids (BOS first), like a "
                "shared system prompt; exercises the server's prefix cache. 0 = none.");
  parser.AddInt("max-tokens", &options.max_tokens, "Tokens generated per request.");
  parser.AddDouble("temperature", &temperature, "Sampling temperature; 0 is greedy.");
  parser.AddUint64("seed", &options.seed, "Seed for the prompts and the arrival times.");
  parser.AddBool("disable-speculation", &options.disable_speculation,
                 "Opt every request out of the server's speculative decoding, to compare speed "
                 "with it on and off.");
  parser.AddDuration("timeout", &options.request_timeout, "Deadline of each request.");
  parser.AddBool("json", &json, "Print the report as one JSON object on stdout.");
  parser.AddBool("quiet", &quiet, "No progress line.");
  parser.AddString("tenant", &tenant,
                   "Send 'x-quill-tenant: TENANT' with every request (--api grpc only). A "
                   "server without API keys admits waiting requests fairly across tenants; "
                   "with keys the key is the tenant and the header is ignored.");
  std::vector<std::string> positional;
  if (int code = ParseFlags(parser, args, &positional); code >= 0) return code;
  if (!positional.empty()) {
    std::cerr << "error: quill bench takes no arguments (see --help)\n";
    return kExitUsage;
  }
  options.requests = requests >= 0 ? requests : (options.duration > absl::ZeroDuration() ? 0 : 100);
  options.temperature = static_cast<float>(temperature);
  options.warmup_requests = warmup;
  if (options.api != "grpc" && options.api != "http") {
    std::cerr << "error: --api must be grpc or http, got \"" << options.api << "\"\n";
    return kExitUsage;
  }
  if (!tenant.empty() && options.api != "grpc") {
    std::cerr << "error: --tenant works with --api grpc only\n";
    return kExitUsage;
  }
  const std::string& addr = connection.addr;
  if (http_addr.empty()) http_addr = addr.substr(0, addr.rfind(':')) + ":8080";

  absl::StatusOr<std::unique_ptr<client::QuillClient>> connected = connection.Connect();
  if (!connected.ok()) return PrintError(connected.status());
  std::unique_ptr<client::QuillClient> client = *std::move(connected);
  absl::StatusOr<quill::v1::ModelInfo> info = client->GetModelInfo(absl::Seconds(30));
  if (!info.ok()) return PrintError(info.status());
  if (absl::Status status = bench::ValidateBenchOptions(options, *info); !status.ok()) {
    std::cerr << "error: " << status.message() << "\n";
    return kExitUsage;
  }

  // On a terminal the line is redrawn in place; in a log it is one line per update.
  const bool tty = isatty(STDERR_FILENO);
  std::function<void(const bench::BenchProgress&)> progress;
  if (!quiet) {
    progress = [tty](const bench::BenchProgress& p) {
      const std::string line = absl::StrFormat(
          "[%6.1fs] started %d, done %d, failed %d, in flight %d | %.2f req/s, %.1f tok/s",
          p.elapsed_seconds, p.started, p.completed, p.failed, p.started - p.completed - p.failed,
          p.elapsed_seconds > 0 ? p.completed / p.elapsed_seconds : 0.0,
          p.elapsed_seconds > 0 ? p.output_tokens / p.elapsed_seconds : 0.0);
      std::cerr << (tty ? "\r\033[K" : "") << line << (tty ? "" : "\n") << std::flush;
    };
  }
  bench::StreamFnFactory make_stream_fn = [&client, &tenant] {
    return bench::GrpcStreamFn(*client, tenant);
  };
  if (options.api == "http") {
    make_stream_fn = [&http_addr]() -> bench::StreamFn {
      auto streamer = std::make_shared<bench::HttpStreamer>(http_addr);
      return [streamer](const quill::v1::GenerateRequest& request, absl::Duration timeout,
                        const std::function<void(int)>& on_tokens) {
        return streamer->Stream(request, timeout, on_tokens);
      };
    };
  }
  absl::StatusOr<bench::BenchReport> report =
      bench::RunBench(make_stream_fn, *info, options, progress);
  if (!quiet && tty) std::cerr << "\n";
  if (!report.ok()) return PrintError(report.status());
  if (json) {
    std::cout << DumpJson(bench::ReportToJson(*report), 2) << "\n";
  } else {
    std::cout << bench::FormatReport(*report);
  }
  return report->completed > 0 ? kExitOk : kExitFailure;
}

}  // namespace quill::cli
