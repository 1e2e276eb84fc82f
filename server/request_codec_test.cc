#include "server/request_codec.h"

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "engine/chat/chat_prompt.h"
#include "engine/sampler/json_schema.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/byte_tokenizer_for_test.h"

namespace quill::server {
namespace {

namespace v1 = ::quill::v1;
using ::testing::HasSubstr;

using ::quill::server::testing::ByteTokenizer;

RequestLimits Limits() {
  RequestLimits limits;
  limits.vocab_size = 1024;
  limits.context_length = 64;
  limits.max_tokens = 40;
  limits.max_prompt_tokens = 63;
  return limits;
}

v1::GenerateRequest Valid() {
  v1::GenerateRequest r;
  r.set_prompt("hello");
  r.set_max_tokens(8);
  return r;
}

struct InvalidCase {
  const char* name;
  std::function<void(v1::GenerateRequest*)> mutate;
  const char* field;  // the message must start with this field name
};

TEST(RequestCodecTest, EveryInvalidRequestIsInvalidArgumentNamingTheField) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<InvalidCase> cases = {
      {"no input", [](auto* r) { r->clear_input(); }, "prompt"},
      {"empty prompt", [](auto* r) { r->set_prompt(""); }, "prompt"},
      {"empty ids", [](auto* r) { r->mutable_prompt_token_ids(); }, "prompt_token_ids"},
      {"id above vocab",
       [](auto* r) {
         r->mutable_prompt_token_ids()->add_ids(1);
         r->mutable_prompt_token_ids()->add_ids(1024);
       },
       "prompt_token_ids[1]"},
      {"negative id", [](auto* r) { r->mutable_prompt_token_ids()->add_ids(-1); },
       "prompt_token_ids[0]"},
      {"too many ids",
       [](auto* r) {
         for (int i = 0; i < 64; ++i) r->mutable_prompt_token_ids()->add_ids(5);
       },
       "prompt_token_ids"},
      {"prompt longer than the limit", [](auto* r) { r->set_prompt(std::string(63, 'a')); },
       "prompt"},
      {"prompt + max_tokens beyond context",
       [](auto* r) {
         r->set_prompt(std::string(30, 'a'));  // 31 tokens with BOS
         r->set_max_tokens(34);                // 65 > 64
       },
       "max_tokens"},
      {"max_tokens 0", [](auto* r) { r->set_max_tokens(0); }, "max_tokens"},
      {"max_tokens negative", [](auto* r) { r->set_max_tokens(-3); }, "max_tokens"},
      {"max_tokens above limit", [](auto* r) { r->set_max_tokens(41); }, "max_tokens"},
      {"temperature NaN", [=](auto* r) { r->mutable_sampling()->set_temperature(nan); },
       "sampling.temperature"},
      {"temperature Inf", [=](auto* r) { r->mutable_sampling()->set_temperature(inf); },
       "sampling.temperature"},
      {"temperature negative", [](auto* r) { r->mutable_sampling()->set_temperature(-0.1f); },
       "sampling.temperature"},
      {"top_p above 1", [](auto* r) { r->mutable_sampling()->set_top_p(1.01f); }, "sampling.top_p"},
      {"top_p negative", [](auto* r) { r->mutable_sampling()->set_top_p(-0.5f); },
       "sampling.top_p"},
      {"top_p NaN", [=](auto* r) { r->mutable_sampling()->set_top_p(nan); }, "sampling.top_p"},
      {"top_k negative", [](auto* r) { r->mutable_sampling()->set_top_k(-1); }, "sampling.top_k"},
      {"min_p above 1", [](auto* r) { r->mutable_sampling()->set_min_p(1.5f); }, "sampling.min_p"},
      {"min_p negative", [](auto* r) { r->mutable_sampling()->set_min_p(-0.01f); },
       "sampling.min_p"},
      {"min_p NaN", [=](auto* r) { r->mutable_sampling()->set_min_p(nan); }, "sampling.min_p"},
      {"repetition_penalty negative",
       [](auto* r) { r->mutable_sampling()->set_repetition_penalty(-1.0f); },
       "sampling.repetition_penalty"},
      {"repetition_penalty Inf",
       [=](auto* r) { r->mutable_sampling()->set_repetition_penalty(inf); },
       "sampling.repetition_penalty"},
      {"frequency_penalty above 2",
       [](auto* r) { r->mutable_sampling()->set_frequency_penalty(2.01f); },
       "sampling.frequency_penalty"},
      {"frequency_penalty NaN", [=](auto* r) { r->mutable_sampling()->set_frequency_penalty(nan); },
       "sampling.frequency_penalty"},
      {"presence_penalty below -2",
       [](auto* r) { r->mutable_sampling()->set_presence_penalty(-3.0f); },
       "sampling.presence_penalty"},
      {"presence_penalty Inf", [=](auto* r) { r->mutable_sampling()->set_presence_penalty(inf); },
       "sampling.presence_penalty"},
      {"logit_bias id outside vocab",
       [](auto* r) { (*r->mutable_sampling()->mutable_logit_bias())[1024] = 1.0f; },
       "sampling.logit_bias has token id 1024"},
      {"logit_bias negative id",
       [](auto* r) { (*r->mutable_sampling()->mutable_logit_bias())[-1] = 1.0f; },
       "sampling.logit_bias has token id -1"},
      {"logit_bias above 100",
       [](auto* r) { (*r->mutable_sampling()->mutable_logit_bias())[5] = 100.5f; },
       "sampling.logit_bias[5]"},
      {"logit_bias NaN", [=](auto* r) { (*r->mutable_sampling()->mutable_logit_bias())[7] = nan; },
       "sampling.logit_bias[7]"},
      {"301 logit_bias entries",
       [](auto* r) {
         for (int id = 0; id < 301; ++id) (*r->mutable_sampling()->mutable_logit_bias())[id] = 1;
       },
       "sampling.logit_bias has 301 entries"},
      {"logprobs above 20", [](auto* r) { r->set_logprobs(21); }, "logprobs"},
      {"logprobs negative", [](auto* r) { r->set_logprobs(-1); }, "logprobs"},
      {"prompt not UTF-8", [](auto* r) { r->set_prompt("ab\xC0\x80"); }, "prompt"},
      {"stop not UTF-8",
       [](auto* r) {
         r->add_stop("fine");
         r->add_stop("\xED\xA0\x80");  // a surrogate
       },
       "stop[1]"},
      {"17 stop strings",
       [](auto* r) {
         for (int i = 0; i < 17; ++i) r->add_stop("s");
       },
       "stop"},
      {"stop string of 257 bytes", [](auto* r) { r->add_stop(std::string(257, 's')); }, "stop[0]"},
      {"empty stop string", [](auto* r) { r->add_stop(""); }, "stop[0]"},
      {"stop_token_id outside vocab", [](auto* r) { r->add_stop_token_ids(5000); },
       "stop_token_ids[0]"},
      {"request_id too long", [](auto* r) { r->set_request_id(std::string(129, 'i')); },
       "request_id"},
      // Ids are logged: a newline would start a forged log line.
      {"request_id with a newline", [](auto* r) { r->set_request_id("a\nfinished request_id=x"); },
       "request_id"},
      {"request_id with a control byte", [](auto* r) { r->set_request_id("a\x7f"); }, "request_id"},
      {"request_id not ASCII", [](auto* r) { r->set_request_id("caf\xC3\xA9"); }, "request_id"},
  };
  ByteTokenizer tokenizer;
  for (const InvalidCase& c : cases) {
    v1::GenerateRequest request = Valid();
    c.mutate(&request);
    absl::StatusOr<engine::GenerationRequest> got = ToEngineRequest(request, Limits(), tokenizer);
    ASSERT_FALSE(got.ok()) << c.name;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_THAT(std::string(got.status().message()), ::testing::StartsWith(c.field))
        << c.name << ": " << got.status();
  }
}

// Issue 10: a 3.9 MB prompt was tokenized in full (1.5 M tokens, 564 ms) before the length
// check refused it. Text that cannot fit is now refused by its size, unread.
TEST(RequestCodecTest, OversizedPromptIsRefusedBeforeTokenizing) {
  ByteTokenizer tokenizer;  // one byte per token: 4 bytes per token is the bound
  EXPECT_EQ(MaxBytesPerToken(tokenizer), 4);
  RequestLimits limits = Limits();
  SetTextLimits(tokenizer, &limits);
  EXPECT_EQ(limits.max_prompt_bytes, 63 * 4);
  v1::GenerateRequest request = Valid();
  request.set_prompt(std::string(3900000, 'a'));
  absl::StatusOr<engine::GenerationRequest> got = ToEngineRequest(request, limits, tokenizer);
  ASSERT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(got.status().message()),
              ::testing::StartsWith("prompt is 3900000 bytes; text of more than 252 bytes"));
  EXPECT_EQ(tokenizer.encoded_bytes, 0);
  // At the bound the text is tokenized, and then refused for its token count.
  request.set_prompt(std::string(252, 'a'));
  got = ToEngineRequest(request, limits, tokenizer);
  ASSERT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("253 tokens"));
  EXPECT_EQ(tokenizer.encoded_bytes, 252);
}

