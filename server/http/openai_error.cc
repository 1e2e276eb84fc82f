#include "server/http/openai_error.h"

#include <algorithm>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/runtime/retry_pushback.h"
#include "nlohmann/json.hpp"

namespace quill::server::http {
namespace {

absl::string_view ErrorType(int http_status) {
  switch (http_status) {
    case 400:
    case 404:
    case 405:
    case 413:
    case 431:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 429:
      return "rate_limit_error";
    case 503:
      return "overloaded_error";
    default:
      return http_status >= 500 ? "server_error" : "invalid_request_error";
  }
}

// The request field a validation message starts with: "sampling.temperature must ..." ->
// "temperature", "stop[1] is empty" -> "stop", "messages[0].role ..." -> "messages". Only
// fields of the OpenAI requests (and Quill's extras) count.
std::string ParamOf(absl::string_view message) {
  static constexpr absl::string_view kFields[] = {"model",
                                                  "prompt",
                                                  "messages",
                                                  "max_tokens",
                                                  "max_completion_tokens",
                                                  "temperature",
                                                  "top_p",
                                                  "top_k",
                                                  "min_p",
                                                  "repetition_penalty",
                                                  "seed",
                                                  "stop",
                                                  "n",
                                                  "best_of",
                                                  "echo",
                                                  "logprobs",
                                                  "top_logprobs",
                                                  "stream",
                                                  "stream_options",
                                                  "frequency_penalty",
                                                  "presence_penalty",
                                                  "logit_bias",
                                                  "suffix",
                                                  "tools",
                                                  "tool_choice",
                                                  "functions",
                                                  "response_format",
                                                  "ignore_eos",
                                                  "stop_token_ids",
                                                  "disable_speculation",
                                                  "tokens",
                                                  "add_special_tokens"};
  absl::string_view word = message.substr(0, message.find(' '));
  if (absl::StartsWith(word, "sampling.")) word.remove_prefix(9);  // Quill's proto nests it
  word = word.substr(0, word.find_first_of(".["));
  for (absl::string_view field : kFields) {
    if (word == field) return std::string(field);
  }
  return "";
}

std::string ErrorJson(int http_status, absl::string_view message, absl::string_view param,
                      const nlohmann::json& code) {
  nlohmann::json error = {{"message", message},
                          {"type", ErrorType(http_status)},
                          {"param", param.empty() ? nlohmann::json() : nlohmann::json(param)},
                          {"code", code}};
  return nlohmann::json({{"error", error}})
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

int HttpStatusOf(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAlreadyExists:
      return 409;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kCancelled:
      return 499;  // nginx's "client closed request"
    case absl::StatusCode::kUnimplemented:
      return 501;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

std::string OpenAiErrorJson(const absl::Status& status) {
  const int http_status = HttpStatusOf(status.code());
  const std::string param = http_status == 400 ? ParamOf(status.message()) : "";
  nlohmann::json code;  // null, except where OpenAI has a well-known one
  if (status.code() == absl::StatusCode::kResourceExhausted) code = "rate_limit_exceeded";
  if (status.code() == absl::StatusCode::kUnavailable) code = "server_unavailable";
  if (status.code() == absl::StatusCode::kUnauthenticated) code = "invalid_api_key";
  return ErrorJson(http_status, status.message(), param, code);
}

HttpResponseHead OpenAiErrorResponse(const absl::Status& status, std::string* body) {
  HttpResponseHead head;
  head.status = HttpStatusOf(status.code());
  if (head.status == 429 || head.status == 503) {
    // The engine's advice (from its measured drain rate) where it gave one, in whole
    // seconds rounded up, as Retry-After requires.
    int64_t seconds = kRetryAfterSeconds;
    if (std::optional<absl::Duration> pushback = engine::RetryPushbackOf(status)) {
      seconds = std::max<int64_t>(1, absl::ToInt64Seconds(absl::Ceil(*pushback, absl::Seconds(1))));
    }
    head.headers.emplace_back("Retry-After", absl::StrCat(seconds));
  }
  if (head.status == 401) head.headers.emplace_back("WWW-Authenticate", "Bearer");
  *body = OpenAiErrorJson(status);
  return head;
}

HttpResponseHead OpenAiHttpError(int http_status, absl::string_view message, std::string* body) {
  HttpResponseHead head;
  head.status = http_status;
  *body = ErrorJson(http_status, message, "", nullptr);
  return head;
}

}  // namespace quill::server::http
