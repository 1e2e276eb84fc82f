#include "server/server.h"

#include <netdb.h>
#include <omp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "engine/model/model.h"
#include "engine/model/model_config.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/impl/server_builder_option.h"
#include "grpcpp/impl/server_builder_plugin.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "prometheus/exposer.h"
#include "server/generation_service.h"
#include "server/http/http_server.h"
#include "server/http/openai_api.h"
#include "server/metrics/quill_metrics.h"
#include "server/request_gateway.h"
#include "server/security/api_keys.h"
#include "server/security/tls_files.h"
#include "spdlog/spdlog.h"

namespace quill::server {
namespace {

constexpr char kServiceName[] = "quill.v1.Generator";

// Destroys `exposer` quickly. Its HTTP server (civetweb) notices the stop flag only when
// its listening poll returns, which takes up to 2 s without traffic; connecting to it
// while the destructor waits wakes it up.
void StopExposer(std::unique_ptr<prometheus::Exposer> exposer, const std::string& host, int port) {
  if (exposer == nullptr) return;
  // A wildcard bind is reachable on loopback.
  const std::string target = host.empty() || host == "0.0.0.0" ? "127.0.0.1"
                             : host == "::" || host == "[::]"  ? "::1"
                                                               : host;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* address = nullptr;
  if (getaddrinfo(target.c_str(), std::to_string(port).c_str(), &hints, &address) != 0) {
    address = nullptr;
  }
  std::atomic<bool> stopped{false};
  std::thread waker([&] {
    while (address != nullptr && !stopped.load()) {
      const int fd = socket(address->ai_family, address->ai_socktype, address->ai_protocol);
      if (fd >= 0) {
        connect(fd, address->ai_addr, address->ai_addrlen);
        close(fd);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  exposer.reset();
  stopped.store(true);
  waker.join();
  if (address != nullptr) freeaddrinfo(address);
}

// Server reflection on or off for one ServerBuilder. Linking grpc++_reflection registers
// its plugin for every server the process builds; this option removes it, and adds one
// back when wanted, so the choice is per server.
class ReflectionOption final : public grpc::ServerBuilderOption {
 public:
  explicit ReflectionOption(bool enabled) : enabled_(enabled) {}
  void UpdateArguments(grpc::ChannelArguments* /*args*/) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    const std::string name = grpc::reflection::ProtoServerReflectionPlugin().name();
    plugins->erase(std::remove_if(plugins->begin(), plugins->end(),
                                  [&](const std::unique_ptr<grpc::ServerBuilderPlugin>& p) {
                                    return p->name() == name;
                                  }),
                   plugins->end());
    if (enabled_) {
      plugins->push_back(std::make_unique<grpc::reflection::ProtoServerReflectionPlugin>());
    }
  }

 private:
  const bool enabled_;
};

// Plaintext (no PEM), or TLS (mutual when a client CA is given).
std::shared_ptr<grpc::ServerCredentials> GrpcCredentials(const std::optional<TlsPem>& pem) {
  if (!pem.has_value()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions ssl(
      pem->client_ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                             : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  ssl.pem_root_certs = pem->client_ca;
  ssl.pem_key_cert_pairs.push_back({pem->private_key, pem->cert_chain});
  return grpc::SslServerCredentials(ssl);
}

// Packing a model's weights takes time in proportion to its size (12.4 s for a 1.1B F16
// file on 2 cores): the log shows it at info level at most this often (a small model loads
// within it and prints nothing more), and every layer at debug level.
constexpr absl::Duration kLoadProgressInterval = absl::Seconds(5);

std::function<void(const engine::LoadProgress&)> LoadProgressLogger(std::string what,
                                                                    absl::Time start) {
  return [what = std::move(what), start, last_info = start](const engine::LoadProgress& p) mutable {
    const absl::Time now = absl::Now();
    const bool info = now - last_info >= kLoadProgressInterval;
    if (info) last_info = now;
    spdlog::log(info ? spdlog::level::info : spdlog::level::debug,
                "loading {}: packed layer {} of {} ({} so far, {:.1f} s)", what, p.layers_packed,
                p.layers_total, HumanBytes(p.bytes_packed), absl::ToDoubleSeconds(now - start));
  };
}

}  // namespace

Server::Server(const ServerOptions& options) : options_(options) {}

absl::StatusOr<std::unique_ptr<Server>> Server::Create(const ServerOptions& options) {
  auto server = absl::WrapUnique(new Server(options));
  if (absl::Status s = server->Start(); !s.ok()) return s;  // ~Server cleans up
  return server;
}

Server::~Server() {
  Shutdown();
  StopExposer(std::move(exposer_),
              options_.metrics_host.empty() ? options_.host : options_.metrics_host, metrics_port_);
}

std::string Server::address() const { return JoinHostPort(options_.host, port_); }

absl::Status Server::Start() {
  if (absl::Status s = LoadChatTemplate(); !s.ok()) return s;
  metrics_ = std::make_unique<QuillMetrics>(options_.metrics_per_tenant);
  gateway_ = std::make_unique<RequestGateway>(metrics_.get(), options_.model_path);
  if (!options_.api_keys_file.empty()) {
    absl::StatusOr<std::unique_ptr<ApiKeys>> keys = ApiKeys::Load(options_.api_keys_file);
    if (!keys.ok()) return keys.status();
    api_keys_ = *std::move(keys);
    spdlog::info("api keys: {} from {}; gRPC calls and HTTP API requests need one",
                 api_keys_->size(), options_.api_keys_file);
  }
  // Read once: gRPC and the HTTP API serve the same certificate.
  if (options_.tls.enabled()) {
    absl::StatusOr<TlsPem> pem = ReadTlsFiles(options_.tls);
    if (!pem.ok()) return pem.status();
    tls_pem_ = *std::move(pem);
  }
  if (absl::Status s = StartMetrics(); !s.ok()) return s;
  if (absl::Status s = StartGrpc(); !s.ok()) return s;
  if (absl::Status s = StartHttp(); !s.ok()) return s;
  return LoadModelAndEngine();
}

// Before anything binds a port: a bad template file is a configuration error.
absl::Status Server::LoadChatTemplate() {
  const std::string& path = options_.chat_template_path;
  if (path.empty()) return absl::OkStatus();
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("--chat-template ", path, ": cannot open"));
  std::ostringstream source;
  source << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("--chat-template ", path, ": read error"));
  absl::StatusOr<engine::chat::ChatTemplate> parsed =
      engine::chat::ChatTemplate::Parse(source.str());
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--chat-template ", path, ": ", parsed.status().message()));
  }
  chat_template_ = *std::move(parsed);
  spdlog::info("chat template from {}", path);
  return absl::OkStatus();
}

absl::Status Server::StartMetrics() {
  if (options_.metrics_port < 0) return absl::OkStatus();
  const std::string host = options_.metrics_host.empty() ? options_.host : options_.metrics_host;
  const std::string bind = JoinHostPort(host, options_.metrics_port);
  // civetweb options (see ServerOptions::metrics_threads); no keep-alive, so a connection
  // holds its thread only for one request.
  std::vector<std::string> civetweb = {
      "listening_ports",
      bind,
      "num_threads",
      std::to_string(options_.metrics_threads),
      "request_timeout_ms",
      std::to_string(absl::ToInt64Milliseconds(options_.metrics_request_timeout)),
      "enable_keep_alive",
      "no",
  };
  try {
    exposer_ = std::make_unique<prometheus::Exposer>(std::move(civetweb));
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", bind, ": ", e.what()));
  }
  exposer_->RegisterCollectable(metrics_->collectable());
  const std::vector<int> ports = exposer_->GetListeningPorts();
  if (ports.empty())
    return absl::UnavailableError(absl::StrCat("metrics: not listening on ", bind));
  metrics_port_ = ports.front();
  spdlog::info("metrics on http://{}/metrics", JoinHostPort(host, metrics_port_));
  return absl::OkStatus();
}

absl::Status Server::StartGrpc() {
  GenerationService::Info info;
  info.model_path = options_.model_path;
  info.precision = std::string(PrecisionName(options_.precision));
  service_ = std::make_unique<GenerationService>(gateway_.get(), std::move(info), api_keys_.get());

  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  reflection_ = options_.reflection.value_or(IsLoopbackHost(options_.host));
  builder.SetOption(std::make_unique<ReflectionOption>(reflection_));
  const std::string bind = JoinHostPort(options_.host, options_.port);
  builder.AddListeningPort(bind, GrpcCredentials(tls_pem_), &port_);
  builder.RegisterService(service_.get());
  builder.SetMaxReceiveMessageSize(options_.max_receive_message_bytes);
  builder.SetMaxSendMessageSize(options_.max_send_message_bytes);
  // gRPC enables SO_REUSEPORT by default, so a second server on a busy port would silently
  // share it; fail instead.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // One connection cannot open streams without end (each holds gRPC buffers and, once
  // accepted, a run slot or queue place).
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, options_.grpc_max_concurrent_streams);
  grpc_server_ = builder.BuildAndStart();
  if (grpc_server_ == nullptr || port_ == 0) {
    grpc_server_.reset();
    return absl::UnavailableError(absl::StrCat("cannot listen on ", bind));
  }
  SetHealth(false);  // until the model is loaded
  spdlog::info("listening on {} ({}{}, reflection {})", address(),
               options_.tls.enabled() ? "TLS" : "plaintext",
               options_.tls.client_ca.empty() ? "" : ", client certificates required",
               reflection_ ? "on" : "off");
  return absl::OkStatus();
}

// The OpenAI-compatible API; /health answers 503 until the model is loaded.
absl::Status Server::StartHttp() {
  if (options_.http_port < 0) return absl::OkStatus();
  http::HttpServerOptions http_options;
  http_options.host = options_.http_host.empty() ? options_.host : options_.http_host;
  http_options.port = options_.http_port;
  http_options.threads = options_.http_threads;
  http_options.max_body_bytes = options_.max_receive_message_bytes;
  if (tls_pem_.has_value()) {
    http_options.tls_cert_chain = tls_pem_->cert_chain;
    http_options.tls_private_key = tls_pem_->private_key;
    http_options.tls_client_ca = tls_pem_->client_ca;
  }
  http_api_ = std::make_unique<http::OpenAiApi>(gateway_.get(), api_keys_.get());
  absl::StatusOr<std::unique_ptr<http::HttpServer>> server =
      http::HttpServer::Start(http_options, http_api_.get());
  if (!server.ok()) return server.status();
  http_server_ = *std::move(server);
  http_port_ = http_server_->port();
  spdlog::info("http on {}://{}", options_.tls.enabled() ? "https" : "http",
               JoinHostPort(http_options.host, http_port_));
  return absl::OkStatus();
}

absl::Status Server::LoadModelAndEngine() {
  engine::ModelOptions model_options;
  model_options.path = options_.model_path;
  model_options.precision = options_.precision;
  model_options.kv_element = options_.kv_cache_type;
  model_options.max_batch_tokens = options_.engine.max_batch_tokens;
  const absl::Time start = absl::Now();
  model_options.on_progress = LoadProgressLogger("model", start);
  // Loading packs the weights in OpenMP loops. It runs on a thread that then exits, taking
  // its OpenMP workers with it: kept (on the main thread) they stay counted by libgomp,
  // which, seeing more threads than cores, makes the engine's threads sleep at every
  // barrier instead of spinning; one stream then decoded ~25% slower than quill-bench.
  absl::StatusOr<std::unique_ptr<engine::Model>> model;
  absl::StatusOr<std::unique_ptr<engine::Model>> draft_model = nullptr;
  std::thread loader([&] {
    if (options_.engine.num_threads > 0) omp_set_num_threads(options_.engine.num_threads);
    model = engine::Model::Load(model_options);
    if (model.ok() && !options_.draft_model_path.empty()) {
      engine::ModelOptions draft_options = model_options;
      draft_options.path = options_.draft_model_path;
      draft_options.on_progress = LoadProgressLogger("draft model", absl::Now());
      draft_model = engine::Model::Load(draft_options);
    }
  });
  loader.join();
  if (!model.ok()) {
    return absl::Status(model.status().code(), absl::StrCat("loading model ", options_.model_path,
                                                            ": ", model.status().message()));
  }
  if (!draft_model.ok()) {
    return absl::Status(draft_model.status().code(),
                        absl::StrCat("loading draft model ", options_.draft_model_path, ": ",
                                     draft_model.status().message()));
  }
  const engine::ModelConfig& config = (*model)->config();
  const engine::ModelAccounting accounting =
      engine::ComputeAccounting(config, config.context_length, (*model)->kv_element());
  spdlog::info(
      "loaded model path={} name=\"{}\" architecture={} params={} non_embedding_params={} "
      "layers={} d_model={} heads={}/{} context={} vocab={} weight_type={} precision={} "
      "weights_bytes={} ({}) load_ms={:.0f}",
      options_.model_path, config.name, config.architecture, accounting.total_params,
      accounting.non_embedding_params, config.block_count, config.embedding_length,
      config.head_count, config.head_count_kv, config.context_length,
      (*model)->tokenizer().vocab_size(), (*model)->weight_type_name(),
      std::string(PrecisionName(options_.precision)), (*model)->weight_bytes(),
      HumanBytes((*model)->weight_bytes()), absl::ToDoubleMilliseconds(absl::Now() - start));
  spdlog::info("kernels: {}", (*model)->kernel_summary());
  spdlog::info("weights held: packed={} ({}) mapped_embedding={} ({}) matmul_scratch={} ({})",
               (*model)->weight_bytes(), HumanBytes((*model)->weight_bytes()),
               (*model)->mapped_weight_bytes(), HumanBytes((*model)->mapped_weight_bytes()),
               (*model)->scratch_bytes(), HumanBytes((*model)->scratch_bytes()));
  if (*draft_model != nullptr) {
    spdlog::info(
        "loaded draft model path={} architecture={} layers={} d_model={} weight_type={} "
        "weights_bytes={} ({}); spec_tokens={}",
        options_.draft_model_path, (*draft_model)->config().architecture,
        (*draft_model)->config().block_count, (*draft_model)->config().embedding_length,
        (*draft_model)->weight_type_name(), (*draft_model)->weight_bytes(),
        HumanBytes((*draft_model)->weight_bytes()), options_.engine.spec_tokens);
  }
  const int64_t weight_bytes = (*model)->weight_bytes();

  absl::StatusOr<std::unique_ptr<engine::Engine>> engine = engine::Engine::Create(
      *std::move(model), options_.engine, metrics_.get(), *std::move(draft_model));
  if (!engine.ok()) {
    return absl::Status(engine.status().code(),
                        absl::StrCat("starting the engine: ", engine.status().message()));
  }
  engine_ = *std::move(engine);
  metrics_->SetModelWeightsBytes(weight_bytes);
  engine::Engine* e = engine_.get();
  metrics_->SetGaugeSource([e] { return e->gauges(); });
  gateway_->SetEngine(e, std::move(chat_template_));
  chat_template_.reset();

  const engine::EngineGauges gauges = e->gauges();
  const engine::EngineOptions& eo = e->options();
  const std::string kv_type(engine::kernels::KvElementName(e->model().kv_element()));
  metrics_->SetKvCacheInfo(kv_type, eo.block_size_tokens);
  const RequestLimits& limits = gateway_->limits();
  spdlog::info(
      "kv cache: blocks={} block_size_tokens={} capacity_tokens={} bytes={} ({}) "
      "bytes_per_token={} element={} prefix_cache={}",
      gauges.kv_blocks_total, eo.block_size_tokens,
      static_cast<int64_t>(gauges.kv_blocks_total) * eo.block_size_tokens, gauges.kv_bytes_total,
      HumanBytes(gauges.kv_bytes_total), accounting.kv_bytes_per_token, kv_type, eo.prefix_cache);
  spdlog::info(
      "limits: max_tokens={} max_prompt_tokens={} max_batch_tokens={} prefill_chunk_tokens={} "
      "itl_target={} max_running={} max_queue={} max_message_bytes={} drain_timeout={}",
      limits.max_tokens, limits.max_prompt_tokens, eo.max_batch_tokens, eo.prefill_chunk_tokens,
      absl::FormatDuration(eo.itl_target), eo.max_running, eo.max_queue,
      options_.max_receive_message_bytes, absl::FormatDuration(options_.drain_timeout));
  SetHealth(true);
  spdlog::info("serving {} on {}", kServiceName, address());
  return absl::OkStatus();
}

absl::Status Server::ReloadApiKeys() {
  if (api_keys_ == nullptr) return absl::OkStatus();
  if (absl::Status s = api_keys_->Reload(); !s.ok()) return s;
  spdlog::info("api keys: reloaded {} from {}", api_keys_->size(), api_keys_->path());
  return absl::OkStatus();
}

void Server::SetHealth(bool serving) {
  if (grpc_server_ == nullptr) return;
  grpc::HealthCheckServiceInterface* health = grpc_server_->GetHealthCheckService();
  if (health == nullptr) return;
  health->SetServingStatus(serving);
  health->SetServingStatus(kServiceName, serving);
}

void Server::Shutdown(absl::Duration drain_timeout) {
  bool first;
  {
    absl::MutexLock lock(&shutdown_mu_);
    first = !shutdown_started_;
    shutdown_started_ = true;
  }
  if (!first) {
    shut_down_.WaitForNotification();
    return;
  }
  const absl::Time start = absl::Now();
  if (engine_ != nullptr) {
    spdlog::info("shutting down: draining for up to {}", absl::FormatDuration(drain_timeout));
  }
  // Health first, so that load balancers stop sending before requests are refused.
  if (grpc_server_ != nullptr && grpc_server_->GetHealthCheckService() != nullptr) {
    grpc_server_->GetHealthCheckService()->Shutdown();  // NOT_SERVING from now on
  }
  if (gateway_ != nullptr) gateway_->StartDraining();  // HTTP /health says 503 from now on
  // Running streams finish (or end UNAVAILABLE at the drain deadline); the channels
  // send their last messages while gRPC and HTTP still run.
  if (engine_ != nullptr) engine_->Shutdown(drain_timeout);
  if (http_server_ != nullptr) http_server_->Shutdown(options_.grpc_shutdown_grace);
  if (grpc_server_ != nullptr) {
    grpc_server_->Shutdown(absl::ToChronoTime(absl::Now() + options_.grpc_shutdown_grace));
    grpc_server_->Wait();
  }
  if (engine_ != nullptr) {
    spdlog::info("shut down in {:.0f} ms", absl::ToDoubleMilliseconds(absl::Now() - start));
  }
  shut_down_.Notify();
}

}  // namespace quill::server
