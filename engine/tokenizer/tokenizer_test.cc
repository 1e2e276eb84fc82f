// The tokenizers read from real GGUF files: every vector in /work/shared/vocab, every
// golden prompt in /work/shared/golden, round trips, streaming detokenization, and
// FromGguf's validation on small written fixtures.
#include "engine/tokenizer/tokenizer.h"

#include <dirent.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/base/utf8.h"
#include "engine/gguf/gguf_file.h"
#include "engine/gguf/gguf_writer.h"
#include "engine/tokenizer/vocab_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/test_env.h"

namespace quill::engine {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::Not;

using vocab_testing::EncodeOrDie;
using vocab_testing::LoadTokenizer;
using vocab_testing::ReadFile;
using vocab_testing::ReadVectors;
using vocab_testing::SharedDir;
using vocab_testing::Vectors;

// --- The llama.cpp tokenizer test vectors ---------------------------------------------

class VocabVectorsTest : public ::testing::TestWithParam<const char*> {};

TEST_P(VocabVectorsTest, EveryVectorMatches) {
  const std::string base = absl::StrCat(SharedDir(), "/vocab/", GetParam());
  SKIP_IF_NO_SHARED(base);
  auto tokenizer = LoadTokenizer(base);
  ASSERT_NE(tokenizer, nullptr);

  Vectors vectors;
  ASSERT_TRUE(ReadVectors(base, &vectors));
  ASSERT_EQ(vectors.texts.size(), 46u);
  const std::vector<std::string>& texts = vectors.texts;

  for (size_t i = 0; i < texts.size(); ++i) {
    const std::vector<TokenId>& expected = vectors.ids[i];
    EXPECT_THAT(EncodeOrDie(*tokenizer, texts[i], /*add_special=*/false),
                ElementsAreArray(expected))
        << "vector " << i << " text \"" << texts[i] << "\"";
    // And back: the reference ids decode to the text.
    EXPECT_EQ(tokenizer->Decode(expected, /*strip_leading_space=*/true), texts[i])
        << "vector " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabs, VocabVectorsTest,
                         ::testing::Values("ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf",
                                           "ggml-vocab-llama-bpe.gguf", "ggml-vocab-qwen2.gguf",
                                           "ggml-vocab-deepseek-llm.gguf", "ggml-vocab-falcon.gguf",
                                           "ggml-vocab-refact.gguf"));

// --- Golden prompts --------------------------------------------------------------------

TEST(GoldenPromptsTest, PromptIdsMatchForEveryModel) {
  const std::string dir = SharedDir();
  SKIP_IF_NO_SHARED(dir + "/golden/kjv-1m.json");
  int cases = 0;
  for (const char* name : {"kjv-1m", "llama-2-tiny-random", "micro-random-gpt2vocab-f16",
                           "mini-random-bf16", "mini-random-q8_0"}) {
    std::string text;
    ASSERT_TRUE(ReadFile(absl::StrCat(dir, "/golden/", name, ".json"), &text)) << name;
    const nlohmann::json golden = nlohmann::json::parse(text);
    auto tokenizer =
        LoadTokenizer(absl::StrCat(dir, "/models/", golden.at("model").get<std::string>()));
    ASSERT_NE(tokenizer, nullptr) << name;
    for (const auto& c : golden.at("cases")) {
      const std::string prompt = c.at("prompt").get<std::string>();
      const std::vector<TokenId> expected = c.at("prompt_ids").get<std::vector<TokenId>>();
      EXPECT_THAT(EncodeOrDie(*tokenizer, prompt, /*add_special=*/true), ElementsAreArray(expected))
          << name << " prompt \"" << prompt << "\"";
      ++cases;
    }
  }
  EXPECT_EQ(cases, 28);
}

// Every model-family golden (../golden/families): prompt_ids come from llama.cpp's
// tokenizer on the model's own vocabulary (read from the model file; no weights loaded).
TEST(GoldenPromptsTest, FamilyPromptIdsMatch) {
  const std::string dir = SharedDir() + "/golden/families";
  SKIP_IF_NO_SHARED(dir + "/qwen2-tiny.json");
  std::vector<std::string> files;
  if (DIR* d = opendir(dir.c_str())) {
    while (const dirent* e = readdir(d)) {
      if (absl::EndsWith(e->d_name, ".json")) files.push_back(e->d_name);
    }
    closedir(d);
  }
  std::sort(files.begin(), files.end());
  for (const char* expected : {"gemma2-tiny.json", "gpt2-tiny.json", "llama3-tiny.json",
                               "qwen2-tiny.json", "tinyllama-256-Q4_K_M.json"}) {
    EXPECT_THAT(files, Contains(expected));
  }
  int cases = 0;
  for (const std::string& name : files) {
    std::string text;
    ASSERT_TRUE(ReadFile(absl::StrCat(dir, "/", name), &text)) << name;
    const nlohmann::json golden = nlohmann::json::parse(text);
    auto tokenizer =
        LoadTokenizer(absl::StrCat(SharedDir(), "/models/", golden.at("model").get<std::string>()));
    ASSERT_NE(tokenizer, nullptr) << name;
    for (const auto& c : golden.at("cases")) {
      const std::string prompt = c.at("prompt").get<std::string>();
      const std::vector<TokenId> expected = c.at("prompt_ids").get<std::vector<TokenId>>();
      EXPECT_THAT(EncodeOrDie(*tokenizer, prompt, /*add_special=*/true), ElementsAreArray(expected))
          << name << " prompt \"" << prompt << "\"";
      ++cases;
    }
  }
  EXPECT_GE(cases, 36);
}

// --- Round trips, detokenization, special text -----------------------------------------

class VocabTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    path_ = absl::StrCat(SharedDir(), "/vocab/", GetParam());
    std::ifstream probe(path_);
    if (SharedDir().empty() || !probe)
      GTEST_SKIP() << "shared assets not found at '" << path_ << "'";
    tokenizer_ = LoadTokenizer(path_);
    ASSERT_NE(tokenizer_, nullptr);
  }
  bool is_llama() const { return tokenizer_->model_name() == "llama"; }

