#include "client/cli/flag_parser.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace quill::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

struct Values {
  std::string addr = "127.0.0.1:50051";
  int max_tokens = 128;
  double temperature = 0;
  uint64_t seed = 0;
  bool json = false;
  absl::Duration timeout = absl::Seconds(60);
  std::vector<std::string> stop;
};

FlagParser MakeParser(Values& v) {
  FlagParser parser("quill test [flags] [PROMPT]", "A test command.");
  parser.AddString("addr", &v.addr, "Server address.");
  parser.AddInt("max-tokens", &v.max_tokens, "Most tokens.");
  parser.AddDouble("temperature", &v.temperature, "Temperature.");
  parser.AddUint64("seed", &v.seed, "Seed.");
  parser.AddBool("json", &v.json, "JSON output.");
  parser.AddDuration("timeout", &v.timeout, "Deadline.");
  parser.AddStringList("stop", &v.stop, "Stop string.");
  return parser;
}

TEST(FlagParserTest, ParsesBothFormsAndPositionals) {
  Values v;
  FlagParser parser = MakeParser(v);
  auto positional = parser.Parse({"--addr", "h:1", "In", "--max-tokens=7", "--temperature", "0.5",
                                  "--json", "--seed=42", "the", "--timeout", "1.5s", "--stop",
                                  "\n", "--stop=Amen", "beginning"});
  ASSERT_TRUE(positional.ok()) << positional.status();
  EXPECT_THAT(*positional, ElementsAre("In", "the", "beginning"));
  EXPECT_EQ(v.addr, "h:1");
  EXPECT_EQ(v.max_tokens, 7);
  EXPECT_EQ(v.temperature, 0.5);
  EXPECT_EQ(v.seed, 42u);
  EXPECT_TRUE(v.json);
  EXPECT_EQ(v.timeout, absl::Milliseconds(1500));
  EXPECT_THAT(v.stop, ElementsAre("\n", "Amen"));
  EXPECT_FALSE(parser.help_requested());
}

TEST(FlagParserTest, DefaultsStayWhenAbsent) {
  Values v;
  FlagParser parser = MakeParser(v);
  auto positional = parser.Parse({});
  ASSERT_TRUE(positional.ok());
  EXPECT_THAT(*positional, IsEmpty());
  EXPECT_EQ(v.max_tokens, 128);
  EXPECT_FALSE(v.json);
}

TEST(FlagParserTest, BoolAcceptsExplicitValue) {
  Values v;
  v.json = true;
  FlagParser parser = MakeParser(v);
  ASSERT_TRUE(parser.Parse({"--json=false"}).ok());
  EXPECT_FALSE(v.json);
}

TEST(FlagParserTest, DoubleDashEndsFlags) {
  Values v;
  FlagParser parser = MakeParser(v);
  auto positional = parser.Parse({"--max-tokens", "3", "--", "--json", "-x"});
  ASSERT_TRUE(positional.ok());
  EXPECT_THAT(*positional, ElementsAre("--json", "-x"));
  EXPECT_FALSE(v.json);
}

TEST(FlagParserTest, Errors) {
  Values v;
  FlagParser parser = MakeParser(v);
  auto unknown = parser.Parse({"--bogus"});
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("--bogus"));
  EXPECT_FALSE(parser.Parse({"--max-tokens", "many"}).ok());
  EXPECT_FALSE(parser.Parse({"--max-tokens"}).ok());
  EXPECT_FALSE(parser.Parse({"--temperature=nan"}).ok());
  EXPECT_FALSE(parser.Parse({"--timeout", "60"}).ok());  // a duration needs a unit
  EXPECT_FALSE(parser.Parse({"--seed", "-1"}).ok());
  EXPECT_FALSE(parser.Parse({"--json=maybe"}).ok());
}

TEST(FlagParserTest, HelpListsFlagsWithDefaults) {
  Values v;
  FlagParser parser = MakeParser(v);
  auto positional = parser.Parse({"--max-tokens", "5", "--help", "--bogus"});
  ASSERT_TRUE(positional.ok());
  EXPECT_TRUE(parser.help_requested());
  const std::string help = parser.Help();
  EXPECT_THAT(help, HasSubstr("Usage: quill test [flags] [PROMPT]"));
  EXPECT_THAT(help, HasSubstr("--addr STR"));
  EXPECT_THAT(help, HasSubstr("[default: \"127.0.0.1:50051\"]"));
  EXPECT_THAT(help, HasSubstr("--timeout DURATION"));
  EXPECT_THAT(help, HasSubstr("[default: 1m]"));
  EXPECT_THAT(help, HasSubstr("--stop STR"));
  EXPECT_THAT(help, HasSubstr("(repeatable)"));
}

}  // namespace
}  // namespace quill::cli
