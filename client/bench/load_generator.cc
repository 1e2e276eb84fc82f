#include "client/bench/load_generator.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <memory>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "grpcpp/client_context.h"

namespace quill::bench {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Shared state of one run: hands out request indices (and arrival times) to workers and
// keeps the counters the progress line reads.
class RunState {
 public:
  RunState(const BenchOptions& options, Clock::time_point start)
      : options_(options), start_(start), schedule_(options.rate, options.seed) {}

  // Claims the next request: its index and when it should start. Returns false when the
  // request or duration budget is spent.
  bool Claim(int64_t* index, Clock::time_point* when) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (options_.requests > 0 && next_index_ >= options_.requests) return false;
    const Clock::time_point now = Clock::now();
    Clock::time_point at = now;
    if (options_.rate > 0) at = start_ + absl::ToChronoNanoseconds(schedule_.Next());
    if (options_.duration > absl::ZeroDuration() &&
        std::max(at, now) >= start_ + absl::ToChronoNanoseconds(options_.duration)) {
      return false;
    }
    *index = next_index_++;
    *when = at;
    return true;
  }

  std::atomic<int64_t> started{0};
  std::atomic<int64_t> completed{0};
  std::atomic<int64_t> failed{0};
  std::atomic<int64_t> output_tokens{0};
  std::atomic<int64_t> late_arrivals{0};

 private:
  const BenchOptions& options_;
  const Clock::time_point start_;
  absl::Mutex mu_;
  ArrivalSchedule schedule_ ABSL_GUARDED_BY(mu_);
  int64_t next_index_ ABSL_GUARDED_BY(mu_) = 0;
};

// Sends one request and measures it.
RequestRecord RunOne(const StreamFn& stream, const quill::v1::GenerateRequest& request,
                     absl::Duration timeout, RunState& state) {
  RequestRecord record;
  record.prompt_tokens = request.prompt_token_ids().ids_size();
  const Clock::time_point sent = Clock::now();
  Clock::time_point previous = sent;
  bool first = true;
  absl::Status status = stream(request, timeout, [&](int tokens) {
    if (tokens == 0) return;  // e.g. a final message that carries only usage
    const Clock::time_point now = Clock::now();
    if (first) {
      record.ttft = SecondsBetween(sent, now);
      first = false;
    } else {
      record.itl.push_back(SecondsBetween(previous, now) / tokens);
    }
    previous = now;
    record.output_tokens += tokens;
    state.output_tokens.fetch_add(tokens, std::memory_order_relaxed);
  });
  record.e2e = SecondsBetween(sent, Clock::now());
  record.code = status.code();
  record.message = std::string(status.message());
  return record;
}

// One worker: claims requests until the budget is spent, and keeps its own records.
void Worker(const StreamFn& stream, const quill::v1::ModelInfo& info, const BenchOptions& options,
            RunState& state, std::vector<RequestRecord>* records) {
  // The same for every worker: seeded by --seed alone.
  std::mt19937_64 prefix_rng(options.seed ^ 0x5eed5eed5eed5eedull);
  const std::vector<int32_t> shared_prefix =
      MakePromptIds(options.shared_prefix_tokens, info.vocab_size(), info.bos_token_id(),
                    info.eos_token_id(), prefix_rng);
  int64_t index;
  Clock::time_point when;
  while (state.Claim(&index, &when)) {
    if (options.rate > 0) {
      std::this_thread::sleep_until(when);
      if (Clock::now() - when > std::chrono::milliseconds(10)) {
        state.late_arrivals.fetch_add(1, std::memory_order_relaxed);
      }
    }
    // Seeded per request, so the prompts do not depend on which worker sends which request.
    std::seed_seq seq{options.seed, static_cast<uint64_t>(index)};
    std::mt19937_64 rng(seq);
    quill::v1::GenerateRequest request;
    request.set_request_id(absl::StrCat("bench-", options.seed, "-", index));
    for (int32_t id : shared_prefix) request.mutable_prompt_token_ids()->add_ids(id);
    std::vector<int32_t> own =
        MakePromptIds(options.prompt_tokens + (shared_prefix.empty() ? 0 : 1), info.vocab_size(),
                      info.bos_token_id(), info.eos_token_id(), rng);
    // After a shared prefix the prompt's own part has no BOS.
    if (!shared_prefix.empty() && info.bos_token_id() >= 0) own.erase(own.begin());
    own.resize(options.prompt_tokens);
    for (int32_t id : own) request.mutable_prompt_token_ids()->add_ids(id);
    request.set_max_tokens(options.max_tokens);
    request.set_ignore_eos(true);
    request.set_disable_speculation(options.disable_speculation);
    request.mutable_sampling()->set_temperature(options.temperature);
    request.mutable_sampling()->set_seed(options.seed + static_cast<uint64_t>(index));
    state.started.fetch_add(1, std::memory_order_relaxed);
    records->push_back(RunOne(stream, request, options.request_timeout, state));
    records->back().warmup = index < options.warmup_requests;
    (records->back().code == absl::StatusCode::kOk ? state.completed : state.failed)
        .fetch_add(1, std::memory_order_relaxed);
  }
}