  // Text -> ids -> text, through Decode and through the streaming detokenizer.
  void ExpectRoundTrip(const std::string& text) {
    const std::vector<TokenId> ids = EncodeOrDie(*tokenizer_, text, /*add_special=*/true);
    EXPECT_EQ(tokenizer_->Decode(ids, /*strip_leading_space=*/true), text);
    IncrementalDetokenizer detok(*tokenizer_, /*strip_leading_space=*/true);
    std::string streamed;
    for (TokenId id : ids) streamed += detok.Push(id);
    streamed += detok.Flush();
    EXPECT_EQ(streamed, text);
  }

  std::string path_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_P(VocabTest, RoundTripsVariedText) {
  for (const std::string text :
       {"Hello world", "  leading spaces and trailing   ", "ASCII: 0123456789 !@#$%^&*()",
        "caf\xC3\xA9 na\xC3\xAFve J\xC3\xA9rusalem \xC3\x84pfel",
        "\xE6\x88\x91\xE6\x83\xB3\xE5\x9C\xA8 apple \xE5\xB7\xA5\xE4\xBD\x9C",  // 我想在 apple 工作
        "\xF0\x9F\xA6\x99\xF0\x9F\x9A\x80 emoji "
        "\xF0\x9F\x98\xB6\xE2\x80\x8D\xF0\x9F\x8C\xAB\xEF\xB8\x8F",
        "tabs\tand\nnewlines\n\n\r\n", "\n", " ", "x",
        "\xD0\xBD\xD0\xB5\xD1\x89\xD0\xBE \xD0\xBD\xD0\xB0",  // нещо на
        "\xE1\x9E\x80\xE1\x9E\xB6\xE1\x9E\x93\xE1\x9F\x8B",   // Khmer
        "<s> </s> <unk> <|endoftext|> <0x41>"}) {
    SCOPED_TRACE(text);
    ExpectRoundTrip(text);
  }
}

TEST_P(VocabTest, ControlTokenTextIsNotSpecial) {
  const std::vector<TokenId> ids = EncodeOrDie(*tokenizer_, "<s></s><|endoftext|>", false);
  for (TokenId id : ids) EXPECT_FALSE(tokenizer_->IsControl(id)) << id;
  if (is_llama()) {
    EXPECT_THAT(ids, Not(Contains(1)));
    EXPECT_THAT(ids, Not(Contains(2)));
    const std::vector<TokenId> with_bos = EncodeOrDie(*tokenizer_, "<s>", true);
    ASSERT_FALSE(with_bos.empty());
    EXPECT_EQ(with_bos[0], 1);
    EXPECT_THAT(std::vector<TokenId>(with_bos.begin() + 1, with_bos.end()), Not(Contains(1)));
  } else {
    EXPECT_THAT(ids, Not(Contains(50256)));
  }
}

TEST_P(VocabTest, SpecialIdsAndFlags) {
  if (is_llama()) {
    EXPECT_EQ(tokenizer_->vocab_size(), 32000);
    EXPECT_EQ(tokenizer_->bos_id(), 1);
    EXPECT_EQ(tokenizer_->eos_id(), 2);
    EXPECT_TRUE(tokenizer_->add_bos());
    EXPECT_TRUE(tokenizer_->IsEndOfGeneration(2));
    EXPECT_TRUE(tokenizer_->IsControl(1));
    EXPECT_EQ(tokenizer_->TokenBytes(1), "");
    EXPECT_EQ(tokenizer_->TokenBytes(3 + 0x41), "A");    // <0x41>
    EXPECT_EQ(tokenizer_->TokenBytes(15043), " Hello");  // ▁Hello
  } else {
    EXPECT_EQ(tokenizer_->vocab_size(), 50257);
    EXPECT_EQ(tokenizer_->eos_id(), 50256);
    EXPECT_FALSE(tokenizer_->add_bos());
    EXPECT_TRUE(tokenizer_->IsEndOfGeneration(50256));
    EXPECT_EQ(tokenizer_->TokenBytes(50256), "");
    EXPECT_EQ(tokenizer_->TokenBytes(18435), " Hello");  // ĠHello
    EXPECT_EQ(tokenizer_->TokenBytes(198), "\n");        // Ċ
  }
  EXPECT_FALSE(tokenizer_->IsEndOfGeneration(100));
}

TEST_P(VocabTest, RejectsInvalidUtf8) {
  for (const std::string bad :
       {"abc\xFF", "\xC0\x80", "x\xED\xA0\x80", "\xF4\x90\x80\x80", "\xE2\x82"}) {
    const auto ids = tokenizer_->Encode(bad, true);
    EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_THAT(std::string(tokenizer_->Encode("abc\xFF", true).status().message()),
              HasSubstr("at byte 3"));
}

TEST_P(VocabTest, StreamsASplitEmojiOnlyWhenComplete) {
  // 🦙 is F0 9F A6 99; both vocabularies split it across several tokens (llama: byte
  // pieces <0xF0> <0x9F> <0xA6> <0x99>; gpt2: "Ġð\x9f" "¦" "\x99" in byte-level symbols).
  const std::vector<TokenId> ids = EncodeOrDie(*tokenizer_, " \xF0\x9F\xA6\x99", false);
  if (is_llama()) {
    ASSERT_THAT(ids, ElementsAre(259, 243, 162, 169, 156));  // "▁▁" then bytes
  } else {
    ASSERT_THAT(ids, ElementsAre(12520, 99, 247));
  }
  IncrementalDetokenizer detok(*tokenizer_);
  std::vector<std::string> chunks;
  for (TokenId id : ids) chunks.push_back(detok.Push(id));
  if (is_llama()) {
    EXPECT_THAT(chunks, ElementsAre("  ", "", "", "", "\xF0\x9F\xA6\x99"));
  } else {
    EXPECT_THAT(chunks, ElementsAre(" ", "", "\xF0\x9F\xA6\x99"));
  }
  EXPECT_EQ(detok.Flush(), "");
}

TEST_P(VocabTest, DetokenizerNeverEmitsInvalidUtf8) {
  // Random token sequences, including lone byte tokens and control tokens.
  std::mt19937 rng(1234);
  std::uniform_int_distribution<TokenId> any(0, tokenizer_->vocab_size() - 1);
  std::uniform_int_distribution<TokenId> low(0, 300);  // llama byte pieces live at 3..258
  for (int seq = 0; seq < 200; ++seq) {
    std::vector<TokenId> ids;
    for (int k = 0; k < 24; ++k) ids.push_back(k % 2 ? any(rng) : low(rng));
    IncrementalDetokenizer detok(*tokenizer_);
    std::string all;
    for (TokenId id : ids) {
      const std::string chunk = detok.Push(id);
      EXPECT_TRUE(IsValidUtf8(chunk)) << "token " << id;
      all += chunk;
    }
    const std::string tail = detok.Flush();
    EXPECT_TRUE(IsValidUtf8(tail));
    all += tail;
    EXPECT_EQ(all, tokenizer_->Decode(ids));
  }
}

TEST_P(VocabTest, LongPromptFinishes) {
  std::string text;
  const std::string block =
      "In the beginning God created the heaven and the earth. caf\xC3\xA9 \xE6\x88\x91\xE6\x83\xB3 "
      "\xF0\x9F\xA6\x99 12345   \n\t x=y+z; ";
  while (text.size() < 100 * 1024) text += block;
  text += std::string(5000, 'a');  // one long word (a single pre-tokenizer word for gpt2)
  // Its speed is quill-tokenizer-bench's business; here only the result.
  const std::vector<TokenId> ids = EncodeOrDie(*tokenizer_, text, /*add_special=*/false);
  EXPECT_GT(ids.size(), text.size() / 10);
  EXPECT_EQ(tokenizer_->Decode(ids, /*strip_leading_space=*/true), text);
}

INSTANTIATE_TEST_SUITE_P(Vocabs, VocabTest,
                         ::testing::Values("ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf"));

// Decode(Encode(x)) == x on every vocabulary, for text each can represent (Falcon has no
// tokens for most C0 control bytes, so none are used here).
TEST_P(VocabVectorsTest, RoundTrips) {
  const std::string path = absl::StrCat(SharedDir(), "/vocab/", GetParam());
  SKIP_IF_NO_SHARED(path);
  auto tokenizer = LoadTokenizer(path);
  ASSERT_NE(tokenizer, nullptr);
  std::string long_text;
  while (long_text.size() < 50 * 1024) {
    long_text +=
        "fn main() {\n    let x = 42; // caf\xC3\xA9 \xE6\x88\x91\xE6\x83\xB3\n}\n\n\t\t  ";
  }
  for (const std::string& text :
       {std::string("Hello world"), std::string("  leading spaces and trailing   "),
        std::string("ASCII: 0123456789 !@#$%^&*() don't I'LL"),
        std::string("caf\xC3\xA9 na\xC3\xAFve J\xC3\xA9rusalem \xC3\x84pfel"),
        std::string("\xE6\x88\x91\xE6\x83\xB3\xE5\x9C\xA8 apple \xE5\xB7\xA5\xE4\xBD\x9C"),
        std::string("\xF0\x9F\xA6\x99\xF0\x9F\x9A\x80 emoji \xF0\x9F\x98\xB6\xE2\x80\x8D"
                    "\xF0\x9F\x8C\xAB\xEF\xB8\x8F"),
        std::string("tabs\tand\nnewlines\n\n\r\n"), std::string("\n"), std::string(" "),
        std::string("<s> </s> <|endoftext|> <|im_end|> <|eot_id|> <0x41>"),
        std::string("\xE1\x9E\x80\xE1\x9E\xB6\xE1\x9E\x93\xE1\x9F\x8B 3333333 \xEF\xBD\x9E"),
        long_text}) {
    SCOPED_TRACE(text.substr(0, 40));
    const std::vector<TokenId> ids = EncodeOrDie(*tokenizer, text, /*add_special=*/true);
    EXPECT_EQ(tokenizer->Decode(ids, /*strip_leading_space=*/true), text);
  }
}

// --- SentencePiece flags on the real Llama 2 vocabulary -------------------------------

// A copy of ggml-vocab-llama-spm.gguf with some tokenizer.ggml.* flags changed, checked
// against llama.cpp's vectors for the original: with add_space_prefix false, " " + text
// must give the vector of text (the prefix is that one space); add_bos_token and
// add_eos_token only add ids 1 and 2 around it.
class SpmFlagsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = absl::StrCat(SharedDir(), "/vocab/ggml-vocab-llama-spm.gguf");
    std::ifstream probe(base_);
    if (SharedDir().empty() || !probe)
      GTEST_SKIP() << "shared assets not found at '" << base_ << "'";
    Vectors vectors;
    ASSERT_TRUE(ReadVectors(base_, &vectors));
    texts_ = vectors.texts;
    expected_ = vectors.ids;
  }

