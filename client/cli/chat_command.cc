// `quill chat`: a conversation with the served model through the gRPC Chat RPC, one-shot
// (`quill chat "question"`) or interactive (one user message per stdin line, each answer
// streamed, the history kept so that every turn sees the whole conversation).

#include <unistd.h>

#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "client/cli/cli_common.h"
#include "client/quill_client.h"

namespace quill::cli {
namespace {

struct ChatFlags {
  ConnectionFlags connection;
  std::string system;
  int max_tokens = 0;
  SamplingFlags sampling;
  bool disable_speculation = false;
  bool json_object = false;
  std::string json_schema_file;
  std::string json_schema;  // the file's text
  absl::Duration timeout = absl::Seconds(120);
  bool stats = false;
};

// The conversation so far: the system message (if any), then user/assistant turns.
class Conversation {
 public:
  explicit Conversation(std::string system) : system_(std::move(system)) {}

  // Back to the system message alone.
  void Reset() { turns_.clear(); }
  void Add(std::string role, std::string content) {
    turns_.emplace_back(std::move(role), std::move(content));
  }
  // Drops the last message (a question whose answer failed).
  void DropLast() {
    if (!turns_.empty()) turns_.pop_back();
  }

  quill::v1::ChatRequest Request(const ChatFlags& f) const {
    quill::v1::ChatRequest request;
    auto add = [&request](const std::string& role, const std::string& content) {
      quill::v1::ChatMessage* m = request.add_messages();
      m->set_role(role);
      m->set_content(content);
    };
    if (!system_.empty()) add("system", system_);
    for (const auto& [role, content] : turns_) add(role, content);
    request.set_max_tokens(f.max_tokens);
    f.sampling.Fill(&request);
    request.set_disable_speculation(f.disable_speculation);
    request.set_json_object(f.json_object);
    request.set_json_schema(f.json_schema);
    return request;
  }

 private:
  const std::string system_;
  std::vector<std::pair<std::string, std::string>> turns_;
};

// Streams the answer to the conversation's last question to stdout (ending the line) and
// returns its text.
absl::StatusOr<std::string> Answer(client::QuillClient& client, const Conversation& conversation,
                                   const ChatFlags& f) {
  std::string answer;
  quill::v1::GenerateResponse last;
  absl::Status status = client.Chat(
      conversation.Request(f),
      [&](const quill::v1::GenerateResponse& response) {
        std::cout << response.text() << std::flush;
        answer += response.text();
        last = response;
      },
      f.timeout);
  // One answer per line (an empty answer too); a failure leaves no empty line.
  const bool unterminated = answer.empty() ? status.ok() : answer.back() != '\n';
  if (unterminated) std::cout << "\n" << std::flush;
  if (!status.ok()) return status;
  if (f.stats) {
    std::cerr << absl::StrFormat("[finish_reason: %s] usage: %d prompt + %d completion tokens\n",
                                 client::FinishReasonName(last.finish_reason()),
                                 last.usage().prompt_tokens(), last.usage().completion_tokens());
  }
  return answer;
}

}  // namespace

int ChatCommand(const std::vector<std::string>& args) {
  ChatFlags f;
  FlagParser parser(
      "quill chat [flags] [QUESTION...]",
      "Chats with the served model through its chat template (the server's --chat-template "
      "or the model's own). With QUESTION (the words joined by spaces), streams the answer to "
      "stdout and exits. Without, reads one message per line from stdin and streams each "
      "answer, keeping the conversation: /reset starts over (keeping --system), Ctrl-D (end "
      "of input) quits. A failed turn prints the server's status on stderr and is dropped "
      "from the conversation; the exit code is then 1.");
  f.connection.Register(parser);
  parser.AddString("system", &f.system, "A system message that opens the conversation.");
  parser.AddInt("max-tokens", &f.max_tokens,
                "Most tokens per answer; 0 lets the answer fill what the context has left.");
  f.sampling.Register(parser, "Sampling seed (each turn uses it).");
  parser.AddBool("disable-speculation", &f.disable_speculation,
                 "Opt the answers out of the server's speculative decoding (same text).");
  parser.AddBool("json-object", &f.json_object,
                 "JSON mode: each answer is one JSON object (tokens that would break it are "
                 "never sampled; its close ends the answer).");
  parser.AddString("json-schema", &f.json_schema_file,
                   "Structured output: a JSON Schema file each answer's object must satisfy "
                   "(implies --json-object; the server names any keyword it cannot keep).");
  parser.AddDuration("timeout", &f.timeout, "Deadline for each answer.");
  parser.AddBool("stats", &f.stats, "After each answer, print finish reason and usage on stderr.");
  std::vector<std::string> positional;
  if (int code = ParseFlags(parser, args, &positional); code >= 0) return code;
  if (!ReadSchemaFlag(f.json_schema_file, &f.json_schema)) return kExitUsage;

  absl::StatusOr<std::unique_ptr<client::QuillClient>> connected = f.connection.Connect();
  if (!connected.ok()) return PrintError(connected.status());
  std::unique_ptr<client::QuillClient> client = *std::move(connected);
  Conversation conversation(f.system);
  if (!positional.empty()) {
    conversation.Add("user", absl::StrJoin(positional, " "));
    absl::StatusOr<std::string> answer = Answer(*client, conversation, f);
    return answer.ok() ? kExitOk : PrintError(answer.status());
  }

  // The "> " prompt only for a person at a terminal; piped input gets answers alone.
  const bool interactive = isatty(STDIN_FILENO) != 0;
  int exit_code = kExitOk;
  std::string line;
  while (true) {
    if (interactive) std::cerr << "> " << std::flush;
    if (!std::getline(std::cin, line)) break;
    absl::string_view text = absl::StripAsciiWhitespace(line);
    if (text.empty()) continue;
    if (text == "/reset") {
      conversation.Reset();
      if (interactive) std::cerr << "(conversation reset)\n";
      continue;
    }
    conversation.Add("user", std::string(text));
    absl::StatusOr<std::string> answer = Answer(*client, conversation, f);
    if (!answer.ok()) {
      conversation.DropLast();
      exit_code = PrintError(answer.status());
      continue;
    }
    conversation.Add("assistant", *std::move(answer));
  }
  if (interactive) std::cerr << "\n";
  return exit_code;
}

}  // namespace quill::cli