std::string CodeName(absl::StatusCode code) { return absl::StatusCodeToString(code); }

nlohmann::json SummaryToJson(const Summary& s) {
  // nlohmann::json writes NaN as null, which is what an empty summary should read as.
  return {{"count", s.count}, {"mean", s.mean}, {"min", s.min}, {"p50", s.p50},
          {"p90", s.p90},     {"p99", s.p99},   {"max", s.max}};
}

std::string SummaryRow(absl::string_view name, const Summary& s) {
  return absl::StrFormat("%-28s %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %8d\n", name, s.mean, s.min,
                         s.p50, s.p90, s.p99, s.max, s.count);
}

}  // namespace

std::vector<int32_t> MakePromptIds(int prompt_tokens, int64_t vocab_size, int32_t bos, int32_t eos,
                                   std::mt19937_64& rng) {
  std::vector<int32_t> ids;
  if (prompt_tokens <= 0 || vocab_size <= 0) return ids;
  ids.reserve(prompt_tokens);
  if (bos >= 0) ids.push_back(bos);
  // SentencePiece vocabularies put their control tokens (unk, bos, eos) first: skip them.
  int64_t low = 0;
  if (bos >= 0 && eos >= 0 && std::max(bos, eos) < 16) low = std::max(bos, eos) + 1;
  if (low >= vocab_size) low = 0;
  std::uniform_int_distribution<int64_t> pick(low, vocab_size - 1);
  while (static_cast<int>(ids.size()) < prompt_tokens) {
    const int64_t id = pick(rng);
    // Fall back to any id for a degenerate vocabulary made only of BOS and EOS.
    if ((id == bos || id == eos) && vocab_size - low > 2) continue;
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

ArrivalSchedule::ArrivalSchedule(double rate, uint64_t seed)
    : rng_(seed), gap_seconds_(rate > 0 ? rate : 1.0) {}

absl::Duration ArrivalSchedule::Next() {
  now_seconds_ += gap_seconds_(rng_);
  return absl::Seconds(now_seconds_);
}

absl::Status ValidateBenchOptions(const BenchOptions& options, const quill::v1::ModelInfo& info) {
  if (options.concurrency < 1) return absl::InvalidArgumentError("--concurrency must be >= 1");
  if (options.requests < 0) return absl::InvalidArgumentError("--requests must be >= 0");
  if (options.warmup_requests < 0) return absl::InvalidArgumentError("--warmup must be >= 0");
  if (options.requests > 0 && options.warmup_requests >= options.requests) {
    return absl::InvalidArgumentError(absl::StrCat("--warmup (", options.warmup_requests,
                                                   ") must be below --requests (", options.requests,
                                                   "): nothing would be left to measure"));
  }
  if (options.requests == 0 && options.duration == absl::ZeroDuration()) {
    return absl::InvalidArgumentError("give --requests or --duration (or both)");
  }
  if (options.rate < 0) return absl::InvalidArgumentError("--rate must be >= 0");
  if (options.prompt_tokens < 1) return absl::InvalidArgumentError("--prompt-tokens must be >= 1");
  if (options.max_tokens < 1) return absl::InvalidArgumentError("--max-tokens must be >= 1");
  if (options.shared_prefix_tokens < 0) {
    return absl::InvalidArgumentError("--shared-prefix-tokens must be >= 0");
  }
  if (info.vocab_size() <= 0) {
    return absl::FailedPreconditionError("the server reported no vocabulary size");
  }
  if (info.context_length() > 0 &&
      options.shared_prefix_tokens + options.prompt_tokens + options.max_tokens >
          info.context_length()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--shared-prefix-tokens + --prompt-tokens + --max-tokens = ",
                     options.shared_prefix_tokens + options.prompt_tokens + options.max_tokens,
                     " exceeds the model's context length ", info.context_length()));
  }
  return absl::OkStatus();
}

