// quill-server in process on 127.0.0.1 with TLS, mutual TLS, API keys and reflection on
// or off: real gRPC and HTTP clients, certificates made for the test by the openssl tool
// (a CA, a server certificate for 127.0.0.1, a client certificate, and a stranger CA).

#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "client/quill_client.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/byte_buffer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/server.h"
#include "tests/integration/server_test_util.h"
#include "tests/integration/test_server.h"
#include "tests/testing/http_client.h"
#include "tests/testing/test_env.h"

namespace quill::testing {
namespace {

namespace v1 = ::quill::v1;
using ::testing::HasSubstr;

std::string ModelPath() { return SharedModelPath("kjv-1m.gguf"); }

// Certificates for one test binary, made once.
struct Pki {
  std::string dir, ca, server_cert, server_key, client_cert, client_key, stranger_ca;
};

const Pki* MakePki() {
  static const Pki* const pki = []() -> Pki* {
    auto* p = new Pki;
    p->dir = ScratchPath("pki");
    const std::string d = p->dir;
    const std::string ext = ScratchPath("pki.ext");
    p->ca = d + "/ca.pem";
    p->server_cert = d + "/server.pem";
    p->server_key = d + "/server.key";
    p->client_cert = d + "/client.pem";
    p->client_key = d + "/client.key";
    p->stranger_ca = d + "/stranger.pem";
    std::ofstream(ext) << "subjectAltName=IP:127.0.0.1,DNS:localhost\n";
    const std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    const std::string script = absl::StrCat(
        "set -e; mkdir -p ", d, "; cd ", d, "\n",
        "openssl req -x509 ", ec, " -keyout ca.key -out ca.pem -days 2 -subj /CN=quill-test-ca\n",
        "openssl req -x509 ", ec,
        " -keyout stranger.key -out stranger.pem -days 2 -subj /CN=stranger\n",
        "openssl req ", ec, " -keyout server.key -out server.csr -subj /CN=localhost\n",
        "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2",
        " -extfile ", ext, " -out server.pem\n",
        "openssl req ", ec, " -keyout client.key -out client.csr -subj /CN=quill-test-client\n",
        "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2",
        " -out client.pem\n");
    const std::string command = "bash -c '" + script + "' >/dev/null 2>&1";
    if (std::system(command.c_str()) != 0) {
      delete p;
      return nullptr;
    }
    return p;
  }();
  return pki;
}

server::ServerOptions BaseOptions() {
  server::ServerOptions options = KjvTestServerOptions(8 << 20);
  options.http_port = 0;
  return options;
}

std::string WriteFile(const std::string& name, const std::string& text) {
  return WriteScratchFile(name, text);
}

absl::Status GenerateStatus(client::QuillClient& client) {
  return client.Generate(TextRequest("In the beginning", 4), nullptr, absl::Seconds(20));
}

class SecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (ModelPath().empty()) GTEST_SKIP() << "shared assets not found (QUILL_SHARED_DIR)";
  }
};

TEST_F(SecurityTest, ApiKeysGuardEveryGrpcCallButHealth) {
  server::ServerOptions options = BaseOptions();
  options.api_keys_file = WriteFile("grpc-keys", "# the team\nkey-one\nkey-two\n");
  std::unique_ptr<server::Server> server = StartTestServer(options);
  ASSERT_NE(server, nullptr);

  std::unique_ptr<client::QuillClient> anonymous = client::QuillClient::Connect(server->address());
  const absl::Status missing = GenerateStatus(*anonymous);
  EXPECT_EQ(missing.code(), absl::StatusCode::kUnauthenticated) << missing;
  EXPECT_THAT(std::string(missing.message()), HasSubstr("missing API key"));
  EXPECT_EQ(anonymous->Tokenize("In the beginning").status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(anonymous->GetModelInfo(absl::Seconds(10)).status().code(),
            absl::StatusCode::kUnauthenticated);
  // Chat is checked before anything else (this server has no chat template).
  const v1::ChatRequest chat = ChatRequestOf({{"user", "In the beginning"}}, 4);
  EXPECT_EQ(anonymous->ChatText(chat, absl::Seconds(10)).status().code(),
            absl::StatusCode::kUnauthenticated);
  // Health stays open, for load balancers and probes.
  absl::StatusOr<client::HealthStatus> health = anonymous->Health("", absl::Seconds(10));
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, client::HealthStatus::kServing);

  client::ConnectOptions wrong;
  wrong.api_key = "key-three";
  auto wrong_client = client::QuillClient::Connect(server->address(), wrong);
  ASSERT_TRUE(wrong_client.ok()) << wrong_client.status();
  const absl::Status refused = GenerateStatus(**wrong_client);
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(refused.message()), HasSubstr("invalid API key"));

  for (const char* key : {"key-one", "key-two"}) {
    client::ConnectOptions right;
    right.api_key = key;
    auto client = client::QuillClient::Connect(server->address(), right);
    ASSERT_TRUE(client.ok()) << client.status();
    EXPECT_TRUE(GenerateStatus(**client).ok()) << key;
    EXPECT_TRUE((*client)->Tokenize("In the beginning").ok()) << key;
    EXPECT_TRUE((*client)->GetModelInfo(absl::Seconds(10)).ok()) << key;
    EXPECT_EQ((*client)->ChatText(chat, absl::Seconds(10)).status().code(),
              absl::StatusCode::kFailedPrecondition)
        << key;
  }
}

