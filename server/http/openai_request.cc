#include "server/http/openai_request.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/sampler/json_schema.h"
#include "nlohmann/json.hpp"
#include "server/template_kwargs.h"
#include "server/tool_request.h"

namespace quill::server::http {
namespace {

// Ordered: chat messages reach the template with their keys in the client's order.
using json = nlohmann::ordered_json;

constexpr int kMaxJsonDepth = 64;

absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, " ", what));
}

// Deeper nesting than any real request is refused before parsing.
bool NestingWithin(absl::string_view text, int limit) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

const json* Find(const json& object, const char* field) {
  auto it = object.find(field);
  if (it == object.end() || it->is_null()) return nullptr;  // null means "not given"
  return &*it;
}

absl::Status GetBool(const json& object, const char* field, bool* out) {
  const json* v = Find(object, field);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_boolean()) return Invalid(field, "must be a boolean");
  *out = v->get<bool>();
  return absl::OkStatus();
}

absl::Status GetDouble(const json& object, const char* field, const json* v, double* out) {
  if (!v->is_number()) return Invalid(field, "must be a number");
  *out = v->get<double>();
  return absl::OkStatus();
}

absl::Status GetFloat(const json& object, const char* field, float* out, bool* given = nullptr) {
  const json* v = Find(object, field);
  if (v == nullptr) return absl::OkStatus();
  double d = 0;
  if (absl::Status s = GetDouble(object, field, v, &d); !s.ok()) return s;
  if (std::isfinite(d) && std::fabs(d) > std::numeric_limits<float>::max()) {
    return Invalid(field, absl::StrCat("is out of range, got ", d));
  }
  *out = static_cast<float>(d);
  if (given != nullptr) *given = true;
  return absl::OkStatus();
}

// An integer (a JSON number with no fractional part), within int64.
absl::Status GetInt64(const char* field, const json& v, int64_t* out) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() &&
        v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Invalid(field, "is out of range");
    }
    *out = v.get<int64_t>();
    return absl::OkStatus();
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e18) {
      *out = static_cast<int64_t>(d);
      return absl::OkStatus();
    }
  }
  return Invalid(field, "must be an integer");
}

absl::Status GetInt(const json& object, const char* field, int* out, bool* given = nullptr) {
  const json* v = Find(object, field);
  if (v == nullptr) return absl::OkStatus();
  int64_t value = 0;
  if (absl::Status s = GetInt64(field, *v, &value); !s.ok()) return s;
  if (value < std::numeric_limits<int>::min() || value > std::numeric_limits<int>::max()) {
    return Invalid(field, absl::StrCat("is out of range, got ", value));
  }
  *out = static_cast<int>(value);
  if (given != nullptr) *given = true;
  return absl::OkStatus();
}

absl::Status GetIdList(const char* field, const json& v, std::vector<int32_t>* out) {
  if (!v.is_array()) return Invalid(field, "must be an array of token ids");
  for (size_t i = 0; i < v.size(); ++i) {
    int64_t id = 0;
    const std::string name = absl::StrCat(field, "[", i, "]");
    if (absl::Status s = GetInt64(name.c_str(), v[i], &id); !s.ok()) return s;
    if (id < std::numeric_limits<int32_t>::min() || id > std::numeric_limits<int32_t>::max()) {
      return Invalid(name, absl::StrCat("is out of range, got ", id));
    }
    out->push_back(static_cast<int32_t>(id));
  }
  return absl::OkStatus();
}

// One prompt: a string or an array of token ids.
absl::Status ParseOnePrompt(const std::string& field, const json& p,
                            quill::v1::GenerateRequest* out) {
  if (p.is_string()) {
    out->set_prompt(p.get<std::string>());
    return absl::OkStatus();
  }
  std::vector<int32_t> ids;
  if (absl::Status s = GetIdList(field.c_str(), p, &ids); !s.ok()) return s;
  out->mutable_prompt_token_ids()->mutable_ids()->Assign(ids.begin(), ids.end());
  return absl::OkStatus();
}

