// Per-tenant fairness over real gRPC (issue 10 item 6): quill-server in process on
// 127.0.0.1, one run slot, tenant A floods the queue and tenant B sends one request; B's
// first token must come before most of A's queued requests get theirs (on the old FIFO
// queue it came after all of them). Tenants by x-quill-tenant without API keys, by key
// (and the header ignored) with them; and the per-tenant metrics.

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/quill_client.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
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

constexpr int kBurst = 40;

server::ServerOptions FairnessOptions() {
  // RunBurst's hold takes all the KV cache.
  server::ServerOptions options = KjvTestServerOptions(kOneLongRequestOfKv);
  options.http_port = 0;
  // One request at a time: every other one waits, so the queue's order is the order in
  // which first tokens come out.
  options.engine.max_running = 1;
  options.engine.max_queue = 4 * kBurst;
  return options;
}

client::ClientContextHook TenantHeader(const std::string& tenant) {
  return [tenant](grpc::ClientContext* context) { context->AddMetadata("x-quill-tenant", tenant); };
}

// Requests of `family` (quill_requests_total or quill_tenant_requests_total) with
// `labels` that finished normally.
double Finished(const PromText& t, const std::string& family, const Labels& labels) {
  double n = 0;
  for (const char* outcome : {"length", "stop", "eos"}) {
    Labels with_outcome = labels;
    with_outcome["outcome"] = outcome;
    n += t.Value(family, with_outcome).value_or(0);
  }
  return n;
}

struct BurstResult {
  int waiting_when_b_sent = 0;  // requests queued in the engine just before B's
  int a_after_b = 0;            // of A's requests, how many got their first token after B's
  int a_total = 0;
  absl::Duration b_first_token;       // after the queue's hold ended
  absl::Duration a_last_first_token;  // after the queue's hold ended
};

// Tenant A (`a`, `a_hook`) sends kBurst streams at once while a paused stream (a KvHog,
// with `hold_hook`) holds every KV block, so that all of them wait; then tenant B (`b`,
// `b_hook`) sends one, and once it waits too the hold ends. In FIFO order B would come
// after every request of A's. Held, the queue's order does not depend on how many of A's
// requests the machine serves while B's is on its way. Every stream must succeed.
BurstResult RunBurst(server::Server& server, client::QuillClient& a,
                     const client::ClientContextHook& a_hook, client::QuillClient& b,
                     const client::ClientContextHook& b_hook,
                     const client::ClientContextHook& hold_hook) {
  BurstResult result;
  std::optional<KvHog> hold(std::in_place, server.address(), hold_hook);
  EXPECT_TRUE(GaugeReaches(server.metrics_port(), "quill_requests_paused", 1)) << "no hold";
  absl::Mutex mu;
  std::vector<std::string> first_tokens;  // labels, in order of first token
  absl::Time released = absl::InfiniteFuture();
  absl::Duration b_first, a_last_first;
  auto run = [&](client::QuillClient& client, const client::ClientContextHook& hook,
                 const std::string& label) {
    // Long enough (tens of ms) that the order in which the client's threads see first
    // tokens is the engine's, not the scheduler's.
    v1::GenerateRequest request = TextRequest("In the beginning God created", 96);
    request.set_ignore_eos(true);
    bool first = true;
    const absl::Status s = client.Generate(
        request,
        [&](const quill::v1::GenerateResponse&) {
          if (!first) return;
          first = false;
          absl::MutexLock lock(&mu);
          first_tokens.push_back(label);
          const absl::Duration after_release = absl::Now() - released;
          if (label == "b") b_first = after_release;
          if (label != "b") a_last_first = std::max(a_last_first, after_release);
        },
        absl::Seconds(120), hook);
    EXPECT_TRUE(s.ok()) << label << ": " << s;
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < kBurst; ++i) {
    threads.emplace_back([&, i] { run(a, a_hook, absl::StrCat("a", i)); });
  }
  EXPECT_TRUE(GaugeReaches(server.metrics_port(), "quill_requests_waiting", kBurst))
      << "the burst never queued up";
  result.waiting_when_b_sent = server.engine().gauges().requests_waiting;
  threads.emplace_back([&] { run(b, b_hook, "b"); });
  EXPECT_TRUE(GaugeReaches(server.metrics_port(), "quill_requests_waiting", kBurst + 1));
  {
    absl::MutexLock lock(&mu);
    released = absl::Now();
  }
  hold.reset();
  for (std::thread& t : threads) t.join();

  absl::MutexLock lock(&mu);
  const auto b_at = std::find(first_tokens.begin(), first_tokens.end(), "b");
  EXPECT_NE(b_at, first_tokens.end());
  result.a_after_b = static_cast<int>(first_tokens.end() - b_at) - 1;
  result.a_total = static_cast<int>(first_tokens.size()) - 1;
  result.b_first_token = b_first;
  result.a_last_first_token = a_last_first;
  return result;
}

class TenantFairnessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (ModelPath().empty()) GTEST_SKIP() << "shared assets not found (QUILL_SHARED_DIR)";
  }
};

// Without API keys the x-quill-tenant metadata names the tenant.
TEST_F(TenantFairnessTest, HeaderTenantsShareTheQueueFairly) {
  std::unique_ptr<server::Server> server = StartTestServer(FairnessOptions());
  ASSERT_NE(server, nullptr);
  std::unique_ptr<client::QuillClient> client = client::QuillClient::Connect(server->address());
  const BurstResult r = RunBurst(*server, *client, TenantHeader("tenant-a"), *client,
                                 TenantHeader("tenant-b"), TenantHeader("tenant-hold"));
  EXPECT_EQ(r.a_total, kBurst);
  // B overtakes everything of A's that was queued when it arrived but the one whose tag ties
  // with its own (and a little delivery jitter); FIFO would have put it behind all of it
  // (a_after_b = 0).
  EXPECT_GE(r.a_after_b, r.waiting_when_b_sent - 3)
      << "waiting " << r.waiting_when_b_sent << " when B was sent";
  std::printf(
      "[ tenants ] header: waiting %d when B sent; A after B: %d; first tokens after the hold "
      "ended: B's %s, A's last %s\n",
      r.waiting_when_b_sent, r.a_after_b, absl::FormatDuration(r.b_first_token).c_str(),
      absl::FormatDuration(r.a_last_first_token).c_str());
}

// With API keys the key is the tenant, and x-quill-tenant cannot borrow another's: B
// claims to be "alice" (A's tenant) and is still served as bob. The per-tenant metrics
// show which tenant each request was counted under.
TEST_F(TenantFairnessTest, ApiKeyTenantsShareFairlyAndTheHeaderIsIgnored) {
  server::ServerOptions options = FairnessOptions();
  options.api_keys_file =
      WriteScratchFile("tenant-keys", "key-a name=alice\nkey-b name=bob\nkey-h name=holder\n");
  options.metrics_per_tenant = true;
  std::unique_ptr<server::Server> server = StartTestServer(options);
  ASSERT_NE(server, nullptr);
  client::ConnectOptions alice, bob;
  alice.api_key = "key-a";
  bob.api_key = "key-b";
  auto a = client::QuillClient::Connect(server->address(), alice);
  auto b = client::QuillClient::Connect(server->address(), bob);
  ASSERT_TRUE(a.ok() && b.ok());
  const BurstResult r = RunBurst(
      *server, **a, nullptr, **b, TenantHeader("alice"),
      [](grpc::ClientContext* context) { context->AddMetadata("authorization", "Bearer key-h"); });
  EXPECT_EQ(r.a_total, kBurst);
  EXPECT_GE(r.a_after_b, r.waiting_when_b_sent - 3)
      << "waiting " << r.waiting_when_b_sent << " when B was sent";

  auto finished = [](const PromText& t, const std::string& tenant) {
    return Finished(t, "quill_tenant_requests_total", {{"tenant", tenant}});
  };
  // Every request of A's and B's has ended: each one's metrics were recorded before its
  // client had the last message.
  absl::StatusOr<PromText> text = ScrapeMetrics(server->metrics_port());
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(finished(*text, "alice"), kBurst);
  EXPECT_EQ(finished(*text, "bob"), 1);
  EXPECT_EQ(text->HistogramCount("quill_tenant_time_to_first_token_seconds", {{"tenant", "bob"}}),
            1);
  EXPECT_EQ(text->HistogramCount("quill_tenant_queue_wait_seconds", {{"tenant", "alice"}}), kBurst);
  // The key itself never shows up anywhere.
  for (const auto& [name, family] : text->families()) {
    for (const PromSample& sample : family.samples) {
      for (const auto& [label, value] : sample.labels)
        EXPECT_THAT(value, ::testing::Not(HasSubstr("key-")));
    }
  }
}

