#include "server/http/http_exchange.h"

#include "absl/strings/match.h"

namespace quill::server::http {
namespace {

// A source holding one complete response.
class FixedSource final : public ResponseSource {
 public:
  FixedSource(HttpResponseHead head, std::string body, bool close)
      : head_(std::make_unique<HttpResponseHead>(std::move(head))),
        body_(std::move(body)),
        close_(close) {}
  HttpOutput Next() override {
    HttpOutput out;
    if (head_ == nullptr) return out;  // already taken
    out.head = std::move(head_);
    out.body = std::move(body_);
    out.last = true;
    out.close = close_;
    return out;
  }
  void OnClientGone() override {}

 private:
  std::unique_ptr<HttpResponseHead> head_;
  std::string body_;
  const bool close_;
};

}  // namespace

absl::string_view HttpRequest::Header(absl::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (absl::EqualsIgnoreCase(key, name)) return value;
  }
  return "";
}

void ResponseChannel::Respond(HttpResponseHead head, std::string body, bool close) {
  Start(std::make_shared<FixedSource>(std::move(head), std::move(body), close));
}

}  // namespace quill::server::http
