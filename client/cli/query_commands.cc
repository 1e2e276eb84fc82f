// `quill tokenize`, `quill info` and `quill health`: the single-RPC subcommands.

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "client/cli/cli_common.h"
#include "client/quill_client.h"

namespace quill::cli {
namespace {

// 1234567 -> "1,234,567"
std::string Thousands(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

std::string Bytes(int64_t n) {
  if (n >= (int64_t{1} << 30)) return absl::StrFormat("%.2f GiB", n / double(int64_t{1} << 30));
  if (n >= (int64_t{1} << 20)) return absl::StrFormat("%.2f MiB", n / double(int64_t{1} << 20));
  if (n >= (int64_t{1} << 10)) return absl::StrFormat("%.2f KiB", n / double(int64_t{1} << 10));
  return absl::StrFormat("%d B", n);
}

}  // namespace

// "RSS 1.23 GiB = 1.04 x (weights 1.10 GiB + KV budget 0.08 GiB)" (units as Bytes()): the
// weights are the packed ones plus the embedding table read from the mapping.
std::string MemoryLine(const quill::v1::ModelInfo& m) {
  const int64_t weights = m.weights_bytes() + m.mapped_weights_bytes();
  const int64_t kv = m.limits().kv_cache_bytes();
  const std::string ratio =
      weights + kv > 0
          ? absl::StrFormat("%.2f", static_cast<double>(m.resident_memory_bytes()) / (weights + kv))
          : "?";
  return absl::StrFormat("RSS %s = %s x (weights %s + KV budget %s)",
                         Bytes(m.resident_memory_bytes()), ratio, Bytes(weights), Bytes(kv));
}

namespace {

void PrintModelInfo(const quill::v1::ModelInfo& m) {
  const quill::v1::ServerLimits& l = m.limits();
  auto row = [](absl::string_view key, const std::string& value) {
    std::cout << absl::StrFormat("%-22s %s\n", key, value);
  };
  row("Model", absl::StrFormat("%s (%s)", m.name(), m.architecture()));
  row("Path", m.path());
  row("Weights", absl::StrFormat("%s, %s (%s parameters, %s without embeddings)", m.weight_type(),
                                 Bytes(m.weights_bytes()), Thousands(m.parameter_count()),
                                 Thousands(m.non_embedding_parameter_count())));
  if (m.mapped_weights_bytes() > 0) {
    row("", absl::StrFormat("packed; + %s token embedding read from the file mapping",
                            Bytes(m.mapped_weights_bytes())));
  }
  row("Precision", m.precision());
  row("Vocabulary", absl::StrFormat("%s tokens (BOS %d, EOS %d)", Thousands(m.vocab_size()),
                                    m.bos_token_id(), m.eos_token_id()));
  row("Context", absl::StrFormat("%s tokens", Thousands(m.context_length())));
  row("Shape", absl::StrFormat("d_model %d, %d layers, %d heads / %d KV heads, ffn %d",
                               m.embedding_length(), m.block_count(), m.head_count(),
                               m.head_count_kv(), m.feed_forward_length()));
  // Older servers do not name the element: the size alone.
  row("KV cache per token",
      m.kv_cache_type().empty()
          ? Bytes(m.kv_bytes_per_token())
          : absl::StrFormat("%s (%s)", Bytes(m.kv_bytes_per_token()), m.kv_cache_type()));
  // Older servers do not send the RSS (0): no line rather than a wrong ratio.
  if (m.resident_memory_bytes() > 0) row("Memory", MemoryLine(m));
  if (!m.tool_call_syntax().empty()) {
    row("Tool calls", m.tool_call_syntax() == "none"
                          ? "none read back (tool_choice auto is refused; forced calls work)"
                          : absl::StrCat(m.tool_call_syntax(), " (tool_choice auto reads them)"));
  }
  if (m.chat_thinks())
    row("Reasoning", "<think> thought apart: reasoning_content (HTTP), reasoning (gRPC)");
  std::cout << "Server limits\n";
  row("  max_tokens", Thousands(l.max_tokens()));
  row("  max_prompt_tokens", Thousands(l.max_prompt_tokens()));
  row("  max_batch_tokens", Thousands(l.max_batch_tokens()));
  row("  prefill_chunk_tokens", Thousands(l.prefill_chunk_tokens()));
  row("  max_running", Thousands(l.max_running()));
  row("  max_queue", Thousands(l.max_queue()));
  row("  kv_cache", absl::StrFormat("%s = %s blocks x %d tokens", Bytes(l.kv_cache_bytes()),
                                    Thousands(l.kv_cache_blocks()), l.kv_block_size_tokens()));
}

}  // namespace

int TokenizeCommand(const std::vector<std::string>& args) {
  ConnectionFlags connection;
  bool add_special = false;
  bool json = false;
  absl::Duration timeout = absl::Seconds(30);
  FlagParser parser("quill tokenize [flags] [TEXT...]",
                    "Shows the model's token ids and pieces for TEXT (the words joined by spaces; "
                    "read from stdin when none are given), and the ids decoded back.");
  connection.Register(parser);
  parser.AddBool("add-special-tokens", &add_special, "Add BOS/EOS as the vocabulary says.");
  parser.AddDuration("timeout", &timeout, "RPC deadline.");
  parser.AddBool("json", &json, "Print {\"token_ids\", \"pieces\", \"text\"} as JSON.");
  std::vector<std::string> positional;
  if (int code = ParseFlags(parser, args, &positional); code >= 0) return code;
  const std::string text = TextFromArgsOrStdin(positional);

  absl::StatusOr<std::unique_ptr<client::QuillClient>> client = connection.Connect();
  if (!client.ok()) return PrintError(client.status());
  absl::StatusOr<quill::v1::TokenizeResponse> response =
      (*client)->Tokenize(text, add_special, timeout);
  if (!response.ok()) return PrintError(response.status());
  if (json) {
    std::cout << DumpJson(ToJson(*response)) << "\n";
    return kExitOk;
  }
  std::cout << absl::StrFormat("%5s %8s  %s\n", "#", "id", "piece");
  for (int i = 0; i < response->token_ids_size(); ++i) {
    // Dumped as a JSON string so that spaces, newlines and control bytes are visible.
    const std::string piece =
        i < response->pieces_size()
            ? DumpJson(response->pieces(i))
            : "";
    std::cout << absl::StrFormat("%5d %8d  %s\n", i, response->token_ids(i), piece);
  }
  std::cout << response->token_ids_size() << " tokens; decoded: "
            << DumpJson(response->text())
            << "\n";
  return kExitOk;
}

int InfoCommand(const std::vector<std::string>& args) {
  ConnectionFlags connection;
  bool json = false;
  absl::Duration timeout = absl::Seconds(30);
  FlagParser parser("quill info [flags]",
                    "Shows the served model (architecture, shape, size, vocabulary) and the "
                    "server's limits (max tokens, batch, queue, KV cache).");
  connection.Register(parser);
  parser.AddDuration("timeout", &timeout, "RPC deadline.");
  parser.AddBool("json", &json, "Print the model info as one JSON object.");
  std::vector<std::string> positional;
  if (int code = ParseFlags(parser, args, &positional); code >= 0) return code;
  if (!positional.empty()) {
    std::cerr << "error: quill info takes no arguments (see --help)\n";
    return kExitUsage;
  }
  absl::StatusOr<std::unique_ptr<client::QuillClient>> client = connection.Connect();
  if (!client.ok()) return PrintError(client.status());
  absl::StatusOr<quill::v1::ModelInfo> info = (*client)->GetModelInfo(timeout);
  if (!info.ok()) return PrintError(info.status());
  if (json) {
    std::cout << DumpJson(ToJson(*info), 2) << "\n";
  } else {
    PrintModelInfo(*info);
  }
  return kExitOk;
}

int HealthCommand(const std::vector<std::string>& args) {
  ConnectionFlags connection;
  std::string service;
  absl::Duration timeout = absl::Seconds(5);
  FlagParser parser("quill health [flags]",
                    "Calls the standard gRPC health service (grpc.health.v1.Health/Check) and "
                    "prints the status. Exits 0 if and only if it is SERVING, so it can serve as "
                    "a Docker HEALTHCHECK or an exec probe.");
  connection.Register(parser);
  parser.AddString("service", &service,
                   "Service to check: empty for the whole server, or quill.v1.Generator.");
  parser.AddDuration("timeout", &timeout, "RPC deadline.");
  std::vector<std::string> positional;
  if (int code = ParseFlags(parser, args, &positional); code >= 0) return code;
  if (!positional.empty()) {
    std::cerr << "error: quill health takes no arguments (see --help)\n";
    return kExitUsage;
  }
  absl::StatusOr<std::unique_ptr<client::QuillClient>> client = connection.Connect();
  if (!client.ok()) return PrintError(client.status());
  absl::StatusOr<client::HealthStatus> health = (*client)->Health(service, timeout);
  if (!health.ok()) return PrintError(health.status());
  std::cout << client::HealthStatusName(*health) << "\n";
  return *health == client::HealthStatus::kServing ? kExitOk : kExitFailure;
}

}  // namespace quill::cli
