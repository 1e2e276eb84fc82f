// quill-server: serves a GGUF model over gRPC. The only file with ABSL_FLAG: flags (and
// their QUILL_* environment fallbacks) -> ServerOptions -> Server::Create().

#include <omp.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/time.h"
#include "server/server.h"
#include "server/server_options.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace quill::server {

// A byte count flag that accepts unit suffixes (512MiB, 2GiB, 1.5G, 500MB).
struct ByteSizeFlag {
  int64_t bytes = 0;
};
bool AbslParseFlag(absl::string_view text, ByteSizeFlag* flag, std::string* error) {
  absl::StatusOr<int64_t> bytes = ParseByteSize(text);
  if (!bytes.ok()) {
    *error = std::string(bytes.status().message());
    return false;
  }
  flag->bytes = *bytes;
  return true;
}
std::string AbslUnparseFlag(ByteSizeFlag flag) { return FormatByteSize(flag.bytes); }

}  // namespace quill::server

namespace {
const quill::engine::EngineOptions kEngineDefaults;
}  // namespace

ABSL_FLAG(std::string, model, "",
          "GGUF model to serve. Default: the built-in kjv-1m model, looked up at "
          "<exe dir>/../share/quill/models/kjv-1m.gguf, <exe dir>/../../models/kjv-1m.gguf "
          "and ./models/kjv-1m.gguf.");
ABSL_FLAG(std::string, chat_template, "",
          "Jinja chat template file used for chat requests (gRPC Chat, /v1/chat/completions) "
          "instead of the model's tokenizer.chat_template. Parsed at startup: a template that "
          "does not parse stops the server with the error and its line. Without either, chat "
          "requests fail with FAILED_PRECONDITION (raw prompts still work).");
ABSL_FLAG(std::string, host, "127.0.0.1",
          "Address the gRPC server binds (0.0.0.0 for every interface).");
ABSL_FLAG(int, port, 50051,
          "gRPC port. 0 picks a free port; the log says 'listening on HOST:PORT'.");
ABSL_FLAG(std::string, metrics_host, "",
          "Address the Prometheus /metrics endpoint binds. Default: the value of --host.");
ABSL_FLAG(int, metrics_port, 9090,
          "Port of the Prometheus /metrics endpoint. 0 picks a free port (the log says "
          "'metrics on http://HOST:PORT/metrics'); -1 turns the endpoint off.");
ABSL_FLAG(int, metrics_threads, 16,
          "Connections the /metrics endpoint serves at once (a thread each); stalled clients "
          "beyond that wait in its accept queue.");
ABSL_FLAG(absl::Duration, metrics_timeout, absl::Seconds(2),
          "A /metrics connection that has not sent its whole request (or read the answer) in "
          "this long is dropped, so idle or stalled clients cannot hold its threads.");
ABSL_FLAG(std::string, http_host, "",
          "Address the OpenAI-compatible HTTP API binds. Default: the value of --host.");
ABSL_FLAG(int, http_port, 8080,
          "Port of the OpenAI-compatible HTTP API (/v1/chat/completions, /v1/completions, "
          "/v1/models, /health). 0 picks a free port (the log says 'http on "
          "http://HOST:PORT'); -1 turns it off.");
ABSL_FLAG(int, threads, 0,
          "Compute threads (OpenMP) for the engine. 0 = OpenMP's default (OMP_NUM_THREADS "
          "or every core).");
ABSL_FLAG(std::string, precision, "fast",
          "Kernel precision: 'fast' (bf16/int8 compute where the CPU supports it) or "
          "'exact' (f32 throughout; outputs are reproducible bit for bit).");
ABSL_FLAG(std::string, kv_cache_type, "auto",
          "What the KV cache stores: 'auto' (f32 with --precision=exact, f16 with fast), "
          "'f16', 'bf16' (fast only): f16's memory, attention in bf16 dot products (faster "
          "over long contexts; logits move ~10x more than with f16), or 'q8' (fast only): "
          "8-bit keys and values with a scale per token and head, about half of f16's memory "
          "per token and the fastest attention over long contexts, at a larger accuracy cost "
          "(on the built-in model the logits move by up to 0.5% of their range and greedy "
          "output stays the same). bf16 and q8 need --kv-block-size a multiple of 16.");
