#include "engine/tools/tool_flags.h"

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace quill::engine::tools {

std::vector<std::string> NormalizeArgs(
    int argc, char** argv, const std::vector<std::pair<std::string, std::string>>& aliases) {
  std::vector<std::string> out;
  out.emplace_back(argc > 0 ? argv[0] : "quill");
  bool rest_positional = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (rest_positional || arg.size() < 2 || arg[0] != '-') {
      out.push_back(arg);
      continue;
    }
    if (arg == "--") {
      rest_positional = true;
      out.push_back(arg);
      continue;
    }
    if (arg[1] != '-') {
      // A short alias: "-m X" or "-mX"? Only the spaced and "=" forms are accepted.
      std::string name = arg.substr(1);
      std::string value;
      bool has_value = false;
      size_t eq = name.find('=');
      if (eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        has_value = true;
      }
      bool matched = false;
      for (const auto& [short_name, long_name] : aliases) {
        if (name != short_name) continue;
        matched = true;
        if (long_name == "help") {
          out.push_back("--help");
        } else if (has_value) {
          out.push_back("--" + long_name + "=" + value);
        } else if (i + 1 < argc) {
          out.push_back("--" + long_name + "=" + argv[++i]);
        } else {
          out.push_back("--" + long_name);  // absl reports the missing value
        }
        break;
      }
      if (!matched) out.push_back("-" + name + (has_value ? "=" + value : ""));
      continue;
    }
    // Long flag: dashes in the name become underscores; "--no-x" is absl's "--nox".
    size_t eq = arg.find('=');
    size_t end = eq == std::string::npos ? arg.size() : eq;
    for (size_t j = 2; j < end; ++j) {
      if (arg[j] == '-') arg[j] = '_';
    }
    std::string name = arg.substr(2, end - 2);
    if (absl::StartsWith(name, "no_") && absl::FindCommandLineFlag(name) == nullptr &&
        absl::FindCommandLineFlag(name.substr(3)) != nullptr) {
      name = "no" + name.substr(3);
      arg = "--" + name + arg.substr(end);
    }
    // "--name VALUE" for a non-boolean flag becomes "--name=VALUE", so that a value
    // such as "-1" is never mistaken for a flag.
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (eq == std::string::npos && flag != nullptr && !flag->IsOfType<bool>() && i + 1 < argc) {
      arg += "=" + std::string(argv[++i]);
    }
    out.push_back(arg);
  }
  return out;
}

std::string FirstUnknownFlag(const std::vector<std::string>& args) {
  static const char* const kBuiltin[] = {"help", "helpfull", "helpshort", "helppackage",
                                         "version", "only_check_args", "helpon", "helpmatch",
                                         "flagfile", "fromenv", "tryfromenv", "undefok"};
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") break;
    if (a.size() < 2 || a[0] != '-') continue;
    absl::string_view name = a;
    name.remove_prefix(a[1] == '-' ? 2 : 1);
    name = name.substr(0, name.find('='));
    bool builtin = false;
    for (const char* b : kBuiltin) builtin = builtin || name == b;
    if (builtin) continue;
    if (absl::FindCommandLineFlag(name) != nullptr) continue;
    if (absl::ConsumePrefix(&name, "no") && absl::FindCommandLineFlag(name) != nullptr) continue;
    return a;
  }
  return "";
}

void ShowToolFlagsInHelp() {
  absl::FlagsUsageConfig config;
  // absl's --help lists the flags of files named like the binary; quill-run is built
  // from quill_run.cc, so name the tools directory instead.
  config.contains_help_flags = [](absl::string_view file) {
    return absl::StrContains(file, "engine/tools/");
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  absl::SetFlagsUsageConfig(config);
}

bool ParseIdList(absl::string_view text, std::vector<int>* out) {
  out->clear();
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    int v;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &v)) return false;
    out->push_back(v);
  }
  return !out->empty();
}

}  // namespace quill::engine::tools
