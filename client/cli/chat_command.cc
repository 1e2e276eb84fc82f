// `quill chat`: a conversation with the served model through the gRPC Chat RPC, one-shot
// (`quill chat "question"`) or interactive (one user message per stdin line, each answer
// streamed, the history kept so that every turn sees the whole conversation).

#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
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
  std::string tools_file;
  std::vector<quill::v1::Tool> tools;  // the file's
  std::string tool_choice;
  bool one_tool_call = false;
  std::string template_kwargs;  // a JSON object's text
  bool hide_reasoning = false;
  bool reasoning_in_text = false;
  absl::Duration timeout = absl::Seconds(120);
  bool stats = false;
};

// The conversation so far: the system message (if any), then user, assistant and tool
// turns (an assistant turn keeps its tool calls, so that the template writes them back).
class Conversation {
 public:
  explicit Conversation(std::string system) : system_(std::move(system)) {}

  // Back to the system message alone.
  void Reset() { turns_.clear(); }
  void Add(quill::v1::ChatMessage message) { turns_.push_back(std::move(message)); }
  void Add(std::string role, std::string content) {
    quill::v1::ChatMessage m;
    m.set_role(std::move(role));
    m.set_content(std::move(content));
    Add(std::move(m));
  }
  // Drops the last message (a question whose answer failed).
  void DropLast() {
    if (!turns_.empty()) turns_.pop_back();
  }
  // The id of the last assistant turn's first call that no tool turn answered yet; "" if
  // none is waiting.
  std::string UnansweredCallId() const {
    for (auto turn = turns_.rbegin(); turn != turns_.rend(); ++turn) {
      if (turn->role() != "assistant") continue;
      for (const quill::v1::ToolCall& call : turn->tool_calls()) {
        const bool answered = std::any_of(turns_.begin(), turns_.end(), [&](const auto& m) {
          return m.role() == "tool" && m.tool_call_id() == call.id();
        });
        if (!answered) return call.id();
      }
      return "";
    }
    return "";
  }

  quill::v1::ChatRequest Request(const ChatFlags& f) const {
    quill::v1::ChatRequest request;
    if (!system_.empty()) {
      quill::v1::ChatMessage* m = request.add_messages();
      m->set_role("system");
      m->set_content(system_);
    }
    for (const quill::v1::ChatMessage& turn : turns_) *request.add_messages() = turn;
    request.set_max_tokens(f.max_tokens);
    f.sampling.Fill(&request);
    request.set_disable_speculation(f.disable_speculation);
    request.set_json_object(f.json_object);
    request.set_json_schema(f.json_schema);
    for (const quill::v1::Tool& tool : f.tools) *request.add_tools() = tool;
    request.set_tool_choice(f.tool_choice);
    request.set_one_tool_call(f.one_tool_call);
    request.set_chat_template_kwargs_json(f.template_kwargs);
    request.set_reasoning_in_text(f.reasoning_in_text);
    return request;
  }

 private:
  const std::string system_;
  std::vector<quill::v1::ChatMessage> turns_;
};

// A reasoning model's thought, streamed to stderr (dimmed on a terminal) so that stdout
// holds the answer alone; ended with a line break before the answer starts.
class ThoughtPrinter {
 public:
  explicit ThoughtPrinter(bool hidden) : hidden_(hidden), dim_(isatty(STDERR_FILENO) != 0) {}

  void Print(const std::string& thought) {
    if (hidden_ || thought.empty()) return;
    std::cerr << (dim_ ? "\033[2m" : "") << thought << (dim_ ? "\033[0m" : "") << std::flush;
    ends_line_ = thought.back() == '\n';
    printed_ = true;
  }
  // The answer comes next (or the turn is over).
  void End() {
    if (printed_ && !ends_line_) std::cerr << "\n" << std::flush;
    printed_ = false;
  }

 private:
  const bool hidden_;
  const bool dim_;
  bool printed_ = false;
  bool ends_line_ = false;
};

