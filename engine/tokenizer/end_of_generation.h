#pragma once

#include <vector>

#include "engine/tokenizer/vocab_data.h"

namespace quill::engine {

// What llama.cpp derives from token texts for ending generation, from `vocab` (which has
// passed ValidateVocabData):
// - eot_id / eom_id, when the file does not name them, become the token whose text is a
//   known end-of-turn ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
//   "<|endoftext|>", "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]",
//   "<end_of_utterance>", "<｜end▁of▁sentence｜>"; the first in this order that exists) or
//   end-of-message ("<|eom_id|>") string;
// - every token whose text is an end-of-turn string ("<|eot_id|>", "<|im_end|>",
//   "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>", "_<EOT>",
//   "[EOT]", "<|end_of_text|>", "<end_of_utterance>") or a fill-in-the-middle pad, repo
//   or file separator ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "<|fim_repo|>",
//   "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", "<|file_sep|>") ends
//   generation, as do eos_id, eot_id and eom_id;
// - the tokens found by text are to be typed control if they were not (so their text
//   stays plain in Encode, as llama.cpp overrides their type).
struct EndOfGeneration {
  TokenId eot_id = -1;
  TokenId eom_id = -1;
  std::vector<TokenId> ids;          // every end-of-generation id, sorted and unique
  std::vector<TokenId> control_ids;  // found by their text: to be typed control
};
EndOfGeneration DeriveEndOfGeneration(const VocabData& vocab);

}  // namespace quill::engine
