#include "server/security/tenant.h"

#include <fstream>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/security/api_keys.h"
#include "tests/testing/test_env.h"

namespace quill::server {
namespace {

using ::testing::HasSubstr;

TEST(TenantTest, WithoutKeysTheHeaderNamesTheTenant) {
  absl::StatusOr<Tenant> none = ResolveTenant(nullptr, "", std::nullopt);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->name, "");
  EXPECT_EQ(none->weight, 1);
  absl::StatusOr<Tenant> named = ResolveTenant(nullptr, "Bearer ignored", "team b");
  ASSERT_TRUE(named.ok());
  EXPECT_EQ(named->name, "team b");
  EXPECT_TRUE(ResolveTenant(nullptr, "", std::string(64, 'x')).ok());
}

TEST(TenantTest, MalformedHeaderIsInvalidArgument) {
  for (const std::string& bad : {std::string(65, 'x'), std::string("a\nb"), std::string("\x7f"),
                                 std::string("caf\xc3\xa9")}) {
    const absl::Status s = ResolveTenant(nullptr, "", bad).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(s.message()), HasSubstr("x-quill-tenant"));
  }
}

// With keys the key decides; a header naming another tenant changes nothing.
TEST(TenantTest, WithKeysTheHeaderIsIgnored) {
  const std::string path = quill::testing::ScratchPath("tenant-keys");
  std::ofstream(path) << "key-a name=alice\nkey-b name=bob weight=2\n";
  auto keys = ApiKeys::Load(path);
  ASSERT_TRUE(keys.ok()) << keys.status();
  absl::StatusOr<Tenant> t = ResolveTenant(keys->get(), "Bearer key-a", "bob");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->name, "alice");
  EXPECT_EQ(t->weight, 1);
  // Not even validated: it plays no part.
  t = ResolveTenant(keys->get(), "Bearer key-b", std::string("\n"));
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->name, "bob");
  EXPECT_EQ(t->weight, 2);
  EXPECT_EQ(ResolveTenant(keys->get(), "", "alice").status().code(),
            absl::StatusCode::kUnauthenticated);
}

}  // namespace
}  // namespace quill::server