// No valid request is larger than the bound SetTextLimits derives, so a bigger one can be
// refused before it is parsed.
TEST(RequestCodecTest, RequestSizeBoundCoversTheLargestValidRequest) {
  ByteTokenizer tokenizer;
  RequestLimits limits = Limits();
  SetTextLimits(tokenizer, &limits);
  v1::GenerateRequest largest;
  largest.set_request_id(std::string(limits.max_request_id_bytes, 'i'));
  largest.set_prompt(std::string(limits.max_prompt_bytes, 'a'));
  largest.set_max_tokens(limits.max_tokens);
  largest.set_logprobs(limits.max_logprobs);
  largest.mutable_sampling()->set_temperature(0.5f);
  largest.mutable_sampling()->set_seed(~uint64_t{0});
  largest.mutable_sampling()->set_top_k(std::numeric_limits<int32_t>::max());
  largest.mutable_sampling()->set_top_p(0.5f);
  largest.mutable_sampling()->set_min_p(0.5f);
  largest.mutable_sampling()->set_repetition_penalty(1.5f);
  largest.mutable_sampling()->set_frequency_penalty(-1.5f);
  largest.mutable_sampling()->set_presence_penalty(1.5f);
  largest.set_ignore_eos(true);
  largest.set_disable_speculation(true);
  largest.set_prompt_logprobs(true);
  // The largest valid logit_bias: the most entries, with the vocabulary's largest ids.
  for (int i = 0; i < limits.max_logit_bias; ++i) {
    (*largest.mutable_sampling()->mutable_logit_bias())[1023 - i] = -100.0f;
  }
  for (int i = 0; i < limits.max_stop_strings; ++i) {
    largest.add_stop(std::string(limits.max_stop_bytes, 's'));
  }
  for (int i = 0; i < limits.max_stop_token_ids; ++i) largest.add_stop_token_ids(1023);
  EXPECT_TRUE(CheckRequestBytes(largest.ByteSizeLong(), limits.max_generate_request_bytes).ok());
  v1::GenerateRequest ids = Valid();
  for (int i = 0; i < limits.max_prompt_tokens; ++i) {
    ids.mutable_prompt_token_ids()->add_ids(1023);
  }
  EXPECT_TRUE(CheckRequestBytes(ids.ByteSizeLong(), limits.max_generate_request_bytes).ok());
  v1::TokenizeRequest text;
  text.set_text(std::string(limits.max_tokenize_bytes, 't'));
  text.set_add_special_tokens(true);
  EXPECT_TRUE(CheckRequestBytes(text.ByteSizeLong(), limits.max_tokenize_request_bytes).ok());
  const absl::Status over = CheckRequestBytes(3900010, limits.max_generate_request_bytes);
  EXPECT_EQ(over.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(over.message()), ::testing::StartsWith("request is 3900010 bytes"));
}

