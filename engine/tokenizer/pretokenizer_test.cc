// The PCRE2 wrapper and the family pre-tokenizers. Every expected split is worked out by
// hand from the published patterns (pretokenizer_families.cc quotes them).
#include "engine/tokenizer/pretokenizer.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "engine/base/utf8.h"
#include "engine/tokenizer/pcre2_regex.h"
#include "engine/tokenizer/pretokenizer_families.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace quill::engine {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::vector<std::string> Pieces(const Pcre2Regex& regex, absl::string_view text) {
  std::vector<std::string> pieces;
  Pcre2Regex::MatchData scratch = regex.NewMatchData();
  const absl::Status status = regex.Split(text, scratch, [&](absl::string_view p) {
    pieces.emplace_back(p);
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
  return pieces;
}

Pcre2Regex Compile(absl::string_view pattern) {
  absl::StatusOr<Pcre2Regex> regex = Pcre2Regex::Compile(pattern);
  EXPECT_TRUE(regex.ok()) << regex.status();
  return *std::move(regex);
}

std::string Utf8(char32_t cp) {
  std::string s;
  AppendUtf8(cp, &s);
  return s;
}

// True if `cp` alone is matched by `pattern` (a one-character class), tested between two
// copies of `delimiter`, which the class must not match.
bool ClassMatches(absl::string_view pattern, char32_t cp, char delimiter) {
  const Pcre2Regex regex = Compile(pattern);
  const std::string text =
      absl::StrCat(std::string(1, delimiter), Utf8(cp), std::string(1, delimiter));
  return Pieces(regex, text).size() == 3;
}

TEST(Pcre2RegexTest, RewritesWhitespaceClasses) {
  const std::string ws =
      "\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}"
      "\\x{3000}";
  EXPECT_EQ(RewriteWhitespaceClasses("\\s+"), "[" + ws + "]+");
  EXPECT_EQ(RewriteWhitespaceClasses("(?!\\S)"), "(?![^" + ws + "])");
  EXPECT_EQ(RewriteWhitespaceClasses("[^\\s\\p{L}]"), "[^" + ws + "\\p{L}]");
  EXPECT_EQ(RewriteWhitespaceClasses("[]\\s]"), "[]" + ws + "]");  // ']' first is literal
  EXPECT_EQ(RewriteWhitespaceClasses("\\\\s"), "\\\\s");           // an escaped backslash
  EXPECT_EQ(RewriteWhitespaceClasses("\\p{N}{1,3}|\\d"), "\\p{N}{1,3}|\\d");
}

TEST(Pcre2RegexTest, SplitsIntoMatchesAndTheTextBetween) {
  const Pcre2Regex regex = Compile("[0-9]+");
  EXPECT_THAT(Pieces(regex, "ab12cd345"), ElementsAre("ab", "12", "cd", "345"));
  EXPECT_THAT(Pieces(regex, "12"), ElementsAre("12"));
  EXPECT_THAT(Pieces(regex, "none"), ElementsAre("none"));
  EXPECT_THAT(Pieces(regex, ""), IsEmpty());
  // Empty matches are skipped, one character at a time (é is two bytes).
  EXPECT_THAT(Pieces(Compile("x*"), "\xC3\xA9xx\xC3\xA9"),
              ElementsAre("\xC3\xA9", "xx", "\xC3\xA9"));
}

TEST(Pcre2RegexTest, WhitespaceIsUnicodeWhiteSpace) {
  // U+0085 and U+3000 are White_Space (PCRE2's own \s misses U+0085); U+200B (Cf) and
  // U+001C (an information separator) are not.
  const Pcre2Regex regex = Compile("\\s+");
  EXPECT_THAT(Pieces(regex,
                     "a\xC2\x85\xE3\x80\x80"
                     "b\xE2\x80\x8B"
                     "c\x1C"
                     "d"),
              ElementsAre("a", "\xC2\x85\xE3\x80\x80",
                          "b\xE2\x80\x8B"
                          "c\x1C"
                          "d"));
  for (char32_t cp : std::initializer_list<char32_t>{0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0,
                                                     0x1680, 0x2000, 0x2009, 0x200A, 0x2028, 0x2029,
                                                     0x202F, 0x205F, 0x3000}) {
    EXPECT_TRUE(ClassMatches("\\s", cp, 'a')) << std::hex << cp;
    EXPECT_FALSE(ClassMatches("\\S", cp, ' ')) << std::hex << cp;
  }
  for (char32_t cp : std::initializer_list<char32_t>{0x1C, 0x1F, 0x180E, 0x200B, 0xFEFF, '_'}) {
    EXPECT_FALSE(ClassMatches("\\s", cp, 'a')) << std::hex << cp;
  }
}

TEST(Pcre2RegexTest, UnicodeProperties) {
  for (char32_t cp : std::initializer_list<char32_t>{'A', 'z', 0xE9, 0x4E2D, 0x0436,
                                                     0x1780}) {  // é 中 ж Khmer KA (Lo)
    EXPECT_TRUE(ClassMatches("\\p{L}", cp, '1')) << std::hex << cp;
  }
  for (char32_t cp : std::initializer_list<char32_t>{
           0x17B6, '1', 0x1F999, 0x0301}) {  // Khmer AA (Mc), 🦙 (So), accent (Mn)
    EXPECT_FALSE(ClassMatches("\\p{L}", cp, '1')) << std::hex << cp;
  }
  for (char32_t cp : std::initializer_list<char32_t>{
           '7', 0xBD, 0x0663, 0x2163}) {  // ½ (No), Arabic-Indic 3 (Nd), Ⅳ (Nl)
    EXPECT_TRUE(ClassMatches("\\p{N}", cp, 'a')) << std::hex << cp;
  }
  EXPECT_FALSE(ClassMatches("\\p{N}", 'x', 'a'));
  for (char32_t cp : std::initializer_list<char32_t>{'!', ',', '_', '{', 0x2014, 0x3002}) {  // — 。
    EXPECT_TRUE(ClassMatches("\\p{P}", cp, 'a')) << std::hex << cp;
  }
  for (char32_t cp : std::initializer_list<char32_t>{'$', '+', '<', '^', '`', '|',
                                                     '~'}) {  // symbols, not punctuation
    EXPECT_FALSE(ClassMatches("\\p{P}", cp, 'a')) << std::hex << cp;
  }
}

TEST(Pcre2RegexTest, DollarMatchesOnlyAtTheEnd) {
  // PCRE2 would also match before a final newline; ECMAScript and Rust do not.
  EXPECT_THAT(Pieces(Compile("a$"), "a\n"), ElementsAre("a\n"));
  EXPECT_THAT(Pieces(Compile("\\s+$"), "x \n"), ElementsAre("x", " \n"));
}

TEST(Pcre2RegexTest, BadPatternIsInvalidArgument) {
  const absl::StatusOr<Pcre2Regex> regex = Pcre2Regex::Compile("(unclosed");
  EXPECT_EQ(regex.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(regex.status().message()), HasSubstr("(unclosed"));
}

std::vector<std::string> Split(absl::string_view pre, absl::string_view text) {
  const absl::StatusOr<PreTokenizerSpec> spec = FindPreTokenizerSpec(pre);
  EXPECT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<PreTokenizer> pretokenizer = PreTokenizer::Create(*spec);
  EXPECT_TRUE(pretokenizer.ok()) << pretokenizer.status();
  const absl::StatusOr<std::vector<absl::string_view>> words = pretokenizer->Split(text);
  EXPECT_TRUE(words.ok()) << words.status();
  return std::vector<std::string>(words->begin(), words->end());
}

// GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
TEST(Gpt2PreTokenizerTest, WordsTakeTheirLeadingSpace) {
  EXPECT_THAT(Split("gpt-2", "Hello world"), ElementsAre("Hello", " world"));
  EXPECT_THAT(Split("gpt-2", " Hello"), ElementsAre(" Hello"));
  EXPECT_THAT(Split("gpt-2", "Hello, world!"), ElementsAre("Hello", ",", " world", "!"));
  EXPECT_THAT(Split("gpt-2", ""), IsEmpty());
}

TEST(Gpt2PreTokenizerTest, Contractions) {
  EXPECT_THAT(Split("gpt-2", "don't"), ElementsAre("don", "'t"));
  EXPECT_THAT(Split("gpt-2", "I've we'll she'd they're I'm"),
              ElementsAre("I", "'ve", " we", "'ll", " she", "'d", " they", "'re", " I", "'m"));
  // Case-sensitive, and "'a" is no contraction.
  EXPECT_THAT(Split("gpt-2", "'RE"), ElementsAre("'", "RE"));
  EXPECT_THAT(Split("gpt-2", "y'all"), ElementsAre("y", "'", "all"));
  EXPECT_THAT(Split("gpt-2", "''s"), ElementsAre("''", "s"));
}

TEST(Gpt2PreTokenizerTest, WhitespaceRuns) {
  // Before a word the last space of a run goes with the word.
  EXPECT_THAT(Split("gpt-2", "a  b"), ElementsAre("a", " ", " b"));
  EXPECT_THAT(Split("gpt-2", "a    b"), ElementsAre("a", "   ", " b"));
  // A run before a non-space keeps all but its last character, which stands alone if it
  // cannot prefix the next word.
  EXPECT_THAT(Split("gpt-2", "a \n b"), ElementsAre("a", " \n", " b"));
  EXPECT_THAT(Split("gpt-2", "a\n\nb"), ElementsAre("a", "\n", "\n", "b"));
  EXPECT_THAT(Split("gpt-2", "x\ny"), ElementsAre("x", "\n", "y"));
  // At the end of the text the whole run.
  EXPECT_THAT(Split("gpt-2", "end   "), ElementsAre("end", "   "));
  EXPECT_THAT(Split("gpt-2", "\n\n\n"), ElementsAre("\n\n\n"));
  EXPECT_THAT(Split("gpt-2", " "), ElementsAre(" "));
  // Only ASCII space is the optional prefix: NBSP stands alone.
  EXPECT_THAT(Split("gpt-2",
                    "a\xC2\xA0"
                    "b"),
              ElementsAre("a", "\xC2\xA0", "b"));
  EXPECT_THAT(Split("gpt-2", "\tx"), ElementsAre("\t", "x"));
}

TEST(Gpt2PreTokenizerTest, NumbersLettersAndOthers) {
  EXPECT_THAT(Split("gpt-2", "3.14"), ElementsAre("3", ".", "14"));
  EXPECT_THAT(Split("gpt-2", " 123abc"), ElementsAre(" 123", "abc"));
  EXPECT_THAT(Split("gpt-2", "$$$ ok"), ElementsAre("$$$", " ok"));
  EXPECT_THAT(Split("gpt-2", "x \xC2\xBD"), ElementsAre("x", " \xC2\xBD"));  // ½ is \p{N}
  EXPECT_THAT(Split("gpt-2", "na\xC3\xAFve"), ElementsAre("na\xC3\xAFve"));  // naïve
  EXPECT_THAT(Split("gpt-2", "\xE6\x97\xA5\xE6\x9C\xAC"), ElementsAre("\xE6\x97\xA5\xE6\x9C\xAC"));
  EXPECT_THAT(Split("gpt-2", " \xF0\x9F\xA6\x99!a"), ElementsAre(" \xF0\x9F\xA6\x99!", "a"));
  EXPECT_THAT(Split("gpt-2", "w048"), ElementsAre("w", "048"));
}

TEST(Gpt2PreTokenizerTest, AliasesShareThePattern) {
  for (const char* pre : {"", "default", "mpt", "gpt-neox", "phi-2", "olmo"}) {
    EXPECT_THAT(Split(pre, "I'm  here 42!"), ElementsAre("I", "'m", " ", " here", " 42", "!"))
        << pre;
  }
}

// Llama 3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//          ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
TEST(Llama3PreTokenizerTest, Splits) {
  for (const char* pre : {"llama-bpe", "llama3", "llama-v3", "falcon3", "dbrx", "smaug-bpe"}) {
    SCOPED_TRACE(pre);
    EXPECT_THAT(Split(pre, "Hello world"), ElementsAre("Hello", " world"));
    EXPECT_THAT(Split(pre, "1234567"), ElementsAre("123", "456", "7"));
    EXPECT_THAT(Split(pre, "I'M here"), ElementsAre("I", "'M", " here"));  // caseless
    EXPECT_THAT(Split(pre, "a!!\n\nb"), ElementsAre("a", "!!\n\n", "b"));
    EXPECT_THAT(Split(pre, "x  \n\ny"), ElementsAre("x", "  \n\n", "y"));
    // Any one non-letter, non-digit, non-newline character prefixes a word.
    EXPECT_THAT(Split(pre, "_foo\tbar"), ElementsAre("_foo", "\tbar"));
    EXPECT_THAT(Split(pre, "x   y"), ElementsAre("x", "  ", " y"));
    EXPECT_THAT(Split(pre, "end  "), ElementsAre("end", "  "));
  }
}

TEST(Qwen2PreTokenizerTest, DigitsOneByOne) {
  EXPECT_THAT(Split("qwen2", "abc 12345"), ElementsAre("abc", " ", "1", "2", "3", "4", "5"));
  EXPECT_THAT(Split("qwen2", "It'S"), ElementsAre("It", "'S"));
}

TEST(StarcoderPreTokenizerTest, EachPieceIsItsOwnSubject) {
  // \p{N} first: "a 1b" -> "a ", "1", "b"; then GPT-2 on "a " sees the space at the end of
  // its subject, so (?!\S) holds and the space stands alone.
  for (const char* pre : {"starcoder", "refact", "smollm", "command-r"}) {
    EXPECT_THAT(Split(pre, "a 1b"), ElementsAre("a", " ", "1", "b")) << pre;
    EXPECT_THAT(Split(pre, "x12"), ElementsAre("x", "1", "2")) << pre;
  }
}

TEST(FalconPreTokenizerTest, PunctuationThenGpt2ThenDigitTriples) {
  EXPECT_THAT(Split("falcon", "x 12345!"), ElementsAre("x", " ", "123", "45", "!"));
  EXPECT_THAT(Split("falcon", "a+=b"), ElementsAre("a", "+=", "b"));
}

TEST(DeepSeekPreTokenizerTest, Coder) {
  EXPECT_THAT(Split("deepseek-coder", "hi\n 42!"), ElementsAre("hi", "\n", " ", "4", "2", "!"));
}

TEST(DeepSeekPreTokenizerTest, Llm) {
  // 中文 = U+4E2D U+6587.
  EXPECT_THAT(Split("deepseek-llm", "Hi \xE4\xB8\xAD\xE6\x96\x87 42  "),
              ElementsAre("Hi", " ", "\xE4\xB8\xAD\xE6\x96\x87", " ", "42", "  "));
  // U+1FD3 and U+2126 (Ohm) end letter ranges, U+0390 and U+03A9 (Omega) are inside
  // them: one letter run, then "!" by the punctuation pattern. The later CJK pattern's
  // U+0800..U+4E00 range then splits U+1FD3 U+2126 off the run.
  EXPECT_THAT(Split("deepseek-llm", "\xE1\xBF\x93\xE2\x84\xA6\xCE\x90\xCE\xA9!"),
              ElementsAre("\xE1\xBF\x93\xE2\x84\xA6", "\xCE\x90\xCE\xA9", "!"));
}

TEST(PreTokenizerFamiliesTest, UnknownNameIsInvalidArgumentNamingIt) {
  const absl::StatusOr<PreTokenizerSpec> spec = FindPreTokenizerSpec("tekken");
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("'tekken'"));
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("tokenizer.ggml.pre"));
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("llama-bpe"));
}