StreamFn GrpcStreamFn(client::QuillClient& client, std::string tenant) {
  client::ClientContextHook hook;
  if (!tenant.empty()) {
    hook = [tenant](grpc::ClientContext* context) {
      context->AddMetadata("x-quill-tenant", tenant);
    };
  }
  return [&client, hook](const quill::v1::GenerateRequest& request, absl::Duration timeout,
                         const std::function<void(int)>& on_tokens) {
    return client.Generate(
        request,
        [&](const quill::v1::GenerateResponse& response) { on_tokens(response.token_ids_size()); },
        timeout, hook);
  };
}

absl::StatusOr<BenchReport> RunBench(client::QuillClient& client, const quill::v1::ModelInfo& info,
                                     const BenchOptions& options,
                                     const std::function<void(const BenchProgress&)>& on_progress,
                                     absl::Duration progress_interval) {
  return RunBench([&client] { return GrpcStreamFn(client); }, info, options, on_progress,
                  progress_interval);
}

absl::StatusOr<BenchReport> RunBench(const StreamFnFactory& make_stream_fn,
                                     const quill::v1::ModelInfo& info, const BenchOptions& options,
                                     const std::function<void(const BenchProgress&)>& on_progress,
                                     absl::Duration progress_interval) {
  if (absl::Status status = ValidateBenchOptions(options, info); !status.ok()) return status;
  std::vector<StreamFn> streams;
  for (int i = 0; i < options.concurrency; ++i) streams.push_back(make_stream_fn());
  const Clock::time_point start = Clock::now();
  RunState state(options, start);
  std::vector<std::vector<RequestRecord>> records(options.concurrency);
  std::vector<std::thread> workers;
  workers.reserve(options.concurrency);
  for (int i = 0; i < options.concurrency; ++i) {
    workers.emplace_back(Worker, std::cref(streams[i]), std::cref(info), std::cref(options),
                         std::ref(state), &records[i]);
  }
  absl::Notification done;
  std::thread monitor;
  if (on_progress) {
    monitor = std::thread([&] {
      while (!done.WaitForNotificationWithTimeout(progress_interval)) {
        BenchProgress progress;
        progress.elapsed_seconds = SecondsBetween(start, Clock::now());
        progress.started = state.started.load();
        progress.completed = state.completed.load();
        progress.failed = state.failed.load();
        progress.output_tokens = state.output_tokens.load();
        on_progress(progress);
      }
    });
  }
  for (std::thread& worker : workers) worker.join();
  const double duration = SecondsBetween(start, Clock::now());
  done.Notify();
  if (monitor.joinable()) monitor.join();

  std::vector<RequestRecord> all;
  for (std::vector<RequestRecord>& worker_records : records) {
    std::move(worker_records.begin(), worker_records.end(), std::back_inserter(all));
  }
  return Aggregate(options, all, duration, state.late_arrivals.load());
}

BenchReport Aggregate(const BenchOptions& options, const std::vector<RequestRecord>& records,
                      double duration_seconds, int64_t late_arrivals) {
  BenchReport report;
  report.options = options;
  report.duration_seconds = duration_seconds;
  report.late_arrivals = late_arrivals;
  std::vector<double> ttft, itl, tpot, e2e;
  for (const RequestRecord& record : records) {
    if (record.code != absl::StatusCode::kOk) {
      ++report.failed;
      const std::string name = CodeName(record.code);
      if (report.errors[name]++ == 0) report.error_examples[name] = record.message;
      continue;
    }
    ++report.completed;
    report.prompt_tokens += record.prompt_tokens;
    report.output_tokens += record.output_tokens;
    if (record.warmup) continue;
    if (record.output_tokens > 0) ttft.push_back(record.ttft * 1e3);
    for (double gap : record.itl) itl.push_back(gap * 1e3);
    if (record.output_tokens > 1) {
      tpot.push_back((record.e2e - record.ttft) * 1e3 / (record.output_tokens - 1));
    }
    e2e.push_back(record.e2e * 1e3);
  }
  if (duration_seconds > 0) {
    report.request_throughput = report.completed / duration_seconds;
    report.output_token_throughput = report.output_tokens / duration_seconds;
    report.total_token_throughput =
        (report.prompt_tokens + report.output_tokens) / duration_seconds;
  }
  report.ttft_ms = Summarize(std::move(ttft));
  report.itl_ms = Summarize(std::move(itl));
  report.tpot_ms = Summarize(std::move(tpot));
  report.e2e_ms = Summarize(std::move(e2e));
  return report;
}

