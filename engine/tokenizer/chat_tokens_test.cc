// What chat needs from the real vocabularies: special-token text in a rendered template
// becomes those tokens while message content stays plain text (EncodeWithSpecialTokens),
// the end-of-generation set, and the raw token texts. Ids of single tokens were looked up
// by text in the GGUF files with an independent script; the text between special tokens
// is checked against llama.cpp's vectors for that text.
#include <algorithm>
#include <fstream>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/vocab_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace quill::engine {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::Not;
using vocab_testing::EncodeOrDie;
using vocab_testing::EncodeSpecialOrDie;
using vocab_testing::LoadTokenizer;
using vocab_testing::ReadVectors;
using vocab_testing::SharedDir;
using vocab_testing::Vectors;

std::vector<TokenId> Concat(std::initializer_list<std::vector<TokenId>> parts) {
  std::vector<TokenId> all;
  for (const std::vector<TokenId>& part : parts) all.insert(all.end(), part.begin(), part.end());
  return all;
}

// The byte range of `part` inside `text` (its first occurrence at or after `from`).
ByteRange RangeOf(absl::string_view text, absl::string_view part, size_t from = 0) {
  const size_t begin = text.find(part, from);
  EXPECT_NE(begin, absl::string_view::npos) << part;
  return ByteRange{begin, begin + part.size()};
}

class ChatVocabTest : public ::testing::Test {
 protected:
  // Loads ../shared/vocab/<name> and its vectors; false (the test then skips) if absent.
  bool Load(const std::string& name) {
    path_ = absl::StrCat(SharedDir(), "/vocab/", name);
    std::ifstream probe(path_);
    if (SharedDir().empty() || !probe) return false;
    tokenizer_ = LoadTokenizer(path_);
    EXPECT_TRUE(ReadVectors(path_, &vectors_));
    return tokenizer_ != nullptr;
  }

  std::string path_;
  std::unique_ptr<Tokenizer> tokenizer_;
  Vectors vectors_;
};

constexpr TokenId kBeginOfText = 128000, kEndOfText = 128001, kStartHeader = 128006,
                  kEndHeader = 128007, kEotId = 128009;

TEST_F(ChatVocabTest, LlamaBpeHeaderAndTurn) {
  if (!Load("ggml-vocab-llama-bpe.gguf")) GTEST_SKIP() << "shared assets not found";
  const Tokenizer& t = *tokenizer_;
  // "user" 882, "\n\n" 271, "hi" 6151: the Llama 3 pattern splits "\n\nhi" at the letter.
  const std::string turn = "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>";
  EXPECT_THAT(EncodeSpecialOrDie(t, turn, false),
              ElementsAre(kStartHeader, 882, kEndHeader, 271, 6151, kEotId));
  EXPECT_THAT(EncodeSpecialOrDie(t, turn, true),
              ElementsAre(kBeginOfText, kStartHeader, 882, kEndHeader, 271, 6151, kEotId));
  EXPECT_THAT(EncodeSpecialOrDie(t, "<|begin_of_text|>" + turn, false),
              ElementsAre(kBeginOfText, kStartHeader, 882, kEndHeader, 271, 6151, kEotId));
  // Plain Encode keeps all of it as text.
  const std::vector<TokenId> plain = EncodeOrDie(t, turn, false);
  for (TokenId id : plain) EXPECT_FALSE(t.IsControl(id)) << id;
  EXPECT_EQ(t.Decode(plain), turn);
}

TEST_F(ChatVocabTest, LlamaBpeTextBetweenSpecialsIsTokenizedAsAWholeText) {
  if (!Load("ggml-vocab-llama-bpe.gguf")) GTEST_SKIP() << "shared assets not found";
  for (const char* a : {"Hello world", " Hello World!", "    Hello\n    Hello"}) {
    for (const char* b : {"\n\n", "3333333", "  Hello"}) {
      SCOPED_TRACE(absl::StrCat(a, "|", b));
      EXPECT_THAT(
          EncodeSpecialOrDie(*tokenizer_,
                             absl::StrCat("<|start_header_id|>", a, "<|end_header_id|>", b), false),
          ElementsAreArray(
              Concat({{kStartHeader}, vectors_.IdsOf(a), {kEndHeader}, vectors_.IdsOf(b)})));
    }
  }
}

