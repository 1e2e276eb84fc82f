#include "engine/tokenizer/bpe_tokenizer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/base/status_macros.h"
#include "engine/base/utf8.h"
#include "engine/tokenizer/byte_unicode.h"

namespace quill::engine {
namespace {

struct Candidate {
  int32_t rank;
  int32_t left;
  int32_t right;
  int32_t left_piece;  // pieces when queued; a mismatch later means stale
  int32_t right_piece;
  int32_t result;
};

// Lowest rank first; among equal ranks the leftmost pair.
struct CandidateOrder {
  bool operator()(const Candidate& a, const Candidate& b) const {
    if (a.rank != b.rank) return a.rank > b.rank;
    return a.left > b.left;
  }
};

}  // namespace

// A run of the word's bytes; piece -1 once merged into its left neighbour.
struct BpeTokenizer::Symbol {
  int32_t piece;
  uint32_t start;
  uint32_t length;
  int32_t prev;
  int32_t next;
};

// Buffers reused across the words of one EncodeText call.
struct BpeTokenizer::Scratch {
  std::vector<Symbol> symbols;
  std::vector<Candidate> queue;  // a heap in CandidateOrder
};

BpeTokenizer::BpeTokenizer(const VocabData& vocab, PreTokenizer pre, bool default_add_bos)
    : VocabTokenizer(vocab, default_add_bos), pre_(std::move(pre)) {
  const int32_t vocab_size = static_cast<int32_t>(vocab.tokens.size());
  num_pieces_ = vocab_size;
  for (int32_t id = 0; id < vocab_size; ++id) {
    if (type(id) == TokenType::kControl) continue;
    piece_index_.emplace(vocab.tokens[id], id);  // the first of duplicates wins
  }
  std::string symbol;
  for (int b = 0; b < 256; ++b) {
    symbol.clear();
    AppendUtf8(ByteToUnicode()[b], &symbol);
    byte_piece_[b] = InternPiece(symbol);
  }
  merges_.reserve(vocab.merges.size());
  for (size_t rank = 0; rank < vocab.merges.size(); ++rank) {
    const std::string& merge = vocab.merges[rank];
    // Split at the first space after the first character (ValidateVocabData checked it).
    const size_t space = merge.find(' ', 1);
    const std::string left = merge.substr(0, space);
    const std::string right = merge.substr(space + 1);
    const int32_t left_piece = InternPiece(left);
    const int32_t right_piece = InternPiece(right);
    const int32_t result = InternPiece(left + right);
    // If a pair is listed twice, the first (lowest) rank counts.
    merges_.emplace(PairKey(left_piece, right_piece), Merge{static_cast<int32_t>(rank), result});
  }
  InitTokenBytes(vocab.tokens);
  if (pre_.ignore_merges()) {
    // Normal tokens only: user-defined ones are split out before pre-tokenization.
    for (int32_t id = 0; id < vocab_size; ++id) {
      if (type(id) != TokenType::kNormal && type(id) != TokenType::kUndefined) continue;
      whole_words_.emplace(TokenBytes(id), id);  // the first of duplicates wins
    }
  }
}

int32_t BpeTokenizer::InternPiece(const std::string& text) {
  const auto [it, inserted] = piece_index_.emplace(text, num_pieces_);
  if (inserted) ++num_pieces_;
  return it->second;
}

absl::Status BpeTokenizer::EncodeText(absl::string_view text, bool /*after_special*/,
                                      std::vector<TokenId>* ids) const {
  if (text.size() > INT32_MAX) return absl::InvalidArgumentError("prompt is too long");
  Scratch scratch;
  return pre_.Split(text, [&](absl::string_view word) {
    if (!whole_words_.empty()) {
      const auto it = whole_words_.find(word);
      if (it != whole_words_.end()) {
        ids->push_back(it->second);
        return absl::OkStatus();
      }
    }
    return EncodeWord(word, scratch, ids);
  });
}

absl::Status BpeTokenizer::EncodeWord(absl::string_view word, Scratch& scratch,
                                      std::vector<TokenId>* ids) const {
  std::vector<Symbol>& symbols = scratch.symbols;
  symbols.clear();
  for (uint32_t i = 0; i < word.size(); ++i) {
    const int32_t index = static_cast<int32_t>(i);
    symbols.push_back({byte_piece_[static_cast<uint8_t>(word[i])], i, 1, index - 1, index + 1});
  }
  symbols.back().next = -1;

  std::vector<Candidate>& queue = scratch.queue;
  queue.clear();
  const auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const auto it = merges_.find(PairKey(symbols[left].piece, symbols[right].piece));
    if (it == merges_.end()) return;
    queue.push_back({it->second.rank, left, right, symbols[left].piece, symbols[right].piece,
                     it->second.result});
    std::push_heap(queue.begin(), queue.end(), CandidateOrder());
  };
  for (size_t i = 1; i < symbols.size(); ++i)
    try_add(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));

  while (!queue.empty()) {
    std::pop_heap(queue.begin(), queue.end(), CandidateOrder());
    const Candidate c = queue.back();
    queue.pop_back();
    Symbol& left = symbols[c.left];
    Symbol& right = symbols[c.right];
    // Stale if either side changed since: a symbol's piece only changes by growing, and
    // a merged-away symbol has piece -1.
    if (left.piece != c.left_piece || right.piece != c.right_piece || left.next != c.right)
      continue;
    left.piece = c.result;
    left.length += right.length;
    left.next = right.next;
    right.piece = -1;
    if (right.next >= 0) symbols[right.next].prev = c.left;
    try_add(left.prev, c.left);
    try_add(c.left, left.next);
  }

  for (int32_t i = 0; i >= 0; i = symbols[i].next) {
    const Symbol& s = symbols[i];
    if (s.piece < vocab_size()) {
      ids->push_back(s.piece);
      continue;
    }
    // Not a token (a merge result missing from the vocabulary, or a byte symbol the
    // vocabulary lacks): one token per byte.
    for (uint32_t k = 0; k < s.length; ++k) {
      const uint8_t byte = static_cast<uint8_t>(word[s.start + k]);
      if (byte_piece_[byte] >= vocab_size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "text byte 0x", absl::Hex(byte, absl::kZeroPad2), " has no token in this vocabulary"));
      }
      ids->push_back(byte_piece_[byte]);
    }
  }
  return absl::OkStatus();
}

std::string BpeTokenizer::TokenBytesOf(const std::string& text, TokenType type) const {
  switch (type) {
    case TokenType::kControl:
    case TokenType::kUnused:
    case TokenType::kUnknown:
      return "";
    case TokenType::kUserDefined:
      return text;  // added tokens are stored as plain text
    default:
      break;
  }
  std::string bytes;
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Char c = DecodeUtf8Char(text, pos);
    const int byte = c.kind == Utf8Char::Kind::kValid ? UnicodeToByte(c.code_point) : -1;
    if (byte >= 0) {
      bytes.push_back(static_cast<char>(byte));
    } else {
      bytes.append(text, pos, c.length);  // outside the alphabet: keep as written
    }
    pos += c.length;
  }
  return bytes;
}

}  // namespace quill::engine
