#pragma once

// QuillClient: the C++ client of Quill's gRPC API, shared by the `quill` CLI, the
// integration/e2e tests and users' code. It wraps the generated stubs, applies deadlines,
// lets another thread cancel a running stream and converts every grpc::Status into an
// absl::Status with the same code and message.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "quill/v1/quill.grpc.pb.h"
#include "quill/v1/quill.pb.h"

namespace grpc {
class Channel;
class ClientContext;
class Status;
}  // namespace grpc

namespace quill::client {

// Called on every ClientContext before its RPC starts (metadata, compression, wait_for_ready).
using ClientContextHook = std::function<void(grpc::ClientContext*)>;

// grpc.health.v1 ServingStatus, plus what an unreachable server looks like to a caller.
enum class HealthStatus {
  kUnknown = 0,
  kServing = 1,
  kNotServing = 2,
  kServiceUnknown = 3,
};

// "SERVING", "NOT_SERVING", ...
absl::string_view HealthStatusName(HealthStatus status);

// grpc::Status -> absl::Status with the same code (the enums share their values) and message.
absl::Status FromGrpcStatus(const grpc::Status& status);

// "LENGTH", "STOP", "EOS" or "UNSPECIFIED".
absl::string_view FinishReasonName(quill::v1::FinishReason reason);

// A cancellation handle for one Generate (or Chat) call. Thread-safe: Cancel() may be called from
// any thread (including from inside the on_message callback), before, during or after the call.
// Cancelling before the call starts makes the call return CANCELLED without sending it.
// A GenerateCall is used by at most one Generate call at a time and must outlive it.
class GenerateCall {
 public:
  GenerateCall() = default;
  GenerateCall(const GenerateCall&) = delete;
  GenerateCall& operator=(const GenerateCall&) = delete;

  // Asks gRPC to cancel the RPC: the server sees the cancellation and Generate returns
  // CANCELLED (unless the stream had already finished). Never blocks on the network.
  void Cancel() ABSL_LOCKS_EXCLUDED(mu_);
  bool cancelled() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  friend class QuillClient;
  // Binds the running call's context; returns false if Cancel() already happened.
  bool Attach(grpc::ClientContext* context) ABSL_LOCKS_EXCLUDED(mu_);
  void Detach() ABSL_LOCKS_EXCLUDED(mu_);

  mutable absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  // Owned by the Generate call on the stack; set only while that call runs.
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
};

// Everything one Generate stream produced, for callers that do not need the messages live.
struct GenerateResult {
  std::string request_id;
  std::string text;                  // concatenated text of every message
  std::string reasoning;             // Chat with a reasoning model: the thought, likewise
  std::vector<int32_t> token_ids;    // concatenated token ids of every message
  int num_messages = 0;
  quill::v1::GenerateResponse last;  // carries finish_reason, usage and timings
};

// How to reach a server that uses TLS or API keys (all empty: plaintext, no key).
struct ConnectOptions {
  std::string tls_ca_file;    // PEM CAs to verify the server with; turns TLS on
  std::string tls_cert_file;  // client certificate for mutual TLS (with tls_key_file)
  std::string tls_key_file;
  // Sent as `authorization: Bearer KEY` on every call (the health service ignores it).
  std::string api_key;
};

// Thread-safe: one QuillClient (one channel) may serve many concurrent calls.
class QuillClient {
 public:
  // Creates a client over an insecure channel to `address` ("host:port"). The channel
  // connects lazily; call WaitForConnected() to fail fast on a wrong address.
  static std::unique_ptr<QuillClient> Connect(absl::string_view address);
  // The same with TLS and/or an API key. INVALID_ARGUMENT naming an unreadable file.
  static absl::StatusOr<std::unique_ptr<QuillClient>> Connect(absl::string_view address,
                                                              const ConnectOptions& options);
  // Uses an existing channel (custom credentials, service config, in-process channel).
  explicit QuillClient(std::shared_ptr<grpc::Channel> channel, std::string api_key = "");

  // Blocks until the channel is READY, or returns DEADLINE_EXCEEDED (UNAVAILABLE is never
  // returned: a server that is down simply does not become ready within `timeout`).
  absl::Status WaitForConnected(absl::Duration timeout);

  // Streams one generation. `on_message` runs on the calling thread for every response in
  // order. Returns the final gRPC status of the stream as an absl::Status (server's code and
  // message; DEADLINE_EXCEEDED after `timeout`; CANCELLED after call->Cancel()).
  absl::Status Generate(const quill::v1::GenerateRequest& request,
                        const std::function<void(const quill::v1::GenerateResponse&)>& on_message,
                        absl::Duration timeout = absl::InfiniteDuration(),
                        const ClientContextHook& hook = nullptr, GenerateCall* call = nullptr);

  // Generate, collecting the stream into a GenerateResult.
  absl::StatusOr<GenerateResult> GenerateText(const quill::v1::GenerateRequest& request,
                                              absl::Duration timeout = absl::InfiniteDuration(),
                                              const ClientContextHook& hook = nullptr);

  // Streams one chat turn: the server renders `request.messages` with its chat template and
  // generates the answer as Generate does (FAILED_PRECONDITION when it has no template).
  absl::Status Chat(const quill::v1::ChatRequest& request,
                    const std::function<void(const quill::v1::GenerateResponse&)>& on_message,
                    absl::Duration timeout = absl::InfiniteDuration(),
                    const ClientContextHook& hook = nullptr, GenerateCall* call = nullptr);

  // Chat, collecting the stream into a GenerateResult.
  absl::StatusOr<GenerateResult> ChatText(const quill::v1::ChatRequest& request,
                                          absl::Duration timeout = absl::InfiniteDuration(),
                                          const ClientContextHook& hook = nullptr);

  absl::StatusOr<quill::v1::TokenizeResponse> Tokenize(
      const quill::v1::TokenizeRequest& request, absl::Duration timeout = absl::InfiniteDuration(),
      const ClientContextHook& hook = nullptr);
  absl::StatusOr<quill::v1::TokenizeResponse> Tokenize(
      absl::string_view text, bool add_special_tokens = false,
      absl::Duration timeout = absl::InfiniteDuration());

  absl::StatusOr<quill::v1::ModelInfo> GetModelInfo(
      absl::Duration timeout = absl::InfiniteDuration(), const ClientContextHook& hook = nullptr);

  // grpc.health.v1.Health/Check for `service` ("" = the whole server, "quill.v1.Generator"
  // = the generation service). A server that does not know `service` answers NOT_FOUND.
  absl::StatusOr<HealthStatus> Health(absl::string_view service = "",
                                      absl::Duration timeout = absl::InfiniteDuration(),
                                      const ClientContextHook& hook = nullptr);

  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }

 private:
  // The body of Generate and Chat: `start` begins the server stream on the prepared context.
  absl::Status Stream(
      const std::function<std::unique_ptr<grpc::ClientReader<quill::v1::GenerateResponse>>(
          grpc::ClientContext*)>& start,
      const std::function<void(const quill::v1::GenerateResponse&)>& on_message,
      absl::Duration timeout, const ClientContextHook& hook, GenerateCall* call);
  // Deadline, API key, then the caller's hook.
  void PrepareContext(grpc::ClientContext* context, absl::Duration timeout,
                      const ClientContextHook& hook) const;

  std::shared_ptr<grpc::Channel> channel_;
  const std::string api_key_;
  std::unique_ptr<quill::v1::Generator::Stub> generator_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
};

}  // namespace quill::client
