#pragma once

// The chat templates the chat fuzz targets render through: the real ones in
// ../shared/chat_templates (QUILL_SHARED_DIR overrides the compiled-in path), then a small
// built-in one, so that the list is never empty.

#include <dirent.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "engine/chat/chat_template.h"
#include "fuzz/fuzz_assets.h"

namespace quill::fuzz {

inline const std::vector<engine::chat::ChatTemplate>& ChatTemplates() {
  static const auto* templates = [] {
    constexpr char kBuiltinTemplate[] =
        "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] | trim }}\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}";
    auto* list = new std::vector<engine::chat::ChatTemplate>();
    const std::string dir = AssetPath("QUILL_SHARED_DIR", QUILL_FUZZ_SHARED_DIR, "chat_templates");
    std::vector<std::string> names;
    if (DIR* d = opendir(dir.c_str()); d != nullptr) {
      while (dirent* e = readdir(d)) {
        if (absl::EndsWith(e->d_name, ".jinja")) names.push_back(e->d_name);
      }
      closedir(d);
    }
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) {
      std::ifstream in(dir + "/" + name);
      std::stringstream source;
      source << in.rdbuf();
      auto parsed = engine::chat::ChatTemplate::Parse(source.str());
      if (parsed.ok()) list->push_back(*std::move(parsed));
    }
    list->push_back(*engine::chat::ChatTemplate::Parse(kBuiltinTemplate));
    return list;
  }();
  return *templates;
}

}  // namespace quill::fuzz