ABSL_FLAG(quill::server::ByteSizeFlag, kv_cache_bytes,
          quill::server::ByteSizeFlag{kEngineDefaults.kv_cache_bytes},
          "Memory for the paged KV cache, allocated at startup; bounds how many tokens "
          "(prompts + outputs) are in flight. Accepts suffixes: 512MiB, 2GiB, 1.5G, 500MB.");
ABSL_FLAG(int, kv_block_size, kEngineDefaults.block_size_tokens,
          "Tokens per KV cache block (the allocation unit).");
ABSL_FLAG(bool, prefix_cache, kEngineDefaults.prefix_cache,
          "Prefix caching: keep full KV blocks after requests end and reuse them for "
          "prompts that start with the same tokens (shared system prompts, chat history), "
          "prefilling only the rest. Off: --prefix-cache=false or --no-prefix-cache.");
ABSL_FLAG(int, max_batch_tokens, kEngineDefaults.max_batch_tokens,
          "Most tokens one engine step processes (prefill chunks + one per decoding "
          "sequence); also sizes the model's scratch buffers.");
ABSL_FLAG(int, prefill_chunk_tokens, kEngineDefaults.prefill_chunk_tokens,
          "A prompt is prefilled in chunks of at most this many tokens, so that long "
          "prompts do not stall the streams that are decoding.");
ABSL_FLAG(absl::Duration, itl_target, absl::Milliseconds(100),
          "Inter-token-latency target: while requests are decoding, new prompts get only as "
          "many tokens per step as keep the step (predicted from measured step times) within "
          "max(this, 1.5x a decode-only step), and at least 32 or 1.5x the prompt tokens that "
          "finished requests had per step, whichever is more, so that streams keep a steady "
          "pace during bursts of new prompts while prompts still progress and a steady load "
          "never queues (the last prompts of a burst wait longer for their first token). "
          "While nothing decodes, one prompt that will decode starts per step, plus what fits "
          "in this target (prompts started together finish together, and a closed loop sends "
          "them back together). 0 = no limit beyond --max-batch-tokens (a burst of prompts fills "
          "whole steps while "
          "streams wait).");
ABSL_FLAG(int, max_running, kEngineDefaults.max_running,
          "Most requests generating at once (the continuous batch).");
ABSL_FLAG(int, max_queue, kEngineDefaults.max_queue,
          "Most requests waiting for a run slot or KV blocks (a request that finds both free "
          "starts at once and does not count); beyond it Generate fails at once with "
          "RESOURCE_EXHAUSTED and a retry pushback (grpc-retry-pushback-ms; HTTP 429 "
          "Retry-After).");
ABSL_FLAG(int, spec_tokens, 4,
          "Speculative decoding: a decoding request proposes up to this many draft tokens, "
          "verified in the same step; output is unchanged. Without --draft-model, drafts come "
          "from n-gram prompt lookup (the tokens that followed an earlier occurrence of its "
          "last tokens in its prompt or output), so repetitive text (code edits, quoting, "
          "lists) gets several tokens per step. 0 = off. Requests opt out with "
          "disable_speculation.");
ABSL_FLAG(std::string, draft_model, "",
          "GGUF draft model for speculative decoding, with the same vocabulary as --model "
          "(e.g. a smaller or more quantized model of the same family): it proposes "
          "--spec-tokens tokens greedily for each request, and the served model verifies "
          "them in one step. Its KV cache holds as many tokens as the served model's. "
          "Empty = n-gram drafting.");
ABSL_FLAG(int, spec_max_decoders, kEngineDefaults.spec_max_decoders,
          "No drafting in steps where this many requests or more decode: speculation pays "
          "while decode is memory-bandwidth-bound (small batches).");
ABSL_FLAG(int, max_queue_per_tenant, kEngineDefaults.max_queue_per_tenant,
          "Most requests one tenant may have waiting (a tenant is the API key, or the "
          "x-quill-tenant header when --api-keys-file is not set); beyond it that tenant's "
          "requests fail with RESOURCE_EXHAUSTED while other tenants still queue. 0 = no cap "
          "of its own (only --max-queue). Waiting requests are admitted weighted-fair across "
          "tenants either way.");
ABSL_FLAG(bool, metrics_per_tenant, false,
          "Add per-tenant series: quill_tenant_requests_total{tenant,outcome}, "
          "quill_tenant_queue_wait_seconds{tenant} and "
          "quill_tenant_time_to_first_token_seconds{tenant} (at most 100 tenants; the rest "
          "share tenant=\"_other\"). Off by default to keep metrics low-cardinality.");
