#include "engine/base/log_field.h"

#include "gtest/gtest.h"

namespace quill {
namespace {

TEST(LogFieldTest, PlainTokensAreUnchanged) {
  EXPECT_EQ(LogField("req-0001_a.b:c/d"), "req-0001_a.b:c/d");
}

TEST(LogFieldTest, AnythingElseIsQuotedAndEscaped) {
  EXPECT_EQ(LogField(""), "\"\"");
  EXPECT_EQ(LogField("two words"), "\"two words\"");
  EXPECT_EQ(LogField("a=b"), "\"a=b\"");
  // A newline cannot start a forged log line; quotes cannot close the field early.
  EXPECT_EQ(LogField("x\nfinished request_id=evil"), "\"x\\nfinished request_id=evil\"");
  EXPECT_EQ(LogField("say \"hi\" \\o/"), "\"say \\\"hi\\\" \\\\o/\"");
  EXPECT_EQ(LogField(std::string("\x01\x7f\xc3\xa9", 4)), "\"\\x01\\x7f\\xc3\\xa9\"");
}

}  // namespace
}  // namespace quill
