#pragma once

// chat_template_kwargs (vLLM's and SGLang's name, which clients send): more variables for
// the chat template, such as Qwen3's enable_thinking. HTTP takes them as a JSON object,
// gRPC's Chat as that object's text.

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace quill::server {

// `kwargs` checked: null (none) or an object that sets none of the variables Quill sets
// itself (messages, tools, add_generation_prompt, bos_token, eos_token). INVALID_ARGUMENT
// naming `field` otherwise. Their values reach the template as request data (untrusted,
// like message contents).
absl::StatusOr<nlohmann::ordered_json> CheckTemplateKwargs(const nlohmann::ordered_json& kwargs,
                                                           absl::string_view field);

// `variables` (an object or null) with `kwargs` (checked) added.
nlohmann::ordered_json WithTemplateKwargs(nlohmann::ordered_json variables,
                                          const nlohmann::ordered_json& kwargs);

}  // namespace quill::server
