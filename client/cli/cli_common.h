#pragma once

// Helpers shared by the `quill` subcommands.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/cli/flag_parser.h"
#include "client/quill_client.h"
#include "nlohmann/json.hpp"
#include "quill/v1/quill.pb.h"

namespace quill::cli {

// Exit codes: 0 success, 1 an RPC or runtime failure, 2 a usage error.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

// $QUILL_ADDR, or 127.0.0.1:50051.
std::string DefaultAddress();

// --addr, --tls-ca, --tls-cert, --tls-key and --api-key (default $QUILL_API_KEY), the
// flags every subcommand that talks to a server shares.
struct ConnectionFlags {
  std::string addr = DefaultAddress();
  client::ConnectOptions options;

  ConnectionFlags();
  void Register(FlagParser& parser);
  // The client; INVALID_ARGUMENT for an unreadable certificate file.
  absl::StatusOr<std::unique_ptr<client::QuillClient>> Connect() const;
};

// --temperature, --top-p, --top-k, --min-p, --repetition-penalty, --frequency-penalty,
// --presence-penalty, --logit-bias, --seed and --stop, the sampling flags `quill generate`
// and `quill chat` share.
struct SamplingFlags {
  double temperature = 0;
  double top_p = 0;
  int top_k = 0;
  double min_p = 0;
  double repetition_penalty = 0;
  double frequency_penalty = 0;
  double presence_penalty = 0;
  std::map<int32_t, float> logit_bias;  // token id -> bias; a later --logit-bias wins
  uint64_t seed = 0;
  std::vector<std::string> stop;

  // `seed_help` says what the seed means for the command.
  void Register(FlagParser& parser, const char* seed_help);
  // Sets `request`'s sampling and stop (a GenerateRequest or a ChatRequest).
  template <typename Request>
  void Fill(Request* request) const {
    FillSampling(request->mutable_sampling());
    for (const std::string& s : stop) request->add_stop(s);
  }

 private:
  void FillSampling(quill::v1::SamplingParams* sampling) const;
};

// Parses `args` into `parser`'s flags. Returns -1 to go on, or the exit code to return now
// (0 after printing --help, 2 after printing a usage error).
int ParseFlags(FlagParser& parser, const std::vector<std::string>& args,
               std::vector<std::string>* positional);

// Prints "error: CODE: message" on stderr and returns kExitFailure.
int PrintError(const absl::Status& status);

// The positional words joined by spaces, or all of stdin when there are none.
std::string TextFromArgsOrStdin(const std::vector<std::string>& positional);

// Reads --json-schema FILE into *schema (nothing when path is empty; the server checks
// the schema itself). False, with the reason on stderr, when the file cannot be read or
// is empty.
bool ReadSchemaFlag(const std::string& path, std::string* schema);

// --tools FILE: a JSON array of tools, each OpenAI's {"type": "function", "function":
// {"name", "description", "parameters"}} or that function object alone, into `tools`.
// On failure prints why on stderr and returns false. An empty path adds none.
bool ReadToolsFlag(const std::string& path, std::vector<quill::v1::Tool>* tools);

// Serializes `value`, replacing invalid UTF-8 instead of throwing (indent -1 = one line).
std::string DumpJson(const nlohmann::json& value, int indent = -1);

// JSON forms of the API messages (field names as in the proto).
// {"token_id", "logprob", "top": [{"token_id", "logprob"}]}.
nlohmann::json ToJson(const quill::v1::TokenLogprobs& token);
// "  [id:logprob id:logprob ...]" for the token's alternatives; "" without any.
std::string AlternativesText(const quill::v1::TokenLogprobs& token);
nlohmann::json ToJson(const quill::v1::GenerateResponse& response);
nlohmann::json ToJson(const quill::v1::ModelInfo& info);
nlohmann::json ToJson(const quill::v1::TokenizeResponse& response);

// `quill info`'s Memory line: "RSS 1.23 GiB = 1.04 x (weights 1.10 GiB + KV budget
// 80.00 MiB)", weights being weights_bytes + mapped_weights_bytes.
std::string MemoryLine(const quill::v1::ModelInfo& info);

// Subcommands; each receives the words after its name.
int GenerateCommand(const std::vector<std::string>& args);
int ChatCommand(const std::vector<std::string>& args);
int TokenizeCommand(const std::vector<std::string>& args);
int ScoreCommand(const std::vector<std::string>& args);
int InfoCommand(const std::vector<std::string>& args);
int HealthCommand(const std::vector<std::string>& args);
int BenchCommand(const std::vector<std::string>& args);

}  // namespace quill::cli
