// Tokenizer algorithms on small hand-built vocabularies (no GGUF file needed). Every
// expected id sequence is worked out by hand from the merge rules.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/base/utf8.h"
#include "engine/tokenizer/byte_unicode.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/vocab_data.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace quill::engine {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

constexpr int32_t kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kByte = 6;

// A SentencePiece vocabulary: 0 <unk>, 1 <s>, 2 </s>, optionally the 256 byte pieces
// (ids 3..258), then `pieces` in order.
struct SpmBuilder {
  VocabData vocab;
  explicit SpmBuilder(bool with_bytes) {
    vocab.model = "llama";
    Add("<unk>", 0, kUnknown);
    Add("<s>", 0, kControl);
    Add("</s>", 0, kControl);
    vocab.unk_id = 0;
    vocab.bos_id = 1;
    vocab.eos_id = 2;
    if (with_bytes) {
      for (int b = 0; b < 256; ++b) {
        char name[8];
        std::snprintf(name, sizeof(name), "<0x%02X>", b);
        Add(name, 0, kByte);
      }
    }
  }
  TokenId Add(const std::string& text, float score, int32_t type = kNormal) {
    vocab.tokens.push_back(text);
    vocab.scores.push_back(score);
    vocab.types.push_back(type);
    return static_cast<TokenId>(vocab.tokens.size() - 1);
  }
  std::unique_ptr<Tokenizer> Build() {
    auto tokenizer = CreateTokenizer(vocab);
    EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
    return tokenizer.ok() ? std::move(tokenizer).value() : nullptr;
  }
};

constexpr TokenId kFirstByte = 3;  // <0x00> in a SpmBuilder(true) vocabulary

std::vector<TokenId> EncodeOrDie(const Tokenizer& t, absl::string_view text, bool add_special) {
  auto ids = t.Encode(text, add_special);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<TokenId>{};
}

TEST(SpmTokenizerTest, MergesTheHighestScoringPairFirst) {
  for (bool ab_wins : {true, false}) {
    SpmBuilder b(/*with_bytes=*/false);
    b.vocab.add_space_prefix = false;
    const TokenId a = b.Add("a", -5), bb = b.Add("b", -5), c = b.Add("c", -5);
    const TokenId ab = b.Add("ab", ab_wins ? -0.5f : -1.0f);
    const TokenId bc = b.Add("bc", ab_wins ? -1.0f : -0.5f);
    auto t = b.Build();
    (void)bb;
    if (ab_wins) {
      EXPECT_THAT(EncodeOrDie(*t, "abc", false), ElementsAre(ab, c));
    } else {
      EXPECT_THAT(EncodeOrDie(*t, "abc", false), ElementsAre(a, bc));
    }
  }
}

TEST(SpmTokenizerTest, TiesGoToTheLeftmostPairAndMergesChain) {
  SpmBuilder b(false);
  b.vocab.add_space_prefix = false;
  const TokenId a = b.Add("a", -5);
  const TokenId aa = b.Add("aa", -1);
  b.Add("c", -5);
  b.Add("d", -5);
  const TokenId ab = b.Add("ab", -1), cd = b.Add("cd", -1), abcd = b.Add("abcd", -0.1f);
  b.Add("b", -5);
  auto t = b.Build();
  EXPECT_THAT(EncodeOrDie(*t, "aaa", false), ElementsAre(aa, a));
  EXPECT_THAT(EncodeOrDie(*t, "aaaa", false), ElementsAre(aa, aa));
  // ab and cd tie; both merge, then their concatenation is a piece.
  EXPECT_THAT(EncodeOrDie(*t, "abcd", false), ElementsAre(abcd));
  (void)ab;
  (void)cd;
}

