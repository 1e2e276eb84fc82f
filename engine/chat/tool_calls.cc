#include "engine/chat/tool_calls.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace quill::engine::chat {
namespace {

using json = nlohmann::ordered_json;

constexpr absl::string_view kOpenTag = "<tool_call>";
constexpr absl::string_view kCloseTag = "</tool_call>";

// The probe's call: a name and an argument no real conversation has.
constexpr char kProbeName[] = "quill_probe";
constexpr char kProbeArgument[] = "quill_arg";

bool IsWhitespace(absl::string_view text) {
  return std::all_of(text.begin(), text.end(),
                     [](char c) { return absl::ascii_isspace(static_cast<unsigned char>(c)); });
}

// The end (one past the closing brace) of the JSON object that starts at text[begin] ==
// '{', or npos when it does not close: braces counted outside strings.
size_t ObjectEnd(absl::string_view text, size_t begin) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = begin; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{') {
      ++depth;
    } else if (c == '}' && --depth == 0) {
      return i + 1;
    }
  }
  return absl::string_view::npos;
}

// {"name": ..., "arguments" | "parameters": {...}} as a call to one of `names`; arguments
// sent as a JSON string holding an object count too.
std::optional<ToolCall> CallOf(absl::string_view text, absl::Span<const std::string> names) {
  const json call = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (!call.is_object() || !call.contains("name") || !call["name"].is_string()) return std::nullopt;
  const std::string name = call["name"].get<std::string>();
  if (std::find(names.begin(), names.end(), name) == names.end()) return std::nullopt;
  const char* key = call.contains("arguments") ? "arguments" : "parameters";
  if (!call.contains(key)) return std::nullopt;
  json arguments = call[key];
  if (arguments.is_string()) {
    arguments = json::parse(arguments.get<std::string>(), nullptr, /*allow_exceptions=*/false);
  }
  if (!arguments.is_object()) return std::nullopt;
  return ToolCall{name, std::move(arguments)};
}

ParsedAnswer ParseHermes(absl::string_view answer, absl::Span<const std::string> names) {
  ParsedAnswer out;
  size_t open = answer.find(kOpenTag);
  if (open == absl::string_view::npos) return {std::string(answer), {}};
  out.content = std::string(answer.substr(0, open));
  while (open != absl::string_view::npos) {
    const size_t begin = open + kOpenTag.size();
    const size_t close = answer.find(kCloseTag, begin);
    // The last call may lack its closing tag (the model ended right after the object).
    const absl::string_view body = answer.substr(
        begin, close == absl::string_view::npos ? absl::string_view::npos : close - begin);
    std::optional<ToolCall> call = CallOf(absl::StripAsciiWhitespace(body), names);
    if (!call.has_value()) return {std::string(answer), {}};
    out.calls.push_back(*std::move(call));
    if (close == absl::string_view::npos) break;
    const size_t next = close + kCloseTag.size();
    open = answer.find(kOpenTag, next);
    absl::StrAppend(&out.content,
                    answer.substr(next, open == absl::string_view::npos ? absl::string_view::npos
                                                                        : open - next));
  }
  if (IsWhitespace(out.content)) out.content.clear();
  return out;
}

// Whether `text` starts with the probe's call (its object alone), and where it ends.
bool StartsWithProbeCall(absl::string_view text, size_t* end) {
  if (text.empty() || text[0] != '{') return false;
  *end = ObjectEnd(text, 0);
  if (*end == absl::string_view::npos) return false;
  const std::string probe_name = kProbeName;
  std::optional<ToolCall> call = CallOf(text.substr(0, *end), absl::MakeConstSpan(&probe_name, 1));
  return call.has_value() && call->arguments == json{{kProbeArgument, 1}};
}

// The form the probe's call took in `answer`, the assistant turn as the template wrote
// it after the generation prompt.
ToolCallSyntax RecognizeProbe(absl::string_view answer) {
  answer = absl::StripLeadingAsciiWhitespace(answer);
  size_t end = 0;
  // The object alone, then the end of the turn (a special token) or of the text.
  if (StartsWithProbeCall(answer, &end)) {
    const absl::string_view after = absl::StripLeadingAsciiWhitespace(answer.substr(end));
    return after.empty() || after[0] == '<' ? ToolCallSyntax::kJsonObject : ToolCallSyntax::kNone;
  }
  // The object in tags, after whatever the template puts first (Qwen3: an empty
  // <think></think>).
  const size_t open = answer.find(kOpenTag);
  if (open == absl::string_view::npos) return ToolCallSyntax::kNone;
  answer = absl::StripLeadingAsciiWhitespace(answer.substr(open + kOpenTag.size()));
  if (StartsWithProbeCall(answer, &end) &&
      absl::StartsWith(absl::StripLeadingAsciiWhitespace(answer.substr(end)), kCloseTag)) {
    return ToolCallSyntax::kHermes;
  }
  return ToolCallSyntax::kNone;
}

}  // namespace

