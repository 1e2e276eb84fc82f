#include "server/template_kwargs.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace quill::server {

absl::StatusOr<nlohmann::ordered_json> CheckTemplateKwargs(const nlohmann::ordered_json& kwargs,
                                                           absl::string_view field) {
  if (kwargs.is_null()) return kwargs;
  if (!kwargs.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(field, " must be an object"));
  }
  for (const char* own : {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token"}) {
    if (kwargs.contains(own)) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, " cannot set \"", own, "\": the request and the model set it"));
    }
  }
  return kwargs;
}

nlohmann::ordered_json WithTemplateKwargs(nlohmann::ordered_json variables,
                                          const nlohmann::ordered_json& kwargs) {
  if (!kwargs.is_object() || kwargs.empty()) return variables;
  if (!variables.is_object()) variables = nlohmann::ordered_json::object();
  for (auto it = kwargs.begin(); it != kwargs.end(); ++it) variables[it.key()] = it.value();
  return variables;
}

}  // namespace quill::server
