#include "engine/sampler/json_constraint.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "engine/base/utf8.h"

namespace quill::engine {

namespace {

// Whether `bytes` are well-formed UTF-8 with no '"', '\\' or control character: text a
// string takes as it is (stricter than JsonPrefix, so the shortcut never admits a token
// that trying its bytes would refuse).
bool IsPlainStringText(const std::string& bytes) {
  for (char c : bytes) {
    const uint8_t b = static_cast<uint8_t>(c);
    if (b < 0x20 || b == '"' || b == '\\') return false;
  }
  return IsValidUtf8(bytes);
}

}  // namespace

TokenBytesTable TokenBytesTable::Make(std::vector<std::string> bytes,
                                      std::vector<uint8_t> ends_generation) {
  TokenBytesTable table;
  table.bytes = std::move(bytes);
  table.ends_generation = std::move(ends_generation);
  table.plain_string.resize(table.bytes.size());
  table.leading_whitespace.resize(table.bytes.size());
  for (size_t id = 0; id < table.bytes.size(); ++id) {
    const std::string& bytes = table.bytes[id];
    table.plain_string[id] = !bytes.empty() && IsPlainStringText(bytes);
    const size_t spaces = std::min(bytes.find_first_not_of(" \t\n\r"), bytes.size());
    table.leading_whitespace[id] = static_cast<uint8_t>(std::min<size_t>(spaces, 255));
  }
  return table;
}

// Trying every token's bytes on a copy of the state took ~0.38 ms a step for a
// 32,000-token vocabulary (Zen 5, a synthetic vocabulary of word pieces); with the
// shortcuts, which leave that to the tokens they cannot decide: 0.07-0.1 ms inside a
// string, 0.44 ms after a number or a colon (most pieces start with a space there).
int JsonConstraint::Mask(absl::Span<float> logits) const {
  constexpr float kBanned = -std::numeric_limits<float>::infinity();
  const bool complete = json_.complete();
  const bool in_string = json_.between_string_characters();
  bool first_byte_ok[256];
  for (int b = 0; b < 256; ++b) {
    JsonPrefix next = json_;
    first_byte_ok[b] = !complete && next.Accept(static_cast<uint8_t>(b));
  }
  // Outside strings every whitespace byte does the same (only the run's length counts):
  // runs_ok[k] says whether k of them are taken, after_space_ok[b] whether b may follow.
  const bool outside_strings = json_.outside_strings();
  bool runs_ok[JsonPrefix::kMaxWhitespaceRun + 2] = {};
  bool after_space_ok[256] = {};
  if (outside_strings && first_byte_ok[static_cast<uint8_t>(' ')]) {
    JsonPrefix spaces = json_;
    for (int k = 1; k < JsonPrefix::kMaxWhitespaceRun + 2; ++k) runs_ok[k] = spaces.Accept(' ');
    JsonPrefix one = json_;
    one.Accept(' ');
    for (int b = 0; b < 256; ++b) {
      JsonPrefix next = one;
      after_space_ok[b] = next.Accept(static_cast<uint8_t>(b));
    }
  }
  int allowed = 0;
  for (size_t id = 0; id < logits.size(); ++id) {
    const std::string& bytes = table_->bytes[id];
    bool ok;
    if (bytes.empty()) {
      ok = complete && table_->ends_generation[id] != 0;
    } else if (!first_byte_ok[static_cast<uint8_t>(bytes[0])]) {
      ok = false;
    } else if (in_string && table_->plain_string[id] != 0) {
      ok = true;
    } else if (const int spaces = table_->leading_whitespace[id];
               outside_strings && spaces > 0 &&
               (!runs_ok[std::min(spaces, JsonPrefix::kMaxWhitespaceRun + 1)] ||
                (static_cast<size_t>(spaces) < bytes.size() &&
                 !after_space_ok[static_cast<uint8_t>(bytes[spaces])]))) {
      ok = false;
    } else {
      JsonPrefix next = json_;  // a small value: trying a token costs a copy
      ok = next.Accept(bytes);
    }
    if (ok) {
      ++allowed;
    } else {
      logits[id] = kBanned;
    }
  }
  return allowed;
}

int32_t JsonConstraint::FirstEndOfGeneration() const {
  for (size_t id = 0; id < table_->ends_generation.size(); ++id) {
    if (table_->ends_generation[id] != 0) return static_cast<int32_t>(id);
  }
  return -1;
}

void JsonConstraint::Advance(int32_t token) {
  if (token < 0 || static_cast<size_t>(token) >= table_->bytes.size()) return;
  json_.Accept(table_->bytes[token]);
}

}  // namespace quill::engine