  // The vocabulary with `flags` (key suffix -> value) set.
  std::unique_ptr<Tokenizer> Variant(const std::vector<std::pair<std::string, bool>>& flags) {
    auto source = GgufFile::Open(base_);
    EXPECT_TRUE(source.ok()) << source.status();
    if (!source.ok()) return nullptr;
    GgufWriter w;
    EXPECT_TRUE(w.CopyKeys(**source, "tokenizer.").ok());
    for (const auto& [key, value] : flags) w.SetBool("tokenizer.ggml." + key, value);
    const std::string path =
        absl::StrCat(::testing::TempDir(), "/spm_flags_",
                     ::testing::UnitTest::GetInstance()->current_test_info()->name(), ".gguf");
    EXPECT_TRUE(w.WriteFile(path).ok());
    std::unique_ptr<Tokenizer> tokenizer = LoadTokenizer(path);
    std::remove(path.c_str());
    return tokenizer;
  }

  std::string base_;
  std::vector<std::string> texts_;
  std::vector<std::vector<TokenId>> expected_;
};

TEST_F(SpmFlagsTest, AddSpacePrefixFalse) {
  auto t = Variant({{"add_space_prefix", false}});
  ASSERT_NE(t, nullptr);
  EXPECT_FALSE(t->adds_space_prefix());
  for (size_t i = 0; i < texts_.size(); ++i) {
    if (texts_[i].empty()) continue;  // "" has no prefix to move
    EXPECT_THAT(EncodeOrDie(*t, " " + texts_[i], false), ElementsAreArray(expected_[i]))
        << "vector " << i << " text \"" << texts_[i] << "\"";
  }
  // "Hello" is then not "▁Hello" (15043), and nothing is stripped when decoding.
  const std::vector<TokenId> ids = EncodeOrDie(*t, "Hello world", true);
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids[0], 1);
  EXPECT_NE(ids[1], 15043);
  EXPECT_EQ(t->TokenBytes(ids[1]).front(), 'H');
  EXPECT_EQ(t->Decode(ids, /*strip_leading_space=*/true), "Hello world");
  EXPECT_EQ(t->Decode(EncodeOrDie(*t, " Hello", true), true), " Hello");
}

