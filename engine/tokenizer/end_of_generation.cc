#include "engine/tokenizer/end_of_generation.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

namespace quill::engine {
namespace {

// Candidates for eot_id when the file has none, in order of preference.
constexpr absl::string_view kEndOfTurnForEot[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<end_of_utterance>",
    "<\xEF\xBD\x9C"
    "end\xE2\x96\x81"
    "of\xE2\x96\x81"
    "sentence\xEF\xBD\x9C>",  // DeepSeek
};

// Texts that end generation wherever they are in the vocabulary.
constexpr absl::string_view kEndOfGeneration[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    // Fill-in-the-middle pad, repository and file separators (Qwen2.5-Coder, Granite...).
    "<|fim_pad|>",
    "<fim-pad>",
    "<fim_pad>",
    "<PAD>",
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
    "<|file_sep|>",
};

}  // namespace

EndOfGeneration DeriveEndOfGeneration(const VocabData& vocab) {
  absl::flat_hash_map<absl::string_view, TokenId> by_text;  // lowest id of each text
  for (size_t i = 0; i < vocab.tokens.size(); ++i) {
    by_text.emplace(vocab.tokens[i], static_cast<TokenId>(i));
  }
  const auto find = [&](absl::string_view text) {
    const auto it = by_text.find(text);
    return it == by_text.end() ? TokenId{-1} : it->second;
  };
  EndOfGeneration eog;
  eog.eot_id = vocab.eot_id;
  eog.eom_id = vocab.eom_id;
  if (eog.eot_id < 0) {
    for (absl::string_view text : kEndOfTurnForEot) {
      if ((eog.eot_id = find(text)) >= 0) break;
    }
    if (eog.eot_id >= 0) eog.control_ids.push_back(eog.eot_id);
  }
  if (eog.eom_id < 0 && (eog.eom_id = find("<|eom_id|>")) >= 0) {
    eog.control_ids.push_back(eog.eom_id);
  }
  for (absl::string_view text : kEndOfGeneration) {
    const TokenId id = find(text);
    if (id >= 0) eog.control_ids.push_back(id);
  }
  eog.ids = eog.control_ids;
  for (TokenId id : {vocab.eos_id, eog.eot_id, eog.eom_id}) {
    if (id >= 0) eog.ids.push_back(id);
  }
  for (std::vector<TokenId>* ids : {&eog.ids, &eog.control_ids}) {
    std::sort(ids->begin(), ids->end());
    ids->erase(std::unique(ids->begin(), ids->end()), ids->end());
  }
  return eog;
}

}  // namespace quill::engine