TEST(RequestCodecTest, TokenizeCapsItsInputBeforeTokenizingAndItsOutput) {
  ByteTokenizer tokenizer;
  RequestLimits limits = Limits();
  SetTextLimits(tokenizer, &limits);  // 64 tokens of context: 256 bytes, 64 ids
  v1::TokenizeRequest request;
  request.set_text(std::string(3900000, 'a'));
  absl::StatusOr<v1::TokenizeResponse> got = TokenizeText(request, limits, tokenizer);
  ASSERT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(got.status().message()), ::testing::StartsWith("text is 3900000 bytes"));
  EXPECT_EQ(tokenizer.encoded_bytes, 0);
  request.set_text(std::string(65, 'a'));  // 65 ids: within the byte cap, over the id cap
  got = TokenizeText(request, limits, tokenizer);
  ASSERT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(got.status().message()), ::testing::StartsWith("text encodes to 65 tokens"));
  request.set_text("hi");
  request.set_add_special_tokens(true);
  got = TokenizeText(request, limits, tokenizer);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_THAT(got->token_ids(), ::testing::ElementsAre(1, 'h' + 3, 'i' + 3));
  EXPECT_EQ(got->pieces_size(), 3);
  EXPECT_EQ(got->text(), "hi");
}

TEST(RequestCodecTest, DetokenizeChecksTheIdsAndDecodesLikeTokenize) {
  ByteTokenizer tokenizer;
  RequestLimits limits = Limits();
  SetTextLimits(tokenizer, &limits);  // 64 ids at most
  const std::vector<int32_t> hi = {1, 'h' + 3, 'i' + 3};
  absl::StatusOr<std::string> text = DetokenizeIds(hi, limits, tokenizer);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "hi");
  text = DetokenizeIds({}, limits, tokenizer);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "");
  text = DetokenizeIds({5, 1024}, limits, tokenizer);
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(text.status().message(), "tokens[1] is 1024, outside the vocabulary [0, 1024)");
  text = DetokenizeIds({-1}, limits, tokenizer);
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  text = DetokenizeIds(std::vector<int32_t>(65, 5), limits, tokenizer);
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(text.status().message()), ::testing::StartsWith("tokens has 65 ids"));
}

TEST(RequestCodecTest, PrintableRequestIdsAreAccepted) {
  v1::GenerateRequest request = Valid();
  request.set_request_id("user 42: \"job\" #7 (retry) ~!");
  ByteTokenizer tokenizer;
  absl::StatusOr<engine::GenerationRequest> got = ToEngineRequest(request, Limits(), tokenizer);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->request_id, request.request_id());
}

TEST(RequestCodecTest, PromptPlusMaxTokensBeyondTheKvPoolIsRejected) {
  RequestLimits limits = Limits();
  limits.kv_capacity_tokens = 32;
  v1::GenerateRequest request = Valid();  // 6 prompt tokens
  request.set_max_tokens(27);             // 33 > 32
  ByteTokenizer tokenizer;
  absl::StatusOr<engine::GenerationRequest> got = ToEngineRequest(request, limits, tokenizer);
  ASSERT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("KV cache"));
  request.set_max_tokens(26);
  EXPECT_TRUE(ToEngineRequest(request, limits, tokenizer).ok());
}

TEST(RequestCodecTest, BoundaryValuesAreAccepted) {
  ByteTokenizer tokenizer;
  v1::GenerateRequest r;
  r.set_prompt(std::string(23, 'a'));  // 24 tokens with BOS
  r.set_max_tokens(40);                // 64 == context: fits exactly
  r.mutable_sampling()->set_temperature(0);
  r.mutable_sampling()->set_top_p(1);
  r.mutable_sampling()->set_min_p(1);
  r.mutable_sampling()->set_top_k(0);
  r.mutable_sampling()->set_frequency_penalty(-2);
  r.mutable_sampling()->set_presence_penalty(2);
  for (int id = 0; id < 300; ++id) {
    (*r.mutable_sampling()->mutable_logit_bias())[id * 3 + 1] = id % 2 == 0 ? -100 : 100;
  }
  r.set_logprobs(20);
  for (int i = 0; i < 16; ++i) r.add_stop(i == 0 ? std::string(256, 'z') : "\xF0\x9F\x98\x80");
  r.set_request_id(std::string(128, 'i'));
  absl::StatusOr<engine::GenerationRequest> got = ToEngineRequest(r, Limits(), tokenizer);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->prompt_ids.size(), 24u);
  EXPECT_EQ(got->max_tokens, 40);
  EXPECT_EQ(got->stop.size(), 16u);
  EXPECT_EQ(got->logprobs, 20);
  EXPECT_EQ(got->request_id, std::string(128, 'i'));
  EXPECT_EQ(got->sampling.logit_bias.size(), 300u);
}

TEST(RequestCodecTest, TextPromptIsTokenizedWithBos) {
  ByteTokenizer tokenizer;
  v1::GenerateRequest r = Valid();
  r.add_stop("\n\n");
  r.add_stop_token_ids(7);
  r.set_ignore_eos(true);
  absl::StatusOr<engine::GenerationRequest> got = ToEngineRequest(r, Limits(), tokenizer);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_THAT(got->prompt_ids, ::testing::ElementsAre(1, 'h' + 3, 'e' + 3, 'l' + 3, 'l' + 3,
                                                      'o' + 3));
  EXPECT_THAT(got->stop, ::testing::ElementsAre("\n\n"));
  EXPECT_THAT(got->stop_token_ids, ::testing::ElementsAre(7));
  EXPECT_TRUE(got->ignore_eos);
}

TEST(RequestCodecTest, DisableSpeculationIsCarriedFromGenerateAndChat) {
  ByteTokenizer tokenizer;
  v1::GenerateRequest r = Valid();
  absl::StatusOr<engine::GenerationRequest> got = ToEngineRequest(r, Limits(), tokenizer);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE(got->disable_speculation);  // speculation is on unless a request opts out
  EXPECT_FALSE(got->prompt_logprobs);
  r.set_disable_speculation(true);
  r.set_prompt_logprobs(true);
  got = ToEngineRequest(r, Limits(), tokenizer);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->disable_speculation);
  EXPECT_TRUE(got->prompt_logprobs);
  v1::ChatRequest chat;
  chat.set_disable_speculation(true);
  EXPECT_TRUE(ChatOptions(chat).disable_speculation());
}