TEST_F(ChatVocabTest, LlamaBpeContentRangesStayPlain) {
  if (!Load("ggml-vocab-llama-bpe.gguf")) GTEST_SKIP() << "shared assets not found";
  const Tokenizer& t = *tokenizer_;
  const std::string content = "say <|eot_id|> and <|end_of_text|> now";
  const std::string text = "<|start_header_id|>user<|end_header_id|>\n\n" + content + "<|eot_id|>";
  const std::vector<TokenId> ids = EncodeSpecialOrDie(t, text, false, {RangeOf(text, content)});
  ASSERT_GE(ids.size(), 5u);
  EXPECT_THAT(std::vector<TokenId>(ids.begin(), ids.begin() + 3),
              ElementsAre(kStartHeader, 882, kEndHeader));
  EXPECT_EQ(ids.back(), kEotId);
  const std::vector<TokenId> middle(ids.begin() + 3, ids.end() - 1);
  EXPECT_THAT(middle, Not(Contains(kEotId)));
  EXPECT_THAT(middle, Not(Contains(kEndOfText)));
  // Exactly what Encode makes of the text between the two recognized tokens.
  EXPECT_EQ(middle, EncodeOrDie(t, "\n\n" + content, false));
  EXPECT_EQ(t.Decode(middle), "\n\n" + content);
  // Without the range the content's control text is recognized.
  const std::vector<TokenId> unprotected = EncodeSpecialOrDie(t, text, false);
  EXPECT_EQ(std::count(unprotected.begin(), unprotected.end(), kEotId), 2);
  EXPECT_THAT(unprotected, Contains(kEndOfText));
  // A range touching any byte of a token's text keeps that whole token plain.
  const std::vector<TokenId> partial =
      EncodeSpecialOrDie(t, "ab<|eot_id|>", false, {ByteRange{11, 12}});
  EXPECT_THAT(partial, Not(Contains(kEotId)));
  EXPECT_THAT(EncodeSpecialOrDie(t, "ab<|eot_id|>", false, {ByteRange{0, 2}}), Contains(kEotId));
}