TEST(PreTokenizerFamiliesTest, EveryFamilyCompilesAndSurvivesLongRuns) {
  const std::vector<std::string> names = absl::StrSplit(SupportedPreTokenizers(), ", ");
  for (const char* required :
       {"default", "gpt-2", "llama-bpe", "llama3", "qwen2", "mpt", "starcoder", "deepseek-llm",
        "deepseek-coder", "falcon", "gpt-neox", "refact"}) {
    EXPECT_THAT(names, ::testing::Contains(required));
  }
  // Long runs of one class must not exhaust PCRE2's JIT stack or backtracking limits.
  const size_t n = 256 * 1024;
  const std::vector<std::string> texts = {
      std::string(n, ' '),
      std::string(n, 'a'),
      std::string(n, '7'),
      std::string(n, '!'),
      std::string(n, '\n'),
      absl::StrCat(std::string(n, ' '), "x"),
      absl::StrCat(std::string(n / 2, '\t'), std::string(n / 2, '\n'))};
  for (const std::string& name : names) {
    const absl::StatusOr<PreTokenizerSpec> spec = FindPreTokenizerSpec(name);
    ASSERT_TRUE(spec.ok()) << spec.status();
    absl::StatusOr<PreTokenizer> pre = PreTokenizer::Create(*spec);
    ASSERT_TRUE(pre.ok()) << name << ": " << pre.status();
    for (const std::string& text : texts) {
      const auto words = pre->Split(text);
      ASSERT_TRUE(words.ok()) << name << ": " << words.status();
      EXPECT_EQ(absl::StrJoin(*words, ""), text) << name;
    }
  }
}

}  // namespace
}  // namespace quill::engine