TEST(RequestCodecTest, JsonObjectIsCarriedAndRefusesIgnoreEos) {
  ByteTokenizer tokenizer;
  v1::GenerateRequest r = Valid();
  r.set_ignore_eos(false);
  r.set_json_object(true);
  absl::StatusOr<engine::GenerationRequest> got = ToEngineRequest(r, Limits(), tokenizer);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->json_object);
  v1::ChatRequest chat;
  chat.set_json_object(true);
  EXPECT_TRUE(ChatOptions(chat).json_object());
  r.set_ignore_eos(true);
  got = ToEngineRequest(r, Limits(), tokenizer);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(got.status().message(), ::testing::HasSubstr("json_object"));
}

TEST(RequestCodecTest, JsonSchemaIsCompiledIntoJsonModeOrRefusedNamingTheKeyword) {
  ByteTokenizer tokenizer;
  v1::GenerateRequest r = Valid();
  r.set_ignore_eos(false);
  r.set_json_schema(R"({"type": "object", "properties": {"n": {"type": "integer"}}})");
  absl::StatusOr<engine::GenerationRequest> got = ToEngineRequest(r, Limits(), tokenizer);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->json_object);  // a schema implies JSON mode
  ASSERT_NE(got->json_schema, nullptr);
  const engine::JsonSchema::Node& root = got->json_schema->node(got->json_schema->root());
  const int32_t object = root.by_type[engine::JsonSchema::kObject];
  ASSERT_GE(object, 0);
  ASSERT_EQ(got->json_schema->node(object).properties.size(), 1u);
  EXPECT_EQ(got->json_schema->node(object).properties[0].key, "n");
  v1::ChatRequest chat;
  chat.set_json_schema(r.json_schema());
  EXPECT_EQ(ChatOptions(chat).json_schema(), r.json_schema());

  r.set_json_schema(R"({"type": "object", "properties": {"n": {"minimum": 1}}})");
  got = ToEngineRequest(r, Limits(), tokenizer);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(got.status().message(),
            "json_schema at \"/properties/n\": \"minimum\" is not supported");
  r.set_json_schema(R"({"type": "object"})");
  r.set_ignore_eos(true);
  got = ToEngineRequest(r, Limits(), tokenizer);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(got.status().message(), ::testing::HasSubstr("json_schema"));
}

TEST(RequestCodecTest, PromptIdsArePassedThroughUnchanged) {
  ByteTokenizer tokenizer;
  v1::GenerateRequest r;
  r.set_max_tokens(3);
  for (int id : {1, 500, 1023}) r.mutable_prompt_token_ids()->add_ids(id);
  absl::StatusOr<engine::GenerationRequest> got = ToEngineRequest(r, Limits(), tokenizer);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_THAT(got->prompt_ids, ::testing::ElementsAre(1, 500, 1023));
}

TEST(RequestCodecTest, SamplingDefaults) {
  v1::GenerateRequest r = Valid();
  // No sampling message: greedy.
  engine::SamplingParams p = ToEngineSampling(r);
  EXPECT_EQ(p.temperature, 0.0f);
  EXPECT_EQ(p.top_p, 1.0f);
  EXPECT_EQ(p.repetition_penalty, 1.0f);
  EXPECT_EQ(p.top_k, 0);
  // Zero top_p / repetition_penalty mean 1; everything else is copied.
  r.mutable_sampling()->set_temperature(0.8f);
  r.mutable_sampling()->set_seed(42);
  r.mutable_sampling()->set_top_k(40);
  r.mutable_sampling()->set_min_p(0.05f);
  p = ToEngineSampling(r);
  EXPECT_EQ(p.temperature, 0.8f);
  EXPECT_EQ(p.top_p, 1.0f);
  EXPECT_EQ(p.repetition_penalty, 1.0f);
  EXPECT_EQ(p.seed, 42u);
  EXPECT_EQ(p.top_k, 40);
  EXPECT_EQ(p.min_p, 0.05f);
  EXPECT_EQ(p.frequency_penalty, 0.0f);
  EXPECT_EQ(p.presence_penalty, 0.0f);
  EXPECT_TRUE(p.logit_bias.empty());
  r.mutable_sampling()->set_top_p(0.9f);
  r.mutable_sampling()->set_repetition_penalty(1.3f);
  r.mutable_sampling()->set_frequency_penalty(0.5f);
  r.mutable_sampling()->set_presence_penalty(-1.5f);
  (*r.mutable_sampling()->mutable_logit_bias())[9] = -100.0f;
  (*r.mutable_sampling()->mutable_logit_bias())[3] = 2.5f;
  p = ToEngineSampling(r);
  EXPECT_EQ(p.top_p, 0.9f);
  EXPECT_EQ(p.repetition_penalty, 1.3f);
  EXPECT_EQ(p.frequency_penalty, 0.5f);
  EXPECT_EQ(p.presence_penalty, -1.5f);
  std::map<engine::TokenId, float> bias;
  for (const engine::LogitBias& entry : p.logit_bias) bias[entry.id] += entry.bias;
  EXPECT_THAT(bias, ::testing::ElementsAre(::testing::Pair(3, 2.5f), ::testing::Pair(9, -100.0f)));
}

TEST(Utf8Test, FirstInvalidByte) {
  EXPECT_EQ(FirstInvalidUtf8(""), -1);
  EXPECT_EQ(FirstInvalidUtf8("plain ascii"), -1);
  EXPECT_EQ(FirstInvalidUtf8("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"), -1);
  EXPECT_EQ(FirstInvalidUtf8("\xF4\x8F\xBF\xBF"), -1);  // U+10FFFF
  EXPECT_EQ(FirstInvalidUtf8("ab\xC0\x80"), 2);          // overlong NUL
  EXPECT_EQ(FirstInvalidUtf8("\xE0\x80\x80"), 0);        // overlong 3-byte
  EXPECT_EQ(FirstInvalidUtf8("x\xED\xA0\x80"), 1);       // surrogate U+D800
  EXPECT_EQ(FirstInvalidUtf8("\xF4\x90\x80\x80"), 0);    // above U+10FFFF
  EXPECT_EQ(FirstInvalidUtf8("abc\xE2\x82"), 3);         // truncated
  EXPECT_EQ(FirstInvalidUtf8("\xFF"), 0);
  EXPECT_EQ(FirstInvalidUtf8("a\x80"), 1);               // stray continuation
}

