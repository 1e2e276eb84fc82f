#include "engine/tokenizer/spm_tokenizer.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "engine/base/status_macros.h"
#include "engine/base/utf8.h"

namespace quill::engine {
namespace {

constexpr absl::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581 "▁"

// Length of the UTF-8 character starting with `lead` (the text is valid UTF-8).
int Utf8LengthFromLead(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

// A candidate merge of symbols `left` and `right` (adjacent when it was queued).
struct Candidate {
  float score;
  int32_t left;
  int32_t right;
  uint32_t length;  // combined byte length when queued; a mismatch later means stale
};

// Highest score first; among equal scores the leftmost pair.
struct CandidateOrder {
  bool operator()(const Candidate& a, const Candidate& b) const {
    if (a.score != b.score) return a.score < b.score;
    return a.left > b.left;
  }
};

}  // namespace

// A run of the normalized text; length 0 once merged into its left neighbour.
struct SpmTokenizer::Symbol {
  uint32_t start;
  uint32_t length;
  int32_t prev;
  int32_t next;
};

// Buffers reused across the segments of one EncodeText call.
struct SpmTokenizer::Scratch {
  std::vector<Symbol> symbols;
  std::vector<Candidate> queue;  // a heap in CandidateOrder
};

SpmTokenizer::SpmTokenizer(const VocabData& vocab)
    : VocabTokenizer(vocab, /*default_add_bos=*/true),
      unk_id_(vocab.unk_id),
      add_space_prefix_(vocab.add_space_prefix.value_or(true)) {
  scores_ = vocab.scores;
  scores_.resize(vocab.tokens.size(), 0.0f);
  byte_to_id_.fill(-1);
  for (size_t i = 0; i < vocab.tokens.size(); ++i) {
    const TokenId id = static_cast<TokenId>(i);
    switch (type(id)) {
      case TokenType::kUndefined:
      case TokenType::kNormal:
      case TokenType::kUserDefined:
        piece_to_id_.emplace(vocab.tokens[i], id);  // the first of duplicates wins
        break;
      case TokenType::kByte: {
        const int byte = ParseBytePiece(vocab.tokens[i]);
        if (byte >= 0 && byte_to_id_[byte] < 0) byte_to_id_[byte] = id;
        break;
      }
      default:
        break;  // unknown, control and unused pieces are never produced from text
    }
  }
  // Merges stay within words unless some piece has a U+2581 right after another character.
  merges_stay_within_words_ = true;
  for (const auto& entry : piece_to_id_) {
    const absl::string_view piece = entry.first;
    for (size_t pos = piece.find(kSpaceMarker, 1); pos != absl::string_view::npos;
         pos = piece.find(kSpaceMarker, pos + 1)) {
      if (pos < kSpaceMarker.size() ||
          piece.substr(pos - kSpaceMarker.size(), kSpaceMarker.size()) != kSpaceMarker) {
        merges_stay_within_words_ = false;
      }
    }
  }
  InitTokenBytes(vocab.tokens);
}

absl::Status SpmTokenizer::EncodeText(absl::string_view text, bool after_special,
                                      std::vector<TokenId>* ids) const {
  std::string normalized;
  normalized.reserve(text.size() + text.size() / 4 + kSpaceMarker.size());
  if (add_space_prefix_ && after_special)
    normalized.append(kSpaceMarker.data(), kSpaceMarker.size());
  for (char c : text) {
    if (c == ' ') {
      normalized.append(kSpaceMarker.data(), kSpaceMarker.size());
    } else {
      normalized.push_back(c);
    }
  }
  if (normalized.size() > INT32_MAX) return absl::InvalidArgumentError("prompt is too long");

  const absl::string_view view(normalized);
  Scratch scratch;
  if (!merges_stay_within_words_) return EncodeSegment(view, scratch, ids);
  // A word starts at each U+2581 that follows another character.
  size_t start = 0;
  for (size_t pos = view.find(kSpaceMarker, 1); pos != absl::string_view::npos;
       pos = view.find(kSpaceMarker, pos + kSpaceMarker.size())) {
    const bool after_marker =
        pos >= start + kSpaceMarker.size() &&
        view.substr(pos - kSpaceMarker.size(), kSpaceMarker.size()) == kSpaceMarker;
    if (after_marker || pos == start) continue;
    QUILL_RETURN_IF_ERROR(EncodeSegment(view.substr(start, pos - start), scratch, ids));
    start = pos;
  }
  return EncodeSegment(view.substr(start), scratch, ids);
}

absl::Status SpmTokenizer::EncodeSegment(absl::string_view text, Scratch& scratch,
                                         std::vector<TokenId>* ids) const {
  // One symbol per character, linked in text order.
  std::vector<Symbol>& symbols = scratch.symbols;
  symbols.clear();
  for (uint32_t pos = 0; pos < text.size();) {
    const uint32_t len = Utf8LengthFromLead(static_cast<uint8_t>(text[pos]));
    const int32_t index = static_cast<int32_t>(symbols.size());
    symbols.push_back({pos, len, index - 1, index + 1});
    pos += len;
  }
  symbols.back().next = -1;

  std::vector<Candidate>& queue = scratch.queue;
  queue.clear();
  const auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const uint32_t length = symbols[left].length + symbols[right].length;
    const auto it = piece_to_id_.find(text.substr(symbols[left].start, length));
    if (it == piece_to_id_.end()) return;
    queue.push_back({scores_[it->second], left, right, length});
    std::push_heap(queue.begin(), queue.end(), CandidateOrder());
  };
  for (size_t i = 1; i < symbols.size(); ++i) {
    try_add(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));
  }

