#pragma once

// A tokenizer for server unit tests: one id per byte (byte + 3), BOS = 1, EOS = 2,
// vocabulary of 1024. Enough to test the server's own rules; the real tokenizer is
// exercised by the integration tests.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/tokenizer/tokenizer.h"
#include "server/request_codec.h"  // FirstInvalidUtf8

namespace quill::server::testing {

class ByteTokenizer : public engine::Tokenizer {
 public:
  absl::StatusOr<std::vector<engine::TokenId>> Encode(absl::string_view text,
                                                      bool add_special) const override {
    encoded_bytes += static_cast<int64_t>(text.size());
    if (FirstInvalidUtf8(text) >= 0) return absl::InvalidArgumentError("not valid UTF-8");
    std::vector<engine::TokenId> ids;
    if (add_special) ids.push_back(1);
    for (unsigned char c : text) ids.push_back(c + 3);
    return ids;
  }
  absl::StatusOr<std::vector<engine::TokenId>> EncodeWithSpecialTokens(
      absl::string_view text, bool add_special,
      absl::Span<const engine::ByteRange> plain_ranges) const override {
    return Encode(text, add_special);  // no special tokens in this vocabulary
  }
  std::string TokenBytes(engine::TokenId id) const override {
    return id >= 3 ? std::string(1, static_cast<char>(id - 3)) : "";
  }
  absl::string_view token_text(engine::TokenId id) const override { return ""; }
  int vocab_size() const override { return 1024; }
  engine::TokenId bos_id() const override { return 1; }
  engine::TokenId eos_id() const override { return 2; }
  bool add_bos() const override { return true; }
  bool IsEndOfGeneration(engine::TokenId id) const override { return id == 2; }
  absl::Span<const engine::TokenId> end_of_generation_ids() const override { return kEog; }
  bool IsControl(engine::TokenId id) const override { return id < 3; }
  std::string model_name() const override { return "llama"; }

  mutable int64_t encoded_bytes = 0;  // text handed to Encode so far

 private:
  static constexpr engine::TokenId kEog[] = {2};
};

}  // namespace quill::server::testing
