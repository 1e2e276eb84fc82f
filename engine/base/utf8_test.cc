#include "engine/base/utf8.h"

#include <string>

#include "gtest/gtest.h"

namespace quill::engine {
namespace {

const std::string kReplacement = "\xEF\xBF\xBD";  // U+FFFD

TEST(Utf8Test, AcceptsWellFormedText) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ASCII\t\n"));
  EXPECT_TRUE(IsValidUtf8("caf\xC3\xA9"));           // é
  EXPECT_TRUE(IsValidUtf8("\xE4\xB8\xAD"));          // 中
  EXPECT_TRUE(IsValidUtf8("\xF0\x9F\xA6\x99"));      // 🦙
  EXPECT_TRUE(IsValidUtf8("\xED\x9F\xBF"));          // U+D7FF, just below the surrogates
  EXPECT_TRUE(IsValidUtf8("\xEE\x80\x80"));          // U+E000, just above them
  EXPECT_TRUE(IsValidUtf8("\xF4\x8F\xBF\xBF"));      // U+10FFFF
  EXPECT_TRUE(IsValidUtf8(std::string("a\0b", 3)));  // NUL is a character
}

TEST(Utf8Test, RejectsIllFormedText) {
  EXPECT_FALSE(IsValidUtf8("\x80"));              // lone continuation
  EXPECT_FALSE(IsValidUtf8("\xC0\x80"));          // overlong NUL
  EXPECT_FALSE(IsValidUtf8("\xC1\xBF"));          // overlong
  EXPECT_FALSE(IsValidUtf8("\xE0\x80\x80"));      // overlong 3-byte
  EXPECT_FALSE(IsValidUtf8("\xF0\x80\x80\x80"));  // overlong 4-byte
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));      // U+D800 surrogate
  EXPECT_FALSE(IsValidUtf8("\xED\xBF\xBF"));      // U+DFFF surrogate
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));  // U+110000
  EXPECT_FALSE(IsValidUtf8("\xF5\x80\x80\x80"));
  EXPECT_FALSE(IsValidUtf8("\xFF"));
  EXPECT_FALSE(IsValidUtf8("ok\xE2\x82"));  // truncated at the end
  EXPECT_FALSE(
      IsValidUtf8("\xE2\x82"
                  "a"));  // truncated inside
}

TEST(Utf8Test, FindInvalidReportsTheOffset) {
  EXPECT_EQ(FindInvalidUtf8("hello"), absl::string_view::npos);
  EXPECT_EQ(FindInvalidUtf8("ab\xFF"), 2u);
  EXPECT_EQ(FindInvalidUtf8("\xC3\xA9\xC3"), 2u);
}

TEST(Utf8Test, DecodesCodePoints) {
  Utf8Char c = DecodeUtf8Char("\xF0\x9F\xA6\x99", 0);
  EXPECT_EQ(c.kind, Utf8Char::Kind::kValid);
  EXPECT_EQ(c.length, 4);
  EXPECT_EQ(c.code_point, 0x1F999u);
  c = DecodeUtf8Char("x\xC3\xA9", 1);
  EXPECT_EQ(c.kind, Utf8Char::Kind::kValid);
  EXPECT_EQ(c.code_point, 0xE9u);
  c = DecodeUtf8Char("\xF0\x9F\xA6", 0);
  EXPECT_EQ(c.kind, Utf8Char::Kind::kTruncated);
  EXPECT_EQ(c.length, 3);
}

TEST(Utf8Test, AppendUtf8EncodesEveryLength) {
  std::string s;
  AppendUtf8(0x41, &s);
  AppendUtf8(0xE9, &s);
  AppendUtf8(0x4E2D, &s);
  AppendUtf8(0x1F999, &s);
  EXPECT_EQ(s, "A\xC3\xA9\xE4\xB8\xAD\xF0\x9F\xA6\x99");
}

TEST(Utf8Test, SanitizeReplacesMaximalSubparts) {
  const auto sanitize = [](absl::string_view in) {
    std::string out;
    AppendSanitizedUtf8(in, /*hold_back_truncated=*/false, &out);
    return out;
  };
  EXPECT_EQ(sanitize("a\x80"
                     "b"),
            "a" + kReplacement + "b");
  // C0 can never start a character and 80 is a lone continuation: two replacements.
  EXPECT_EQ(sanitize("\xC0\x80"), kReplacement + kReplacement);
  // E2 82 is one maximal subpart of a 3-byte character cut short: one replacement.
  EXPECT_EQ(sanitize("\xE2\x82"
                     "a"),
            kReplacement + "a");
  EXPECT_EQ(sanitize("\xF0\x9F\xA6"), kReplacement);
  // ED A0 80: ED allows only 80..9F next, so ED, A0 and 80 are three subparts.
  EXPECT_EQ(sanitize("\xED\xA0\x80"), kReplacement + kReplacement + kReplacement);
  EXPECT_EQ(sanitize("caf\xC3\xA9"), "caf\xC3\xA9");
}

TEST(Utf8Test, SanitizeCanHoldBackATruncatedTail) {
  std::string out;
  EXPECT_EQ(AppendSanitizedUtf8("ab\xF0\x9F", /*hold_back_truncated=*/true, &out), 2u);
  EXPECT_EQ(out, "ab");
  out.clear();
  // An invalid byte is not held back, only a valid prefix running into the end.
  EXPECT_EQ(AppendSanitizedUtf8("ab\xFF", /*hold_back_truncated=*/true, &out), 3u);
  EXPECT_EQ(out, "ab" + kReplacement);
}

}  // namespace
}  // namespace quill::engine
