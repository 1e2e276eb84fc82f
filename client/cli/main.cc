// `quill`: the command-line client of a Quill server.

#include <iostream>
#include <string>
#include <vector>

#include "client/cli/cli_common.h"

namespace {

struct Command {
  const char* name;
  int (*run)(const std::vector<std::string>& args);
  const char* summary;
};

constexpr Command kCommands[] = {
    {"generate", quill::cli::GenerateCommand, "Stream a generation for a prompt."},
    {"chat", quill::cli::ChatCommand, "Chat with the model: one question, or a conversation."},
    {"tokenize", quill::cli::TokenizeCommand, "Show the token ids and pieces of a text."},
    {"score", quill::cli::ScoreCommand, "Score a text: each token's logprob, and perplexity."},
    {"info", quill::cli::InfoCommand, "Show the served model and the server's limits."},
    {"health", quill::cli::HealthCommand, "Check the server's health (exit 0 iff SERVING)."},
    {"bench", quill::cli::BenchCommand, "Load-test the server; report throughput and latency."},
};

void PrintUsage(std::ostream& out) {
  out << "Usage: quill COMMAND [flags] [args]\n\n"
         "The command-line client of a Quill server (gRPC, default address 127.0.0.1:50051 or "
         "$QUILL_ADDR).\n\nCommands:\n";
  for (const Command& command : kCommands) {
    out << "  " << command.name << std::string(12 - std::string(command.name).size(), ' ')
        << command.summary << "\n";
  }
  out << "  help        Show this help, or `quill help COMMAND` for a command's flags.\n\n"
         "Examples:\n"
         "  quill generate --max-tokens 64 --temperature 0.7 --seed 1 \"In the beginning\"\n"
         "  echo \"And God said\" | quill generate --json\n"
         "  quill score \"In the beginning God created the heaven and the earth.\"\n"
         "  quill chat --system \"Be brief.\" \"Who made the heaven and the earth?\"\n"
         "  quill chat                 # a conversation: one message per line, Ctrl-D quits\n"
         "  quill bench --concurrency 4 --duration 20s --prompt-tokens 32 --max-tokens 64\n";
}

const Command* FindCommand(const std::string& name) {
  for (const Command& command : kCommands) {
    if (name == command.name) return &command;
  }
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    PrintUsage(std::cerr);
    return quill::cli::kExitUsage;
  }
  const std::string& name = args[0];
  if (name == "help" || name == "--help" || name == "-h") {
    if (args.size() > 1) {
      if (const Command* command = FindCommand(args[1])) return command->run({"--help"});
      std::cerr << "error: unknown command \"" << args[1] << "\"\n\n";
      PrintUsage(std::cerr);
      return quill::cli::kExitUsage;
    }
    PrintUsage(std::cout);
    return quill::cli::kExitOk;
  }
  const Command* command = FindCommand(name);
  if (command == nullptr) {
    std::cerr << "error: unknown command \"" << name << "\"\n\n";
    PrintUsage(std::cerr);
    return quill::cli::kExitUsage;
  }
  return command->run(std::vector<std::string>(args.begin() + 1, args.end()));
}
