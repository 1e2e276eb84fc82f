#include "engine/sampler/json_constraint.h"

#include <limits>

namespace quill::engine {

int JsonConstraint::Mask(absl::Span<float> logits) const {
  constexpr float kBanned = -std::numeric_limits<float>::infinity();
  const bool complete = json_.complete();
  int allowed = 0;
  for (size_t id = 0; id < logits.size(); ++id) {
    const std::string& bytes = table_->bytes[id];
    bool ok;
    if (bytes.empty()) {
      ok = complete && table_->ends_generation[id] != 0;
    } else if (complete) {
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