TEST(SpmTokenizerTest, SpacesBecomeMarkersWithAPrefix) {
  SpmBuilder b(false);
  const TokenId marker = b.Add("\xE2\x96\x81", -5);  // ▁
  const TokenId a = b.Add("a", -5);
  b.Add("b", -5);
  const TokenId ma = b.Add(
                    "\xE2\x96\x81"
                    "a",
                    -1),
                mb = b.Add(
                    "\xE2\x96\x81"
                    "b",
                    -1);
  auto t = b.Build();
  EXPECT_THAT(EncodeOrDie(*t, "a b", false), ElementsAre(ma, mb));
  EXPECT_THAT(EncodeOrDie(*t, " a", false), ElementsAre(marker, ma));
  EXPECT_THAT(EncodeOrDie(*t, "", false), IsEmpty());
  EXPECT_EQ(t->TokenBytes(ma), " a");
  EXPECT_EQ(t->TokenBytes(marker), " ");
  EXPECT_TRUE(t->adds_space_prefix());
  EXPECT_EQ(t->Decode({ma, mb}), " a b");
  EXPECT_EQ(t->Decode({ma, mb}, /*strip_leading_space=*/true), "a b");
  EXPECT_EQ(t->Decode({a, mb}, /*strip_leading_space=*/true), "a b");
}

TEST(SpmTokenizerTest, AddSpacePrefixCanBeOff) {
  SpmBuilder b(false);
  b.vocab.add_space_prefix = false;
  const TokenId marker = b.Add("\xE2\x96\x81", -5);
  const TokenId a = b.Add("a", -5);
  auto t = b.Build();
  EXPECT_THAT(EncodeOrDie(*t, "a a", false), ElementsAre(a, marker, a));
  EXPECT_FALSE(t->adds_space_prefix());
  EXPECT_EQ(t->Decode({marker, a}, /*strip_leading_space=*/true), " a");
}

TEST(SpmTokenizerTest, APieceAcrossAWordStartIsStillMerged) {
  // "a▁" ends in a word start, so the text cannot be merged word by word.
  SpmBuilder b(false);
  const TokenId marker = b.Add("\xE2\x96\x81", -5);
  b.Add("a", -5);
  const TokenId bb = b.Add("b", -5);
  b.Add(
      "\xE2\x96\x81"
      "a",
      -1);
  const TokenId a_marker = b.Add("a\xE2\x96\x81", -0.5f);
  auto t = b.Build();
  // "▁a▁b": "a▁" (-0.5) beats "▁a" (-1).
  EXPECT_THAT(EncodeOrDie(*t, "a b", false), ElementsAre(marker, a_marker, bb));
}

TEST(SpmTokenizerTest, UnknownCharactersFallBackToBytes) {
  SpmBuilder b(/*with_bytes=*/true);
  const TokenId marker = b.Add("\xE2\x96\x81", -5);
  auto t = b.Build();
  // é = C3 A9, 🦙 = F0 9F A6 99.
  EXPECT_THAT(EncodeOrDie(*t, "\xC3\xA9", false),
              ElementsAre(marker, kFirstByte + 0xC3, kFirstByte + 0xA9));
  EXPECT_THAT(EncodeOrDie(*t, "\xF0\x9F\xA6\x99", false),
              ElementsAre(marker, kFirstByte + 0xF0, kFirstByte + 0x9F, kFirstByte + 0xA6,
                          kFirstByte + 0x99));
  EXPECT_EQ(t->TokenBytes(kFirstByte + 0xC3), "\xC3");
  EXPECT_EQ(t->Decode({marker, kFirstByte + 0xC3, kFirstByte + 0xA9}), " \xC3\xA9");
}

TEST(SpmTokenizerTest, UnknownCharactersWithoutBytePiecesGiveUnk) {
  SpmBuilder b(/*with_bytes=*/false);
  const TokenId marker = b.Add("\xE2\x96\x81", -5);
  const TokenId x = b.Add("x", -5);
  auto t = b.Build();
  EXPECT_THAT(EncodeOrDie(*t, "x\xC3\xA9x", false), ElementsAre(marker, x, 0, x));

  b.vocab.unk_id = -1;
  auto no_unk = b.Build();
  const auto ids = no_unk->Encode("\xC3\xA9", false);
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SpmTokenizerTest, ControlTokenTextIsPlainText) {
  SpmBuilder b(false);
  b.vocab.add_space_prefix = false;
  const TokenId lt = b.Add("<", -5);
  b.Add("s", -5);
  const TokenId gt = b.Add(">", -5);
  const TokenId lts = b.Add("<s", -1);
  b.Add("s>", -1);
  auto t = b.Build();
  // "<s>" is a piece only as the control token 1, which text never produces.
  EXPECT_THAT(EncodeOrDie(*t, "<s>", false), ElementsAre(lts, gt));
  EXPECT_THAT(EncodeOrDie(*t, "<s>", true), ElementsAre(1, lts, gt));
  EXPECT_THAT(EncodeOrDie(*t, "</s>", false), Not(Contains(2)));
  EXPECT_TRUE(t->IsControl(1));
  EXPECT_FALSE(t->IsControl(lt));
  EXPECT_EQ(t->TokenBytes(1), "");
}