ABSL_FLAG(int, max_tokens_limit, kEngineDefaults.max_tokens_limit,
          "Largest max_tokens a request may ask for; 0 = the model's context length - 1.");
ABSL_FLAG(absl::Duration, drain_timeout, absl::Seconds(30),
          "On SIGTERM/SIGINT, how long running streams may take to finish before they end "
          "with UNAVAILABLE (e.g. 30s, 2m).");
ABSL_FLAG(absl::Duration, stream_stall_timeout, absl::Seconds(30),
          "A stream whose client stops reading is paused once a few tokens wait unsent (its "
          "KV cache kept); paused this long, it ends with DEADLINE_EXCEEDED (\"stream "
          "stalled: the client read nothing for 30s\"; HTTP streams get an SSE error event) "
          "and its KV cache is freed (metric outcome=\"stalled\"). 0 = never.");
ABSL_FLAG(int, grpc_max_concurrent_streams, 100,
          "Most concurrent gRPC calls (HTTP/2 streams) one client connection may have open; "
          "more wait in the client until one ends. With --max-running and --max-queue it "
          "bounds what one connection can hold (README \"Memory bounds\"). The HTTP API "
          "serves one request at a time per connection (HTTP/1.1).");
ABSL_FLAG(quill::server::ByteSizeFlag, max_message_bytes, quill::server::ByteSizeFlag{4 << 20},
          "Largest request message accepted (larger ones fail with RESOURCE_EXHAUSTED over "
          "gRPC, 413 over HTTP).");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain: serve gRPC and the HTTP API over TLS (with --tls-key).");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls-cert.");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA certificates: require clients to present a certificate they signed "
          "(mutual TLS).");
ABSL_FLAG(std::string, api_keys_file, "",
          "File of API keys, one per line ('#' comments): every gRPC call and HTTP API "
          "request must send 'authorization: Bearer KEY' (health checks excepted). A key may "
          "be followed by 'name=TENANT' and 'weight=N' (its tenant, default the first 8 hex "
          "digits of its SHA-256, and admission weight, default 1); with keys, "
          "x-quill-tenant is ignored. Re-read on SIGHUP.");
ABSL_FLAG(std::string, reflection, "auto",
          "gRPC server reflection: true, false, or auto (on only when --host is loopback).");
ABSL_FLAG(quill::server::ByteSizeFlag, max_send_message_bytes, quill::server::ByteSizeFlag{4 << 20},
          "Largest response message the server sends (a call that would send a larger one "
          "fails with RESOURCE_EXHAUSTED).");
ABSL_FLAG(std::string, log_level, "info",
          "Log level: trace (adds one line per engine step: its tokens, predicted and real "
          "duration), debug (adds a line per model layer packed at load; info shows load "
          "progress every 5 s), info, warn, error, critical or off.");