// "prompt": a string, an array of token ids, or a batch: an array of strings or of token-id
// arrays.
absl::Status ParsePrompts(const json& body, std::vector<quill::v1::GenerateRequest>* out) {
  const json* p = Find(body, "prompt");
  if (p == nullptr) return Invalid("prompt", "is required");
  if (!p->is_string() && !p->is_array()) {
    return Invalid("prompt",
                   "must be a string, an array of token ids, or an array of such prompts");
  }
  if (p->is_array() && p->empty()) return Invalid("prompt", "is empty");
  if (p->is_string() || (*p)[0].is_number()) {
    out->emplace_back();
    return ParseOnePrompt("prompt", *p, &out->back());
  }
  if (p->size() > static_cast<size_t>(kMaxChoices)) {
    return Invalid("prompt", absl::StrCat("has ", p->size(), " prompts; at most ", kMaxChoices,
                                          " per request"));
  }
  for (size_t i = 0; i < p->size(); ++i) {
    const json& one = (*p)[i];
    const std::string field = absl::StrCat("prompt[", i, "]");
    if (!one.is_string() && !one.is_array()) {
      return Invalid(field, "must be a string or an array of token ids");
    }
    out->emplace_back();
    if (absl::Status s = ParseOnePrompt(field, one, &out->back()); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// content: a string, null, or an array of {"type": "text", "text": ...} parts (joined).
absl::Status ParseContent(const std::string& field, json* content) {
  if (content->is_null() || content->is_string()) return absl::OkStatus();
  if (!content->is_array()) return Invalid(field, "must be a string or an array of text parts");
  std::string joined;
  for (size_t i = 0; i < content->size(); ++i) {
    const json& part = (*content)[i];
    const std::string name = absl::StrCat(field, "[", i, "]");
    if (!part.is_object()) return Invalid(name, "must be an object");
    const json* type = Find(part, "type");
    if (type == nullptr || !type->is_string() || type->get<std::string>() != "text") {
      return Invalid(absl::StrCat(name, ".type"), "must be \"text\" (only text is supported)");
    }
    const json* text = Find(part, "text");
    if (text == nullptr || !text->is_string()) {
      return Invalid(absl::StrCat(name, ".text"), "must be a string");
    }
    joined += text->get<std::string>();
  }
  *content = std::move(joined);
  return absl::OkStatus();
}

// OpenAI sends an earlier call's arguments as JSON text; Hugging Face's chat format, which
// templates are written for, has them as an object (Qwen2.5 and Llama 3 print them with
// `| tojson`, a string would come out quoted). Text that is not an object stays as sent.
void CallArgumentsAsObjects(json* message) {
  auto calls = message->find("tool_calls");
  if (calls == message->end() || !calls->is_array()) return;
  for (json& call : *calls) {
    if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
    json& function = call["function"];
    if (!function.contains("arguments") || !function["arguments"].is_string()) continue;
    json arguments =
        json::parse(function["arguments"].get<std::string>(), nullptr, /*allow_exceptions=*/false);
    if (arguments.is_object()) function["arguments"] = std::move(arguments);
  }
}

absl::Status ParseMessages(const json& body, json* out) {
  const json* m = Find(body, "messages");
  if (m == nullptr) return Invalid("messages", "is required");
  if (!m->is_array()) return Invalid("messages", "must be an array");
  if (m->empty()) return Invalid("messages", "is empty");
  *out = *m;
  for (size_t i = 0; i < out->size(); ++i) {
    json& message = (*out)[i];
    const std::string field = absl::StrCat("messages[", i, "]");
    if (!message.is_object()) return Invalid(field, "must be an object");
    const json* role = Find(message, "role");
    if (role == nullptr || !role->is_string() || role->get<std::string>().empty()) {
      return Invalid(absl::StrCat(field, ".role"), "must be a non-empty string");
    }
    auto content = message.find("content");
    if (content != message.end()) {
      if (absl::Status s = ParseContent(absl::StrCat(field, ".content"), &*content); !s.ok()) {
        return s;
      }
    }
    CallArgumentsAsObjects(&message);
  }
  return absl::OkStatus();
}

absl::Status ParseStop(const json& body, quill::v1::GenerateRequest* out) {
  const json* stop = Find(body, "stop");
  if (stop == nullptr) return absl::OkStatus();
  if (stop->is_string()) {
    out->add_stop(stop->get<std::string>());
    return absl::OkStatus();
  }
  if (!stop->is_array()) return Invalid("stop", "must be a string or an array of strings");
  for (size_t i = 0; i < stop->size(); ++i) {
    if (!(*stop)[i].is_string()) return Invalid(absl::StrCat("stop[", i, "]"), "must be a string");
    out->add_stop((*stop)[i].get<std::string>());
  }
  return absl::OkStatus();
}

// Options OpenAI has and Quill does not implement: refused rather than ignored, since
// they change the answer.
absl::Status RefuseUnsupported(const json& body, Endpoint endpoint, int n) {
  // best_of = n returns every candidate, which is what n alone does; ranking more
  // candidates than are returned is not implemented.
  int best_of = n;
  if (absl::Status s = GetInt(body, "best_of", &best_of); !s.ok()) return s;
  if (best_of != n) {
    return Invalid("best_of", absl::StrCat("must equal n (", n, "), got ", best_of));
  }
  if (const json* suffix = Find(body, "suffix"); suffix != nullptr) {
    if (!suffix->is_string()) return Invalid("suffix", "must be a string");
    if (!suffix->get_ref<const std::string&>().empty()) {
      return Invalid("suffix",
                     "is not supported (no insertion: the completion follows the prompt)");
    }
  }
  // Chat's tools are parsed with tool_choice (server/tool_request.h). The deprecated functions,
  // and tools on completions, would be answered in plain text as if not sent.
  for (const char* field : {"tools", "functions"}) {
    if (endpoint == Endpoint::kChatCompletions && std::string(field) == "tools") continue;
    if (const json* list = Find(body, field); list != nullptr) {
      if (!list->is_array()) return Invalid(field, "must be an array");
      if (!list->empty()) {
        return Invalid(field, "is not supported here (chat's tools with tool_choice are)");
      }
    }
  }
  return absl::OkStatus();
}

// reasoning_effort (OpenAI's, for reasoning models): the chat template's reasoning_effort
// variable, as vLLM passes it (gpt-oss's and DeepSeek V4's templates read it); one that
// chat_template_kwargs sets wins. Templates without it ignore it.
absl::Status ParseReasoningEffort(const json& body, Endpoint endpoint, json* template_variables) {
  const json* effort = Find(body, "reasoning_effort");
  if (effort == nullptr || effort->is_null()) return absl::OkStatus();
  if (endpoint != Endpoint::kChatCompletions) {
    return Invalid("reasoning_effort", "is for /v1/chat/completions only");
  }
  constexpr absl::string_view kEfforts[] = {"none", "minimal", "low", "medium", "high", "xhigh"};
  if (!effort->is_string() || std::find(std::begin(kEfforts), std::end(kEfforts),
                                        effort->get<std::string>()) == std::end(kEfforts)) {
    return Invalid("reasoning_effort",
                   "must be \"none\", \"minimal\", \"low\", \"medium\", \"high\" or \"xhigh\"");
  }
  if (template_variables->is_object() && template_variables->contains("reasoning_effort")) {
    return absl::OkStatus();
  }
  *template_variables =
      WithTemplateKwargs(std::move(*template_variables), json{{"reasoning_effort", *effort}});
  return absl::OkStatus();
}

// response_format: "text" (the default), "json_object" (JSON mode: the engine masks
// every token that would break the object) or "json_schema" (structured output:
// {"json_schema": {"name": ..., "schema": {...}, "strict": ...}}, the object also
// satisfies the schema). The schema is compiled here too, so that what it cannot keep is
// a 400 naming response_format (the engine request is given its own compile).
absl::Status ParseResponseFormat(const json& body, quill::v1::GenerateRequest* generate) {
  const json* format = Find(body, "response_format");
  if (format == nullptr) return absl::OkStatus();
  const json* type = format->is_object() ? Find(*format, "type") : nullptr;
  if (type == nullptr || !type->is_string()) {
    return Invalid("response_format", "must be an object with a string \"type\"");
  }
  const std::string& name = type->get_ref<const std::string&>();
  if (name == "json_object") {
    generate->set_json_object(true);
  } else if (name == "json_schema") {
    const json* spec = Find(*format, "json_schema");
    const json* schema = spec != nullptr && spec->is_object() ? Find(*spec, "schema") : nullptr;
    if (schema == nullptr) {
      return Invalid("response_format",
                     "json_schema must be an object with the schema in \"schema\"");
    }
    const std::string text = schema->dump();
    if (auto compiled = engine::JsonSchema::Compile(text); !compiled.ok()) {
      return Invalid("response_format",
                     absl::StrCat("json_schema.schema ", compiled.status().message()));
    }
    generate->set_json_object(true);
    generate->set_json_schema(text);
  } else if (name != "text") {
    return Invalid("response_format",
                   absl::StrCat("type \"", name,
                                "\" is not supported (only \"text\", \"json_object\" and "
                                "\"json_schema\")"));
  }
  return absl::OkStatus();
}

// logit_bias: {"token id": bias, ...}, keys as decimal strings (OpenAI's form). The ids and
// biases are range-checked with the gRPC request's rules.
absl::Status ParseLogitBias(const json& body, quill::v1::SamplingParams* s) {
  const json* bias = Find(body, "logit_bias");
  if (bias == nullptr) return absl::OkStatus();
  if (!bias->is_object()) return Invalid("logit_bias", "must be an object of token id -> bias");
  for (const auto& [key, value] : bias->items()) {
    int32_t id = 0;
    if (!absl::SimpleAtoi(key, &id)) {
      return Invalid("logit_bias", absl::StrCat("keys must be token ids, got \"", key, "\""));
    }
    if (!value.is_number()) {
      return Invalid(absl::StrCat("logit_bias[", key, "]"), "must be a number");
    }
    const double d = value.get<double>();
    // Beyond float's range it is +-inf (the range check refuses it; a cast would be UB).
    (*s->mutable_logit_bias())[id] = std::fabs(d) <= std::numeric_limits<float>::max()
                                         ? static_cast<float>(d)
                                         : std::copysign(std::numeric_limits<float>::infinity(), d);
  }
  return absl::OkStatus();
}

absl::Status ParseSampling(const json& body, uint64_t random_seed,
                           quill::v1::GenerateRequest* out) {
  quill::v1::SamplingParams* s = out->mutable_sampling();
  s->set_temperature(1.0f);  // OpenAI's default
  float value = 0;
  bool given = false;
  if (absl::Status st = GetFloat(body, "temperature", &value, &given); !st.ok()) return st;
  if (given) s->set_temperature(value);
  given = false;
  if (absl::Status st = GetFloat(body, "top_p", &value, &given); !st.ok()) return st;
  if (given) {
    // Quill's proto reads 0 as "unset"; OpenAI's 0 is out of range: keep it so.
    if (value == 0) return Invalid("top_p", "must be in (0, 1], got 0");
    s->set_top_p(value);
  }
  int top_k = 0;
  if (absl::Status st = GetInt(body, "top_k", &top_k); !st.ok()) return st;
  // vLLM and llama.cpp read -1 as "off".
  s->set_top_k(top_k == -1 ? 0 : top_k);
  given = false;
  if (absl::Status st = GetFloat(body, "min_p", &value, &given); !st.ok()) return st;
  if (given) s->set_min_p(value);
  given = false;
  if (absl::Status st = GetFloat(body, "repetition_penalty", &value, &given); !st.ok()) return st;
  if (given) {
    if (value == 0) return Invalid("repetition_penalty", "must be > 0, got 0");
    s->set_repetition_penalty(value);
  }
  for (const auto& [field, setter] :
       {std::pair{"frequency_penalty", &quill::v1::SamplingParams::set_frequency_penalty},
        std::pair{"presence_penalty", &quill::v1::SamplingParams::set_presence_penalty}}) {
    value = 0;
    if (absl::Status st = GetFloat(body, field, &value); !st.ok()) return st;
    (s->*setter)(value);
  }
  if (absl::Status st = ParseLogitBias(body, s); !st.ok()) return st;
  s->set_seed(random_seed);
  if (const json* seed = Find(body, "seed"); seed != nullptr) {
    int64_t v = 0;
    if (absl::Status st = GetInt64("seed", *seed, &v); !st.ok()) return st;
    s->set_seed(static_cast<uint64_t>(v));
  }
  return absl::OkStatus();
}

absl::Status ParseLogprobs(const json& body, Endpoint endpoint, OpenAiRequest* out) {
  if (endpoint == Endpoint::kChatCompletions) {
    if (absl::Status s = GetBool(body, "logprobs", &out->logprobs); !s.ok()) return s;
    bool top_given = false;
    if (absl::Status s = GetInt(body, "top_logprobs", &out->top_logprobs, &top_given); !s.ok()) {
      return s;
    }
    if (top_given && !out->logprobs) return Invalid("top_logprobs", "requires logprobs: true");
    out->logprobs_field = "top_logprobs";
  } else {
    bool given = false;
    if (absl::Status s = GetInt(body, "logprobs", &out->top_logprobs, &given); !s.ok()) return s;
    out->logprobs = given;
  }
  if (out->logprobs) {
    if (out->top_logprobs < 0) {
      return Invalid(out->logprobs_field, absl::StrCat("must be >= 0, got ", out->top_logprobs));
    }
    out->generate.set_logprobs(std::max(1, out->top_logprobs));
  }
  return absl::OkStatus();
}

// The body as a JSON object, refused unparsed when it nests deeper than any real request.
absl::StatusOr<json> ParseObject(absl::string_view body) {
  if (!NestingWithin(body, kMaxJsonDepth)) {
    return absl::InvalidArgumentError(
        absl::StrCat("The request body nests deeper than ", kMaxJsonDepth, " levels"));
  }
  json parsed = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) {
    return absl::InvalidArgumentError("The request body is not valid JSON");
  }
  if (!parsed.is_object()) {
    return absl::InvalidArgumentError("The request body must be a JSON object");
  }
  return parsed;
}

}  // namespace

uint64_t MixSeed(uint64_t counter) {
  uint64_t z = counter;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t ChoiceSeed(uint64_t seed, int index) {
  if (index == 0) return seed;
  return MixSeed(seed + static_cast<uint64_t>(index) * kSeedStep);
}

absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(absl::string_view body, Endpoint endpoint,
                                                 uint64_t random_seed) {
  absl::StatusOr<json> object = ParseObject(body);
  if (!object.ok()) return object.status();
  const json& parsed = *object;

  OpenAiRequest out;
  out.endpoint = endpoint;
  if (const json* model = Find(parsed, "model"); model != nullptr && !model->is_string()) {
    return Invalid("model", "must be a string");
  }
  if (endpoint == Endpoint::kCompletions) {
    if (absl::Status s = ParsePrompts(parsed, &out.prompts); !s.ok()) return s;
    out.generate = out.prompts[0];
  } else {
    if (absl::Status s = ParseMessages(parsed, &out.messages); !s.ok()) return s;
  }
  if (absl::Status s = GetInt(parsed, "n", &out.n); !s.ok()) return s;
  if (out.n < 1 || out.n > kMaxChoices) {
    return Invalid("n", absl::StrCat("must be in [1, ", kMaxChoices, "], got ", out.n));
  }
  const size_t choices = out.n * std::max<size_t>(out.prompts.size(), 1);
  if (choices > static_cast<size_t>(kMaxChoices)) {
    return Invalid("n", absl::StrCat("gives ", choices, " choices over ", out.prompts.size(),
                                     " prompts; at most ", kMaxChoices, " per request"));
  }
  if (absl::Status s = RefuseUnsupported(parsed, endpoint, out.n); !s.ok()) return s;

  int max_tokens = 0;
  bool given = false;
  if (absl::Status s = GetInt(parsed, "max_tokens", &max_tokens, &given); !s.ok()) return s;
  bool completion_given = false;
  if (absl::Status s = GetInt(parsed, "max_completion_tokens", &max_tokens, &completion_given);
      !s.ok()) {
    return s;
  }
  if (completion_given) out.max_tokens_field = "max_completion_tokens";
  out.max_tokens_given = given || completion_given;
  if (out.max_tokens_given) {
    // Chat reads 0 as "fit the context"; from a client it is out of range.
    if (endpoint == Endpoint::kChatCompletions && max_tokens < 1) {
      return Invalid(out.max_tokens_field, absl::StrCat("must be >= 1, got ", max_tokens));
    }
    out.generate.set_max_tokens(max_tokens);
  } else if (endpoint == Endpoint::kCompletions) {
    out.generate.set_max_tokens(kDefaultCompletionMaxTokens);
  }

  if (absl::Status s = ParseSampling(parsed, random_seed, &out.generate); !s.ok()) return s;
  if (absl::Status s = ParseStop(parsed, &out.generate); !s.ok()) return s;
  if (absl::Status s = ParseLogprobs(parsed, endpoint, &out); !s.ok()) return s;
  if (absl::Status s = GetBool(parsed, "echo", &out.echo); !s.ok()) return s;
  if (out.echo && endpoint == Endpoint::kChatCompletions) {
    return Invalid("echo", "is for /v1/completions only");
  }
  // Echoed prompt tokens carry their logprobs (the engine scores the prompt).
  out.generate.set_prompt_logprobs(out.echo && out.logprobs);
  bool ignore_eos = false;
  if (absl::Status s = GetBool(parsed, "ignore_eos", &ignore_eos); !s.ok()) return s;
  out.generate.set_ignore_eos(ignore_eos);
  // Quill's extra, as in the gRPC request: the same tokens, without speculative drafting.
  bool disable_speculation = false;
  if (absl::Status s = GetBool(parsed, "disable_speculation", &disable_speculation); !s.ok()) {
    return s;
  }
  out.generate.set_disable_speculation(disable_speculation);
  if (absl::Status s = ParseResponseFormat(parsed, &out.generate); !s.ok()) return s;
  if (out.generate.json_object() && ignore_eos) {
    return Invalid("response_format",
                   "json_object cannot be combined with ignore_eos (the object's end ends the "
                   "answer)");
  }
  if (endpoint == Endpoint::kChatCompletions) {
    absl::StatusOr<ToolRequest> tools = ParseTools(parsed);
    if (!tools.ok()) return tools.status();
    if (!tools->tools.is_null()) out.template_variables = {{"tools", tools->tools}};
    if (!tools->call_schema.empty()) {
      if (ignore_eos) return Invalid("tool_choice", "cannot force a call beside ignore_eos");
      out.generate.set_json_object(true);
      out.generate.set_json_schema(tools->call_schema);
      // A call's message has no content to score (OpenAI answers logprobs null).
      out.logprobs = false;
      out.top_logprobs = 0;
      out.generate.set_logprobs(0);
    }
    out.tools = *std::move(tools);
  }
  if (const json* kwargs = Find(parsed, "chat_template_kwargs"); kwargs != nullptr) {
    if (endpoint != Endpoint::kChatCompletions && !kwargs->is_null()) {
      return Invalid("chat_template_kwargs", "is for /v1/chat/completions only");
    }
    absl::StatusOr<json> checked = CheckTemplateKwargs(*kwargs, "chat_template_kwargs");
    if (!checked.ok()) return checked.status();
    out.template_variables = WithTemplateKwargs(std::move(out.template_variables), *checked);
  }
  if (absl::Status s = ParseReasoningEffort(parsed, endpoint, &out.template_variables); !s.ok()) {
    return s;
  }
  if (const json* ids = Find(parsed, "stop_token_ids"); ids != nullptr) {
    std::vector<int32_t> list;
    if (absl::Status s = GetIdList("stop_token_ids", *ids, &list); !s.ok()) return s;
    for (int32_t id : list) out.generate.add_stop_token_ids(id);
  }

  if (absl::Status s = GetBool(parsed, "stream", &out.stream); !s.ok()) return s;
  if (const json* options = Find(parsed, "stream_options"); options != nullptr) {
    if (!options->is_object()) return Invalid("stream_options", "must be an object");
    if (absl::Status s = GetBool(*options, "include_usage", &out.include_usage); !s.ok()) {
      return Invalid("stream_options.include_usage", "must be a boolean");
    }
    if (absl::Status s = GetBool(*options, "continuous_usage_stats", &out.continuous_usage);
        !s.ok()) {
      return Invalid("stream_options.continuous_usage_stats", "must be a boolean");
    }
  }
  return out;
}

absl::StatusOr<quill::v1::TokenizeRequest> ParseTokenizeRequest(absl::string_view body) {
  absl::StatusOr<json> parsed = ParseObject(body);
  if (!parsed.ok()) return parsed.status();
  const json* prompt = Find(*parsed, "prompt");
  if (prompt == nullptr) return Invalid("prompt", "is required");
  if (!prompt->is_string()) return Invalid("prompt", "must be a string");
  quill::v1::TokenizeRequest out;
  out.set_text(prompt->get<std::string>());
  bool add_special = true;
  if (absl::Status s = GetBool(*parsed, "add_special_tokens", &add_special); !s.ok()) return s;
  out.set_add_special_tokens(add_special);
  return out;
}

absl::StatusOr<std::vector<int32_t>> ParseDetokenizeRequest(absl::string_view body) {
  absl::StatusOr<json> parsed = ParseObject(body);
  if (!parsed.ok()) return parsed.status();
  const json* tokens = Find(*parsed, "tokens");
  if (tokens == nullptr) return Invalid("tokens", "is required");
  std::vector<int32_t> ids;
  if (absl::Status s = GetIdList("tokens", *tokens, &ids); !s.ok()) return s;
  return ids;
}

}  // namespace quill::server::http