TEST_F(ChatVocabTest, BadRangesAreInvalidArgument) {
  if (!Load("ggml-vocab-llama-bpe.gguf")) GTEST_SKIP() << "shared assets not found";
  for (const ByteRange& bad : {ByteRange{3, 2}, ByteRange{0, 6}, ByteRange{7, 9}}) {
    const auto ids = tokenizer_->EncodeWithSpecialTokens("hello", false, {bad});
    EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(ids.status().message()), HasSubstr("5-byte text"));
  }
  EXPECT_EQ(tokenizer_->EncodeWithSpecialTokens("a\xFF", false, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(tokenizer_->EncodeWithSpecialTokens("hello", false, {ByteRange{5, 5}}).ok());
}

TEST_F(ChatVocabTest, Qwen2ImStartImEnd) {
  if (!Load("ggml-vocab-qwen2.gguf")) GTEST_SKIP() << "shared assets not found";
  const Tokenizer& t = *tokenizer_;
  constexpr TokenId kImStart = 151644, kImEnd = 151645;
  // "user" 872, "\n" 198, "hi" 6023; Qwen2 adds no BOS.
  const std::string turn = "<|im_start|>user\nhi<|im_end|>";
  EXPECT_THAT(EncodeSpecialOrDie(t, turn, true), ElementsAre(kImStart, 872, 198, 6023, kImEnd));
  EXPECT_THAT(EncodeSpecialOrDie(t, "<|im_start|>Hello world<|im_end|>\n\n", false),
              ElementsAreArray(Concat(
                  {{kImStart}, vectors_.IdsOf("Hello world"), {kImEnd}, vectors_.IdsOf("\n\n")})));
  const std::string content = "<|im_end|>";
  const std::string text = "<|im_start|>user\n" + content + "<|im_end|>";
  const std::vector<TokenId> ids = EncodeSpecialOrDie(t, text, false, {RangeOf(text, content)});
  EXPECT_EQ(std::count(ids.begin(), ids.end(), kImEnd), 1);
  EXPECT_EQ(ids.back(), kImEnd);
  // User-defined tokens (Qwen2's <think>) are found by plain Encode too, and in content.
  EXPECT_THAT(EncodeOrDie(t, "<think>", false), ElementsAre(151667));
  EXPECT_THAT(EncodeSpecialOrDie(t, "<think>", false, {ByteRange{0, 7}}), ElementsAre(151667));
}

TEST_F(ChatVocabTest, LlamaSpmSpacePrefixFollowsEverySpecialToken) {
  if (!Load("ggml-vocab-llama-spm.gguf")) GTEST_SKIP() << "shared assets not found";
  const Tokenizer& t = *tokenizer_;
  // llama.cpp prefixes a space to the text after each special token, so each piece is
  // tokenized as the whole-text vector (which has the prefix) of that piece.
  EXPECT_THAT(EncodeSpecialOrDie(t, "<s>Hello world</s> Hello World!", false),
              ElementsAreArray(Concat(
                  {{1}, vectors_.IdsOf("Hello world"), {2}, vectors_.IdsOf(" Hello World!")})));
  EXPECT_THAT(EncodeSpecialOrDie(t, "Hello world</s>", true),
              ElementsAreArray(Concat({{1}, vectors_.IdsOf("Hello world"), {2}})));
  // In a plain range "<s>" is text: ▁< s > around, never id 1.
  const std::string text = "<s>Hello</s>";
  const std::vector<TokenId> ids = EncodeSpecialOrDie(t, text, false, {ByteRange{0, 3}});
  EXPECT_THAT(ids, Not(Contains(1)));
  EXPECT_EQ(ids.back(), 2);
  EXPECT_EQ(t.Decode(ids, /*strip_leading_space=*/true), "<s>Hello");
  // <unk> is recognized as the unknown token only when parsing special tokens.
  EXPECT_THAT(EncodeSpecialOrDie(t, "<unk>", false), ElementsAre(0));
  EXPECT_THAT(EncodeOrDie(t, "<unk>", false), Not(Contains(0)));
}

// The end-of-generation sets llama.cpp derives for each vocabulary.
TEST(EndOfGenerationTest, EveryVocabulary) {
  struct Case {
    const char* file;
    std::vector<TokenId> ids;
  };
  const std::vector<Case> cases = {
      {"ggml-vocab-llama-bpe.gguf", {kEndOfText, kEotId}},  // EOS <|end_of_text|>, <|eot_id|>
      // EOS <|im_end|>, <|endoftext|>, and the FIM pad / repo name / file separator.
      {"ggml-vocab-qwen2.gguf", {151643, 151645, 151662, 151663, 151664}},
      {"ggml-vocab-llama-spm.gguf", {2}},
      {"ggml-vocab-gpt-2.gguf", {50256}},
      {"ggml-vocab-deepseek-llm.gguf", {100001}},  // EOS <｜end▁of▁sentence｜>, also EOT
      {"ggml-vocab-falcon.gguf", {11}},
      {"ggml-vocab-refact.gguf", {0, 4, 18}},  // <|endoftext|>, <fim_pad>, <reponame>
  };
  for (const Case& c : cases) {
    const std::string path = absl::StrCat(SharedDir(), "/vocab/", c.file);
    SKIP_IF_NO_SHARED(path);
    auto t = LoadTokenizer(path);
    ASSERT_NE(t, nullptr) << c.file;
    EXPECT_THAT(t->end_of_generation_ids(), ElementsAreArray(c.ids)) << c.file;
    for (TokenId id : c.ids) {
      EXPECT_TRUE(t->IsEndOfGeneration(id)) << c.file << " " << id;
      EXPECT_TRUE(t->IsControl(id)) << c.file << " " << id;
    }
    EXPECT_FALSE(t->IsEndOfGeneration(c.ids.front() - 1));
    EXPECT_FALSE(t->IsEndOfGeneration(-1));
  }
}

TEST(TokenTextTest, RawVocabularyText) {
  const std::string dir = SharedDir() + "/vocab/";
  SKIP_IF_NO_SHARED(dir + "ggml-vocab-llama-bpe.gguf");
  auto bpe = LoadTokenizer(dir + "ggml-vocab-llama-bpe.gguf");
  ASSERT_NE(bpe, nullptr);
  EXPECT_EQ(bpe->token_text(kBeginOfText), "<|begin_of_text|>");
  EXPECT_EQ(bpe->token_text(kEotId), "<|eot_id|>");
  EXPECT_EQ(bpe->token_text(271), "\xC4\x8A\xC4\x8A");  // ĊĊ: "\n\n" in the byte alphabet
  EXPECT_EQ(bpe->token_text(-1), "");
  EXPECT_EQ(bpe->token_text(bpe->vocab_size()), "");
  auto spm = LoadTokenizer(dir + "ggml-vocab-llama-spm.gguf");
  ASSERT_NE(spm, nullptr);
  EXPECT_EQ(spm->token_text(1), "<s>");
  EXPECT_EQ(spm->token_text(2), "</s>");
  EXPECT_EQ(spm->token_text(15043), "\xE2\x96\x81Hello");  // ▁Hello
}

}  // namespace
}  // namespace quill::engine
