#include "engine/sampler/json_constraint.h"

#include <algorithm>
#include <limits>
#include <type_traits>
#include <utility>

namespace quill::engine {

namespace {

constexpr float kBanned = -std::numeric_limits<float>::infinity();

void BanRange(const TokenTrie& trie, int32_t begin, int32_t end, float* logits) {
  const std::vector<int32_t>& order = trie.order();
  for (int32_t i = begin; i < end; ++i) logits[order[i]] = kBanned;
}

// How deep the walk recurses: a token longer than this (rare, but a model file may hold
// one of any length) has the rest of its bytes tried on its own, so the stack stays small.
constexpr int kMaxWalkDepth = 64;

// Tries, on its own, every token below `node` from `state` (the state after the tokens'
// first `depth` bytes); returns how many it allowed.
template <typename Recognizer>
int TryEachBelow(const TokenBytesTable& table, const TokenTrie::Node& node, int depth,
                 const Recognizer& state, float* logits) {
  int allowed = 0;
  for (int32_t i = node.own_end; i < node.tokens_end; ++i) {
    const int32_t id = table.trie.order()[i];
    Recognizer next = state;
    if (next.Accept(absl::string_view(table.bytes[id]).substr(depth))) {
      ++allowed;
    } else {
      logits[id] = kBanned;
    }
  }
  return allowed;
}

template <typename Recognizer>
int MaskBelow(const TokenBytesTable& table, const TokenTrie::Node& node, int depth,
              const Recognizer& state, float* logits);

// A schema state inside a string value that takes any text: until the string closes only
// its syntax changes, so the walk below carries copies of the syntax (JsonPrefix, 43 bytes,
// not SchemaPrefix's ~600) and rebuilds the schema state from `base` (the state
// `base_depth` bytes deep) and the path's bytes where one closes the string.
// quill-json-mask-bench inside a string: 82 -> 33 us (Llama 2's 32,000 tokens), 349 -> 186
// (Llama 3's 128,256), 625 -> 281 (Qwen2's 151,936), the same tokens allowed.
int MaskBelowInString(const TokenBytesTable& table, const TokenTrie::Node& node, int depth,
                      const SchemaPrefix& base, int base_depth, const JsonPrefix& syntax,
                      float* logits) {
  if (node.plain_below && syntax.between_string_characters()) {
    return node.tokens_end - node.own_end;
  }
  if (depth >= kMaxWalkDepth) return TryEachBelow(table, node, base_depth, base, logits);
  const TokenTrie& trie = table.trie;
  int allowed = 0;
  for (int32_t c = node.children_begin; c < node.children_end; ++c) {
    const TokenTrie::Node& child = trie.node(c);
    JsonPrefix next = syntax;
    if (!next.Accept(child.byte)) {
      BanRange(trie, child.tokens_begin, child.tokens_end, logits);
      continue;
    }
    // The schema takes every byte the syntax does inside such a string, its close too.
    allowed += child.own_end - child.tokens_begin;
    if (next.context() == JsonPrefix::Context::kValueString) {
      allowed += MaskBelowInString(table, child, depth + 1, base, base_depth, next, logits);
      continue;
    }
    SchemaPrefix closed = base;
    const std::string& path = table.bytes[trie.order()[child.tokens_begin]];
    closed.Accept(absl::string_view(path).substr(base_depth, depth + 1 - base_depth));
    allowed += MaskBelow(table, child, depth + 1, closed, logits);
  }
  return allowed;
}

// Masks the tokens below `node`, which is `depth` bytes deep and whose prefix has brought
// the object to `state`, that the object refuses (the node's own tokens are not below
// it); returns how many it left allowed.
template <typename Recognizer>
int MaskBelow(const TokenBytesTable& table, const TokenTrie::Node& node, int depth,
              const Recognizer& state, float* logits) {
  if constexpr (std::is_same_v<Recognizer, SchemaPrefix>) {
    if (state.in_free_string()) {
      return MaskBelowInString(table, node, depth, state, depth, state.syntax(), logits);
    }
  }
  if (node.plain_below && state.between_string_characters()) {
    return node.tokens_end - node.own_end;
  }
  if (depth >= kMaxWalkDepth) return TryEachBelow(table, node, depth, state, logits);
  const TokenTrie& trie = table.trie;
  int allowed = 0;
  for (int32_t c = node.children_begin; c < node.children_end; ++c) {
    const TokenTrie::Node& child = trie.node(c);
    Recognizer next = state;  // a small value: trying a byte costs a copy
    if (!next.Accept(child.byte)) {
      BanRange(trie, child.tokens_begin, child.tokens_end, logits);
      continue;
    }
    allowed += child.own_end - child.tokens_begin;
    allowed += MaskBelow(table, child, depth + 1, next, logits);
  }
  return allowed;
}

}  // namespace

TokenBytesTable TokenBytesTable::Make(std::vector<std::string> bytes,
                                      std::vector<uint8_t> ends_generation) {
  TokenBytesTable table;
  table.bytes = std::move(bytes);
  table.ends_generation = std::move(ends_generation);
  for (size_t id = 0; id < table.bytes.size(); ++id) {
    if (table.bytes[id].empty()) table.without_bytes.push_back(static_cast<int32_t>(id));
  }
  table.trie = TokenTrie::Build(table.bytes);
  return table;
}

// Per-token shortcuts before the trie (a refused first byte, leading whitespace, plain
// string text) still tried most pieces after a colon. quill-json-mask-bench, one Zen 5
// core, the same run: Llama 2's 32,000 tokens 189 -> 16 us a mask after a colon, 43 -> 23
// inside a string; Llama 3's 128,256: 1,267 -> 69 and 307 -> 100; Qwen2's 151,936: 1,190
// -> 69 and 308 -> 167 (the same tokens allowed in both).
JsonConstraint::JsonConstraint(const TokenBytesTable& table,
                               std::shared_ptr<const JsonSchema> schema)
    : table_(&table), schema_owner_(std::move(schema)) {
  if (schema_owner_ != nullptr) schema_.emplace(*schema_owner_);
}

int JsonConstraint::Mask(absl::Span<float> logits) const {
  const bool complete = this->complete();
  int allowed = 0;
  for (int32_t id : table_->without_bytes) {
    if (complete && table_->ends_generation[id] != 0) {
      ++allowed;
    } else {
      logits[id] = kBanned;
    }
  }
  const TokenTrie& trie = table_->trie;
  if (complete) {
    BanRange(trie, 0, static_cast<int32_t>(trie.order().size()), logits.data());
  } else {
    allowed += schema_ ? MaskBelow(*table_, trie.root(), 0, *schema_, logits.data())
                       : MaskBelow(*table_, trie.root(), 0, json_, logits.data());
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
  if (schema_) {
    schema_->Accept(table_->bytes[token]);
  } else {
    json_.Accept(table_->bytes[token]);
  }
}

}  // namespace quill::engine
