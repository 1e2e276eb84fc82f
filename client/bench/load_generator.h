#pragma once

// The load generator behind `quill bench`: closed-loop (C workers, each sending its next
// request as soon as the previous one ends) or open-loop (Poisson arrivals at a fixed rate,
// at most C in flight). Prompts are exactly P random token ids (BOS first) and ignore_eos
// is set, so every successful request produces exactly T tokens and runs are comparable.

#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/bench/percentiles.h"
#include "client/quill_client.h"
#include "nlohmann/json.hpp"
#include "quill/v1/quill.pb.h"

namespace quill::bench {

struct BenchOptions {
  // Closed loop: the number of workers. Open loop: the most requests in flight at once.
  int concurrency = 4;
  // Stop starting requests after this many (0 = no limit).
  int64_t requests = 100;
  // Stop starting requests after this long (0 = no limit). Requests in flight finish.
  absl::Duration duration = absl::ZeroDuration();
  // The first this-many requests (in start order) run but are left out of the latency
  // figures: a closed loop starts with every worker's prompt arriving at once, a burst the
  // steady state never sees again. Throughput still counts the whole run.
  int64_t warmup_requests = 0;
  // Open loop: mean arrivals per second (Poisson). 0 = closed loop.
  double rate = 0;
  int prompt_tokens = 32;
  // Every prompt starts with the same this-many ids (BOS first; a shared system prompt,
  // for prefix caching), followed by its own prompt_tokens ids. 0 = none.
  int shared_prefix_tokens = 0;
  int max_tokens = 64;
  float temperature = 0;  // 0 = greedy
  uint64_t seed = 0;      // prompts and arrival times
  // Opts every request out of the server's speculative decoding (speed with it off).
  bool disable_speculation = false;
  absl::Duration request_timeout = absl::Seconds(60);
  std::string api = "grpc";  // the front end measured: "grpc" or "http" (for the report)
};

// A snapshot for the live progress line.
struct BenchProgress {
  double elapsed_seconds = 0;
  int64_t started = 0;
  int64_t completed = 0;  // finished OK
  int64_t failed = 0;
  int64_t output_tokens = 0;
};

// One request's outcome; latencies are measured on the client, in seconds.
struct RequestRecord {
  absl::StatusCode code = absl::StatusCode::kOk;
  std::string message;
  double ttft = 0;          // send -> first message with tokens
  double e2e = 0;           // send -> stream finished
  std::vector<double> itl;  // per later message: gap since the previous one / its tokens
  int64_t output_tokens = 0;
  int64_t prompt_tokens = 0;
  bool warmup = false;  // counted in throughput, left out of the latency figures
};

struct BenchReport {
  BenchOptions options;
  double duration_seconds = 0;  // first start -> last completion
  int64_t completed = 0;
  int64_t failed = 0;
  std::map<std::string, int64_t> errors;              // status code name -> count
  std::map<std::string, std::string> error_examples;  // status code name -> first message
  int64_t prompt_tokens = 0;                          // of successful requests
  int64_t output_tokens = 0;                          // of successful requests
  double request_throughput = 0;                      // completed / duration
  double output_token_throughput = 0;                 // output tokens / duration
  double total_token_throughput = 0;                  // (prompt + output tokens) / duration
  Summary ttft_ms;
  Summary itl_ms;
  Summary tpot_ms;  // per request: (e2e - ttft) / (output tokens - 1)
  Summary e2e_ms;
  int64_t late_arrivals = 0;  // open loop: started >10 ms after their arrival time
};

// Token ids for one prompt: exactly `prompt_tokens` ids, `bos` first (if >= 0), the rest
// uniform over the vocabulary minus BOS/EOS and, for SentencePiece-style vocabularies whose
// specials are the first ids, minus those low control ids.
std::vector<int32_t> MakePromptIds(int prompt_tokens, int64_t vocab_size, int32_t bos, int32_t eos,
                                   std::mt19937_64& rng);

// Poisson arrivals: each Next() returns the next arrival's offset from the start.
class ArrivalSchedule {
 public:
  ArrivalSchedule(double rate, uint64_t seed);
  absl::Duration Next();

 private:
  std::mt19937_64 rng_;
  std::exponential_distribution<double> gap_seconds_;
  double now_seconds_ = 0;
};

// Sends one streaming request and calls on_tokens(n) as each message with n new tokens
// arrives; returns how the request ended. One per worker (it may hold a connection).
using StreamFn =
    std::function<absl::Status(const quill::v1::GenerateRequest& request, absl::Duration timeout,
                               const std::function<void(int)>& on_tokens)>;
// Makes each worker's StreamFn (called once per worker, before the run starts).
using StreamFnFactory = std::function<StreamFn()>;

// A StreamFn over gRPC's Generate, sharing `client` (one HTTP/2 channel) between workers.
// `tenant` not empty: every call carries `x-quill-tenant: tenant` (a server without API
// keys admits waiting requests fairly across tenants; with keys the key is the tenant).
StreamFn GrpcStreamFn(client::QuillClient& client, std::string tenant = "");

// Validates `options` against the model (vocab, context length, server limits).
absl::Status ValidateBenchOptions(const BenchOptions& options, const quill::v1::ModelInfo& info);

// Runs the benchmark. `on_progress` (optional) is called about every `progress_interval`
// from a separate thread while requests run. Returns INVALID_ARGUMENT for bad options;
// request failures are counted in the report, not returned.
absl::StatusOr<BenchReport> RunBench(
    client::QuillClient& client, const quill::v1::ModelInfo& info, const BenchOptions& options,
    const std::function<void(const BenchProgress&)>& on_progress = nullptr,
    absl::Duration progress_interval = absl::Seconds(1));
// The same over any front end: each worker sends through its own StreamFn.
absl::StatusOr<BenchReport> RunBench(
    const StreamFnFactory& make_stream_fn, const quill::v1::ModelInfo& info,
    const BenchOptions& options,
    const std::function<void(const BenchProgress&)>& on_progress = nullptr,
    absl::Duration progress_interval = absl::Seconds(1));

// Aggregates per-request records into a report (used by RunBench; public for tests).
BenchReport Aggregate(const BenchOptions& options, const std::vector<RequestRecord>& records,
                      double duration_seconds, int64_t late_arrivals);

nlohmann::json ReportToJson(const BenchReport& report);
// The human-readable table.
std::string FormatReport(const BenchReport& report);

}  // namespace quill::bench