nlohmann::json ReportToJson(const BenchReport& report) {
  const BenchOptions& o = report.options;
  nlohmann::json config = {{"mode", o.rate > 0 ? "open-loop" : "closed-loop"},
                           {"api", o.api},
                           {"concurrency", o.concurrency},
                           {"requests", o.requests},
                           {"warmup_requests", o.warmup_requests},
                           {"duration_limit_s", absl::ToDoubleSeconds(o.duration)},
                           {"rate", o.rate},
                           {"prompt_tokens", o.prompt_tokens},
                           {"shared_prefix_tokens", o.shared_prefix_tokens},
                           {"max_tokens", o.max_tokens},
                           {"temperature", o.temperature},
                           {"disable_speculation", o.disable_speculation},
                           {"seed", o.seed}};
  nlohmann::json errors = nlohmann::json::object();
  for (const auto& [name, count] : report.errors) {
    errors[name] = {{"count", count}, {"example", report.error_examples.at(name)}};
  }
  return {{"config", config},
          {"duration_s", report.duration_seconds},
          {"completed", report.completed},
          {"failed", report.failed},
          {"errors", errors},
          {"prompt_tokens", report.prompt_tokens},
          {"output_tokens", report.output_tokens},
          {"request_throughput", report.request_throughput},
          {"output_token_throughput", report.output_token_throughput},
          {"total_token_throughput", report.total_token_throughput},
          {"ttft_ms", SummaryToJson(report.ttft_ms)},
          {"itl_ms", SummaryToJson(report.itl_ms)},
          {"tpot_ms", SummaryToJson(report.tpot_ms)},
          {"e2e_ms", SummaryToJson(report.e2e_ms)},
          {"late_arrivals", report.late_arrivals}};
}

std::string FormatReport(const BenchReport& report) {
  const BenchOptions& o = report.options;
  std::string out;
  if (o.rate > 0) {
    absl::StrAppendFormat(&out,
                          "== quill bench (%s): open loop, %.2f req/s (Poisson), at most %d in "
                          "flight ==\n",
                          o.api, o.rate, o.concurrency);
  } else {
    absl::StrAppendFormat(&out, "== quill bench (%s): closed loop, concurrency %d ==\n", o.api,
                          o.concurrency);
  }
  absl::StrAppendFormat(&out, "%-34s %d prompt + %d output tokens\n",
                        "Request shape:", o.prompt_tokens, o.max_tokens);
  absl::StrAppendFormat(&out, "%-34s %d\n", "Successful requests:", report.completed);
  absl::StrAppendFormat(&out, "%-34s %d\n", "Failed requests:", report.failed);
  if (o.warmup_requests > 0) {
    absl::StrAppendFormat(&out, "%-34s first %d (not in the latencies)\n",
                          "Warm-up requests:", o.warmup_requests);
  }
  for (const auto& [name, count] : report.errors) {
    absl::StrAppendFormat(&out, "  %-32s %d (e.g. \"%s\")\n", name, count,
                          report.error_examples.at(name));
  }
  absl::StrAppendFormat(&out, "%-34s %.2f\n", "Duration (s):", report.duration_seconds);
  absl::StrAppendFormat(&out, "%-34s %d / %d\n", "Prompt / output tokens:", report.prompt_tokens,
                        report.output_tokens);
  absl::StrAppendFormat(&out, "%-34s %.2f\n",
                        "Request throughput (req/s):", report.request_throughput);
  absl::StrAppendFormat(&out, "%-34s %.1f\n",
                        "Output token throughput (tok/s):", report.output_token_throughput);
  absl::StrAppendFormat(&out, "%-34s %.1f\n",
                        "Total token throughput (tok/s):", report.total_token_throughput);
  if (o.rate > 0) {
    absl::StrAppendFormat(&out, "%-34s %d\n", "Late arrivals (>10 ms):", report.late_arrivals);
  }
  absl::StrAppendFormat(&out, "%-28s %9s %9s %9s %9s %9s %9s %8s\n", "Latency (ms)", "mean", "min",
                        "p50", "p90", "p99", "max", "count");
  out += SummaryRow("Time to first token", report.ttft_ms);
  out += SummaryRow("Inter-token latency", report.itl_ms);
  out += SummaryRow("Time per output token", report.tpot_ms);
  out += SummaryRow("End-to-end latency", report.e2e_ms);
  return out;
}

}  // namespace quill::bench