TEST(Utf8Test, ToValidUtf8ReplacesOnlyBadBytes) {
  EXPECT_EQ(ToValidUtf8("a\xFF" "b"), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(ToValidUtf8("\xC3\xA9"), "\xC3\xA9");
  EXPECT_EQ(ToValidUtf8("\xF0\x9F"), "\xEF\xBF\xBD\xEF\xBF\xBD");
}

// Wire bytes of a length-delimited field.
std::string Field(int number, const std::string& bytes) {
  std::string out;
  out.push_back(static_cast<char>((number << 3) | 2));
  out.push_back(static_cast<char>(bytes.size()));  // < 128 in these tests
  return out + bytes;
}

grpc::ByteBuffer Buffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

TEST(ParseRequestTest, ParsesAValidMessage) {
  v1::GenerateRequest request = Valid();
  request.add_stop("x");
  v1::GenerateRequest parsed;
  ASSERT_TRUE(ParseRequest(Buffer(request.SerializeAsString()), &parsed).ok());
  EXPECT_EQ(parsed.prompt(), "hello");
  EXPECT_EQ(parsed.max_tokens(), 8);
  EXPECT_EQ(parsed.stop(0), "x");
}

TEST(ParseRequestTest, NonUtf8StringFieldIsInvalidArgumentNamingIt) {
  v1::GenerateRequest parsed;
  absl::Status s = ParseRequest(Buffer(Field(2, "ok\xFF")), &parsed);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), ::testing::StartsWith("prompt is not valid UTF-8 at byte 2"));

  s = ParseRequest(Buffer(Field(2, "fine") + Field(6, "a") + Field(6, "b\xC3")), &parsed);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), ::testing::StartsWith("stop[1] is not valid UTF-8"));

  v1::TokenizeRequest tokenize;
  s = ParseRequest(Buffer(Field(1, "\xE0\x80\x80")), &tokenize);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), ::testing::StartsWith("text is not valid UTF-8"));
}

TEST(ParseRequestTest, GarbageIsInvalidArgument) {
  v1::GenerateRequest parsed;
  const absl::Status s = ParseRequest(Buffer("\x12\x7F" "short"), &parsed);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("quill.v1.GenerateRequest"));
}

TEST(ResponseCodecTest, ChunksAppendIdsTextAndLogprobsOnRequest) {
  engine::TokenChunk chunk;
  chunk.text = "In the";
  engine::GeneratedToken a;
  a.id = 10;
  a.logprob = -0.5f;
  a.top_logprobs = {{10, -0.5f}, {11, -1.5f}};
  engine::GeneratedToken b;
  b.id = 12;
  b.logprob = -0.25f;
  b.top_logprobs = {{12, -0.25f}, {10, -2.0f}};
  chunk.tokens = {a, b};

  v1::GenerateResponse plain;
  AppendChunk(chunk, /*with_logprobs=*/false, &plain);
  AppendChunk(chunk, /*with_logprobs=*/false, &plain);
  EXPECT_THAT(plain.token_ids(), ::testing::ElementsAre(10, 12, 10, 12));
  EXPECT_EQ(plain.text(), "In theIn the");
  EXPECT_EQ(plain.logprobs_size(), 0);

  v1::GenerateResponse with;
  AppendChunk(chunk, /*with_logprobs=*/true, &with);
  ASSERT_EQ(with.logprobs_size(), 2);
  EXPECT_EQ(with.logprobs(1).token_id(), 12);
  EXPECT_EQ(with.logprobs(1).logprob(), -0.25f);
  ASSERT_EQ(with.logprobs(1).top_size(), 2);
  EXPECT_EQ(with.logprobs(1).top(1).token_id(), 10);
  EXPECT_EQ(with.logprobs(1).top(1).logprob(), -2.0f);
}

TEST(ResponseCodecTest, PromptLogprobsGoWhateverTheLogprobsOption) {
  engine::TokenChunk chunk;
  engine::GeneratedToken p;
  p.id = 5;
  p.logprob = -3.0f;
  p.top_logprobs = {{9, -0.1f}};
  chunk.prompt_logprobs = {p, p};
  chunk.prompt_logprobs[1].id = 6;
  v1::GenerateResponse response;
  AppendChunk(chunk, /*with_logprobs=*/false, &response);
  ASSERT_EQ(response.prompt_logprobs_size(), 2);
  EXPECT_EQ(response.prompt_logprobs(0).token_id(), 5);
  EXPECT_EQ(response.prompt_logprobs(1).token_id(), 6);
  EXPECT_EQ(response.prompt_logprobs(1).logprob(), -3.0f);
  ASSERT_EQ(response.prompt_logprobs(1).top_size(), 1);
  EXPECT_EQ(response.prompt_logprobs(1).top(0).token_id(), 9);
  EXPECT_EQ(response.token_ids_size(), 0);
}

TEST(ResponseCodecTest, FinalFields) {
  engine::FinishInfo info;
  info.reason = engine::FinishReason::kEos;
  info.prompt_tokens = 7;
  info.completion_tokens = 3;
  info.cached_prompt_tokens = 4;
  info.timings.queue_wait = absl::Milliseconds(5);
  info.timings.time_to_first_token = absl::Milliseconds(20);
  info.timings.prefill = absl::Milliseconds(15);
  info.timings.decode = absl::Milliseconds(30);
  info.timings.total = absl::Milliseconds(50);
  v1::GenerateResponse r;
  SetFinalFields(info, &r);
  EXPECT_EQ(r.finish_reason(), v1::EOS);
  EXPECT_EQ(r.usage().prompt_tokens(), 7);
  EXPECT_EQ(r.usage().completion_tokens(), 3);
  EXPECT_EQ(r.usage().cached_prompt_tokens(), 4);
  EXPECT_DOUBLE_EQ(r.timings().queue_seconds(), 0.005);
  EXPECT_DOUBLE_EQ(r.timings().time_to_first_token_seconds(), 0.020);
  EXPECT_DOUBLE_EQ(r.timings().prefill_seconds(), 0.015);
  EXPECT_DOUBLE_EQ(r.timings().decode_seconds(), 0.030);
  EXPECT_DOUBLE_EQ(r.timings().total_seconds(), 0.050);
  EXPECT_EQ(ToProtoFinishReason(engine::FinishReason::kLength), v1::LENGTH);
  EXPECT_EQ(ToProtoFinishReason(engine::FinishReason::kStop), v1::STOP);
  EXPECT_EQ(ToProtoFinishReason(engine::FinishReason::kCancelled),
            v1::FINISH_REASON_UNSPECIFIED);
}

