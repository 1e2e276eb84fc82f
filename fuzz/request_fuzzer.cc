// libFuzzer target: arbitrary bytes as a serialized quill.v1.GenerateRequest (and as a
// TokenizeRequest), through what the server does before anything reaches the engine:
// ParseRequest (UTF-8 errors named by field), ValidateGenerateRequest and ToEngineRequest
// with the built-in kjv-1m tokenizer. An accepted request must satisfy every limit the
// engine relies on.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "engine/base/check.h"
#include "engine/tokenizer/tokenizer.h"
#include "fuzz/fuzz_assets.h"
#include "grpcpp/support/byte_buffer.h"
#include "quill/v1/quill.pb.h"
#include "server/request_codec.h"

namespace {

namespace v1 = ::quill::v1;
using quill::server::RequestLimits;

// kjv-1m as quill-server configures it by default (context 256, pool of 256 MiB).
RequestLimits Limits(const quill::engine::Tokenizer& tokenizer) {
  RequestLimits limits;
  limits.vocab_size = tokenizer.vocab_size();
  limits.context_length = 256;
  limits.max_tokens = 255;
  limits.max_prompt_tokens = 255;
  limits.kv_capacity_tokens = 131072;
  return limits;
}

void CheckAccepted(const quill::engine::GenerationRequest& r, const RequestLimits& limits) {
  QUILL_CHECK(!r.prompt_ids.empty());
  QUILL_CHECK(static_cast<int64_t>(r.prompt_ids.size()) <= limits.max_prompt_tokens);
  for (auto id : r.prompt_ids) QUILL_CHECK(id >= 0 && id < limits.vocab_size);
  QUILL_CHECK(r.max_tokens >= 1 && r.max_tokens <= limits.max_tokens);
  QUILL_CHECK(static_cast<int64_t>(r.prompt_ids.size()) + r.max_tokens <= limits.context_length);
  QUILL_CHECK(static_cast<int>(r.stop.size()) <= limits.max_stop_strings);
  for (const std::string& s : r.stop) {
    QUILL_CHECK(!s.empty() && static_cast<int>(s.size()) <= limits.max_stop_bytes);
    QUILL_CHECK(quill::engine::IsValidUtf8(s));
  }
  for (auto id : r.stop_token_ids) QUILL_CHECK(id >= 0 && id < limits.vocab_size);
  QUILL_CHECK(r.logprobs >= 0 && r.logprobs <= limits.max_logprobs);
  QUILL_CHECK(static_cast<int>(r.request_id.size()) <= limits.max_request_id_bytes);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const quill::engine::Tokenizer* tokenizer = quill::fuzz::BuiltinTokenizer().release();
  static const RequestLimits limits = Limits(*tokenizer);

  grpc::Slice slice(data, size);
  const grpc::ByteBuffer buffer(&slice, 1);
  v1::GenerateRequest request;
  const absl::Status parsed = quill::server::ParseRequest(buffer, &request);
  QUILL_CHECK(parsed.ok() || parsed.code() == absl::StatusCode::kInvalidArgument);
  if (parsed.ok()) {
    auto converted = quill::server::ToEngineRequest(request, limits, *tokenizer);
    if (converted.ok()) {
      CheckAccepted(*converted, limits);
    } else {
      QUILL_CHECK(converted.status().code() == absl::StatusCode::kInvalidArgument);
    }
  }
  v1::TokenizeRequest tokenize;
  if (quill::server::ParseRequest(buffer, &tokenize).ok()) {
    auto ids = tokenizer->Encode(tokenize.text(), tokenize.add_special_tokens());
    QUILL_CHECK(ids.ok());  // ParseRequest let only UTF-8 through
  }
  return 0;
}