  while (!queue.empty()) {
    std::pop_heap(queue.begin(), queue.end(), CandidateOrder());
    const Candidate c = queue.back();
    queue.pop_back();
    Symbol& left = symbols[c.left];
    Symbol& right = symbols[c.right];
    // Stale if either side was merged since: symbols only grow or vanish.
    if (left.length == 0 || right.length == 0 || left.next != c.right ||
        left.length + right.length != c.length) {
      continue;
    }
    left.length = c.length;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.left;
    try_add(left.prev, c.left);
    try_add(c.left, left.next);
  }

  for (int32_t i = 0; i >= 0; i = symbols[i].next) {
    QUILL_RETURN_IF_ERROR(EmitSymbol(text.substr(symbols[i].start, symbols[i].length), ids));
  }
  return absl::OkStatus();
}

absl::Status SpmTokenizer::EmitSymbol(absl::string_view piece, std::vector<TokenId>* ids) const {
  const auto it = piece_to_id_.find(piece);
  if (it != piece_to_id_.end()) {
    ids->push_back(it->second);
    return absl::OkStatus();
  }
  // Only single characters can be left without a piece (every merge made a piece).
  bool have_bytes = true;
  for (char c : piece) have_bytes = have_bytes && byte_to_id_[static_cast<uint8_t>(c)] >= 0;
  if (have_bytes) {
    for (char c : piece) ids->push_back(byte_to_id_[static_cast<uint8_t>(c)]);
    return absl::OkStatus();
  }
  if (unk_id_ >= 0) {
    ids->push_back(unk_id_);
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "character \"", piece,
      "\" has no piece, no byte-fallback pieces and the vocabulary has no unknown token"));
}

std::string SpmTokenizer::TokenBytesOf(const std::string& text, TokenType type) const {
  switch (type) {
    case TokenType::kUndefined:
    case TokenType::kNormal:
    case TokenType::kUserDefined:
      return absl::StrReplaceAll(text, {{kSpaceMarker, " "}});
    case TokenType::kByte: {
      const int byte = ParseBytePiece(text);
      return byte >= 0 ? std::string(1, static_cast<char>(byte)) : std::string();
    }
    case TokenType::kUnknown:
      return " \xE2\x81\x87 ";  // " ⁇ ", as SentencePiece renders an unknown piece
    default:
      return "";  // control and unused
  }
}

}  // namespace quill::engine