// ---------------------------------------------------------------------------------------
// Chat

engine::chat::ChatPrompter Prompter(const engine::Tokenizer& tokenizer, const char* source) {
  absl::StatusOr<engine::chat::ChatTemplate> tmpl = engine::chat::ChatTemplate::Parse(source);
  EXPECT_TRUE(tmpl.ok()) << tmpl.status();
  return engine::chat::ChatPrompter(tokenizer, *std::move(tmpl));
}

std::vector<engine::TokenId> BytesWithBos(absl::string_view text) {
  std::vector<engine::TokenId> ids = {1};
  for (unsigned char c : text) ids.push_back(c + 3);
  return ids;
}

TEST(ChatCodecTest, MessagesReachTheTemplateWithEveryFieldInTheClientsOrder) {
  ByteTokenizer tokenizer;
  const auto prompter = Prompter(tokenizer, "{% for m in messages %}{{ m | tojson }}{% endfor %}");
  const auto messages =
      nlohmann::ordered_json::parse(R"([{"content": "c", "role": "user", "x": 1}])");
  v1::GenerateRequest options;
  options.set_max_tokens(3);
  absl::StatusOr<engine::GenerationRequest> got =
      ToEngineChatRequest(messages, options, Limits(), prompter);
  ASSERT_TRUE(got.ok()) << got.status();
  // Jinja's tojson separators (Python json.dumps defaults), keys as sent.
  EXPECT_EQ(got->prompt_ids, BytesWithBos(R"({"content": "c", "role": "user", "x": 1})"));
  EXPECT_EQ(got->max_tokens, 3);
}

TEST(ChatCodecTest, MaxTokensZeroIsWhatTheContextHasLeft) {
  ByteTokenizer tokenizer;
  const auto prompter = Prompter(tokenizer, "{{ messages[0].content }}");
  v1::ChatRequest request;
  v1::ChatMessage* m = request.add_messages();
  m->set_role("user");
  m->set_content("abc");  // BOS + 3 = 4 tokens of the 64-token context
  absl::StatusOr<engine::GenerationRequest> got = ToEngineChatRequest(request, Limits(), prompter);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->prompt_ids, BytesWithBos("abc"));
  EXPECT_EQ(got->max_tokens, 40);        // limits.max_tokens
  m->set_content(std::string(30, 'a'));  // 31 tokens: 33 left
  got = ToEngineChatRequest(request, Limits(), prompter);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->max_tokens, 33);
  m->set_content(std::string(63, 'a'));  // 64 tokens: over max_prompt_tokens
  got = ToEngineChatRequest(request, Limits(), prompter);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(got.status().message()), ::testing::StartsWith("messages"));
}

TEST(ChatCodecTest, MessagesAreBoundedAndShaped) {
  ByteTokenizer tokenizer;
  const auto prompter = Prompter(tokenizer, "x");
  RequestLimits limits = Limits();
  limits.max_chat_messages = 2;
  limits.max_chat_content_bytes = 10;
  v1::GenerateRequest options;
  const struct {
    const char* messages;
    const char* field;
  } cases[] = {
      {R"([])", "messages is empty"},
      {R"({"role": "user"})", "messages must be an array"},
      {R"([{"role":"u"},{"role":"u"},{"role":"u"}])", "messages has 3 messages"},
      {R"([{"role":"user","content":"0123456789"}])", "messages hold 14 bytes"},
      {R"(["hi"])", "messages[0] must be an object"},
      {R"([{"content":"x"}])", "messages[0].role"},
      {R"([{"role":""}])", "messages[0].role"},
      {R"([{"role":7}])", "messages[0].role"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<engine::GenerationRequest> got =
        ToEngineChatRequest(nlohmann::ordered_json::parse(c.messages), options, limits, prompter);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << c.messages;
    EXPECT_THAT(std::string(got.status().message()), ::testing::StartsWith(c.field)) << c.messages;
  }
}

// A template that lists the tools and writes calls as Hermes does (so "auto" can read them).
constexpr char kToolsTemplate[] =
    "{% for t in tools or [] %}[{{ t.function.name }}:{{ t.function.description }}:"
    "{{ t.function.parameters | tojson }}]{% endfor %}{% for m in messages %}<{{ m.role }}>"
    "{{ m.content }}{% for c in m.tool_calls or [] %}<tool_call>{\"name\": "
    "\"{{ c.function.name }}\", \"arguments\": {{ c.function.arguments | tojson }}}"
    "</tool_call>{% endfor %}{% if m.tool_call_id %}#{{ m.tool_call_id }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}";

// Room for the tools' prompt.
RequestLimits ToolsLimits() {
  RequestLimits limits = Limits();
  limits.context_length = 512;
  limits.max_prompt_tokens = 511;
  return limits;
}

v1::ChatRequest ToolsChat() {
  v1::ChatRequest request;
  v1::ChatMessage* user = request.add_messages();
  user->set_role("user");
  user->set_content("w?");
  v1::Tool* tool = request.add_tools();
  tool->set_name("w");
  tool->set_description("d");
  tool->set_parameters_json(R"({"type": "object", "properties": {"c": {"type": "string"}}})");
  request.set_max_tokens(4);
  return request;
}

TEST(ChatCodecTest, ToolsAndEarlierCallsReachTheTemplate) {
  ByteTokenizer tokenizer;
  const auto prompter = Prompter(tokenizer, kToolsTemplate);
  ASSERT_EQ(prompter.tool_call_syntax(), engine::chat::ToolCallSyntax::kHermes);
  v1::ChatRequest request = ToolsChat();
  v1::ChatMessage* assistant = request.add_messages();
  assistant->set_role("assistant");
  v1::ToolCall* call = assistant->add_tool_calls();
  call->set_id("call_1");
  call->set_name("w");
  call->set_arguments_json(R"({"c":"Oslo"})");
  v1::ChatMessage* result = request.add_messages();
  result->set_role("tool");
  result->set_tool_call_id("call_1");
  result->set_content("cold");
  absl::StatusOr<engine::GenerationRequest> got =
      ToEngineChatRequest(request, ToolsLimits(), prompter);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->prompt_ids,
            BytesWithBos(R"([w:d:{"type": "object", "properties": {"c": {"type": "string"}}}])"
                         R"(<user>w?<assistant><tool_call>{"name": "w", "arguments": )"
                         R"({"c": "Oslo"}}</tool_call><tool>cold#call_1<assistant>)"));
  EXPECT_FALSE(got->json_object);  // "auto": free text

  // Forced: the call's schema keeps the answer.
  request.set_tool_choice("w");
  got = ToEngineChatRequest(request, ToolsLimits(), prompter);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->json_object);
  ASSERT_NE(got->json_schema, nullptr);
  absl::StatusOr<ToolRequest> tools = ChatTools(request);
  ASSERT_TRUE(tools.ok()) << tools.status();
  EXPECT_EQ(ReadingOf(*tools, engine::chat::ToolCallSyntax::kHermes).syntax,
            engine::chat::ToolCallSyntax::kJsonObject);
  request.set_tool_choice("");
  tools = ChatTools(request);
  ASSERT_TRUE(tools.ok()) << tools.status();
  EXPECT_EQ(ReadingOf(*tools, engine::chat::ToolCallSyntax::kHermes).syntax,
            engine::chat::ToolCallSyntax::kHermes);
  EXPECT_EQ(ReadingOf(*tools, engine::chat::ToolCallSyntax::kHermes).names,
            std::vector<std::string>({"w"}));
  request.set_tool_choice("none");
  tools = ChatTools(request);
  ASSERT_TRUE(tools.ok()) << tools.status();
  EXPECT_EQ(ReadingOf(*tools, engine::chat::ToolCallSyntax::kHermes).syntax,
            engine::chat::ToolCallSyntax::kNone);
}

