// QuillClient against an in-process fake Generator service (no engine, no model): checks
// stream order, status conversion, deadlines, cancellation and the health check.

#include "client/quill_client.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "gtest/gtest.h"

namespace quill::client {
namespace {

using ::testing::ElementsAre;

// Behaviour is chosen by the prompt: "abc" streams one message per letter, "fail" returns
// INVALID_ARGUMENT, "forever" streams until the client goes away.
class FakeGenerator final : public quill::v1::Generator::Service {
 public:
  grpc::Status Generate(grpc::ServerContext* context, const quill::v1::GenerateRequest* request,
                        grpc::ServerWriter<quill::v1::GenerateResponse>* writer) override {
    if (request->prompt() == "fail") {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "max_tokens must be >= 1");
    }
    if (request->prompt() == "forever") {
      // Bounded so that a broken client cannot hang the test binary.
      for (int i = 0; i < 20000 && !context->IsCancelled(); ++i) {
        quill::v1::GenerateResponse response;
        response.set_request_id(request->request_id());
        response.add_token_ids(i);
        response.set_text("x");
        writer->Write(response);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      saw_cancel_ = context->IsCancelled();
      return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    }
    const std::string& prompt = request->prompt();
    for (size_t i = 0; i < prompt.size(); ++i) {
      quill::v1::GenerateResponse response;
      response.set_request_id(request->request_id());
      response.add_token_ids(static_cast<int32_t>(100 + i));
      response.set_text(std::string(1, prompt[i]));
      if (i + 1 == prompt.size()) {
        response.set_finish_reason(quill::v1::LENGTH);
        response.mutable_usage()->set_prompt_tokens(7);
        response.mutable_usage()->set_completion_tokens(static_cast<int32_t>(prompt.size()));
      }
      writer->Write(response);
    }
    return grpc::Status::OK;
  }

  grpc::Status Tokenize(grpc::ServerContext*, const quill::v1::TokenizeRequest* request,
                        quill::v1::TokenizeResponse* response) override {
    for (char c : request->text()) {
      response->add_token_ids(static_cast<unsigned char>(c));
      response->add_pieces(std::string(1, c));
    }
    if (request->add_special_tokens()) response->mutable_token_ids()->Add(1);
    response->set_text(request->text());
    return grpc::Status::OK;
  }

  grpc::Status GetModelInfo(grpc::ServerContext*, const quill::v1::GetModelInfoRequest*,
                            quill::v1::ModelInfo* info) override {
    info->set_name("fake");
    info->set_vocab_size(1024);
    return grpc::Status::OK;
  }

  std::atomic<bool> saw_cancel_{false};
};

class QuillClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port, 0);
    client_ = QuillClient::Connect("127.0.0.1:" + std::to_string(port));
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  }

  quill::v1::GenerateRequest Request(const std::string& prompt) {
    quill::v1::GenerateRequest request;
    request.set_request_id("r1");
    request.set_prompt(prompt);
    request.set_max_tokens(16);
    return request;
  }

  FakeGenerator service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<QuillClient> client_;
};

TEST_F(QuillClientTest, StreamsMessagesInOrder) {
  std::string text;
  std::vector<int32_t> ids;
  quill::v1::FinishReason last_reason = quill::v1::FINISH_REASON_UNSPECIFIED;
  absl::Status status = client_->Generate(
      Request("abc"), [&](const quill::v1::GenerateResponse& response) {
        EXPECT_EQ(response.request_id(), "r1");
        text += response.text();
        ids.insert(ids.end(), response.token_ids().begin(), response.token_ids().end());
        last_reason = response.finish_reason();
      });
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(text, "abc");
  EXPECT_THAT(ids, ElementsAre(100, 101, 102));
  EXPECT_EQ(last_reason, quill::v1::LENGTH);
}

TEST_F(QuillClientTest, GenerateTextCollectsTheStream) {
  absl::StatusOr<GenerateResult> result = client_->GenerateText(Request("hello"));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->text, "hello");
  EXPECT_EQ(result->num_messages, 5);
  EXPECT_EQ(result->request_id, "r1");
  EXPECT_EQ(result->last.usage().completion_tokens(), 5);
  EXPECT_EQ(FinishReasonName(result->last.finish_reason()), "LENGTH");
}