namespace quill::server {
namespace {

// Every flag above, for the QUILL_<NAME> environment fallback.
constexpr const char* kFlagNames[] = {
    "model",
    "chat_template",
    "host",
    "port",
    "metrics_host",
    "metrics_port",
    "metrics_threads",
    "metrics_timeout",
    "http_host",
    "http_port",
    "threads",
    "precision",
    "kv_cache_type",
    "kv_cache_bytes",
    "kv_block_size",
    "prefix_cache",
    "max_batch_tokens",
    "prefill_chunk_tokens",
    "itl_target",
    "max_running",
    "max_queue",
    "max_queue_per_tenant",
    "metrics_per_tenant",
    "max_tokens_limit",
    "spec_tokens",
    "draft_model",
    "spec_max_decoders",
    "drain_timeout",
    "stream_stall_timeout",
    "grpc_max_concurrent_streams",
    "max_message_bytes",
    "tls_cert",
    "tls_key",
    "tls_client_ca",
    "api_keys_file",
    "reflection",
    "max_send_message_bytes",
    "log_level",
};

constexpr char kUsage[] =
    "Serves a Llama-family GGUF model over gRPC (quill.v1.Generator, grpc.health.v1.Health, "
    "server reflection) and an OpenAI-compatible HTTP API, with Prometheus metrics.\n\n"
    "  quill-server --model PATH.gguf --host 127.0.0.1 --port 50051 --http-port 8080 "
    "--metrics-port 9090\n\n"
    "Every flag can also be set in the environment as QUILL_<FLAG_NAME> (upper case, dashes "
    "as underscores: QUILL_KV_CACHE_BYTES=2GiB); a flag on the command line wins. Dashes "
    "and underscores in flag names are interchangeable (--kv-cache-bytes, --kv_cache_bytes). "
    "SIGTERM/SIGINT drain gracefully (see --drain-timeout); a second signal (0.5 s or more "
    "after the first) exits at once. SIGHUP re-reads --api-keys-file.\n\n"
    "Exposed beyond this machine (--host 0.0.0.0), give it --tls-cert/--tls-key and "
    "--api-keys-file: see the README's \"Security\" section.";

// "--kv-cache-bytes=1G" -> "--kv_cache_bytes=1G" (absl flag names use underscores).
std::vector<std::string> NormalizeFlagNames(int argc, char** argv) {
  std::vector<std::string> args;
  bool flags_done = false;
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    if (i > 0 && !flags_done && arg == "--") flags_done = true;
    if (i > 0 && !flags_done && arg.size() > 1 && arg[0] == '-') {
      const size_t start = arg.find_first_not_of('-');
      const size_t end = std::min(arg.find('='), arg.size());
      if (start != std::string::npos && start < end) {
        std::replace(arg.begin() + start, arg.begin() + end, '-', '_');
        // "--no_prefix_cache" -> "--prefix_cache=false" for boolean flags (absl itself
        // only knows "--noprefix_cache").
        const std::string name = arg.substr(start, end - start);
        if (end == arg.size() && absl::StartsWith(name, "no_")) {
          const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name.substr(3));
          if (flag != nullptr && flag->IsOfType<bool>()) {
            arg = absl::StrCat(arg.substr(0, start), name.substr(3), "=false");
          }
        }
      }
    }
    args.push_back(std::move(arg));
  }
  return args;
}

// QUILL_<FLAG> for every flag; applied before argv is parsed, so the command line wins.
bool ApplyEnvironment() {
  for (const char* name : kFlagNames) {
    const std::string env = absl::StrCat("QUILL_", absl::AsciiStrToUpper(name));
    const char* value = std::getenv(env.c_str());
    if (value == nullptr) continue;
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    std::string error;
    if (flag == nullptr || !flag->ParseFrom(value, &error)) {
      std::fprintf(stderr, "quill-server: %s=%s: %s\n", env.c_str(), value, error.c_str());
      return false;
    }
  }
  return true;
}

bool SetLogLevel(const std::string& name) {
  const spdlog::level::level_enum level = spdlog::level::from_str(name);
  // from_str maps unknown names to "off"; only accept "off" when asked for.
  if (level == spdlog::level::off && name != "off") return false;
  spdlog::set_level(level);
  return true;
}

