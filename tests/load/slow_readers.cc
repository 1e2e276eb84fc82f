// quill-slow-readers: a load tool (not a test) for README "Memory bounds". Opens
// --streams Generate calls that are never read (spread over connections of at most
// --per_connection streams, each with a tiny HTTP/2 receive window), holds them for
// --hold, and meanwhile measures a normal client's time to first token. Prints one
// line per phase; scripts/bench_slow_readers.sh adds the server's RSS.

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "quill/v1/quill.grpc.pb.h"

ABSL_FLAG(std::string, addr, "127.0.0.1:50051", "quill-server gRPC address");
ABSL_FLAG(int, streams, 2000, "never-read streams to open");
ABSL_FLAG(int, per_connection, 100, "streams per connection (the server's limit)");
ABSL_FLAG(int, max_tokens, 240, "max_tokens of each never-read stream");
ABSL_FLAG(int, logprobs, 20, "logprobs of each never-read stream (bigger messages)");
ABSL_FLAG(absl::Duration, hold, absl::Seconds(10), "how long to hold the streams open");
ABSL_FLAG(int, probes, 5, "normal requests whose time to first token is measured");

namespace {

namespace v1 = ::quill::v1;

std::shared_ptr<grpc::Channel> Connect(const std::string& addr, bool tiny_window, int index) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection of its own
  args.SetInt("quill.connection_index", index);
  if (tiny_window) {
    args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
    args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 1024);
  }
  return grpc::CreateCustomChannel(addr, grpc::InsecureChannelCredentials(), args);
}

v1::GenerateRequest Request(const std::string& prompt, int max_tokens, int logprobs) {
  v1::GenerateRequest r;
  r.set_prompt(prompt);
  r.set_max_tokens(max_tokens);
  r.set_ignore_eos(true);
  r.set_logprobs(logprobs);
  return r;
}

// Time from sending a request to its first message, for a client that reads.
absl::Duration Ttft(v1::Generator::Stub& stub) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
  const absl::Time start = absl::Now();
  auto reader = stub.Generate(&context, Request("In the beginning", 32, 0));
  v1::GenerateResponse response;
  absl::Duration ttft = absl::InfiniteDuration();
  if (reader->Read(&response)) ttft = absl::Now() - start;
  while (reader->Read(&response)) {
  }
  const grpc::Status status = reader->Finish();
  if (!status.ok()) std::printf("probe failed: %s\n", status.error_message().c_str());
  return ttft;
}

void PrintTtft(const char* phase, v1::Generator::Stub& stub) {
  std::string line;
  for (int i = 0; i < absl::GetFlag(FLAGS_probes); ++i) {
    absl::StrAppend(&line, " ", absl::ToDoubleMilliseconds(Ttft(stub)));
  }
  std::printf("%s: normal client TTFT ms:%s\n", phase, line.c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string addr = absl::GetFlag(FLAGS_addr);
  auto normal = v1::Generator::NewStub(Connect(addr, false, -1));
  PrintTtft("before", *normal);

  // Async calls, never read: StartCall sends the request and nothing asks for messages.
  grpc::CompletionQueue cq;
  struct Call {
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientAsyncReader<v1::GenerateResponse>> reader;
  };
  const int streams = absl::GetFlag(FLAGS_streams);
  const int per_connection = absl::GetFlag(FLAGS_per_connection);
  std::vector<std::unique_ptr<v1::Generator::Stub>> stubs;
  std::vector<std::unique_ptr<Call>> calls;
  for (int i = 0; i < streams; ++i) {
    if (i % per_connection == 0) {
      stubs.push_back(v1::Generator::NewStub(Connect(addr, true, i / per_connection)));
    }
    auto call = std::make_unique<Call>();
    call->reader = stubs.back()->PrepareAsyncGenerate(
        &call->context,
        Request(absl::StrCat("And the LORD said ", i), absl::GetFlag(FLAGS_max_tokens),
                absl::GetFlag(FLAGS_logprobs)),
        &cq);
    call->reader->StartCall(call.get());
    calls.push_back(std::move(call));
  }
  std::printf("opened %d never-read streams on %zu connections\n", streams, stubs.size());
  std::fflush(stdout);
  absl::SleepFor(absl::GetFlag(FLAGS_hold) / 2);
  std::printf("holding\n");  // the script samples the server's RSS here
  std::fflush(stdout);
  PrintTtft("with slow readers", *normal);
  absl::SleepFor(absl::GetFlag(FLAGS_hold) / 2);

  // Cancel, and collect every outstanding completion before the calls go away.
  for (auto& call : calls) call->context.TryCancel();
  cq.Shutdown();
  void* tag;
  bool ok;
  while (cq.Next(&tag, &ok)) {
  }
  calls.clear();
  return 0;
}
