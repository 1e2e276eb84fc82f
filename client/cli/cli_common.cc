#include "client/cli/cli_common.h"

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/quill_client.h"

namespace quill::cli {

std::string DefaultAddress() {
  const char* env = std::getenv("QUILL_ADDR");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string("127.0.0.1:50051");
}

ConnectionFlags::ConnectionFlags() {
  const char* key = std::getenv("QUILL_API_KEY");
  if (key != nullptr) options.api_key = key;
}

void ConnectionFlags::Register(FlagParser& parser) {
  parser.AddString("addr", &addr, "Server address HOST:PORT (env QUILL_ADDR).");
  parser.AddString("tls-ca", &options.tls_ca_file,
                   "Use TLS, verifying the server with these PEM CA certificates.");
  parser.AddString("tls-cert", &options.tls_cert_file,
                   "PEM client certificate, for servers that require one (mutual TLS).");
  parser.AddString("tls-key", &options.tls_key_file, "PEM private key of --tls-cert.");
  parser.AddString("api-key", &options.api_key,
                   "API key, sent as 'authorization: Bearer KEY' (env QUILL_API_KEY; prefer "
                   "the environment: command lines are visible to other users).");
}

absl::StatusOr<std::unique_ptr<client::QuillClient>> ConnectionFlags::Connect() const {
  return client::QuillClient::Connect(addr, options);
}

void SamplingFlags::Register(FlagParser& parser, const char* seed_help) {
  parser.AddDouble("temperature", &temperature, "Sampling temperature; 0 is greedy.");
  parser.AddDouble("top-p", &top_p, "Nucleus sampling mass in (0, 1]; 0 is off.");
  parser.AddInt("top-k", &top_k, "Sample from the K most likely tokens; 0 is off.");
  parser.AddDouble("min-p", &min_p, "Drop tokens less likely than min-p times the best; 0 is off.");
  parser.AddDouble("repetition-penalty", &repetition_penalty,
                   "Penalty (> 0) for tokens already seen; 0 or 1 is off.");
  parser.AddDouble("frequency-penalty", &frequency_penalty,
                   "In [-2, 2]: lowers a token's logit by X for every time it was generated "
                   "(OpenAI's); 0 is off.");
  parser.AddDouble("presence-penalty", &presence_penalty,
                   "In [-2, 2]: lowers the logit of every token generated so far by X, once "
                   "(OpenAI's); 0 is off.");
  parser.AddRepeated(
      "logit-bias", "ID=BIAS",
      "Adds BIAS in [-100, 100] to token ID's logit: -100 bans it, 100 forces it "
      "(ids: `quill tokenize`)",
      [this](absl::string_view value) {
        const std::pair<absl::string_view, absl::string_view> parts =
            absl::StrSplit(value, absl::MaxSplits('=', 1));
        int32_t id = 0;
        float bias = 0;
        if (!absl::SimpleAtoi(parts.first, &id) || !absl::SimpleAtof(parts.second, &bias)) {
          return false;
        }
        logit_bias[id] = bias;
        return true;
      });
  parser.AddUint64("seed", &seed, seed_help);
  parser.AddStringList("stop", &stop, "Stop when the text contains STR (not included).");
}

void SamplingFlags::FillSampling(quill::v1::SamplingParams* sampling) const {
  sampling->set_temperature(static_cast<float>(temperature));
  sampling->set_top_p(static_cast<float>(top_p));
  sampling->set_top_k(top_k);
  sampling->set_min_p(static_cast<float>(min_p));
  sampling->set_repetition_penalty(static_cast<float>(repetition_penalty));
  sampling->set_frequency_penalty(static_cast<float>(frequency_penalty));
  sampling->set_presence_penalty(static_cast<float>(presence_penalty));
  sampling->mutable_logit_bias()->insert(logit_bias.begin(), logit_bias.end());
  sampling->set_seed(seed);
}

int ParseFlags(FlagParser& parser, const std::vector<std::string>& args,
               std::vector<std::string>* positional) {
  absl::StatusOr<std::vector<std::string>> parsed = parser.Parse(args);
  if (!parsed.ok()) {
    std::cerr << "error: " << parsed.status().message() << "\n";
    return kExitUsage;
  }
  if (parser.help_requested()) {
    std::cout << parser.Help();
    return kExitOk;
  }
  *positional = *std::move(parsed);
  return -1;
}

int PrintError(const absl::Status& status) {
  std::cerr << "error: " << absl::StatusCodeToString(status.code()) << ": " << status.message()
            << "\n";
  return kExitFailure;
}

std::string TextFromArgsOrStdin(const std::vector<std::string>& positional) {
  if (!positional.empty()) return absl::StrJoin(positional, " ");
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

bool ReadSchemaFlag(const std::string& path, std::string* schema) {
  if (path.empty()) return true;
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.is_open() || in.bad() || text.empty()) {
    std::cerr << "error: --json-schema: cannot read " << path << (in.is_open() ? " (empty)" : "")
              << "\n";
    return false;
  }
  *schema = std::move(text);
  return true;
}

bool ReadToolsFlag(const std::string& path, std::vector<quill::v1::Tool>* tools) {
  if (path.empty()) return true;
  std::ifstream in(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const nlohmann::json parsed = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  auto fail = [&path](const std::string& why) {
    std::cerr << "error: --tools: " << path << ": " << why << "\n";
    return false;
  };
  if (!in.is_open() || in.bad()) return fail("cannot read it");
  if (!parsed.is_array()) return fail("must hold a JSON array of tools");
  for (size_t i = 0; i < parsed.size(); ++i) {
    const nlohmann::json& entry = parsed[i];
    const nlohmann::json& function =
        entry.is_object() && entry.contains("function") ? entry["function"] : entry;
    if (!function.is_object() || !function.contains("name") || !function["name"].is_string()) {
      return fail(absl::StrCat("tool ", i, " has no \"name\""));
    }
    quill::v1::Tool tool;
    tool.set_name(function["name"].get<std::string>());
    if (function.contains("description") && function["description"].is_string()) {
      tool.set_description(function["description"].get<std::string>());
    }
    if (function.contains("parameters")) tool.set_parameters_json(function["parameters"].dump());
    tools->push_back(std::move(tool));
  }
  return true;
}

std::string DumpJson(const nlohmann::json& value, int indent) {
  return value.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

nlohmann::json ToJson(const quill::v1::TokenLogprobs& token) {
  nlohmann::json top = nlohmann::json::array();
  for (const quill::v1::TopLogprob& alt : token.top()) {
    top.push_back({{"token_id", alt.token_id()}, {"logprob", alt.logprob()}});
  }
  return {{"token_id", token.token_id()}, {"logprob", token.logprob()}, {"top", top}};
}

std::string AlternativesText(const quill::v1::TokenLogprobs& token) {
  if (token.top_size() == 0) return "";
  std::vector<std::string> top;
  for (const quill::v1::TopLogprob& alt : token.top()) {
    top.push_back(absl::StrFormat("%d:%.4f", alt.token_id(), alt.logprob()));
  }
  return absl::StrCat("  [", absl::StrJoin(top, " "), "]");
}

nlohmann::json ToJson(const quill::v1::GenerateResponse& response) {
  nlohmann::json out = {{"request_id", response.request_id()},
                        {"token_ids", response.token_ids()},
                        {"text", response.text()}};
  if (response.logprobs_size() > 0) {
    nlohmann::json logprobs = nlohmann::json::array();
    for (const quill::v1::TokenLogprobs& token : response.logprobs()) {
      logprobs.push_back(ToJson(token));
    }
    out["logprobs"] = logprobs;
  }
  if (response.finish_reason() != quill::v1::FINISH_REASON_UNSPECIFIED) {
    out["finish_reason"] = client::FinishReasonName(response.finish_reason());
  }
  if (response.tool_calls_size() > 0) {
    nlohmann::json calls = nlohmann::json::array();
    for (const quill::v1::ToolCall& call : response.tool_calls()) {
      calls.push_back(
          {{"id", call.id()}, {"name", call.name()}, {"arguments_json", call.arguments_json()}});
    }
    out["tool_calls"] = calls;
  }
  if (response.has_usage()) {
    out["usage"] = {{"prompt_tokens", response.usage().prompt_tokens()},
                    {"completion_tokens", response.usage().completion_tokens()},
                    {"cached_prompt_tokens", response.usage().cached_prompt_tokens()}};
  }
  if (response.has_timings()) {
    const quill::v1::Timings& t = response.timings();
    out["timings"] = {{"queue_seconds", t.queue_seconds()},
                      {"time_to_first_token_seconds", t.time_to_first_token_seconds()},
                      {"prefill_seconds", t.prefill_seconds()},
                      {"decode_seconds", t.decode_seconds()},
                      {"total_seconds", t.total_seconds()}};
  }
  return out;
}

nlohmann::json ToJson(const quill::v1::ModelInfo& info) {
  const quill::v1::ServerLimits& l = info.limits();
  return {{"name", info.name()},
          {"architecture", info.architecture()},
          {"path", info.path()},
          {"weight_type", info.weight_type()},
          {"precision", info.precision()},
          {"vocab_size", info.vocab_size()},
          {"context_length", info.context_length()},
          {"embedding_length", info.embedding_length()},
          {"block_count", info.block_count()},
          {"head_count", info.head_count()},
          {"head_count_kv", info.head_count_kv()},
          {"feed_forward_length", info.feed_forward_length()},
          {"parameter_count", info.parameter_count()},
          {"non_embedding_parameter_count", info.non_embedding_parameter_count()},
          {"kv_bytes_per_token", info.kv_bytes_per_token()},
          {"kv_cache_type", info.kv_cache_type()},
          {"tool_call_syntax", info.tool_call_syntax()},
          {"chat_thinks", info.chat_thinks()},
          {"weights_bytes", info.weights_bytes()},
          {"mapped_weights_bytes", info.mapped_weights_bytes()},
          {"resident_memory_bytes", info.resident_memory_bytes()},
          {"bos_token_id", info.bos_token_id()},
          {"eos_token_id", info.eos_token_id()},
          {"limits",
           {{"max_tokens", l.max_tokens()},
            {"max_prompt_tokens", l.max_prompt_tokens()},
            {"max_batch_tokens", l.max_batch_tokens()},
            {"prefill_chunk_tokens", l.prefill_chunk_tokens()},
            {"max_running", l.max_running()},
            {"max_queue", l.max_queue()},
            {"kv_cache_bytes", l.kv_cache_bytes()},
            {"kv_cache_blocks", l.kv_cache_blocks()},
            {"kv_block_size_tokens", l.kv_block_size_tokens()}}}};
}

nlohmann::json ToJson(const quill::v1::TokenizeResponse& response) {
  return {{"token_ids", response.token_ids()},
          {"pieces", response.pieces()},
          {"text", response.text()}};
}

}  // namespace quill::cli
