#include "server/security/api_keys.h"

#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace quill::server {
namespace {

using ::testing::HasSubstr;

std::string WriteKeys(const std::string& name, const std::string& text) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/", name);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(ApiKeysTest, AcceptsEveryKeyInTheFileAndNothingElse) {
  const std::string path =
      WriteKeys("keys1", "# team A\nsk-alpha-123\n\n   sk-beta-456  \r\n# sk-commented\n");
  absl::StatusOr<std::unique_ptr<ApiKeys>> keys = ApiKeys::Load(path);
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ((*keys)->size(), 2u);
  EXPECT_TRUE((*keys)->Check("Bearer sk-alpha-123").ok());
  EXPECT_TRUE((*keys)->Check("bearer sk-beta-456").ok());  // the scheme is case-insensitive
  EXPECT_TRUE((*keys)->Check("BEARER sk-beta-456").ok());
  for (const char* wrong : {"Bearer sk-commented", "Bearer sk-alpha-12", "Bearer sk-alpha-1234",
                            "Bearer SK-ALPHA-123", "Bearer # team A", "Bearer "}) {
    const absl::Status s = (*keys)->Check(wrong);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << wrong;
  }
  EXPECT_THAT(std::string((*keys)->Check("Bearer nope").message()), HasSubstr("invalid API key"));
}

TEST(ApiKeysTest, MissingOrMalformedHeaderSaysWhatIsWrong) {
  auto keys = ApiKeys::Load(WriteKeys("keys2", "k1\n"));
  ASSERT_TRUE(keys.ok());
  EXPECT_THAT(std::string((*keys)->Check("").message()), HasSubstr("missing API key"));
  EXPECT_THAT(std::string((*keys)->Check("Basic azE6").message()), HasSubstr("Bearer <key>"));
  EXPECT_THAT(std::string((*keys)->Check("k1").message()), HasSubstr("Bearer <key>"));
}

TEST(ApiKeysTest, ReloadReplacesTheKeysAndAFailedReloadKeepsThem) {
  const std::string path = WriteKeys("keys3", "old-key\n");
  auto keys = ApiKeys::Load(path);
  ASSERT_TRUE(keys.ok());
  WriteKeys("keys3", "new-key\n");
  ASSERT_TRUE((*keys)->Reload().ok());
  EXPECT_TRUE((*keys)->Check("Bearer new-key").ok());
  EXPECT_FALSE((*keys)->Check("Bearer old-key").ok());
  // An emptied file is a mistake, not "let nobody in" or "let everybody in".
  WriteKeys("keys3", "# all gone\n");
  const absl::Status s = (*keys)->Reload();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("holds no keys"));
  EXPECT_TRUE((*keys)->Check("Bearer new-key").ok());
}

TEST(ApiKeysTest, BadFilesAreRefusedWithoutEchoingKeys) {
  EXPECT_EQ(ApiKeys::Load(::testing::TempDir() + "/no-such-keys").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(ApiKeys::Load(WriteKeys("keys4", "\n# nothing\n")).status().code(),
            absl::StatusCode::kInvalidArgument);
  const absl::Status s = ApiKeys::Load(WriteKeys("keys5", "good\nsecret with space\n")).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("line 2"));
  EXPECT_THAT(std::string(s.message()), ::testing::Not(HasSubstr("secret")));
}

}  // namespace
}  // namespace quill::server