TEST_F(SecurityTest, ApiKeysGuardTheHttpApiButHealth) {
  server::ServerOptions options = BaseOptions();
  options.api_keys_file = WriteFile("http-keys", "http-key\n");
  std::unique_ptr<server::Server> server = StartTestServer(options);
  ASSERT_NE(server, nullptr);
  const std::string body = R"({"prompt": "In the beginning", "max_tokens": 4})";

  auto http = HttpClient::Connect("127.0.0.1", server->http_port());
  ASSERT_TRUE(http.ok()) << http.status();
  absl::StatusOr<HttpReply> reply = (*http)->Request("POST", "/v1/completions", body);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->status, 401);
  EXPECT_EQ(reply->Header("www-authenticate"), "Bearer");
  const nlohmann::json error = nlohmann::json::parse(reply->body);
  EXPECT_EQ(error["error"]["code"], "invalid_api_key");
  EXPECT_THAT(error["error"]["message"].get<std::string>(), HasSubstr("missing API key"));

  reply = (*http)->Request("GET", "/v1/models");
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->status, 401);
  for (const char* path : {"/tokenize", "/detokenize"}) {
    reply = (*http)->Request("POST", path, R"({"prompt": "x", "tokens": [1]})");
    ASSERT_TRUE(reply.ok()) << reply.status();
    EXPECT_EQ(reply->status, 401) << path;
  }
  reply = (*http)->Request("GET", "/health");
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->status, 200);

  ASSERT_TRUE((*http)->Send("POST", "/v1/completions", body, "Authorization: Bearer nope\r\n").ok());
  reply = (*http)->ReadResponse();
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->status, 401);
  ASSERT_TRUE(
      (*http)->Send("POST", "/v1/completions", body, "Authorization: Bearer http-key\r\n").ok());
  reply = (*http)->ReadResponse();
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->status, 200) << reply->body;
  EXPECT_EQ(nlohmann::json::parse(reply->body)["usage"]["completion_tokens"], 4);
}

