#include "server/http/openai_api.h"

#include <algorithm>
#include <atomic>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "engine/model/model.h"
#include "nlohmann/json.hpp"
#include "server/http/generation_stream.h"
#include "server/http/openai_error.h"
#include "server/request_codec.h"
#include "server/tool_request.h"
#include "spdlog/spdlog.h"

namespace quill::server::http {
namespace {

using json = nlohmann::json;

std::string Dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

// request_codec names Quill's proto fields; say what the OpenAI client sent instead
// (`prompt_field`: "prompt", or "prompt[i]" in a batch).
absl::Status InOpenAiTerms(const absl::Status& status, const OpenAiRequest& request,
                           const std::string& prompt_field = "prompt") {
  if (status.code() != absl::StatusCode::kInvalidArgument) return status;
  absl::string_view message = status.message();
  // Quill's proto nests the sampling fields; OpenAI's are flat.
  if (absl::ConsumePrefix(&message, "sampling.")) {
    return absl::InvalidArgumentError(message);
  }
  const struct {
    absl::string_view proto;
    std::string openai;
  } renames[] = {{"prompt_token_ids", prompt_field},
                 {"prompt", prompt_field},
                 {"max_tokens", request.max_tokens_field},
                 {"logprobs", request.logprobs_field}};
  for (const auto& r : renames) {
    if (absl::StartsWith(message, r.proto) && message.size() > r.proto.size() &&
        (message[r.proto.size()] == ' ' || message[r.proto.size()] == '[' ||
         message[r.proto.size()] == '(')) {
      return absl::InvalidArgumentError(absl::StrCat(r.openai, message.substr(r.proto.size())));
    }
  }
  return status;
}

}  // namespace

OpenAiApi::OpenAiApi(RequestGateway* gateway, const ApiKeys* api_keys)
    : gateway_(gateway),
      api_keys_(api_keys),
      created_(absl::ToUnixSeconds(absl::Now())),
      seed_state_(std::random_device()()) {}

uint64_t OpenAiApi::NextSeed() {
  return MixSeed(seed_state_.fetch_add(kSeedStep, std::memory_order_relaxed));
}

HttpResponseHead OpenAiApi::TransportError(int status, const std::string& message,
                                           std::string* body) {
  return OpenAiHttpError(status, message, body);
}

void OpenAiApi::Fail(const absl::Status& status, ResponseChannel& channel) {
  std::string body;
  HttpResponseHead head = OpenAiErrorResponse(status, &body);
  channel.Respond(std::move(head), std::move(body));
}

void OpenAiApi::Handle(const HttpRequest& request, std::shared_ptr<ResponseChannel> channel) {
  const std::string& path = request.path;
  const bool get = request.method == "GET";
  const bool post = request.method == "POST";
  auto wrong_method = [&](const char* allowed) {
    std::string body;
    HttpResponseHead head = OpenAiHttpError(
        405, absl::StrCat(request.method, " is not allowed on ", path, "; use ", allowed), &body);
    head.headers.emplace_back("Allow", allowed);
    channel->Respond(std::move(head), std::move(body));
  };
  const bool generation = path == "/v1/completions" || path == "/v1/chat/completions";
  // Health stays open, for load balancers and Kubernetes probes.
  if (api_keys_ != nullptr && path != "/health") {
    if (absl::Status s = api_keys_->Check(request.Header("authorization")); !s.ok()) {
      if (generation) gateway_->RecordRejected(Api::kHttp);
      return Fail(s, *channel);
    }
  }
  if (generation) {
    if (!post) return wrong_method("POST");
    // With keys on, the key's tenant (x-quill-tenant is ignored); else the header's.
    const absl::string_view header = request.Header(kTenantHeader);
    absl::StatusOr<Tenant> tenant =
        ResolveTenant(api_keys_, request.Header("authorization"),
                      header.empty() ? std::nullopt : std::optional<absl::string_view>(header));
    if (!tenant.ok()) {
      gateway_->RecordRejected(Api::kHttp);
      return Fail(tenant.status(), *channel);
    }
    return Generate(request,
                    path == "/v1/completions" ? Endpoint::kCompletions : Endpoint::kChatCompletions,
                    *tenant, std::move(channel));
  }
  if (path == "/v1/models" || absl::StartsWith(path, "/v1/models/")) {
    if (!get) return wrong_method("GET");
    return Models(request, *channel);
  }
  if (path == "/health") {
    if (!get) return wrong_method("GET");
    return Health(*channel);
  }
  if (path == "/tokenize" || path == "/detokenize") {
    if (!post) return wrong_method("POST");
    return path == "/tokenize" ? Tokenize(request, *channel) : Detokenize(request, *channel);
  }
  std::string body;
  HttpResponseHead head =
      OpenAiHttpError(404, absl::StrCat("no route for ", request.method, " ", path), &body);
  channel->Respond(std::move(head), std::move(body));
}

void OpenAiApi::Health(ResponseChannel& channel) {
  HttpResponseHead head;
  const char* state = gateway_->loading() ? "loading" : gateway_->draining() ? "draining" : "ok";
  head.status = gateway_->CheckServing().ok() ? 200 : 503;
  channel.Respond(std::move(head), Dump({{"status", state}}));
}

void OpenAiApi::Models(const HttpRequest& request, ResponseChannel& channel) {
  if (absl::Status s = gateway_->CheckServing(); !s.ok()) return Fail(s, channel);
  const json model = {{"id", gateway_->model_name()},
                      {"object", "model"},
                      {"created", created_},
                      {"owned_by", "quill"}};
  if (request.path == "/v1/models") {
    HttpResponseHead head;
    channel.Respond(std::move(head), Dump({{"object", "list"}, {"data", json::array({model})}}));
    return;
  }
  const std::string id = request.path.substr(std::string("/v1/models/").size());
  if (id != gateway_->model_name()) {
    return Fail(absl::NotFoundError(absl::StrCat("The model '", id,
                                                 "' does not exist; this "
                                                 "server serves '",
                                                 gateway_->model_name(), "'")),
                channel);
  }
  channel.Respond(HttpResponseHead(), Dump(model));
}

void OpenAiApi::Tokenize(const HttpRequest& request, ResponseChannel& channel) {
  absl::StatusOr<quill::v1::TokenizeRequest> parsed = ParseTokenizeRequest(request.body);
  if (!parsed.ok()) return Fail(parsed.status(), channel);
  absl::StatusOr<quill::v1::TokenizeResponse> out = gateway_->Tokenize(*parsed, "prompt");
  if (!out.ok()) return Fail(out.status(), channel);
  const json body = {{"tokens", out->token_ids()},
                     {"token_strs", out->pieces()},
                     {"count", out->token_ids_size()},
                     {"max_model_len", gateway_->limits().context_length}};
  channel.Respond(HttpResponseHead(), Dump(body));
}

void OpenAiApi::Detokenize(const HttpRequest& request, ResponseChannel& channel) {
  absl::StatusOr<std::vector<int32_t>> ids = ParseDetokenizeRequest(request.body);
  if (!ids.ok()) return Fail(ids.status(), channel);
  absl::StatusOr<std::string> text = gateway_->Detokenize(*ids);
  if (!text.ok()) return Fail(text.status(), channel);
  channel.Respond(HttpResponseHead(), Dump(json{{"prompt", *text}}));
}

absl::StatusOr<std::vector<engine::GenerationRequest>> OpenAiApi::Prepare(
    const OpenAiRequest& parsed, Endpoint endpoint, const Tenant& tenant) {
  // Chat renders the messages with the chat template (FAILED_PRECONDITION, a 400, without
  // one); both then go the way gRPC's Generate and Chat go, a completion once per prompt.
  std::vector<engine::GenerationRequest> prepared;
  if (endpoint == Endpoint::kChatCompletions) {
    absl::StatusOr<engine::GenerationRequest> chat =
        gateway_->PrepareChat(parsed.messages, parsed.generate, parsed.template_variables,
                              absl::InfiniteFuture(), Api::kHttp, tenant);
    if (!chat.ok()) return InOpenAiTerms(chat.status(), parsed);
    if (absl::Status s = CheckCallsReadable(parsed.tools, gateway_->tool_call_syntax()); !s.ok()) {
      gateway_->RecordRejected(Api::kHttp, tenant.name);
      return s;
    }
    prepared.push_back(*std::move(chat));
    return prepared;
  }
  const bool batch = parsed.prompts.size() > 1;
  for (size_t p = 0; p < parsed.prompts.size(); ++p) {
    quill::v1::GenerateRequest one = parsed.generate;
    one.clear_input();
    one.MergeFrom(parsed.prompts[p]);  // only the prompt is set there
    absl::StatusOr<engine::GenerationRequest> completion =
        gateway_->Prepare(one, absl::InfiniteFuture(), Api::kHttp, tenant);
    if (!completion.ok()) {
      return InOpenAiTerms(completion.status(), parsed,
                           batch ? absl::StrCat("prompt[", p, "]") : "prompt");
    }
    prepared.push_back(*std::move(completion));
  }
  return prepared;
}

ResponseFormat OpenAiApi::FormatFor(const OpenAiRequest& parsed, Endpoint endpoint,
                                    const std::vector<engine::GenerationRequest>& prepared) const {
  ResponseFormat format;
  format.endpoint = endpoint;
  format.id = absl::StrCat(endpoint == Endpoint::kChatCompletions ? "chatcmpl-" : "cmpl-",
                           prepared[0].request_id);
  format.model = gateway_->model_name();
  format.created = absl::ToUnixSeconds(absl::Now());
  for (const engine::GenerationRequest& r : prepared) {
    format.prompt_tokens += static_cast<int>(r.prompt_ids.size());
  }
  format.n = parsed.n;
  format.choices = parsed.n * static_cast<int>(prepared.size());
  format.include_usage = parsed.include_usage;
  format.continuous_usage = parsed.continuous_usage;
  format.logprobs = parsed.logprobs;
  format.tool_calls = ReadingOf(parsed.tools, gateway_->tool_call_syntax());
  format.top_logprobs = parsed.top_logprobs;
  format.tokenizer = &gateway_->engine()->model().tokenizer();
  for (const engine::GenerationRequest& r : prepared) {
    const bool bos_only = r.prompt_ids.size() == 1 && r.prompt_ids[0] == format.tokenizer->bos_id();
    format.drops_first_space.push_back(format.tokenizer->adds_space_prefix() &&
                                       (parsed.echo || bos_only));
  }
  if (endpoint == Endpoint::kChatCompletions) {
    format.reasoning = gateway_->ReasoningSplitOf(prepared[0]);
  }
  if (!parsed.echo) return format;
  // Each prompt as sent; a prompt of token ids as the text that encodes to them.
  for (size_t p = 0; p < prepared.size(); ++p) {
    const std::vector<engine::TokenId>& ids = prepared[p].prompt_ids;
    ResponseFormat::Echo echo;
    echo.text = parsed.prompts[p].has_prompt_token_ids() ? IdsToText(ids, *format.tokenizer)
                                                         : parsed.prompts[p].prompt();
    echo.first_token = ids.empty() ? 0 : ids[0];
    format.echo.push_back(std::move(echo));
  }
  return format;
}

std::vector<engine::GenerationRequest> OpenAiApi::ChoiceRequests(
    const std::vector<engine::GenerationRequest>& prepared, int n) {
  // Choice p * n + j answers prompt p: choice p * n is its prepared request, the others
  // copies under their own id and seed.
  std::vector<engine::GenerationRequest> requests;
  requests.reserve(prepared.size() * n);
  for (const engine::GenerationRequest& prompt : prepared) {
    for (int j = 0; j < n; ++j) {
      requests.push_back(prompt);
      if (j == 0) continue;
      requests.back().request_id = absl::StrCat(prompt.request_id, "-", j);
      requests.back().sampling.seed = ChoiceSeed(prompt.sampling.seed, j);
    }
  }
  return requests;
}

void OpenAiApi::Generate(const HttpRequest& request, Endpoint endpoint, const Tenant& tenant,
                         std::shared_ptr<ResponseChannel> channel) {
  if (absl::Status s = gateway_->CheckServing(); !s.ok()) {
    gateway_->RecordRejected(Api::kHttp, tenant.name);
    return Fail(s, *channel);
  }
  absl::StatusOr<OpenAiRequest> parsed = ParseOpenAiRequest(request.body, endpoint, NextSeed());
  if (!parsed.ok()) {
    gateway_->RecordRejected(Api::kHttp, tenant.name);
    return Fail(parsed.status(), *channel);
  }
  absl::StatusOr<std::vector<engine::GenerationRequest>> prepared =
      Prepare(*parsed, endpoint, tenant);
  if (!prepared.ok()) return Fail(prepared.status(), *channel);
  ResponseFormat format = FormatFor(*parsed, endpoint, *prepared);
  std::vector<engine::GenerationRequest> requests = ChoiceRequests(*prepared, parsed->n);
  const int choices = static_cast<int>(requests.size());
  std::vector<std::string> ids;
  for (const engine::GenerationRequest& r : requests) ids.push_back(r.request_id);
  // Only submitted choices are cancelled: an id never submitted may be someone else's.
  auto submitted = std::make_shared<std::atomic<int>>(0);
  RequestGateway* gateway = gateway_;
  auto cancel = [gateway, ids, submitted] {
    for (int i = 0; i < submitted->load(std::memory_order_acquire); ++i) gateway->Cancel(ids[i]);
  };
  auto resume = [gateway, ids](int index) { gateway->Resume(ids[index]); };
  auto stream = std::make_shared<GenerationStream>(
      std::move(format), parsed->stream, channel, std::move(cancel),
      /*max_pending_bytes=*/1 << 20, std::move(resume));
  // Output may arrive before Start(); the connection pulls it once the source is attached.
  for (int i = 0; i < choices; ++i) {
    absl::Status s =
        gateway_->Submit(std::move(requests[i]), GenerationStream::SinkFor(stream, i), Api::kHttp);
    if (!s.ok()) {
      // All or nothing: the choices already running end with this response.
      stream->OnClientGone();
      return Fail(s, *channel);
    }
    submitted->store(i + 1, std::memory_order_release);
  }
  channel->Start(std::move(stream));
}

}  // namespace quill::server::http