TEST_F(SpmFlagsTest, AddBosAndAddEos) {
  struct Case {
    bool add_bos, add_eos;
  };
  for (const Case c :
       {Case{false, true}, Case{true, true}, Case{false, false}, Case{true, false}}) {
    SCOPED_TRACE(absl::StrCat("add_bos ", c.add_bos, " add_eos ", c.add_eos));
    auto t = Variant({{"add_bos_token", c.add_bos}, {"add_eos_token", c.add_eos}});
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->add_bos(), c.add_bos);
    EXPECT_TRUE(t->adds_space_prefix());
    for (size_t i = 0; i < texts_.size(); ++i) {
      std::vector<TokenId> want;
      if (c.add_bos) want.push_back(1);
      want.insert(want.end(), expected_[i].begin(), expected_[i].end());
      if (c.add_eos) want.push_back(2);
      if (want.empty()) want.push_back(1);  // a prompt is never empty
      EXPECT_THAT(EncodeOrDie(*t, texts_[i], true), ElementsAreArray(want)) << "vector " << i;
      EXPECT_THAT(EncodeOrDie(*t, texts_[i], false), ElementsAreArray(expected_[i]));
    }
  }
}

// Llama 2's pieces never continue past a word start, so its text is merged one word at a
// time. A copy with one unreachable piece ("\x01▁", which no text here contains) that
// breaks that rule is merged as one whole text, and must give the same ids.
TEST_F(SpmFlagsTest, MergingWordByWordEqualsMergingTheWholeText) {
  auto source = GgufFile::Open(base_);
  ASSERT_TRUE(source.ok()) << source.status();
  GgufWriter w;
  ASSERT_TRUE(w.CopyKeys(**source, "tokenizer.").ok());
  std::vector<std::string> tokens = *(*source)->GetStringArray("tokenizer.ggml.tokens");
  std::vector<float> scores = *(*source)->GetFloatArray("tokenizer.ggml.scores");
  std::vector<int32_t> types = *(*source)->GetInt32Array("tokenizer.ggml.token_type");
  tokens.push_back("\x01\xE2\x96\x81");
  scores.push_back(-1e9f);
  types.push_back(1);
  w.SetStringArray("tokenizer.ggml.tokens", tokens);
  w.SetFloat32Array("tokenizer.ggml.scores", scores);
  w.SetInt32Array("tokenizer.ggml.token_type", types);
  const std::string path = absl::StrCat(::testing::TempDir(), "/spm_whole_text.gguf");
  ASSERT_TRUE(w.WriteFile(path).ok());
  auto whole = LoadTokenizer(path);
  std::remove(path.c_str());
  auto words = LoadTokenizer(base_);
  ASSERT_NE(whole, nullptr);
  ASSERT_NE(words, nullptr);
  std::string long_text;
  while (long_text.size() < 20 * 1024) {
    long_text += "In  the   beginning\tGod\ncreated  caf\xC3\xA9  \xE6\x88\x91 12345  x=y; ";
  }
  std::vector<std::string> texts = texts_;
  texts.push_back(long_text);
  for (const std::string& text : texts) {
    EXPECT_EQ(EncodeOrDie(*whole, text, true), EncodeOrDie(*words, text, true)) << text;
  }
}