TEST(SpmTokenizerTest, SpecialTokensFollowTheFlags) {
  SpmBuilder b(false);
  b.vocab.add_space_prefix = false;
  const TokenId a = b.Add("a", -5);
  {
    auto t = b.Build();  // llama default: add BOS, no EOS
    EXPECT_TRUE(t->add_bos());
    EXPECT_THAT(EncodeOrDie(*t, "a", true), ElementsAre(1, a));
    EXPECT_THAT(EncodeOrDie(*t, "a", false), ElementsAre(a));
    EXPECT_THAT(EncodeOrDie(*t, "", true), ElementsAre(1));
  }
  b.vocab.add_eos = true;
  b.vocab.add_bos = false;
  {
    auto t = b.Build();
    EXPECT_FALSE(t->add_bos());
    EXPECT_THAT(EncodeOrDie(*t, "a", true), ElementsAre(a, 2));
  }
}

TEST(SpmTokenizerTest, RejectsInvalidUtf8) {
  SpmBuilder b(true);
  auto t = b.Build();
  const auto ids = t->Encode("ab\xFF", true);
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(ids.status().message()), HasSubstr("not valid UTF-8 at byte 2"));
  EXPECT_EQ(t->Encode("\xED\xA0\x80", false).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SpmTokenizerTest, EndOfGenerationIds) {
  SpmBuilder b(false);
  const TokenId eot = b.Add("<|eot|>", 0, kControl);
  const TokenId eom = b.Add("<|eom|>", 0, kControl);
  const TokenId a = b.Add("a", -1);
  b.vocab.eot_id = eot;
  auto t = b.Build();
  EXPECT_TRUE(t->IsEndOfGeneration(2));
  EXPECT_TRUE(t->IsEndOfGeneration(eot));
  EXPECT_FALSE(t->IsEndOfGeneration(eom));  // not declared as eom
  EXPECT_FALSE(t->IsEndOfGeneration(a));
  EXPECT_FALSE(t->IsEndOfGeneration(-1));
  EXPECT_EQ(t->eos_id(), 2);
  EXPECT_EQ(t->bos_id(), 1);
  EXPECT_EQ(t->model_name(), "llama");
  EXPECT_EQ(t->TokenBytes(-1), "");
  EXPECT_EQ(t->TokenBytes(t->vocab_size()), "");
}

// GPT-2's bytes_to_unicode() as published: printable Latin-1 keeps its code point, the
// other bytes take U+0100, U+0101, ... in byte order.
std::string ByteSymbol(int byte) {
  int next = 0x100;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    const int cp = printable ? b : next++;
    if (b == byte) {
      std::string s;
      AppendUtf8(static_cast<char32_t>(cp), &s);
      return s;
    }
  }
  return "";
}