absl::StatusOr<ServerOptions> OptionsFromFlags(const char* exe) {
  ServerOptions options;
  options.model_path = absl::GetFlag(FLAGS_model);
  if (options.model_path.empty()) {
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    const std::string exe_path = n > 0 ? std::string(self, n) : std::string(exe);
    absl::StatusOr<std::string> found = ResolveDefaultModel(exe_path, /*env_model=*/"");
    if (!found.ok()) return found.status();
    options.model_path = *found;
  }
  options.chat_template_path = absl::GetFlag(FLAGS_chat_template);
  options.draft_model_path = absl::GetFlag(FLAGS_draft_model);
  absl::StatusOr<engine::kernels::Precision> precision =
      ParsePrecision(absl::GetFlag(FLAGS_precision));
  if (!precision.ok()) return precision.status();
  options.precision = *precision;
  absl::StatusOr<std::optional<engine::kernels::KvElement>> kv_cache_type =
      ParseKvCacheType(absl::GetFlag(FLAGS_kv_cache_type));
  if (!kv_cache_type.ok()) return kv_cache_type.status();
  options.kv_cache_type = *kv_cache_type;
  options.host = absl::GetFlag(FLAGS_host);
  options.port = absl::GetFlag(FLAGS_port);
  options.metrics_host = absl::GetFlag(FLAGS_metrics_host);
  options.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  options.metrics_threads = absl::GetFlag(FLAGS_metrics_threads);
  options.metrics_request_timeout = absl::GetFlag(FLAGS_metrics_timeout);
  options.http_host = absl::GetFlag(FLAGS_http_host);
  options.http_port = absl::GetFlag(FLAGS_http_port);
  options.engine.kv_cache_bytes = absl::GetFlag(FLAGS_kv_cache_bytes).bytes;
  options.engine.block_size_tokens = absl::GetFlag(FLAGS_kv_block_size);
  options.engine.prefix_cache = absl::GetFlag(FLAGS_prefix_cache);
  options.engine.max_batch_tokens = absl::GetFlag(FLAGS_max_batch_tokens);
  options.engine.prefill_chunk_tokens = absl::GetFlag(FLAGS_prefill_chunk_tokens);
  options.engine.itl_target = absl::GetFlag(FLAGS_itl_target);
  options.engine.max_running = absl::GetFlag(FLAGS_max_running);
  options.engine.max_queue = absl::GetFlag(FLAGS_max_queue);
  options.engine.max_queue_per_tenant = absl::GetFlag(FLAGS_max_queue_per_tenant);
  options.metrics_per_tenant = absl::GetFlag(FLAGS_metrics_per_tenant);
  options.engine.max_tokens_limit = absl::GetFlag(FLAGS_max_tokens_limit);
  options.engine.num_threads = absl::GetFlag(FLAGS_threads);
  options.engine.spec_tokens = absl::GetFlag(FLAGS_spec_tokens);
  options.engine.spec_max_decoders = absl::GetFlag(FLAGS_spec_max_decoders);
  options.drain_timeout = absl::GetFlag(FLAGS_drain_timeout);
  const absl::Duration stall_timeout = absl::GetFlag(FLAGS_stream_stall_timeout);
  options.engine.stall_timeout =
      stall_timeout == absl::ZeroDuration() ? absl::InfiniteDuration() : stall_timeout;
  options.grpc_max_concurrent_streams = absl::GetFlag(FLAGS_grpc_max_concurrent_streams);
  const int64_t max_message = absl::GetFlag(FLAGS_max_message_bytes).bytes;
  options.tls.cert = absl::GetFlag(FLAGS_tls_cert);
  options.tls.key = absl::GetFlag(FLAGS_tls_key);
  options.tls.client_ca = absl::GetFlag(FLAGS_tls_client_ca);
  options.api_keys_file = absl::GetFlag(FLAGS_api_keys_file);
  const std::string reflection = absl::GetFlag(FLAGS_reflection);
  if (reflection == "true" || reflection == "on") {
    options.reflection = true;
  } else if (reflection == "false" || reflection == "off") {
    options.reflection = false;
  } else if (reflection != "auto") {
    return absl::InvalidArgumentError(
        absl::StrCat("--reflection must be true, false or auto, got '", reflection, "'"));
  }
  const int64_t max_send = absl::GetFlag(FLAGS_max_send_message_bytes).bytes;

  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--port ", options.port, " is not a port"));
  }
  if (options.metrics_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics-port ", options.metrics_port, " is not a port"));
  }
  if (options.metrics_threads < 1 || options.metrics_threads > 1024) {
    return absl::InvalidArgumentError("--metrics-threads must be in [1, 1024]");
  }
  if (options.metrics_request_timeout < absl::Milliseconds(1)) {
    return absl::InvalidArgumentError("--metrics-timeout must be at least 1ms");
  }
  if (options.http_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--http-port ", options.http_port, " is not a port"));
  }
  if (options.engine.itl_target < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--itl-target must be >= 0");
  }
  if (options.drain_timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--drain-timeout must not be negative");
  }
  if (stall_timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--stream-stall-timeout must not be negative");
  }
  if (max_message < 1024 || max_message > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError("--max-message-bytes must be in [1KiB, 1GiB]");
  }
  options.max_receive_message_bytes = static_cast<int>(max_message);
  if (max_send < 1024 || max_send > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError("--max-send-message-bytes must be in [1KiB, 1GiB]");
  }
  options.max_send_message_bytes = static_cast<int>(max_send);
  const struct {
    const char* flag;
    int value;
  } positives[] = {{"--kv-block-size", options.engine.block_size_tokens},
                   {"--max-batch-tokens", options.engine.max_batch_tokens},
                   {"--prefill-chunk-tokens", options.engine.prefill_chunk_tokens},
                   {"--max-running", options.engine.max_running},
                   {"--max-queue", options.engine.max_queue},
                   {"--grpc-max-concurrent-streams", options.grpc_max_concurrent_streams}};
  for (const auto& p : positives) {
    if (p.value < 1) {
      return absl::InvalidArgumentError(absl::StrCat(p.flag, " must be >= 1, got ", p.value));
    }
  }
  if (options.engine.max_tokens_limit < 0) {
    return absl::InvalidArgumentError("--max-tokens-limit must be >= 0");
  }
  if (options.engine.spec_tokens < 0 || options.engine.spec_tokens > 32) {
    return absl::InvalidArgumentError("--spec-tokens must be in [0, 32]");
  }
  if (options.engine.spec_max_decoders < 1) {
    return absl::InvalidArgumentError("--spec-max-decoders must be >= 1");
  }
  if (!options.draft_model_path.empty() && options.engine.spec_tokens == 0) {
    return absl::InvalidArgumentError("--draft-model needs --spec-tokens > 0");
  }
  if (options.engine.max_queue_per_tenant < 0) {
    return absl::InvalidArgumentError("--max-queue-per-tenant must be >= 0");
  }
  if (options.engine.kv_cache_bytes <= 0) {
    return absl::InvalidArgumentError("--kv-cache-bytes must be > 0");
  }
  return options;
}