// chat_template_kwargs_json: more variables beside the tools; refused when it is not a
// JSON object or sets what the request and the model set.
TEST(ChatCodecTest, TemplateKwargsReachTheTemplate) {
  ByteTokenizer tokenizer;
  const auto prompter = Prompter(
      tokenizer,
      "{% for m in messages %}{{ m.content }}{% endfor %}{% if tools %}+tools{% endif %}"
      "{% if enable_thinking is defined and not enable_thinking %}<think></think>{% endif %}");
  v1::ChatRequest request = ToolsChat();
  request.set_tool_choice("none");  // this template writes no calls
  request.set_chat_template_kwargs_json(R"({"enable_thinking": false})");
  absl::StatusOr<engine::GenerationRequest> got =
      ToEngineChatRequest(request, ToolsLimits(), prompter);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->prompt_ids, BytesWithBos("w?+tools<think></think>"));
  request.set_chat_template_kwargs_json(R"({"enable_thinking": true})");
  got = ToEngineChatRequest(request, ToolsLimits(), prompter);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->prompt_ids, BytesWithBos("w?+tools"));
  for (const auto& [kwargs, message] : std::vector<std::pair<std::string, std::string>>{
           {"{", "chat_template_kwargs_json is not JSON"},
           {"[1]", "chat_template_kwargs_json must be an object"},
           {R"({"messages": []})", "chat_template_kwargs_json cannot set \"messages\""},
           {R"({"tools": null})", "chat_template_kwargs_json cannot set \"tools\""},
           {R"({"bos_token": "x"})", "chat_template_kwargs_json cannot set \"bos_token\""}}) {
    request.set_chat_template_kwargs_json(kwargs);
    got = ToEngineChatRequest(request, ToolsLimits(), prompter);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << kwargs;
    EXPECT_THAT(got.status().message(), HasSubstr(message)) << kwargs;
  }
}

