#include "server/server_options.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace quill::server {
namespace {

TEST(ByteSizeTest, ParsesUnits) {
  const struct {
    const char* text;
    int64_t bytes;
  } cases[] = {
      {"0", 0},
      {"268435456", 268435456},
      {"512MiB", int64_t{512} << 20},
      {"2GiB", int64_t{2} << 30},
      {"2gib", int64_t{2} << 30},
      {"64M", int64_t{64} << 20},
      {"1.5G", int64_t{3} << 29},
      {"16KiB", 16384},
      {"16k", 16384},
      {"500MB", 500000000},
      {"10KB", 10000},
      {"1TB", 1000000000000},
      {"1TiB", int64_t{1} << 40},
      {"123B", 123},
      {" 8 MiB ", int64_t{8} << 20},
  };
  for (const auto& c : cases) {
    absl::StatusOr<int64_t> got = ParseByteSize(c.text);
    ASSERT_TRUE(got.ok()) << c.text << ": " << got.status();
    EXPECT_EQ(*got, c.bytes) << c.text;
  }
}

TEST(ByteSizeTest, RejectsGarbage) {
  for (const char* text : {"", "MiB", "-1", "-5MiB", "12XB", "1e3", "abc", "1..2G", "inf",
                           "nan", "99999999999TiB"}) {
    EXPECT_EQ(ParseByteSize(text).status().code(), absl::StatusCode::kInvalidArgument) << text;
  }
}

TEST(ByteSizeTest, FormatsExactUnits) {
  EXPECT_EQ(FormatByteSize(int64_t{512} << 20), "512MiB");
  EXPECT_EQ(FormatByteSize(int64_t{2} << 30), "2GiB");
  EXPECT_EQ(FormatByteSize(1536), "1536B");
  EXPECT_EQ(FormatByteSize(3072), "3KiB");
  EXPECT_EQ(FormatByteSize(1000), "1000B");
  // Round trip.
  EXPECT_EQ(*ParseByteSize(FormatByteSize(int64_t{3} << 30)), int64_t{3} << 30);
}

TEST(ByteSizeTest, HumanBytes) {
  EXPECT_EQ(HumanBytes(512), "512B");
  EXPECT_EQ(HumanBytes(3674624), "3.50MiB");
  EXPECT_EQ(HumanBytes(int64_t{256} << 20), "256.00MiB");
  EXPECT_EQ(HumanBytes(int64_t{3} << 29), "1.50GiB");
}

TEST(PrecisionTest, ParsesBothNames) {
  EXPECT_EQ(*ParsePrecision("fast"), engine::kernels::Precision::kFast);
  EXPECT_EQ(*ParsePrecision("EXACT"), engine::kernels::Precision::kExact);
  EXPECT_EQ(ParsePrecision("bf16").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PrecisionName(engine::kernels::Precision::kExact), "exact");
  EXPECT_EQ(PrecisionName(engine::kernels::Precision::kFast), "fast");
}

TEST(KvCacheTypeTest, ParsesAutoAndEachElement) {
  EXPECT_EQ(*ParseKvCacheType("auto"), std::nullopt);
  EXPECT_EQ(*ParseKvCacheType("f32"), engine::kernels::KvElement::kF32);
  EXPECT_EQ(*ParseKvCacheType("F16"), engine::kernels::KvElement::kF16);
  EXPECT_EQ(*ParseKvCacheType("q8"), engine::kernels::KvElement::kQ8);
  EXPECT_EQ(*ParseKvCacheType("BF16"), engine::kernels::KvElement::kBf16);
  EXPECT_EQ(ParseKvCacheType("q4").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseKvCacheType("").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(DefaultModelTest, CandidateOrder) {
  EXPECT_THAT(DefaultModelCandidates("/opt/quill/bin/quill-server", "/m/env.gguf"),
              ::testing::ElementsAre("/m/env.gguf",
                                     "/opt/quill/bin/../share/quill/models/kjv-1m.gguf",
                                     "/opt/quill/bin/../../models/kjv-1m.gguf",
                                     "./models/kjv-1m.gguf"));
  EXPECT_THAT(DefaultModelCandidates("/repo/build/server/quill-server", ""),
              ::testing::ElementsAre("/repo/build/server/../share/quill/models/kjv-1m.gguf",
                                     "/repo/build/server/../../models/kjv-1m.gguf",
                                     "./models/kjv-1m.gguf"));
}

TEST(DefaultModelTest, FindsTheFirstExistingFile) {
  char dir_template[] = "/tmp/quill_model_test_XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string root = dir_template;
  ASSERT_EQ(system(("mkdir -p " + root + "/repo/build/server " + root + "/repo/models").c_str()),
            0);
  const std::string exe = root + "/repo/build/server/quill-server";
  absl::StatusOr<std::string> missing = ResolveDefaultModel(exe, "");
  // (./models/kjv-1m.gguf may exist in the test's working directory; only check the error
  // when it does not.)
  if (!missing.ok()) {
    EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
    EXPECT_THAT(std::string(missing.status().message()),
                ::testing::HasSubstr(root + "/repo/build/server/../../models/kjv-1m.gguf"));
  }
  std::ofstream(root + "/repo/models/kjv-1m.gguf") << "x";
  absl::StatusOr<std::string> found = ResolveDefaultModel(exe, "");
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(*found, root + "/repo/build/server/../../models/kjv-1m.gguf");
  // $QUILL_MODEL comes first when it exists.
  std::ofstream(root + "/env.gguf") << "x";
  EXPECT_EQ(*ResolveDefaultModel(exe, root + "/env.gguf"), root + "/env.gguf");
  ASSERT_EQ(system(("rm -rf " + root).c_str()), 0);
}

TEST(JoinHostPortTest, BracketsIpv6) {
  EXPECT_EQ(JoinHostPort("127.0.0.1", 50051), "127.0.0.1:50051");
  EXPECT_EQ(JoinHostPort("::", 9090), "[::]:9090");
  EXPECT_EQ(JoinHostPort("[::1]", 1), "[::1]:1");
}

TEST(IsLoopbackHostTest, OnlyAddressesOfThisMachine) {
  for (const char* host : {"127.0.0.1", "127.1.2.3", "localhost", "::1", "[::1]"}) {
    EXPECT_TRUE(IsLoopbackHost(host)) << host;
  }
  for (const char* host : {"0.0.0.0", "::", "[::]", "", "10.0.0.1", "128.0.0.1", "example.com",
                           "localhost.example.com", "::2"}) {
    EXPECT_FALSE(IsLoopbackHost(host)) << host;
  }
}

}  // namespace
}  // namespace quill::server
