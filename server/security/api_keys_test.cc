#include "server/security/api_keys.h"

#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_env.h"

namespace quill::server {
namespace {

using ::testing::HasSubstr;

std::string WriteKeys(const std::string& name, const std::string& text) {
  const std::string path = quill::testing::ScratchPath(name);
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

// name= and weight= after a key give its tenant; without a name the tenant is the first 8
// hex digits of the key's SHA-256, never the key.
TEST(ApiKeysTest, KeysCarryTheirTenant) {
  const std::string path =
      WriteKeys("keys6",
                "sk-alpha name=team-a weight=3\nsk-alpha-2\tname=team-a  weight=3\n"
                "sk-beta\nsk-gamma weight=2\n");
  auto keys = ApiKeys::Load(path);
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ((*keys)->size(), 4u);
  absl::StatusOr<Tenant> a = (*keys)->Authenticate("Bearer sk-alpha");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->name, "team-a");
  EXPECT_EQ(a->weight, 3);
  absl::StatusOr<Tenant> a2 = (*keys)->Authenticate("Bearer sk-alpha-2");
  ASSERT_TRUE(a2.ok());
  EXPECT_EQ(a2->name, "team-a");
  absl::StatusOr<Tenant> b = (*keys)->Authenticate("Bearer sk-beta");
  ASSERT_TRUE(b.ok());
  // printf sk-beta | sha256sum
  EXPECT_EQ(b->name, "c29d79ad");
  EXPECT_EQ(b->weight, 1);
  absl::StatusOr<Tenant> g = (*keys)->Authenticate("Bearer sk-gamma");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->name.size(), 8u);
  EXPECT_NE(g->name, b->name);
  EXPECT_EQ(g->weight, 2);
  // The key with fields is still just the key: the fields are not part of it.
  EXPECT_FALSE((*keys)->Check("Bearer sk-alpha name=team-a weight=3").ok());
  EXPECT_EQ((*keys)->Authenticate("Bearer nope").status().code(),
            absl::StatusCode::kUnauthenticated);
}

TEST(ApiKeysTest, BadTenantFieldsAreRefused) {
  struct Case {
    const char* text;
    const char* message;
  } cases[] = {
      {"k1 name=\n", "name="},
      {"k1 weight=0\n", "weight="},
      {"k1 weight=1001\n", "weight="},
      {"k1 weight=two\n", "weight="},
      {"k1 secret2\n", "field 2 is neither"},
      {"k1 name=t weight=1\nk2 name=t weight=2\n", "must share the weight"},
  };
  for (const Case& c : cases) {
    const absl::Status s = ApiKeys::Load(WriteKeys("keys7", c.text)).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.message)) << c.text;
    EXPECT_THAT(std::string(s.message()), ::testing::Not(HasSubstr("secret2")));
  }
  const absl::Status long_name =
      ApiKeys::Load(WriteKeys("keys8", absl::StrCat("k1 name=", std::string(65, 'n'), "\n")))
          .status();
  EXPECT_EQ(long_name.code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace quill::server
