#pragma once

// A small command-line flag parser for the `quill` subcommands: each subcommand declares
// its own flags (bound to local variables, with help text and defaults) and gets its own
// --help. Accepts `--name value`, `--name=value`, boolean `--name` / `--name=false`,
// repeated flags for lists, and `--` to end flags (for a prompt that starts with "-").

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace quill::cli {

class FlagParser {
 public:
  // `usage` is the synopsis ("quill generate [flags] [PROMPT]"), `description` a paragraph.
  FlagParser(std::string usage, std::string description);

  // Each Add* binds a flag to `*out`, whose current value is the default shown in --help.
  // `out` must outlive Parse().
  void AddString(absl::string_view name, std::string* out, absl::string_view help);
  void AddInt(absl::string_view name, int* out, absl::string_view help);
  void AddUint64(absl::string_view name, uint64_t* out, absl::string_view help);
  void AddDouble(absl::string_view name, double* out, absl::string_view help);
  void AddBool(absl::string_view name, bool* out, absl::string_view help);
  // Go-style durations: "60s", "1.5m", "250ms".
  void AddDuration(absl::string_view name, absl::Duration* out, absl::string_view help);
  // May be given several times; each occurrence appends.
  void AddStringList(absl::string_view name, std::vector<std::string>* out,
                     absl::string_view help);

  // May be given several times; `parse` takes each occurrence's value (shown in --help as
  // `value_name`) and returns false if it is not valid.
  void AddRepeated(absl::string_view name, absl::string_view value_name, absl::string_view help,
                   std::function<bool(absl::string_view value)> parse);

  // Replaces the default shown in --help for flag `name` (e.g. for sentinel defaults).
  void SetDefaultText(absl::string_view name, std::string text);

  // Parses `args` (the words after the subcommand) and returns the positional arguments.
  // Returns INVALID_ARGUMENT naming the flag for unknown flags, missing or bad values.
  // "--help"/"-h" sets help_requested() and stops parsing.
  absl::StatusOr<std::vector<std::string>> Parse(const std::vector<std::string>& args);

  bool help_requested() const { return help_requested_; }
  // Usage, description and one entry per flag with its default.
  std::string Help() const;

 private:
  struct Flag {
    std::string name;
    std::string value_name;  // empty for booleans
    std::string help;
    std::string default_text;
    bool is_bool = false;
    // Stores a parsed value; returns false if `value` is not valid for this flag.
    std::function<bool(absl::string_view value)> set;
  };
  void Add(Flag flag);
  const Flag* Find(absl::string_view name) const;

  std::string usage_;
  std::string description_;
  std::vector<Flag> flags_;
  bool help_requested_ = false;
};

}  // namespace quill::cli
