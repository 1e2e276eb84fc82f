// `quill generate`: streams one generation to the terminal.

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "client/cli/cli_common.h"
#include "client/quill_client.h"

namespace quill::cli {
namespace {

struct GenerateFlags {
  ConnectionFlags connection;
  int max_tokens = 128;
  SamplingFlags sampling;
  bool ignore_eos = false;
  bool disable_speculation = false;
  bool json_object = false;
  std::string json_schema_file;
  std::string json_schema;  // the file's text
  int logprobs = 0;
  std::string request_id;
  absl::Duration timeout = absl::Seconds(60);
  bool json = false;
};

quill::v1::GenerateRequest BuildRequest(const GenerateFlags& f, std::string prompt) {
  quill::v1::GenerateRequest request;
  request.set_request_id(f.request_id);
  request.set_prompt(std::move(prompt));
  request.set_max_tokens(f.max_tokens);
  f.sampling.Fill(&request);
  request.set_ignore_eos(f.ignore_eos);
  request.set_disable_speculation(f.disable_speculation);
  request.set_json_object(f.json_object);
  request.set_json_schema(f.json_schema);
  request.set_logprobs(f.logprobs);
  return request;
}

// The summary written to stderr after a text-mode stream.
void PrintSummary(const quill::v1::GenerateResponse& last, double ttft_s, double total_s,
                  int tokens, const std::vector<quill::v1::TokenLogprobs>& logprobs) {
  if (!logprobs.empty()) {
    std::cerr << "logprobs (token_id: logprob [top alternatives]):\n";
    for (const quill::v1::TokenLogprobs& token : logprobs) {
      std::cerr << absl::StrFormat("  %6d: %8.4f", token.token_id(), token.logprob())
                << AlternativesText(token) << "\n";
    }
  }
  std::cerr << absl::StrFormat(
      "[finish_reason: %s] usage: %d prompt + %d completion tokens; client: ttft %.1f ms, "
      "total %.1f ms, %.1f tok/s",
      client::FinishReasonName(last.finish_reason()), last.usage().prompt_tokens(),
      last.usage().completion_tokens(), ttft_s * 1e3, total_s * 1e3,
      total_s > 0 ? tokens / total_s : 0.0);
  if (last.has_timings()) {
    const quill::v1::Timings& t = last.timings();
    std::cerr << absl::StrFormat(
        "; server: queue %.1f ms, ttft %.1f ms, prefill %.1f ms, decode %.1f ms, total %.1f ms",
        t.queue_seconds() * 1e3, t.time_to_first_token_seconds() * 1e3, t.prefill_seconds() * 1e3,
        t.decode_seconds() * 1e3, t.total_seconds() * 1e3);
  }
  std::cerr << "\n";
}

}  // namespace

int GenerateCommand(const std::vector<std::string>& args) {
  GenerateFlags f;
  FlagParser parser(
      "quill generate [flags] [PROMPT...]",
      "Streams a generation for PROMPT (the words joined by spaces; read from stdin when none "
      "are given) and writes the text to stdout as it arrives. The finish reason, token usage, "
      "time to first token and total time go to stderr. Exits 1 with the server's status code "
      "and message if the request fails.");
  f.connection.Register(parser);
  parser.AddInt("max-tokens", &f.max_tokens, "Most tokens to generate.");
  f.sampling.Register(parser, "Sampling seed: the same seed and request give the same text.");
  parser.AddBool("ignore-eos", &f.ignore_eos, "Keep generating past the end-of-sequence token.");
  parser.AddBool("disable-speculation", &f.disable_speculation,
                 "Opt this request out of the server's speculative decoding (same text; for "
                 "comparing speed).");
  parser.AddBool("json-object", &f.json_object,
                 "JSON mode: the answer is one JSON object (tokens that would break it are "
                 "never sampled; its close ends the answer).");
  parser.AddString("json-schema", &f.json_schema_file,
                   "Structured output: a JSON Schema file the answer's object must satisfy "
                   "(implies --json-object; the server names any keyword it cannot keep).");
  parser.AddInt("logprobs", &f.logprobs,
                "Return each token's logprob and this many top alternatives (0 = none); shown "
                "on stderr, or in the JSON.");
  parser.AddString("request-id", &f.request_id, "Request id (the server makes one if empty).");
  parser.AddDuration("timeout", &f.timeout, "Deadline for the whole stream.");
  parser.AddBool("json", &f.json,
                 "Print one JSON object per streamed message on stdout (and an {\"error\": ...} "
                 "object on failure) instead of text.");
  std::vector<std::string> positional;
  if (int code = ParseFlags(parser, args, &positional); code >= 0) return code;
  if (!ReadSchemaFlag(f.json_schema_file, &f.json_schema)) return kExitUsage;
  std::string prompt = TextFromArgsOrStdin(positional);
  if (prompt.empty()) {
    std::cerr << "error: empty prompt (give it as an argument or on stdin)\n";
    return kExitUsage;
  }

  absl::StatusOr<std::unique_ptr<client::QuillClient>> connected = f.connection.Connect();
  if (!connected.ok()) return PrintError(connected.status());
  std::unique_ptr<client::QuillClient> client = *std::move(connected);
  const quill::v1::GenerateRequest request = BuildRequest(f, std::move(prompt));
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  double ttft_s = 0;
  int tokens = 0;
  bool ends_with_newline = true;
  quill::v1::GenerateResponse last;
  std::vector<quill::v1::TokenLogprobs> logprobs;
  absl::Status status = client->Generate(
      request,
      [&](const quill::v1::GenerateResponse& response) {
        const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
        if (tokens == 0 && response.token_ids_size() > 0) ttft_s = elapsed;
        tokens += response.token_ids_size();
        if (f.json) {
          nlohmann::json line = ToJson(response);
          line["client_elapsed_seconds"] = elapsed;
          std::cout << DumpJson(line) << std::endl;  // endl: flush per message
        } else {
          std::cout << response.text() << std::flush;
          if (!response.text().empty()) ends_with_newline = response.text().back() == '\n';
          logprobs.insert(logprobs.end(), response.logprobs().begin(), response.logprobs().end());
        }
        last = response;
      },
      f.timeout);
  const double total_s = std::chrono::duration<double>(Clock::now() - start).count();
  if (!f.json && !ends_with_newline) std::cerr << "\n";  // the summary starts on its own line
  if (!status.ok()) {
    if (f.json) {
      nlohmann::json error = {{"error",
                               {{"code", absl::StatusCodeToString(status.code())},
                                {"message", std::string(status.message())}}}};
      std::cout << DumpJson(error) << std::endl;
    }
    return PrintError(status);
  }
  if (!f.json) PrintSummary(last, ttft_s, total_s, tokens, logprobs);
  return kExitOk;
}

}  // namespace quill::cli
