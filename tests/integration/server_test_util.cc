#include "tests/integration/server_test_util.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <regex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"

namespace quill::testing {

quill::v1::GenerateRequest TextRequest(const std::string& prompt, int max_tokens) {
  quill::v1::GenerateRequest r;
  r.set_prompt(prompt);
  r.set_max_tokens(max_tokens);
  return r;
}

quill::v1::GenerateRequest IdsRequest(const std::vector<int>& ids, int max_tokens) {
  quill::v1::GenerateRequest r;
  for (int id : ids) r.mutable_prompt_token_ids()->add_ids(id);
  r.set_max_tokens(max_tokens);
  return r;
}

void SetSampling(quill::v1::GenerateRequest* request, float temperature, float top_p,
                 uint64_t seed) {
  SetSampling(request->mutable_sampling(), temperature, top_p, seed);
}

void SetSampling(quill::v1::SamplingParams* sampling, float temperature, float top_p,
                 uint64_t seed) {
  sampling->set_temperature(temperature);
  sampling->set_top_p(top_p);
  sampling->set_seed(seed);
}

namespace {

// Appends one streamed message to `stream`.
void Append(const quill::v1::GenerateResponse& response, Stream* stream) {
  stream->ids.insert(stream->ids.end(), response.token_ids().begin(), response.token_ids().end());
  stream->text += response.text();
  stream->reasoning += response.reasoning();
  for (const auto& lp : response.logprobs()) stream->logprobs.push_back(lp);
  // Prompt logprobs come on the first message only.
  if (stream->messages > 0 && response.prompt_logprobs_size() > 0) {
    ADD_FAILURE() << "prompt_logprobs on message " << stream->messages;
  }
  for (const auto& lp : response.prompt_logprobs()) stream->prompt_logprobs.push_back(lp);
  ++stream->messages;
  stream->last = response;
}

}  // namespace

Stream Collect(client::QuillClient& client, const quill::v1::GenerateRequest& request,
               absl::Duration timeout, client::GenerateCall* call,
               const std::function<void(const Stream&)>& on_message) {
  Stream stream;
  stream.status = client.Generate(
      request,
      [&](const quill::v1::GenerateResponse& response) {
        Append(response, &stream);
        if (on_message) on_message(stream);
      },
      timeout, /*hook=*/nullptr, call);
  return stream;
}

std::shared_ptr<grpc::Channel> TinyWindowChannel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 1024);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // its own connection
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

void NeverRead::Start(quill::v1::Generator::Stub& stub, quill::v1::GenerateRequest request) {
  request.set_logprobs(20);
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(120)));
  reader = stub.Generate(&context, request);
}

grpc::Status NeverRead::Drain(int* tokens) {
  quill::v1::GenerateResponse response;
  while (reader->Read(&response)) *tokens += response.token_ids_size();
  return reader->Finish();
}

quill::v1::GenerateRequest LongRequest() {
  quill::v1::GenerateRequest r = TextRequest("In the beginning", 240);
  r.set_ignore_eos(true);
  return r;
}

KvHog::KvHog(const std::string& address, const client::ClientContextHook& hook)
    : channel_(TinyWindowChannel(address)), stub_(quill::v1::Generator::NewStub(channel_)) {
  if (hook) hook(&call_.context);
  call_.Start(*stub_, LongRequest());
}

KvHog::~KvHog() {
  call_.context.TryCancel();
  int tokens = 0;
  call_.Drain(&tokens);
}

quill::v1::ChatRequest ChatRequestOf(
    const std::vector<std::pair<std::string, std::string>>& messages, int max_tokens) {
  quill::v1::ChatRequest r;
  for (const auto& [role, content] : messages) {
    quill::v1::ChatMessage* m = r.add_messages();
    m->set_role(role);
    m->set_content(content);
  }
  r.set_max_tokens(max_tokens);
  return r;
}

Stream CollectChat(client::QuillClient& client, const quill::v1::ChatRequest& request,
                   absl::Duration timeout) {
  Stream stream;
  stream.status = client.Chat(
      request, [&](const quill::v1::GenerateResponse& response) { Append(response, &stream); },
      timeout);
  return stream;
}