TEST_F(TenantFairnessTest, MalformedTenantHeaderIsInvalidArgument) {
  std::unique_ptr<server::Server> server = StartTestServer(FairnessOptions());
  ASSERT_NE(server, nullptr);
  std::unique_ptr<client::QuillClient> client = client::QuillClient::Connect(server->address());
  const absl::Status s = client->Generate(TextRequest("In the beginning", 2), nullptr,
                                          absl::Seconds(20), TenantHeader(std::string(65, 't')));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("x-quill-tenant"));
  // 64 bytes of printable ASCII is fine.
  EXPECT_TRUE(client
                  ->Generate(TextRequest("In the beginning", 2), nullptr, absl::Seconds(20),
                             TenantHeader(std::string(64, 't')))
                  .ok());

  auto http = HttpClient::Connect("127.0.0.1", server->http_port());
  ASSERT_TRUE(http.ok()) << http.status();
  const std::string body = R"({"model":"m","prompt":"In the beginning","max_tokens":2})";
  ASSERT_TRUE((*http)
                  ->Send("POST", "/v1/completions", body,
                         absl::StrCat("x-quill-tenant: ", std::string(65, 't'), "\r\n"))
                  .ok());
  absl::StatusOr<HttpReply> reply = (*http)->ReadResponse();
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->status, 400) << reply->body;
  EXPECT_THAT(reply->body, HasSubstr("x-quill-tenant"));
  ASSERT_TRUE((*http)->Send("POST", "/v1/completions", body, "X-Quill-Tenant: team-http\r\n").ok());
  reply = (*http)->ReadResponse();
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->status, 200) << reply->body;
}

// --metrics-per-tenant over HTTP and gRPC without keys: tenants by header, the default
// tenant as "_default"; without the flag there is no per-tenant family at all.
TEST_F(TenantFairnessTest, PerTenantMetricsOnlyWithTheFlag) {
  for (const bool per_tenant : {false, true}) {
    SCOPED_TRACE(per_tenant ? "--metrics-per-tenant" : "default");
    server::ServerOptions options = FairnessOptions();
    options.metrics_per_tenant = per_tenant;
    std::unique_ptr<server::Server> server = StartTestServer(options);
    ASSERT_NE(server, nullptr);
    std::unique_ptr<client::QuillClient> client = client::QuillClient::Connect(server->address());
    ASSERT_TRUE(client
                    ->Generate(TextRequest("In the beginning", 2), nullptr, absl::Seconds(20),
                               TenantHeader("team-x"))
                    .ok());
    ASSERT_TRUE(
        client->Generate(TextRequest("In the beginning", 2), nullptr, absl::Seconds(20)).ok());
    absl::StatusOr<HttpReply> reply =
        HttpRequest("127.0.0.1", server->http_port(), "POST", "/v1/completions",
                    R"({"model":"m","prompt":"In the beginning","max_tokens":2})");
    ASSERT_TRUE(reply.ok()) << reply.status();
    EXPECT_EQ(reply->status, 200);
    // The three requests have ended: each one's metrics were recorded before its reply.
    absl::StatusOr<PromText> text = ScrapeMetrics(server->metrics_port());
    ASSERT_TRUE(text.ok()) << text.status();
    ASSERT_EQ(Finished(*text, "quill_requests_total", {{"api", "grpc"}}) +
                  Finished(*text, "quill_requests_total", {{"api", "http"}}),
              3);
    if (!per_tenant) {
      for (const auto& [name, family] : text->families()) {
        EXPECT_THAT(name, ::testing::Not(HasSubstr("tenant")));
        for (const PromSample& sample : family.samples)
          EXPECT_EQ(sample.labels.count("tenant"), 0u);
      }
      continue;
    }
    const double team_x = Finished(*text, "quill_tenant_requests_total", {{"tenant", "team-x"}});
    // One gRPC, one HTTP, neither named a tenant.
    const double fallback =
        Finished(*text, "quill_tenant_requests_total", {{"tenant", "_default"}});
    EXPECT_EQ(team_x, 1);
    EXPECT_EQ(fallback, 2);
    EXPECT_EQ(text->HistogramCount("quill_tenant_queue_wait_seconds", {{"tenant", "_default"}}), 2);
    // The unlabelled families stay as they were.
    EXPECT_EQ(text->HistogramCount("quill_queue_wait_seconds"), 3);
  }
}

}  // namespace
}  // namespace quill::testing