// --- FromGguf on written fixtures ------------------------------------------------------

class FromGgufTest : public ::testing::Test {
 protected:
  // A four-token SentencePiece vocabulary: <unk> <s> </s> ▁a.
  GgufWriter ValidWriter() {
    GgufWriter w;
    w.SetString("tokenizer.ggml.model", "llama");
    w.SetStringArray("tokenizer.ggml.tokens", std::vector<std::string>{"<unk>", "<s>", "</s>",
                                                                       "\xE2\x96\x81"
                                                                       "a",
                                                                       "a"});
    w.SetFloat32Array("tokenizer.ggml.scores", std::vector<float>{0, 0, 0, -1, -2});
    w.SetInt32Array("tokenizer.ggml.token_type", std::vector<int32_t>{2, 3, 3, 1, 1});
    w.SetUint32("tokenizer.ggml.bos_token_id", 1);
    w.SetUint32("tokenizer.ggml.eos_token_id", 2);
    return w;
  }
  absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const GgufWriter& w) {
    const std::string path =
        absl::StrCat(::testing::TempDir(), "/tokenizer_fixture_",
                     ::testing::UnitTest::GetInstance()->current_test_info()->name(), ".gguf");
    const absl::Status written = w.WriteFile(path);
    if (!written.ok()) return written;
    auto file = GgufFile::Open(path);
    std::remove(path.c_str());
    if (!file.ok()) return file.status();
    return Tokenizer::FromGguf(**file);
  }
};