const char* ToolCallSyntaxName(ToolCallSyntax syntax) {
  switch (syntax) {
    case ToolCallSyntax::kNone:
      return "none";
    case ToolCallSyntax::kJsonObject:
      return "json_object";
    case ToolCallSyntax::kHermes:
      return "hermes";
  }
  return "?";
}

ToolCallSyntax ProbeToolCallSyntax(const ChatTemplate& tmpl, const RenderLimits& limits) {
  const json tool = {{"type", "function"},
                     {"function",
                      {{"name", kProbeName},
                       {"description", "A probe."},
                       {"parameters",
                        {{"type", "object"},
                         {"properties", {{kProbeArgument, {{"type", "integer"}}}}},
                         {"required", {kProbeArgument}}}}}}};
  const json call = {{"id", "call_0"},
                     {"type", "function"},
                     {"function", {{"name", kProbeName}, {"arguments", {{kProbeArgument, 1}}}}}};
  ChatRenderOptions options;
  options.limits = limits;
  options.extra_variables = {{"tools", {tool}}};
  options.date = absl::CivilDay(2026, 1, 1);  // both renders alike
  const json user = {{"role", "user"}, {"content", "Call the probe."}};
  // The prompt up to the answer; then the conversation with the answer that calls.
  options.add_generation_prompt = true;
  absl::StatusOr<RenderedChat> prompt = tmpl.Render(json::array({user}), options);
  if (!prompt.ok()) return ToolCallSyntax::kNone;
  options.add_generation_prompt = false;
  // Templates differ in what an assistant turn with calls has as content.
  for (const json& content : {json(nullptr), json("")}) {
    const json assistant = {{"role", "assistant"}, {"content", content}, {"tool_calls", {call}}};
    absl::StatusOr<RenderedChat> rendered = tmpl.Render(json::array({user, assistant}), options);
    if (!rendered.ok()) continue;
    if (!absl::StartsWith(rendered->text, prompt->text)) return ToolCallSyntax::kNone;
    return RecognizeProbe(absl::string_view(rendered->text).substr(prompt->text.size()));
  }
  return ToolCallSyntax::kNone;
}

ParsedAnswer ParseToolCalls(ToolCallSyntax syntax, absl::string_view answer,
                            absl::Span<const std::string> names) {
  switch (syntax) {
    case ToolCallSyntax::kNone:
      break;
    case ToolCallSyntax::kJsonObject: {
      std::optional<ToolCall> call = CallOf(absl::StripAsciiWhitespace(answer), names);
      if (call.has_value()) return {"", {*std::move(call)}};
      break;
    }
    case ToolCallSyntax::kHermes:
      return ParseHermes(answer, names);
  }
  return {std::string(answer), {}};
}

ToolCallHold HoldForToolCall(ToolCallSyntax syntax, absl::string_view unsent, size_t fresh,
                             bool at_start) {
  switch (syntax) {
    case ToolCallSyntax::kNone:
      return ToolCallHold::kNo;
    case ToolCallSyntax::kJsonObject: {
      if (!at_start) return ToolCallHold::kNo;
      // Cheap whole: the scan stops at the first byte that is not whitespace.
      const absl::string_view rest = absl::StripLeadingAsciiWhitespace(unsent);
      if (rest.empty()) return ToolCallHold::kMaybe;
      return rest[0] == '{' ? ToolCallHold::kCall : ToolCallHold::kNo;
    }
    case ToolCallSyntax::kHermes: {
      const size_t look = std::min(unsent.size(), fresh + kOpenTag.size() - 1);
      if (absl::StrContains(unsent.substr(unsent.size() - look), kOpenTag)) {
        return ToolCallHold::kCall;
      }
      for (size_t n = std::min(unsent.size(), kOpenTag.size() - 1); n > 0; --n) {
        if (absl::EndsWith(unsent, kOpenTag.substr(0, n))) return ToolCallHold::kMaybe;
      }
      return ToolCallHold::kNo;
    }
  }
  return ToolCallHold::kNo;
}

}  // namespace quill::engine::chat