// Streams the answer to the conversation's last question to stdout (ending the line), and
// its thought (if the model thinks) to stderr, then its tool calls, one "[tool call ID] NAME
// ARGUMENTS" line each; returns the assistant turn (without the thought: chat templates
// leave earlier thoughts out).
absl::StatusOr<quill::v1::ChatMessage> Answer(client::QuillClient& client,
                                              const Conversation& conversation,
                                              const ChatFlags& f) {
  std::string answer;
  quill::v1::GenerateResponse last;
  ThoughtPrinter thought(f.hide_reasoning);
  absl::Status status = client.Chat(
      conversation.Request(f),
      [&](const quill::v1::GenerateResponse& response) {
        thought.Print(response.reasoning());
        if (!response.text().empty()) thought.End();
        std::cout << response.text() << std::flush;
        answer += response.text();
        last = response;
      },
      f.timeout);
  thought.End();
  // One answer per line (an empty answer too); a failure leaves no empty line.
  const bool unterminated = answer.empty() ? status.ok() : answer.back() != '\n';
  if (unterminated) std::cout << "\n" << std::flush;
  if (!status.ok()) return status;
  quill::v1::ChatMessage turn;
  turn.set_role("assistant");
  // An answer that is calls goes back as the calls alone: the template writes them in the
  // model's syntax, and its text would write them twice.
  if (last.tool_calls_size() == 0) turn.set_content(answer);
  for (const quill::v1::ToolCall& call : last.tool_calls()) {
    std::cout << "[tool call " << call.id() << "] " << call.name() << " " << call.arguments_json()
              << "\n";
    *turn.add_tool_calls() = call;
  }
  std::cout << std::flush;
  if (f.stats) {
    const quill::v1::Usage& usage = last.usage();
    std::cerr << absl::StrFormat(
        "[finish_reason: %s] usage: %d prompt + %d completion tokens%s\n",
        client::FinishReasonName(last.finish_reason()), usage.prompt_tokens(),
        usage.completion_tokens(),
        usage.reasoning_tokens() > 0
            ? absl::StrFormat(" (%d of them thought)", usage.reasoning_tokens())
            : "");
  }
  return turn;
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
      "from the conversation; the exit code is then 1. With --tools, an answer's tool calls "
      "follow it, one \"[tool call ID] NAME ARGUMENTS\" line each; in a conversation, "
      "\"/tool RESULT\" answers the first call not answered yet. A reasoning model's thought "
      "streams to stderr (dimmed on a terminal) before its answer.");
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
  parser.AddString("tools", &f.tools_file,
                   "A JSON file of tools the model may call: an array of OpenAI's {\"type\": "
                   "\"function\", \"function\": {\"name\", \"description\", "
                   "\"parameters\"}} (or the function objects alone). They reach the chat "
                   "template.");
  parser.AddString("tool-choice", &f.tool_choice,
                   "With --tools: auto (the default: the model decides; needs a template "
                   "whose calls the server reads), required (a call to one of them), a tool's "
                   "name (a call to it), or none.");
  parser.AddBool("one-tool-call", &f.one_tool_call,
                 "With --tools: at most one call per answer (calls past the first are "
                 "dropped; OpenAI's parallel_tool_calls false).");
  parser.AddString("template-kwargs", &f.template_kwargs,
                   "More variables for the chat template, as a JSON object, e.g. "
                   "'{\"enable_thinking\": false}' (Qwen3 then answers without a thought).");
  parser.AddBool("hide-reasoning", &f.hide_reasoning,
                 "A reasoning model's thought (DeepSeek R1, Qwen3, ...) is not shown. By "
                 "default it streams to stderr, dimmed on a terminal, before the answer.");
  parser.AddBool("reasoning-in-text", &f.reasoning_in_text,
                 "Print a reasoning model's answer as it writes it, thought and tags "
                 "included, on stdout (and keep it so in the conversation).");
  parser.AddDuration("timeout", &f.timeout, "Deadline for each answer.");
  parser.AddBool("stats", &f.stats, "After each answer, print finish reason and usage on stderr.");
  std::vector<std::string> positional;
  if (int code = ParseFlags(parser, args, &positional); code >= 0) return code;
  if (!ReadSchemaFlag(f.json_schema_file, &f.json_schema)) return kExitUsage;
  if (!ReadToolsFlag(f.tools_file, &f.tools)) return kExitUsage;

  absl::StatusOr<std::unique_ptr<client::QuillClient>> connected = f.connection.Connect();
  if (!connected.ok()) return PrintError(connected.status());
  std::unique_ptr<client::QuillClient> client = *std::move(connected);
  Conversation conversation(f.system);
  if (!positional.empty()) {
    conversation.Add("user", absl::StrJoin(positional, " "));
    absl::StatusOr<quill::v1::ChatMessage> answer = Answer(*client, conversation, f);
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
    if (text == "/tool" || absl::StartsWith(text, "/tool ")) {
      const std::string call_id = conversation.UnansweredCallId();
      if (call_id.empty()) {
        std::cerr << "(no tool call is waiting for a result)\n";
        continue;
      }
      quill::v1::ChatMessage result;
      result.set_role("tool");
      result.set_tool_call_id(call_id);
      result.set_content(std::string(absl::StripLeadingAsciiWhitespace(text.substr(5))));
      conversation.Add(std::move(result));
    } else {
      conversation.Add("user", std::string(text));
    }
    absl::StatusOr<quill::v1::ChatMessage> answer = Answer(*client, conversation, f);
    if (!answer.ok()) {
      conversation.DropLast();
      exit_code = PrintError(answer.status());
      continue;
    }
    conversation.Add(*std::move(answer));
  }
  if (interactive) std::cerr << "\n";
  return exit_code;
}

}  // namespace quill::cli
