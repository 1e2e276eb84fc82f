#include "server/request_codec.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "engine/base/utf8.h"
#include "engine/sampler/json_schema.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/unknown_field_set.h"
#include "server/template_kwargs.h"
#include "server/tool_request.h"

namespace quill::server {
namespace {

namespace v1 = ::quill::v1;

// Length of the well-formed UTF-8 sequence starting at s[i], or 0 if it is ill-formed
// (Unicode Table 3-7: no overlongs, no surrogates, nothing above U+10FFFF).
size_t Utf8SequenceLength(absl::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const size_t left = s.size() - i;
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  auto cont = [&](size_t k) { return (b(k) & 0xC0) == 0x80; };
  if (c >= 0xC2 && c <= 0xDF) return left >= 2 && cont(i + 1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (left < 3) return 0;
    const unsigned char c1 = b(i + 1);
    const unsigned char lo = c == 0xE0 ? 0xA0 : 0x80;  // E0: no overlongs
    const unsigned char hi = c == 0xED ? 0x9F : 0xBF;  // ED: no surrogates
    return c1 >= lo && c1 <= hi && cont(i + 2) ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (left < 4) return 0;
    const unsigned char c1 = b(i + 1);
    const unsigned char lo = c == 0xF0 ? 0x90 : 0x80;  // F0: no overlongs
    const unsigned char hi = c == 0xF4 ? 0x8F : 0xBF;  // F4: nothing above U+10FFFF
    return c1 >= lo && c1 <= hi && cont(i + 2) && cont(i + 3) ? 4 : 0;
  }
  return 0;
}

absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, " ", what));
}

bool IsFinite(float v) { return std::isfinite(v); }

absl::Status ValidateSampling(const v1::SamplingParams& s) {
  if (!IsFinite(s.temperature()) || s.temperature() < 0) {
    return Invalid("sampling.temperature",
                   absl::StrCat("must be finite and >= 0 (0 = greedy), got ", s.temperature()));
  }
  if (s.top_k() < 0) {
    return Invalid("sampling.top_k", absl::StrCat("must be >= 0 (0 = off), got ", s.top_k()));
  }
  if (!IsFinite(s.top_p()) || s.top_p() < 0 || s.top_p() > 1) {
    return Invalid("sampling.top_p",
                   absl::StrCat("must be in (0, 1] (0 or unset means 1), got ", s.top_p()));
  }
  if (!IsFinite(s.min_p()) || s.min_p() < 0 || s.min_p() > 1) {
    return Invalid("sampling.min_p", absl::StrCat("must be in [0, 1], got ", s.min_p()));
  }
  if (!IsFinite(s.repetition_penalty()) || s.repetition_penalty() < 0) {
    return Invalid(
        "sampling.repetition_penalty",
        absl::StrCat("must be finite and > 0 (0 or unset means 1), got ", s.repetition_penalty()));
  }
  if (!(std::fabs(s.frequency_penalty()) <= engine::kMaxOutputPenalty)) {  // also NaN
    return Invalid("sampling.frequency_penalty",
                   absl::StrCat("must be in [-2, 2] (0 = off), got ", s.frequency_penalty()));
  }
  if (!(std::fabs(s.presence_penalty()) <= engine::kMaxOutputPenalty)) {
    return Invalid("sampling.presence_penalty",
                   absl::StrCat("must be in [-2, 2] (0 = off), got ", s.presence_penalty()));
  }
  return absl::OkStatus();
}