TEST(ByteUnicodeTest, KnownSymbols) {
  EXPECT_EQ(ByteToUnicode()[' '], 0x120u);   // Ġ
  EXPECT_EQ(ByteToUnicode()['\n'], 0x10Au);  // Ċ
  EXPECT_EQ(ByteToUnicode()[0], 0x100u);
  EXPECT_EQ(ByteToUnicode()[0x7F], 0x121u);
  EXPECT_EQ(ByteToUnicode()[0xAD], 0x143u);
  EXPECT_EQ(ByteToUnicode()['a'], static_cast<char32_t>('a'));
  EXPECT_EQ(ByteToUnicode()[0xE9], 0xE9u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(UnicodeToByte(ByteToUnicode()[b]), b);
  EXPECT_EQ(UnicodeToByte(0x144), -1);
  EXPECT_EQ(UnicodeToByte(0x20), -1);  // a raw space is not in the alphabet
}

// A GPT-2 vocabulary: ids 0..255 are the byte symbols of bytes 0..255, then `pieces`.
struct BpeBuilder {
  VocabData vocab;
  BpeBuilder() {
    vocab.model = "gpt2";
    vocab.pre = "gpt-2";
    for (int b = 0; b < 256; ++b) Add(ByteSymbol(b));
  }
  TokenId Add(const std::string& text, int32_t type = kNormal) {
    vocab.tokens.push_back(text);
    vocab.types.push_back(type);
    return static_cast<TokenId>(vocab.tokens.size() - 1);
  }
  std::unique_ptr<Tokenizer> Build() {
    auto tokenizer = CreateTokenizer(vocab);
    EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
    return tokenizer.ok() ? std::move(tokenizer).value() : nullptr;
  }
};

TEST(BpeTokenizerTest, AppliesMergesByRankWithinWords) {
  BpeBuilder b;
  const TokenId hello = b.Add("hello");
  const TokenId gw = b.Add("\xC4\xA0w");  // Ġw
  const TokenId he = b.Add("he");
  b.Add("ll");
  b.Add("hell");
  const TokenId eot = b.Add("<|endoftext|>", kControl);
  b.vocab.merges = {"l l", "h e", "he ll", "hell o", "\xC4\xA0 w"};
  b.vocab.bos_id = b.vocab.eos_id = eot;
  auto t = b.Build();
  EXPECT_THAT(EncodeOrDie(*t, "hello world", false), ElementsAre(hello, gw, 'o', 'r', 'l', 'd'));
  // No BOS by default for gpt2; an empty prompt still gets one token.
  EXPECT_FALSE(t->add_bos());
  EXPECT_THAT(EncodeOrDie(*t, "hello", true), ElementsAre(hello));
  EXPECT_THAT(EncodeOrDie(*t, "", true), ElementsAre(eot));
  EXPECT_THAT(EncodeOrDie(*t, "", false), IsEmpty());
  // Merges never cross pre-tokenizer words: "hel" + "lo" are two words here.
  EXPECT_THAT(EncodeOrDie(*t, "hel,lo", false), ElementsAre(he, 'l', ',', 'l', 'o'));
}

TEST(BpeTokenizerTest, TokenBytesUndoTheByteAlphabet) {
  BpeBuilder b;
  const TokenId gw = b.Add("\xC4\xA0w");
  const TokenId eot = b.Add("<|endoftext|>", kControl);
  auto t = b.Build();
  EXPECT_EQ(t->TokenBytes('\n'), "\n");
  EXPECT_EQ(t->TokenBytes(' '), " ");
  EXPECT_EQ(t->TokenBytes(0xC3), "\xC3");
  EXPECT_EQ(t->TokenBytes(gw), " w");
  EXPECT_EQ(t->TokenBytes(eot), "");
  EXPECT_FALSE(t->adds_space_prefix());
  EXPECT_EQ(t->Decode({gw}, /*strip_leading_space=*/true), " w");
}

TEST(BpeTokenizerTest, RankDecidesBetweenOverlappingPairs) {
  for (bool ab_first : {true, false}) {
    BpeBuilder b;
    const TokenId ab = b.Add("ab"), bc = b.Add("bc");
    b.vocab.merges =
        ab_first ? std::vector<std::string>{"a b", "b c"} : std::vector<std::string>{"b c", "a b"};
    auto t = b.Build();
    if (ab_first) {
      EXPECT_THAT(EncodeOrDie(*t, "abc", false), ElementsAre(ab, 'c'));
    } else {
      EXPECT_THAT(EncodeOrDie(*t, "abc", false), ElementsAre('a', bc));
    }
  }
}

TEST(BpeTokenizerTest, EqualRanksMergeLeftmostFirst) {
  BpeBuilder b;
  const TokenId aa = b.Add("aa");
  b.vocab.merges = {"a a"};
  auto t = b.Build();
  EXPECT_THAT(EncodeOrDie(*t, "aaa", false), ElementsAre(aa, 'a'));
  EXPECT_THAT(EncodeOrDie(*t, "aaaaa", false), ElementsAre(aa, aa, 'a'));
}

TEST(BpeTokenizerTest, IntermediateMergeResultsNeedNotBeTokens) {
  BpeBuilder b;
  const TokenId xyz = b.Add("xyz");
  b.vocab.merges = {"x y", "xy z"};  // "xy" is not a token
  auto t = b.Build();
  EXPECT_THAT(EncodeOrDie(*t, "xyz", false), ElementsAre(xyz));
  EXPECT_THAT(EncodeOrDie(*t, "xy", false), ElementsAre('x', 'y'));
}

TEST(BpeTokenizerTest, ControlTokenTextIsPlainText) {
  BpeBuilder b;
  const TokenId eot = b.Add("<|endoftext|>", kControl);
  b.vocab.eos_id = eot;
  auto t = b.Build();
  const auto ids = EncodeOrDie(*t, "<|endoftext|>", true);
  EXPECT_THAT(ids, Not(Contains(eot)));
  EXPECT_EQ(t->Decode(ids), "<|endoftext|>");
  EXPECT_TRUE(t->IsEndOfGeneration(eot));
}

TEST(VocabValidationTest, RejectsInconsistentVocabularies) {
  const auto code = [](const VocabData& v) { return CreateTokenizer(v).status().code(); };
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  SpmBuilder good(false);
  good.Add("a", -1);
  EXPECT_TRUE(CreateTokenizer(good.vocab).ok());

  VocabData v = good.vocab;
  v.model = "bert";
  EXPECT_EQ(code(v), kInvalid);
  v = good.vocab;
  v.scores.pop_back();
  EXPECT_EQ(code(v), kInvalid);
  v = good.vocab;
  v.types.push_back(1);
  EXPECT_EQ(code(v), kInvalid);
  v = good.vocab;
  v.types[3] = 9;
  EXPECT_EQ(code(v), kInvalid);
  v = good.vocab;
  v.types[3] = kByte;  // "a" is no <0xNN>
  EXPECT_EQ(code(v), kInvalid);
  v = good.vocab;
  v.bos_id = static_cast<TokenId>(v.tokens.size());
  EXPECT_EQ(code(v), kInvalid);
  v = good.vocab;
  v.eos_id = -2;
  EXPECT_EQ(code(v), kInvalid);
  v = good.vocab;
  v.eot_id = 1000;
  EXPECT_EQ(code(v), kInvalid);
  v = VocabData{};
  v.model = "llama";
  EXPECT_EQ(code(v), kInvalid);  // empty

  BpeBuilder bpe;
  bpe.Add("ab");
  bpe.vocab.merges = {"a b"};
  EXPECT_TRUE(CreateTokenizer(bpe.vocab).ok());
  VocabData w = bpe.vocab;
  w.merges = {"ab"};
  EXPECT_EQ(code(w), kInvalid);
  w = bpe.vocab;
  w.pre = "no-such-pre";
  EXPECT_EQ(code(w), kInvalid);
  EXPECT_THAT(std::string(CreateTokenizer(w).status().message()),
              HasSubstr("unsupported pre-tokenizer 'no-such-pre'"));
  w.pre = "llama-bpe";
  EXPECT_TRUE(CreateTokenizer(w).ok());
  w = bpe.vocab;
  w.tokens['a'] = "not-a-byte";  // printable ASCII must have its byte symbol
  EXPECT_EQ(code(w), kInvalid);
}

std::vector<TokenId> EncodeSpecialOrDie(const Tokenizer& t, absl::string_view text,
                                        std::vector<ByteRange> plain = {}) {
  auto ids = t.EncodeWithSpecialTokens(text, /*add_special=*/false, plain);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<TokenId>{};
}

// A SentencePiece vocabulary with single letters, "▁a", and special tokens of each kind.
struct SpecialVocab {
  SpmBuilder b{/*with_bytes=*/false};
  TokenId marker, a, x, y, ma, start, end, ab, bcd, tag, tag_pair, user;
  SpecialVocab() {
    marker = b.Add("\xE2\x96\x81", -5);
    a = b.Add("a", -5);
    b.Add("b", -5);
    b.Add("c", -5);
    b.Add("d", -5);
    x = b.Add("x", -5);
    y = b.Add("y", -5);
    b.Add("<", -5);
    b.Add(">", -5);
    ma = b.Add(
        "\xE2\x96\x81"
        "a",
        -1);
    start = b.Add("<|start|>", 0, kControl);
    end = b.Add("<|end|>", 0, kControl);
    ab = b.Add("ab", 0, kControl);
    bcd = b.Add("bcd", 0, kControl);
    tag = b.Add("<t>", 0, kControl);
    tag_pair = b.Add("<t><t>", 0, kControl);
    user = b.Add("<u>", 0, kUserDefined);
  }
};

TEST(SpecialTokensTest, ControlTextOnlyWithSpecialParsingUserDefinedAlways) {
  SpecialVocab v;
  v.b.vocab.add_space_prefix = false;
  auto t = v.b.Build();
  EXPECT_THAT(EncodeSpecialOrDie(*t, "<|start|>a<|end|>"), ElementsAre(v.start, v.a, v.end));
  const std::vector<TokenId> plain = EncodeOrDie(*t, "<|start|>a<|end|>", false);
  EXPECT_THAT(plain, Not(Contains(v.start)));
  EXPECT_THAT(plain, Not(Contains(v.end)));
  EXPECT_THAT(EncodeOrDie(*t, "x<u>y", false), ElementsAre(v.x, v.user, v.y));
  EXPECT_THAT(EncodeSpecialOrDie(*t, "x<u>y"), ElementsAre(v.x, v.user, v.y));
  EXPECT_THAT(EncodeSpecialOrDie(*t, "x<u>y", {ByteRange{0, 5}}), ElementsAre(v.x, v.user, v.y));
  // The unknown token's text too, with special parsing only.
  EXPECT_THAT(EncodeSpecialOrDie(*t, "<unk>"), ElementsAre(0));
}

TEST(SpecialTokensTest, LongerTextsFirstThenLeftmost) {
  SpecialVocab v;
  v.b.vocab.add_space_prefix = false;
  auto t = v.b.Build();
  EXPECT_THAT(EncodeSpecialOrDie(*t, "x<t><t>y<t>"), ElementsAre(v.x, v.tag_pair, v.y, v.tag));
  EXPECT_THAT(EncodeSpecialOrDie(*t, "<t><t><t>"), ElementsAre(v.tag_pair, v.tag));
  // llama.cpp takes "bcd" (longer) before "ab", though "ab" starts further left.
  EXPECT_THAT(EncodeSpecialOrDie(*t, "abcd"), ElementsAre(v.a, v.bcd));
  EXPECT_THAT(EncodeSpecialOrDie(*t, "abab"), ElementsAre(v.ab, v.ab));
}

TEST(SpecialTokensTest, PlainRangesKeepOverlappingControlTextPlain) {
  SpecialVocab v;
  v.b.vocab.add_space_prefix = false;
  auto t = v.b.Build();
  // "<|start|>" is bytes [0, 9), "a" [9, 10), "<|end|>" [10, 17).
  const std::string text = "<|start|>a<|end|>";
  EXPECT_THAT(EncodeSpecialOrDie(*t, text, {ByteRange{9, 10}}), ElementsAre(v.start, v.a, v.end));
  for (const ByteRange r : {ByteRange{9, 11}, ByteRange{16, 17}, ByteRange{10, 17}}) {
    const std::vector<TokenId> ids = EncodeSpecialOrDie(*t, text, {r});
    EXPECT_EQ(ids.front(), v.start);
    EXPECT_THAT(ids, Not(Contains(v.end))) << r.begin << ", " << r.end;
  }
  // Unsorted, overlapping and empty ranges are fine.
  EXPECT_THAT(EncodeSpecialOrDie(
                  *t, text, {ByteRange{12, 13}, ByteRange{3, 3}, ByteRange{0, 2}, ByteRange{1, 4}}),
              Not(Contains(v.start)));
  // With "<t><t>" protected only partly, "<t>" is still found where it is free.
  EXPECT_THAT(EncodeSpecialOrDie(*t, "<t><t>", {ByteRange{0, 1}}), Contains(v.tag));
}

TEST(SpecialTokensTest, SpacePrefixAfterEverySpecialToken) {
  SpecialVocab v;  // add_space_prefix (the llama default)
  auto t = v.b.Build();
  EXPECT_THAT(EncodeSpecialOrDie(*t, "<|start|>a<|end|>a"),
              ElementsAre(v.start, v.ma, v.end, v.ma));
  EXPECT_THAT(EncodeSpecialOrDie(*t, "a<|end|>"), ElementsAre(v.ma, v.end));
  EXPECT_THAT(EncodeOrDie(*t, "a<u>a", false), ElementsAre(v.ma, v.user, v.ma));
  v.b.vocab.add_space_prefix = false;
  auto no_prefix = v.b.Build();
  EXPECT_THAT(EncodeSpecialOrDie(*no_prefix, "<|start|>a<|end|>a"),
              ElementsAre(v.start, v.a, v.end, v.a));
}

TEST(SpecialTokensTest, EndOfTurnTextEndsGenerationAndBecomesControl) {
  SpmBuilder b(false);
  b.vocab.add_space_prefix = false;
  b.Add("a", -5);
  const TokenId im_end = b.Add("<|im_end|>", 0, kUserDefined);  // mistyped, as some files are
  const TokenId eom = b.Add("<|eom_id|>", 0, kControl);
  const TokenId fim_pad = b.Add("<|fim_pad|>", 0, kControl);
  const TokenId other = b.Add("<|other|>", 0, kControl);
  auto t = b.Build();
  EXPECT_THAT(t->end_of_generation_ids(), ElementsAre(2, im_end, eom, fim_pad));
  for (TokenId id : {2, im_end, eom, fim_pad}) EXPECT_TRUE(t->IsEndOfGeneration(id)) << id;
  EXPECT_FALSE(t->IsEndOfGeneration(other));
  // Now a control token: plain Encode leaves its text alone, and it has no bytes.
  EXPECT_TRUE(t->IsControl(im_end));
  EXPECT_THAT(EncodeOrDie(*t, "<|im_end|>", false), Not(Contains(im_end)));
  EXPECT_THAT(EncodeSpecialOrDie(*t, "<|im_end|>"), ElementsAre(im_end));
  EXPECT_EQ(t->TokenBytes(im_end), "");
  EXPECT_EQ(t->token_text(im_end), "<|im_end|>");
  // An eot_token_id from the file counts whatever its text.
  b.vocab.eot_id = other;
  auto with_eot = b.Build();
  EXPECT_TRUE(with_eot->IsEndOfGeneration(other));
  EXPECT_THAT(with_eot->end_of_generation_ids(), ElementsAre(2, im_end, eom, fim_pad, other));
}

TEST(SpecialTokensTest, TokenTextIsTheStoredText) {
  SpecialVocab v;
  auto t = v.b.Build();
  EXPECT_EQ(t->token_text(v.ma),
            "\xE2\x96\x81"
            "a");
  EXPECT_EQ(t->token_text(1), "<s>");
  EXPECT_EQ(t->token_text(-1), "");
  EXPECT_EQ(t->token_text(t->vocab_size()), "");
}

TEST(IncrementalDetokenizerTest, HoldsBackPartialCharacters) {
  SpmBuilder b(/*with_bytes=*/true);
  auto t = b.Build();
  IncrementalDetokenizer detok(*t);
  // 🦙 = F0 9F A6 99, fed one byte token at a time.
  EXPECT_EQ(detok.Push(kFirstByte + 0xF0), "");
  EXPECT_EQ(detok.Push(kFirstByte + 0x9F), "");
  EXPECT_EQ(detok.Push(kFirstByte + 0xA6), "");
  EXPECT_EQ(detok.Push(kFirstByte + 0x99), "\xF0\x9F\xA6\x99");
  EXPECT_EQ(detok.Flush(), "");
}

TEST(IncrementalDetokenizerTest, ReplacesInvalidBytes) {
  SpmBuilder b(true);
  const TokenId x = b.Add("x", -1);
  auto t = b.Build();
  IncrementalDetokenizer detok(*t);
  EXPECT_EQ(detok.Push(kFirstByte + 0x80), "\xEF\xBF\xBD");  // can never become valid
  EXPECT_EQ(detok.Push(kFirstByte + 0xE2), "");
  EXPECT_EQ(detok.Push(x), "\xEF\xBF\xBDx");  // E2 then 'x': the E2 was ill-formed
  EXPECT_EQ(detok.Push(kFirstByte + 0xC3), "");
  EXPECT_EQ(detok.Flush(), "\xEF\xBF\xBD");  // truncated at the end of the stream
}

TEST(IncrementalDetokenizerTest, StripsOnlyTheFirstLeadingSpace) {
  SpmBuilder b(true);
  const TokenId hello = b.Add("\xE2\x96\x81Hello", -1);
  auto t = b.Build();
  IncrementalDetokenizer strip(*t, /*strip_leading_space=*/true);
  EXPECT_EQ(strip.Push(1), "");  // BOS is a control token: no text
  EXPECT_EQ(strip.Push(hello), "Hello");
  EXPECT_EQ(strip.Push(hello), " Hello");
  IncrementalDetokenizer keep(*t);
  EXPECT_EQ(keep.Push(hello), " Hello");
}

}  // namespace
}  // namespace quill::engine
