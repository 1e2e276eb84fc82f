#include "engine/base/log_field.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace quill {

std::string LogField(absl::string_view value) {
  bool plain = !value.empty();
  for (char c : value) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7F || c == '"' || c == '\\' || c == '=') {
      plain = false;
      break;
    }
  }
  if (plain) return std::string(value);
  return absl::StrCat("\"", absl::CHexEscape(value), "\"");
}

}  // namespace quill