// At most max_logit_bias entries, every id in the vocabulary, every bias in [-100, 100]. A
// map: an id appears once.
absl::Status ValidateLogitBias(const v1::SamplingParams& s, const RequestLimits& limits) {
  if (s.logit_bias_size() > limits.max_logit_bias) {
    return Invalid("sampling.logit_bias",
                   absl::StrCat("has ", s.logit_bias_size(), " entries; at most ",
                                limits.max_logit_bias, " are allowed"));
  }
  const int64_t vocab_size = limits.vocab_size;
  for (const auto& [id, bias] : s.logit_bias()) {
    if (id < 0 || id >= vocab_size) {
      return Invalid(
          "sampling.logit_bias",
          absl::StrCat("has token id ", id, ", outside the vocabulary [0, ", vocab_size, ")"));
    }
    if (!(std::fabs(bias) <= engine::kMaxLogitBias)) {
      return Invalid(absl::StrCat("sampling.logit_bias[", id, "]"),
                     absl::StrCat("must be in [-100, 100], got ", bias));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateIds(absl::string_view field, absl::Span<const int32_t> ids,
                         int64_t vocab_size) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size) {
      return Invalid(absl::StrCat(field, "[", i, "]"),
                     absl::StrCat("is ", ids[i], ", outside the vocabulary [0, ", vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateStops(const v1::GenerateRequest& request, const RequestLimits& limits) {
  if (request.stop_size() > limits.max_stop_strings) {
    return Invalid("stop", absl::StrCat("has ", request.stop_size(), " strings; at most ",
                                        limits.max_stop_strings, " are allowed"));
  }
  for (int i = 0; i < request.stop_size(); ++i) {
    const std::string field = absl::StrCat("stop[", i, "]");
    const std::string& stop = request.stop(i);
    if (stop.empty()) return Invalid(field, "is empty");
    if (static_cast<int64_t>(stop.size()) > limits.max_stop_bytes) {
      return Invalid(field, absl::StrCat("is ", stop.size(), " bytes; at most ",
                                         limits.max_stop_bytes, " are allowed"));
    }
    if (const int64_t bad = FirstInvalidUtf8(stop); bad >= 0) {
      return Invalid(field, absl::StrCat("is not valid UTF-8 at byte ", bad));
    }
  }
  if (request.stop_token_ids_size() > limits.max_stop_token_ids) {
    return Invalid("stop_token_ids",
                   absl::StrCat("has ", request.stop_token_ids_size(), " ids; at most ",
                                limits.max_stop_token_ids, " are allowed"));
  }
  return ValidateIds("stop_token_ids", request.stop_token_ids(), limits.vocab_size);
}

absl::Status ValidateRequestId(const std::string& request_id, const RequestLimits& limits) {
  if (static_cast<int64_t>(request_id.size()) > limits.max_request_id_bytes) {
    return Invalid("request_id", absl::StrCat("is ", request_id.size(), " bytes; at most ",
                                              limits.max_request_id_bytes, " are allowed"));
  }
  return engine::CheckPrintableAscii("request_id", request_id);
}

// Every field but the input. With `max_tokens_default`, 0 is allowed (the caller picks).
absl::Status ValidateOptions(const v1::GenerateRequest& request, const RequestLimits& limits,
                             bool max_tokens_default) {
  const bool defaulted = max_tokens_default && request.max_tokens() == 0;
  if (!defaulted && (request.max_tokens() < 1 || request.max_tokens() > limits.max_tokens)) {
    return Invalid("max_tokens", absl::StrCat("must be in [1, ", limits.max_tokens, "], got ",
                                              request.max_tokens()));
  }
  if (absl::Status s = ValidateSampling(request.sampling()); !s.ok()) return s;
  if (absl::Status s = ValidateLogitBias(request.sampling(), limits); !s.ok()) {
    return s;
  }
  if (request.logprobs() < 0 || request.logprobs() > limits.max_logprobs) {
    return Invalid("logprobs", absl::StrCat("must be in [0, ", limits.max_logprobs, "], got ",
                                            request.logprobs()));
  }
  if ((request.json_object() || !request.json_schema().empty()) && request.ignore_eos()) {
    return Invalid(request.json_object() ? "json_object" : "json_schema",
                   "cannot be combined with ignore_eos (the object's end ends "
                   "the answer)");
  }
  return ValidateStops(request, limits);
}

// The engine request for `prompt_ids` and the (validated) options of `request`:
// INVALID_ARGUMENT when prompt + max_tokens exceeds the context or the KV pool.
absl::StatusOr<engine::GenerationRequest> BuildEngineRequest(
    const v1::GenerateRequest& request, std::vector<engine::TokenId> prompt_ids,
    const RequestLimits& limits) {
  const int64_t total = static_cast<int64_t>(prompt_ids.size()) + request.max_tokens();
  if (total > limits.context_length) {
    return Invalid("max_tokens",
                   absl::StrCat("(", request.max_tokens(), ") + prompt (", prompt_ids.size(),
                                " tokens) = ", total, " exceeds the context length (",
                                limits.context_length, " tokens)"));
  }
  if (limits.kv_capacity_tokens > 0 && total > limits.kv_capacity_tokens) {
    return Invalid("max_tokens",
                   absl::StrCat("(", request.max_tokens(), ") + prompt (", prompt_ids.size(),
                                " tokens) = ", total, " exceeds the KV cache pool (",
                                limits.kv_capacity_tokens, " tokens)"));
  }
  engine::GenerationRequest out;
  out.prompt_ids = std::move(prompt_ids);
  out.request_id = request.request_id();
  out.max_tokens = request.max_tokens();
  out.sampling = ToEngineSampling(request);
  out.stop.assign(request.stop().begin(), request.stop().end());
  out.stop_token_ids.assign(request.stop_token_ids().begin(), request.stop_token_ids().end());
  out.ignore_eos = request.ignore_eos();
  out.logprobs = request.logprobs();
  out.prompt_logprobs = request.prompt_logprobs();
  out.disable_speculation = request.disable_speculation();
  out.json_object = request.json_object();
  if (!request.json_schema().empty()) {
    auto schema = engine::JsonSchema::Compile(request.json_schema());
    if (!schema.ok()) return Invalid("json_schema", schema.status().message());
    out.json_schema = *std::move(schema);
    out.json_object = true;
  }
  return out;
}

// INVALID_ARGUMENT naming the first string field of `bytes` (a serialized `descriptor`
// message, nested messages included: "messages[1].content") that is not UTF-8; OK if
// there is none or the bytes do not parse at all.
absl::Status FindInvalidUtf8Field(const std::string& bytes,
                                  const google::protobuf::Descriptor& descriptor,
                                  const std::string& prefix, int depth) {
  google::protobuf::UnknownFieldSet fields;
  if (depth > 8 || !fields.ParseFromString(bytes)) return absl::OkStatus();
  absl::flat_hash_map<int, int> occurrences;
  for (int i = 0; i < fields.field_count(); ++i) {
    const google::protobuf::UnknownField& field = fields.field(i);
    if (field.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED) continue;
    const google::protobuf::FieldDescriptor* fd = descriptor.FindFieldByNumber(field.number());
    if (fd == nullptr) continue;
    const int index = occurrences[field.number()]++;
    const std::string name =
        absl::StrCat(prefix, fd->name(), fd->is_repeated() ? absl::StrCat("[", index, "]") : "");
    if (fd->type() == google::protobuf::FieldDescriptor::TYPE_MESSAGE) {
      if (absl::Status s = FindInvalidUtf8Field(field.length_delimited(), *fd->message_type(),
                                                name + ".", depth + 1);
          !s.ok()) {
        return s;
      }
      continue;
    }
    if (fd->type() != google::protobuf::FieldDescriptor::TYPE_STRING) continue;
    const int64_t bad = FirstInvalidUtf8(field.length_delimited());
    if (bad >= 0) return Invalid(name, absl::StrCat("is not valid UTF-8 at byte ", bad));
  }
  return absl::OkStatus();
}

}  // namespace

int64_t FirstInvalidUtf8(absl::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const size_t n = Utf8SequenceLength(text, i);
    if (n == 0) return static_cast<int64_t>(i);
    i += n;
  }
  return -1;
}

std::string ToValidUtf8(absl::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    const size_t n = Utf8SequenceLength(bytes, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD
      ++i;
    } else {
      out.append(bytes.data() + i, n);
      i += n;
    }
  }
  return out;
}

absl::Status ParseRequest(const grpc::ByteBuffer& buffer, google::protobuf::Message* message) {
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (buffer.Valid()) {
    if (!buffer.Dump(&slices).ok()) return absl::InternalError("cannot read the request bytes");
    bytes.reserve(buffer.Length());
    for (const grpc::Slice& s : slices) {
      bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
  }
  if (message->ParseFromString(bytes)) return absl::OkStatus();

  // Protobuf does not say why it failed; the usual cause from real clients is a string
  // field holding bytes that are not UTF-8. Find it through the schema-less wire view.
  const std::string type = message->GetDescriptor()->full_name();
  if (absl::Status s = FindInvalidUtf8Field(bytes, *message->GetDescriptor(), "", 0); !s.ok()) {
    return s;
  }
  return absl::InvalidArgumentError(absl::StrCat("request is not a valid ", type, " message"));
}

grpc::ByteBuffer SerializeResponse(const google::protobuf::Message& message) {
  const std::string bytes = message.SerializeAsString();
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

absl::Status ValidateGenerateRequest(const v1::GenerateRequest& request,
                                     const RequestLimits& limits) {
  if (absl::Status s = ValidateRequestId(request.request_id(), limits); !s.ok()) return s;
  switch (request.input_case()) {
    case v1::GenerateRequest::kPrompt:
      if (request.prompt().empty()) {
        return Invalid("prompt", "is empty (set prompt or prompt_token_ids)");
      }
      if (limits.max_prompt_bytes > 0 &&
          static_cast<int64_t>(request.prompt().size()) > limits.max_prompt_bytes) {
        return Invalid("prompt", absl::StrCat("is ", request.prompt().size(),
                                              " bytes; text of more than ",
                                              limits.max_prompt_bytes,
                                              " bytes cannot fit the longest prompt (",
                                              limits.max_prompt_tokens, " tokens)"));
      }
      if (const int64_t bad = FirstInvalidUtf8(request.prompt()); bad >= 0) {
        return Invalid("prompt", absl::StrCat("is not valid UTF-8 at byte ", bad));
      }
      break;
    case v1::GenerateRequest::kPromptTokenIds:
      if (request.prompt_token_ids().ids().empty()) {
        return Invalid("prompt_token_ids", "is empty (set prompt or prompt_token_ids)");
      }
      if (request.prompt_token_ids().ids_size() > limits.max_prompt_tokens) {
        return Invalid("prompt_token_ids",
                       absl::StrCat("has ", request.prompt_token_ids().ids_size(),
                                    " tokens; the longest prompt accepted is ",
                                    limits.max_prompt_tokens, " tokens"));
      }
      if (absl::Status s =
              ValidateIds("prompt_token_ids", request.prompt_token_ids().ids(), limits.vocab_size);
          !s.ok()) {
        return s;
      }
      break;
    default:
      return Invalid("prompt", "is empty (set prompt or prompt_token_ids)");
  }
  return ValidateOptions(request, limits, /*max_tokens_default=*/false);
}

absl::Status ValidateChatRequest(const v1::ChatRequest& request, const RequestLimits& limits) {
  if (absl::Status s = ValidateRequestId(request.request_id(), limits); !s.ok()) return s;
  if (request.messages().empty()) return Invalid("messages", "is empty");
  if (request.messages_size() > limits.max_chat_messages) {
    return Invalid("messages", absl::StrCat("has ", request.messages_size(), " messages; at most ",
                                            limits.max_chat_messages, " are allowed"));
  }
  int64_t bytes = 0;
  for (int i = 0; i < request.messages_size(); ++i) {
    const v1::ChatMessage& m = request.messages(i);
    const std::string field = absl::StrCat("messages[", i, "]");
    if (m.role().empty()) return Invalid(absl::StrCat(field, ".role"), "is empty");
    std::vector<std::pair<std::string, const std::string*>> texts = {
        {"role", &m.role()}, {"content", &m.content()}, {"tool_call_id", &m.tool_call_id()}};
    for (int k = 0; k < m.tool_calls_size(); ++k) {
      const v1::ToolCall& call = m.tool_calls(k);
      const std::string at = absl::StrCat("tool_calls[", k, "].");
      texts.push_back({at + "id", &call.id()});
      texts.push_back({at + "name", &call.name()});
      texts.push_back({at + "arguments_json", &call.arguments_json()});
    }
    for (const auto& [name, text] : texts) {
      if (const int64_t bad = FirstInvalidUtf8(*text); bad >= 0) {
        return Invalid(absl::StrCat(field, ".", name),
                       absl::StrCat("is not valid UTF-8 at byte ", bad));
      }
      bytes += static_cast<int64_t>(text->size());
    }
  }
  if (bytes > limits.max_chat_content_bytes) {
    return Invalid("messages",
                   absl::StrCat("hold ", bytes, " bytes of roles, content and tool calls; at most ",
                                limits.max_chat_content_bytes, " are allowed"));
  }
  for (int i = 0; i < request.tools_size(); ++i) {
    const v1::Tool& tool = request.tools(i);
    for (const auto& [name, text] :
         {std::pair<const char*, const std::string&>("name", tool.name()),
          {"description", tool.description()},
          {"parameters_json", tool.parameters_json()}}) {
      if (const int64_t bad = FirstInvalidUtf8(text); bad >= 0) {
        return Invalid(absl::StrCat("tools[", i, "].", name),
                       absl::StrCat("is not valid UTF-8 at byte ", bad));
      }
    }
  }
  if (const int64_t bad = FirstInvalidUtf8(request.tool_choice()); bad >= 0) {
    return Invalid("tool_choice", absl::StrCat("is not valid UTF-8 at byte ", bad));
  }
  return ValidateOptions(ChatOptions(request), limits, /*max_tokens_default=*/true);
}

absl::StatusOr<ToolRequest> ChatTools(const v1::ChatRequest& request) {
  using json = nlohmann::ordered_json;
  json body = json::object();
  if (request.tools_size() > 0) {
    json tools = json::array();
    for (int i = 0; i < request.tools_size(); ++i) {
      const v1::Tool& tool = request.tools(i);
      json function = {{"name", tool.name()}};
      if (!tool.description().empty()) function["description"] = tool.description();
      if (!tool.parameters_json().empty()) {
        json parameters = json::parse(tool.parameters_json(), nullptr, /*allow_exceptions=*/false);
        if (parameters.is_discarded()) {
          return Invalid(absl::StrCat("tools[", i, "].parameters_json"), "is not JSON");
        }
        function["parameters"] = std::move(parameters);
      }
      tools.push_back({{"type", "function"}, {"function", std::move(function)}});
    }
    body["tools"] = std::move(tools);
  }
  const std::string& choice = request.tool_choice();
  if (choice == "auto" || choice == "none" || choice == "required") {
    body["tool_choice"] = choice;
  } else if (!choice.empty()) {
    body["tool_choice"] = {{"type", "function"}, {"function", {{"name", choice}}}};
  }
  if (request.one_tool_call()) body["parallel_tool_calls"] = false;
  absl::StatusOr<ToolRequest> tools = ParseTools(body);
  if (!tools.ok()) return tools.status();
  if (!tools->call_schema.empty()) {
    if (request.json_object() || !request.json_schema().empty()) {
      return Invalid("tool_choice", "cannot force a call beside json_object or json_schema");
    }
    if (request.ignore_eos())
      return Invalid("tool_choice", "cannot force a call beside ignore_eos");
  }
  return tools;
}

v1::GenerateRequest ChatOptions(const v1::ChatRequest& request) {
  v1::GenerateRequest options;
  options.set_request_id(request.request_id());
  options.set_max_tokens(request.max_tokens());
  if (request.has_sampling()) *options.mutable_sampling() = request.sampling();
  *options.mutable_stop() = request.stop();
  *options.mutable_stop_token_ids() = request.stop_token_ids();
  options.set_ignore_eos(request.ignore_eos());
  options.set_logprobs(request.logprobs());
  options.set_disable_speculation(request.disable_speculation());
  options.set_json_object(request.json_object());
  options.set_json_schema(request.json_schema());
  return options;
}

int64_t MaxBytesPerToken(const engine::Tokenizer& tokenizer) {
  size_t longest = 0;
  for (engine::TokenId id = 0; id < tokenizer.vocab_size(); ++id) {
    longest = std::max(longest, tokenizer.TokenBytes(id).size());
  }
  return std::max<int64_t>(4, 3 * static_cast<int64_t>(longest));
}

void SetTextLimits(const engine::Tokenizer& tokenizer, RequestLimits* limits) {
  const int64_t per_token = MaxBytesPerToken(tokenizer);
  limits->max_prompt_bytes = limits->max_prompt_tokens * per_token;
  // Tokenize is for prompts: anything longer than the context cannot be one.
  limits->max_tokenize_bytes = limits->context_length * per_token;
  limits->max_tokenize_tokens = limits->context_length;
  // Every field at its largest, each with up to 16 bytes of tag and length (generous).
  constexpr int64_t kField = 16;
  // A map entry: its tag and length, the key's tag and varint, the value's tag and float.
  constexpr int64_t kLogitBiasEntryBytes = 2 + 1 + 5 + 1 + 4;
  const int64_t prompt = std::max(limits->max_prompt_bytes, 5 * int64_t{limits->max_prompt_tokens});
  limits->max_generate_request_bytes =
      prompt + limits->max_request_id_bytes +
      limits->max_stop_strings * (limits->max_stop_bytes + kField) +
      5 * int64_t{limits->max_stop_token_ids} + kLogitBiasEntryBytes * limits->max_logit_bias +
      20 * kField;
  limits->max_tokenize_request_bytes = limits->max_tokenize_bytes + 4 * kField;
}

absl::Status CheckRequestBytes(int64_t bytes, int64_t limit) {
  if (limit <= 0 || bytes <= limit) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("request is ", bytes, " bytes; no valid request to this model is over ", limit,
                   " (see max_prompt_tokens and the vocabulary's longest token)"));
}

absl::StatusOr<v1::TokenizeResponse> TokenizeText(const v1::TokenizeRequest& request,
                                                  const RequestLimits& limits,
                                                  const engine::Tokenizer& tokenizer,
                                                  absl::string_view field) {
  const std::string& text = request.text();
  if (limits.max_tokenize_bytes > 0 &&
      static_cast<int64_t>(text.size()) > limits.max_tokenize_bytes) {
    return Invalid(field, absl::StrCat("is ", text.size(), " bytes; Tokenize accepts at most ",
                                       limits.max_tokenize_bytes, " (the most a context of ",
                                       limits.context_length, " tokens can hold)"));
  }
  absl::StatusOr<std::vector<engine::TokenId>> ids =
      tokenizer.Encode(text, request.add_special_tokens());
  if (!ids.ok())
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", ids.status().message()));
  if (limits.max_tokenize_tokens > 0 &&
      static_cast<int64_t>(ids->size()) > limits.max_tokenize_tokens) {
    return Invalid(field,
                   absl::StrCat("encodes to ", ids->size(), " tokens; Tokenize returns at most ",
                                limits.max_tokenize_tokens, " (the context length)"));
  }
  v1::TokenizeResponse out;
  out.mutable_token_ids()->Reserve(static_cast<int>(ids->size()));
  for (engine::TokenId id : *ids) {
    out.add_token_ids(id);
    out.add_pieces(ToValidUtf8(tokenizer.TokenBytes(id)));
  }
  out.set_text(IdsToText(*ids, tokenizer));
  return out;
}

std::string IdsToText(absl::Span<const int32_t> ids, const engine::Tokenizer& tokenizer) {
  // A vocabulary that prefixes the text with a space when encoding (SentencePiece
  // add_space_prefix) has it dropped again.
  return ToValidUtf8(tokenizer.Decode(ids, tokenizer.adds_space_prefix()));
}

absl::StatusOr<std::string> DetokenizeIds(absl::Span<const int32_t> ids,
                                          const RequestLimits& limits,
                                          const engine::Tokenizer& tokenizer,
                                          absl::string_view field) {
  if (limits.max_tokenize_tokens > 0 &&
      static_cast<int64_t>(ids.size()) > limits.max_tokenize_tokens) {
    return Invalid(field, absl::StrCat("has ", ids.size(), " ids; at most ",
                                       limits.max_tokenize_tokens, " (the context length)"));
  }
  if (absl::Status s = ValidateIds(field, ids, limits.vocab_size); !s.ok()) return s;
  return IdsToText(ids, tokenizer);
}

engine::SamplingParams ToEngineSampling(const v1::GenerateRequest& request) {
  engine::SamplingParams params;
  params.temperature = 0.0f;  // no sampling message: greedy
  if (!request.has_sampling()) return params;
  const v1::SamplingParams& s = request.sampling();
  params.temperature = s.temperature();
  params.top_k = s.top_k();
  params.top_p = s.top_p() == 0.0f ? 1.0f : s.top_p();
  params.min_p = s.min_p();
  params.repetition_penalty = s.repetition_penalty() == 0.0f ? 1.0f : s.repetition_penalty();
  params.frequency_penalty = s.frequency_penalty();
  params.presence_penalty = s.presence_penalty();
  params.logit_bias.reserve(s.logit_bias_size());
  for (const auto& [id, bias] : s.logit_bias()) params.logit_bias.push_back({id, bias});
  params.seed = s.seed();
  return params;
}

absl::StatusOr<engine::GenerationRequest> ToEngineRequest(const v1::GenerateRequest& request,
                                                          const RequestLimits& limits,
                                                          const engine::Tokenizer& tokenizer) {
  if (absl::Status s = ValidateGenerateRequest(request, limits); !s.ok()) return s;

  std::vector<engine::TokenId> prompt_ids;
  if (request.input_case() == v1::GenerateRequest::kPrompt) {
    absl::StatusOr<std::vector<engine::TokenId>> ids =
        tokenizer.Encode(request.prompt(), /*add_special=*/true);
    if (!ids.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("prompt: ", ids.status().message()));
    }
    prompt_ids = *std::move(ids);
    if (prompt_ids.empty()) return Invalid("prompt", "encodes to no tokens");
    if (static_cast<int64_t>(prompt_ids.size()) > limits.max_prompt_tokens) {
      return Invalid("prompt", absl::StrCat("is ", prompt_ids.size(),
                                            " tokens; the longest prompt accepted is ",
                                            limits.max_prompt_tokens, " tokens"));
    }
  } else {
    prompt_ids.assign(request.prompt_token_ids().ids().begin(),
                      request.prompt_token_ids().ids().end());
  }
  return BuildEngineRequest(request, std::move(prompt_ids), limits);
}

absl::StatusOr<engine::GenerationRequest> ToEngineChatRequest(
    const v1::ChatRequest& request, const RequestLimits& limits,
    const engine::chat::ChatPrompter& prompter, ToolCallReading* tool_calls) {
  if (absl::Status s = ValidateChatRequest(request, limits); !s.ok()) return s;
  absl::StatusOr<ToolRequest> tools = ChatTools(request);
  if (!tools.ok()) return tools.status();
  // Without a template at all, rendering says so (FAILED_PRECONDITION) below.
  if (prompter.available()) {
    if (absl::Status s = CheckCallsReadable(*tools, prompter.tool_call_syntax()); !s.ok()) {
      return s;
    }
  }
  using json = nlohmann::ordered_json;
  json messages = json::array();
  for (const v1::ChatMessage& m : request.messages()) {
    json message = {{"role", m.role()}, {"content", m.content()}};
    if (m.tool_calls_size() > 0) {
      json calls = json::array();
      for (const v1::ToolCall& call : m.tool_calls()) {
        // The arguments as the object they encode (Hugging Face's chat format); text that
        // is not one stays as sent.
        json arguments = json::parse(call.arguments_json(), nullptr, /*allow_exceptions=*/false);
        if (!arguments.is_object()) arguments = call.arguments_json();
        calls.push_back(
            {{"id", call.id()},
             {"type", "function"},
             {"function", {{"name", call.name()}, {"arguments", std::move(arguments)}}}});
      }
      message["tool_calls"] = std::move(calls);
    }
    if (!m.tool_call_id().empty()) message["tool_call_id"] = m.tool_call_id();
    messages.push_back(std::move(message));
  }
  v1::GenerateRequest options = ChatOptions(request);
  if (!tools->call_schema.empty()) {
    options.set_json_object(true);
    options.set_json_schema(tools->call_schema);
  }
  json variables = nullptr;
  if (!tools->tools.is_null()) variables = {{"tools", tools->tools}};
  if (!request.chat_template_kwargs_json().empty()) {
    const json kwargs =
        json::parse(request.chat_template_kwargs_json(), nullptr, /*allow_exceptions=*/false);
    if (kwargs.is_discarded()) return Invalid("chat_template_kwargs_json", "is not JSON");
    absl::StatusOr<json> checked = CheckTemplateKwargs(kwargs, "chat_template_kwargs_json");
    if (!checked.ok()) return checked.status();
    variables = WithTemplateKwargs(std::move(variables), *checked);
  }
  if (tool_calls != nullptr) *tool_calls = ReadingOf(*tools, prompter.tool_call_syntax());
  return ToEngineChatRequest(messages, options, limits, prompter, variables);
}

absl::Status ValidateChatMessages(const nlohmann::ordered_json& messages,
                                  const RequestLimits& limits) {
  if (!messages.is_array()) return Invalid("messages", "must be an array");
  if (messages.empty()) return Invalid("messages", "is empty");
  if (messages.size() > static_cast<size_t>(limits.max_chat_messages)) {
    return Invalid("messages", absl::StrCat("has ", messages.size(), " messages; at most ",
                                            limits.max_chat_messages, " are allowed"));
  }
  int64_t bytes = 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    const nlohmann::ordered_json& m = messages[i];
    const std::string field = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return Invalid(field, "must be an object");
    auto role = m.find("role");
    if (role == m.end() || !role->is_string() || role->get_ref<const std::string&>().empty()) {
      return Invalid(absl::StrCat(field, ".role"), "must be a non-empty string");
    }
    bytes += static_cast<int64_t>(role->get_ref<const std::string&>().size());
    if (auto content = m.find("content"); content != m.end() && content->is_string()) {
      bytes += static_cast<int64_t>(content->get_ref<const std::string&>().size());
    }
  }
  if (bytes > limits.max_chat_content_bytes) {
    return Invalid("messages", absl::StrCat("hold ", bytes, " bytes of roles and content; at most ",
                                            limits.max_chat_content_bytes, " are allowed"));
  }
  return absl::OkStatus();
}

absl::StatusOr<engine::GenerationRequest> ToEngineChatRequest(
    const nlohmann::ordered_json& messages, const v1::GenerateRequest& options,
    const RequestLimits& limits, const engine::chat::ChatPrompter& prompter,
    const nlohmann::ordered_json& template_variables) {
  if (absl::Status s = ValidateRequestId(options.request_id(), limits); !s.ok()) return s;
  if (absl::Status s = ValidateChatMessages(messages, limits); !s.ok()) return s;
  if (absl::Status s = ValidateOptions(options, limits, /*max_tokens_default=*/true); !s.ok()) {
    return s;
  }
  engine::chat::ChatPromptOptions prompt_options;
  prompt_options.extra_variables = template_variables;
  absl::StatusOr<engine::chat::ChatPrompt> prompt = prompter.Build(messages, prompt_options);
  if (!prompt.ok()) return prompt.status();
  const int64_t prompt_tokens = static_cast<int64_t>(prompt->ids.size());
  if (prompt_tokens > limits.max_prompt_tokens) {
    return Invalid("messages", absl::StrCat("render to a prompt of ", prompt_tokens,
                                            " tokens; the longest prompt accepted is ",
                                            limits.max_prompt_tokens, " tokens"));
  }
  v1::GenerateRequest resolved = options;
  if (resolved.max_tokens() == 0) {
    int64_t room = limits.context_length - prompt_tokens;
    if (limits.kv_capacity_tokens > 0) {
      room = std::min(room, limits.kv_capacity_tokens - prompt_tokens);
    }
    if (room < 1) {
      return Invalid("messages", absl::StrCat("render to a prompt of ", prompt_tokens,
                                              " tokens, which leaves no room to generate"));
    }
    resolved.set_max_tokens(static_cast<int32_t>(std::min<int64_t>(limits.max_tokens, room)));
  }
  return BuildEngineRequest(resolved, std::move(prompt->ids), limits);
}

v1::FinishReason ToProtoFinishReason(engine::FinishReason reason) {
  switch (reason) {
    case engine::FinishReason::kLength:
      return v1::LENGTH;
    case engine::FinishReason::kStop:
      return v1::STOP;
    case engine::FinishReason::kEos:
      return v1::EOS;
    default:
      return v1::FINISH_REASON_UNSPECIFIED;  // non-OK endings carry a gRPC status
  }
}

namespace {

void SetLogprobs(const engine::GeneratedToken& token, v1::TokenLogprobs* lp) {
  lp->set_token_id(token.id);
  lp->set_logprob(token.logprob);
  for (const engine::TokenLogprob& alt : token.top_logprobs) {
    v1::TopLogprob* top = lp->add_top();
    top->set_token_id(alt.id);
    top->set_logprob(alt.logprob);
  }
}

}  // namespace

void AppendChunk(const engine::TokenChunk& chunk, bool with_logprobs,
                 v1::GenerateResponse* response) {
  for (const engine::GeneratedToken& token : chunk.prompt_logprobs) {
    SetLogprobs(token, response->add_prompt_logprobs());
  }
  for (const engine::GeneratedToken& token : chunk.tokens) {
    response->add_token_ids(token.id);
    if (with_logprobs) SetLogprobs(token, response->add_logprobs());
  }
  response->mutable_text()->append(chunk.text);
}

void SetFinalFields(const engine::FinishInfo& info, v1::GenerateResponse* response) {
  response->set_finish_reason(ToProtoFinishReason(info.reason));
  response->mutable_usage()->set_prompt_tokens(info.prompt_tokens);
  response->mutable_usage()->set_completion_tokens(info.completion_tokens);
  response->mutable_usage()->set_cached_prompt_tokens(info.cached_prompt_tokens);
  response->mutable_usage()->set_reasoning_tokens(info.reasoning_tokens.value_or(0));
  v1::Timings* t = response->mutable_timings();
  t->set_queue_seconds(absl::ToDoubleSeconds(info.timings.queue_wait));
  t->set_time_to_first_token_seconds(absl::ToDoubleSeconds(info.timings.time_to_first_token));
  t->set_prefill_seconds(absl::ToDoubleSeconds(info.timings.prefill));
  t->set_decode_seconds(absl::ToDoubleSeconds(info.timings.decode));
  t->set_total_seconds(absl::ToDoubleSeconds(info.timings.total));
}

void SetToolCalls(const ToolCallReading& reading, absl::string_view answer,
                  absl::string_view request_id, v1::GenerateResponse* last) {
  const engine::chat::ParsedAnswer parsed = ReadToolCalls(reading, answer);
  if (parsed.calls.empty()) return;
  const std::string id = absl::StrCat("call_", request_id);
  for (size_t k = 0; k < parsed.calls.size(); ++k) {
    v1::ToolCall* call = last->add_tool_calls();
    call->set_id(k == 0 ? id : absl::StrCat(id, "_", k));
    call->set_name(parsed.calls[k].name);
    call->set_arguments_json(parsed.calls[k].arguments.dump());
  }
  last->set_finish_reason(v1::TOOL_CALLS);
}

}  // namespace quill::server
