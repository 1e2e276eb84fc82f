#pragma once

// What every request a front end accepts must satisfy before it reaches the engine: the
// one check of the gRPC (request_fuzzer) and the HTTP (openai_request_fuzzer) targets.

#include <cstdint>
#include <string>

#include "engine/base/check.h"
#include "engine/base/utf8.h"
#include "engine/runtime/request.h"
#include "engine/sampler/schema_prefix.h"
#include "engine/tokenizer/tokenizer.h"
#include "server/request_codec.h"

namespace quill::fuzz {

// kjv-1m as quill-server configures it by default (context 256, pool of 256 MiB).
inline server::RequestLimits BuiltinModelLimits(const engine::Tokenizer& tokenizer) {
  server::RequestLimits limits;
  limits.vocab_size = tokenizer.vocab_size();
  limits.context_length = 256;
  limits.max_tokens = 255;
  limits.max_prompt_tokens = 255;
  limits.kv_capacity_tokens = 131072;
  return limits;
}

// A JSON schema that was accepted never leads into a dead end: a walk of up to 96 bytes,
// each the first the recognizer takes from a list that tends to close what is open, finds
// some byte accepted at every step until the object completes.
inline void CheckSchemaHasNoDeadEnd(const engine::JsonSchema& schema) {
  static constexpr char kPreferred[] = "}]\"0,:{[tfn-a ";
  engine::SchemaPrefix prefix(schema);
  for (int step = 0; step < 96 && !prefix.complete(); ++step) {
    int chosen = -1;
    for (const char* c = kPreferred; *c != '\0' && chosen < 0; ++c) {
      engine::SchemaPrefix next = prefix;
      if (next.Accept(static_cast<uint8_t>(*c))) chosen = static_cast<uint8_t>(*c);
    }
    for (int b = 0; b < 256 && chosen < 0; ++b) {
      engine::SchemaPrefix next = prefix;
      if (next.Accept(static_cast<uint8_t>(b))) chosen = b;
    }
    QUILL_CHECK(chosen >= 0);  // a dead end
    QUILL_CHECK(prefix.Accept(static_cast<uint8_t>(chosen)));
  }
}

inline void CheckAccepted(const engine::GenerationRequest& r, const server::RequestLimits& limits) {
  if (r.json_schema != nullptr) {
    QUILL_CHECK(r.json_object);
    CheckSchemaHasNoDeadEnd(*r.json_schema);
  }
  QUILL_CHECK(!r.prompt_ids.empty());
  QUILL_CHECK(static_cast<int64_t>(r.prompt_ids.size()) <= limits.max_prompt_tokens);
  for (auto id : r.prompt_ids) QUILL_CHECK(id >= 0 && id < limits.vocab_size);
  QUILL_CHECK(r.max_tokens >= 1 && r.max_tokens <= limits.max_tokens);
  QUILL_CHECK(static_cast<int64_t>(r.prompt_ids.size()) + r.max_tokens <= limits.context_length);
  QUILL_CHECK(static_cast<int>(r.stop.size()) <= limits.max_stop_strings);
  for (const std::string& s : r.stop) {
    QUILL_CHECK(!s.empty() && static_cast<int>(s.size()) <= limits.max_stop_bytes);
    QUILL_CHECK(engine::IsValidUtf8(s));
  }
  for (auto id : r.stop_token_ids) QUILL_CHECK(id >= 0 && id < limits.vocab_size);
  QUILL_CHECK(r.logprobs >= 0 && r.logprobs <= limits.max_logprobs);
  QUILL_CHECK(static_cast<int>(r.request_id.size()) <= limits.max_request_id_bytes);
  QUILL_CHECK(engine::ValidateSamplingParams(r.sampling).ok());
  QUILL_CHECK(static_cast<int>(r.sampling.logit_bias.size()) <= limits.max_logit_bias);
  for (const engine::LogitBias& entry : r.sampling.logit_bias) {
    QUILL_CHECK(entry.id >= 0 && entry.id < limits.vocab_size);
  }
}

}  // namespace quill::fuzz