absl::StatusOr<std::string> QuillRunRenderChat(const std::vector<std::string>& args) {
  const std::string binary = BuildBinaryPath("engine/tools/quill-run");
  if (binary.empty()) return absl::NotFoundError("quill-run is not built");
  std::vector<std::string> argv = {binary, "--render-chat"};
  argv.insert(argv.end(), args.begin(), args.end());
  int code = -1;
  absl::StatusOr<std::string> out = RunAndCapture(argv, &code);
  if (!out.ok()) return out.status();
  if (code != 0) return absl::InternalError(absl::StrCat("quill-run exited ", code, ": ", *out));
  return out;
}

absl::StatusOr<std::vector<int>> QuillRunIds(const std::vector<std::string>& args) {
  const std::string binary = BuildBinaryPath("engine/tools/quill-run");
  if (binary.empty()) return absl::NotFoundError("quill-run is not built");
  std::vector<std::string> argv = {binary};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back("--ids");
  // One thread: OpenMP teams spin-wait, which is slow on a busy 2-core machine (and the
  // in-process server is using the cores too). Exact mode does not depend on it.
  argv.push_back("--threads");
  argv.push_back("1");
  int code = -1;
  absl::StatusOr<std::string> out = RunAndCapture(argv, &code);
  if (!out.ok()) return out.status();
  if (code != 0) return absl::InternalError(absl::StrCat("quill-run exited ", code, ": ", *out));
  std::vector<int> ids;
  std::string last;
  for (absl::string_view line : absl::StrSplit(*out, '\n')) {
    if (!line.empty() && line.find_first_not_of("0123456789,") == absl::string_view::npos) {
      last = std::string(line);
    }
  }
  if (last.empty()) return absl::InternalError(absl::StrCat("no ids in quill-run output: ", *out));
  for (absl::string_view id : absl::StrSplit(last, ',')) {
    int value;
    if (!absl::SimpleAtoi(id, &value)) return absl::InternalError("bad id " + std::string(id));
    ids.push_back(value);
  }
  return ids;
}

absl::StatusOr<std::string> RenderChat(
    const std::vector<std::pair<std::string, std::string>>& messages, const std::string& model,
    const std::string& template_path) {
  nlohmann::ordered_json json = nlohmann::ordered_json::array();
  for (const auto& [role, content] : messages) {
    json.push_back({{"role", role}, {"content", content}});
  }
  static std::atomic<int> next{0};
  const std::string path =
      absl::StrCat(::testing::TempDir(), "/render_chat_", getpid(), "_", next++, ".json");
  {
    std::ofstream out(path, std::ios::binary);
    out << json.dump();
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  }
  absl::StatusOr<std::string> rendered =
      QuillRunRenderChat({path, "-m", model, "--chat-template", template_path});
  std::remove(path.c_str());
  return rendered;
}

absl::StatusOr<PromText> ScrapeUntil(int port, const std::function<bool(const PromText&)>& done,
                                     absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    absl::StatusOr<PromText> text = ScrapeMetrics(port);
    if (!text.ok()) return text.status();
    if (done(*text)) return text;
    if (absl::Now() >= deadline) {
      // An error, not the last scrape: a caller that forgot to re-check its condition
      // would otherwise go on as if it had held.
      return absl::DeadlineExceededError(absl::StrCat("the /metrics condition did not hold within ",
                                                      absl::FormatDuration(timeout)));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

PromText ScrapeWhenIdle(int port) {
  const auto idle = [](const PromText& t) {
    return t.Value("quill_requests_running") == 0.0 && t.Value("quill_requests_waiting") == 0.0 &&
           t.Value("quill_kv_cache_blocks_used") == 0.0;
  };
  absl::StatusOr<PromText> text = ScrapeUntil(port, idle);
  // The scrape after the first idle one starts once the gauges are idle: every count is in.
  if (text.ok()) text = ScrapeUntil(port, idle);
  EXPECT_TRUE(text.ok()) << text.status() << ": the server never showed idle";
  return text.ok() ? *std::move(text) : PromText();
}

bool GaugeReaches(int metrics_port, const std::string& name, double value) {
  absl::StatusOr<PromText> text =
      ScrapeUntil(metrics_port, [&](const PromText& t) { return t.Value(name) == value; });
  return text.ok() && text->Value(name) == value;
}

double Metric(const PromText& text, const std::string& name, const Labels& labels) {
  std::optional<double> value = text.Value(name, labels);
  EXPECT_TRUE(value.has_value()) << name << " missing";
  return value.value_or(0);
}

}  // namespace quill::testing
