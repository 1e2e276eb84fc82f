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
#include "fuzz/accepted_request.h"
#include "fuzz/fuzz_assets.h"
#include "grpcpp/support/byte_buffer.h"
#include "quill/v1/quill.pb.h"
#include "server/request_codec.h"

namespace v1 = ::quill::v1;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const quill::engine::Tokenizer* tokenizer = quill::fuzz::BuiltinTokenizer().release();
  static const quill::server::RequestLimits limits = quill::fuzz::BuiltinModelLimits(*tokenizer);

  grpc::Slice slice(data, size);
  const grpc::ByteBuffer buffer(&slice, 1);
  v1::GenerateRequest request;
  const absl::Status parsed = quill::server::ParseRequest(buffer, &request);
  QUILL_CHECK(parsed.ok() || parsed.code() == absl::StatusCode::kInvalidArgument);
  if (parsed.ok()) {
    auto converted = quill::server::ToEngineRequest(request, limits, *tokenizer);
    if (converted.ok()) {
      quill::fuzz::CheckAccepted(*converted, limits);
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
