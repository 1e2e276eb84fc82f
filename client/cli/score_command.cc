// `quill score`: the model's log-likelihood of a text, token by token, and its perplexity
// (Generate with prompt_logprobs).

#include <cmath>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/cli/cli_common.h"
#include "client/quill_client.h"

namespace quill::cli {
namespace {

struct Scores {
  quill::v1::TokenizeResponse tokens;              // the text's ids (with BOS) and pieces
  std::vector<quill::v1::TokenLogprobs> logprobs;  // tokens 1 .. n-1
  double sum = 0.0;
  double perplexity = 0.0;
};

absl::StatusOr<Scores> Score(client::QuillClient& client, const std::string& text, int top,
                             absl::Duration timeout) {
  Scores scores;
  // The ids are sent as they were tokenized, so that each score lines up with its piece.
  absl::StatusOr<quill::v1::TokenizeResponse> tokens =
      client.Tokenize(text, /*add_special_tokens=*/true, timeout);
  if (!tokens.ok()) return tokens.status();
  scores.tokens = *std::move(tokens);
  if (scores.tokens.token_ids_size() < 2) {
    return absl::InvalidArgumentError("nothing to score: the text is less than two tokens");
  }
  quill::v1::GenerateRequest request;
  *request.mutable_prompt_token_ids()->mutable_ids() = scores.tokens.token_ids();
  request.set_max_tokens(1);
  request.mutable_sampling()->set_temperature(0.0f);
  request.set_logprobs(top);
  request.set_prompt_logprobs(true);
  absl::Status status = client.Generate(
      request,
      [&](const quill::v1::GenerateResponse& response) {
        for (const auto& lp : response.prompt_logprobs()) scores.logprobs.push_back(lp);
      },
      timeout);
  if (!status.ok()) return status;
  const int expected = scores.tokens.token_ids_size() - 1;
  if (static_cast<int>(scores.logprobs.size()) != expected) {
    return absl::InternalError(absl::StrCat("the server scored ", scores.logprobs.size(), " of ",
                                            expected,
                                            " tokens (does it support prompt_logprobs?)"));
  }
  for (const quill::v1::TokenLogprobs& lp : scores.logprobs) scores.sum += lp.logprob();
  scores.perplexity = std::exp(-scores.sum / expected);
  return scores;
}

nlohmann::json ScoresJson(const Scores& s) {
  nlohmann::json tokens = nlohmann::json::array();
  for (int i = 0; i < s.tokens.token_ids_size(); ++i) {
    // The first token is not scored: nothing precedes it.
    nlohmann::json token =
        i > 0 ? ToJson(s.logprobs[i - 1])
              : nlohmann::json{{"token_id", s.tokens.token_ids(0)}, {"logprob", nullptr}};
    token["piece"] = i < s.tokens.pieces_size() ? s.tokens.pieces(i) : "";
    tokens.push_back(token);
  }
  return {{"tokens", tokens},
          {"scored_tokens", s.logprobs.size()},
          {"logprob_sum", s.sum},
          {"perplexity", s.perplexity}};
}

void PrintScores(const Scores& s) {
  std::cout << absl::StrFormat("%5s %8s %10s  %s\n", "#", "id", "logprob", "piece");
  for (int i = 0; i < s.tokens.token_ids_size(); ++i) {
    const std::string piece = i < s.tokens.pieces_size() ? DumpJson(s.tokens.pieces(i)) : "";
    if (i == 0) {
      std::cout << absl::StrFormat("%5d %8d %10s  %s\n", i, s.tokens.token_ids(i), "-", piece);
      continue;
    }
    const quill::v1::TokenLogprobs& lp = s.logprobs[i - 1];
    std::cout << absl::StrFormat("%5d %8d %10.4f  %s", i, s.tokens.token_ids(i), lp.logprob(),
                                 piece)
              << AlternativesText(lp) << "\n";
  }
  std::cout << absl::StrFormat("%d tokens scored: logprob sum %.4f, mean %.4f, perplexity %.3f\n",
                               s.logprobs.size(), s.sum,
                               s.sum / static_cast<double>(s.logprobs.size()), s.perplexity);
}

}  // namespace

int ScoreCommand(const std::vector<std::string>& args) {
  ConnectionFlags connection;
  int top = 0;
  bool json = false;
  absl::Duration timeout = absl::Seconds(60);
  FlagParser parser(
      "quill score [flags] [TEXT...]",
      "Scores TEXT (the words joined by spaces; read from stdin when none are given) under "
      "the served model: the logprob of each token given the ones before it (the first is "
      "not scored), their sum, and the perplexity exp(-mean).");
  connection.Register(parser);
  parser.AddInt("top", &top, "Also show this many most likely tokens at each position.");
  parser.AddDuration("timeout", &timeout, "RPC deadline.");
  parser.AddBool("json", &json,
                 "Print {\"tokens\": [{token_id, piece, logprob, top}], \"scored_tokens\", "
                 "\"logprob_sum\", \"perplexity\"} as JSON.");
  std::vector<std::string> positional;
  if (int code = ParseFlags(parser, args, &positional); code >= 0) return code;
  const std::string text = TextFromArgsOrStdin(positional);

  absl::StatusOr<std::unique_ptr<client::QuillClient>> client = connection.Connect();
  if (!client.ok()) return PrintError(client.status());
  absl::StatusOr<Scores> scores = Score(**client, text, top, timeout);
  if (!scores.ok()) return PrintError(scores.status());
  if (json) {
    std::cout << DumpJson(ScoresJson(*scores)) << "\n";
  } else {
    PrintScores(*scores);
  }
  return kExitOk;
}

}  // namespace quill::cli