// Waits for SIGTERM/SIGINT (blocked in every thread; no work in a signal handler), then
// drains; SIGHUP meanwhile re-reads the API keys. A second signal during the drain exits at once;
// one arriving within kSameSignalWindow of the first is taken as the same request (`timeout` and
// some process managers signal both the process and its group).
constexpr absl::Duration kSameSignalWindow = absl::Milliseconds(500);

void ReloadApiKeys(Server& server) {
  if (absl::Status s = server.ReloadApiKeys(); !s.ok()) {
    spdlog::error("SIGHUP: {}; the previous keys stay in force", s.ToString());
  }
}

int ServeUntilSignalled(Server& server, const sigset_t& signals) {
  int sig = 0;
  while (true) {
    if (sigwait(&signals, &sig) != 0) continue;
    if (sig != SIGHUP) break;
    ReloadApiKeys(server);
  }
  const absl::Time first = absl::Now();
  spdlog::info("received {}; shutting down gracefully (drain timeout {})", strsignal(sig),
               absl::FormatDuration(server.options().drain_timeout));
  std::atomic<bool> done{false};
  std::thread drainer([&] {
    server.Shutdown();
    done.store(true);
  });
  const timespec poll = {0, 50 * 1000 * 1000};
  while (!done.load()) {
    siginfo_t info;
    if (sigtimedwait(&signals, &info, &poll) > 0) {
      if (info.si_signo == SIGHUP) {
        ReloadApiKeys(server);
        continue;
      }
      if (absl::Now() - first < kSameSignalWindow) continue;
      spdlog::warn("received {} during the drain; exiting now", strsignal(info.si_signo));
      spdlog::shutdown();
      std::_Exit(1);
    }
  }
  drainer.join();
  return 0;
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "server/main.cc");
  };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  usage.normalize_filename = [](absl::string_view file) { return std::string(file); };
  absl::SetFlagsUsageConfig(usage);

  if (!ApplyEnvironment()) return 2;
  std::vector<std::string> normalized = NormalizeFlagNames(argc, argv);
  std::vector<char*> args;
  for (std::string& a : normalized) args.push_back(a.data());
  args.push_back(nullptr);
  absl::ParseCommandLine(static_cast<int>(normalized.size()), args.data());

  spdlog::set_default_logger(spdlog::stderr_color_mt("quill-server"));
  if (!SetLogLevel(absl::GetFlag(FLAGS_log_level))) {
    std::fprintf(stderr,
                 "quill-server: --log-level must be trace, debug, info, warn, error, "
                 "critical or off\n");
    return 2;
  }
  absl::StatusOr<ServerOptions> options = OptionsFromFlags(argv[0]);
  if (!options.ok()) {
    spdlog::error("{}", options.status().ToString());
    return 2;
  }

  // Block the shutdown signals before any thread exists, so every thread inherits the mask
  // and only sigwait() sees them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  const int threads = options->engine.num_threads;
  spdlog::info("quill-server starting: model={} threads={}", options->model_path,
               threads > 0 ? threads : omp_get_max_threads());
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Create(*options);
  if (!server.ok()) {
    spdlog::error("{}", server.status().ToString());
    return 1;
  }
  const int code = ServeUntilSignalled(**server, signals);
  server->reset();
  spdlog::info("bye");
  return code;
}

}  // namespace
}  // namespace quill::server

int main(int argc, char** argv) { return quill::server::Main(argc, argv); }