TEST(ChatCodecTest, BadToolsAreInvalidArgumentNamingTheField) {
  ByteTokenizer tokenizer;
  const auto hermes = Prompter(tokenizer, kToolsTemplate);
  const auto plain = Prompter(tokenizer, "{% for m in messages %}{{ m.content }}{% endfor %}");
  ASSERT_EQ(plain.tool_call_syntax(), engine::chat::ToolCallSyntax::kNone);
  const struct {
    std::function<void(v1::ChatRequest*)> change;
    const char* message;
  } cases[] = {
      {[](v1::ChatRequest* r) { r->mutable_tools(0)->set_name("a b"); }, "tools[0] function.name"},
      {[](v1::ChatRequest* r) { r->mutable_tools(0)->set_parameters_json("{"); },
       "tools[0].parameters_json is not JSON"},
      {[](v1::ChatRequest* r) { r->mutable_tools(0)->set_parameters_json(R"({"minLength": 1})"); },
       "tools[0] function.parameters"},
      {[](v1::ChatRequest* r) { r->mutable_tools(0)->set_description("\xff"); },
       "tools[0].description is not valid UTF-8"},
      {[](v1::ChatRequest* r) { r->set_tool_choice("x"); }, "tool_choice names \"x\""},
      {[](v1::ChatRequest* r) {
         r->set_tool_choice("required");
         r->set_json_object(true);
       },
       "tool_choice cannot force a call beside json_object"},
      {[](v1::ChatRequest* r) {
         r->set_tool_choice("w");
         r->set_ignore_eos(true);
       },
       "tool_choice cannot force a call beside ignore_eos"},
      {[](v1::ChatRequest* r) {
         r->clear_tools();
         r->set_tool_choice("required");
       },
       "tool_choice \"required\" needs tools"},
      {[](v1::ChatRequest* r) {
         r->mutable_messages(0)->add_tool_calls()->set_arguments_json("\xfe");
       },
       "messages[0].tool_calls[0].arguments_json is not valid UTF-8"},
  };
  for (const auto& c : cases) {
    v1::ChatRequest request = ToolsChat();
    c.change(&request);
    absl::Status got = ToEngineChatRequest(request, ToolsLimits(), hermes).status();
    EXPECT_EQ(got.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(std::string(got.message()), ::testing::StartsWith(c.message));
  }
  // "auto" (said or by default) needs a template whose calls are read; the others do not.
  for (const char* choice : {"", "auto"}) {
    v1::ChatRequest request = ToolsChat();
    request.set_tool_choice(choice);
    absl::Status got = ToEngineChatRequest(request, ToolsLimits(), plain).status();
    EXPECT_EQ(got.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(got.message()),
                ::testing::StartsWith("tool_choice \"auto\" needs a chat template"));
  }
  for (const char* choice : {"none", "required", "w"}) {
    v1::ChatRequest request = ToolsChat();
    request.set_tool_choice(choice);
    EXPECT_TRUE(ToEngineChatRequest(request, ToolsLimits(), plain).ok()) << choice;
  }
}

TEST(ChatCodecTest, SetToolCallsReadsTheAnswerOnlyWhenItIsCalls) {
  ToolCallReading reading;
  reading.syntax = engine::chat::ToolCallSyntax::kJsonObject;
  reading.names = {"w"};
  v1::GenerateResponse last;
  last.set_finish_reason(v1::EOS);
  SetToolCalls(reading, R"({"name": "w", "arguments": {"c": "x"}})", "r1", &last);
  ASSERT_EQ(last.tool_calls_size(), 1);
  EXPECT_EQ(last.tool_calls(0).id(), "call_r1");
  EXPECT_EQ(last.tool_calls(0).arguments_json(), R"({"c":"x"})");
  EXPECT_EQ(last.finish_reason(), v1::TOOL_CALLS);
  v1::GenerateResponse text;
  text.set_finish_reason(v1::LENGTH);
  SetToolCalls(reading, R"({"name": "w", "argu)", "r1", &text);
  EXPECT_EQ(text.tool_calls_size(), 0);
  EXPECT_EQ(text.finish_reason(), v1::LENGTH);
}

// A vocabulary in which "<think>" and "</think>" are one token each.
class ThinkTokenizer final : public ByteTokenizer {
 public:
  static constexpr engine::TokenId kOpen = 1000, kClose = 1001;
  absl::StatusOr<std::vector<engine::TokenId>> EncodeWithSpecialTokens(
      absl::string_view text, bool add_special,
      absl::Span<const engine::ByteRange> plain_ranges) const override {
    if (text == "<think>") return std::vector<engine::TokenId>{kOpen};
    if (text == "</think>") return std::vector<engine::TokenId>{kClose};
    return ByteTokenizer::EncodeWithSpecialTokens(text, add_special, plain_ranges);
  }
};

// What lets JSON mode keep a thought: a thinking template, and tags that are single tokens.
TEST(ChatCodecTest, AThinkingTemplatesTagsAreFoundWhenEachIsOneToken) {
  const std::string thinking = "{% for m in messages %}{{ m.content }}{% endfor %}<think>\n";
  const std::string plain = "{% for m in messages %}{{ m.content }}{% endfor %}";
  ThinkTokenizer think;
  ByteTokenizer bytes;
  const auto found = Prompter(think, thinking.c_str());
  ASSERT_TRUE(found.thinks());
  ASSERT_TRUE(found.thought_tags().has_value());
  EXPECT_EQ(found.thought_tags()->open, ThinkTokenizer::kOpen);
  EXPECT_EQ(found.thought_tags()->close, ThinkTokenizer::kClose);
  EXPECT_FALSE(Prompter(bytes, thinking.c_str()).thought_tags().has_value());  // 7 and 8 tokens
  EXPECT_FALSE(Prompter(think, plain.c_str()).thought_tags().has_value());     // does not think
}

// one_tool_call (OpenAI's parallel_tool_calls false): an answer's first call only.
TEST(ChatCodecTest, OneToolCallKeepsTheAnswersFirstCall) {
  const std::string answer = R"(<tool_call>{"name": "w", "arguments": {"c": "Oslo"}}</tool_call>)"
                             R"(<tool_call>{"name": "w", "arguments": {"c": "Rome"}}</tool_call>)";
  v1::ChatRequest request = ToolsChat();
  for (const bool one : {false, true}) {
    request.set_one_tool_call(one);
    absl::StatusOr<ToolRequest> tools = ChatTools(request);
    ASSERT_TRUE(tools.ok()) << tools.status();
    const ToolCallReading reading = ReadingOf(*tools, engine::chat::ToolCallSyntax::kHermes);
    EXPECT_EQ(reading.first_call_only, one);
    v1::GenerateResponse last;
    SetToolCalls(reading, answer, "r2", &last);
    ASSERT_EQ(last.tool_calls_size(), one ? 1 : 2);
    EXPECT_EQ(last.tool_calls(0).arguments_json(), R"({"c":"Oslo"})");
    EXPECT_EQ(last.finish_reason(), v1::TOOL_CALLS);
  }
}

TEST(ChatCodecTest, NoTemplateIsFailedPrecondition) {
  ByteTokenizer tokenizer;
  const engine::chat::ChatPrompter none =
      engine::chat::ChatPrompter::ForModel(tokenizer, std::nullopt, std::nullopt);
  v1::ChatRequest request;
  v1::ChatMessage* m = request.add_messages();
  m->set_role("user");
  m->set_content("hi");
  EXPECT_EQ(ToEngineChatRequest(request, Limits(), none).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // Tools ("auto" by default) too: no template is what is wrong.
  request.add_tools()->set_name("w");
  EXPECT_EQ(ToEngineChatRequest(request, Limits(), none).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // The request's own errors come first.
  m->set_role("");
  EXPECT_EQ(ToEngineChatRequest(request, Limits(), none).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace quill::server
