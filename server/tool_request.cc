#include "server/tool_request.h"

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "engine/sampler/json_schema.h"

namespace quill::server {

namespace {

using json = nlohmann::ordered_json;

absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, " ", what));
}

bool IsFunctionName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  }
  return true;
}

// The schema of a call to one of `functions` (name -> parameters schema): with one, its
// name and its parameters exactly; with several, one of their names and an object of
// arguments (the schema subset has no union of objects to tie each name to its own).
json CallSchema(const std::vector<std::pair<std::string, json>>& functions) {
  json name;
  json arguments;
  if (functions.size() == 1) {
    name = {{"const", functions[0].first}};
    arguments = functions[0].second;
  } else {
    json names = json::array();
    for (const auto& [function, parameters] : functions) names.push_back(function);
    name = {{"enum", names}};
    arguments = {{"type", "object"}};
  }
  return {{"type", "object"},
          {"properties", {{"name", name}, {"arguments", arguments}}},
          {"required", {"name", "arguments"}},
          {"additionalProperties", false}};
}

}  // namespace

absl::StatusOr<ToolRequest> ParseTools(const json& body) {
  ToolRequest out;
  const json* tools = body.contains("tools") ? &body["tools"] : nullptr;
  const json* choice = body.contains("tool_choice") ? &body["tool_choice"] : nullptr;
  if (tools != nullptr && !tools->is_null() && !tools->is_array()) {
    return Invalid("tools", "must be an array");
  }
  if (body.contains("parallel_tool_calls") && !body["parallel_tool_calls"].is_null()) {
    if (!body["parallel_tool_calls"].is_boolean()) {
      return Invalid("parallel_tool_calls", "must be a boolean");
    }
    out.parallel_calls = body["parallel_tool_calls"].get<bool>();
  }
  std::vector<std::pair<std::string, json>> functions;  // name, parameters
  if (tools != nullptr && tools->is_array()) {
    for (size_t i = 0; i < tools->size(); ++i) {
      const json& tool = (*tools)[i];
      const std::string at = absl::StrCat("tools[", i, "]");
      if (!tool.is_object() || tool.value("type", json()) != "function" ||
          !tool.contains("function") || !tool["function"].is_object()) {
        return Invalid(at, "must be {\"type\": \"function\", \"function\": {...}}");
      }
      const json& function = tool["function"];
      const json name = function.value("name", json());
      if (!name.is_string() || !IsFunctionName(name.get<std::string>())) {
        return Invalid(at, "function.name must be 1-64 letters, digits, '_' or '-'");
      }
      json parameters = function.value("parameters", json{{"type", "object"}});
      if (auto compiled = engine::JsonSchema::Compile(parameters.dump()); !compiled.ok()) {
        return Invalid(at, absl::StrCat("function.parameters ", compiled.status().message()));
      }
      functions.emplace_back(name.get<std::string>(), std::move(parameters));
    }
    if (!tools->empty()) out.tools = *tools;
  }
  std::vector<std::pair<std::string, json>> callable;  // what the answer must call
  if (choice == nullptr || choice->is_null()) {
    if (functions.empty()) return out;
    choice = nullptr;  // OpenAI's default with tools: "auto"
  }
  const std::string mode = choice == nullptr     ? "auto"
                           : choice->is_string() ? choice->get<std::string>()
                                                 : "";
  for (const auto& function : functions) out.names.push_back(function.first);
  if (mode == "none") return out;
  if (mode == "auto") {
    out.auto_calls = !functions.empty();
    return out;
  }
  if (mode == "required") {
    callable = functions;
  } else if (choice->is_object() && choice->value("type", json()) == "function" &&
             choice->contains("function") && (*choice)["function"].is_object() &&
             (*choice)["function"].value("name", json()).is_string()) {
    const std::string wanted = (*choice)["function"]["name"].get<std::string>();
    for (const auto& function : functions) {
      if (function.first == wanted) callable.push_back(function);
    }
    if (callable.empty()) {
      return Invalid("tool_choice", absl::StrCat("names \"", wanted, "\", which is not in tools"));
    }
  } else {
    return Invalid("tool_choice",
                   "must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                   "\"function\": {\"name\": ...}}");
  }
  if (callable.empty()) return Invalid("tool_choice", "\"required\" needs tools");
  if (body.contains("response_format") && body["response_format"].is_object() &&
      body["response_format"].value("type", json("text")) != "text") {
    return Invalid("tool_choice", "cannot force a tool call beside a response_format");
  }
  out.call_schema = CallSchema(callable).dump();
  return out;
}

absl::Status CheckCallsReadable(const ToolRequest& tools, engine::chat::ToolCallSyntax syntax) {
  if (!tools.auto_calls || syntax != engine::chat::ToolCallSyntax::kNone) return absl::OkStatus();
  return absl::InvalidArgumentError(
      "tool_choice \"auto\" needs a chat template whose tool calls Quill can read back (a "
      "JSON object in <tool_call> tags, as Qwen2.5 and Hermes write them, or a JSON object as "
      "the whole answer, as Llama 3 does); this model's is neither: use \"required\" or name "
      "a function (a schema then keeps the call), or \"none\"");
}

ToolCallReading ReadingOf(const ToolRequest& tools, engine::chat::ToolCallSyntax template_syntax) {
  ToolCallReading reading;
  if (!tools.call_schema.empty()) {
    reading.syntax = engine::chat::ToolCallSyntax::kJsonObject;
  } else if (tools.auto_calls) {
    reading.syntax = template_syntax;
  }
  if (reading.syntax != engine::chat::ToolCallSyntax::kNone) reading.names = tools.names;
  reading.first_call_only = !tools.parallel_calls;
  return reading;
}

engine::chat::ParsedAnswer ReadToolCalls(const ToolCallReading& reading, absl::string_view answer) {
  if (reading.syntax == engine::chat::ToolCallSyntax::kNone) return {std::string(answer), {}};
  engine::chat::ParsedAnswer parsed =
      engine::chat::ParseToolCalls(reading.syntax, answer, reading.names);
  if (reading.first_call_only && parsed.calls.size() > 1) parsed.calls.resize(1);
  return parsed;
}

}  // namespace quill::server