TEST_F(SecurityTest, ReloadedKeysReplaceTheOldOnes) {
  server::ServerOptions options = BaseOptions();
  options.api_keys_file = WriteFile("reload-keys", "before\n");
  std::unique_ptr<server::Server> server = StartTestServer(options);
  ASSERT_NE(server, nullptr);
  client::ConnectOptions before, after;
  before.api_key = "before";
  after.api_key = "after";
  auto before_client = client::QuillClient::Connect(server->address(), before);
  auto after_client = client::QuillClient::Connect(server->address(), after);
  ASSERT_TRUE(before_client.ok() && after_client.ok());
  EXPECT_TRUE(GenerateStatus(**before_client).ok());
  EXPECT_EQ(GenerateStatus(**after_client).code(), absl::StatusCode::kUnauthenticated);

  WriteFile("reload-keys", "after\n");
  ASSERT_TRUE(server->ReloadApiKeys().ok());
  EXPECT_EQ(GenerateStatus(**before_client).code(), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(GenerateStatus(**after_client).ok());

  // A broken file is refused and the keys in force stay.
  WriteFile("reload-keys", "\n");
  EXPECT_EQ(server->ReloadApiKeys().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(GenerateStatus(**after_client).ok());
}

TEST_F(SecurityTest, TlsServesClientsThatTrustItsCa) {
  const Pki* pki = MakePki();
  if (pki == nullptr) GTEST_SKIP() << "the openssl tool could not make test certificates";
  server::ServerOptions options = BaseOptions();
  options.tls.cert = pki->server_cert;
  options.tls.key = pki->server_key;
  std::unique_ptr<server::Server> server = StartTestServer(options);
  ASSERT_NE(server, nullptr);

  client::ConnectOptions trusting;
  trusting.tls_ca_file = pki->ca;
  auto tls_client = client::QuillClient::Connect(server->address(), trusting);
  ASSERT_TRUE(tls_client.ok()) << tls_client.status();
  const Stream stream = Collect(**tls_client, TextRequest("In the beginning", 8));
  ASSERT_TRUE(stream.status.ok()) << stream.status;
  EXPECT_EQ(stream.ids.size(), 8u);

  // Plaintext cannot talk to it, nor can a client trusting another CA.
  std::unique_ptr<client::QuillClient> plaintext = client::QuillClient::Connect(server->address());
  EXPECT_EQ(GenerateStatus(*plaintext).code(), absl::StatusCode::kUnavailable);
  client::ConnectOptions distrusting;
  distrusting.tls_ca_file = pki->stranger_ca;
  auto stranger = client::QuillClient::Connect(server->address(), distrusting);
  ASSERT_TRUE(stranger.ok()) << stranger.status();
  EXPECT_EQ(GenerateStatus(**stranger).code(), absl::StatusCode::kUnavailable);
}

TEST_F(SecurityTest, MutualTlsNeedsAClientCertificateFromTheCa) {
  const Pki* pki = MakePki();
  if (pki == nullptr) GTEST_SKIP() << "the openssl tool could not make test certificates";
  server::ServerOptions options = BaseOptions();
  options.tls.cert = pki->server_cert;
  options.tls.key = pki->server_key;
  options.tls.client_ca = pki->ca;
  std::unique_ptr<server::Server> server = StartTestServer(options);
  ASSERT_NE(server, nullptr);

  client::ConnectOptions no_certificate;
  no_certificate.tls_ca_file = pki->ca;
  auto anonymous = client::QuillClient::Connect(server->address(), no_certificate);
  ASSERT_TRUE(anonymous.ok()) << anonymous.status();
  EXPECT_EQ(GenerateStatus(**anonymous).code(), absl::StatusCode::kUnavailable);

  client::ConnectOptions with_certificate = no_certificate;
  with_certificate.tls_cert_file = pki->client_cert;
  with_certificate.tls_key_file = pki->client_key;
  auto known = client::QuillClient::Connect(server->address(), with_certificate);
  ASSERT_TRUE(known.ok()) << known.status();
  EXPECT_TRUE(GenerateStatus(**known).ok());
}

TEST_F(SecurityTest, BadTlsFilesFailAtStartupNamingTheFlag) {
  server::ServerOptions options = BaseOptions();
  options.tls.cert = ::testing::TempDir() + "/no-such-cert.pem";
  options.tls.key = ::testing::TempDir() + "/no-such-key.pem";
  absl::StatusOr<std::unique_ptr<server::Server>> server = server::Server::Create(options);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(server.status().message()), HasSubstr("--tls-cert"));

  options.tls.cert = WriteFile("not-a-cert.pem", "hello\n");
  server = server::Server::Create(options);
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(std::string(server.status().message()), HasSubstr("not a PEM file"));

  options.tls.key.clear();
  server = server::Server::Create(options);
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(std::string(server.status().message()), HasSubstr("must be given together"));
}

// Asks the reflection service to list the services; UNIMPLEMENTED when it is off.
absl::StatusOr<std::string> ListServices(const std::string& address) {
  grpc::GenericStub stub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  // ServerReflectionRequest{list_services: ""}: field 7, length-delimited, empty.
  const char request_bytes[] = {0x3a, 0x00};
  grpc::Slice slice(request_bytes, sizeof(request_bytes));
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  grpc::Status status;
  absl::Notification done;
  stub.UnaryCall(&context, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", {},
                 &request, &response, [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  done.WaitForNotification();
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                        status.error_message());
  }
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return absl::InternalError("unreadable response");
  std::string bytes;
  for (const grpc::Slice& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return bytes;
}

TEST_F(SecurityTest, ReflectionIsOnForLoopbackUnlessTurnedOff) {
  std::unique_ptr<server::Server> server = StartTestServer(BaseOptions());
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(server->reflection_enabled());
  absl::StatusOr<std::string> services = ListServices(server->address());
  ASSERT_TRUE(services.ok()) << services.status();
  EXPECT_THAT(*services, HasSubstr("quill.v1.Generator"));

  server::ServerOptions options = BaseOptions();
  options.reflection = false;
  std::unique_ptr<server::Server> quiet = StartTestServer(options);
  ASSERT_NE(quiet, nullptr);
  EXPECT_FALSE(quiet->reflection_enabled());
  EXPECT_EQ(ListServices(quiet->address()).status().code(), absl::StatusCode::kUnimplemented);
  // The first server still has it: the choice is per server, not per process.
  EXPECT_TRUE(ListServices(server->address()).ok());
}

}  // namespace
}  // namespace quill::testing