TEST_F(FromGgufTest, ReadsTheFlags) {
  GgufWriter w = ValidWriter();
  w.SetBool("tokenizer.ggml.add_space_prefix", false);
  w.SetBool("tokenizer.ggml.add_eos_token", true);
  w.SetUint32("tokenizer.ggml.eot_token_id", 0);
  auto t = Load(w);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(EncodeOrDie(**t, "a", true), ElementsAre(1, 4, 2));  // no ▁ prefix
  EXPECT_TRUE((*t)->IsEndOfGeneration(0));
  EXPECT_FALSE((*t)->adds_space_prefix());

  auto defaults = Load(ValidWriter());
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_THAT(EncodeOrDie(**defaults, "a", true), ElementsAre(1, 3));  // ▁a, BOS by default
}

TEST_F(FromGgufTest, UnknownPreTokenizerIsInvalidArgumentNamingIt) {
  // A byte-level vocabulary: token b is byte b's symbol in GPT-2's published alphabet
  // (printable Latin-1 as itself, the other bytes U+0100, U+0101, ... in byte order), then
  // <|endoftext|>.
  GgufWriter w;
  std::vector<std::string> tokens;
  uint32_t next = 0x100;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const uint32_t cp = printable ? b : next++;
    std::string symbol;
    if (cp < 0x80) {
      symbol.push_back(static_cast<char>(cp));
    } else {
      symbol.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      symbol.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    tokens.push_back(symbol);
  }
  tokens.push_back("<|endoftext|>");
  w.SetString("tokenizer.ggml.model", "gpt2");
  w.SetStringArray("tokenizer.ggml.tokens", tokens);
  w.SetStringArray("tokenizer.ggml.merges", std::vector<std::string>{"a b"});
  w.SetUint32("tokenizer.ggml.eos_token_id", 256);
  for (const char* pre : {"gpt-2", "llama-bpe", "qwen2", "deepseek-coder"}) {
    w.SetString("tokenizer.ggml.pre", pre);
    auto t = Load(w);
    ASSERT_TRUE(t.ok()) << pre << ": " << t.status();
    // "ab" is a merge but not a token: its bytes' tokens.
    EXPECT_THAT(EncodeOrDie(**t, "ab", false), ElementsAre('a', 'b'));
  }
  w.SetString("tokenizer.ggml.pre", "superbpe-2077");
  auto t = Load(w);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("'superbpe-2077'"));
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("tokenizer.ggml.pre"));
  w.SetUint32("tokenizer.ggml.pre", 7);  // not a string
  EXPECT_EQ(Load(w).status().code(), absl::StatusCode::kInvalidArgument);
}