TEST_F(QuillClientTest, ServerErrorKeepsCodeAndMessage) {
  int messages = 0;
  absl::Status status =
      client_->Generate(Request("fail"), [&](const quill::v1::GenerateResponse&) { ++messages; });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "max_tokens must be >= 1");
  EXPECT_EQ(messages, 0);
}

TEST_F(QuillClientTest, DeadlineExceeded) {
  absl::Status status = client_->Generate(
      Request("forever"), [](const quill::v1::GenerateResponse&) {}, absl::Milliseconds(50));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
}

TEST_F(QuillClientTest, CancelFromAnotherThread) {
  GenerateCall call;
  absl::Notification first_message;
  std::thread canceller([&] {
    first_message.WaitForNotification();
    call.Cancel();
  });
  int messages = 0;
  absl::Status status = client_->Generate(
      Request("forever"),
      [&](const quill::v1::GenerateResponse&) {
        if (++messages == 1) first_message.Notify();
      },
      absl::InfiniteDuration(), nullptr, &call);
  canceller.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  EXPECT_TRUE(call.cancelled());
  EXPECT_GE(messages, 1);
}

TEST_F(QuillClientTest, CancelFromTheCallback) {
  GenerateCall call;
  int messages = 0;
  absl::Status status = client_->Generate(
      Request("forever"),
      [&](const quill::v1::GenerateResponse&) {
        if (++messages == 3) call.Cancel();
      },
      absl::InfiniteDuration(), nullptr, &call);
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  EXPECT_GE(messages, 3);
}

TEST_F(QuillClientTest, CancelBeforeStartNeverSends) {
  GenerateCall call;
  call.Cancel();
  int messages = 0;
  absl::Status status = client_->Generate(
      Request("abc"), [&](const quill::v1::GenerateResponse&) { ++messages; },
      absl::InfiniteDuration(), nullptr, &call);
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(messages, 0);
}

TEST_F(QuillClientTest, HookSeesTheContext) {
  bool called = false;
  absl::Status status = client_->Generate(
      Request("ab"), [](const quill::v1::GenerateResponse&) {}, absl::Seconds(30),
      [&](grpc::ClientContext* context) {
        called = true;
        context->AddMetadata("x-quill-test", "1");
      });
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_TRUE(called);
}

TEST_F(QuillClientTest, TokenizeAndModelInfo) {
  absl::StatusOr<quill::v1::TokenizeResponse> tokens = client_->Tokenize("hi", true);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_THAT(tokens->token_ids(), ElementsAre('h', 'i', 1));
  EXPECT_THAT(tokens->pieces(), ElementsAre("h", "i"));

  absl::StatusOr<quill::v1::ModelInfo> info = client_->GetModelInfo(absl::Seconds(30));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->name(), "fake");
  EXPECT_EQ(info->vocab_size(), 1024);
}

TEST_F(QuillClientTest, HealthReportsServingAndUnknownServices) {
  absl::StatusOr<HealthStatus> health = client_->Health("", absl::Seconds(30));
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, HealthStatus::kServing);
  EXPECT_EQ(HealthStatusName(*health), "SERVING");

  server_->GetHealthCheckService()->SetServingStatus("", false);
  health = client_->Health("", absl::Seconds(30));
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, HealthStatus::kNotServing);

  health = client_->Health("no.such.Service", absl::Seconds(30));
  EXPECT_EQ(health.status().code(), absl::StatusCode::kNotFound);
}

TEST(QuillClientNoServerTest, UnreachableServerIsUnavailable) {
  // Port 1 on loopback: nothing listens there, so the connection is refused at once.
  std::unique_ptr<QuillClient> client = QuillClient::Connect("127.0.0.1:1");
  absl::StatusOr<HealthStatus> health = client->Health("", absl::Seconds(10));
  EXPECT_EQ(health.status().code(), absl::StatusCode::kUnavailable) << health.status();
  EXPECT_EQ(client->WaitForConnected(absl::Milliseconds(100)).code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST(FromGrpcStatusTest, MapsEveryCode) {
  for (int code = 0; code <= 16; ++code) {
    absl::Status status =
        FromGrpcStatus(grpc::Status(static_cast<grpc::StatusCode>(code), code == 0 ? "" : "m"));
    EXPECT_EQ(static_cast<int>(status.code()), code);
  }
  EXPECT_EQ(FromGrpcStatus(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "queue full")),
            absl::ResourceExhaustedError("queue full"));
}

}  // namespace
}  // namespace quill::client
