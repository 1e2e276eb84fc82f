#include "client/cli/flag_parser.h"

#include <cmath>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace quill::cli {
namespace {

constexpr size_t kHelpColumn = 28;

// Wraps `text` to ~90 columns, indenting continuation lines to `indent`.
std::string Wrap(absl::string_view text, size_t indent) {
  std::string out;
  size_t column = indent;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (column > indent && column + 1 + word.size() > 92) {
      absl::StrAppend(&out, "\n", std::string(indent, ' '));
      column = indent;
    } else if (column > indent) {
      out += ' ';
      ++column;
    }
    absl::StrAppend(&out, word);
    column += word.size();
  }
  return out;
}

}  // namespace

FlagParser::FlagParser(std::string usage, std::string description)
    : usage_(std::move(usage)), description_(std::move(description)) {}

void FlagParser::Add(Flag flag) { flags_.push_back(std::move(flag)); }

const FlagParser::Flag* FlagParser::Find(absl::string_view name) const {
  for (const Flag& flag : flags_) {
    if (flag.name == name) return &flag;
  }
  return nullptr;
}

void FlagParser::SetDefaultText(absl::string_view name, std::string text) {
  for (Flag& flag : flags_) {
    if (flag.name == name) flag.default_text = std::move(text);
  }
}

void FlagParser::AddString(absl::string_view name, std::string* out, absl::string_view help) {
  Add({std::string(name), "STR", std::string(help), out->empty() ? "" : absl::StrCat("\"", *out, "\""),
       false, [out](absl::string_view v) {
         *out = std::string(v);
         return true;
       }});
}

void FlagParser::AddInt(absl::string_view name, int* out, absl::string_view help) {
  Add({std::string(name), "N", std::string(help), absl::StrCat(*out), false,
       [out](absl::string_view v) { return absl::SimpleAtoi(v, out); }});
}

void FlagParser::AddUint64(absl::string_view name, uint64_t* out, absl::string_view help) {
  Add({std::string(name), "N", std::string(help), absl::StrCat(*out), false,
       [out](absl::string_view v) { return absl::SimpleAtoi(v, out); }});
}

void FlagParser::AddDouble(absl::string_view name, double* out, absl::string_view help) {
  Add({std::string(name), "X", std::string(help), absl::StrCat(*out), false,
       [out](absl::string_view v) {
         double parsed;
         if (!absl::SimpleAtod(v, &parsed) || !std::isfinite(parsed)) return false;
         *out = parsed;
         return true;
       }});
}

void FlagParser::AddBool(absl::string_view name, bool* out, absl::string_view help) {
  Add({std::string(name), "", std::string(help), *out ? "true" : "", true,
       [out](absl::string_view v) { return absl::SimpleAtob(v, out); }});
}

void FlagParser::AddDuration(absl::string_view name, absl::Duration* out,
                             absl::string_view help) {
  Add({std::string(name), "DURATION", std::string(help),
       *out == absl::ZeroDuration() ? "" : absl::FormatDuration(*out), false,
       [out](absl::string_view v) {
         absl::Duration parsed;
         if (!absl::ParseDuration(std::string(v), &parsed) || parsed < absl::ZeroDuration()) {
           return false;
         }
         *out = parsed;
         return true;
       }});
}

void FlagParser::AddStringList(absl::string_view name, std::vector<std::string>* out,
                               absl::string_view help) {
  Add({std::string(name), "STR", absl::StrCat(help, " (repeatable)"), "", false,
       [out](absl::string_view v) {
         out->emplace_back(v);
         return true;
       }});
}

void FlagParser::AddRepeated(absl::string_view name, absl::string_view value_name,
                             absl::string_view help,
                             std::function<bool(absl::string_view value)> parse) {
  Add({std::string(name), std::string(value_name), absl::StrCat(help, " (repeatable)"), "", false,
       std::move(parse)});
}

absl::StatusOr<std::vector<std::string>> FlagParser::Parse(const std::vector<std::string>& args) {
  std::vector<std::string> positional;
  for (size_t i = 0; i < args.size(); ++i) {
    absl::string_view arg = args[i];
    if (arg == "--") {
      positional.insert(positional.end(), args.begin() + i + 1, args.end());
      break;
    }
    if (arg == "--help" || arg == "-h") {
      help_requested_ = true;
      return positional;
    }
    if (arg.size() < 2 || arg[0] != '-' || arg == "-") {
      positional.emplace_back(arg);
      continue;
    }
    absl::string_view body = arg.substr(arg[1] == '-' ? 2 : 1);
    absl::string_view name = body;
    absl::string_view value;
    bool has_value = false;
    if (size_t eq = body.find('='); eq != absl::string_view::npos) {
      name = body.substr(0, eq);
      value = body.substr(eq + 1);
      has_value = true;
    }
    const Flag* flag = Find(name);
    if (flag == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name, " (see --help)"));
    }
    if (!has_value) {
      if (flag->is_bool) {
        value = "true";
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        return absl::InvalidArgumentError(absl::StrCat("flag --", name, " needs a value"));
      }
    }
    if (!flag->set(value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad value for --", name, ": \"", value, "\"",
                       flag->value_name.empty() ? " (expected true or false)"
                                                : absl::StrCat(" (expected ", flag->value_name, ")")));
    }
  }
  return positional;
}

std::string FlagParser::Help() const {
  std::string out = absl::StrCat("Usage: ", usage_, "\n\n", Wrap(description_, 0), "\n");
  if (flags_.empty()) return out;
  out += "\nFlags:\n";
  for (const Flag& flag : flags_) {
    std::string left = absl::StrCat("  --", flag.name);
    if (!flag.value_name.empty()) absl::StrAppend(&left, " ", flag.value_name);
    std::string help = flag.help;
    if (!flag.default_text.empty()) absl::StrAppend(&help, " [default: ", flag.default_text, "]");
    if (left.size() + 2 > kHelpColumn) {
      absl::StrAppend(&out, left, "\n", std::string(kHelpColumn, ' '));
    } else {
      absl::StrAppend(&out, left, std::string(kHelpColumn - left.size(), ' '));
    }
    absl::StrAppend(&out, Wrap(help, kHelpColumn), "\n");
  }
  absl::StrAppend(&out, "  --help", std::string(kHelpColumn - 8, ' '), "Show this help.\n");
  return out;
}

}  // namespace quill::cli