// A real vocabulary file with its tokenizer.ggml.pre value overwritten in place (same
// length, so the file stays well-formed): the reader opens it, the tokenizer refuses it
// by name.
TEST_F(FromGgufTest, FileWithAnUnknownPreTokenizer) {
  const std::string model = SharedDir() + "/vocab/ggml-vocab-qwen2.gguf";
  SKIP_IF_NO_SHARED(model);
  std::string bytes;
  ASSERT_TRUE(ReadFile(model, &bytes));
  // The key, then its type (8: string), the value's length (5) and "qwen2".
  const std::string key = "tokenizer.ggml.pre";
  const size_t at = bytes.find(key);
  ASSERT_NE(at, std::string::npos);
  const size_t value = at + key.size() + 4 + 8;
  ASSERT_EQ(bytes.substr(value, 5), "qwen2");
  bytes.replace(value, 5, "qwen9");
  const std::string path = quill::testing::ScratchPath("qwen9-tiny.gguf");
  {
    std::ofstream out(path, std::ios::binary);
    out << bytes;
  }
  auto file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const auto t = Tokenizer::FromGguf(**file);
  std::remove(path.c_str());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("unsupported pre-tokenizer 'qwen9'"));
}

TEST_F(FromGgufTest, RejectsBadMetadata) {
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  {
    GgufWriter w;
    w.SetStringArray("tokenizer.ggml.tokens", std::vector<std::string>{"a"});
    EXPECT_EQ(Load(w).status().code(), kInvalid);  // no tokenizer.ggml.model
  }
  {
    GgufWriter w = ValidWriter();
    w.SetString("tokenizer.ggml.model", "t5");
    EXPECT_EQ(Load(w).status().code(), kInvalid);
  }
  {
    GgufWriter w = ValidWriter();
    w.SetFloat32Array("tokenizer.ggml.scores", std::vector<float>{0, 0});
    EXPECT_EQ(Load(w).status().code(), kInvalid);
  }
  {
    GgufWriter w = ValidWriter();
    w.SetInt32Array("tokenizer.ggml.token_type", std::vector<int32_t>{2, 3, 3, 1});
    EXPECT_EQ(Load(w).status().code(), kInvalid);
  }
  {
    GgufWriter w = ValidWriter();
    w.SetUint32("tokenizer.ggml.eos_token_id", 5);
    EXPECT_EQ(Load(w).status().code(), kInvalid);
  }
  {
    GgufWriter w = ValidWriter();
    w.SetString("tokenizer.ggml.scores", "not an array");
    EXPECT_EQ(Load(w).status().code(), kInvalid);
  }
  {
    GgufWriter w = ValidWriter();
    w.SetString("tokenizer.ggml.model", "gpt2");  // no byte-level alphabet
    EXPECT_EQ(Load(w).status().code(), kInvalid);
  }
  // The keys the end-of-generation set and the SentencePiece flags are read from.
  const auto expect_invalid = [&](const GgufWriter& w, const std::string& mentions) {
    const absl::Status status = Load(w).status();
    EXPECT_EQ(status.code(), kInvalid) << mentions;
    EXPECT_THAT(std::string(status.message()), HasSubstr(mentions));
  };
  {
    GgufWriter w = ValidWriter();
    w.SetUint32("tokenizer.ggml.eot_token_id", 5);
    expect_invalid(w, "eot id 5 is out of range");
  }
  {
    GgufWriter w = ValidWriter();
    w.SetUint32("tokenizer.ggml.eom_token_id", 1u << 31);
    expect_invalid(w, "tokenizer.ggml.eom_token_id");
  }
  {
    GgufWriter w = ValidWriter();
    w.SetString("tokenizer.ggml.eot_token_id", "<|eot_id|>");
    expect_invalid(w, "tokenizer.ggml.eot_token_id");
  }
  {
    GgufWriter w = ValidWriter();
    w.SetUint32("tokenizer.ggml.add_space_prefix", 0);
    expect_invalid(w, "tokenizer.ggml.add_space_prefix");
  }
  {
    GgufWriter w = ValidWriter();
    w.SetString("tokenizer.ggml.add_eos_token", "true");
    expect_invalid(w, "tokenizer.ggml.add_eos_token");
  }
  {
    GgufWriter w = ValidWriter();
    w.SetInt32Array("tokenizer.ggml.token_type", std::vector<int32_t>{2, 3, 3, 1, 7});
    expect_invalid(w, "token 4 has unknown type 7");
  }
}

}  // namespace
}  // namespace quill::engine
